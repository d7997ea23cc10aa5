//! Credentials' real values, in warden's memory only: each read once per
//! process from its source (warden's environment, an owner-only file, a
//! command run without a shell), given a placeholder of the same shape
//! ([`crate::scan::placeholder`]), and handed to a call as [`Held`]. Nothing
//! here writes a real value anywhere, and no error text carries one.

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use warden_policy::{Bind, Credential, Source};

use crate::scan::Replacer;

/// The longest value a credential may have, in bytes.
pub const MAX_SECRET: usize = 4096;
/// The shortest: a shorter value could not be told apart from other text when
/// warden replaces it in what comes back.
pub const MIN_SECRET: usize = 8;
/// How long a `command` source may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a `command` or `file` source may give, in bytes.
const MAX_SOURCE: u64 = 64 * 1024;

/// A credential a call holds: its binds, its placeholder, and (private) its real value.
pub struct Held {
    /// `[credentials.NAME]`.
    pub name: String,
    /// The variable the tool sees the placeholder in.
    pub variable: String,
    /// What the tool sees instead of the real value.
    pub placeholder: String,
    /// Where the real value may go.
    pub binds: Vec<Bind>,
    real: String,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("name", &self.name).field("variable", &self.variable).finish_non_exhaustive()
    }
}

impl Held {
    /// The real value (for the proxy's substitution only).
    pub(crate) fn real(&self) -> &str {
        &self.real
    }

    /// Whether one of its binds names `host:port`.
    pub fn binds_to(&self, host: &str, port: u16) -> bool {
        self.binds.iter().any(|b| b.port == port && b.host.eq_ignore_ascii_case(host.trim_end_matches('.')))
    }

    /// The users of its `basic` binds that warden adds itself (for redacting
    /// the exact `Authorization: Basic` text it sent).
    fn basic_users(&self) -> Vec<&str> {
        self.binds
            .iter()
            .filter(|b| b.always && b.inject == warden_policy::Inject::Basic)
            .map(|b| b.user.as_str())
            .collect()
    }
}

/// A loaded value and its placeholder, kept for the life of the process.
struct Loaded {
    real: String,
    placeholder: String,
}

/// Values by (credential name, source), loaded once.
fn loaded() -> &'static Mutex<HashMap<(String, String), Arc<Loaded>>> {
    static VAULT: OnceLock<Mutex<HashMap<(String, String), Arc<Loaded>>>> = OnceLock::new();
    VAULT.get_or_init(Default::default)
}

/// The credentials `tool` holds, each loaded (once per process) from its source.
/// An error names the credential, its source and what to change; it never
/// holds the value.
pub fn hold(tool: &str, creds: &[Credential]) -> Result<Vec<Arc<Held>>, String> {
    let mut out = Vec::new();
    for c in creds {
        let key = (c.name.clone(), format!("{:?}", c.source));
        let existing = loaded().lock().map_err(|_| "the credential vault is poisoned".to_string())?.get(&key).cloned();
        let l = match existing {
            Some(l) => l,
            None => {
                let real = read(&c.source).and_then(|v| check(&v).map(|()| v)).map_err(|e| {
                    format!("{tool}: credential {}: {e} ([credentials.{}] from, {})", c.name, c.name, c.location)
                })?;
                let placeholder =
                    crate::scan::placeholder(&real).map_err(|e| format!("{tool}: credential {}: {e}", c.name))?;
                let l = Arc::new(Loaded { real, placeholder });
                let mut map = loaded().lock().map_err(|_| "the credential vault is poisoned".to_string())?;
                map.entry(key).or_insert(l).clone()
            }
        };
        out.push(Arc::new(Held {
            name: c.name.clone(),
            variable: c.variable.clone(),
            placeholder: l.placeholder.clone(),
            binds: c.binds.clone(),
            real: l.real.clone(),
        }));
    }
    Ok(out)
}

/// What replaces every form of the held credentials' real values (raw,
/// percent-encoded, JSON-escaped, base64) by the same form of their placeholders.
pub fn redactor(held: &[Arc<Held>]) -> Result<Replacer, String> {
    let mut pairs = Vec::new();
    for h in held {
        pairs.extend(crate::scan::redaction_pairs(h.real(), &h.placeholder, None));
        for user in h.basic_users() {
            pairs.extend(crate::scan::redaction_pairs(h.real(), &h.placeholder, Some(user)));
        }
    }
    pairs.sort();
    pairs.dedup();
    Replacer::new(pairs)
}

/// A value warden can carry in a header: not empty, not too long, no line
/// breaks or NUL (which would split the request it is put into).
fn check(v: &str) -> Result<(), String> {
    if v.len() < MIN_SECRET {
        return Err(format!(
            "its value has {} bytes; warden needs at least {MIN_SECRET} to tell it apart from other text",
            v.len()
        ));
    }
    if v.len() > MAX_SECRET {
        return Err(format!("its value is longer than {MAX_SECRET} bytes"));
    }
    if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0 || b < 0x20 && b != b'\t' || b == 0x7f) {
        return Err("its value holds a line break or another control character".into());
    }
    Ok(())
}

/// One trailing newline (as `echo` and editors leave) removed.
fn trim_newline(mut v: String) -> String {
    if v.ends_with('\n') {
        v.pop();
        if v.ends_with('\r') {
            v.pop();
        }
    }
    v
}

fn read(source: &Source) -> Result<String, String> {
    match source {
        Source::Env(name) => std::env::var(name).map_err(|e| match e {
            std::env::VarError::NotPresent => {
                format!(
                    "{name} is not set in warden's environment; set it where warden starts (the tool never sees it)"
                )
            }
            std::env::VarError::NotUnicode(_) => format!("{name} in warden's environment is not UTF-8"),
        }),
        Source::File(path) => read_file(path),
        Source::Command(argv) => run(argv),
    }
}

/// A file owned by warden's user, readable by it alone, opened without
/// following a link.
fn read_file(path: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| format!("cannot open {shown} (a symbolic link is not followed): {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!("{shown} belongs to uid {}, not to warden's user (uid {me}); chown it", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!("{shown} has mode {:o}: others may read it; chmod 600 {shown}", meta.mode() & 0o7777));
    }
    let mut text = String::new();
    file.take(MAX_SOURCE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {shown} (as UTF-8 text): {e}"))?;
    if text.len() as u64 > MAX_SOURCE {
        return Err(format!("{shown} is longer than {} KiB", MAX_SOURCE / 1024));
    }
    Ok(trim_newline(text))
}

/// Runs `argv` without a shell (stdin empty, environment only `PATH` and
/// `HOME`, stderr discarded), within [`COMMAND_TIMEOUT`]; its output is the value.
fn run(argv: &[String]) -> Result<String, String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    for var in ["PATH", "HOME", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {:?}: {e}", argv[0]))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(format!("cannot read the output of {:?}", argv[0]));
    };
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.take(MAX_SOURCE + 1).read_to_end(&mut out);
        out
    });
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{:?} took longer than {}s", argv[0], COMMAND_TIMEOUT.as_secs()));
            }
            Err(e) => return Err(format!("waiting for {:?}: {e}", argv[0])),
        }
    };
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{:?} failed ({status}); its error output is not kept", argv[0]));
    }
    if out.len() as u64 > MAX_SOURCE {
        return Err(format!("{:?} printed more than {} KiB", argv[0], MAX_SOURCE / 1024));
    }
    String::from_utf8(out).map(trim_newline).map_err(|_| format!("{:?} printed something that is not UTF-8", argv[0]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cred(source: Source) -> Credential {
        Credential {
            name: "t".into(),
            source,
            variable: "T".into(),
            binds: Vec::new(),
            description: None,
            location: "test".into(),
        }
    }

    #[test]
    fn files_must_be_owner_only_regular_and_not_links() {
        let dir = std::env::temp_dir().join(format!("warden-vault-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        std::fs::write(&f, "s3cret-value-123\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = hold("tool", &[cred(Source::File(f.clone()))]).unwrap_err();
        assert!(e.contains("chmod 600") && !e.contains("s3cret"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = hold("tool", &[cred(Source::File(link))]).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let h = hold("tool", &[cred(Source::File(f))]).unwrap();
        assert_eq!(h[0].real(), "s3cret-value-123");
        assert_eq!(h[0].placeholder.len(), "s3cret-value-123".len().max(h[0].placeholder.len()));
        assert_ne!(h[0].placeholder, h[0].real());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn commands_run_without_a_shell_and_bad_values_are_refused() {
        let h = hold(
            "tool",
            &[Credential {
                name: "c".into(),
                ..cred(Source::Command(vec!["printf".into(), "tok-%s".into(), "abcdefgh".into()]))
            }],
        )
        .unwrap();
        assert_eq!(h[0].real(), "tok-abcdefgh");
        let e = hold(
            "tool",
            &[Credential {
                name: "d".into(),
                ..cred(Source::Command(vec!["printf".into(), "a\\nb-long-enough".into()]))
            }],
        )
        .unwrap_err();
        assert!(e.contains("line break"), "{e}");
        let e = hold("tool", &[Credential { name: "e".into(), ..cred(Source::Command(vec!["false".into()])) }])
            .unwrap_err();
        assert!(e.contains("failed"), "{e}");
        let e =
            hold("tool", &[Credential { name: "f".into(), ..cred(Source::Env("WARDEN_TEST_UNSET_VARIABLE".into())) }])
                .unwrap_err();
        assert!(e.contains("not set in warden's environment"), "{e}");
        let e = hold(
            "tool",
            &[Credential { name: "g".into(), ..cred(Source::Command(vec!["printf".into(), "short".into()])) }],
        )
        .unwrap_err();
        assert!(e.contains("at least 8"), "{e}");
    }
}
