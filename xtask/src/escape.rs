//! `cargo xtask escape`: runs the escape battery (`tests/escape`, one case per
//! attack) and prints its table from the report the test writes to
//! `target/escape.json`. Exits non-zero when any case was not contained, or when
//! the test itself failed.

use std::path::PathBuf;

use serde_json::Value;

pub(crate) fn run() -> Result<(), String> {
    let root = super::root();
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target"));
    let report = root.join(target).join("escape.json");
    // A report left by an earlier run must not stand in for this one.
    let _ = std::fs::remove_file(&report);
    let status = super::cargo()
        .current_dir(&root)
        .args(["test", "--locked", "--test", "escape", "--", "--nocapture"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let text = std::fs::read_to_string(&report).map_err(|e| {
        format!("the escape battery left no report at {} ({e}); see the test output above", report.display())
    })?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", report.display()))?;
    let cases = doc["cases"].as_array().cloned().unwrap_or_default();
    let s = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();

    println!("\n{:<34} {:<10} {:<10} {:<58} observed", "case", "class", "contained", "expected");
    for c in &cases {
        let contained = match s(c, "verdict").as_str() {
            "contained" => "yes".to_string(),
            "partial" => "partial".to_string(),
            "skipped" => "skipped".to_string(),
            _ => "NO".to_string(),
        };
        println!(
            "{:<34} {:<10} {:<10} {:<58} {}",
            s(c, "id"),
            s(c, "class"),
            contained,
            clip(&s(c, "expected"), 58),
            clip(&s(c, "observed"), 110)
        );
    }

    println!();
    let mut classes: Vec<String> = cases.iter().map(|c| s(c, "class")).collect();
    classes.dedup();
    for class in &classes {
        let of: Vec<&Value> = cases.iter().filter(|c| &s(c, "class") == class).collect();
        let n = |v: &str| of.iter().filter(|c| s(c, "verdict") == v).count();
        println!(
            "{class:<10} {:>3} cases: {} contained, {} partial, {} skipped, {} NOT contained",
            of.len(),
            n("contained"),
            n("partial"),
            n("skipped"),
            n("ESCAPED")
        );
    }
    for c in cases.iter().filter(|c| s(c, "verdict") == "partial") {
        println!("partial {}: the documented limit \"{}\" (docs/security.md)", s(c, "id"), s(c, "limit"));
    }
    for c in cases.iter().filter(|c| s(c, "verdict") == "skipped") {
        println!("skipped {}: {}", s(c, "id"), s(c, "skipped"));
    }
    println!(
        "{} cases in {} s{}; full text in {}",
        cases.len(),
        doc["seconds"],
        if doc["root"] == true { ", as root" } else { ", NOT as root (the root-only paths were not exercised)" },
        report.display()
    );

    let escaped: Vec<String> = cases.iter().filter(|c| s(c, "verdict") == "ESCAPED").map(|c| s(c, "id")).collect();
    if !escaped.is_empty() {
        return Err(format!("{} case(s) not contained: {}", escaped.len(), escaped.join(", ")));
    }
    if !status.success() {
        return Err("the escape battery failed (see its output above)".into());
    }
    Ok(())
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}
