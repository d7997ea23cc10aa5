//! Host-side reads: what warden itself reads from the
//! workspace while a tool runs beside it. The approval preview of `write_file`
//! reads the file it would replace; a tool running concurrently (a `serve`
//! session, a wrapped MCP server) swaps a workspace directory under it for a
//! symbolic link to a secret outside every workspace, to `/dev` (so the file is
//! `/dev/zero`), or for a directory holding a FIFO. The preview must never show
//! the secret, and must come back promptly and bounded.
//!
//! The route is the library executor with an approval hook (the channel an MCP
//! client's elicitation uses), which records every preview and rejects the call,
//! so nothing is written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{CWD, FileType, Mode, RenameFlags, mknodat, renameat_with};
use serde_json::json;
use warden::ToolCall;
use warden::approval::Verdict;
use warden::executor::CallHooks;

use crate::util::kit::Kit;
use crate::{Case, Observed, Scene};

const CLASS: &str = "hostside";

/// Racing calls per case.
const CALLS: usize = 150;
/// The longest all of a case's calls may take together before it is called hung.
const PROMPT: Duration = Duration::from_secs(60);
/// A preview is at most 16 Ki characters plus the truncation marker.
const MAX_PREVIEW: usize = (16 << 10) + 64;
/// What the real directory holds where the attack puts the secret.
const DECOY: &str = "decoy: the file the approver should see\n";

fn c(id: &'static str, attempt: &'static str, expected: &'static str, run: fn(&Scene) -> Observed) -> Case {
    Case { id, class: CLASS, runtime: "component", attempt, expected, heavy: false, run }
}

/// What the attacker puts in place of `ws/dir`.
enum Swap {
    /// A symbolic link to the directory holding the secret.
    Secret,
    /// A symbolic link to `/dev`, so `dir/zero` is `/dev/zero`.
    DevZero,
    /// A real directory whose `target` is a FIFO nobody writes.
    Fifo,
}

/// A kit whose `write_file` (builtin `fs`, tier `ask`) may write the workspace.
fn kit(s: &Scene, id: &str) -> Kit {
    s.kit(id, "[tools.write_file]\nplugin = \"fs\"\ntier = \"ask\"\nfs.read = [\"{workspace}\"]\nfs.write = [\"{workspace}\"]\n")
}

/// Swaps `ws/dir` and `ws/alt` in one step (renameat2 RENAME_EXCHANGE), as a tool
/// with a write grant to the workspace can.
fn exchange(ws: &Path) {
    renameat_with(CWD, ws.join("dir"), CWD, ws.join("alt"), RenameFlags::EXCHANGE).unwrap();
}

/// Sets the scene for `swap`; returns the name of the file the call names under `dir/`.
fn stage(s: &Scene, ws: &Path, swap: &Swap) -> &'static str {
    let name = match swap {
        Swap::Secret => s.secret_file.file_name().unwrap().to_str().unwrap(),
        Swap::DevZero => "zero",
        Swap::Fifo => "target",
    };
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    std::fs::create_dir(ws.join("dir")).unwrap();
    std::fs::write(ws.join("dir").join(name), DECOY).unwrap();
    match swap {
        Swap::Secret => std::os::unix::fs::symlink(&s.outside, ws.join("alt")).unwrap(),
        Swap::DevZero => std::os::unix::fs::symlink("/dev", ws.join("alt")).unwrap(),
        Swap::Fifo => {
            std::fs::create_dir(ws.join("alt")).unwrap();
            mknodat(CWD, ws.join("alt").join(name), FileType::Fifo, Mode::from_raw_mode(0o666), 0).unwrap();
        }
    }
    name
}

/// What the calls saw.
#[derive(Default)]
struct Seen {
    previews: Vec<String>,
    slowest: Duration,
}

/// One `write_file` of `dir/NAME` whose preview the hook records, then rejects.
fn call(kit: &Kit, name: &str, previews: &Mutex<Vec<String>>) -> Duration {
    let hook = |req: &warden::approval::Request<'_>| {
        previews.lock().unwrap().push(req.preview.clone());
        Verdict::Rejected("recorded by the escape battery".into())
    };
    let hooks = CallHooks { approve: Some(&hook), ..CallHooks::default() };
    let started = Instant::now();
    let call = ToolCall::new("write_file", json!({"path": format!("dir/{name}"), "content": "new\n"}));
    let _rejected_by_the_hook = kit.exec.call_with(call, &hooks);
    started.elapsed()
}

/// The attack: once with the swap already made, then `CALLS` times while a racer
/// keeps exchanging the directory and its replacement. All of it on a thread of its
/// own, so that a preview that blocks (a FIFO) or never ends (`/dev/zero`) is seen
/// as a hang instead of hanging the battery.
fn attack(s: &Scene, id: &'static str, swap: Swap) -> Observed {
    let kit = Arc::new(kit(s, id));
    let ws: PathBuf = kit.ws.clone();
    let name = stage(s, &ws, &swap);
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let kit = Arc::clone(&kit);
        let ws = ws.clone();
        std::thread::spawn(move || {
            let previews = Mutex::new(Vec::new());
            // Static: the swap is in place for the whole call.
            exchange(&ws);
            let mut slowest = call(&kit, name, &previews);
            exchange(&ws);
            // Racing: a concurrent tool flips the directory as fast as it can.
            let stop = Arc::new(AtomicBool::new(false));
            let flips = Arc::new(AtomicUsize::new(0));
            let racer = {
                let (stop, flips, ws) = (Arc::clone(&stop), Arc::clone(&flips), ws.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        exchange(&ws);
                        flips.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            for _ in 0..CALLS {
                slowest = slowest.max(call(&kit, name, &previews));
            }
            stop.store(true, Ordering::Relaxed);
            racer.join().unwrap();
            let _ = tx.send(Seen { previews: previews.into_inner().unwrap(), slowest });
        })
    };
    let seen = match rx.recv_timeout(PROMPT) {
        Ok(seen) => seen,
        Err(RecvTimeoutError::Timeout) => {
            // The worker is left blocked; the battery goes on.
            drop(worker);
            return Observed::new(false, format!("the preview HUNG: no answer within {} s", PROMPT.as_secs()));
        }
        Err(RecvTimeoutError::Disconnected) => {
            let why = worker.join().err().and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_default();
            return Observed::new(false, format!("the attack itself failed: {why}"));
        }
    };
    worker.join().unwrap();
    let first = seen.previews.first().cloned().unwrap_or_default();
    let refused = |p: &String| p.contains("cannot show the current file");
    let racing = seen.previews.get(1..).unwrap_or_default();
    let decoy = racing.iter().filter(|p| p.contains("-decoy")).count();
    let refusals = racing.iter().filter(|p| refused(p)).count();
    let leaked = seen.previews.iter().filter(|p| s.leaks(p)).count();
    let longest = seen.previews.iter().map(|p| p.chars().count()).max().unwrap_or(0);
    let contained = seen.previews.len() == CALLS + 1
        && refused(&first)
        && leaked == 0
        && longest <= MAX_PREVIEW
        && seen.slowest < Duration::from_secs(10);
    Observed::new(
        contained,
        format!(
            "swapped: {:?}; racing: {} previews, {decoy} showed the real file, {refusals} refused, {leaked} showed the \
             secret; longest {longest} characters, slowest call {} ms",
            first.lines().next().unwrap_or_default(),
            racing.len(),
            seen.slowest.as_millis()
        ),
    )
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "hostside-preview-swap.secret/component",
            "`write_file dir/secret.txt` (tier ask) while a concurrent tool swaps the workspace's `dir` for a symbolic \
             link to the directory holding the secret (once before the call, then racing 150 calls)",
            "the approval preview says it cannot show the current file (a symbolic link on the path); the secret never \
             appears in any preview",
            |s| attack(s, "preview-swap-secret", Swap::Secret),
        ),
        c(
            "hostside-preview-swap.dev-zero/component",
            "`write_file dir/zero` (tier ask) while a concurrent tool swaps `dir` for a symbolic link to /dev, so the \
             file the preview reads is /dev/zero",
            "every call answers promptly with a bounded preview that says it cannot show the file; warden's memory \
             stays bounded",
            |s| attack(s, "preview-swap-zero", Swap::DevZero),
        ),
        c(
            "hostside-preview-swap.fifo/component",
            "`write_file dir/target` (tier ask) while a concurrent tool swaps `dir` for a directory whose `target` is a \
             FIFO nobody writes",
            "every call answers promptly: the preview opens without blocking and refuses the FIFO (not a regular file)",
            |s| attack(s, "preview-swap-fifo", Swap::Fifo),
        ),
        Case {
            id: "hostside-git-fifo/process",
            class: CLASS,
            runtime: "process",
            attempt: "the shell tool plants a FIFO nobody writes at .git/commondir (a file warden reads on the \
                      host to find the repository's protected places; it is not itself protected), then a second \
                      call runs",
            expected: "the second call answers promptly (warden opens them non-blocking and reads regular files only)",
            heavy: false,
            run: git_fifo,
        },
    ]
}

/// `hostside-git-fifo/process`: files under `.git` that are not protected but
/// that warden reads when it computes a call's protected paths.
fn git_fifo(s: &Scene) -> Observed {
    let ws = s.ws("git-fifo");
    let init = std::process::Command::new("git").arg("-C").arg(&ws).args(["init", "-q"]).status();
    if !init.is_ok_and(|st| st.success()) {
        return Observed::skipped("git is not installed");
    }
    let plant = s.shell(&ws, crate::scene::SHELL, "mkfifo .git/commondir && echo planted");
    let started = Instant::now();
    let next = s.shell(&ws, crate::scene::SHELL, "echo next");
    let took = started.elapsed();
    let planted = plant.out().contains("planted");
    Observed::new(
        planted && !next.hung && next.out() == "next\n",
        format!(
            "plant: {}; next call: {:?} {} after {:.1}s{}",
            if planted { "planted" } else { "refused" },
            next.out(),
            next.error_message(),
            took.as_secs_f64(),
            if next.hung { " (HUNG)" } else { "" }
        ),
    )
}
