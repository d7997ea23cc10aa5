//! `[servers.NAME]` and the `[tools."SERVER__TOOL"]` entries that tune one
//! tool of a server (its walls stay the server's).

use super::*;

/// Server names: 1-32 characters of a-z, 0-9 and `-`, so that `NAME__TOOL` splits one way.
pub(super) fn valid_server_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && n.starts_with(|c: char| c.is_ascii_lowercase())
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// How much CPU time a server process may use before it is killed (and restarted
/// by the next call), unless `limits.cpu` says otherwise.
pub(super) const DEFAULT_SERVER_CPU: std::time::Duration = std::time::Duration::from_secs(3600);

/// Checks `[servers.NAME]`: a process-tool entry without arguments.
pub(super) fn compile_server(
    c: &mut Checker<'_>,
    name: &Spanned<String>,
    spanned: &Spanned<RawTool>,
    plugins: &BTreeMap<String, PluginSpec>,
    defaults: &Limits,
    ctx: &Context,
) -> Option<ServerSpec> {
    let (name_span, name) = (name.span(), name.get_ref());
    let t = spanned.get_ref();
    let before = c.problems.len();
    if !valid_server_name(name) {
        c.problem(
            name_span,
            format!("server {name:?}: names are 1-32 characters of a-z, 0-9 and -, starting with a letter"),
        );
    }
    let refused = [
        ("plugin", t.plugin.as_ref().map(Spanned::span)),
        ("args", t.args.as_ref().map(Spanned::span)),
        ("input_schema", t.input_schema.as_ref().map(Spanned::span)),
        ("description", t.description.as_ref().map(Spanned::span)),
        ("rule", t.rule.first().map(Spanned::span)),
        ("cache", t.cache.as_ref().map(Spanned::span)),
        ("background", t.background.as_ref().map(Spanned::span)),
        ("inbox", t.inbox.as_ref().map(Spanned::span)),
    ];
    for (key, span) in refused {
        if let Some(span) = span {
            c.problem(
                span,
                format!(
                    "server {name}: `{key}` does not apply to a server (its tools come from the server; \
                     set tiers and rules per tool in [tools.\"{name}{SERVER_TOOL_SEPARATOR}TOOL\"])"
                ),
            );
        }
    }
    if t.exec.is_none() {
        c.problem(
            spanned.span(),
            format!("server {name}: needs `exec = [\"/path/to/program\", …]`, the command that starts the server"),
        );
        return None;
    }
    let label = format!("server {name}");
    let spec = compile_tool(c, &label, spanned.span(), t, Scope { plugins, defaults, default_tier: Tier::Ask, ctx });
    // The tool checks say "tool NAME:"; here the subject is the server.
    for p in &mut c.problems[before..] {
        if let Some(rest) = p.message.strip_prefix("tool server ") {
            p.message = format!("server {rest}");
        }
    }
    let spec = spec?;
    let Runner::Process(exec) = spec.runner else { return None };
    if !exec.params.is_empty() {
        c.problem(
            t.exec.as_ref().map_or(spanned.span(), Spanned::span),
            format!(
                "server {name}: exec uses {{{}}}, but a server is started once, not per call: only {{workspace}}, \
                 {{home}}, {{cache}} and {{tmp}} apply",
                exec.params.join("}, {")
            ),
        );
    }
    let mut limits = spec.limits;
    if t.limits.cpu.is_none() {
        limits.cpu = DEFAULT_SERVER_CPU;
    }
    if c.problems.len() > before {
        return None;
    }
    Some(ServerSpec {
        name: name.clone(),
        exec,
        tier: spec.tier,
        grants: spec.grants,
        limits,
        location: spec.location,
        floors: Vec::new(),
        tool_floors: BTreeMap::new(),
    })
}

/// Checks `[tools."SERVER__TOOL"]`: a tier, rules or a description for one tool
/// of a server. Its walls are the server's.
pub(super) fn compile_server_tool(
    c: &mut Checker<'_>,
    server: &ServerSpec,
    tool: &str,
    span: Range<usize>,
    t: &RawTool,
) -> Option<ToolSpec> {
    let full = format!("{}{SERVER_TOOL_SEPARATOR}{tool}", server.name);
    let before = c.problems.len();
    if tool.is_empty() || tool.len() > 64 {
        c.problem(span.clone(), format!("tool {full:?}: the server's tool name must be 1-64 characters"));
    }
    let l = &t.limits;
    let refused = [
        ("plugin", t.plugin.is_some()),
        ("exec", t.exec.is_some()),
        ("args", t.args.is_some()),
        ("cwd", t.cwd.is_some()),
        ("input_schema", t.input_schema.is_some()),
        ("fs", !t.fs.read.is_empty() || !t.fs.write.is_empty()),
        ("net", !t.net.connect.is_empty()),
        ("env", !t.env.pass.is_empty() || !t.env.set.is_empty()),
        ("cache", t.cache.is_some()),
        ("limits", l.any_set()),
    ];
    for (key, set) in refused {
        if set {
            c.problem(
                span.clone(),
                format!(
                    "tool {full}: `{key}` cannot be set per tool of a server: the server runs in one sandbox; \
                     set it in [servers.{}] ({})",
                    server.name, server.location
                ),
            );
        }
    }
    let rules = compile_rules(c, &full, &t.rule);
    if c.problems.len() > before {
        return None;
    }
    let mut spec = server.tool_spec(tool);
    spec.tier = t.tier.unwrap_or(server.tier);
    spec.rules = rules;
    spec.description = t.description.as_ref().map(|d| d.get_ref().clone());
    spec.location = c.location(span);
    spec.background = t.background.as_ref().is_some_and(|b| *b.get_ref());
    spec.inbox = t.inbox.as_ref().map(|b| *b.get_ref());
    Some(spec)
}
