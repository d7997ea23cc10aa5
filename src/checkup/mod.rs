//! `warden audit`: is the confinement really there, and does the policy grant
//! no more than intended? A report for people (`text`), programs (`json`) and
//! code scanning (`sarif`):
//!
//! * [`host`]: what this kernel offers a sandbox ([`doctor`]: as the sandbox
//!   helper really finds it, with the [`fixes`]);
//! * the layers each tool of the policy would actually get here;
//! * [`crate::lint`]: findings with stable rule ids at policy lines
//!   ([`links`] looks for hard-linked files under the grants);
//! * [`selftest`]: real escape attempts under this host's sandbox ([`probe`] is
//!   the program the process cases run);
//! * [`sarif`]: the findings as SARIF 2.1.0.

pub mod doctor;
pub mod fixes;
pub mod host;
pub mod links;
pub mod probe;
pub mod sarif;
pub mod selftest;

use serde::Serialize;

use crate::catalog::Catalog;
use crate::lint::{Finding, Severity};
use crate::policy::{Policy, Runner, SandboxMode, Tier};
use warden_sandbox::landlock::MIN_ENFORCED_ABI;

use self::host::HostReport;

/// The layers one tool would run under on this host.
#[derive(Debug, Clone, Serialize)]
pub struct ToolLayers {
    /// The tool.
    pub tool: String,
    /// `process` or `component`.
    pub runtime: &'static str,
    /// The layers it gets.
    pub layers: Vec<String>,
    /// The layers the policy expects that this host lacks.
    pub missing: Vec<String>,
    /// `runs`, `refused` (enforce mode, a layer it needs is missing) or
    /// `degraded` (it runs with a layer missing), or `unavailable`.
    pub verdict: &'static str,
    /// Why the tool is unavailable, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// Where one plugin's component comes from, as it loads on this host.
#[derive(Debug, Clone, Serialize)]
pub struct PluginProvenance {
    /// The plugin's policy name.
    pub plugin: String,
    /// `builtin:NAME` or `file:/abs/path`.
    pub source: String,
    /// sha256 of the component (absent when it did not load).
    pub sha256: Option<String>,
    /// The signer `signers` accepted (`SHA256:…`), if the policy asks for one.
    pub signer: Option<String>,
    /// `loaded`, or why it does not load (a refused signature, a changed pin).
    pub status: String,
}

/// Everything `warden audit` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The policy's origin.
    pub policy: String,
    /// The host.
    pub host: HostReport,
    /// The tools' layers (empty when the policy does not load).
    pub tools: Vec<ToolLayers>,
    /// Where each plugin's component comes from, and who signed it.
    pub provenance: Vec<PluginProvenance>,
    /// The self-test, when it ran.
    pub self_test: Option<Vec<selftest::Case>>,
    /// Lint findings in file order, then one per escaped self-test case.
    pub findings: Vec<Finding>,
}

/// The findings for escaped self-test cases (rule `WL200`), at the policy's `[sandbox]`.
pub fn escapes(cases: &[selftest::Case], file: &str) -> Vec<Finding> {
    let rule = crate::lint::rule("WL200");
    cases
        .iter()
        .filter(|c| !c.contained)
        .map(|c| Finding {
            rule: rule.id,
            severity: rule.severity,
            message: format!(
                "self-test: {} ({}) was not contained: expected {}, observed {}{}",
                c.name,
                c.runtime,
                c.expected,
                c.observed,
                if c.layers.is_empty() { String::new() } else { format!("; layers: {}", c.layers) }
            ),
            file: file.to_string(),
            line: 0,
            column: 0,
        })
        .collect()
}

/// Why this host gives process calls no namespaces of their own (and so no
/// mount masks for protected and denied paths), or `None` when it does.
pub fn namespace_refusal() -> Option<String> {
    warden_sandbox::namespaces::NsSupport::probe(nix::unistd::geteuid().is_root()).reason
}

/// How a tool with network grants reaches the network on this host.
pub fn egress_mechanism(spec: &crate::policy::ToolSpec) -> String {
    let private = if spec.grants.allow_private { "admitted (net.allow_private)" } else { "refused" };
    match &spec.runner {
        Runner::Plugin(_) | Runner::Command(_) => {
            format!("warden's WASI host checks each address; names resolved by warden, private addresses {private}")
        }
        Runner::Process(_) | Runner::Server(_) => match namespace_refusal() {
            None => format!(
                "only through warden's egress proxy, by host and port; names resolved by warden, private \
                 addresses {private}; no DNS or UDP out"
            ),
            Some(why) => format!("NOT ENFORCEABLE by host here ({why}): Landlock admits every host on the ports"),
        },
    }
}

/// What enforces a tool's protected and denied paths on this host.
pub fn paths_mechanism(spec: &crate::policy::ToolSpec) -> String {
    match &spec.runner {
        Runner::Plugin(_) | Runner::Command(_) => "refused by warden's WASI host".into(),
        Runner::Process(_) | Runner::Server(_) => match namespace_refusal() {
            None if spec.grants.writes() => {
                "the call's layer, each change judged when it ends; read-only binds and masks in its mount namespace"
                    .into()
            }
            None => "read-only binds and masks in the call's mount namespace".into(),
            Some(why) => format!("NOT ENFORCEABLE here: {why}"),
        },
    }
}

/// How a missing layer that refuses the tool in `best-effort` mode too ends.
const EVERY_MODE: &str = ": refused in every mode";

/// The layers each visible tool of `policy` gets on `host`, in the policy's mode.
pub fn tool_layers(policy: &Policy, catalog: &Catalog, host: &HostReport) -> Vec<ToolLayers> {
    tool_layers_in(policy.mode, policy, catalog, host)
}

/// The layers each visible tool of `policy` gets on `host` in `mode`: a tool
/// whose catalog entry was refused for a reason `mode` does not share (a
/// missing namespace in `enforce`, asked about for `best-effort`) is judged
/// by its layers.
pub fn tool_layers_in(mode: SandboxMode, policy: &Policy, catalog: &Catalog, host: &HostReport) -> Vec<ToolLayers> {
    let enforce = mode == SandboxMode::Enforce;
    let pids = host.cgroup_controllers.iter().any(|c| c == "pids");
    catalog
        .entries()
        .filter(|e| e.spec.tier != Tier::Deny)
        .map(|e| {
            // Missing layers `enforce` refuses a call without, and ones it runs without.
            let (mut missing, mut weaker) = (Vec::new(), Vec::new());
            let (runtime, layers) = match &e.spec.runner {
                Runner::Process(_) | Runner::Server(_) => {
                    let mut layers = Vec::new();
                    process_host_layers(&e.spec, host, pids, &mut layers, &mut missing);
                    process_namespace_layers(&e.spec, host, &mut layers, (&mut missing, &mut weaker));
                    (e.spec.runtime(), layers)
                }
                Runner::Plugin(_) | Runner::Command(_) => ("component", component_layers(&e.spec)),
            };
            let other_mode = mode != policy.mode
                && e.state.as_ref().is_err_and(|c| c.code == crate::error::ErrorCode::SandboxUnavailable);
            let unavailable = e.state.as_ref().err().filter(|_| !other_mode).map(|c| c.message.clone());
            let verdict = if unavailable.is_some() {
                "unavailable"
            } else if missing.is_empty() && weaker.is_empty() {
                "runs"
            } else if (enforce && !missing.is_empty()) || missing.iter().any(|m| m.ends_with(EVERY_MODE)) {
                "refused"
            } else {
                "degraded"
            };
            missing.append(&mut weaker);
            ToolLayers { tool: e.spec.name.clone(), runtime, layers, missing, verdict, unavailable }
        })
        .collect()
}

/// A process tool's layers that need no namespace: its session, rlimits,
/// Landlock, seccomp, root's extras, `{tmp}`, memory and IPC.
fn process_host_layers(
    spec: &crate::policy::ToolSpec,
    host: &HostReport,
    pids: bool,
    layers: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let first = if matches!(spec.runner, Runner::Server(_)) {
        "MCP server: one long-running process in its own session"
    } else {
        "separate process in its own session"
    };
    layers.extend([first.to_string(), "rlimits".into()]);
    if host.landlock_abi >= 1 {
        layers.push(format!("Landlock ABI {}", host.landlock_abi.min(6)));
    }
    if host.landlock_abi < MIN_ENFORCED_ABI {
        missing.push(format!("Landlock ABI {MIN_ENFORCED_ABI} (this kernel has {})", host.landlock_abi));
    }
    if host.seccomp {
        layers.push("seccomp filter".into());
    } else {
        missing.push("seccomp".into());
    }
    if host.root {
        layers.push("capabilities dropped, securebits locked".into());
        if pids {
            layers.push("pids cgroup".into());
        } else {
            missing.push("a pids cgroup (as root, RLIMIT_NPROC does not apply)".into());
        }
    }
    if spec.grants.paths.iter().any(|p| matches!(p.path, crate::policy::GrantPath::Tmp(_))) {
        layers.push(if host.root {
            format!(
                "{{tmp}} a tmpfs of its own ({}, {} files)",
                crate::policy::units::format_size(spec.limits.tmp_size),
                spec.limits.tmp_files
            )
        } else {
            "{tmp} a plain directory (no quota without root)".into()
        });
    }
    layers.push(if host.root {
        "memory: a cgroup of its own (memfd, shared memory and {tmp} pages count)".into()
    } else {
        "memory: rlimits only (address space; memfd pages bounded per file by limits.file_size)".into()
    });
    if let (true, Some(why)) = (host.root, &host.ipc_namespace_refused) {
        missing.push(format!("a private IPC namespace, which enforce mode requires as root ({why})"));
    }
    let private = host.root && host.ipc_namespace_refused.is_none();
    layers.push(
        match (private, spec.grants.sysv_ipc) {
            (true, _) => "IPC: a private namespace",
            (false, true) => "IPC: the host's SysV IPC and message queues (sysv_ipc = true)",
            (false, false) => "IPC: SysV IPC and message queues refused",
        }
        .into(),
    );
}

/// A process tool's layers that need its mount and network namespaces: file
/// metadata, write layers, protected and denied paths, and egress.
/// `missing`: what `enforce` refuses a call without; `weaker`: what it runs without.
fn process_namespace_layers(
    spec: &crate::policy::ToolSpec,
    host: &HostReport,
    layers: &mut Vec<String>,
    (missing, weaker): (&mut Vec<String>, &mut Vec<String>),
) {
    let refused = host.namespaces_refused.clone();
    // File metadata (mode, owner, times, xattrs) outside the write grants.
    match (refused.clone(), host.root) {
        (None, _) => layers.push(
            "file metadata: every mount but the call's own read-only (chmod, utime, xattrs refused \
             outside the write grants, at every uid)"
                .into(),
        ),
        (Some(_), true) => layers.push("file metadata: chmod, chown and xattrs refused to uid 0 (seccomp)".into()),
        (Some(why), false) => weaker.push(format!(
            "a read-only view for file metadata ({why}): the tool may change the mode and times of \
             any file its uid owns"
        )),
    }
    if spec.grants.writes() && refused.is_none() {
        layers.push("writes: a layer per write grant, each change judged before it reaches the host".into());
    }
    match crate::runtime::protect::preview(spec) {
        Ok(p) if p.is_empty() => {}
        Ok(p) => match &refused {
            None => layers.push(format!(
                "protected and denied paths ({}): read-only binds and masks in a mount namespace",
                p.rules.len() + p.patterns.iter().filter(|x| !p.rules.iter().any(|r| r.why == x.why)).count()
            )),
            Some(why) => missing.push(format!("a mount namespace for its protected and denied paths ({why})")),
        },
        Err(why) => missing.push(format!("its protected and denied paths: {why}")),
    }
    // The egress mechanism.
    match (&refused, spec.grants.net.is_empty()) {
        (None, true) => layers.push("network: a namespace of its own, loopback only".into()),
        (None, false) => layers.push(format!(
            "network: a namespace of its own whose one way out is warden's egress proxy \
             (each connection checked against {} grant(s) by host and port, names resolved by \
             warden, private addresses {}; no DNS or UDP out)",
            spec.grants.net.len(),
            if spec.grants.allow_private { "admitted (net.allow_private)" } else { "refused" }
        )),
        (Some(_), true) => layers.push("network: no sockets (seccomp)".into()),
        (Some(why), false) => missing.push(format!(
            "a network namespace for its net.connect grants ({why}); without one Landlock admits \
             every host on the granted ports"
        )),
    }
    if !spec.grants.unix.is_empty()
        && let Some(why) = &refused
    {
        // Refused in both modes: a socket path holds only in a root built from the grants.
        missing.push(format!("a root built from its grants, for its net.unix sockets ({why}){EVERY_MODE}"));
    }
}

/// A component tool's layers (it lacks none).
fn component_layers(spec: &crate::policy::ToolSpec) -> Vec<String> {
    let mut layers = vec![
        "WebAssembly component (no ambient authority)".to_string(),
        "granted directories only (preopens)".into(),
        "memory limiter".into(),
        "epoch deadline".into(),
    ];
    if !spec.grants.deny.is_empty() || spec.grants.writes() {
        layers.push("protected and denied paths refused by warden's WASI host".into());
    }
    layers.push(if spec.grants.net.is_empty() {
        "no sockets".into()
    } else {
        "network: warden's WASI host admits sockets to granted addresses only (names resolved by \
         warden, private addresses refused unless granted literally or net.allow_private)"
            .into()
    });
    layers
}

impl Report {
    /// Whether any finding is at least as severe as `threshold`.
    pub fn fails(&self, threshold: Option<Severity>) -> bool {
        threshold.is_some_and(|t| self.findings.iter().any(|f| f.severity >= t))
    }

    /// The readable form.
    pub fn to_text(&self) -> String {
        let h = &self.host;
        let opt = |v: Option<u64>| v.map_or("unknown".to_string(), |n| n.to_string());
        let mut out = format!("warden audit of {}\n\nHOST\n", self.policy);
        let rows = [
            ("kernel", h.kernel.clone()),
            (
                "landlock",
                if h.landlock_abi == 0 {
                    "none".into()
                } else {
                    format!("ABI {}: {}", h.landlock_abi, h.landlock_covers.join(", "))
                },
            ),
            (
                "seccomp",
                if h.seccomp { format!("available ({})", h.seccomp_actions.join(" ")) } else { "unavailable".into() },
            ),
            ("user namespaces", opt(h.max_user_namespaces).replace("unknown", "not configurable")),
            ("pid namespaces", opt(h.max_pid_namespaces)),
            (
                "cgroups",
                match h.cgroup_version {
                    Some(v) => format!("v{v}: {}", h.cgroup_controllers.join(" ")),
                    None => "none mounted".into(),
                },
            ),
            ("running as", if h.root { "root".into() } else { "an unprivileged user".to_string() }),
            ("yama ptrace_scope", opt(h.ptrace_scope)),
            ("legacy TIOCSTI", opt(h.legacy_tiocsti)),
            ("io_uring_disabled", opt(h.io_uring_disabled)),
            ("unprivileged bpf disabled", opt(h.unprivileged_bpf_disabled)),
        ];
        for (k, v) in rows {
            out.push_str(&format!("  {k:<26} {v}\n"));
        }
        out.push_str("\nTOOLS\n");
        for t in &self.tools {
            out.push_str(&format!("  {:<18} {:<9} {:<11} {}\n", t.tool, t.runtime, t.verdict, t.layers.join(", ")));
            if !t.missing.is_empty() {
                out.push_str(&format!("  {:<18} missing: {}\n", "", t.missing.join(", ")));
            }
        }
        if !self.provenance.is_empty() {
            out.push_str("\nPROVENANCE\n");
        }
        for p in &self.provenance {
            let sha = p.sha256.as_deref().map_or("-", |h| &h[..h.len().min(16)]);
            let signer = p.signer.as_deref().unwrap_or("unsigned");
            out.push_str(&format!("  {:<18} {:<16} {:<50} {}\n", p.plugin, sha, signer, p.source));
            if p.status != "loaded" {
                out.push_str(&format!("  {:<18} not loaded: {}\n", "", p.status));
            }
        }
        if let Some(cases) = &self.self_test {
            out.push_str("\nSELF-TEST\n");
            out.push_str(&format!("  {:<38} {:<10} {:<10} {}\n", "CASE", "RUNTIME", "RESULT", "OBSERVED"));
            for c in cases {
                let observed: String = c.observed.chars().take(100).collect();
                out.push_str(&format!(
                    "  {:<38} {:<10} {:<10} {}\n",
                    c.name,
                    c.runtime,
                    if c.contained { "contained" } else { "ESCAPED" },
                    observed
                ));
            }
            if let Some(layers) = cases.iter().find(|c| c.runtime == "process" && !c.layers.is_empty()) {
                out.push_str(&format!("  process layers in force: {}\n", layers.layers));
            }
        }
        out.push_str("\nFINDINGS\n");
        if self.findings.is_empty() {
            out.push_str("  none\n");
        }
        for f in &self.findings {
            out.push_str(&format!(
                "  {}:{}:{}: {} {} [{}] {}\n",
                f.file,
                f.line,
                f.column,
                f.severity.as_str(),
                f.rule,
                crate::lint::rule(f.rule).name,
                f.message
            ));
        }
        let errors = self.findings.iter().filter(|f| f.severity == Severity::Error).count();
        out.push_str(&format!("\n{errors} error(s), {} warning(s)\n", self.findings.len() - errors));
        out
    }
}
