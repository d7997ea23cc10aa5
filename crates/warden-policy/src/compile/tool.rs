//! One tool's entry: its runner (a plugin's tool, a command component, a
//! program, or only walls), its grants, environment, limits, rules, cache and
//! argument schema, each checked with the key to change named.

use super::*;

/// What a tool is compiled against besides its own table.
#[derive(Clone, Copy)]
pub(super) struct Scope<'a> {
    /// The policy's plugins, by name.
    pub(super) plugins: &'a BTreeMap<String, PluginSpec>,
    /// `[defaults]`' limits.
    pub(super) defaults: &'a Limits,
    /// The tier of a tool that names none.
    pub(super) default_tier: Tier,
    /// The placeholders' values.
    pub(super) ctx: &'a Context,
}

/// Checks one tool's table (or a server's, named by `name`) against `scope`.
pub(super) fn compile_tool(
    c: &mut Checker<'_>,
    name: &str,
    span: Range<usize>,
    t: &RawTool,
    scope: Scope<'_>,
) -> Option<ToolSpec> {
    let Scope { plugins, defaults, default_tier, ctx } = scope;
    let runner = compile_runner(c, name, t, plugins, ctx)?;
    let process = matches!(runner, Runner::Process(_));

    let limits = tool_limits(c, name, &t.limits, defaults, process);
    let (paths, system) = compile_paths(c, name, t, process, ctx);

    let allow_private = compile_allow_private(c, name, t);
    let unix = compile_unix(c, name, t, &runner, ctx);
    let net = compile_connect(c, name, t);

    let env_pass = compile_env_pass(c, name, t);
    let env_set = compile_env_set(c, name, t, ctx);

    let sysv_ipc = process_flag(c, name, "sysv_ipc", &t.sysv_ipc, process);
    let inotify = process_flag(c, name, "inotify", &t.inotify, process);
    let git_init = process_flag(c, name, "fs.git_init", &t.fs.git_init, process);
    check_git_init(c, name, t, &paths);

    let (deny, unprotect) = compile_deny(c, name, &t.fs, &paths, ctx);

    let rules = compile_rules(c, name, &t.rule);
    let tier = t.tier.unwrap_or(default_tier);
    let cache = t.cache.as_ref().and_then(|d| compile_cache(c, name, d, tier, &paths, &net, sysv_ipc));
    let background = compile_background(c, name, t);

    Some(ToolSpec {
        name: name.to_string(),
        runner,
        description: t.description.as_ref().map(|d| d.get_ref().clone()),
        tier,
        grants: Grants {
            paths,
            net,
            unix,
            allow_private,
            env_pass,
            env_set,
            sysv_ipc,
            inotify,
            system,
            deny,
            unprotect,
            git_init,
            credentials: Vec::new(),
        },
        limits,
        rules,
        location: c.location(span),
        cache,
        hidden_by: None,
        background,
        inbox: t.inbox.as_ref().map(|b| *b.get_ref()),
        floors: Vec::new(),
    })
}

/// What runs the tool: a process (`exec`), a component (`plugin`), or nothing
/// (walls only); `None` when the table names both.
pub(super) fn compile_runner(
    c: &mut Checker<'_>,
    name: &str,
    t: &RawTool,
    plugins: &BTreeMap<String, PluginSpec>,
    ctx: &Context,
) -> Option<Runner> {
    let runner = match (&t.exec, &t.plugin) {
        (Some(_), Some(plugin)) => {
            c.problem(
                plugin.span(),
                format!("tool {name}: has both `plugin` and `exec`; a tool is a component or a process, not both"),
            );
            return None;
        }
        // Neither: walls for `warden run --tool NAME -- CMD`, which agents cannot call.
        (None, None) => walls_only_runner(c, name, t, ctx)?,
        (None, Some(plugin)) if plugins.get(plugin.get_ref()).is_some_and(|p| p.kind == PluginKind::Command) => {
            Runner::Command(compile_command(c, name, plugin.get_ref(), t, ctx)?)
        }
        (None, Some(plugin)) => plugin_runner(c, name, plugin, t, plugins),
        (Some(exec), None) => {
            if let Some(args) = &t.args {
                c.problem(
                    args.span(),
                    format!("tool {name}: `args` is for command components; put arguments in `exec`"),
                );
            }
            Runner::Process(compile_exec(c, name, exec, t, ctx)?)
        }
    };
    Some(runner)
}

/// A tool without `exec` or `plugin`: refuses the keys that need a program.
pub(super) fn walls_only_runner(c: &mut Checker<'_>, name: &str, t: &RawTool, ctx: &Context) -> Option<Runner> {
    for (key, value) in [
        ("args", t.args.as_ref().map(Spanned::span)),
        ("input_schema", t.input_schema.as_ref().map(Spanned::span)),
        ("cache", t.cache.as_ref().map(Spanned::span)),
        ("background", t.background.as_ref().map(Spanned::span)),
    ] {
        if let Some(span) = value {
            c.problem(
                span,
                format!(
                    "tool {name}: `{key}` needs a program; a tool without `exec` or `plugin` only lends its \
                     walls to `warden run --tool {name} -- CMD`"
                ),
            );
        }
    }
    let cwd = compile_cwd(c, name, t, ctx)?;
    Some(Runner::Process(ExecSpec { argv: Vec::new(), params: Vec::new(), cwd, input_schema: None }))
}

/// A tool of a `kind = "tool"` plugin: the plugin must be declared, and the
/// process-only keys are refused.
pub(super) fn plugin_runner(
    c: &mut Checker<'_>,
    name: &str,
    plugin: &Spanned<String>,
    t: &RawTool,
    plugins: &BTreeMap<String, PluginSpec>,
) -> Runner {
    if !plugins.contains_key(plugin.get_ref()) {
        let declared: Vec<&str> = plugins.keys().map(String::as_str).collect();
        c.problem(
            plugin.span(),
            format!(
                "tool {name}: plugin {:?} is not declared; add [plugins.{}] (declared: {})",
                plugin.get_ref(),
                plugin.get_ref(),
                if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
            ),
        );
    }
    for (key, value) in
        [("cwd", t.cwd.as_ref().map(Spanned::span)), ("input_schema", t.input_schema.as_ref().map(Spanned::span))]
    {
        if let Some(span) = value {
            c.problem(span, format!("tool {name}: `{key}` applies only to process tools (`exec`)"));
        }
    }
    if let Some(args) = &t.args {
        c.problem(
            args.span(),
            format!(
                "tool {name}: `args` applies only to tools of a kind = \"command\" plugin; plugin {} \
                 describes its own tools",
                plugin.get_ref()
            ),
        );
    }
    Runner::Plugin(plugin.get_ref().clone())
}

/// `fs.read` and `fs.write`, with `{system}` expanded and a path granted twice
/// merged into one grant; the flag says whether `{system}` was granted.
pub(super) fn compile_paths(
    c: &mut Checker<'_>,
    name: &str,
    t: &RawTool,
    process: bool,
    ctx: &Context,
) -> (Vec<PathGrant>, bool) {
    let mut paths: Vec<PathGrant> = Vec::new();
    let mut system = false;
    for (list, write) in [(&t.fs.read, false), (&t.fs.write, true)] {
        for entry in list {
            let expanded: Vec<(GrantPath, bool)> = if entry.get_ref().trim() == "{system}" {
                system = process;
                if !process {
                    c.problem(
                        entry.span(),
                        format!(
                            "tool {name}: {{system}} grants what programs need to run and applies only to process tools"
                        ),
                    );
                    continue;
                }
                let read = SYSTEM_READ.iter().map(|p| (GrantPath::Fixed(p.into()), write));
                read.chain(SYSTEM_WRITE.iter().map(|p| (GrantPath::Fixed(p.into()), true))).collect()
            } else {
                match expand_path(c, name, entry, ctx) {
                    Some(path) => vec![(path, write)],
                    None => continue,
                }
            };
            for (path, write) in expanded {
                if let Some(existing) = paths.iter_mut().find(|g| g.path == path) {
                    existing.write |= write;
                } else {
                    paths.push(PathGrant { path, write });
                }
            }
        }
    }
    (paths, system)
}

/// `net.allow_private`, refused (as false) when the tool has no `net.connect`.
pub(super) fn compile_allow_private(c: &mut Checker<'_>, name: &str, t: &RawTool) -> bool {
    match &t.net.allow_private {
        Some(v) if t.net.connect.is_empty() && *v.get_ref() => {
            c.problem(v.span(), format!("tool {name}: net.allow_private = true without net.connect grants nothing"));
            false
        }
        Some(v) => *v.get_ref(),
        None => false,
    }
}

/// `net.unix`: host sockets, for process tools and servers only.
pub(super) fn compile_unix(
    c: &mut Checker<'_>,
    name: &str,
    t: &RawTool,
    runner: &Runner,
    ctx: &Context,
) -> Vec<PathBuf> {
    let mut unix = Vec::new();
    for entry in &t.net.unix {
        if !matches!(runner, Runner::Process(_) | Runner::Server(_)) {
            c.problem(
                entry.span(),
                format!("tool {name}: net.unix reaches a host socket from a process tool or server; remove it here"),
            );
            continue;
        }
        match expand_path(c, name, entry, ctx) {
            Some(GrantPath::Fixed(p)) => unix.push(p),
            Some(GrantPath::Tmp(_)) => c.problem(
                entry.span(),
                format!("tool {name}: net.unix {:?}: the call's own sockets in {{tmp}} need no grant", entry.get_ref()),
            ),
            None => {}
        }
    }
    unix
}

/// `net.connect`: each entry a host and port.
pub(super) fn compile_connect(c: &mut Checker<'_>, name: &str, t: &RawTool) -> Vec<NetGrant> {
    let mut net = Vec::new();
    for entry in &t.net.connect {
        match parse_host_port(entry.get_ref()) {
            Ok(g) => net.push(g),
            Err(msg) => c.problem(entry.span(), format!("tool {name}: net.connect {:?}: {msg}", entry.get_ref())),
        }
    }
    net
}

/// `env.pass`: the names of variables passed through.
pub(super) fn compile_env_pass(c: &mut Checker<'_>, name: &str, t: &RawTool) -> Vec<String> {
    let mut env_pass = Vec::new();
    for v in &t.env.pass {
        if valid_env_name(v.get_ref()) {
            env_pass.push(v.get_ref().clone());
        } else {
            c.problem(
                v.span(),
                format!("tool {name}: env.pass {:?} is not a variable name (WARDEN_* names are reserved)", v.get_ref()),
            );
        }
    }
    env_pass
}

/// `env.set`: variables set, their values' placeholders expanded.
pub(super) fn compile_env_set(c: &mut Checker<'_>, name: &str, t: &RawTool, ctx: &Context) -> BTreeMap<String, String> {
    let mut env_set = BTreeMap::new();
    for (k, v) in &t.env.set {
        if !valid_env_name(k) {
            c.problem(
                v.span(),
                format!("tool {name}: env.set key {k:?} is not a variable name (WARDEN_* names are reserved)"),
            );
            continue;
        }
        match expand_text(v.get_ref(), ctx, true) {
            Ok(s) => {
                env_set.insert(k.clone(), s);
            }
            Err(msg) => c.problem(v.span(), format!("tool {name}: env.set.{k}: {msg}")),
        }
    }
    env_set
}

/// A flag that applies to process tools only (`sysv_ipc`, `inotify`,
/// `fs.git_init`): refused (as false) on any other tool.
pub(super) fn process_flag(
    c: &mut Checker<'_>,
    name: &str,
    key: &str,
    v: &Option<Spanned<bool>>,
    process: bool,
) -> bool {
    match v {
        Some(v) if !process => {
            c.problem(v.span(), format!("tool {name}: {key} applies to process tools and [servers] only"));
            false
        }
        Some(v) => *v.get_ref(),
        None => false,
    }
}

/// `fs.git_init = true` needs a write grant to create repositories in.
pub(super) fn check_git_init(c: &mut Checker<'_>, name: &str, t: &RawTool, paths: &[PathGrant]) {
    if let Some(v) = t.fs.git_init.as_ref().filter(|v| *v.get_ref())
        && !paths.iter().any(|p| p.write)
    {
        c.problem(
            v.span(),
            format!("tool {name}: fs.git_init = true needs an fs.write grant to create repositories in"),
        );
    }
}

/// `background = true`, refused alongside `cache`.
pub(super) fn compile_background(c: &mut Checker<'_>, name: &str, t: &RawTool) -> bool {
    let background = t.background.as_ref().filter(|b| *b.get_ref());
    if let (Some(b), Some(_)) = (background, &t.cache) {
        c.problem(
            b.span(),
            format!(
                "tool {name}: `background = true` and `cache` do not go together (a cached answer is a result, \
                 not a job handle); remove one"
            ),
        );
    }
    background.is_some()
}

/// The longest `cache` a tool may have.
const MAX_CACHE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Checks `cache = "…"`: only a tool that changes nothing and reaches no
/// network, at tier `auto`, may have its results served again.
pub(super) fn compile_cache(
    c: &mut Checker<'_>,
    name: &str,
    d: &Spanned<crate::units::PolicyDuration>,
    tier: Tier,
    paths: &[PathGrant],
    net: &[NetGrant],
    sysv_ipc: bool,
) -> Option<std::time::Duration> {
    let ttl = d.get_ref().0;
    let why = if ttl.is_zero() || ttl > MAX_CACHE {
        Some(format!("must be more than 0s and at most {}", humantime::format_duration(MAX_CACHE)))
    } else if tier != Tier::Auto {
        Some(format!(
            "applies only to tools of tier \"auto\" (this one is \"{tier}\"): a cached answer would skip the approval"
        ))
    } else if let Some(w) = crate::lasting_write(paths) {
        Some(format!(
            "applies only to read-only tools, and this one may write {} (fs.write): a call that changes \
             something must run every time",
            w.path
        ))
    } else if sysv_ipc {
        Some(
            "does not apply with sysv_ipc = true: shared memory and message queues change without any file \
             changing"
                .to_string(),
        )
    } else {
        net.first().map(|n| {
            format!(
                "applies only to tools without network grants, and this one may connect to {n} (net.connect): \
                 what it fetches can change without warden seeing it"
            )
        })
    };
    match why {
        Some(why) => {
            c.problem(d.span(), format!("tool {name}: cache {why}; remove `cache` or change the tool"));
            None
        }
        None => Some(ttl),
    }
}

/// Checks `fs.deny_read`, `fs.deny_write` and `fs.unprotect`: each must lie
/// inside a grant of the tool (`fs.unprotect`: a write grant), since an entry
/// outside every grant would change nothing and must not look as if it did.
pub(super) fn compile_deny(
    c: &mut Checker<'_>,
    name: &str,
    fs: &crate::schema::RawFs,
    grants: &[PathGrant],
    ctx: &Context,
) -> (Vec<DenyEntry>, Vec<PathBuf>) {
    /// The part of a pattern before its first glob component.
    fn fixed_prefix(p: &GrantPath) -> GrantPath {
        match p {
            GrantPath::Fixed(path) => GrantPath::Fixed(
                path.components().take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?'])).collect(),
            ),
            GrantPath::Tmp(rel) => GrantPath::Tmp(
                rel.components().take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?'])).collect(),
            ),
        }
    }
    fn under(inner: &GrantPath, outer: &GrantPath) -> bool {
        match (inner, outer) {
            (GrantPath::Fixed(i), GrantPath::Fixed(o)) => i.starts_with(o),
            (GrantPath::Tmp(i), GrantPath::Tmp(o)) => i.starts_with(o),
            _ => false,
        }
    }
    let mut deny = Vec::new();
    for (list, read, key) in [(&fs.deny_read, true, "fs.deny_read"), (&fs.deny_write, false, "fs.deny_write")] {
        for entry in list {
            if entry.get_ref().contains("{system}") {
                c.problem(entry.span(), format!("tool {name}: {key}: {{system}} is a grant; name the paths to deny"));
                continue;
            }
            let Some(path) = expand_pattern(c, name, key, entry, ctx) else { continue };
            let prefix = fixed_prefix(&path);
            // Inside a grant, or a pattern whose fixed part contains one (`/**/.env`).
            let reachable =
                grants.iter().any(|g| (read || g.write) && (under(&prefix, &g.path) || under(&g.path, &prefix)));
            if !reachable {
                let what = if read { "fs.read or fs.write grant" } else { "fs.write grant" };
                c.problem(
                    entry.span(),
                    format!(
                        "tool {name}: {key} {:?} is inside no {what} of this tool, so it changes nothing; \
                         remove it, or correct the path",
                        entry.get_ref()
                    ),
                );
                continue;
            }
            deny.push(DenyEntry { path, read });
        }
    }
    let mut unprotect = Vec::new();
    for entry in &fs.unprotect {
        let Some(path) = expand_pattern(c, name, "fs.unprotect", entry, ctx) else { continue };
        match &path {
            GrantPath::Fixed(p) if !crate::glob::is_glob(&p.to_string_lossy()) => {
                if grants.iter().any(|g| g.write && under(&path, &g.path)) {
                    unprotect.push(p.clone());
                } else {
                    c.problem(
                        entry.span(),
                        format!(
                            "tool {name}: fs.unprotect {:?} is inside no fs.write grant of this tool, where \
                             nothing is protected; remove it",
                            entry.get_ref()
                        ),
                    );
                }
            }
            _ => c.problem(
                entry.span(),
                format!(
                    "tool {name}: fs.unprotect {:?}: name one protected path (no globs, not under {{tmp}}), \
                     for example \"{{workspace}}/.vscode\"",
                    entry.get_ref()
                ),
            ),
        }
    }
    (deny, unprotect)
}

/// Expands one `fs.deny_*`/`fs.unprotect` entry: a grant path in which `*`, `?`
/// and `**` components may appear.
pub(crate) fn expand_pattern(
    c: &mut Checker<'_>,
    name: &str,
    key: &str,
    entry: &Spanned<String>,
    ctx: &Context,
) -> Option<GrantPath> {
    let raw = entry.get_ref();
    if raw.contains(['[', ']', '{']) && !raw.starts_with('{') || raw.matches('{').count() > 1 {
        c.problem(
            entry.span(),
            format!(
                "tool {name}: {key} {raw:?}: one placeholder, at the start; `*`, `?` and `**` are the only wildcards"
            ),
        );
        return None;
    }
    if raw.split('/').any(|part| part.contains("**") && part != "**") {
        c.problem(
            entry.span(),
            format!("tool {name}: {key} {raw:?}: `**` must be a whole path component (`{{workspace}}/**/*.pem`)"),
        );
        return None;
    }
    let before = c.problems.len();
    let path = expand_path(c, name, entry, ctx);
    for p in &mut c.problems[before..] {
        p.message = p.message.replacen("path ", &format!("{key} "), 1);
    }
    path
}

/// Checks `[[tools.NAME.rule]]` entries.
pub(crate) fn compile_rules(c: &mut Checker<'_>, name: &str, raw_rules: &[Spanned<RawRule>]) -> Vec<Rule> {
    let mut rules = Vec::new();
    for r in raw_rules {
        let rspan = r.span();
        let raw = r.get_ref();
        if raw.when.is_empty() {
            c.problem(rspan.clone(), format!("tool {name}: a rule needs at least one `when` entry"));
            continue;
        }
        let mut when = Vec::new();
        for (key, re) in &raw.when {
            let selector =
                if key.starts_with('/') { ArgSelector::Pointer(key.clone()) } else { ArgSelector::Name(key.clone()) };
            match RegexBuilder::new(re.get_ref()).size_limit(MAX_RULE_REGEX).build() {
                Ok(rx) => when.push((selector, rx)),
                Err(e) => c.problem(re.span(), format!("tool {name}: rule regex for `{key}` does not compile: {e}")),
            }
        }
        rules.push(Rule { when, tier: raw.tier, reason: raw.reason.clone(), location: c.location(rspan) });
    }

    rules
}

pub(super) fn tool_limits(c: &mut Checker<'_>, name: &str, l: &RawLimits, defaults: &Limits, process: bool) -> Limits {
    if !process {
        let process_only: [(&str, Option<Range<usize>>); 6] = [
            ("cpu", l.cpu.as_ref().map(Spanned::span)),
            ("processes", l.processes.as_ref().map(Spanned::span)),
            ("open_files", l.open_files.as_ref().map(Spanned::span)),
            ("file_size", l.file_size.as_ref().map(Spanned::span)),
            ("tmp_size", l.tmp_size.as_ref().map(Spanned::span)),
            ("tmp_files", l.tmp_files.as_ref().map(Spanned::span)),
        ];
        for (key, span) in process_only {
            if let Some(span) = span {
                c.problem(
                    span,
                    format!(
                        "tool {name}: limits.{key} applies only to process tools; a component is bounded by \
                         limits.memory and limits.timeout"
                    ),
                );
            }
        }
    }
    let timeout = l.timeout.as_ref().map_or(defaults.timeout, |d| d.get_ref().0);
    let limits = Limits {
        timeout,
        memory: l.memory.as_ref().map_or(defaults.memory, |s| s.get_ref().0),
        max_output: l.max_output.as_ref().map_or(defaults.max_output, |s| s.get_ref().0),
        cpu: l.cpu.as_ref().map_or(timeout, |d| d.get_ref().0),
        processes: l.processes.as_ref().map_or(defaults.processes, |p| *p.get_ref()),
        open_files: l.open_files.as_ref().map_or(defaults.open_files, |p| *p.get_ref()),
        file_size: l.file_size.as_ref().map_or(defaults.file_size, |p| p.get_ref().0),
        tmp_size: l.tmp_size.as_ref().map_or(defaults.tmp_size, |p| p.get_ref().0),
        tmp_files: l.tmp_files.as_ref().map_or(defaults.tmp_files, |p| *p.get_ref()),
    };
    if !process && limits.memory > MAX_COMPONENT_MEMORY {
        c.problem(0..0, format!("tool {name}: limits.memory is above 4GiB, more than a component can address"));
    }
    for (key, value, min) in [
        ("processes", l.processes.as_ref(), 1u32),
        ("open_files", l.open_files.as_ref(), 8),
        ("tmp_files", l.tmp_files.as_ref(), 1),
    ] {
        if let Some(v) = value.filter(|v| *v.get_ref() < min) {
            c.problem(v.span(), format!("tool {name}: limits.{key} must be at least {min}"));
        }
    }
    limits
}

/// Checks `exec` and its companions (`cwd`, `input_schema`).
pub(super) fn compile_exec(
    c: &mut Checker<'_>,
    name: &str,
    exec: &Spanned<Vec<String>>,
    t: &RawTool,
    ctx: &Context,
) -> Option<ExecSpec> {
    let argv_raw = exec.get_ref();
    let before = c.problems.len();
    if argv_raw.is_empty() || argv_raw.len() > MAX_ARGV {
        c.problem(exec.span(), format!("tool {name}: exec needs 1 to {MAX_ARGV} elements, the program first"));
        return None;
    }
    if !argv_raw[0].starts_with('/') && !argv_raw[0].starts_with('{') {
        c.problem(
            exec.span(),
            format!(
                "tool {name}: exec[0] = {:?} must be an absolute path (no PATH search happens), for example \"/usr/bin/{}\"",
                argv_raw[0], argv_raw[0]
            ),
        );
    }
    let (argv, params) = compile_template(c, name, "exec", exec, ctx, true);
    let cwd = compile_cwd(c, name, t, ctx)?;
    let input_schema = compile_input_schema(c, name, t);
    if c.problems.len() > before {
        return None;
    }
    Some(ExecSpec { argv, params, cwd, input_schema })
}

/// A process tool's working directory: `cwd` expanded, or the workspace.
pub(super) fn compile_cwd(c: &mut Checker<'_>, name: &str, t: &RawTool, ctx: &Context) -> Option<PathBuf> {
    match &t.cwd {
        None => Some(ctx.workspace.clone()),
        Some(cwd) => match expand_path(c, name, cwd, ctx) {
            Some(GrantPath::Fixed(p)) => Some(p),
            Some(GrantPath::Tmp(_)) => {
                c.problem(cwd.span(), format!("tool {name}: cwd cannot be under {{tmp}}"));
                None
            }
            None => None,
        },
    }
}

/// Checks the `args` template of a tool of a `kind = "command"` plugin.
pub(super) fn compile_command(
    c: &mut Checker<'_>,
    name: &str,
    plugin: &str,
    t: &RawTool,
    ctx: &Context,
) -> Option<CommandSpec> {
    let before = c.problems.len();
    let (args, params) = match &t.args {
        Some(args) if args.get_ref().len() > MAX_ARGV => {
            c.problem(args.span(), format!("tool {name}: args has more than {MAX_ARGV} elements"));
            return None;
        }
        Some(args) => compile_template(c, name, "args", args, ctx, false),
        None => (Vec::new(), Vec::new()),
    };
    if let Some(args) = &t.args
        && args.get_ref().iter().any(|a| a.contains("{tmp}"))
    {
        c.problem(args.span(), format!("tool {name}: {{tmp}} is not available to components"));
    }
    if let Some(cwd) = &t.cwd {
        c.problem(
            cwd.span(),
            format!("tool {name}: `cwd` applies only to process tools; a command component sees only its preopens"),
        );
    }
    let input_schema = compile_input_schema(c, name, t);
    if c.problems.len() > before {
        return None;
    }
    Some(CommandSpec { plugin: plugin.to_string(), args, params, input_schema })
}

/// Expands the placeholders of an argument template (`exec` or `args`): `{workspace}`,
/// `{home}` and `{cache}` now, `{tmp}` per call, and `{name}` from the call's
/// string argument `name`. Returns the template and its parameter names.
pub(super) fn compile_template(
    c: &mut Checker<'_>,
    name: &str,
    key: &str,
    template: &Spanned<Vec<String>>,
    ctx: &Context,
    program_first: bool,
) -> (Vec<String>, Vec<String>) {
    let mut argv = Vec::new();
    let mut params: Vec<String> = Vec::new();
    for (i, element) in template.get_ref().iter().enumerate() {
        if element.contains('\0') {
            c.problem(template.span(), format!("tool {name}: {key}[{i}] contains a NUL byte"));
            continue;
        }
        let mut out = String::new();
        let mut rest = element.as_str();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let ident = after.find('}').map(|close| &after[..close]).filter(|id| {
                id.chars().next().is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
                    && id.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            });
            let Some(id) = ident else {
                // Not a placeholder (for example an awk program): kept as written.
                out.push('{');
                rest = after;
                continue;
            };
            match id {
                "workspace" => out.push_str(&ctx.workspace.to_string_lossy()),
                "home" => out.push_str(&ctx.home.to_string_lossy()),
                "cache" => out.push_str(&ctx.cache.to_string_lossy()),
                "tmp" => out.push_str("{tmp}"),
                "system" => c.problem(
                    template.span(),
                    format!("tool {name}: {key}[{i}]: {{system}} is a grant, not an argument"),
                ),
                param => {
                    if i == 0 && program_first {
                        c.problem(
                            template.span(),
                            format!("tool {name}: the program ({key}[0]) cannot come from an argument"),
                        );
                    }
                    if !params.iter().any(|p| p == param) {
                        params.push(param.to_string());
                    }
                    out.push('{');
                    out.push_str(param);
                    out.push('}');
                }
            }
            rest = &after[id.len() + 1..];
        }
        out.push_str(rest);
        argv.push(out);
    }
    (argv, params)
}

/// `input_schema`: a JSON Schema object, written as a TOML table or as JSON text.
pub(super) fn compile_input_schema(c: &mut Checker<'_>, name: &str, t: &RawTool) -> Option<serde_json::Value> {
    let v = t.input_schema.as_ref()?;
    let json = match v.get_ref() {
        toml::Value::String(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
        other => serde_json::to_value(other).map_err(|e| e.to_string()),
    };
    match json {
        Ok(schema) if schema.is_object() => Some(schema),
        Ok(_) => {
            c.problem(v.span(), format!("tool {name}: input_schema must be a JSON Schema object"));
            None
        }
        Err(e) => {
            c.problem(v.span(), format!("tool {name}: input_schema is not JSON: {e}"));
            None
        }
    }
}
