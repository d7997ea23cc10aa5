//! A confined long-running program (a wrapped MCP server): its process, its
//! layer, and how it stops.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::unistd::Pid;

use super::{cgroup, supervise};
use crate::SandboxReport;

/// A confined long-running program (an MCP server). Dropping it kills its whole
/// process group and reaps it.
pub struct ServerProcess {
    pub(super) child: std::process::Child,
    pub(super) pid: Pid,
    /// The program's stdin (the helper socket), until taken.
    pub(super) channel: Option<std::os::unix::net::UnixStream>,
    pub(super) cgroup: Option<cgroup::CallCgroup>,
    pub(super) stdout: Option<std::process::ChildStdout>,
    pub(super) stderr: Option<std::process::ChildStderr>,
    /// Its layer: what it writes reaches the real tree when each request
    /// ends ([`ServerProcess::apply_layer`]) and when it stops.
    pub(super) layer: Option<Layered>,
    /// warden's proxy, the server's one way out, for its lifetime.
    pub(super) proxy: Option<crate::egress::Proxy>,
}

/// A layer and what its changes are judged by.
#[derive(Debug)]
pub struct Layered {
    pub(super) layer: crate::layer::Layer,
    pub(super) protect: crate::protect::Protection,
}

impl Layered {
    /// Applies the layer's changes (see [`crate::layer::Layer::apply`]).
    pub fn apply(&mut self, mode: crate::layer::ApplyMode) -> crate::layer::Applied {
        let roots: Vec<PathBuf> = self.layer.roots().iter().map(|r| r.root.clone()).collect();
        let judge = crate::persist::Judge::new(&roots, &self.protect);
        let applied = self.layer.apply(&judge, mode);
        for (path, why) in applied.refused.iter().take(20) {
            tracing::warn!("refused to apply {}: {why}", path.display());
        }
        applied
    }
}

/// A started server and the sandbox the helper confirmed.
pub struct StartedServer {
    /// The process.
    pub process: ServerProcess,
    /// The layers in force.
    pub sandbox: SandboxReport,
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl ServerProcess {
    pub(super) fn with_report(self, sandbox: SandboxReport) -> StartedServer {
        StartedServer { process: self, sandbox }
    }

    /// Its pid (the process group's id too).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// Takes the program's stdin, stdout and stderr.
    pub fn take_stdio(
        &mut self,
    ) -> Option<(std::os::unix::net::UnixStream, std::process::ChildStdout, std::process::ChildStderr)> {
        Some((self.channel.take()?, self.stdout.take()?, self.stderr.take()?))
    }

    /// Stops the server once it has ended on its own (its stdout closed):
    /// waits up to `grace` for its own exit status, so the status is not
    /// SIGKILL for a server that exited, then stops what is left.
    pub fn stop_after(&mut self, grace: Duration) -> String {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    let status = status.to_string();
                    self.stop();
                    return status;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break,
            }
        }
        self.stop()
    }

    /// Kills the whole process group and waits for the program: its exit status as text.
    pub fn stop(&mut self) -> String {
        supervise::kill_helper(self.pid);
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_else(|e| format!("unknown status ({e})"));
        supervise::kill_group(self.pid, self.cgroup.as_ref());
        self.cgroup = None;
        // Its mounts are gone with its processes: what it left is applied.
        if let Some(mut layer) = self.layer.take() {
            layer.apply(crate::layer::ApplyMode::Move);
        }
        self.proxy = None;
        status
    }

    /// Applies what the server wrote so far (it keeps running): called when a
    /// request ends.
    pub fn apply_layer(&mut self) -> Option<crate::layer::Applied> {
        Some(self.layer.as_mut()?.apply(crate::layer::ApplyMode::Copy))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) || self.cgroup.is_some() {
            self.stop();
        }
    }
}
