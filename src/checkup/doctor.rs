//! `warden doctor`: each layer as the sandbox helper really gets it here (the
//! helper tries them: [`warden_sandbox::probe`]), what each tool of the policy
//! gets in `enforce` and in `best-effort` ([`super::tool_layers_in`], the
//! audit's judgement fed the helper's findings), and the fix for each missing
//! layer ([`super::fixes`]). The schema of [`Doctor`] is docs/doctor.md's.

use serde::Serialize;

use warden_sandbox::probe::HostProbe;

use super::fixes::{self, Facts, Fix};
use super::host::HostReport;
use super::{ToolLayers, tool_layers_in};
use crate::catalog::Catalog;
use crate::policy::{Policy, Runner, SandboxMode};

/// The version of the JSON document; bumped only when a field changes meaning or goes.
pub const SCHEMA: u32 = 1;
/// The shipped AppArmor profile, relative to the repository and the release archive.
pub const PROFILE_FILE: &str = "packaging/apparmor/warden-sandbox";

/// Everything `warden doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct Doctor {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The policy's origin.
    pub policy: String,
    /// Its `[sandbox] mode`.
    pub mode: SandboxMode,
    /// `ok` (every tool gets every layer in the policy's mode), `degraded`
    /// (some tool runs with a layer missing) or `refused` (some tool does not run).
    pub verdict: &'static str,
    /// The uid warden runs as.
    pub uid: u32,
    /// The sandbox helper binary that was probed (the one calls start).
    pub helper: String,
    /// The container warden runs in, when one is recognised.
    pub container: Option<&'static str>,
    /// AppArmor, as it bears on user namespaces.
    pub apparmor: AppArmor,
    /// Each layer, as the helper found it.
    pub layers: Vec<Layer>,
    /// Whether a call gets namespaces of its own, and why not.
    pub namespaces: Namespaces,
    /// Each tool's layers in both modes.
    pub tools: Vec<ToolVerdicts>,
    /// The fixes for what is missing.
    pub fixes: Vec<Fix>,
    /// The host report `warden audit` prints (sysctls, cgroups, Landlock coverage).
    pub host: HostReport,
}

/// AppArmor's part.
#[derive(Debug, Clone, Serialize)]
pub struct AppArmor {
    /// AppArmor is enabled (`None`: not in this kernel).
    pub enabled: Option<bool>,
    /// `kernel.apparmor_restrict_unprivileged_userns`.
    pub restrict_unprivileged_userns: Option<u64>,
    /// The label the helper runs under.
    pub helper_label: Option<String>,
    /// The profile shipped for the helper ([`PROFILE_FILE`]).
    pub profile: &'static str,
}

/// One layer.
#[derive(Debug, Clone, Serialize)]
pub struct Layer {
    /// `user`, `mount`, `pid`, `ipc`, `net`, `namespaces`, `overlayfs`, `landlock`, `seccomp`, `cgroup`.
    pub layer: String,
    /// `ok` or `missing`.
    pub status: &'static str,
    /// Whether a call here uses it (as root: no user namespace; unprivileged: no cgroup).
    pub needed: bool,
    /// What the helper did, or what refused it.
    pub detail: String,
    /// The ids of the [`Fix`]es that bring it back.
    pub fix: Vec<&'static str>,
}

/// The namespaces verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Namespaces {
    /// A call gets its mount, pid, IPC and network namespaces (and a user namespace when not root).
    pub available: bool,
    /// Why not.
    pub reason: Option<String>,
}

/// One tool in both modes.
#[derive(Debug, Clone, Serialize)]
pub struct ToolVerdicts {
    /// The tool.
    pub tool: String,
    /// `process`, `mcp-server` or `component`.
    pub runtime: &'static str,
    /// Under `mode = "enforce"`.
    pub enforce: ModeVerdict,
    /// Under `mode = "best-effort"`.
    pub best_effort: ModeVerdict,
}

/// One tool in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct ModeVerdict {
    /// `runs`, `degraded`, `refused` or `unavailable`.
    pub verdict: &'static str,
    /// The layers that hold.
    pub layers: Vec<String>,
    /// The layers that are missing.
    pub missing: Vec<String>,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl From<ToolLayers> for ModeVerdict {
    fn from(t: ToolLayers) -> ModeVerdict {
        ModeVerdict { verdict: t.verdict, layers: t.layers, missing: t.missing, unavailable: t.unavailable }
    }
}

fn number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The container this process runs in, from the marks container runtimes leave.
fn container() -> Option<&'static str> {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::path::Path::new("/var/run/secrets/kubernetes.io").exists()
    {
        return Some("a Kubernetes pod");
    }
    if std::path::Path::new("/run/.containerenv").exists() {
        return Some("a Podman container");
    }
    if std::path::Path::new("/.dockerenv").exists() {
        return Some("a Docker container");
    }
    let cgroup = std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
    ["docker", "kubepods", "containerd", "libpod", "lxc"].iter().any(|m| cgroup.contains(m)).then_some("a container")
}

/// Judges `policy` (its `catalog`) on this host, as the helper `probe` found it.
pub fn examine(policy: &Policy, catalog: &Catalog, probe: HostProbe) -> Doctor {
    let mut host = HostReport::probe();
    let root = host.root;
    let tried = |name: &str| probe.layers.iter().find(|l| l.layer == name);
    // The helper's findings, not warden's own view: they are what a call gets.
    host.landlock_abi = probe.landlock_abi;
    host.seccomp = tried("seccomp").is_some_and(|l| l.ok);
    let switch = warden_sandbox::namespaces::NsSupport::probe(root).reason;
    let refused = switch.or_else(|| {
        tried("namespaces").filter(|l| !l.ok).map(|l| format!("the sandbox helper could not make them ({})", l.detail))
    });
    host.namespaces_refused = refused.clone();
    if root {
        host.ipc_namespace_refused = tried("ipc").filter(|l| !l.ok).map(|l| l.detail.clone());
    }

    let mut tools: Vec<ToolVerdicts> = tool_layers_in(SandboxMode::Enforce, policy, catalog, &host)
        .into_iter()
        .zip(tool_layers_in(SandboxMode::BestEffort, policy, catalog, &host))
        .map(|(e, b)| ToolVerdicts {
            tool: e.tool.clone(),
            runtime: e.runtime,
            enforce: e.into(),
            best_effort: b.into(),
        })
        .collect();
    if refused.is_none()
        && let Some(overlay) = tried("overlayfs").filter(|l| !l.ok)
    {
        overlay_missing(&mut tools, catalog, &overlay.detail);
    }

    let facts = Facts {
        host: &host,
        probe: &probe,
        apparmor_restrict: number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        userns_clone: number("/proc/sys/kernel/unprivileged_userns_clone"),
        container: container(),
    };
    // Without namespaces an overlay cannot be mounted either: the namespaces' fix is the one.
    let consequence =
        |l: &str| refused.is_some() && matches!(l, "user" | "mount" | "pid" | "ipc" | "net" | "overlayfs");
    let failed: Vec<&str> =
        probe.layers.iter().filter(|l| !l.ok && !consequence(&l.layer)).map(|l| l.layer.as_str()).collect();
    let mut fixes = refused.as_deref().map(|why| fixes::namespaces(&facts, why)).unwrap_or_default();
    fixes.extend(fixes::other(&facts, &failed));
    let layers = probe
        .layers
        .iter()
        .map(|l| {
            let ok =
                l.ok && (l.layer != "landlock" || probe.landlock_abi >= warden_sandbox::landlock::MIN_ENFORCED_ABI);
            let needed = match l.layer.as_str() {
                "user" => !root,
                "cgroup" => root,
                _ => true,
            };
            let fix = fixes.iter().filter(|f| !ok && f.layers.contains(&l.layer.as_str())).map(|f| f.id).collect();
            Layer {
                layer: l.layer.clone(),
                status: if ok { "ok" } else { "missing" },
                needed,
                detail: l.detail.clone(),
                fix,
            }
        })
        .collect();
    let in_mode =
        |t: &ToolVerdicts| if policy.mode == SandboxMode::Enforce { t.enforce.verdict } else { t.best_effort.verdict };
    let verdict = if tools.iter().any(|t| matches!(in_mode(t), "refused" | "unavailable")) {
        "refused"
    } else if tools.iter().any(|t| in_mode(t) == "degraded") {
        "degraded"
    } else {
        "ok"
    };
    Doctor {
        schema: SCHEMA,
        policy: policy.origin.clone(),
        mode: policy.mode,
        verdict,
        uid: probe.uid,
        helper: probe.helper.clone(),
        container: facts.container,
        apparmor: AppArmor {
            enabled: std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").ok().map(|s| s.trim() == "Y"),
            restrict_unprivileged_userns: facts.apparmor_restrict,
            helper_label: probe.apparmor_label.clone(),
            profile: PROFILE_FILE,
        },
        layers,
        namespaces: Namespaces { available: refused.is_none(), reason: refused },
        tools,
        fixes,
        host,
    }
}

/// A process tool with write grants gets a layer (an overlay) per grant: where
/// the helper cannot mount one, its calls fail in either mode.
fn overlay_missing(tools: &mut [ToolVerdicts], catalog: &Catalog, why: &str) {
    for t in tools.iter_mut() {
        let writes = catalog.entries().any(|e| {
            e.spec.name == t.tool
                && matches!(e.spec.runner, Runner::Process(_) | Runner::Server(_))
                && e.spec.grants.writes()
        });
        if !writes {
            continue;
        }
        for m in [&mut t.enforce, &mut t.best_effort] {
            m.missing.push(format!("an overlay for its write grants ({why}): refused in every mode"));
            if m.verdict != "unavailable" {
                m.verdict = "refused";
            }
        }
    }
}

impl Doctor {
    /// The exit status: 0 `ok`, 1 `degraded`, 5 `refused` (README.md, "Use": sandbox unavailable).
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            "ok" => 0,
            "degraded" => 1,
            _ => crate::error::ErrorCode::SandboxUnavailable.exit_code(),
        }
    }

    /// The readable form.
    pub fn to_text(&self) -> String {
        let mode = if self.mode == SandboxMode::Enforce { "enforce" } else { "best-effort" };
        let mut out = format!(
            "warden doctor: {} (mode {mode}) as uid {}\nhelper {}{}{}\n\nLAYERS\n",
            self.policy,
            self.uid,
            self.helper,
            self.apparmor.helper_label.as_deref().map(|l| format!(" (AppArmor: {l})")).unwrap_or_default(),
            self.container.map(|c| format!(", in {c}")).unwrap_or_default(),
        );
        for l in &self.layers {
            let status = match (l.status, l.needed) {
                ("ok", _) => "ok",
                (_, true) => "MISSING",
                (_, false) => "unneeded",
            };
            let fix = if l.fix.is_empty() { String::new() } else { format!("  [fix: {}]", l.fix.join(", ")) };
            out.push_str(&format!("  {:<11} {:<9} {}{fix}\n", l.layer, status, l.detail));
        }
        out.push_str(&match &self.namespaces.reason {
            None => "\nA call gets namespaces of its own here.\n".to_string(),
            Some(why) => format!("\nA call gets NO namespaces of its own here: {why}\n"),
        });
        out.push_str(&format!("\nTOOLS{:<26}{:<12}{}\n", "", "ENFORCE", "BEST-EFFORT"));
        for t in &self.tools {
            out.push_str(&format!(
                "  {:<18} {:<9} {:<11} {}\n",
                t.tool, t.runtime, t.enforce.verdict, t.best_effort.verdict
            ));
            for (m, v) in [("enforce", &t.enforce), ("best-effort", &t.best_effort)] {
                if let Some(why) = &v.unavailable {
                    out.push_str(&format!("      {m}: unavailable: {why}\n"));
                }
            }
            // Missing layers are the same list in both modes; best-effort's says what it runs without.
            for m in &t.best_effort.missing {
                out.push_str(&format!("      missing: {m}\n"));
            }
        }
        if !self.fixes.is_empty() {
            out.push_str("\nFIXES\n");
        }
        for f in &self.fixes {
            out.push_str(&format!("  [{}] for {}: {}\n", f.id, f.layers.join(", "), f.cause));
            for s in &f.steps {
                for (i, line) in s.lines().enumerate() {
                    out.push_str(&format!("      {}{line}\n", if i == 0 { "- " } else { "  " }));
                }
            }
        }
        out.push_str(&format!(
            "\nverdict: {} (exit {}): {}\n",
            self.verdict,
            self.exit_code(),
            match self.verdict {
                "ok" => "every tool gets every layer in this mode".to_string(),
                "degraded" => "some tool runs with a layer missing".to_string(),
                _ => format!("some tool does not run in mode {mode}"),
            }
        ));
        out
    }
}
