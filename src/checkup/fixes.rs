//! The fix for each layer `warden doctor` found missing: the cause it can
//! tell from the host (a sysctl, AppArmor, a container's seccomp profile, the
//! kernel) and the exact commands. Text only; nothing here changes the host.

use serde::Serialize;

use warden_sandbox::probe::HostProbe;

use super::host::HostReport;

/// The AppArmor profile shipped in `packaging/apparmor/warden-sandbox`.
pub const APPARMOR_PROFILE: &str = include_str!("../../packaging/apparmor/warden-sandbox");
/// The helper path the shipped profile names.
const PROFILE_PATH: &str = "/usr/local/bin/warden-sandbox";

/// One fix: what it repairs, why it is needed here, and how.
#[derive(Debug, Clone, Serialize)]
pub struct Fix {
    /// A stable name: `apparmor-profile`, `apparmor-sysctl`, `userns-clone-sysctl`,
    /// `max-user-namespaces-sysctl`, `container`, `landlock`, `seccomp`,
    /// `pids-cgroup`, `cgroup-delegation`, `overlayfs`, `namespaces-switch`.
    pub id: &'static str,
    /// The layers it brings back.
    pub layers: Vec<&'static str>,
    /// What on this host refuses them.
    pub cause: String,
    /// What to do, in order: commands to run, or files to write.
    pub steps: Vec<String>,
}

/// What a failed namespace probe and the host's facts point at.
pub struct Facts<'a> {
    /// The audit's host report.
    pub host: &'a HostReport,
    /// The helper's probe.
    pub probe: &'a HostProbe,
    /// `kernel.apparmor_restrict_unprivileged_userns`.
    pub apparmor_restrict: Option<u64>,
    /// `kernel.unprivileged_userns_clone` (Debian's switch).
    pub userns_clone: Option<u64>,
    /// The container this runs in, when one is recognised.
    pub container: Option<&'static str>,
}

/// Whether `path` can name the helper in a profile's attachment as it is:
/// AppArmor reads `* ? [ ] { } ^` there as patterns (a profile for
/// `/opt/w*/warden-sandbox` would attach to other programs too), and quotes or
/// whitespace would end the path early.
pub fn attachable(path: &str) -> bool {
    path.starts_with('/') && !path.chars().any(|c| c.is_whitespace() || "*?[]{}^\"\\#,".contains(c))
}

/// The AppArmor profile for the helper at `helper` (an [`attachable`] path;
/// any other gets the shipped path), ready to install.
pub fn apparmor_profile_for(helper: &str) -> String {
    let helper = if attachable(helper) { helper } else { PROFILE_PATH };
    let name = profile_name(helper);
    APPARMOR_PROFILE
        .replace(&format!("profile warden-sandbox {PROFILE_PATH} "), &format!("profile {name} {helper} "))
        .replace("<local/warden-sandbox>", &format!("<local/{name}>"))
}

/// The profile's name (and file name in `/etc/apparmor.d`) for the helper at `path`.
fn profile_name(path: &str) -> &str {
    std::path::Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        .unwrap_or("warden-sandbox")
}

/// The fixes for namespaces the helper could not make (`why` says what refused).
pub fn namespaces(f: &Facts<'_>, why: &str) -> Vec<Fix> {
    let layers = vec!["user", "mount", "pid", "ipc", "net", "namespaces", "overlayfs"];
    let mut out = Vec::new();
    if why.contains("WARDEN_NAMESPACES") {
        out.push(Fix {
            id: "namespaces-switch",
            layers: layers.clone(),
            cause: "WARDEN_NAMESPACES=off is set in warden's environment".into(),
            steps: vec!["unset WARDEN_NAMESPACES".into()],
        });
        return out;
    }
    if f.host.root {
        // Root needs no user namespace, and the sysctls bind only unprivileged users.
    } else if f.apparmor_restrict == Some(1) {
        let helper = &f.probe.helper;
        let mut steps = Vec::new();
        let movable = writable_by_others(helper) || !attachable(helper);
        if movable {
            steps.push(format!(
                "first put the helper where only root can write, at a plain path ({helper} is writable by a \
                 non-root user or holds characters a profile reads as a pattern, and the profile would let \
                 whatever is there make user namespaces): sudo install -m 0755 {helper} {PROFILE_PATH}, and \
                 run warden from /usr/local/bin (warden uses the warden-sandbox beside it)"
            ));
        }
        let target = if movable { PROFILE_PATH } else { helper.as_str() };
        let name = profile_name(target);
        steps.push(format!(
            "sudo tee /etc/apparmor.d/{name} <<'EOF'\n{}EOF",
            apparmor_profile_for(target).lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n") + "\n"
        ));
        steps.push(format!("sudo apparmor_parser -r /etc/apparmor.d/{name}"));
        steps.push("warden doctor   # again: the user layer should now be ok".into());
        out.push(Fix {
            id: "apparmor-profile",
            layers: layers.clone(),
            cause: format!(
                "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1) \
                 and the helper {helper} runs under {}: a profile with the `userns` rule for it lifts the \
                 restriction for that binary only (the profile shipped as packaging/apparmor/warden-sandbox)",
                f.probe.apparmor_label.as_deref().unwrap_or("no profile")
            ),
            steps,
        });
        out.push(Fix {
            id: "apparmor-sysctl",
            layers: layers.clone(),
            cause: "or, for every program on this host (broader than the profile)".into(),
            steps: sysctl("kernel.apparmor_restrict_unprivileged_userns", "0"),
        });
    } else if f.userns_clone == Some(0) {
        out.push(Fix {
            id: "userns-clone-sysctl",
            layers: layers.clone(),
            cause: "the kernel refuses unprivileged user namespaces (kernel.unprivileged_userns_clone = 0)".into(),
            steps: sysctl("kernel.unprivileged_userns_clone", "1"),
        });
    } else if f.host.max_user_namespaces == Some(0) {
        out.push(Fix {
            id: "max-user-namespaces-sysctl",
            layers: layers.clone(),
            cause: "the kernel allows no user namespaces (user.max_user_namespaces = 0; the limit is per user \
                    namespace, so in a container it is the container's owner's to raise)"
                .into(),
            steps: sysctl("user.max_user_namespaces", "15000"),
        });
    }
    if out.is_empty() || f.container.is_some() || f.probe.seccomp_mode == Some(2) {
        out.push(container(f, layers));
    }
    out
}

/// A container's flags: its seccomp profile (Docker's default refuses
/// `unshare` and `clone` with namespace flags) and its AppArmor profile.
fn container(f: &Facts<'_>, layers: Vec<&'static str>) -> Fix {
    let filtered = if f.probe.seccomp_mode == Some(2) {
        "a seccomp filter is installed on warden already (Seccomp: 2 in /proc/self/status)"
    } else {
        "no sysctl refuses them"
    };
    Fix {
        id: "container",
        layers,
        cause: format!(
            "{}, {filtered}: the container's seccomp or AppArmor profile refuses unshare(CLONE_NEWUSER \
             and the other namespace flags)",
            f.container.map_or("the cause is outside this process".to_string(), |c| format!("warden runs in {c}"))
        ),
        steps: vec![
            "docker/podman: run the container with --security-opt seccomp=unconfined --security-opt \
             apparmor=unconfined, or with --security-opt seccomp=PROFILE.json where PROFILE.json is Docker's \
             default profile with unshare, and clone with CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC|\
             CLONE_NEWNET, allowed"
                .into(),
            "Kubernetes: in the container's securityContext set seccompProfile: {type: Unconfined} (or \
             Localhost with such a profile) and appArmorProfile: {type: Unconfined} (before 1.30: the annotation \
             container.apparmor.security.beta.kubernetes.io/NAME: unconfined); the node must allow user \
             namespaces"
                .into(),
            "or run warden in best-effort mode there: [sandbox] mode = \"best-effort\"".into(),
        ],
    }
}

/// `sysctl -w KEY=VALUE` now and in `/etc/sysctl.d` for the next boot.
fn sysctl(key: &str, value: &str) -> Vec<String> {
    vec![
        format!("sudo sysctl -w {key}={value}"),
        format!("echo '{key} = {value}' | sudo tee /etc/sysctl.d/60-warden.conf   # kept across reboots"),
    ]
}

/// Whether anyone but root may replace the file at `path`: it or any directory
/// above it is another uid's, or writable by group or others (without the
/// sticky bit), so a rename anywhere on the way swaps what the path names.
fn writable_by_others(path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::path::Path::new(path)
        .ancestors()
        .any(|q| std::fs::metadata(q).is_ok_and(|m| m.uid() != 0 || (m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0)))
}

/// The fixes for the layers that are not namespaces.
pub fn other(f: &Facts<'_>, failed: &[&str]) -> Vec<Fix> {
    let mut out = Vec::new();
    if failed.contains(&"landlock") || f.probe.landlock_abi < warden_sandbox::landlock::MIN_ENFORCED_ABI {
        let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
        out.push(Fix {
            id: "landlock",
            layers: vec!["landlock"],
            cause: format!(
                "this kernel offers Landlock ABI {} (enforce mode needs {}); active LSMs: {}",
                f.probe.landlock_abi,
                warden_sandbox::landlock::MIN_ENFORCED_ABI,
                if lsm.trim().is_empty() { "unknown" } else { lsm.trim() }
            ),
            steps: vec![
                "boot a kernel 6.7 or newer (ABI 4) with CONFIG_SECURITY_LANDLOCK=y".into(),
                "add landlock to the lsm= kernel parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor in \
                 GRUB_CMDLINE_LINUX of /etc/default/grub, then sudo update-grub and reboot)"
                    .into(),
            ],
        });
    }
    if failed.contains(&"seccomp") {
        out.push(Fix {
            id: "seccomp",
            layers: vec!["seccomp"],
            cause: "the helper could not install its seccomp filters".into(),
            steps: vec![
                "a kernel with CONFIG_SECCOMP_FILTER=y".into(),
                "in a container: a seccomp profile that admits seccomp(2) and prctl(PR_SET_NO_NEW_PRIVS) \
                 (Docker's default does)"
                    .into(),
            ],
        });
    }
    if failed.contains(&"overlayfs") {
        out.push(Fix {
            id: "overlayfs",
            layers: vec!["overlayfs"],
            cause: "the helper could not mount an overlay, which a call's write grants are layered with".into(),
            steps: vec![
                "sudo modprobe overlay".into(),
                "unprivileged: a kernel 5.11 or newer (overlayfs in a user namespace)".into(),
            ],
        });
    }
    out.extend(cgroup(f, failed.contains(&"cgroup")));
    out
}

/// As root, a pids controller bounds a call's processes (enforce refuses
/// without one); unprivileged, warden makes no cgroup (rlimits bound the call),
/// and a delegated subtree is reported for what it would allow.
fn cgroup(f: &Facts<'_>, failed: bool) -> Option<Fix> {
    let pids = f.host.cgroup_controllers.iter().any(|c| c == "pids");
    if f.host.root && (!pids || failed) {
        return Some(Fix {
            id: "pids-cgroup",
            layers: vec!["cgroup"],
            cause: "warden runs as root, where RLIMIT_NPROC does not apply, and no pids cgroup can be made".into(),
            steps: vec![
                "cgroup v2: echo +pids | sudo tee /sys/fs/cgroup/cgroup.subtree_control".into(),
                "cgroup v1: sudo mkdir -p /sys/fs/cgroup/pids && sudo mount -t cgroup -o pids none \
                 /sys/fs/cgroup/pids"
                    .into(),
            ],
        });
    }
    (!f.host.root && failed).then(|| Fix {
        id: "cgroup-delegation",
        layers: vec!["cgroup"],
        cause: "no cgroup subtree is delegated to this user; warden makes call cgroups only as root today (an \
                unprivileged call is bounded by rlimits), so nothing is missing for the verdicts below"
            .into(),
        steps: vec![
            "systemd-run --user --scope -p Delegate=yes warden serve   # a delegated scope for one run".into(),
            "or Delegate=yes in the [Service] section of the unit that starts warden".into(),
        ],
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn facts<'a>(host: &'a HostReport, probe: &'a HostProbe, restrict: Option<u64>) -> Facts<'a> {
        Facts { host, probe, apparmor_restrict: restrict, userns_clone: None, container: None }
    }

    #[test]
    fn apparmor_restriction_gets_the_profile_for_the_helper_where_it_is() {
        let mut host = HostReport::probe();
        host.root = false;
        host.max_user_namespaces = Some(100);
        // /usr/bin: root's, not writable by others: the profile names the helper there.
        let probe = HostProbe { helper: "/usr/bin/warden-sandbox".into(), ..HostProbe::default() };
        let fixes = namespaces(&facts(&host, &probe, Some(1)), "EPERM");
        let ids: Vec<&str> = fixes.iter().map(|f| f.id).collect();
        assert_eq!(ids, ["apparmor-profile", "apparmor-sysctl"]);
        let steps = fixes[0].steps.join("\n");
        assert!(steps.contains("sudo tee /etc/apparmor.d/warden-sandbox <<'EOF'"), "{steps}");
        assert!(steps.contains("profile warden-sandbox /usr/bin/warden-sandbox flags=(unconfined) {"), "{steps}");
        assert!(
            steps.contains("  userns,") && steps.contains("sudo apparmor_parser -r /etc/apparmor.d/warden-sandbox")
        );
        assert!(!steps.contains("install -m 0755"), "{steps}");
        assert!(fixes[1].steps.join("\n").contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"));
        // A helper anyone may replace is moved to /usr/local/bin before any profile names it.
        let dir = tempfile::tempdir().unwrap();
        // Anyone may write there (as root too: world-writable, no sticky bit).
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let helper = dir.path().join("warden-sandbox").display().to_string();
        let probe = HostProbe { helper: helper.clone(), ..HostProbe::default() };
        let steps = namespaces(&facts(&host, &probe, Some(1)), "EPERM")[0].steps.join("\n");
        assert!(steps.contains(&format!("sudo install -m 0755 {helper} /usr/local/bin/warden-sandbox")), "{steps}");
        assert!(steps.contains("profile warden-sandbox /usr/local/bin/warden-sandbox "), "{steps}");
        assert!(!steps.contains(&format!("profile warden-sandbox {helper}")), "{steps}");
    }

    #[test]
    fn each_sysctl_gets_its_own_fix_and_root_gets_the_containers() {
        let mut host = HostReport::probe();
        host.root = false;
        host.max_user_namespaces = Some(0);
        let probe = HostProbe::default();
        let ids = |f: &Facts<'_>| namespaces(f, "EPERM").iter().map(|x| x.id).collect::<Vec<_>>();
        assert_eq!(ids(&facts(&host, &probe, None)), ["max-user-namespaces-sysctl"]);
        let clone = Facts { userns_clone: Some(0), ..facts(&host, &probe, None) };
        assert_eq!(ids(&clone), ["userns-clone-sysctl"]);
        host.root = true;
        assert_eq!(ids(&facts(&host, &probe, Some(1))), ["container"]);
        assert_eq!(
            namespaces(&facts(&host, &probe, None), "WARDEN_NAMESPACES=off asks warden")[0].id,
            "namespaces-switch"
        );
    }
}
