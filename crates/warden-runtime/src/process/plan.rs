//! A process call's [`SandboxSpec`] as a pure function ([`spec`]) of what it is
//! made from: the call's walls, the host's facts ([`Host`]) and what the host
//! made for it ([`Made`]). It touches no file, clock or process, so what the
//! helper is told to do is golden-tested (`tests/fixtures/plan/`).

use std::path::Path;

use crate::Walls;
use crate::layer::LayerRoot;
use crate::policy::SandboxMode;
use warden_sandbox::spec::{CgroupJoin, NsPlan, RlimitSpec, SandboxSpec, TmpQuota};

/// What the host is, as the runtime found it.
#[derive(Debug, Clone, Copy)]
pub struct Host {
    /// warden runs as root.
    pub root: bool,
    /// The call gets namespaces of its own.
    pub namespaces: bool,
    /// `[sandbox] mode`.
    pub mode: SandboxMode,
    /// warden's pid (the helper checks it is still its parent).
    pub parent_pid: u32,
    /// Processes this user already runs (without root `RLIMIT_NPROC` counts them).
    pub user_processes: u64,
}

/// How the program starts.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// The helper socket becomes its stdin (an MCP server).
    pub stdin_from_host: bool,
    /// `warden run`: warden's own stdin is passed to it.
    pub stdin_passed: bool,
    /// A progress pipe is passed to it.
    pub progress: bool,
}

/// What the host made for this call before the helper starts.
#[derive(Debug, Clone, Default)]
pub struct Made {
    /// The call's layers, one per written root.
    pub layers: Vec<LayerRoot>,
    /// Every write grant goes through a layer (none was needed, or they were made).
    pub layers_cover_writes: bool,
    /// The call's cgroups, for the helper to join (as root).
    pub cgroup: Option<CgroupJoin>,
    /// The user the tool runs as: the workspace's owner, when warden is root.
    pub run_as: Option<(u32, u32)>,
}

/// One call's spec, from its parts.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The command line, its program resolved.
    pub argv: Vec<String>,
    /// The working directory.
    pub cwd: &'a Path,
    /// The call's walls.
    pub walls: &'a Walls,
    /// The call's `{tmp}`.
    pub tmp: Option<&'a Path>,
    /// The host.
    pub host: Host,
    /// How the program starts.
    pub start: Start,
    /// What the host made.
    pub made: Made,
}

/// The spec the helper applies for `r`.
pub fn spec(r: Request<'_>) -> SandboxSpec {
    let Request { argv, cwd, walls, tmp, host, start, made } = r;
    let limits = walls.limits;
    let ns = host.namespaces;
    let enforce = host.mode == SandboxMode::Enforce;
    // The proxy listens in every call with a network namespace: with no
    // `net.connect` grant it refuses every destination, so a program that
    // honours the proxy settings (npm, pip, cargo, curl, git) fails at once
    // with a 403 naming the grant, not after its own retries of a lookup
    // that cannot succeed, and the refusal lands in the record and the hints.
    let proxied = ns;
    let mut env = walls.env.clone();
    // A layer is a file system of its own: git, started beneath one, must
    // look past it for the repository around it (a monorepo's package).
    if !made.layers.is_empty() && !env.iter().any(|(k, _)| k == "GIT_DISCOVERY_ACROSS_FILESYSTEM") {
        env.push(("GIT_DISCOVERY_ACROSS_FILESYSTEM".into(), "1".into()));
    }
    if proxied {
        for (name, value) in crate::egress::proxy_env(&walls.net) {
            if !env.iter().any(|(k, _)| k == name) {
                env.push((name.to_string(), value));
            }
        }
    }
    SandboxSpec {
        argv,
        env,
        cwd: cwd.to_path_buf(),
        read: walls.dirs.iter().filter(|(_, w)| !w).map(|(p, _)| p.clone()).collect(),
        write: walls.dirs.iter().filter(|(_, w)| *w).map(|(p, _)| p.clone()).collect(),
        links: walls.links.clone(),
        unix: walls.unix.clone(),
        // With a network namespace the proxy is the way out; without one
        // (best-effort mode) Landlock's ports are all there is.
        net_ports: if walls.net.is_empty() || ns { None } else { Some(walls.net.iter().map(|g| g.port).collect()) },
        udp: !ns && walls.net.iter().any(|g| g.host.parse::<std::net::IpAddr>().is_err()),
        limits: RlimitSpec {
            cpu_secs: limits.cpu.as_secs_f64().ceil() as u64,
            address_space: limits.memory,
            processes: (!host.root).then(|| host.user_processes + u64::from(limits.processes)),
            processes_in_userns: (ns && !host.root).then(|| u64::from(limits.processes) + 2),
            open_files: u64::from(limits.open_files),
            file_size: limits.file_size,
        },
        tmp_quota: match tmp {
            Some(path) if host.root || ns => Some(TmpQuota {
                path: path.to_path_buf(),
                size: limits.tmp_size,
                files: limits.tmp_files,
                required: enforce && host.root,
            }),
            _ => None,
        },
        cgroup: made.cgroup,
        ipc_namespace: host.root,
        sysv_ipc: walls.sysv_ipc,
        inotify: walls.inotify,
        run_as: made.run_as,
        drop_caps: host.root,
        require_landlock: enforce,
        require_seccomp: enforce,
        parent_pid: host.parent_pid,
        stdin_from_host: start.stdin_from_host,
        stdin_passed: start.stdin_passed,
        progress: start.progress,
        namespaces: ns.then_some(NsPlan {
            user: !host.root,
            ipc: true,
            shm: walls.system,
            shm_size: limits.tmp_size,
            shm_files: limits.tmp_files,
            net: true,
            proxy: proxied,
            required: enforce && (!walls.protect.rules.is_empty() || !walls.net.is_empty()),
        }),
        rules: if ns { walls.protect.rules.clone() } else { Vec::new() },
        system: walls.system,
        layers: made.layers,
        layers_cover_writes: made.layers_cover_writes,
    }
}

#[cfg(test)]
mod tests {
    //! Golden specs: each case's spec, as the helper receives it, is compared
    //! with `tests/fixtures/plan/<case>.json`. After a deliberate change, rerun
    //! with `WARDEN_BLESS=1` and review the diff of the fixtures.
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::policy::{Limits, NetGrant};
    use crate::protect::{Deny, Kind, PathRule, Protection};

    fn limits() -> Limits {
        Limits {
            timeout: Duration::from_secs(30),
            memory: 256 << 20,
            max_output: 1 << 20,
            cpu: Duration::from_secs(30),
            processes: 64,
            open_files: 256,
            file_size: 64 << 20,
            tmp_size: 64 << 20,
            tmp_files: 4096,
        }
    }

    /// A CI job's walls: `{system}`, the workspace written, `{tmp}`, one
    /// registry, `.git/hooks` protected.
    fn ci_walls() -> Walls {
        Walls {
            dirs: vec![
                ("/usr".into(), false),
                ("/etc/ssl".into(), false),
                ("/ws".into(), true),
                ("/tmp/warden-tmp-1".into(), true),
            ],
            links: vec!["/lib64".into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into()), ("HOME".into(), "/tmp/warden-tmp-1".into())],
            net: vec![NetGrant { host: "registry.npmjs.org".into(), port: 443 }],
            unix: Vec::new(),
            allow_private: false,
            journal: Arc::default(),
            limits: limits(),
            workspace: "/ws".into(),
            tmp: Some("/tmp/warden-tmp-1".into()),
            sysv_ipc: false,
            inotify: false,
            system: true,
            protect: Protection {
                rules: vec![PathRule {
                    path: "/ws/.git/hooks".into(),
                    deny: Deny::Write,
                    kind: Kind::Dir,
                    root: "/ws".into(),
                    why: "protected: git runs these hooks on the host".into(),
                }],
                ..Protection::default()
            },
            credentials: Vec::new(),
        }
    }

    /// A read-only tool: the workspace read, nothing else.
    fn reader_walls() -> Walls {
        Walls {
            dirs: vec![("/ws".into(), false)],
            links: Vec::new(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            net: Vec::new(),
            unix: Vec::new(),
            allow_private: false,
            journal: Arc::default(),
            limits: limits(),
            workspace: "/ws".into(),
            tmp: None,
            sysv_ipc: false,
            inotify: false,
            system: false,
            protect: Protection::default(),
            credentials: Vec::new(),
        }
    }

    fn request<'a>(walls: &'a Walls, host: Host, made: Made) -> Request<'a> {
        Request {
            argv: vec!["/usr/bin/npm".into(), "test".into()],
            cwd: Path::new("/ws"),
            walls,
            tmp: walls.tmp.as_deref(),
            host,
            start: Start { stdin_from_host: false, stdin_passed: false, progress: true },
            made,
        }
    }

    fn host(root: bool, namespaces: bool, mode: SandboxMode) -> Host {
        Host { root, namespaces, mode, parent_pid: 4242, user_processes: 17 }
    }

    fn golden(case: &str, spec: &SandboxSpec) {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/plan").join(format!("{case}.json"));
        let got = serde_json::to_string_pretty(spec).unwrap_or_default() + "\n";
        if std::env::var_os("WARDEN_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap_or_default();
            std::fs::write(&path, &got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            return;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (WARDEN_BLESS=1 writes it)", path.display()));
        assert!(
            got == want,
            "the spec of {case} changed; if that is meant, rerun with WARDEN_BLESS=1 and review the fixture's diff\n{}",
            similar::TextDiff::from_lines(&want, &got).unified_diff().header("expected", "planned")
        );
    }

    #[test]
    fn as_root_a_ci_job_is_a_layered_view_with_the_proxy_as_the_only_way_out() {
        let walls = ci_walls();
        let made = Made {
            layers: vec![LayerRoot {
                root: "/ws".into(),
                upper: "/var/lib/warden/layers/c1/0/upper".into(),
                work: "/var/lib/warden/layers/c1/0/work".into(),
            }],
            layers_cover_writes: true,
            cgroup: Some(CgroupJoin { name: "warden-c1".into(), hierarchies: 2, join: Vec::new() }),
            run_as: Some((1000, 1000)),
        };
        golden("root-ci-job", &spec(request(&walls, host(true, true, SandboxMode::Enforce), made)));
    }

    #[test]
    fn as_a_user_the_call_gets_a_user_namespace_and_an_nproc_limit_counted_from_what_runs() {
        let walls = ci_walls();
        let made = Made { layers_cover_writes: true, ..Made::default() };
        let s = spec(request(&walls, host(false, true, SandboxMode::Enforce), made));
        assert_eq!(s.limits.processes, Some(17 + 64), "RLIMIT_NPROC counts the user's processes");
        golden("user-ci-job", &s);
    }

    #[test]
    fn a_read_only_tool_without_namespaces_in_best_effort_mode() {
        let mut walls = reader_walls();
        walls.net = vec![NetGrant { host: "example.com".into(), port: 443 }];
        let made = Made { layers_cover_writes: true, ..Made::default() };
        let s = spec(request(&walls, host(false, false, SandboxMode::BestEffort), made));
        // Without a network namespace there is no proxy: Landlock's ports, and DNS over UDP.
        assert_eq!(s.net_ports, Some(vec![443]));
        assert!(s.udp && s.namespaces.is_none() && s.rules.is_empty());
        golden("user-best-effort-reader", &s);
    }
}
