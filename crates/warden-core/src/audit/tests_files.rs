//! Rotation, retention, large arguments, and reading the log back.

use super::tests::record;
use super::*;

fn rotating(path: &Path, rotate: u64, keep: Option<Duration>) -> AuditLog {
    let mut log = AuditLog::open(path).unwrap_or_else(|e| panic!("{e}"));
    log.set_settings(Settings { rotate: Some(rotate), keep, record_content: false });
    log
}

fn append_n(log: &AuditLog, from: usize, n: usize) {
    for i in from..from + n {
        log.check_writable().unwrap_or_else(|e| panic!("{e}"));
        let r = Record { call_id: format!("c-{i}"), ..record(&format!("t{i}")) };
        log.append(&r).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn a_rotated_log_verifies_across_its_files_and_a_tampered_middle_file_is_named() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("audit.jsonl");
    let log = rotating(&path, 1500, None);
    append_n(&log, 0, 12);
    let all = files::log_files(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(all.len() >= 3, "{all:?}");
    assert_eq!(all[0].file_name().and_then(|n| n.to_str()), Some("audit.00000000000000000001.jsonl"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.problem.clone(), v.files.len(), v.start_seq), (12, None, all.len(), None));
    // Each new file's first record chains to the last of the one before.
    let first: Value =
        serde_json::from_str(fs::read_to_string(&all[1]).unwrap_or_default().lines().next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{e}"));
    let prev_last = fs::read_to_string(&all[0]).unwrap_or_default();
    assert_eq!(first["prev"].as_str(), Some(sha256_hex(prev_last.lines().last().unwrap_or("").as_bytes()).as_str()));
    // A record edited in a middle file.
    let middle = &all[1];
    let text = fs::read_to_string(middle).unwrap_or_default();
    let edited = text.replacen("\"tool\":\"t", "\"tool\":\"X", 1);
    assert_ne!(edited, text);
    fs::write(middle, edited).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(v.problem.is_some(), "{v:?}");
    // The first line of a file of several: the line after it names it.
    assert!(text.lines().count() > 1);
    assert_eq!((v.problem_file.as_ref(), v.problem.as_ref().map(|p| p.0)), (Some(middle), Some(1)), "{v:?}");
    // A middle file removed whole.
    fs::write(middle, text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(verify(&path).map(|v| v.problem).ok(), Some(None));
    fs::remove_file(middle).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(v.problem.as_ref().is_some_and(|p| p.1.contains("removed")), "{v:?}");
}

#[test]
fn keep_removes_old_rotated_files_and_verify_starts_mid_chain() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("audit.jsonl");
    let log = rotating(&path, 1500, Some(Duration::from_secs(3600)));
    append_n(&log, 0, 12);
    let old = files::rotated(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(old.len() >= 2, "{old:?}");
    let past = std::time::SystemTime::now() - Duration::from_secs(7200);
    for f in &old {
        File::options().write(true).open(f).and_then(|f| f.set_modified(past)).unwrap_or_else(|e| panic!("{e}"));
    }
    // Enough records for one more rotation, which applies `keep`.
    let before = files::log_files(&path).unwrap_or_default().len();
    let mut n = 12;
    while files::rotated(&path).unwrap_or_default().last() == old.last() {
        append_n(&log, n, 1);
        n += 1;
        assert!(n < 100, "no rotation");
    }
    let left = files::rotated(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(left.len(), 1, "only the file just rotated stays: {left:?} (of {before})");
    assert!(!old.contains(&left[0]));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.problem, None, "{v:?}");
    let start = v.start_seq.unwrap_or_else(|| panic!("not mid-chain: {v:?}"));
    assert!(start > 1 && v.records == n as u64 - start + 1, "{v:?}");
    // The current file alone starting past seq 1 is not a rotation: its first prev must be genesis.
    let lone = dir.path().join("lone.jsonl");
    let text = fs::read_to_string(&path).unwrap_or_default();
    fs::write(&lone, text).unwrap_or_else(|e| panic!("{e}"));
    assert!(verify(&lone).is_ok_and(|v| v.problem.is_some()));
}

#[test]
fn a_rotation_by_another_process_is_followed_and_the_chain_stays_one() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("audit.jsonl");
    // Two opens of one path stand for two warden processes; only one rotates.
    let rotator = rotating(&path, 1500, None);
    let plain = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..20 {
        append_n(if i % 2 == 0 { &rotator } else { &plain }, i, 1);
    }
    assert!(files::rotated(&path).unwrap_or_default().len() >= 2);
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.problem.clone()), (20, None), "{v:?}");
    // Threads of both at once.
    std::thread::scope(|s| {
        for t in 0..4 {
            let log = if t % 2 == 0 { &rotator } else { &plain };
            s.spawn(move || append_n(log, 100 * (t + 1), 10));
        }
    });
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.problem.clone()), (60, None), "{v:?}");
    for f in files::log_files(&path).unwrap_or_default() {
        assert!(!fs::read(&f).unwrap_or_default().contains(&0), "{}", f.display());
    }
    // A log replaced by hand (not a rotation) is still refused.
    append_n(&plain, 999, 1);
    fs::rename(&path, dir.path().join("moved.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(&path, "").unwrap_or_else(|e| panic!("{e}"));
    let e = plain.check_writable().err().unwrap_or_else(|| panic!("a replaced log was accepted"));
    assert!(e.to_string().contains("replaced"), "{e}");
}

#[test]
fn long_string_arguments_are_kept_as_digest_and_size_unless_record_content() {
    let content = "x".repeat(MAX_ARG_STRING + 1);
    let args = serde_json::json!({"path": "a.txt", "content": content});
    let kept = redact(&args);
    assert_eq!(kept["path"], "a.txt");
    assert_eq!(kept["content"], serde_json::json!({"sha256": sha256_hex(content.as_bytes()), "bytes": content.len()}));
    assert_eq!(redact_with(&args, true)["content"], content);
    // Secrets stay redacted either way, and the arguments' bound stays.
    let big = serde_json::json!({"token": "t", "content": "y".repeat(100_000)});
    let whole = redact_with(&big, true);
    assert_eq!(whole["token"], "[REDACTED]");
    assert!(serde_json::to_vec(&whole).unwrap_or_default().len() <= MAX_ARGS_BYTES + 64);
}

#[test]
fn show_finds_a_calls_records_and_the_follower_reads_new_ones_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("audit.jsonl");
    let log = rotating(&path, 1500, None);
    append_n(&log, 0, 6);
    let job = Record { call_id: "c-job".into(), status: "running", ..record("bg") };
    log.append(&job).unwrap_or_else(|e| panic!("{e}"));
    append_n(&log, 6, 4);
    log.append(&Record { status: "success", ..job }).unwrap_or_else(|e| panic!("{e}"));
    let shown = read::records_of(&path, "c-job").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shown.iter().map(|r| r["status"].as_str()).collect::<Vec<_>>(), [Some("running"), Some("success")]);
    assert!(read::records_of(&path, "c-none").unwrap_or_default().is_empty());

    let (last, mut follower) = read::Follower::open(&path, 3).unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<Value> =
        last.iter().map(|l| serde_json::from_slice::<Value>(l).unwrap_or_default()["call_id"].clone()).collect();
    assert_eq!(ids, ["c-8", "c-9", "c-job"]);
    // More than a file's worth: the log rotates under the follower.
    let files_before = files::log_files(&path).unwrap_or_default().len();
    append_n(&log, 20, 8);
    assert!(files::log_files(&path).unwrap_or_default().len() > files_before);
    let new = follower.poll().unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<String> = new
        .iter()
        .map(|l| serde_json::from_slice::<Value>(l).unwrap_or_default()["call_id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, (20..28).map(|i| format!("c-{i}")).collect::<Vec<_>>());
    assert!(follower.poll().unwrap_or_default().is_empty());
}
