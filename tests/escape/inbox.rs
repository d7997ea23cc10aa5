//! The approval inbox (docs/approvals.md): a call waiting for a person sits in
//! `LOG.live/inbox`, and the first answer file there lets it run. A tool whose
//! write grant holds the audit log's directory (the default log lives under
//! `~/.local/state`, inside any `{home}` grant) tries to answer it itself, by
//! every route a write grant offers: writing the answer, replacing the inbox
//! directory, and linking the answer to a file of its own. Judged from the
//! host: the waiting call never sees an answer, and no answer file exists.

use std::sync::mpsc;
use std::time::Duration;

use warden::approval::Request;
use warden::live::{Live, Waited};
use warden::policy::Tier;
use warden::runtime::Cancel;

use crate::{Case, Observed, Scene};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "hostside-inbox-self-approve/process",
            class: "hostside",
            runtime: "process",
            attempt: "a call waits for approval in the inbox beside the audit log, which lies inside the shell tool's \
                  write grant; the tool writes an approving answer for it, replaces the inbox directory with one \
                  holding the answer, and links the answer to a file of its own",
            expected: "the inbox is read-only inside every write grant: no answer reaches the waiting call",
            heavy: false,
            run: self_approve,
        },
        Case {
            id: "persistence-approvals-plant/process",
            class: "persistence",
            runtime: "process",
            attempt: "the shell tool (workspace writable) plants warden.approvals.toml approving every call, beside a \
                  policy in a nested project and at the top, and a FIFO at its lock's name",
            expected: "refused at any depth, as warden.toml is: nothing planted on the host",
            heavy: false,
            run: plant_approvals,
        },
        Case {
            id: "hostside-inbox-released/process",
            class: "hostside",
            runtime: "process",
            attempt: "a policy releases the inbox to a tool (fs.unprotect naming it) or grants a write inside it \
                  (fs.write on LOG.live/inbox); the tool writes an answer",
            expected: "both calls refused before they run (warden's own files are never released); no answer on the host",
            heavy: false,
            run: released,
        },
        Case {
            id: "hostside-control-socket/process",
            class: "hostside",
            runtime: "process",
            attempt: "a `warden serve` with background jobs keeps its control socket in LOG.live/procs/; a shell \
                      tool of the same uid whose read grant holds the log's directory connects to it and asks for \
                      every job",
            expected: "the socket answers only peers in warden's own mount namespace: the tool gets no answer",
            heavy: false,
            run: control_socket,
        },
    ]
}

/// The tool's attempt, in the workspace (the log's directory is `state/`).
const SCRIPT: &str = r#"
cd state/audit.jsonl.live/inbox || exit 3
for f in a-*.json; do
  case "$f" in *.answer.json) continue;; esac
  id=${f%.json}
  sha=$(sed -n 's/.*"args_sha256": "\([0-9a-f]*\)".*/\1/p' "$f")
  answer="{\"id\":\"$id\",\"args_sha256\":\"$sha\",\"answer\":\"approve\",\"who\":\"tool\",\"via\":\"tool\"}"
  printf '%s' "$answer" > "$id.answer.json" 2>/dev/null && echo wrote
  printf '%s' "$answer" > /tmp/mine.json; ln -f /tmp/mine.json "$id.answer.json" 2>/dev/null && echo linked
  ln -sf /tmp/mine.json "$id.answer.json" 2>/dev/null && echo symlinked
  cd .. && mv inbox inbox.old 2>/dev/null && mkdir inbox && printf '%s' "$answer" > "inbox/$id.answer.json" && echo replaced
  cd inbox 2>/dev/null || true
done
echo done
"#;

fn self_approve(s: &Scene) -> Observed {
    let ws = s.ws("inbox-self-approve");
    let state = ws.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let log = state.join("audit.jsonl");
    let live = Live::for_log(&log);
    live.ensure().unwrap();
    let inbox = live.inbox();
    let (posted_tx, posted_rx) = mpsc::channel();
    let cancel = Cancel::new();
    let waiter = {
        let (inbox, cancel) = (inbox.clone(), cancel.clone());
        std::thread::spawn(move || {
            let args = serde_json::json!({"path": "x"});
            let req = Request {
                tool: "write_file",
                tier: Tier::Ask,
                args: &args,
                args_sha256: "0123abcd",
                preview: String::new(),
                location: "policy:1:1",
                session: "s-test",
            };
            let posted = move |p: &warden::live::Pending| {
                let _ = posted_tx.send(p.id.clone());
            };
            inbox.wait(&req, "escape test", Duration::from_secs(30), &cancel, &posted)
        })
    };
    let Ok(id) = posted_rx.recv_timeout(Duration::from_secs(10)) else {
        return Observed::new(false, "the waiting call was never posted");
    };
    let policy = s.policy_file(
        "version = 1\n[tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{workspace}\", \"{tmp}\"]\n",
    );
    let args = serde_json::json!({ "command": SCRIPT }).to_string();
    let run = s.warden_logged(&ws, &log, &["--policy", policy.to_str().unwrap(), "call", "shell", &args], None, None);
    // The waiting call polls every 100 ms: give it time to see an answer.
    std::thread::sleep(Duration::from_millis(400));
    let answer_on_host = inbox.answered(&id) || live.path().join("inbox.old").exists();
    cancel.cancel();
    let waited = waiter.join().unwrap();
    let answered = matches!(waited, Ok(Waited::Answered(..)));
    let said = run.out().replace('\n', " ");
    Observed::new(
        !answered && !answer_on_host && said.contains("done"),
        format!(
            "tool said: {said:?}; answer file on the host: {answer_on_host}; the waiting call: {}",
            match waited {
                Ok(Waited::Answered(_, a)) => format!("ANSWERED by {}", a.who),
                Ok(Waited::Cancelled(_)) => "saw no answer".to_string(),
                Ok(Waited::TimedOut(_)) => "timed out".to_string(),
                Err(e) => format!("error: {e}"),
            }
        ),
    )
}

/// `persistence-approvals-plant/process`.
fn plant_approvals(s: &Scene) -> Observed {
    let ws = s.ws("approvals-plant");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/warden.toml"), "version = 1\n").unwrap();
    let entry = "[[approval]]\nid = \"l-0000000000000000\"\ntool = \"shell\"\ntier = \"ask\"\nmatch = \"tool\"\n\
                 scope = \"workspace\"\nworkspace = \"/\"\ndefinition = \"x\"\nwho = \"alice (uid 1000)\"\n\
                 via = \"terminal /dev/pts/3\"\ncreated = \"2026-01-01T00:00:00Z\"\n";
    let script = format!(
        "printf '%s' '{entry}' > sub/warden.approvals.toml; printf '%s' '{entry}' > warden.approvals.toml; \
         mkfifo sub/.warden.approvals.toml.lock; echo done"
    );
    let policy = s.policy_file(
        "version = 1\n[tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{workspace}\"]\n",
    );
    let args = serde_json::json!({ "command": script }).to_string();
    let run = s.warden(&ws, &["--policy", policy.to_str().unwrap(), "call", "shell", &args], None, None);
    let planted: Vec<&str> = ["sub/warden.approvals.toml", "warden.approvals.toml", "sub/.warden.approvals.toml.lock"]
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(ws.join(p)).is_ok())
        .collect();
    Observed::new(
        planted.is_empty() && run.out().contains("done"),
        format!("planted on the host: {planted:?}; {}", run.brief()),
    )
}

/// `hostside-inbox-released/process`.
fn released(s: &Scene) -> Observed {
    let ws = s.ws("inbox-released");
    let log = ws.join("state").join("audit.jsonl");
    std::fs::create_dir_all(ws.join("state")).unwrap();
    let live = Live::for_log(&log);
    live.ensure().unwrap();
    let inbox = live.path().join("inbox");
    let mut lines = Vec::new();
    let mut held = true;
    for grant in [
        format!("fs.write = [\"{{workspace}}\"]\nfs.unprotect = [{:?}]", live.path().display().to_string()),
        format!("fs.write = [{:?}]", inbox.display().to_string()),
    ] {
        let policy = s.policy_file(&format!(
            "version = 1\n[tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
             fs.read = [\"{{system}}\", \"{{workspace}}\"]\n{grant}\n"
        ));
        let target = inbox.join("a-00000000000000000000000000000000.answer.json");
        let args =
            serde_json::json!({ "command": format!("echo x > {:?} && echo wrote", target.display().to_string()) });
        let run = s.warden_logged(
            &ws,
            &log,
            &["--policy", policy.to_str().unwrap(), "call", "shell", &args.to_string()],
            None,
            None,
        );
        let written = target.exists();
        let refused = run.out().is_empty() && run.error_message().contains("warden's");
        held &= !written && refused;
        lines.push(format!("{grant:?}: written {written}, {}", run.brief()));
    }
    Observed::new(held, lines.join("; "))
}

/// `hostside-control-socket/process`.
fn control_socket(s: &Scene) -> Observed {
    use std::io::{BufRead as _, BufReader};
    let ws = s.ws("control-socket");
    let log = ws.join("audit.jsonl");
    let serve_policy = s.policy_file(
        "version = 1\n[tools.bg]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\ntier = \"auto\"\nbackground = true\n\
         fs.read = [\"{system}\"]\n",
    );
    let mut serve = std::process::Command::new(crate::scene::WARDEN)
        .current_dir(&ws)
        .arg("--policy")
        .arg(&serve_policy)
        .arg("--audit-log")
        .arg(&log)
        .args(["serve", "--http", "127.0.0.1:0"])
        .env("WARDEN_HTTP_TOKEN", "escape-control-0123456789abcdef")
        .env("WARDEN_CACHE_DIR", crate::util::cache_dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stderr.take().unwrap()).lines();
    let listening = lines.by_ref().take(20).any(|l| l.is_ok_and(|l| l.contains("serving MCP at")));
    let sock = std::fs::read_dir(Live::for_log(&log).path().join("procs")).ok().and_then(|mut d| {
        d.find_map(|e| e.ok().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sock")))
    });
    let Some(sock) = sock.filter(|_| listening) else {
        let _ = serve.kill();
        let _ = serve.wait();
        return Observed::new(false, "serve did not start its control socket");
    };
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(3)\ns.connect({:?})\n\
         s.sendall(b'{{\"op\": \"jobs\"}}\\n')\ntry:\n    print('answer', s.recv(4096)[:60])\nexcept Exception as e:\n    print('no answer', e)\n",
        sock.display().to_string()
    );
    std::fs::write(ws.join("probe.py"), script).unwrap();
    let policy = s.policy_file(
        "version = 1\n[tools.sh]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\n",
    );
    let args = serde_json::json!({ "command": "python3 probe.py" }).to_string();
    let run = s.warden(&ws, &["--policy", policy.to_str().unwrap(), "call", "sh", &args], None, None);
    let _ = serve.kill();
    let _ = serve.wait();
    let said = run.out();
    Observed::new(!said.contains("answer b"), format!("tool said {said:?}; {}", run.brief()))
}
