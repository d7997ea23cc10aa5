//! The seccomp filters of a process call, built as pure data ([`build`], from a
//! [`Target`]) and installed last, just before `execve`
//! ([`apply_to_current_thread`]): an architecture guard (x86_64 only, x32
//! numbers refused), then an `ENOSYS` filter and an `EPERM` filter. What each
//! refuses and why, call by call, is in docs/security.md (the seccomp rows of
//! "Process tools", and "Network: one way out" for a call's network namespace).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

const EPERM: u32 = libc::EPERM as u32;
const ENOSYS: u32 = libc::ENOSYS as u32;
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

const ENOSYS_CALLS: &[i64] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_clone3,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    467, // open_tree_attr
];

const EPERM_CALLS: &[i64] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_personality,
    libc::SYS_setsid,
    libc::SYS_setpgid,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_fanotify_init,
];

/// SysV IPC and POSIX message queues: kernel objects that outlive the process
/// (refused unless the call has a private IPC namespace, or `sysv_ipc = true`).
const IPC_CALLS: &[i64] = &[
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_shmctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
];

/// Calls whose first argument is a pid (0: the caller) and that change the
/// target's resources or scheduling: refused for any pid but 0.
const OWN_PID_ONLY_CALLS: &[i64] = &[
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setattr,
    libc::SYS_migrate_pages,
    libc::SYS_move_pages,
];

/// `MSG_FASTOPEN`: a send that connects first (TCP Fast Open).
const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `TCP_FASTOPEN` (a listener's queue) and `TCP_FASTOPEN_CONNECT` (a connect deferred to the first write).
const TCP_FASTOPEN_OPTS: [u64; 2] = [23, 30];
/// `PRIO_USER` for `setpriority`: every process of a uid.
const PRIO_USER: u64 = 2;
/// `IOPRIO_WHO_USER` for `ioprio_set`: every process of a uid.
const IOPRIO_WHO_USER: u64 = 3;
/// `CLONE_PARENT`: the child would be warden's, outside the call's reaping.
const CLONE_PARENT: u64 = 0x8000;
/// `fcntl` commands that make the kernel signal a chosen process or group
/// (`SIGIO`, or any signal with `F_SETSIG`) when a descriptor is ready.
const FCNTL_SETOWN: [u64; 2] = [libc::F_SETOWN as u64, 15]; // 15: F_SETOWN_EX
/// `FIOSETOWN` and `SIOCSPGRP`: the same through `ioctl`.
const IOCTL_SETOWN: [u64; 2] = [0x8901, 0x8902];
/// `SO_REUSEPORT`: sharing a port (and its datagrams) with another socket of the uid.
const SO_REUSEPORT: u64 = 15;

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| e.to_string())
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, String> {
    Cond::new(arg, len, op, value).map_err(|e| e.to_string())
}

/// The x32/architecture guard, hand-assembled (seccompiler checks the
/// architecture but not the x32 bit).
fn x32_guard() -> BpfProgram {
    let stmt = |code: u16, k: u32| sock_filter { code, jt: 0, jf: 0, k };
    let jump = |code: u16, k: u32, jt: u8, jf: u8| sock_filter { code, jt, jf, k };
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x05 | 0x10;
    const JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    vec![
        stmt(LD_W_ABS, 4), // seccomp_data.arch
        jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET_K, 0x8000_0000), // SECCOMP_RET_KILL_PROCESS
        stmt(LD_W_ABS, 0),        // seccomp_data.nr
        jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(RET_K, 0x0005_0000 | EPERM), // SECCOMP_RET_ERRNO | EPERM
        stmt(RET_K, 0x7fff_0000),         // SECCOMP_RET_ALLOW
    ]
}

/// Who the filters protect besides the kernel.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Allow IP stream sockets (the tool has a network grant).
    pub net: bool,
    /// Allow UDP sockets too (a grant names a host, resolved over DNS by the program).
    pub udp: bool,
    /// The host's pid: no signal may reach it.
    pub host_pid: u32,
    /// The host's process group.
    pub host_pgid: u32,
    /// The tool runs as uid 0: refuse `chmod`, `chown` and xattr changes.
    pub uid0: bool,
    /// Admit SysV IPC and POSIX message queues (a private IPC namespace, or `sysv_ipc = true`).
    pub ipc: bool,
    /// Admit inotify (`inotify = true`).
    pub inotify: bool,
    /// The tool is pid 1 of a pid namespace of the call's own, whose monitor
    /// shares its process group outside it: `kill(0, …)` (the whole group) is
    /// refused, so the monitor cannot be stopped or killed from inside (the
    /// namespace's end kills every process of it anyway).
    pub pid_namespace: bool,
    /// The tool has a network namespace of its own with only loopback (and
    /// warden's proxy): IP stream and datagram sockets, `bind` and `listen`
    /// are admitted, since nothing they reach leaves the namespace.
    pub network_namespace: bool,
    /// The call's root is built from its grants and it has a network namespace
    /// of its own: `AF_UNIX` sockets are admitted (a path reaches only the
    /// call's own sockets and its grants'; abstract names are the namespace's).
    pub unix: bool,
}

/// The metadata calls refused to a tool running as uid 0.
const UID0_EPERM_CALLS: &[i64] = &[
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    452, // fchmodat2
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    463, // setxattrat
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    466, // removexattrat
    469, // file_setattr
];

/// `SOCK_PACKET` (10): the obsolete packet type, which `libc` marks deprecated.
const SOCK_PACKET: i32 = 10;

/// A filter's rules: for each system call, the argument checks that refuse it
/// (none: every call of it is refused).
type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// The filters, in the order they are installed.
pub fn build(target: Target) -> Result<Vec<BpfProgram>, String> {
    let enosys: Rules = ENOSYS_CALLS.iter().map(|&n| (n, vec![])).collect();
    let eperm = eperm_rules(target)?;
    Ok(vec![
        x32_guard(),
        compile_filter(enosys, SeccompAction::Errno(ENOSYS))?,
        compile_filter(eperm, SeccompAction::Errno(EPERM))?,
    ])
}

/// One filter: the calls `rules` match get `action`, every other is allowed.
fn compile_filter(rules: Rules, action: SeccompAction) -> Result<BpfProgram, String> {
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, action, TargetArch::x86_64).map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// The calls (or the calls with these arguments) refused with `EPERM`.
fn eperm_rules(target: Target) -> Result<Rules, String> {
    let netns = target.network_namespace;
    let mut eperm: Rules = EPERM_CALLS.iter().map(|&n| (n, vec![])).collect();
    if target.pid_namespace {
        // The call's pid namespace ends with its init, which the host's kill
        // of the process group reaches: a new session inside (git's detached
        // maintenance, a test's daemon) cannot outlive the call.
        eperm.remove(&libc::SYS_setsid);
        eperm.remove(&libc::SYS_setpgid);
    }
    if !netns {
        // listen auto-binds an unbound socket to an ephemeral port on every
        // address of the host's network.
        eperm.insert(libc::SYS_listen, vec![]);
    }
    add_clone_ioctl_fcntl_rules(&mut eperm)?;
    eperm.insert(libc::SYS_socket, socket_rules(target)?);
    eperm.insert(libc::SYS_socketpair, socketpair_rules(target)?);
    // bind: Landlock allows TCP on no port, and nothing else may bind either: a
    // socketpair end could take an abstract name a host daemon binds later, and
    // a UDP socket (beside a grant that names a host) a port. A UDP client needs
    // no explicit bind (the kernel picks a port at the first send). In the
    // call's network namespace every address and abstract name is its own.
    if !netns {
        eperm.insert(libc::SYS_bind, vec![]);
    }
    add_signal_rules(&mut eperm, target)?;
    if target.uid0 {
        for &call in UID0_EPERM_CALLS {
            eperm.insert(call, vec![]);
        }
    }
    add_fastopen_rules(&mut eperm)?;
    add_other_process_rules(&mut eperm)?;
    if !target.ipc {
        for &call in IPC_CALLS {
            eperm.insert(call, vec![]);
        }
    }
    if !target.inotify {
        for call in [libc::SYS_inotify_init, libc::SYS_inotify_init1] {
            eperm.insert(call, vec![]);
        }
    }
    Ok(eperm)
}

/// New namespaces and `CLONE_PARENT` (`clone`), faking terminal input and
/// taking over another process's signals (`ioctl`, `fcntl`).
fn add_clone_ioctl_fcntl_rules(eperm: &mut Rules) -> Result<(), String> {
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| rule(vec![cond(0, Len::Qword, Op::MaskedEq(flag), flag)?]))
        .collect::<Result<Vec<_>, _>>()?;
    let mut clone_rules = clone_rules;
    clone_rules.push(rule(vec![cond(0, Len::Qword, Op::MaskedEq(CLONE_PARENT), CLONE_PARENT)?])?);
    eperm.insert(libc::SYS_clone, clone_rules);
    let mut ioctl_rules = vec![
        rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCSTI)?])?,
        rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCLINUX)?])?,
    ];
    for request in IOCTL_SETOWN {
        ioctl_rules.push(rule(vec![cond(1, Len::Dword, Op::Eq, request)?])?);
    }
    eperm.insert(libc::SYS_ioctl, ioctl_rules);
    eperm.insert(
        libc::SYS_fcntl,
        FCNTL_SETOWN.iter().map(|&c| rule(vec![cond(1, Len::Dword, Op::Eq, c)?])).collect::<Result<Vec<_>, _>>()?,
    );
    Ok(())
}

/// `socket`: without a network grant (or namespace) every socket is refused;
/// with one, every family but IP (and `AF_UNIX` when admitted), and every IP
/// socket but a stream (and a datagram, with UDP).
fn socket_rules(target: Target) -> Result<Vec<SeccompRule>, String> {
    let netns = target.network_namespace;
    let (net, udp) = (target.net || netns, (target.net && target.udp) || netns);
    if !net {
        return Ok(vec![]);
    }
    let (inet, inet6) = (libc::AF_INET as u64, libc::AF_INET6 as u64);
    let mut other_family = vec![cond(0, Len::Dword, Op::Ne, inet)?, cond(0, Len::Dword, Op::Ne, inet6)?];
    if target.unix {
        other_family.push(cond(0, Len::Dword, Op::Ne, libc::AF_UNIX as u64)?);
    }
    let mut rules = vec![rule(other_family)?];
    let mut protocols = vec![0, libc::IPPROTO_TCP as u64];
    // Every socket type but a stream (and a datagram, when UDP is allowed);
    // the low four bits, so SOCK_NONBLOCK and SOCK_CLOEXEC do not matter.
    let mut refused_types = vec![libc::SOCK_RAW, libc::SOCK_RDM, libc::SOCK_SEQPACKET, libc::SOCK_DCCP, SOCK_PACKET];
    if udp {
        protocols.push(libc::IPPROTO_UDP as u64);
    } else {
        refused_types.push(libc::SOCK_DGRAM);
    }
    for family in [inet, inet6] {
        let mut other_protocol = vec![cond(0, Len::Dword, Op::Eq, family)?];
        for p in &protocols {
            other_protocol.push(cond(2, Len::Dword, Op::Ne, *p)?);
        }
        rules.push(rule(other_protocol)?);
        for t in &refused_types {
            rules.push(rule(vec![
                cond(0, Len::Dword, Op::Eq, family)?,
                cond(1, Len::Dword, Op::MaskedEq(0xf), *t as u64)?,
            ])?);
        }
    }
    Ok(rules)
}

/// `socketpair`: only `AF_UNIX` stream pairs, unless the call has its own root
/// and network namespace.
fn socketpair_rules(target: Target) -> Result<Vec<SeccompRule>, String> {
    // socketpair only makes AF_UNIX pairs; refuse anything else for clarity. A
    // datagram pair is refused too: either end may still `sendto` (or
    // `connect` again) any unix datagram socket the uid can write, by path; and
    // so is `SOCK_RAW`, which `AF_UNIX` quietly turns into `SOCK_DGRAM`.
    // With the call's own root and network namespace, a datagram pair reaches
    // nothing a path or an abstract name outside the call names.
    let mut pair_rules = vec![rule(vec![cond(0, Len::Dword, Op::Ne, libc::AF_UNIX as u64)?])?];
    if !target.unix {
        pair_rules.push(rule(vec![cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_DGRAM as u64)?])?);
        pair_rules.push(rule(vec![cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_RAW as u64)?])?);
    }
    Ok(pair_rules)
}

/// Signals (and pidfds) aimed at the host's process or its process group.
fn add_signal_rules(eperm: &mut Rules, target: Target) -> Result<(), String> {
    // Signals to the host. pid_t is 32 bits: compare the low half, two's complement.
    let host = u64::from(target.host_pid);
    let neg = |v: u32| u64::from(v.wrapping_neg());
    eperm.insert(
        libc::SYS_kill,
        vec![
            rule(vec![cond(0, Len::Dword, Op::Eq, host)?])?,
            rule(vec![cond(0, Len::Dword, Op::Eq, neg(target.host_pgid))?])?,
            rule(vec![cond(0, Len::Dword, Op::Eq, u64::from(u32::MAX))?])?,
        ]
        .into_iter()
        .chain(if target.pid_namespace { Some(rule(vec![cond(0, Len::Dword, Op::Eq, 0)?])?) } else { None })
        .collect(),
    );
    for call in [libc::SYS_tkill, libc::SYS_tgkill, libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo] {
        eperm.insert(call, vec![rule(vec![cond(0, Len::Dword, Op::Eq, host)?])?]);
    }
    eperm.insert(libc::SYS_pidfd_open, vec![rule(vec![cond(0, Len::Dword, Op::Eq, host)?])?]);
    Ok(())
}

/// Implicit connects (TCP Fast Open) and `SO_REUSEPORT`.
fn add_fastopen_rules(eperm: &mut Rules) -> Result<(), String> {
    let fastopen = |arg: u8| -> Result<Vec<SeccompRule>, String> {
        Ok(vec![rule(vec![cond(arg, Len::Dword, Op::MaskedEq(MSG_FASTOPEN), MSG_FASTOPEN)?])?])
    };
    eperm.insert(libc::SYS_sendto, fastopen(3)?);
    eperm.insert(libc::SYS_sendmsg, fastopen(2)?);
    eperm.insert(libc::SYS_sendmmsg, fastopen(3)?);
    let mut setsockopt_rules = TCP_FASTOPEN_OPTS
        .iter()
        .map(|&opt| {
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::IPPROTO_TCP as u64)?, cond(2, Len::Dword, Op::Eq, opt)?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    setsockopt_rules.push(rule(vec![
        cond(1, Len::Dword, Op::Eq, libc::SOL_SOCKET as u64)?,
        cond(2, Len::Dword, Op::Eq, SO_REUSEPORT)?,
    ])?);
    eperm.insert(libc::SYS_setsockopt, setsockopt_rules);
    Ok(())
}

/// Other processes' resources and scheduling.
fn add_other_process_rules(eperm: &mut Rules) -> Result<(), String> {
    eperm.insert(
        libc::SYS_prlimit64,
        vec![rule(vec![cond(0, Len::Dword, Op::Ne, 0)?, cond(2, Len::Qword, Op::Ne, 0)?])?],
    );
    for call in [libc::SYS_setpriority, libc::SYS_ioprio_set] {
        let user = if call == libc::SYS_setpriority { PRIO_USER } else { IOPRIO_WHO_USER };
        eperm.insert(
            call,
            vec![rule(vec![cond(0, Len::Dword, Op::Eq, user)?])?, rule(vec![cond(1, Len::Dword, Op::Ne, 0)?])?],
        );
    }
    for &call in OWN_PID_ONLY_CALLS {
        eperm.insert(call, vec![rule(vec![cond(0, Len::Dword, Op::Ne, 0)?])?]);
    }
    Ok(())
}

/// Installs `filters` on the calling thread (inherited across `execve`). Needs `NO_NEW_PRIVS`.
pub fn apply_to_current_thread(filters: &[BpfProgram]) -> Result<(), String> {
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| format!("cannot install the seccomp filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_build_for_every_setting() {
        for (net, udp, uid0) in
            [(false, false, false), (true, false, false), (true, true, false), (false, false, true), (true, true, true)]
        {
            let target = Target {
                net,
                udp,
                host_pid: 4242,
                host_pgid: 4242,
                uid0,
                ipc: uid0,
                inotify: net,
                pid_namespace: net,
                network_namespace: udp,
                unix: udp && uid0,
            };
            let filters = build(target).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(filters.len(), 3);
            assert!(filters.iter().all(|f| !f.is_empty() && f.len() < 4096));
        }
    }

    #[test]
    fn the_x32_guard_checks_the_architecture_first() {
        let g = x32_guard();
        assert_eq!(g[0].k, 4);
        assert_eq!(g[1].k, AUDIT_ARCH_X86_64);
    }
}
