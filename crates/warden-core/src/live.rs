//! The live directory beside an audit log (`L.live/` for a log at `L`): what
//! every warden process on that log shares while it runs, for `warden
//! approvals` and `warden console`.
//!
//! - `inbox/ID.json`: a call waiting for a person ([`Pending`]), written once by
//!   the waiting process; `inbox/ID.answer.json`: the person's [`Answer`],
//!   created once (the first answer wins) by `warden approvals` or the console.
//!   The waiting process removes both when it is done ([`Inbox::wait`]).
//! - `events/PID.jsonl`: each process's live events (`call_start`), one line each.
//!
//! The directory is created mode 0700 and is one of warden's own files: every
//! call protects it inside its write grants, like the log itself, so no tool
//! can post or answer an approval. Every file is read with a size bound and
//! without following a link. docs/approvals.md.

use std::fs::OpenOptions;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::approval::Request;
use crate::runtime::Cancel;

/// The largest pending-approval file read.
const MAX_PENDING_BYTES: u64 = 1 << 20;
/// The largest answer file read.
const MAX_ANSWER_BYTES: u64 = 64 << 10;
/// The most approvals waiting in one inbox: past it a call is refused at once.
pub const MAX_PENDING: usize = 256;
/// The largest arguments kept whole in a pending file (JSON bytes); larger
/// ones are shown by their `args_text` alone.
const MAX_ARGS_KEPT: usize = 64 << 10;
/// The longest preview kept in a pending file (characters).
const MAX_PREVIEW_CHARS: usize = 64 << 10;
/// How often a waiting call looks for its answer.
const POLL: Duration = Duration::from_millis(100);
/// An events file past this size starts again (the old one kept as `.1`).
const MAX_EVENTS_BYTES: u64 = 4 << 20;

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Who this process runs as: `name (uid N)`.
pub fn whoami() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => format!("{} (uid {uid})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// The live directory of one audit log.
#[derive(Debug, Clone)]
pub struct Live {
    root: PathBuf,
}

impl Live {
    /// The live directory of the log at `log`: `LOG.live`.
    pub fn for_log(log: &Path) -> Live {
        let mut name = log.file_name().map(std::ffi::OsStr::to_os_string).unwrap_or_else(|| "audit.jsonl".into());
        name.push(".live");
        Live { root: log.with_file_name(name) }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Creates it and its parts (mode 0700); refuses one that is a link, not
    /// a directory, or open to others.
    pub fn ensure(&self) -> Result<(), String> {
        for dir in [self.root.clone(), self.root.join("inbox"), self.root.join("events")] {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(format!(
                        "cannot create warden's live directory {}: {e} (make its parent writable, or pass --audit-log)",
                        dir.display()
                    ));
                }
            }
            check_private_dir(&dir)?;
        }
        Ok(())
    }

    /// The approval inbox.
    pub fn inbox(&self) -> Inbox {
        Inbox { dir: self.root.join("inbox") }
    }

    /// This process's events file.
    pub fn events(&self) -> Events {
        Events {
            path: self.root.join("events").join(format!("{}.jsonl", std::process::id())),
            file: std::sync::Mutex::default(),
        }
    }

    /// Every events file (for the console).
    pub fn event_files(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(self.root.join("events"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        out.sort();
        out
    }
}

fn check_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    let mine = meta.uid() == nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || !mine || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "warden's live directory {} must be a directory of its own owned by this user with mode 0700 \
             (it holds approvals); remove it and let warden create it",
            dir.display()
        ));
    }
    Ok(())
}

/// Reads a regular file of at most `limit` bytes without following a link.
fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!("larger than {limit} bytes")));
    }
    Ok(bytes)
}

/// Writes `bytes` to a new file at `path` (mode 0600), refusing an existing one.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)?;
    f.write_all(bytes)?;
    f.sync_data()
}

/// A call waiting for a person.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Pending {
    /// `a-` and 32 hex digits.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// `ask` or `confirm`.
    pub tier: String,
    /// The arguments.
    pub args: serde_json::Value,
    /// The arguments as a person should read them (sanitized, long text cut with a marker).
    pub args_text: String,
    /// sha256 of the arguments.
    pub args_sha256: String,
    /// What the call would do (a diff, a target), or empty.
    pub preview: String,
    /// Where its tier is set.
    pub location: String,
    /// The session it belongs to.
    pub session: String,
    /// How the agent reached warden.
    pub client: String,
    /// The waiting process.
    pub pid: u32,
    /// When it was posted.
    pub created_ms: u64,
    /// When it stops waiting.
    pub expires_ms: u64,
}

/// A person's answer.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AnswerKind {
    /// Run this call.
    Approve,
    /// Refuse it.
    Reject,
    /// Run it, and keep approving what `lasting` describes.
    Always,
}

/// What a person answered, and who and where.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Answer {
    /// The pending approval's id.
    pub id: String,
    /// The arguments' sha256 the person saw.
    pub args_sha256: String,
    /// The answer.
    pub answer: AnswerKind,
    /// Why (a rejection's reason), if given.
    #[serde(default)]
    pub reason: Option<String>,
    /// For `always`: the lasting approval's scope (see `approval::lasting`).
    #[serde(default)]
    pub lasting: Option<serde_json::Value>,
    /// Who answered: `name (uid N)`.
    pub who: String,
    /// Where: `terminal /dev/pts/3`, `console 127.0.0.1:PORT`.
    pub via: String,
}

/// How a wait in the inbox ended.
#[derive(Debug)]
pub enum Waited {
    /// A person answered.
    Answered(Pending, Answer),
    /// Nobody did in time.
    TimedOut(Pending),
    /// The caller cancelled the call.
    Cancelled(Pending),
}

/// The approval inbox of one live directory.
#[derive(Debug, Clone)]
pub struct Inbox {
    dir: PathBuf,
}

fn valid_id(id: &str) -> bool {
    id.len() == 34 && id.starts_with("a-") && id[2..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl Inbox {
    fn pending_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn answer_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.answer.json"))
    }

    /// The calls waiting now, oldest first (expired ones left by a process
    /// that died are removed).
    pub fn list(&self) -> Vec<Pending> {
        let now = now_ms();
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")).filter(|id| valid_id(id)) else {
                continue;
            };
            // Reaped by expiry only: a pid means nothing from another pid namespace
            // (a container sharing the log's volume).
            match self.get(id) {
                Ok(p) if p.expires_ms + 5_000 < now => {
                    let _ = std::fs::remove_file(self.pending_path(id));
                    let _ = std::fs::remove_file(self.answer_path(id));
                }
                Ok(p) => out.push(p),
                Err(_) => {}
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        out
    }

    /// How many calls wait (every pending file, readable or not).
    pub fn count(&self) -> usize {
        self.list();
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).is_some_and(valid_id))
            .count()
    }

    /// One waiting call; an error names the id and what to do.
    pub fn get(&self, id: &str) -> Result<Pending, String> {
        if !valid_id(id) {
            return Err(format!(
                "{id:?} is not an approval id (a- and 32 hex digits; `warden approvals list` shows them)"
            ));
        }
        let bytes = read_bounded(&self.pending_path(id), MAX_PENDING_BYTES).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("no call waits for approval {id} (answered, timed out or cancelled): `warden approvals list`")
            } else {
                format!("cannot read approval {id}: {e}")
            }
        })?;
        serde_json::from_slice(&bytes).map_err(|e| format!("approval {id} is unreadable: {e}"))
    }

    /// Whether `id` has been answered.
    pub fn answered(&self, id: &str) -> bool {
        valid_id(id) && self.answer_path(id).exists()
    }

    /// Records `answer`: refused for an unknown id, arguments other than the
    /// ones posted, or a call already answered (the first answer wins).
    pub fn answer(&self, answer: &Answer) -> Result<(), String> {
        let pending = self.get(&answer.id)?;
        if pending.args_sha256 != answer.args_sha256 {
            return Err(format!(
                "approval {}: the arguments are not the ones you were shown; nothing was answered",
                answer.id
            ));
        }
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix).map_err(|e| format!("no randomness: {e}"))?;
        let tmp = self.dir.join(format!(".{}.{}.tmp", answer.id, hex::encode(suffix)));
        let bytes = serde_json::to_vec(answer).map_err(|e| e.to_string())?;
        write_new(&tmp, &bytes).map_err(|e| format!("cannot write the answer to approval {}: {e}", answer.id))?;
        // A hard link is created whole or not at all, and never over another answer.
        let linked = std::fs::hard_link(&tmp, self.answer_path(&answer.id));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(format!("approval {} was already answered; nothing changed", answer.id))
            }
            Err(e) => Err(format!("cannot record the answer to approval {}: {e}", answer.id)),
        }
    }

    /// Posts `req` and waits up to `timeout` for a person's answer, looking
    /// every 100 ms; `posted` is told the id once the call is in the inbox.
    pub fn wait(
        &self,
        req: &Request<'_>,
        client: &str,
        timeout: Duration,
        cancel: &Cancel,
        posted: &dyn Fn(&Pending),
    ) -> Result<Waited, String> {
        if self.count() >= MAX_PENDING {
            return Err(format!("{MAX_PENDING} calls already wait in the approval inbox; answer some first"));
        }
        let mut raw = [0u8; 16];
        getrandom::fill(&mut raw).map_err(|e| format!("no randomness: {e}"))?;
        let now = now_ms();
        // The file stays far below what a reader takes: the arguments whole only
        // when small (a person reads `args_text`, cut with a marker), the preview cut.
        let small = serde_json::to_vec(req.args).map_or(0, |b| b.len()) <= MAX_ARGS_KEPT;
        let pending = Pending {
            id: format!("a-{}", hex::encode(raw)),
            tool: req.tool.to_string(),
            tier: req.tier.to_string(),
            args: if small { req.args.clone() } else { serde_json::Value::Null },
            args_text: crate::approval::arguments_text(req.args),
            args_sha256: req.args_sha256.to_string(),
            preview: cut(&crate::shape::sanitize_str(&req.preview), MAX_PREVIEW_CHARS),
            location: req.location.to_string(),
            session: req.session.to_string(),
            client: client.to_string(),
            pid: std::process::id(),
            created_ms: now,
            expires_ms: now + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX / 2),
        };
        let bytes = serde_json::to_vec_pretty(&pending).map_err(|e| e.to_string())?;
        let path = self.pending_path(&pending.id);
        write_new(&path, &bytes)
            .map_err(|e| format!("cannot post the call to the approval inbox {}: {e}", self.dir.display()))?;
        let _cleanup = Remove(vec![path, self.answer_path(&pending.id)]);
        posted(&pending);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match read_bounded(&self.answer_path(&pending.id), MAX_ANSWER_BYTES) {
                Ok(bytes) => {
                    let answer: Answer = serde_json::from_slice(&bytes)
                        .map_err(|e| format!("the answer to approval {} is unreadable: {e}", pending.id))?;
                    if answer.id != pending.id || answer.args_sha256 != pending.args_sha256 {
                        return Err(format!("the answer to approval {} names another call; nothing ran", pending.id));
                    }
                    return Ok(Waited::Answered(pending, answer));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot read the answer to approval {}: {e}", pending.id)),
            }
            if cancel.is_cancelled() {
                return Ok(Waited::Cancelled(pending));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(Waited::TimedOut(pending));
            }
            std::thread::sleep(POLL);
        }
    }
}

/// `text`, cut at `max` characters with a marker saying how much is hidden.
fn cut(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}\n[… {} more characters NOT SHOWN …]", count - max)
}

/// Removes its paths when dropped.
struct Remove(Vec<PathBuf>);

impl Drop for Remove {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// One process's live events file, removed when dropped (the process ends).
#[derive(Debug)]
pub struct Events {
    path: PathBuf,
    /// The open file and the bytes written to it.
    file: std::sync::Mutex<Option<(std::fs::File, u64)>>,
}

impl Events {
    /// Appends one event (one `write(2)` of one line); best effort: the audit
    /// log, not this file, is the record.
    pub fn emit(&self, kind: &str, mut fields: serde_json::Map<String, serde_json::Value>) {
        fields.insert("ts_ms".into(), now_ms().into());
        fields.insert("pid".into(), std::process::id().into());
        fields.insert("kind".into(), kind.into());
        let mut line = serde_json::to_vec(&fields).unwrap_or_default();
        line.push(b'\n');
        let mut slot = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.as_ref().is_some_and(|(_, n)| *n > MAX_EVENTS_BYTES) {
            *slot = None;
            let _ = std::fs::rename(&self.path, self.path.with_extension("jsonl.1"));
        }
        if slot.is_none() {
            let opened = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.path);
            *slot = opened.ok().map(|f| (f, 0));
        }
        if let Some((f, n)) = slot.as_mut()
            && f.write_all(&line).is_ok()
        {
            *n += line.len() as u64;
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(self.path.with_extension("jsonl.1"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::policy::Tier;

    fn live() -> (tempfile::TempDir, Live) {
        let d = tempfile::tempdir().unwrap();
        let live = Live::for_log(&d.path().join("audit.jsonl"));
        live.ensure().unwrap();
        (d, live)
    }

    #[test]
    fn an_answer_reaches_the_waiting_call_once_and_only_for_its_arguments() {
        let (_d, live) = live();
        let inbox = live.inbox();
        let args = serde_json::json!({"path": "a.txt"});
        let req = Request {
            tool: "write_file",
            tier: Tier::Ask,
            args: &args,
            args_sha256: "abc",
            preview: String::new(),
            location: "p:1:1",
            session: "s-1",
        };
        let answerer = inbox.clone();
        let posted = move |p: &Pending| {
            let mut wrong = Answer {
                id: p.id.clone(),
                args_sha256: "other".into(),
                answer: AnswerKind::Approve,
                reason: None,
                lasting: None,
                who: whoami(),
                via: "test".into(),
            };
            assert!(answerer.answer(&wrong).unwrap_err().contains("not the ones you were shown"));
            wrong.args_sha256 = "abc".into();
            answerer.answer(&wrong).unwrap();
            assert!(answerer.answer(&wrong).unwrap_err().contains("already answered"));
        };
        match inbox.wait(&req, "test", Duration::from_secs(5), &Cancel::new(), &posted).unwrap() {
            Waited::Answered(p, a) => {
                assert_eq!(a.answer, AnswerKind::Approve);
                assert_eq!(p.tool, "write_file");
            }
            other => panic!("{other:?}"),
        }
        assert!(inbox.list().is_empty(), "the wait cleans up");
    }

    #[test]
    fn nobody_answering_times_out_and_ids_are_checked() {
        let (_d, live) = live();
        let inbox = live.inbox();
        let args = serde_json::json!({});
        let req = Request {
            tool: "t",
            tier: Tier::Confirm,
            args: &args,
            args_sha256: "h",
            preview: String::new(),
            location: "p:1:1",
            session: "s",
        };
        let seen = std::sync::Mutex::new(0);
        let posted = |p: &Pending| {
            assert_eq!(inbox.list().len(), 1);
            assert_eq!(inbox.get(&p.id).unwrap().tier, "confirm");
            *seen.lock().unwrap() += 1;
        };
        assert!(matches!(
            inbox.wait(&req, "test", Duration::from_millis(150), &Cancel::new(), &posted).unwrap(),
            Waited::TimedOut(_)
        ));
        assert_eq!(*seen.lock().unwrap(), 1);
        assert!(inbox.get("../x").unwrap_err().contains("not an approval id"));
        assert!(inbox.get(&format!("a-{}", "0".repeat(32))).unwrap_err().contains("no call waits"));
    }

    #[test]
    fn a_live_directory_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let (_d, live) = live();
        std::fs::set_permissions(live.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(live.ensure().unwrap_err().contains("mode 0700"));
    }
}
