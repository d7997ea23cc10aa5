//! The audit log as other tools read it: whole lines while `serve` runs
//! (`tail -n1 | jq`, a line-by-line reader), rotation into files that verify
//! as one chain, large write contents stored as digest and size, and
//! `warden log show` / `warden log tail [--follow]`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use util::Env;
use util::mcp_stdio::McpStdio;

/// The default policy with `[audit]` set to `audit`, written beside the workspace.
fn policy_with(env: &Env, audit: &str) -> String {
    let p = env.root.path().join("policy.toml");
    std::fs::write(&p, format!("{}\n[audit]\n{audit}\n", warden::policy::DEFAULT_POLICY)).unwrap();
    p.to_str().unwrap().to_string()
}

/// The files of the log, rotated ones first.
fn log_files(env: &Env) -> Vec<PathBuf> {
    warden::audit::files::log_files(&env.log).unwrap()
}

#[test]
fn tail_and_a_line_reader_see_whole_records_while_serve_runs() {
    let env = Env::new();
    env.write("a.txt", "hello\n");
    let mut srv = McpStdio::start(env.command(&["serve"])).unwrap_or_else(|r| panic!("serve did not start: {r}"));
    for _ in 0..3 {
        let doc = srv.call_doc("read_file", json!({"path": "a.txt"}));
        assert_eq!(doc["status"], "success", "{doc}");
    }
    // `serve` is alive and holds the log open: what a log shipper would read now.
    let jq = Command::new("sh").arg("-c").arg("tail -n1 \"$0\" | jq -e .call_id").arg(&env.log).output().unwrap();
    assert!(jq.status.success(), "tail -n1 | jq failed: {}", String::from_utf8_lossy(&jq.stderr));
    assert!(String::from_utf8_lossy(&jq.stdout).trim().starts_with("\"c-"), "{jq:?}");
    let py = Command::new("python3")
        .args(["-c", "import json,sys;r=[json.loads(l) for l in open(sys.argv[1])];print(len(r))"])
        .arg(&env.log)
        .output()
        .unwrap();
    assert!(py.status.success(), "a line reader failed: {}", String::from_utf8_lossy(&py.stderr));
    assert_eq!(String::from_utf8_lossy(&py.stdout).trim(), "3");
    assert!(!std::fs::read(&env.log).unwrap().contains(&0), "zero bytes in the log");
    // Still serving after the readers.
    assert_eq!(srv.call_doc("read_file", json!({"path": "a.txt"}))["status"], "success");
    srv.close().unwrap();
    assert_eq!(env.audit_records().len(), 4);
}

#[test]
fn a_rotated_log_verifies_across_three_files_and_a_tampered_middle_file_fails() {
    let env = Env::new();
    env.write("a.txt", "hello\n");
    let policy = policy_with(&env, "rotate = \"1KiB\"\nkeep = \"30d\"");
    let mut calls = 0;
    while log_files(&env).len() < 4 {
        let r = env.call(&["--policy", &policy], "read_file", r#"{"path":"a.txt"}"#);
        assert_eq!(r.code, 0, "{r:?}");
        calls += 1;
        assert!(calls < 40, "no rotation after {calls} calls: {:?}", log_files(&env));
    }
    let files = log_files(&env);
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names[0], "audit.00000000000000000001.jsonl", "{names:?}");
    assert!(names.windows(2).all(|w| w[0] < w[1]) && names.last().unwrap() == "audit.jsonl", "{names:?}");
    let v = env.run(&["log", "verify"]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.stdout.contains(&format!("ok: {calls} records in {} files", files.len())), "{v:?}");
    // The first record of the second file, edited.
    let middle = &files[1];
    let text = std::fs::read_to_string(middle).unwrap();
    std::fs::write(middle, text.replacen("\"read_file\"", "\"write_file\"", 1)).unwrap();
    let v = env.run(&["log", "verify"]);
    assert_eq!(v.code, 1, "{v:?}");
    assert!(v.stdout.contains("FAILED") && v.stdout.contains(&names[1]), "{v:?}");
}

#[test]
fn a_large_write_is_recorded_as_digest_and_size_unless_record_content() {
    let env = Env::new();
    let content = "0123456789abcdef".repeat(640);
    let args = json!({"path": "big.txt", "content": content}).to_string();
    let r = env.call(&["--approve", "yes"], "write_file", &args);
    assert_eq!(r.code, 0, "{r:?}");
    let rec = env.audit_records().pop().unwrap();
    let digest = hex::encode(Sha256::digest(content.as_bytes()));
    assert_eq!(rec["args"]["content"], json!({"sha256": digest, "bytes": content.len()}), "{rec}");
    assert_eq!(rec["args"]["path"], "big.txt");
    assert_eq!(hex::encode(Sha256::digest(std::fs::read(env.ws.join("big.txt")).unwrap())), digest);

    let policy = policy_with(&env, "record_content = true");
    let r = env.call(&["--approve", "yes", "--policy", &policy], "write_file", &args);
    assert_eq!(r.code, 0, "{r:?}");
    let rec = env.audit_records().pop().unwrap();
    assert_eq!(rec["args"]["content"], content, "stored whole (within the 16 KiB bound)");
    assert_eq!(env.run(&["log", "verify"]).code, 0);
}

#[test]
fn log_show_and_tail_print_records_and_follow_picks_up_a_new_one() {
    let env = Env::new();
    env.write("a.txt", "hello\n");
    let ids: Vec<String> = (0..3)
        .map(|_| env.call(&[], "read_file", r#"{"path":"a.txt"}"#).json()["call_id"].as_str().unwrap().to_string())
        .collect();
    let shown = env.run(&["log", "show", &ids[1]]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("\n  \"call_id\""), "pretty JSON: {}", shown.stdout);
    let rec: Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!((rec["call_id"].as_str(), rec["seq"].as_u64()), (Some(ids[1].as_str()), Some(2)));
    let none = env.run(&["log", "show", "c-nothing"]);
    assert_eq!(none.code, 1, "{none:?}");
    assert!(none.stderr.contains("no record of call"), "{none:?}");

    let tail = env.run(&["log", "tail", "-n", "2"]);
    assert_eq!(tail.code, 0, "{tail:?}");
    let got: Vec<String> = tail
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ids[1..]);

    let mut follow = env.command(&["log", "tail", "-n", "0", "--follow"]);
    follow.stdout(Stdio::piped());
    let mut child = follow.spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let new = env.call(&[], "read_file", r#"{"path":"a.txt"}"#).json()["call_id"].as_str().unwrap().to_string();
    // Bounded: the follower polls a few times a second; a minute means it never saw the record.
    let line = rx.recv_timeout(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    let line = line.unwrap_or_else(|_| panic!("log tail --follow printed nothing for the new record"));
    let rec: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(rec["call_id"].as_str(), Some(new.as_str()), "{line}");
}
