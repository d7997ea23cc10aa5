use super::*;

fn runtime(mode: SandboxMode, landlock_abi: u32, seccomp: bool) -> ProcessRuntime {
    ProcessRuntime {
        helper: None,
        mode,
        support: HostSupport { landlock_abi, seccomp, root: false, namespaces: false },
    }
}

#[test]
fn enforce_mode_refuses_a_kernel_without_landlock_or_seccomp() {
    for (abi, seccomp) in [(0, true), (3, true), (6, false)] {
        let e = runtime(SandboxMode::Enforce, abi, seccomp).check_support("shell").err();
        let e = e.unwrap_or_else(|| panic!("abi {abi} seccomp {seccomp} was accepted"));
        assert_eq!(e.code, ErrorCode::SandboxUnavailable);
        assert!(e.message.contains("best-effort"), "{}", e.message);
    }
    assert!(runtime(SandboxMode::Enforce, 4, true).check_support("shell").is_ok());
    assert!(runtime(SandboxMode::BestEffort, 0, false).check_support("shell").is_ok());
}

#[test]
fn arguments_fill_whole_elements() {
    let exec = ExecSpec {
        argv: vec!["/usr/bin/git".into(), "diff".into(), "--".into(), "{path}".into(), "--x={path}".into()],
        params: vec!["path".into()],
        cwd: "/".into(),
        input_schema: None,
    };
    let argv = fill_argv("git_diff", &exec, &json!({"path": "; rm -rf / $(id)"}), None).unwrap_or_default();
    assert_eq!(argv, ["/usr/bin/git", "diff", "--", "; rm -rf / $(id)", "--x=; rm -rf / $(id)"]);
    assert!(fill_argv("git_diff", &exec, &json!({"path": "a\0b"}), None).is_err());
    // A value that looks like a placeholder is never expanded again.
    let exec = ExecSpec {
        argv: vec!["/bin/echo".into(), "{a}-{b}-{tmp}".into()],
        params: vec!["a".into(), "b".into()],
        cwd: "/".into(),
        input_schema: None,
    };
    let argv = fill_argv("echo", &exec, &json!({"a": "{b}{tmp}", "b": "x"}), Some(std::path::Path::new("/t")));
    assert_eq!(argv.unwrap_or_default(), ["/bin/echo", "{b}{tmp}-x-/t"]);
}

#[test]
fn the_exec_failure_report_wins_only_after_a_good_one() {
    use std::io::Write;
    let line = |r: &HelperReport| serde_json::to_string(r).unwrap_or_default() + "\n";
    let good = HelperReport { ok: true, landlock_abi: 6, ..HelperReport::default() };
    let failed = HelperReport { ok: false, exec_failed: true, error: Some("cannot execute".into()), ..good.clone() };
    let bad = HelperReport { error: Some("setsid".into()), ..HelperReport::default() };
    for (lines, expect_ok, expect_exec_failed) in [
        (vec![good.clone()], true, false),
        (vec![good.clone(), failed.clone()], false, true),
        (vec![bad.clone(), failed], false, false),
        (vec![], false, false),
    ] {
        let (mut host, mut helper) = std::os::unix::net::UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
        for r in &lines {
            helper.write_all(line(r).as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        }
        drop(helper);
        let got = read_report(&mut host, None);
        let _ = (&bad, &good);
        assert_eq!((got.ok, got.exec_failed), (expect_ok, expect_exec_failed), "{lines:?}");
    }
}
