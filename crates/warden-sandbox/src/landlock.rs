//! Landlock: filesystem rights from `fs.read`/`fs.write` (execute wherever read
//! is granted), TCP connect from `net.connect` ports, and — from ABI 6 — signal
//! and abstract-unix-socket scoping, so the tool cannot signal or connect to
//! anything outside its own domain.
//!
//! Landlock rules are allow-lists: what is not granted is refused, and a path
//! cannot be carved out of a granted tree. The ABI used is the best the kernel
//! offers (up to 6's feature set); the helper requests exactly that set with
//! `HardRequirement`, so anything the kernel would silently drop is an error.

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, RestrictionStatus,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::fs::{CWD, Mode, OFlags, ResolveFlags, openat2};

/// The oldest ABI `enforce` mode accepts: 4 adds TCP, so network grants are real.
pub const MIN_ENFORCED_ABI: u32 = 4;

/// The kernel's Landlock ABI version (0 when Landlock is missing or disabled).
pub fn kernel_abi() -> u32 {
    // SAFETY: landlock_create_ruleset with a NULL attribute, size 0 and the
    // VERSION flag only returns the ABI version (or -1 with errno); it reads no
    // memory and creates no file descriptor.
    #[allow(unsafe_code)]
    let v = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32 << 0)
    };
    u32::try_from(v).unwrap_or(0)
}

fn abi_of(v: u32) -> ABI {
    match v {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// What one call may reach on the filesystem and the network.
#[derive(Debug, Clone)]
pub struct LandlockRules {
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Read, write and execute.
    pub write: Vec<PathBuf>,
    /// TCP ports `connect` may reach; `None`: no TCP at all.
    pub connect_ports: Option<Vec<u16>>,
    /// The call has a network namespace of its own: TCP is not handled (it
    /// reaches only the namespace's loopback and warden's proxy).
    pub network_namespace: bool,
}

/// A rule for `path` (canonical: the host resolved it), opened without following
/// any symbolic link, so that a link planted since the host checked the path
/// fails the call rather than widening the grant; `None` when it is gone. A file
/// gets the rights that apply to files.
fn beneath(
    path: &std::path::Path,
    access: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<Option<PathBeneath<std::os::fd::OwnedFd>>, String> {
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let fd = match openat2(CWD, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(format!(
                "the granted path {} now passes through a symbolic link (planted since warden checked it): refused",
                path.display()
            ));
        }
        Err(e) => return Err(format!("cannot open the granted path {}: {e}", path.display())),
    };
    let is_dir =
        rustix::fs::fstat(&fd).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir()).unwrap_or(false);
    let access = if is_dir { access } else { access & AccessFs::from_file(abi) };
    Ok(Some(PathBeneath::new(fd, access)))
}

/// Restricts the calling thread (and what it execs) to `rules`. Returns the ABI enforced.
pub fn apply_to_current_thread(rules: &LandlockRules, abi_version: u32) -> Result<u32, String> {
    if abi_version == 0 {
        return Err("Landlock is not available in this kernel".into());
    }
    let used = abi_version.min(6);
    let abi = abi_of(used);
    let err = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    let net = used >= 4 && !rules.network_namespace;
    if net {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi)).map_err(err)?;
    }
    if used >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    for (paths, access) in [(&rules.read, AccessFs::from_read(abi)), (&rules.write, AccessFs::from_all(abi))] {
        for path in paths {
            if let Some(rule) = beneath(path, access, abi)? {
                created = created.add_rule(rule).map_err(err)?;
            }
        }
    }
    if net {
        for port in rules.connect_ports.iter().flatten() {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp)).map_err(err)?;
        }
    }
    let status: RestrictionStatus = created.restrict_self().map_err(err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(used),
        other => Err(format!("Landlock ruleset not fully enforced ({other:?})")),
    }
}
