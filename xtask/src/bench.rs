//! `cargo xtask bench`: runs the benchmark suite (`benches/pipeline.rs`, release
//! profile) and prints its table of medians and ratios, every baseline measured
//! in the same run, then the performance targets, each judged on those figures.
//! The figures are also written to `target/bench.json` (see docs/performance.md).
//!
//! `--strict` exits non-zero when a target is not met. Without it the run only
//! reports: figures from a shared or loaded machine are not a verdict.

use std::path::PathBuf;

use serde_json::Value;

pub(crate) const USAGE: &str = "usage: cargo xtask bench [--strict]";

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let strict = match args {
        [] => false,
        [s] if s == "--strict" => true,
        _ => return Err(USAGE.into()),
    };
    let root = super::root();
    let report = root.join("target").join("bench.json");
    // A report left by an earlier run must not stand in for this one.
    let _ = std::fs::remove_file(&report);
    // The helper the process rows start through sits beside `warden`
    // (target/release); it is a crate of its own, so build it first.
    let status = super::cargo()
        .current_dir(&root)
        .args(["build", "--release", "--locked", "-p", "warden-sandbox"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building warden-sandbox failed ({status}); see its output above"));
    }
    let tls = bench_tls(&root.join("target").join("bench-tls"));
    if let Err(e) = &tls {
        println!("the credential interception rows will be skipped: {e}");
    }
    let mut bench = super::cargo();
    if let Ok((dir, bundle)) = &tls {
        bench.env("WARDEN_BENCH_TLS", dir).env("SSL_CERT_FILE", bundle);
    }
    let status = bench
        .current_dir(&root)
        .args(["bench", "--locked", "--bench", "pipeline"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("the benchmark failed ({status}); see its output above"));
    }
    let doc: Value = std::fs::read_to_string(&report)
        .map_err(|e| format!("the benchmark left no report at {} ({e})", report.display()))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("{}: not JSON: {e}", report.display())))?;
    let missed: Vec<String> = doc["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["met"] != Value::Bool(true))
        .map(|t| format!("{} ({})", t["target"].as_str().unwrap_or("?"), t["measured"].as_str().unwrap_or("?")))
        .collect();
    let machine = &doc["machine"];
    println!(
        "\nmachine: {}, {} cores, kernel {}{}; report: {}",
        machine["cpu"].as_str().unwrap_or("unknown CPU"),
        machine["cores"],
        machine["kernel"].as_str().unwrap_or("?"),
        if machine["root"] == Value::Bool(true) { ", as root" } else { "" },
        PathBuf::from("target/bench.json").display()
    );
    if missed.is_empty() {
        println!("every target met");
        return Ok(());
    }
    println!("{} target(s) not met: {}", missed.len(), missed.join("; "));
    if strict { Err("targets not met (--strict)".into()) } else { Ok(()) }
}

/// A loopback TLS origin's CA and leaf (for `api.warden.test` and
/// `evil.warden.test`) made with openssl in `dir`, and a bundle of the
/// system roots and that CA, which the bench's warden verifies the origin against.
fn bench_tls(dir: &std::path::Path) -> Result<(PathBuf, PathBuf), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ext = dir.join("ext");
    std::fs::write(&ext, "subjectAltName=DNS:api.warden.test,DNS:evil.warden.test\nbasicConstraints=CA:FALSE\n")
        .map_err(|e| format!("cannot write {}: {e}", ext.display()))?;
    let steps: [&[&str]; 3] = [
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=warden bench origin CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
        ],
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=api.warden.test",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    ];
    for args in steps {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .map_err(|e| format!("cannot run openssl: {e}"))?;
        if !out.status.success() {
            return Err(format!("openssl {} failed: {}", args[0], String::from_utf8_lossy(&out.stderr)));
        }
    }
    let roots = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    let ca = std::fs::read(dir.join("ca.pem")).map_err(|e| format!("cannot read the bench CA: {e}"))?;
    let bundle = dir.join("bundle.pem");
    std::fs::write(&bundle, [roots, ca].concat()).map_err(|e| format!("cannot write {}: {e}", bundle.display()))?;
    Ok((dir.to_path_buf(), bundle))
}
