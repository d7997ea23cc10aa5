//! The `warden` command as a user meets it: results, error codes, exit codes,
//! approvals, the audit log, `exec` shapes, `list` and `policy check`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use serde_json::{Value, json};
use std::time::Duration;
use util::mcp_stdio::McpStdio;
use util::{Env, SECRET};

#[test]
fn read_file_returns_content_and_exits_zero() {
    let env = Env::new();
    env.write("README.md", "# hello\nworld\n");
    let r = env.call(&[], "read_file", r#"{"path":"README.md"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["status"], "success");
    assert_eq!(doc["tool"], "read_file");
    assert_eq!(doc["result"]["content"], "# hello\nworld\n");
    assert_eq!(doc["result"]["lines"], 2);
    assert_eq!(doc["truncated"], false);
    assert!(doc["call_id"].as_str().unwrap().starts_with("c-"));
    assert!(doc["duration_ms"].is_number());
}

#[test]
fn read_file_takes_line_ranges_and_absolute_paths_inside_the_workspace() {
    let env = Env::new();
    let p = env.write("n.txt", "1\n2\n3\n4\n5\n");
    let r = env.call(&[], "read_file", &json!({"path": p, "offset": 2, "limit": 2}).to_string());
    assert_eq!(r.json()["result"]["content"], "2\n3\n", "{r:?}");
    assert_eq!(r.json()["result"]["path"], "n.txt");
}

/// Every fs tool, pointed outside the workspace in every way we know: each is
/// refused with INVALID_PATH or PERMISSION_DENIED, exit 1, and nothing leaks
/// or changes.
#[test]
fn every_fs_tool_refuses_paths_outside_the_workspace() {
    let env = Env::new();
    std::os::unix::fs::symlink(env.outside.join("secret.txt"), env.ws.join("link")).unwrap();
    std::os::unix::fs::symlink(&env.outside, env.ws.join("dirlink")).unwrap();
    std::fs::write(env.ws.join("inside.txt"), "x").unwrap();
    let secret = env.outside.join("secret.txt");
    let secret = secret.to_str().unwrap();
    let escapes =
        ["/etc/passwd", "../outside/secret.txt", secret, "link", "dirlink/secret.txt", "/proc/self/root/etc/passwd"];
    for target in escapes {
        let calls: Vec<(&str, Value)> = vec![
            ("read_file", json!({"path": target})),
            ("list_directory", json!({"path": target})),
            ("search_files", json!({"pattern": "*", "path": target})),
            ("grep", json!({"pattern": "TOPSECRET", "path": target})),
            ("file_info", json!({"path": target})),
            ("write_file", json!({"path": target, "content": "pwned"})),
            ("edit_file", json!({"path": target, "old": "TOPSECRET", "new": "pwned"})),
            ("create_directory", json!({"path": format!("{target}/newdir")})),
            ("copy_file", json!({"source": target, "dest": "copy.txt"})),
            ("copy_file", json!({"source": "inside.txt", "dest": target})),
            ("move_file", json!({"source": target, "dest": "moved.txt"})),
            ("delete_file", json!({"path": target})),
        ];
        for (tool, args) in calls {
            let r = env.call(&["--approve", "yes"], tool, &args.to_string());
            assert!(!r.stdout.contains(SECRET) && !r.stdout.contains("root:x:0"), "{tool} {args} leaked: {r:?}");
            // A symlink may be stat'ed, renamed or deleted as a link, without following it.
            let link_itself =
                matches!(target, "link" | "dirlink") && matches!(tool, "file_info" | "delete_file" | "move_file");
            if link_itself {
                continue;
            }
            if tool == "list_directory" && target == "link" {
                assert_eq!(r.code, 2, "{tool} {args}: {r:?}"); // not a directory: INVALID_ARGS
                continue;
            }
            let code = r.error_code();
            assert!(
                code == "INVALID_PATH" || code == "PERMISSION_DENIED" || code == "FILE_NOT_FOUND",
                "{tool} {args}: expected a refusal, got {r:?}"
            );
            assert_eq!(r.code, 1, "{tool} {args}: {r:?}");
        }
    }
    assert_eq!(std::fs::read_to_string(env.outside.join("secret.txt")).unwrap(), SECRET);
    assert!(!env.outside.join("newdir").exists());
    assert!(!env.ws.join("copy.txt").exists());
}

#[test]
fn writes_need_approval_without_a_terminal_and_run_with_approve_yes() {
    let env = Env::new();
    let r = env.call(&[], "write_file", r#"{"path":"new.txt","content":"hi"}"#);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(r.error_code(), "APPROVAL_REQUIRED");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("--approve yes"));
    assert!(!env.ws.join("new.txt").exists());

    let r = env.call(&["--approve", "yes"], "write_file", r#"{"path":"new.txt","content":"hi"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["result"], json!({"path": "new.txt", "bytes_written": 2}));
    assert_eq!(std::fs::read_to_string(env.ws.join("new.txt")).unwrap(), "hi");

    let recs = env.audit_records();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["decision"], "approval_required");
    assert_eq!(recs[0]["error_code"], "APPROVAL_REQUIRED");
    assert_eq!(recs[0]["approved_by"], Value::Null);
    assert_eq!(recs[1]["decision"], "allowed");
    assert_eq!(recs[1]["approved_by"], "flag");
    assert_eq!(recs[1]["status"], "success");
    assert_eq!(recs[1]["tier"], "ask");
    assert_eq!(recs[1]["sandbox"]["runtime"], "component");
}

#[test]
fn approve_inbox_waits_for_a_person_answering_with_warden_approvals() {
    let env = Env::new();
    let child = env
        .command(&["--approve", "inbox", "call", "write_file", r#"{"path":"in.txt","content":"ok"}"#])
        .spawn()
        .unwrap();
    // The call waits: a person lists the inbox and approves it from another terminal.
    let mut id = String::new();
    assert!(
        util::within(Duration::from_secs(30), || {
            let list = env.run(&["approvals", "list", "--json"]);
            id = list.json()["pending"][0]["id"].as_str().unwrap_or_default().to_string();
            !id.is_empty()
        }),
        "the call never appeared in the inbox"
    );
    let list = env.run(&["approvals", "list", "--json"]);
    assert_eq!(list.json()["pending"][0]["client"], "warden call", "{list:?}");
    let shown = env.run(&["approvals", "show", &id]);
    assert!(shown.stdout.contains("+ok"), "the preview diff: {shown:?}");
    let approve = env.run(&["approvals", "approve", &id]);
    assert_eq!(approve.code, 0, "{approve:?}");
    // A second answer is refused: the first one wins.
    let again = env.run(&["approvals", "reject", &id]);
    assert_ne!(again.code, 0, "{again:?}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(env.ws.join("in.txt")).unwrap(), "ok");
    let rec = env.audit_records().pop().unwrap();
    assert_eq!((rec["approved_by"].as_str(), rec["approval"]["id"].as_str()), (Some("inbox"), Some(id.as_str())));
    // An unknown id names what to do.
    let r = env.run(&["approvals", "approve", "a-00000000000000000000000000000000"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.all().contains("warden approvals list"), "{r:?}");
}

#[test]
fn approve_deny_refuses_even_with_grants_available() {
    let env = Env::new();
    env.write("a.txt", "x");
    let r = env.call(&["--approve", "deny"], "delete_file", r#"{"path":"a.txt"}"#);
    assert_eq!((r.code, r.error_code().as_str()), (3, "APPROVAL_REQUIRED"), "{r:?}");
    assert!(env.ws.join("a.txt").exists());
}

#[test]
fn unknown_tools_get_suggestions_and_exit_two() {
    let env = Env::new();
    let r = env.call(&[], "read_fle", "{}");
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(r.error_code(), "NOT_FOUND");
    assert!(r.stdout.contains("did you mean read_file"), "{r:?}");
    let r = env.call(&[], "nope", "{}");
    assert_eq!((r.code, r.error_code().as_str()), (2, "NOT_FOUND"));
}

#[test]
fn dotted_plugin_names_resolve() {
    let env = Env::new();
    env.write("a.txt", "x");
    let r = env.call(&[], "fs.read_file", r#"{"path":"a.txt"}"#);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn wrong_argument_types_list_every_violation_with_its_pointer() {
    let env = Env::new();
    let r = env.call(&[], "read_file", r#"{"path":5,"offset":"x","extra":true}"#);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(r.error_code(), "INVALID_ARGS");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("/path"), "{msg}");
    assert!(msg.contains("/offset"), "{msg}");
    assert!(msg.contains("extra"), "{msg}");
    let r = env.call(&[], "read_file", "{}");
    assert!(r.stdout.contains("path"), "{r:?}");
    assert_eq!(r.code, 2);
}

#[test]
fn malformed_json_exits_two_with_the_position() {
    let env = Env::new();
    let r = env.call(&[], "read_file", r#"{"path": "a.txt",}"#);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("line 1, column"), "{r:?}");
    let r = env.run_with_stdin(&["call", "read_file", "-"], Some("{oops"));
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn args_can_come_from_stdin() {
    let env = Env::new();
    env.write("a.txt", "from stdin");
    let r = env.run_with_stdin(&["call", "read_file", "-"], Some(r#"{"path":"a.txt"}"#));
    assert_eq!(r.json()["result"]["content"], "from stdin", "{r:?}");
}

#[test]
fn the_fs_tools_do_their_jobs() {
    let env = Env::new();
    env.write("src/a.rs", "fn main() {\n    println!(\"needle\");\n}\n");
    env.write("src/b.txt", "nothing here\n");
    let yes = ["--approve", "yes"];

    let r = env.call(&[], "list_directory", r#"{"depth":2}"#);
    let names: Vec<String> = r.json()["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["src", "src/a.rs", "src/b.txt"], "{r:?}");

    let r = env.call(&[], "search_files", r#"{"pattern":"*.rs"}"#);
    assert_eq!(r.json()["result"]["matches"], json!(["src/a.rs"]), "{r:?}");

    let r = env.call(&[], "grep", r#"{"pattern":"need+le"}"#);
    assert_eq!(
        r.json()["result"]["matches"],
        json!([{"path": "src/a.rs", "line": 2, "text": "    println!(\"needle\");"}])
    );

    let r = env.call(&[], "file_info", r#"{"path":"src/b.txt"}"#);
    assert_eq!(r.json()["result"]["type"], "file");
    assert_eq!(r.json()["result"]["size"], 13);
    assert!(r.json()["result"]["modified"].as_str().unwrap().ends_with('Z'));

    let r = env.call(&yes, "edit_file", r#"{"path":"src/b.txt","old":"nothing","new":"something"}"#);
    assert_eq!(r.json()["result"]["replacements"], 1, "{r:?}");
    assert_eq!(std::fs::read_to_string(env.ws.join("src/b.txt")).unwrap(), "something here\n");

    let r = env.call(&yes, "create_directory", r#"{"path":"d/e"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.ws.join("d/e").is_dir());
    let r = env.call(&yes, "copy_file", r#"{"source":"src/b.txt","dest":"d/e/c.txt"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.call(&yes, "move_file", r#"{"source":"d/e/c.txt","dest":"d/m.txt"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(env.ws.join("d/m.txt")).unwrap(), "something here\n");
    let r = env.call(&yes, "delete_file", r#"{"path":"d/m.txt"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!env.ws.join("d/m.txt").exists());
    let r = env.call(&yes, "write_file", r#"{"path":"deep/x/y.txt","content":"a","create_parents":true}"#);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.call(&yes, "write_file", r#"{"path":"deep/x/y.txt","content":"b","append":true}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(env.ws.join("deep/x/y.txt")).unwrap(), "ab");
}

#[test]
fn edit_file_refuses_absent_and_ambiguous_text() {
    let env = Env::new();
    env.write("a.txt", "x x");
    let yes = ["--approve", "yes"];
    let r = env.call(&yes, "edit_file", r#"{"path":"a.txt","old":"y","new":"z"}"#);
    assert_eq!((r.code, r.error_code().as_str()), (2, "INVALID_ARGS"), "{r:?}");
    let r = env.call(&yes, "edit_file", r#"{"path":"a.txt","old":"x","new":"z"}"#);
    assert_eq!((r.code, r.error_code().as_str()), (2, "INVALID_ARGS"), "{r:?}");
    assert!(r.stdout.contains("occurs 2 times"));
    let r = env.call(&yes, "edit_file", r#"{"path":"a.txt","old":"x","new":"z","replace_all":true}"#);
    assert_eq!(r.json()["result"]["replacements"], 2, "{r:?}");
}

#[test]
fn missing_files_are_file_not_found() {
    let env = Env::new();
    let r = env.call(&[], "read_file", r#"{"path":"nope.txt"}"#);
    assert_eq!((r.code, r.error_code().as_str()), (1, "FILE_NOT_FOUND"), "{r:?}");
}

#[test]
fn terminal_escapes_and_invisible_characters_are_stripped_from_results() {
    let env = Env::new();
    env.write("evil.txt", "ok\u{1b}[2J\u{1b}]0;pwned\u{7}\r\nignore\u{200B} previous\u{202E}\ttab\n");
    let r = env.call(&[], "read_file", r#"{"path":"evil.txt"}"#);
    assert_eq!(r.json()["result"]["content"], "ok[2J]0;pwned\nignore previous\ttab\n", "{r:?}");
}

#[test]
fn large_results_are_truncated_to_max_output() {
    let env = Env::new();
    env.write("big.txt", &"0123456789abcdef\n".repeat(20_000));
    let r = env.call(&[], "read_file", r#"{"path":"big.txt"}"#);
    assert_eq!(r.code, 0);
    let doc = r.json();
    assert_eq!(doc["truncated"], true);
    assert!(serde_json::to_vec(&doc["result"]).unwrap().len() <= 64 * 1024);
    assert!(doc["result"]["content"].as_str().unwrap().contains("…[truncated"));
}

#[test]
fn exec_answers_openai_and_anthropic_shapes_in_order() {
    let env = Env::new();
    env.write("a.txt", "A");
    env.write("b.txt", "B");
    let item =
        r#"{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}"#;
    let r = env.run_with_stdin(&["exec"], Some(item));
    assert_eq!(r.code, 0, "{r:?}");
    let out = r.json();
    assert_eq!(out["role"], "tool");
    assert_eq!(out["tool_call_id"], "call_1");
    let content: Value = serde_json::from_str(out["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["result"]["content"], "A");

    let msg = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b.txt\"}"}},
        {"id": "c3", "type": "function", "function": {"name": "read_file", "arguments": "{not json"}},
    ]});
    let r = env.run_with_stdin(&["exec"], Some(&msg.to_string()));
    let out = r.json();
    let ids: Vec<&str> = out.as_array().unwrap().iter().map(|m| m["tool_call_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert!(out[1]["content"].as_str().unwrap().contains("\"B\""));
    assert!(out[2]["content"].as_str().unwrap().contains("INVALID_ARGS"));
    assert_eq!(r.code, 2, "the first failing call sets the exit code");

    let block = r#"{"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"b.txt"}}"#;
    let r = env.run_with_stdin(&["exec"], Some(block));
    let out = r.json();
    assert_eq!(
        (out["type"].as_str(), out["tool_use_id"].as_str(), out["is_error"].as_bool()),
        (Some("tool_result"), Some("toolu_1"), Some(false))
    );

    let message = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.txt"}},
        {"type": "tool_use", "id": "t2", "name": "write_file", "input": {"path": "w.txt", "content": "x"}},
    ]});
    let r = env.run_with_stdin(&["exec"], Some(&message.to_string()));
    let out = r.json();
    assert_eq!(out["role"], "user");
    assert_eq!(out["content"][0]["tool_use_id"], "t1");
    assert_eq!(out["content"][1]["tool_use_id"], "t2");
    assert_eq!(out["content"][1]["is_error"], true);
    assert_eq!(r.code, 3);
}

/// A whole Chat Completions response, a Responses API
/// `function_call` item and a whole Responses API response.
#[test]
fn exec_answers_chat_completions_responses_and_responses_api_items() {
    let env = Env::new();
    env.write("a.txt", "A");
    let completion = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}
        ]}}
    ]});
    let r = env.run_with_stdin(&["exec"], Some(&completion.to_string()));
    assert_eq!(r.code, 0, "{r:?}");
    let out = r.json();
    assert_eq!(out[0]["role"], "tool");
    assert_eq!(out[0]["tool_call_id"], "call_9");
    assert!(out[0]["content"].as_str().unwrap().contains("\"A\""));

    let item = json!({"type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "read_file",
                      "arguments": "{\"path\":\"a.txt\"}"});
    let r = env.run_with_stdin(&["exec"], Some(&item.to_string()));
    assert_eq!(r.code, 0, "{r:?}");
    let out = r.json();
    assert_eq!((out["type"].as_str(), out["call_id"].as_str()), (Some("function_call_output"), Some("call_r1")));
    let doc: Value = serde_json::from_str(out["output"].as_str().unwrap()).unwrap();
    assert_eq!(doc["result"]["content"], "A");

    let response = json!({"id": "resp_1", "object": "response", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_2", "call_id": "call_r2", "name": "read_file", "arguments": "{\"path\":\"a.txt\"}"},
        {"type": "function_call", "id": "fc_3", "call_id": "call_r3", "name": "no_such_tool", "arguments": "{}"},
    ]});
    let r = env.run_with_stdin(&["exec"], Some(&response.to_string()));
    let out = r.json();
    let ids: Vec<&str> = out.as_array().unwrap().iter().map(|m| m["call_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["call_r2", "call_r3"]);
    assert!(out[1]["output"].as_str().unwrap().contains("NOT_FOUND"));
    assert_eq!(r.code, 2);
}

#[test]
fn list_is_sorted_and_hides_denied_tools() {
    let env = Env::new();
    let r = env.run(&["list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let names: Vec<String> =
        r.json().as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.contains(&"read_file".to_string()));

    let strict = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/strict.toml");
    let r = env.run(&["--policy", strict, "list"]);
    assert!(r.stdout.contains("write_file") && !r.stdout.contains("delete_file"), "{r:?}");
    let r = env.run(&["--policy", strict, "call", "delete_file", r#"{"path":"x"}"#]);
    assert_eq!((r.code, r.error_code().as_str()), (3, "DENIED"), "{r:?}");
}

#[test]
fn policy_check_names_file_line_and_column() {
    let env = Env::new();
    let cases = [
        ("unknown.toml", "version = 1\n[defaults]\ntier = \"auto\"\ntimeuot = \"3s\"\n", "unknown.toml:4:1"),
        ("duration.toml", "version = 1\n[defaults]\ntimeout = \"forever\"\n", "duration.toml:3:11"),
        ("plugin.toml", "version = 1\n[tools.read_file]\nplugin = \"files\"\n", "plugin.toml:3:10"),
    ];
    for (file, text, want) in cases {
        let path = env.write(file, text);
        let r = env.run(&["policy", "check", path.to_str().unwrap()]);
        assert_eq!(r.code, 1, "{file}: {r:?}");
        assert!(r.stderr.contains(want), "{file}: expected {want} in {r:?}");
    }
    let r = env.run(&["policy", "check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("read_file") && r.stdout.contains("valid"), "{r:?}");
}

#[test]
fn a_policy_naming_a_tool_its_plugin_lacks_fails_the_check() {
    let env = Env::new();
    let p = env
        .write("w.toml", "version = 1\n[plugins.fs]\nsource = \"builtin:fs\"\n[tools.format_disk]\nplugin = \"fs\"\n");
    let r = env.run(&["policy", "check", p.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("offers no tool of that name"), "{r:?}");
}

#[test]
fn invalid_policies_stop_calls_with_exit_two() {
    let env = Env::new();
    let p = env.write("bad.toml", "version = 1\n[sandbox]\nmode = \"lenient\"\n");
    let r = env.run(&["--policy", p.to_str().unwrap(), "call", "read_file", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("bad.toml:3:8"), "{r:?}");
    assert!(r.stdout.is_empty());
}

#[test]
fn warden_toml_in_the_current_directory_is_the_default_policy() {
    let env = Env::new();
    env.write("warden.toml", "version = 1\n[plugins.fs]\nsource = \"builtin:fs\"\n[tools.read_file]\nplugin = \"fs\"\ntier = \"deny\"\nfs.read = [\"{workspace}\"]\n");
    let r = env.call(&[], "read_file", r#"{"path":"warden.toml"}"#);
    assert_eq!(r.error_code(), "DENIED", "{r:?}");
}

fn calls_then_log(env: &Env, n: usize) -> String {
    env.write("a.txt", "x");
    for _ in 0..n {
        assert_eq!(env.call(&[], "read_file", r#"{"path":"a.txt"}"#).code, 0);
    }
    std::fs::read_to_string(&env.log).unwrap()
}

#[test]
fn log_verify_passes_on_a_real_log() {
    let env = Env::new();
    calls_then_log(&env, 4);
    let r = env.run(&["log", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("ok: 4 records"), "{r:?}");
}

#[test]
fn log_verify_names_the_line_after_an_edit_a_deletion_or_a_swap() {
    let env = Env::new();
    let text = calls_then_log(&env, 5);
    let lines: Vec<&str> = text.lines().collect();

    let mut edited = lines.clone();
    let changed = edited[2].replace("\"read_file\"", "\"write_file\"");
    edited[2] = &changed;
    std::fs::write(&env.log, edited.join("\n") + "\n").unwrap();
    let r = env.run(&["log", "verify"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("line 3"), "edit: {r:?}");

    let mut deleted = lines.clone();
    deleted.remove(1);
    std::fs::write(&env.log, deleted.join("\n") + "\n").unwrap();
    let r = env.run(&["log", "verify"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("line 2"), "delete: {r:?}");

    let mut swapped = lines.clone();
    swapped.swap(1, 3);
    std::fs::write(&env.log, swapped.join("\n") + "\n").unwrap();
    let r = env.run(&["log", "verify"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("line 2"), "swap: {r:?}");
}

#[test]
fn log_stats_counts_per_tool() {
    let env = Env::new();
    calls_then_log(&env, 3);
    env.call(&[], "write_file", r#"{"path":"b","content":""}"#);
    let r = env.run(&["log", "stats", "--format", "json"]);
    let stats = r.json();
    let read = stats.as_array().unwrap().iter().find(|s| s["tool"] == "read_file").unwrap().clone();
    assert_eq!((read["calls"].as_u64(), read["ok"].as_u64()), (Some(3), Some(3)));
    let write = stats.as_array().unwrap().iter().find(|s| s["tool"] == "write_file").unwrap().clone();
    assert_eq!(write["errors"], 1);
    let r = env.run(&["log", "stats"]);
    assert!(r.stdout.contains("P50_MS"), "{r:?}");
}

#[test]
fn secrets_in_arguments_never_reach_the_log() {
    let env = Env::new();
    env.call(&["--approve", "yes"], "write_file", r#"{"path":"cfg","content":"Bearer abcdef123"}"#);
    let log = std::fs::read_to_string(&env.log).unwrap();
    assert!(!log.contains("abcdef123"), "{log}");
    assert!(log.contains("[REDACTED]"));
}

#[test]
fn an_unwritable_audit_log_stops_the_call() {
    let env = Env::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .current_dir(&env.ws)
        .args(["--audit-log", "/proc/version/audit.jsonl", "call", "read_file", "{}"])
        .env("WARDEN_CACHE_DIR", util::cache_dir())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(70), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("audit log"), "{out:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn plugin_inspect_shows_hash_tools_and_reach_before_anything_is_granted() {
    use sha2::Digest;
    let env = Env::new();
    let kit = warden::runtime::builtin::TESTKIT_WASM;
    let r = env.run(&["plugin", "inspect", kit, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["sha256"], hex::encode(sha2::Sha256::digest(std::fs::read(kit).unwrap())));
    let tools: Vec<&str> = doc["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(tools.contains(&"spin") && tools.contains(&"connect"), "{tools:?}");
    let imports = doc["imports"].to_string();
    assert!(imports.contains("wasi:sockets/tcp@") && imports.contains("wasi:filesystem/types@"), "{imports}");
    let text = env.run(&["plugin", "inspect", kit]);
    assert!(text.stdout.contains("network: TCP/UDP"), "{}", text.stdout);

    // Not a component: refused with the reason, nothing loaded.
    let junk = env.write("junk.wasm", "this is not wasm");
    let r = env.run(&["plugin", "inspect", junk.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not a valid WebAssembly component"), "{}", r.stderr);
}

/// A policy with two profiles over the builtin file tools.
const PROFILED: &str = r#"
version = 1

[plugins.fs]
source = "builtin:fs"

[tools.read_file]
plugin = "fs"
tier = "auto"
fs.read = ["{workspace}"]

[tools.list_directory]
plugin = "fs"
tier = "auto"
fs.read = ["{workspace}"]

[tools.write_file]
plugin = "fs"
tier = "ask"
fs.write = ["{workspace}"]

[profiles.reader]
description = "the reviewing agent: reads, never writes"
tools = ["read_file", "list_*"]
tiers.list_directory = "confirm"

[profiles.all]
tools = "*"
"#;

#[test]
fn a_profile_offers_only_its_tools_at_its_stricter_tiers() {
    let env = Env::new();
    let policy = env.write("warden.toml", PROFILED);
    let policy = policy.to_str().unwrap();
    env.write("a.txt", "hello\n");

    let listed = env.run(&["--policy", policy, "--profile", "reader", "list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let tools = listed.json();
    let names: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["list_directory", "read_file"], "{tools}");
    assert_eq!(tools[0]["tier"], "confirm", "the profile's tier: {tools}");
    assert_eq!(tools[1]["tier"], "auto");
    // Without a profile, every tool.
    let all = env.run(&["--policy", policy, "list", "--json"]).json();
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");

    // A tool outside the profile is refused, naming the profile and the key.
    let w = env.call(
        &["--policy", policy, "--profile", "reader", "--approve", "yes"],
        "write_file",
        r#"{"path":"b.txt","content":"x"}"#,
    );
    assert_eq!(w.error_code(), "DENIED", "{w:?}");
    let msg = w.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("not in profile reader") && msg.contains("[profiles.reader]"), "{msg}");
    assert!(!env.ws.join("b.txt").exists(), "nothing was written");
    // The profile's tier holds even where the tool's own is auto.
    let l = env.call(
        &["--policy", policy, "--profile", "reader", "--approve", "deny"],
        "list_directory",
        r#"{"path":"."}"#,
    );
    assert_eq!(l.error_code(), "APPROVAL_REQUIRED", "{l:?}");
    let r = env.call(&["--policy", policy, "--profile", "reader"], "read_file", r#"{"path":"a.txt"}"#);
    assert_eq!(r.json()["result"]["content"], "hello\n", "{r:?}");
    // `*` is every tool, at the policy's own tiers.
    let a =
        env.call(&["--policy", policy, "--profile", "all", "--approve", "deny"], "read_file", r#"{"path":"a.txt"}"#);
    assert_eq!(a.code, 0, "{a:?}");

    // The record names the profile, and the profile's line set the tier.
    let records = env.audit_records();
    let last4: Vec<&Value> = records.iter().rev().take(4).rev().collect();
    assert_eq!(last4[0]["profile"], "reader");
    assert_eq!(last4[0]["decision"], "denied");
    assert_eq!(last4[1]["tier"], "confirm");
    assert!(last4[1]["rule"].as_str().unwrap().contains("warden.toml:25"), "{}", last4[1]);
    assert_eq!(last4[2]["profile"], "reader");
    assert_eq!(last4[3]["profile"], "all");

    // Over MCP the same: tools/list shows the profile's tools only.
    let mut served = serve_stdio(&env, &["--policy", policy, "--profile", "reader"]);
    let id = served.request("tools/list", json!({}));
    let listed = served.wait(id);
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["list_directory", "read_file"], "{listed}");
    drop(served);

    // An unknown profile is an error with the close names.
    let bad = env.run(&["--policy", policy, "--profile", "raeder", "list"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("did you mean reader?"), "{bad:?}");
}

#[test]
fn profile_mistakes_are_named_at_their_line() {
    let env = Env::new();
    let check = |text: &str| {
        let p = env.write("p.toml", &PROFILED.replace("tools = [\"read_file\", \"list_*\"]", text));
        env.run(&["policy", "check", p.to_str().unwrap()])
    };
    let unknown = check(r#"tools = ["raed_file"]"#);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(
        unknown.stderr.contains("no tool named \"raed_file\"") && unknown.stderr.contains("did you mean read_file"),
        "{unknown:?}"
    );
    assert!(unknown.stderr.contains("p.toml:24:"), "{unknown:?}");

    let looser = check("tools = [\"read_file\", \"list_*\", \"write_file\"]\ntiers.write_file = \"auto\"");
    assert_eq!(looser.code, 1, "{looser:?}");
    assert!(looser.stderr.contains("would relax") && looser.stderr.contains("only make a tool stricter"), "{looser:?}");

    let outside = check("tools = [\"read_file\"]");
    assert_eq!(outside.code, 1, "tiers.list_directory names a tool the profile lacks: {outside:?}");
    assert!(outside.stderr.contains("tiers.list_directory names a tool the profile does not offer"), "{outside:?}");

    // A pattern that matches nothing is a warning, in `policy check` and in `audit`.
    let nothing = check(r#"tools = ["read_file", "list_*", "git_*"]"#);
    assert_eq!(nothing.code, 0, "{nothing:?}");
    assert!(nothing.stderr.contains("\"git_*\" matches no tool"), "{nothing:?}");
    let p = env.ws.join("p.toml");
    let audit = env.run(&[
        "--policy",
        p.to_str().unwrap(),
        "audit",
        "--no-self-test",
        "--format",
        "json",
        "--fail-on",
        "never",
    ]);
    let findings = audit.json()["findings"].clone();
    assert!(
        findings
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "WL118" && f["message"].as_str().unwrap().contains("git_*")),
        "{findings}"
    );
}

/// `warden serve` over stdio in `env`, with `flags` before `serve`.
fn serve_stdio(env: &Env, flags: &[&str]) -> McpStdio {
    let mut args: Vec<&str> = flags.to_vec();
    args.push("serve");
    let mut c = env.command(&args);
    c.stderr(std::process::Stdio::null());
    McpStdio::start(c).unwrap_or_else(|reply| panic!("warden serve did not initialize: {reply}"))
}

#[test]
fn the_result_cache_serves_repeats_and_never_a_stale_result() {
    let env = Env::new();
    let text = PROFILED
        .replace("[tools.list_directory]", "[tools.list_directory]\ncache = \"60s\"")
        .replace("[tools.read_file]", "[tools.read_file]\ncache = \"60s\"")
        .replace(
            "[tools.write_file]\nplugin = \"fs\"\ntier = \"ask\"",
            "[tools.write_file]\nplugin = \"fs\"\ntier = \"auto\"",
        );
    let policy = env.write("warden.toml", &text);
    env.write("a.txt", "one\n");
    let mut s = serve_stdio(&env, &["--policy", policy.to_str().unwrap()]);
    let read = |s: &mut McpStdio| s.call_doc("read_file", json!({"path": "a.txt"}));

    let first = read(&mut s);
    assert_eq!(first["result"]["content"], "one\n", "{first}");
    assert!(first.get("cache").is_none(), "a first call runs: {first}");
    let second = read(&mut s);
    assert_eq!(second["result"]["content"], "one\n");
    assert_eq!(second["cache"]["hit"], true, "{second}");
    assert_eq!(second["cache"]["call_id"], first["call_id"]);

    // Changed from outside warden, same size, within the same second: not served stale.
    std::fs::write(env.ws.join("a.txt"), "two\n").unwrap();
    let third = read(&mut s);
    assert_eq!(third["result"]["content"], "two\n", "stale result served: {third}");
    assert!(third.get("cache").is_none(), "{third}");
    assert_eq!(read(&mut s)["cache"]["hit"], true);

    // A new file elsewhere in the granted tree changes what list_directory (and read_file) may see.
    let listed = s.call_doc("list_directory", json!({"path": "."}));
    assert_eq!(s.call_doc("list_directory", json!({"path": "."}))["cache"]["hit"], true);
    std::fs::write(env.ws.join("new.txt"), "").unwrap();
    let relisted = s.call_doc("list_directory", json!({"path": "."}));
    assert!(relisted.get("cache").is_none(), "{relisted}");
    assert_ne!(listed["result"], relisted["result"]);

    // Other arguments are another entry.
    let other = s.call_doc("read_file", json!({"path": "a.txt", "limit": 1}));
    assert!(other.get("cache").is_none(), "{other}");

    // A write through warden empties the cache, even of results whose files it did not touch.
    assert!(read(&mut s).get("cache").is_none(), "new.txt changed the tree read_file reads too");
    assert_eq!(read(&mut s)["cache"]["hit"], true);
    let w = s.call_doc("write_file", json!({"path": "c.txt", "content": "x"}));
    assert_eq!(w["status"], "success", "{w}");
    let after = read(&mut s);
    assert!(after.get("cache").is_none(), "{after}");
    drop(s);

    // The audit log records hits with the call they repeat.
    let records = env.audit_records();
    let hits: Vec<&Value> = records.iter().filter(|r| r["cache"]["hit"] == true).collect();
    assert_eq!(hits.len(), 4, "{records:?}");
    assert!(hits.iter().all(|r| r["status"] == "success" && r["cache"]["call_id"].as_str().unwrap().starts_with("c-")));
    assert_eq!(records.iter().filter(|r| r["cache"]["hit"] == false).count(), 7, "{records:?}");
}

#[test]
fn cache_is_refused_where_a_result_could_go_stale() {
    let env = Env::new();
    let check = |from: &str, to: &str| {
        let p = env.write("p.toml", &PROFILED.replace(from, to));
        env.run(&["policy", "check", p.to_str().unwrap()])
    };
    let writes = check(
        "[tools.write_file]\nplugin = \"fs\"\ntier = \"ask\"",
        "[tools.write_file]\nplugin = \"fs\"\ntier = \"auto\"\ncache = \"1m\"",
    );
    assert_eq!(writes.code, 1, "{writes:?}");
    assert!(
        writes.stderr.contains("cache applies only to read-only tools") && writes.stderr.contains("fs.write"),
        "{writes:?}"
    );
    let asks = check(
        "[tools.read_file]\nplugin = \"fs\"\ntier = \"auto\"",
        "[tools.read_file]\nplugin = \"fs\"\ntier = \"ask\"\ncache = \"1m\"",
    );
    assert_eq!(asks.code, 1, "{asks:?}");
    assert!(asks.stderr.contains("tier \\\"auto\\\"") || asks.stderr.contains("tier \"auto\""), "{asks:?}");
    let net = check(
        "[tools.read_file]\nplugin = \"fs\"\ntier = \"auto\"",
        "[tools.read_file]\nplugin = \"fs\"\ntier = \"auto\"\ncache = \"1m\"\nnet.connect = [\"example.com:443\"]",
    );
    assert_eq!(net.code, 1, "{net:?}");
    assert!(net.stderr.contains("network grants"), "{net:?}");
    let ipc = env.write(
        "ipc.toml",
        "version = 1\n[tools.t]\nexec = [\"/bin/true\"]\ntier = \"auto\"\nsysv_ipc = true\ncache = \"1m\"\n",
    );
    let ipc = env.run(&["policy", "check", ipc.to_str().unwrap()]);
    assert_eq!(ipc.code, 1, "{ipc:?}");
    assert!(ipc.stderr.contains("sysv_ipc"), "{ipc:?}");
}
