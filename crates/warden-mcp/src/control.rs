//! The control socket of a `serve` process with background jobs:
//! `L.live/procs/PID.sock` beside its audit log `L` (the directory mode 0700,
//! the socket 0600, removed on exit), for `warden console`. Only a peer of
//! warden's own uid, in warden's own mount namespace (never a tool in its
//! call's sandbox), is answered (`SO_PEERCRED`). One JSON request line, one
//! JSON answer line:
//! - `{"op":"jobs"}` → `{"pid","jobs":[…],"max_jobs"}` (every owner's jobs),
//! - `{"op":"output","job","offset","limit"}` → as `job_output`,
//! - `{"op":"cancel","job"}` → as `job_cancel`;
//!
//! a refusal is `{"error":"…"}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::jobs::Jobs;

/// The longest request line.
pub const MAX_REQUEST_BYTES: u64 = 64 << 10;
/// How long a peer has to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The socket while it is served; dropping it stops serving and removes it.
pub struct Control {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `L.live/procs`, made (0700) when missing; refused when it is not a
/// directory of warden's uid closed to others.
fn procs_dir(log: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let live = warden_core::live::Live::for_log(log);
    live.ensure()?;
    let procs = live.path().join("procs");
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&procs);
    let uid = nix::unistd::geteuid().as_raw();
    let m = std::fs::symlink_metadata(&procs).map_err(|e| format!("{}: {e}", procs.display()))?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(format!("{} is not a directory of uid {uid} with mode 0700", procs.display()));
    }
    Ok(procs)
}

/// Serves the control socket of `jobs` beside the audit log `log`; call it
/// inside the runtime.
pub fn start(jobs: Arc<Jobs>, log: &Path) -> Result<Control, String> {
    use std::os::unix::fs::PermissionsExt;
    let path = procs_dir(log)?.join(format!("{}.sock", std::process::id()));
    // A socket of an earlier process with this pid (it cannot be running).
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    let uid = nix::unistd::geteuid().as_raw();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            if !stream.peer_cred().is_ok_and(|c| c.uid() == uid && c.pid().is_some_and(outside_every_call)) {
                continue;
            }
            let jobs = jobs.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT + super::jobs::CANCEL_WAIT, answer(jobs, stream)).await;
            });
        }
    });
    Ok(Control { path, task })
}

/// Whether process `pid` shares this process's mount namespace: a tool runs
/// in a mount namespace of its call's own, the only place where a grant can
/// bring this socket's path into reach (without one, `AF_UNIX` to a host path
/// is refused), so a tool of the same uid is never answered.
fn outside_every_call(pid: i32) -> bool {
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    ns("self").is_some_and(|mine| ns(&pid.to_string()) == Some(mine))
}

async fn answer(jobs: Arc<Jobs>, stream: tokio::net::UnixStream) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_REQUEST_BYTES));
    tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line))
        .await
        .map_err(|_| std::io::Error::other("the request took too long"))??;
    let reply = match serde_json::from_str::<Value>(&line) {
        Ok(request) => tokio::task::spawn_blocking(move || handle(&jobs, &request))
            .await
            .unwrap_or_else(|e| json!({"error": e.to_string()})),
        Err(e) => json!({"error": format!("not a JSON request: {e}")}),
    };
    let mut out = reply.to_string().into_bytes();
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

/// One request's answer.
pub fn handle(jobs: &Jobs, request: &Value) -> Value {
    let job = request.get("job").and_then(Value::as_str).unwrap_or("");
    let owned = || jobs.owner_of(job).ok_or_else(|| json!({"error": format!("no job {job:?} in this process")}));
    let result = match request.get("op").and_then(Value::as_str) {
        Some("jobs") => {
            let mut v = jobs.list_all();
            v["pid"] = json!(std::process::id());
            return v;
        }
        Some("output") => owned().map(|owner| {
            let offset = request.get("offset").and_then(Value::as_u64).unwrap_or(0);
            let limit = request.get("limit").and_then(Value::as_u64).unwrap_or(16 << 10);
            jobs.output(&owner, job, offset, usize::try_from(limit).unwrap_or(usize::MAX))
        }),
        Some("cancel") => owned().map(|owner| jobs.cancel(&owner, job)),
        _ => return json!({"error": "unknown op: give jobs, output or cancel"}),
    };
    match result {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => json!({"error": e.to_string()}),
        Err(v) => v,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn requests_are_answered_and_unknown_ones_refused() {
        let jobs = Jobs::new(2);
        let listed = handle(&jobs, &json!({"op": "jobs"}));
        assert_eq!(listed["jobs"], json!([]));
        assert_eq!(listed["max_jobs"], 2);
        assert_eq!(listed["pid"], std::process::id());
        let missing = handle(&jobs, &json!({"op": "cancel", "job": "j-00"}));
        assert!(missing["error"].as_str().unwrap().contains("no job \"j-00\""), "{missing}");
        assert!(handle(&jobs, &json!({"op": "shutdown"}))["error"].is_string());
    }

    #[tokio::test]
    async fn the_socket_lies_in_a_private_directory_beside_the_log_and_goes_with_the_server() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let control = start(Arc::new(Jobs::new(1)), &log).unwrap();
        let path = dir.path().join("audit.jsonl.live/procs").join(format!("{}.sock", std::process::id()));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&path), 0o600);
        let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (read, mut write) = stream.into_split();
        write.write_all(b"{\"op\":\"jobs\"}\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(read).read_line(&mut line).await.unwrap();
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["max_jobs"], 1);
        drop(control);
        assert!(!path.exists());
    }
}
