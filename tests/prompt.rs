//! The terminal prompt, answered through a real pseudo-terminal (`script`):
//! yes runs the call, no rejects it, "always" grants the tool for the session,
//! and `confirm` never offers "always".

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;
use util::Env;

/// Runs `warden ARGS` under a pty, typing `answers`; returns the exit code and
/// everything the terminal showed.
fn on_a_terminal(env: &Env, args: &[&str], answers: &str) -> (i32, String) {
    let mut line = vec![env!("CARGO_BIN_EXE_warden").to_string(), "--audit-log".into(), env.log.display().to_string()];
    line.extend(args.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))));
    on_a_terminal_shell(env, &line.join(" "), answers)
}

fn result_docs(screen: &str) -> Vec<Value> {
    screen.lines().filter_map(|l| l.find('{').and_then(|i| serde_json::from_str(&l[i..]).ok())).collect()
}

#[test]
fn yes_at_the_prompt_runs_the_call_and_shows_a_diff_first() {
    let env = Env::new();
    env.write("notes.md", "old line\n");
    let (code, screen) =
        on_a_terminal(&env, &["call", "write_file", r#"{"path":"notes.md","content":"new line\n"}"#], "y\n");
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("-old line") && screen.contains("+new line"), "no diff shown: {screen}");
    assert!(screen.contains("[a]lways"), "{screen}");
    assert_eq!(std::fs::read_to_string(env.ws.join("notes.md")).unwrap(), "new line\n");
    assert_eq!(env.audit_records()[0]["approved_by"], "prompt");
}

#[test]
fn no_at_the_prompt_rejects_with_exit_three() {
    let env = Env::new();
    let (code, screen) = on_a_terminal(&env, &["call", "write_file", r#"{"path":"x","content":"y"}"#], "n\n");
    assert_eq!(code, 3, "{screen}");
    let docs = result_docs(&screen);
    assert_eq!(docs.last().unwrap()["status"], "rejected", "{screen}");
    assert!(!env.ws.join("x").exists());
    assert_eq!(env.audit_records()[0]["decision"], "rejected");
}

#[test]
fn always_grants_the_tool_for_the_rest_of_the_session() {
    let env = Env::new();
    let calls = r#"[{"type":"tool_use","id":"a","name":"write_file","input":{"path":"a","content":"1"}}]"#;
    // Two calls in one process: the second is covered by the grant from the first answer.
    let two = format!("[{},{}]", &calls[1..calls.len() - 1], calls[1..calls.len() - 1].replace("\"a\"", "\"b\""));
    std::fs::write(env.ws.join("calls.json"), &two).unwrap();
    let line = format!("{} --audit-log {} exec < calls.json", env!("CARGO_BIN_EXE_warden"), env.log.display());
    let (code, screen) = on_a_terminal_shell(&env, &line, "a\n");
    assert_eq!(code, 0, "{screen}");
    let by: Vec<String> = env.audit_records().iter().map(|r| r["approved_by"].as_str().unwrap().to_string()).collect();
    let mut by_sorted = by.clone();
    by_sorted.sort();
    assert_eq!(by_sorted, ["grant", "prompt"], "{screen}");
}

#[test]
fn confirm_never_offers_always() {
    let env = Env::new();
    env.write("gone.txt", "x");
    let (code, screen) = on_a_terminal(&env, &["call", "delete_file", r#"{"path":"gone.txt"}"#], "a\nn\n");
    assert!(!screen.contains("[a]lways"), "{screen}");
    assert!(screen.contains("will delete: gone.txt"), "{screen}");
    assert_eq!(code, 3, "{screen}");
    assert!(env.ws.join("gone.txt").exists());
}

/// Runs `shell_line` under a pty, typing `answers`; returns the exit code and
/// everything the terminal showed.
fn on_a_terminal_shell(env: &Env, shell_line: &str, answers: &str) -> (i32, String) {
    assert!(
        Command::new("script").arg("--version").output().is_ok(),
        "needs util-linux `script` to make a pseudo-terminal: install util-linux"
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", shell_line, "/dev/null"])
        .current_dir(&env.ws)
        .env("WARDEN_CACHE_DIR", util::cache_dir())
        .env("HOME", env.root.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).replace('\r', ""))
}
