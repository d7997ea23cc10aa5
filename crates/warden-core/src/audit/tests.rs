use super::*;

pub(super) fn record(tool: &str) -> Record {
    Record {
        ts: "2026-01-01T00:00:00Z".into(),
        call_id: "c-1".into(),
        session: "s".into(),
        tool: tool.into(),
        args_sha256: "x".into(),
        args: serde_json::json!({"token": "abc", "path": "a"}),
        tier: Some(Tier::Auto),
        decision: Decision::Allowed,
        approved_by: Some(ApprovedBy::Auto),
        status: "success",
        duration_ms: 1.0,
        ..Record::default()
    }
}

fn log_with(n: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("a.jsonl");
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..n {
        log.append(&record(&format!("t{i}"))).unwrap_or_else(|e| panic!("{e}"));
    }
    (dir, path)
}

#[test]
fn a_jobs_start_and_end_records_verify_and_count_once() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("a.jsonl");
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let start = Record { status: "running", ..record("bg") };
    let end = Record { status: "cancelled", error_code: Some("CANCELLED"), ..record("bg") };
    for r in [&start, &end] {
        log.append(r).unwrap_or_else(|e| panic!("{e}"));
    }
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.problem), (2, None));
    let s = stats(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.len(), s[0].calls, s[0].errors, s[0].ok), (1, 1, 1, 0));
}

#[test]
fn a_fresh_chain_verifies() {
    let (_d, path) = log_with(5);
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.problem, v.torn_line), (5, None, None));
}

#[test]
fn an_edited_line_is_named() {
    let (_d, path) = log_with(5);
    let text = fs::read_to_string(&path).unwrap_or_default().replacen("\"t2\"", "\"tX\"", 1);
    fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.problem.map(|p| p.0), Some(3));
}

#[test]
fn a_removed_line_is_named() {
    let (_d, path) = log_with(5);
    let text = fs::read_to_string(&path).unwrap_or_default();
    let kept: Vec<&str> = text.lines().enumerate().filter(|(i, _)| *i != 1).map(|(_, l)| l).collect();
    fs::write(&path, kept.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.problem.map(|p| p.0), Some(2));
}

#[test]
fn a_torn_tail_is_reported_then_moved_aside_by_the_next_writer() {
    let (_d, path) = log_with(3);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
    f.write_all(b"{\"ts\":\"half").unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (3, Some(4), None));
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (4, None, None));
    assert!(path.with_extension("jsonl.torn").exists());
}

/// The head is looked for near the end first ([`NEAR_WINDOW`]), then over
/// the whole window: a torn tail longer than the near window (a crash in a
/// group commit of large records) still finds the last whole line behind it.
#[test]
fn a_torn_tail_longer_than_the_near_window_is_still_moved_aside() {
    let (_d, path) = log_with(3);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
    let torn = format!("{{\"ts\":\"{}", "x".repeat(3 * NEAR_WINDOW as usize));
    f.write_all(torn.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (4, None, None));
    let aside = fs::read_to_string(path.with_extension("jsonl.torn")).unwrap_or_default();
    assert_eq!(aside.trim_end(), torn);
    // And a log whose last line is far from the end without being torn (a
    // line longer than the near window, as an older warden could write).
    let (_d2, path2) = log_with(1);
    let mut f = OpenOptions::new().append(true).open(&path2).unwrap_or_else(|e| panic!("{e}"));
    let text = fs::read_to_string(&path2).unwrap_or_default();
    let first: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}"));
    let mut long = first.clone();
    long["seq"] = serde_json::json!(2);
    long["prev"] = serde_json::json!(sha256_hex(text.trim().as_bytes()));
    long["args"] = serde_json::json!({"text": "y".repeat(2 * NEAR_WINDOW as usize)});
    f.write_all(format!("{long}\n").as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let log = AuditLog::open(&path2).unwrap_or_else(|e| panic!("{e}"));
    log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
    let last: Value =
        serde_json::from_str(fs::read_to_string(&path2).unwrap_or_default().lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(last["seq"], 3, "chained after the long line: {last}");
}

fn size(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or_else(|e| panic!("{e}"))
}

/// What a crash mid-write can leave after the last durable line: zero bytes
/// (pages that never reached the disk, or an older warden's blank fill) with
/// `crash` written over them.
fn crashed_with(crash: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let (d, path) = log_with(2);
    let end = size(&path);
    let f = OpenOptions::new().write(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
    f.write_all_at(&[0u8; 64 << 10], end).unwrap_or_else(|e| panic!("{e}"));
    f.write_all_at(crash, end).unwrap_or_else(|e| panic!("{e}"));
    (d, path)
}

#[test]
fn records_torn_by_a_crash_are_moved_aside_whichever_pages_were_lost() {
    let page = |c: u8| vec![c; 4096];
    let line = |parts: &[Vec<u8>]| {
        let mut l = b"{\"seq\":3,\"prev\":\"x\",\"args\":\"".to_vec();
        parts.iter().for_each(|p| l.extend_from_slice(p));
        l.extend_from_slice(b"\"}\n");
        l
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // The line's second page reached the disk, its first did not (zeros).
        ("a lost first page", [vec![0u8; 100], b"call_id\":\"c-1\"}\n".to_vec()].concat()),
        // A lost middle page inside a string: the line parses, its seq and prev intact.
        ("a lost middle page", line(&[page(b'a'), page(0), page(b'a')])),
        // Two lines of one group commit, only the page they share on disk.
        (
            "two lines, one page kept",
            [vec![0u8; 3000], b"tail of one\"}\n{\"ts\":\"start of the next".to_vec()].concat(),
        ),
        // Nothing but zeros after the last line.
        ("zeros only", Vec::new()),
    ];
    for (what, crash) in cases {
        let (_d, path) = crashed_with(&crash);
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line.is_some(), v.problem), (2, !crash.is_empty(), None), "{what}");
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
        log.append(&record("after")).unwrap_or_else(|e| panic!("{what}: {e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (3, None, None), "{what}");
        let data = fs::read(&path).unwrap_or_default();
        assert!(!data.contains(&0) && data.ends_with(b"\n"), "{what}: the log holds only whole lines");
        if !crash.is_empty() {
            let aside = fs::read(path.with_extension("jsonl.torn")).unwrap_or_else(|e| panic!("{e}"));
            assert!(!aside.contains(&0) && aside.ends_with(b"\n"), "{what}: moved aside as text");
        }
    }
}

#[test]
fn concurrent_writers_share_fsyncs_and_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("a.jsonl");
    // Two opens of one path stand for two warden processes (each has its own flock).
    let logs = [AuditLog::open(&path), AuditLog::open(&path)].map(|l| l.unwrap_or_else(|e| panic!("{e}")));
    std::thread::scope(|s| {
        for t in 0..8 {
            let log = &logs[t % 2];
            s.spawn(move || {
                for i in 0..50 {
                    if i % 3 == 0 {
                        log.check_writable().unwrap_or_else(|e| panic!("{e}"));
                    }
                    log.append(&record(&format!("w{t}-{i}"))).unwrap_or_else(|e| panic!("{e}"));
                }
            });
        }
    });
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (400, None, None));
    let text = fs::read_to_string(&path).unwrap_or_default();
    for t in 0..8 {
        for i in 0..50 {
            assert!(text.contains(&format!("\"w{t}-{i}\"")), "record w{t}-{i} is missing");
        }
    }
    for log in &logs {
        let (written, syncs) = log.commits();
        assert_eq!(written, 200);
        assert!((1..=200).contains(&syncs), "{syncs} fdatasyncs for 200 records");
    }
    let data = fs::read(&path).unwrap_or_default();
    assert!(!data.contains(&0) && data.last() == Some(&b'\n'), "the log holds only whole lines");
}

#[test]
fn check_writable_reserves_the_record_past_the_end_and_the_append_lands_in_it() {
    use std::os::unix::fs::MetadataExt;
    let (_d, path) = log_with(1);
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let meta = || fs::metadata(&path).unwrap_or_else(|e| panic!("{e}"));
    let before = meta();
    log.check_writable().unwrap_or_else(|e| panic!("{e}"));
    if log.lock().no_prealloc {
        eprintln!("skipped: the file system of {} has no fallocate", path.display());
        return;
    }
    let reserved = meta();
    assert_eq!(reserved.len(), before.len(), "the reservation changed the file's size");
    assert!(
        reserved.blocks() * 512 >= before.len() + MAX_RECORD_BYTES as u64,
        "{} bytes allocated for {} bytes of log: no record reserved",
        reserved.blocks() * 512,
        before.len()
    );
    // A second call in flight (another thread) reserves a second record.
    std::thread::scope(|s| {
        s.spawn(|| log.check_writable().unwrap_or_else(|e| panic!("{e}")));
    });
    assert_eq!(log.lock().reserved.len(), 2);
    let two = meta();
    assert!(two.blocks() * 512 >= before.len() + 2 * MAX_RECORD_BYTES as u64);

    log.append(&record("reserved")).unwrap_or_else(|e| panic!("{e}"));
    let after = meta();
    assert!(after.len() > before.len());
    assert_eq!(after.blocks(), two.blocks(), "the append allocated blocks: it did not land in the reservation");
    assert_eq!(log.lock().reserved.len(), 1, "the append did not release its thread's reservation");
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (2, None, None));
}

#[test]
fn an_oversized_record_is_shrunk_not_torn() {
    let (_d, path) = log_with(1);
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut big = record("big");
    big.args = serde_json::json!({"text": "x".repeat(100_000), "list": vec!["y".repeat(100); 1000]});
    big.rule = Some(format!("/{}:1:1", "p/".repeat(20_000)));
    log.append(&big).unwrap_or_else(|e| panic!("{e}"));
    log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
    let text = fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[1].len() < MAX_RECORD_BYTES, "{} bytes", lines[1].len());
    let doc: Value = serde_json::from_str(lines[1]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (doc["shrunk"].as_bool(), doc["tool"].as_str(), doc["seq"].as_u64()),
        (Some(true), Some("big"), Some(2))
    );
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (3, None, None));
}

/// A write that fails mid-line (here: a full 256 KiB tmpfs, with the
/// reservation switched off as on a file system without fallocate) leaves no
/// torn line: it is cut off, the error says so, and the next append chains.
#[test]
fn a_write_that_fails_mid_line_is_cut_off() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting a small file system needs root (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let small = dir.path().join("small");
    fs::create_dir(&small).unwrap_or_else(|e| panic!("{e}"));
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    assert!(mounted, "cannot mount a tmpfs as root");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&small);
    let path = small.join("a.jsonl");
    let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    log.append(&record("first")).unwrap_or_else(|e| panic!("{e}"));
    log.lock().no_prealloc = true;
    let len = fs::metadata(&path).map(|m| m.len()).unwrap_or_default();
    // Fill every page but the log's own, which has room for part of a line.
    let mut filler = File::create(small.join("filler")).unwrap_or_else(|e| panic!("{e}"));
    while filler.write(&[0u8; 4096]).is_ok_and(|n| n > 0) {}
    drop(filler);
    let mut big = record("big");
    big.args = serde_json::json!({"text": "z".repeat(8000)});
    let e = log.append(&big).err().unwrap_or_else(|| panic!("a line larger than the room left was written"));
    assert!(e.to_string().contains("cut off"), "{e}");
    let text = fs::read(&path).unwrap_or_default();
    assert_eq!((text.len() as u64, text.last()), (len, Some(&b'\n')), "a torn line was left");
    fs::remove_file(small.join("filler")).unwrap_or_else(|e| panic!("{e}"));
    log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((v.records, v.torn_line, v.problem), (2, None, None));
    assert!(!path.with_extension("jsonl.torn").exists());
}

#[test]
fn secrets_are_redacted() {
    let r =
        redact(&serde_json::json!({"api_key": "k", "nested": {"Authorization": "x"}, "h": "Bearer abc", "ok": "fine"}));
    assert_eq!(
        r,
        serde_json::json!({"api_key": "[REDACTED]", "nested": {"Authorization": "[REDACTED]"}, "h": "[REDACTED]", "ok": "fine"})
    );
}
