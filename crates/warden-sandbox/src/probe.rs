//! `warden-sandbox --warden-sandbox-probe` ([`run_main`]): each layer a call
//! could get, tried for real, each in a forked child of its own, by the helper
//! binary a call really starts (an AppArmor profile or a container's seccomp
//! profile judges that binary, not the `warden` that asks). Prints one JSON
//! [`HostProbe`] on stdout; `warden doctor` reads it. Nothing outlives the probe:
//! each namespace dies with its child, the one cgroup made is removed.

use std::io::{Read, Write};

use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use serde::{Deserialize, Serialize};

/// The first argument that makes the helper binary run the probe.
pub const PROBE_ARG: &str = "--warden-sandbox-probe";
/// The most bytes one attempt reports.
const MAX_DETAIL: usize = 2048;

/// One layer, tried.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerProbe {
    /// `user`, `mount`, `pid`, `ipc`, `net`, `namespaces` (all of them at once,
    /// as a call asks), `overlayfs`, `landlock`, `seccomp`, `cgroup`.
    pub layer: String,
    /// The attempt worked.
    pub ok: bool,
    /// What it did, or the error that refused it.
    pub detail: String,
}

/// What the probe found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostProbe {
    /// The probe's uid.
    pub uid: u32,
    /// The binary that ran the probe.
    pub helper: String,
    /// The AppArmor label the helper runs under (`unconfined`, or a profile's name and mode).
    pub apparmor_label: Option<String>,
    /// `/proc/self/status`'s `Seccomp:` (2: a filter was already installed on the probe, as in a container).
    pub seccomp_mode: Option<u64>,
    /// The Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// Each layer, tried.
    pub layers: Vec<LayerProbe>,
}

/// The most bytes of report [`run_helper`] reads.
const MAX_REPORT: usize = 64 << 10;
/// How long [`run_helper`] waits for the probe.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs the probes named after [`PROBE_ARG`] (every one when none is), prints
/// the result, exits 0.
pub fn run_main() -> ! {
    let only: Vec<String> = std::env::args().skip(2).collect();
    let probe = probe_all(&only);
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &probe);
    let _ = writeln!(out);
    let _ = out.flush();
    std::process::exit(0)
}

/// Runs `helper PROBE_ARG LAYER…` (every layer when `layers` is empty) and
/// reads its report: at most [`MAX_REPORT`] bytes, within [`DEADLINE`].
pub fn run_helper(helper: &std::path::Path, layers: &[&str]) -> Result<HostProbe, String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(helper)
        .arg(PROBE_ARG)
        .args(layers)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run the sandbox helper {}: {e}", helper.display()))?;
    let mut out = Vec::new();
    let read = child.stdout.take().map(|mut stdout| {
        let started = std::time::Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&stdout), nix::poll::PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, ms) {
                Ok(0) if left.is_zero() => return Err(format!("the probe took longer than {DEADLINE:?}")),
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(format!("poll: {e}")),
                Ok(_) => {}
            }
            match stdout.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) if out.len() + n <= MAX_REPORT => out.extend_from_slice(&buf[..n]),
                Ok(_) => return Err(format!("the probe said more than {MAX_REPORT} bytes")),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("cannot read the probe: {e}")),
            }
        }
    });
    if !matches!(read, Some(Ok(()))) {
        let _ = child.kill();
    }
    let _ = child.wait();
    read.unwrap_or(Ok(()))?;
    serde_json::from_slice(&out).map_err(|e| {
        format!("the sandbox helper {} gave no probe report ({e}); is it warden's helper?", helper.display())
    })
}

/// Whether the sandbox helper can make a call's namespaces: tried once per
/// process, by the helper binary a call starts (an AppArmor profile judges that
/// binary). `Err` says why not.
pub fn helper_namespaces() -> Result<(), String> {
    static TRIED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    TRIED
        .get_or_init(|| {
            let helper = crate::helper::default_helper().ok_or("no sandbox helper binary was found")?;
            let probe = run_helper(&helper, &["namespaces"])?;
            match probe.layers.iter().find(|l| l.layer == "namespaces") {
                Some(l) if l.ok => Ok(()),
                Some(l) => Err(l.detail.clone()),
                None => Err("the sandbox helper did not try".into()),
            }
        })
        .clone()
}

/// One layer's attempt: what it did, or what refused it.
type Attempt = dyn Fn() -> Result<String, String>;

/// The probes named in `only` (every one when it is empty), in the order a call's helper needs them.
pub fn probe_all(only: &[String]) -> HostProbe {
    let root = nix::unistd::geteuid().is_root();
    // As root a call gets no user namespace (it needs none); otherwise every other one is made inside one.
    let user = if root { CloneFlags::empty() } else { CloneFlags::CLONE_NEWUSER };
    let all = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWNET;
    let probes: [(&str, Box<Attempt>); 10] = [
        ("user", Box::new(|| unshare(CloneFlags::CLONE_NEWUSER))),
        (
            "mount",
            Box::new(move || {
                unshare(user | CloneFlags::CLONE_NEWNS)?;
                private_tmpfs()
            }),
        ),
        ("pid", Box::new(move || pid_namespace(user))),
        ("ipc", Box::new(move || unshare(user | CloneFlags::CLONE_NEWIPC))),
        (
            "net",
            Box::new(move || {
                unshare(user | CloneFlags::CLONE_NEWNET)?;
                crate::netns::loopback_up().map(|()| "loopback up".into())
            }),
        ),
        (
            "namespaces",
            Box::new(move || {
                let made = unshare(user | all)?;
                crate::netns::loopback_up()?;
                Ok(made)
            }),
        ),
        ("overlayfs", Box::new(move || overlay(!root))),
        ("landlock", Box::new(landlock)),
        ("seccomp", Box::new(seccomp)),
        ("cgroup", Box::new(cgroup)),
    ];
    let layers = probes
        .iter()
        .filter(|(name, _)| only.is_empty() || only.iter().any(|o| o == name))
        .map(|(name, f)| attempt(name, f))
        .collect();
    HostProbe {
        uid: nix::unistd::geteuid().as_raw(),
        helper: std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
        apparmor_label: ["/proc/self/attr/apparmor/current", "/proc/self/attr/current"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim_matches(['\0', '\n', ' ']).to_string()),
        seccomp_mode: std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Seccomp:")).and_then(|v| v.trim().parse().ok())),
        landlock_abi: crate::landlock::kernel_abi(),
        layers,
    }
}

/// Runs `f` in a forked child and returns what it said; the child's end
/// (namespaces, filters, mounts) is the child's alone.
fn attempt(layer: &str, f: impl FnOnce() -> Result<String, String>) -> LayerProbe {
    let result = in_child(f);
    let (ok, detail) = match result {
        Ok(d) => (true, d),
        Err(e) => (false, e),
    };
    LayerProbe { layer: layer.into(), ok, detail }
}

fn in_child(f: impl FnOnce() -> Result<String, String>) -> Result<String, String> {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe2: {e}"))?;
    // SAFETY: the probe is single-threaded (it runs before any thread exists), so the child may run any code.
    #[allow(unsafe_code)]
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Child => {
            drop(read_end);
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            let line = match f() {
                Ok(d) => format!("ok:{d}"),
                Err(e) => format!("no:{e}"),
            };
            let mut w = std::fs::File::from(write_end);
            let _ = w.write_all(&line.as_bytes()[..line.len().min(MAX_DETAIL)]);
            // SAFETY: _exit ends the child without running the parent's exit handlers.
            #[allow(unsafe_code)]
            unsafe {
                libc::_exit(0)
            }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            let mut said = Vec::new();
            let _ = std::fs::File::from(read_end).take(MAX_DETAIL as u64).read_to_end(&mut said);
            let status = nix::sys::wait::waitpid(child, None);
            let said = String::from_utf8_lossy(&said).into_owned();
            match said.split_once(':') {
                Some(("ok", d)) => Ok(d.to_string()),
                Some(("no", e)) => Err(e.to_string()),
                _ => Err(format!("the probe's child ended without a word ({status:?})")),
            }
        }
    }
}

/// `unshare(flags)`, then the uid and gid maps a call's helper writes when a
/// user namespace is among them.
fn unshare(flags: CloneFlags) -> Result<String, String> {
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    nix::sched::unshare(flags).map_err(|e| format!("unshare({}): {e}", names(flags)))?;
    if flags.contains(CloneFlags::CLONE_NEWUSER) {
        std::fs::write("/proc/self/setgroups", "deny").map_err(|e| format!("cannot write setgroups: {e}"))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(|e| format!("uid_map: {e}"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(|e| format!("gid_map: {e}"))?;
    }
    Ok(format!("made ({})", names(flags)))
}

fn names(flags: CloneFlags) -> String {
    [
        (CloneFlags::CLONE_NEWUSER, "user"),
        (CloneFlags::CLONE_NEWNS, "mount"),
        (CloneFlags::CLONE_NEWPID, "pid"),
        (CloneFlags::CLONE_NEWIPC, "ipc"),
        (CloneFlags::CLONE_NEWNET, "net"),
    ]
    .iter()
    .filter(|(f, _)| flags.contains(*f))
    .map(|(_, n)| *n)
    .collect::<Vec<_>>()
    .join(", ")
}

/// The mounts private (as the helper makes them), then a tmpfs on `/tmp`.
fn private_tmpfs() -> Result<String, String> {
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| format!("mount / MS_SLAVE: {e}"))?;
    nix::mount::mount(Some("tmpfs"), "/tmp", Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("size=1m"))
        .map_err(|e| format!("mount a tmpfs: {e}"))?;
    Ok("the mounts made private, a tmpfs mounted".into())
}

/// A pid namespace: its first child is pid 1 and mounts its own `/proc`.
fn pid_namespace(user: CloneFlags) -> Result<String, String> {
    unshare(user | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS)?;
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| format!("mount / MS_SLAVE: {e}"))?;
    in_child(|| {
        if nix::unistd::getpid().as_raw() != 1 {
            return Err(format!("the first child is pid {}, not 1", nix::unistd::getpid()));
        }
        Ok(if crate::namespaces::mount_proc() {
            "pid 1 of its own; a private /proc".into()
        } else {
            "pid 1 of its own; the kernel refused a private /proc (the host's is kept)".into()
        })
    })
}

/// An overlay mounted as a call's layer is (`userxattr` in a user namespace).
fn overlay(userns: bool) -> Result<String, String> {
    let user = if userns { CloneFlags::CLONE_NEWUSER } else { CloneFlags::empty() };
    unshare(user | CloneFlags::CLONE_NEWNS)?;
    private_tmpfs()?;
    for d in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir(format!("/tmp/{d}")).map_err(|e| format!("mkdir /tmp/{d}: {e}"))?;
    }
    let options = format!(
        "lowerdir=/tmp/lower,upperdir=/tmp/upper,workdir=/tmp/work,redirect_dir=nofollow,metacopy=off,index=off{}",
        if userns { ",userxattr" } else { "" }
    );
    nix::mount::mount(Some("overlay"), "/tmp/merged", Some("overlay"), MsFlags::empty(), Some(options.as_str()))
        .map_err(|e| format!("mount overlay: {e}"))?;
    std::fs::write("/tmp/merged/probe", "x").map_err(|e| format!("write through the overlay: {e}"))?;
    Ok("an overlay mounted and written through".into())
}

/// A Landlock ruleset that grants reads of `/` only, then a write it must refuse.
fn landlock() -> Result<String, String> {
    let abi = crate::landlock::kernel_abi();
    let rules = crate::landlock::LandlockRules {
        read: vec!["/".into()],
        write: Vec::new(),
        connect_ports: None,
        network_namespace: false,
    };
    let used = crate::landlock::apply_to_current_thread(&rules, abi)?;
    match std::fs::create_dir("/tmp/.warden-doctor-landlock") {
        Ok(()) => {
            let _ = std::fs::remove_dir("/tmp/.warden-doctor-landlock");
            Err(format!("ABI {abi}: a ruleset was applied but a write outside it went through"))
        }
        Err(e) => Ok(format!("ABI {abi} (warden uses {used}): a write outside the rules was refused ({e})")),
    }
}

/// The helper's own seccomp filters, installed; then a call they refuse.
fn seccomp() -> Result<String, String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    let me = std::process::id();
    let target = crate::seccomp::Target {
        net: false,
        udp: false,
        host_pid: me,
        host_pgid: me,
        uid0: false,
        ipc: false,
        inotify: false,
        pid_namespace: false,
        network_namespace: false,
        unix: false,
    };
    crate::seccomp::apply_to_current_thread(&crate::seccomp::build(target)?)?;
    let mut params = [0u8; 120]; // struct io_uring_params
    // SAFETY: io_uring_setup(entries, params) writes at most sizeof(io_uring_params) = 120 bytes.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) };
    if fd >= 0 {
        return Err("the filters were installed but io_uring_setup still worked".into());
    }
    Ok(format!("the call's filters installed; io_uring_setup refused ({})", std::io::Error::last_os_error()))
}

/// Whether this user may make a cgroup beneath its own (delegation), and which
/// version and controllers there are.
fn cgroup() -> Result<String, String> {
    let own =
        std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let base = if v2 {
        let path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/");
        std::path::PathBuf::from(format!("/sys/fs/cgroup{}", path.trim_end_matches('/')))
    } else {
        let path = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            names.split(',').any(|n| n == "pids").then(|| path.to_string())
        });
        let Some(path) = path else { return Err("cgroup v1 without a pids hierarchy".into()) };
        std::path::PathBuf::from(format!("/sys/fs/cgroup/pids{}", path.trim_end_matches('/')))
    };
    let dir = base.join(format!("warden-doctor-{}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| {
        format!(
            "v{}: cannot make a cgroup beneath {} ({e}): not delegated to this user",
            if v2 { 2 } else { 1 },
            base.display()
        )
    })?;
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let _ = std::fs::remove_dir(&dir);
    Ok(format!(
        "v{}: a cgroup made and removed beneath {}{}",
        if v2 { 2 } else { 1 },
        base.display(),
        if v2 { format!(" (controllers: {})", controllers.trim()) } else { String::new() }
    ))
}
