//! Starting the helper for a call or a server: what the host made for it,
//! handing it its spec and descriptors, and attaching the egress proxy.

use super::*;

/// What [`ProcessRuntime::prepare`] made for a call.
pub(super) struct Prepared {
    pub(super) namespaces: bool,
    pub(super) layer: Option<Layered>,
    pub(super) layers_cover_writes: bool,
    pub(super) cgroup: Option<cgroup::CallCgroup>,
    pub(super) run_as: Option<(u32, u32)>,
}

/// How the helper starts: which binary, whether warden's own stdio is the
/// program's, whether the host keeps writing to its stdin (a server), and the
/// tool's end of the progress pipe.
pub(super) struct Start<'a> {
    pub(super) helper: &'a PathBuf,
    pub(super) inherit: bool,
    pub(super) stdin_from_host: bool,
    pub(super) progress: Option<std::os::fd::OwnedFd>,
}

/// Starts the helper and hands it `spec` (and the descriptors it passes on)
/// over its socket; the cgroup is joined from here where that is faster.
pub(super) fn launch_helper(
    tool: &str,
    spec: spec::SandboxSpec,
    start: Start<'_>,
    prepared: Prepared,
) -> Result<Spawned, CallError> {
    let Start { helper, inherit, stdin_from_host, progress: progress_fd } = start;
    let Prepared { cgroup, layer, .. } = prepared;
    let internal = |what: &str, e: std::io::Error| CallError::new(ErrorCode::Internal, format!("{tool}: {what}: {e}"));
    // The helper's stdin: the spec goes in, its reports come back (see `spec`).
    let (mut channel, helper_end) =
        std::os::unix::net::UnixStream::pair().map_err(|e| internal("cannot create the helper socket", e))?;
    let child = Command::new(helper)
        .arg(helper::HELPER_ARG)
        .env_clear()
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(helper_end)))
        .stdout(if inherit { Stdio::inherit() } else { Stdio::piped() })
        .stderr(if inherit && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            Stdio::inherit()
        } else {
            Stdio::piped()
        })
        .spawn()
        .map_err(|e| {
            CallError::new(
                ErrorCode::SandboxUnavailable,
                format!("{tool}: cannot start the sandbox helper {}: {e}", helper.display()),
            )
        })?;
    let pid = Pid::from_raw(child.id() as i32);
    // In v1 the helper moves its one thread in by itself, which takes no
    // global lock (`CallCgroup::self_join_files`). In v2, moving a process
    // waits for an RCU grace period; done here, it overlaps the helper's own
    // start, and the helper only checks it (joining by itself if this failed).
    let mut spec = spec;
    if let (Some(c), Some(join)) = (&cgroup, spec.cgroup.as_mut())
        && c.version == "v2"
        && c.join(child.id()).is_ok()
    {
        join.join.clear();
    }
    let spec_json = serde_json::to_vec(&spec)
        .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot encode the sandbox spec: {e}")))?;
    {
        use std::io::Write;
        // A helper that died early shows up in its report, not here.
        let _ = channel.write_all(&(spec_json.len() as u64).to_le_bytes());
        let _ = channel.write_all(&spec_json);
        // The tool's end of the progress pipe goes to the helper; the host keeps no copy.
        if let Some(fd) = progress_fd
            && let Err(e) = progress::send_fd(&channel, &fd, "the progress pipe")
        {
            tracing::debug!("{tool}: {e}");
        }
        // `warden run`: warden's stdin goes to the program too.
        if inherit
            && let Ok(stdin) = std::io::stdin().as_fd().try_clone_to_owned()
            && let Err(e) = progress::send_fd(&channel, &stdin, "its standard input")
        {
            tracing::debug!("{tool}: {e}");
        }
        if !stdin_from_host {
            let _ = channel.shutdown(std::net::Shutdown::Write);
        }
    }
    Ok(Spawned { child, pid, channel, cgroup, layer, proxy: None, report_prefix: None })
}

/// Receives the listener the helper made in the call's network namespace and
/// starts warden's egress proxy on it, the call's one way out; without one, the
/// helper's report (read next) says why.
pub(super) fn attach_proxy(tool: &str, walls: &Walls, spawned: &mut Spawned) -> Result<(), CallError> {
    match netns::recv_listener(&spawned.channel, Duration::from_secs(10)) {
        Ok(netns::Received::Listener(listener)) => {
            let policy = crate::egress::EgressPolicy {
                tool: tool.to_string(),
                grants: walls.net.clone(),
                allow_private: walls.allow_private,
                credentials: walls.credentials.clone(),
            };
            match crate::egress::Proxy::start(listener, Arc::new(policy), walls.journal.clone()) {
                Ok(p) => spawned.proxy = Some(p),
                Err(e) => {
                    let _ = killpg(spawned.pid, Signal::SIGKILL);
                    let _ = nix::sys::signal::kill(spawned.pid, Signal::SIGKILL);
                    let _ = spawned.child.wait();
                    return Err(CallError::new(
                        ErrorCode::SandboxUnavailable,
                        format!("{tool}: cannot start warden's egress proxy: {e}"),
                    ));
                }
            }
        }
        // The helper's report says why there is no socket (it refuses
        // to go on in enforce mode; otherwise the tool has no network).
        Ok(netns::Received::None) | Err(_) => {}
        Ok(netns::Received::Report(b)) => spawned.report_prefix = Some(b),
    }
    Ok(())
}
