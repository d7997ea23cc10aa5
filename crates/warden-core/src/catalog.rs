//! The catalog ([`Catalog`]): the tools that exist under the policy, each with
//! its plugin, description and compiled input schema; name resolution with
//! suggestions. Only tools the policy declares exist; one whose plugin or server
//! failed, or whose definition no longer matches `warden.lock`, stays as
//! *unavailable*, with the reason. A server's tools (`NAME__TOOL`) are found when
//! first needed: resolving a `NAME__…` name starts that server alone, and
//! [`Catalog::load_all`] starts every one.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::error::{CallError, ErrorCode};
use crate::lock::{Owner, Pins};
use crate::policy::{Policy, Runner, SERVER_TOOL_SEPARATOR, Tier, ToolSpec};
use crate::runtime::ToolDef;
use crate::runtime::server::ServerPool;
use crate::runtime::wasm::{ComponentRuntime, LoadedPlugin};

/// The largest input schema warden compiles.
const MAX_SCHEMA_BYTES: usize = 256 << 10;

/// A tool ready to be called.
#[derive(Debug)]
pub struct ReadyTool {
    /// The plugin that runs it (component tools).
    pub plugin: Option<Arc<LoadedPlugin>>,
    /// The description shown to agents (the policy's, else the plugin's).
    pub description: String,
    /// The input schema.
    pub schema: Value,
    validator: jsonschema::Validator,
    /// Top-level arguments the schema marks `"format": "path"`.
    pub path_args: Vec<String>,
}

/// One tool of the policy.
#[derive(Debug)]
pub struct Entry {
    /// Its policy entry.
    pub spec: ToolSpec,
    /// Ready, or why not.
    pub state: Result<ReadyTool, CallError>,
    /// The definition a refused tool has now (its plugin's or server's), for
    /// review: `warden list --json` shows it.
    pub refused_definition: Option<ToolDef>,
}

/// Every tool of the policy, by name.
#[derive(Debug)]
pub struct Catalog {
    /// The tools that are not a server's.
    entries: BTreeMap<String, Entry>,
    /// Each server's tools (its own and the policy's `[tools."NAME__TOOL"]`),
    /// found when first needed.
    servers: BTreeMap<String, OnceLock<BTreeMap<String, Entry>>>,
}

impl Catalog {
    /// Loads every plugin the policy's tools use, starts its servers, checks
    /// definitions against `pins` and compiles every input schema.
    pub fn build(policy: &Policy, runtime: &ComponentRuntime, servers: &ServerPool, pins: &Pins) -> Catalog {
        Catalog::build_for(policy, runtime, servers, pins, None)
    }

    /// [`Catalog::build`]; with `only`, just the tool a call names is made
    /// ready (its plugin loaded, its schema compiled): the others are listed
    /// by name (for the closest-name hint of a miss) and never loaded, so a
    /// `warden call` of a process tool does not start wasmtime.
    pub fn build_for(
        policy: &Policy,
        runtime: &ComponentRuntime,
        servers: &ServerPool,
        pins: &Pins,
        only: Option<&str>,
    ) -> Catalog {
        if let Pins::Missing(path) = pins {
            let pinned: Vec<String> = policy
                .plugins
                .values()
                .filter(|p| p.source.is_third_party() && p.kind == crate::policy::PluginKind::Tool)
                .map(|p| format!("plugin {}", p.name))
                .chain(policy.servers.keys().map(|s| format!("server {s}")))
                .collect();
            if !pinned.is_empty() {
                tracing::warn!(
                    "no {}: the tool definitions of {} are not pinned; run `warden lock` to pin them",
                    path.display(),
                    pinned.join(", ")
                );
            }
        }
        let found = Found { policy, runtime, servers, pins };
        let mut entries = BTreeMap::new();
        // `PLUGIN.TOOL` names the tool TOOL.
        let wanted =
            |name: &str| only.is_none_or(|o| o == name || o.split_once('.').is_some_and(|(_, tool)| tool == name));
        for spec in policy.tools.values().filter(|s| !matches!(s.runner, Runner::Server(_))) {
            if wanted(&spec.name) {
                add(&found, &mut entries, spec.clone(), found.ready(spec));
                continue;
            }
            let mut spec = spec.clone();
            // Hidden by the profile as it would be: never suggested.
            if let Some(profile) = &policy.profile {
                profile.apply(&mut spec);
            }
            let state = Err(CallError::new(
                ErrorCode::Internal,
                format!("tool {} was not prepared: this warden process serves one call of another tool", spec.name),
            ));
            entries.insert(spec.name.clone(), Entry { spec, state, refused_definition: None });
        }
        let servers = policy.servers.keys().map(|name| (name.clone(), OnceLock::new())).collect();
        Catalog { entries, servers }
    }

    /// [`Catalog::build`], with every server started and its tools found.
    pub fn build_all(policy: &Policy, runtime: &ComponentRuntime, servers: &ServerPool, pins: &Pins) -> Catalog {
        let catalog = Catalog::build(policy, runtime, servers, pins);
        catalog.load_all(&Found { policy, runtime, servers, pins });
        catalog
    }

    /// Starts every server not yet started and finds its tools.
    pub(crate) fn load_all(&self, found: &Found<'_>) {
        for name in self.servers.keys() {
            self.section(name, found);
        }
    }

    /// The tools of server `name` (starting it when needed), if it is declared.
    fn section(&self, name: &str, found: &Found<'_>) -> Option<&BTreeMap<String, Entry>> {
        let server = found.policy.servers.get(name)?;
        // A server none of whose tools the chosen profile offers is never started.
        if found.policy.profile.as_ref().is_some_and(|p| !p.may_admit_server(name)) {
            return None;
        }
        Some(self.servers.get(name)?.get_or_init(|| found.server_entries(server)))
    }

    /// Every tool, sorted by name (including `deny` and unavailable ones); a
    /// server's only once it was started ([`Catalog::load_all`]).
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        let mut all: Vec<&Entry> = self
            .entries
            .values()
            .chain(self.servers.values().filter_map(OnceLock::get).flat_map(|m| m.values()))
            .collect();
        all.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        all.into_iter()
    }

    /// The tools an agent may see: not `deny`, not walls for `warden run`
    /// alone, sorted by name.
    pub fn visible(&self) -> impl Iterator<Item = &Entry> {
        self.entries().filter(|e| {
            e.spec.tier != Tier::Deny && !matches!(&e.spec.runner, crate::policy::Runner::Process(x) if x.run_only())
        })
    }

    /// Resolves a requested name: exact, then `SERVER__TOOL` (starting that
    /// server when needed), then `PLUGIN.TOOL`. Unknown names get `NOT_FOUND`
    /// with the closest visible names.
    pub(crate) fn resolve(&self, requested: &str, found: &Found<'_>) -> Result<&Entry, CallError> {
        if let Some(e) = self.entries.get(requested) {
            return Ok(e);
        }
        if let Some((server, _)) = requested.split_once(SERVER_TOOL_SEPARATOR)
            && let Some(section) = self.section(server, found)
        {
            if let Some(e) = section.get(requested) {
                return Ok(e);
            }
            // A tool of a server that could not start: the server's reason.
            if let Some(e) = section.get(&format!("{server}{SERVER_TOOL_SEPARATOR}*")) {
                return Ok(e);
            }
        }
        if let Some((plugin, tool)) = requested.split_once('.')
            && let Some(e) = self.entries.get(tool).filter(|e| e.spec.plugin() == Some(plugin))
        {
            return Ok(e);
        }
        let shown: String = requested.chars().take(80).collect();
        if let Some(profile) = &found.policy.profile
            && let Some((server, _)) = requested.split_once(SERVER_TOOL_SEPARATOR)
            && found.policy.servers.contains_key(server)
            && !profile.may_admit_server(server)
        {
            return Err(CallError::new(
                ErrorCode::Denied,
                format!(
                    "{shown:?}: not in profile {} ({}); add it to `tools` of [profiles.{}] to offer it to this agent",
                    profile.name, profile.location, profile.name
                ),
            ));
        }
        let names = crate::policy::profile::closest(requested, self.visible().map(|e| e.spec.name.as_str()));
        let hint = if names.is_empty() {
            "; `warden list` shows the tools this policy offers".to_string()
        } else {
            format!("; did you mean {}?", names.join(", "))
        };
        Err(CallError::new(ErrorCode::NotFound, format!("no tool named {shown:?} under this policy{hint}")))
    }
}

impl ReadyTool {
    /// Every schema violation of `args`, each with its JSON pointer; empty when valid.
    pub fn violations(&self, args: &Value) -> Vec<String> {
        self.validator
            .iter_errors(args)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("{}: {e}", if at.is_empty() { "/".to_string() } else { at })
            })
            .collect()
    }
}

/// Adds a tool to `entries`, its error cleaned, with the definition a refused one has now.
fn add(found: &Found<'_>, entries: &mut BTreeMap<String, Entry>, spec: ToolSpec, state: Result<ReadyTool, CallError>) {
    // The chosen profile hides what its agent may not use and makes some tools stricter.
    let mut spec = spec;
    if let Some(profile) = &found.policy.profile {
        profile.apply(&mut spec);
    }
    // Errors can quote what a plugin or server said: no terminal escapes.
    let state = state.map_err(|e| CallError::new(e.code, crate::shape::sanitize_str(&e.message)));
    let mut refused_definition = None;
    if let Err(e) = &state {
        tracing::warn!(tool = %spec.name, "tool unavailable: {}", e.message);
        refused_definition = found.definition(&spec);
    }
    entries.insert(spec.name.clone(), Entry { spec, state, refused_definition });
}

/// What the catalog finds tools with.
pub(crate) struct Found<'a> {
    pub(crate) policy: &'a Policy,
    pub(crate) runtime: &'a ComponentRuntime,
    pub(crate) servers: &'a ServerPool,
    pub(crate) pins: &'a Pins,
}

impl Found<'_> {
    /// The definition `spec`'s plugin or server gives now, if it can be had
    /// without starting anything new (plugins are loaded, servers asked once).
    fn definition(&self, spec: &ToolSpec) -> Option<ToolDef> {
        match &spec.runner {
            Runner::Plugin(p) => {
                let plugin = self.runtime.load(self.policy.plugins.get(p)?).ok()?;
                plugin.tools.iter().find(|t| t.name == spec.name).cloned()
            }
            Runner::Server(st) if st.tool != "*" => {
                let defs = self.servers.definitions(self.policy.servers.get(&st.server)?).ok()?;
                defs.into_iter().find(|t| t.name == st.tool)
            }
            Runner::Server(_) | Runner::Process(_) | Runner::Command(_) => None,
        }
    }

    /// The tools of `server`: the policy's `[tools."NAME__TOOL"]` entries and
    /// every other tool it lists (starting it), or one unavailable `NAME__*`.
    fn server_entries(&self, server: &crate::policy::ServerSpec) -> BTreeMap<String, Entry> {
        let mut entries = BTreeMap::new();
        let own = |s: &&ToolSpec| matches!(&s.runner, Runner::Server(st) if st.server == server.name);
        for spec in self.policy.tools.values().filter(own) {
            add(self, &mut entries, spec.clone(), self.ready(spec));
        }
        match self.servers.definitions(server) {
            Ok(defs) => {
                for def in defs {
                    let spec = server.tool_spec(&def.name);
                    if !self.policy.tools.contains_key(&spec.name) {
                        let state = self.ready(&spec);
                        add(self, &mut entries, spec, state);
                    }
                }
            }
            Err(e) => {
                let why = CallError::new(e.code, format!("server {} is unavailable: {}", server.name, e.message));
                add(self, &mut entries, server.tool_spec("*"), Err(why));
            }
        }
        entries
    }

    fn ready(&self, spec: &ToolSpec) -> Result<ReadyTool, CallError> {
        let (policy, runtime) = (self.policy, self.runtime);
        let load = |plugin_name: &str| {
            let plugin_spec = policy.plugins.get(plugin_name).ok_or_else(|| {
                CallError::new(ErrorCode::Internal, format!("tool {}: plugin {plugin_name} is not declared", spec.name))
            })?;
            runtime
                .load(plugin_spec)
                .map_err(|e| CallError::new(e.code, format!("tool {} is unavailable: {}", spec.name, e.message)))
        };
        let refused = |e: String| CallError::new(ErrorCode::Denied, format!("tool {} is refused: {e}", spec.name));
        let (plugin, description, schema_text, source) = match &spec.runner {
            Runner::Plugin(plugin_name) => {
                let plugin = load(plugin_name)?;
                let def = find(&plugin.tools, &spec.name, || {
                    format!("tool {} ({}): plugin {plugin_name}", spec.name, spec.location)
                })?;
                if policy.plugins.get(plugin_name).is_some_and(|p| p.source.is_third_party()) {
                    poisoned(spec, &format!("plugin {plugin_name}"), def)?;
                    self.pins.check(Owner::Plugin(plugin_name), def).map_err(refused)?;
                    let signer = plugin.signer.as_ref().map(|s| s.fingerprint.as_str());
                    self.pins.check_provenance(plugin_name, &plugin.sha256, signer).map_err(refused)?;
                }
                let (description, schema) = (def.description.clone(), def.input_schema.clone());
                (Some(plugin), description, schema, format!("plugin {plugin_name}"))
            }
            Runner::Command(command) => {
                let plugin = load(&command.plugin)?;
                if policy.plugins.get(&command.plugin).is_some_and(|p| p.source.is_third_party()) {
                    let signer = plugin.signer.as_ref().map(|s| s.fingerprint.as_str());
                    self.pins.check_provenance(&command.plugin, &plugin.sha256, signer).map_err(refused)?;
                }
                let description = format!("Run the {} command component", command.plugin);
                (Some(plugin), description, command.schema().to_string(), "its policy entry".to_string())
            }
            Runner::Server(st) => {
                let server = policy.servers.get(&st.server).ok_or_else(|| {
                    CallError::new(
                        ErrorCode::Internal,
                        format!("tool {}: server {} is not declared", spec.name, st.server),
                    )
                })?;
                let defs = self
                    .servers
                    .definitions(server)
                    .map_err(|e| CallError::new(e.code, format!("tool {} is unavailable: {}", spec.name, e.message)))?;
                let def =
                    find(&defs, &st.tool, || format!("tool {} ({}): server {}", spec.name, spec.location, st.server))?;
                poisoned(spec, &format!("server {}", st.server), def)?;
                self.pins.check(Owner::Server(&st.server), def).map_err(refused)?;
                (None, def.description.clone(), def.input_schema.clone(), format!("server {}", st.server))
            }
            Runner::Process(exec) => {
                // A run-only tool (no exec) names no program: `warden run` finds one per call.
                let program = std::path::Path::new(exec.argv.first().map_or("", String::as_str));
                if !exec.argv.is_empty() && !program.is_file() {
                    return Err(CallError::new(
                        ErrorCode::SandboxUnavailable,
                        format!(
                            "tool {} ({}): the program {} does not exist on this machine; install it or change exec[0]",
                            spec.name,
                            spec.location,
                            program.display()
                        ),
                    ));
                }
                // Protected or denied paths that no layer can hold on this host: the
                // tool is unavailable in enforce mode (never run pretending).
                if policy.mode == crate::policy::SandboxMode::Enforce
                    && let Some(why) =
                        warden_sandbox::namespaces::NsSupport::probe(nix::unistd::geteuid().is_root()).reason
                    && let Ok(protection) = crate::runtime::protect::preview(spec)
                    && !protection.is_empty()
                {
                    return Err(CallError::new(
                        ErrorCode::SandboxUnavailable,
                        format!(
                            "tool {} ({}): its protected and denied paths ({}) need a mount namespace of the \
                             call's own, and {why}; `warden doctor` names the fix, or run warden as root, or set \
                             [sandbox] mode = \"best-effort\" to run without them",
                            spec.name,
                            spec.location,
                            protection.named(20)
                        ),
                    ));
                }
                // Network grants likewise: only a network namespace whose one way
                // out is warden's proxy holds a grant by host.
                if policy.mode == crate::policy::SandboxMode::Enforce
                    && !spec.grants.net.is_empty()
                    && let Some(why) =
                        warden_sandbox::namespaces::NsSupport::probe(nix::unistd::geteuid().is_root()).reason
                {
                    let grants: Vec<String> = spec.grants.net.iter().take(10).map(|g| g.to_string()).collect();
                    return Err(CallError::new(
                        ErrorCode::SandboxUnavailable,
                        format!(
                            "tool {} ({}): its net.connect grants ({}) need a network namespace of the call's own \
                             whose one way out is warden's egress proxy, and {why}; `warden doctor` names the fix, \
                             or run warden as root, or set [sandbox] mode = \"best-effort\" to let it reach every \
                             host on the granted ports",
                            spec.name,
                            spec.location,
                            grants.join(", ")
                        ),
                    ));
                }
                let description = format!("Run {}", exec.argv.join(" "));
                (None, description, exec.schema().to_string(), "its policy entry".to_string())
            }
        };
        compile(spec, plugin, description, &schema_text, &source)
    }
}

/// Refuses a third-party definition that carries text aimed at the model,
/// unless the policy's own description replaces the poisoned one.
fn poisoned(spec: &ToolSpec, owner: &str, def: &ToolDef) -> Result<(), CallError> {
    let Some(p) = crate::poisoning::definition_poisoning(&def.description, &def.input_schema) else {
        return Ok(());
    };
    if p.answered_by(Some(spec)) {
        return Ok(());
    }
    let what = if p.in_description {
        format!(
            "to offer it with a description of your own, set [tools.\"{}\"] description = \"…\" in the policy",
            spec.name
        )
    } else {
        "the input schema cannot be replaced in the policy: deny the tool (tier = \"deny\") or have its author fix it"
            .to_string()
    };
    Err(CallError::new(
        ErrorCode::Denied,
        format!(
            "tool {} is refused: the definition {owner} gives {} (tool poisoning: text that addresses the model); \
             read it with `warden lock --show {}`; {what}",
            spec.name, p.why, spec.name
        ),
    ))
}

/// The definition named `name` among `defs`, or `NOT_FOUND` naming what `owner` offers.
fn find<'d>(defs: &'d [ToolDef], name: &str, owner: impl Fn() -> String) -> Result<&'d ToolDef, CallError> {
    defs.iter().find(|t| t.name == name).ok_or_else(|| {
        let offered: Vec<&str> = defs.iter().map(|t| t.name.as_str()).collect();
        CallError::new(
            ErrorCode::NotFound,
            format!("{} offers no tool of that name, {name:?} (it offers: {})", owner(), offered.join(", ")),
        )
    })
}

/// A tool's input schema as warden uses it, or why it cannot be used: at
/// most [`MAX_SCHEMA_BYTES`], JSON, an object schema (`"type": "object"`, as
/// MCP requires) and valid JSON Schema 2020-12. The one check the catalog and
/// `warden plugin inspect` apply.
pub fn input_schema(text: &str) -> Result<(Value, jsonschema::Validator), String> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(format!("larger than {MAX_SCHEMA_BYTES} bytes"));
    }
    let schema: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the schema must describe an object (\"type\": \"object\")".into());
    }
    let validator = jsonschema::draft202012::new(&schema).map_err(|e| e.to_string())?;
    Ok((schema, validator))
}

/// Compiles a tool's input schema and finishes its entry.
fn compile(
    spec: &ToolSpec,
    plugin: Option<Arc<LoadedPlugin>>,
    description: String,
    schema_text: &str,
    source: &str,
) -> Result<ReadyTool, CallError> {
    let bad_schema = |why: String| {
        CallError::new(
            ErrorCode::ExecutionFailed,
            format!("tool {}: {source} gave an unusable input schema: {why}", spec.name),
        )
    };
    let (schema, validator) = input_schema(schema_text).map_err(bad_schema)?;
    let path_args = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter(|(_, p)| p.get("format").and_then(Value::as_str) == Some("path"))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    // A plugin's description reaches the model: strip terminal escapes and invisible text from it.
    let description = crate::shape::sanitize_str(spec.description.as_deref().unwrap_or(&description));
    Ok(ReadyTool { plugin, description, schema, validator, path_args })
}

#[cfg(test)]
mod tests {
    use crate::policy::profile::distance;

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("read_fle", "read_file"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("grep", "grep"), 0);
    }
}
