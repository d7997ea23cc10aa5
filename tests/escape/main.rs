//! The escape battery: one case per attack, each naming its
//! class, the attempt and the refusal it expects, for both runtimes (process
//! tools through the real `warden` binary, components through the library
//! `Executor` or the binary) and for the policy layer.
//!
//! Every case really attempts its escape and checks two things: that the call
//! was refused the way the case expects (an error code, an errno text, an exit
//! status, a limit), and a canary where one exists (a secret planted outside
//! every workspace never appears, a file that would be planted outside is not
//! created, a listener sees no connection, no process survives). A case whose
//! attack meets one of the known limits of `docs/security.md` says so: it is
//! kept, marked *partial* with the limit's name, and checks only the bound that
//! does exist.
//!
//! One `#[test]` runs the whole table (in parallel, the heavy cases alone),
//! writes it to `target/escape.json`, prints it, and fails listing every case
//! that was not contained. `cargo xtask escape` runs it and prints the table.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod components;
mod credential;
mod filesystem;
mod hostside;
mod inbox;
mod itself;
mod network;
mod persistence;
mod policy;
mod privilege;
mod resources;
mod scene;
mod supply;
#[path = "../util/mod.rs"]
mod util;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::json;

pub(crate) use scene::Scene;

/// One attack.
pub(crate) struct Case {
    /// A stable name: `CLASS-short.attack/RUNTIME`.
    pub id: &'static str,
    /// filesystem, network, privilege, resources, components, policy, hostside, warden, persistence, supply-chain or credential.
    pub class: &'static str,
    /// `process`, `component`, `policy` or `build` (a plugin's build under `cargo xtask plugin`).
    pub runtime: &'static str,
    /// What is tried.
    pub attempt: &'static str,
    /// The refusal that containment looks like.
    pub expected: &'static str,
    /// Runs alone, after the parallel part (CPU-heavy, or counts processes).
    pub heavy: bool,
    /// Makes the attempt and judges it.
    pub run: fn(&Scene) -> Observed,
}

/// What one case saw.
pub(crate) struct Observed {
    /// What happened, in a line.
    pub observed: String,
    /// Whether the call was contained (for a partial case: whether the bound that exists held).
    pub contained: bool,
    /// The known limit of `docs/security.md` that this case runs into, if any.
    pub limit: Option<&'static str>,
    /// Why the case could not be attempted here (never in CI, which runs as root).
    pub skipped: Option<String>,
}

impl Observed {
    pub(crate) fn new(contained: bool, observed: impl Into<String>) -> Observed {
        Observed { observed: observed.into(), contained, limit: None, skipped: None }
    }
    /// A case that meets the documented limit `limit`; `held` says whether what does bound it held.
    pub(crate) fn limit(limit: &'static str, held: bool, observed: impl Into<String>) -> Observed {
        Observed { observed: observed.into(), contained: held, limit: Some(limit), skipped: None }
    }
    pub(crate) fn skipped(why: impl Into<String>) -> Observed {
        let why = why.into();
        Observed { observed: format!("not attempted: {why}"), contained: false, limit: None, skipped: Some(why) }
    }
}

/// One line of the report.
struct Row {
    case: &'static Case,
    observed: String,
    contained: bool,
    limit: Option<&'static str>,
    skipped: Option<String>,
    seconds: f64,
}

impl Row {
    fn verdict(&self) -> &'static str {
        match (&self.skipped, self.contained, self.limit) {
            (Some(_), _, _) => "skipped",
            (None, true, None) => "contained",
            (None, true, Some(_)) => "partial",
            (None, false, _) => "ESCAPED",
        }
    }
}

fn all_cases() -> Vec<Case> {
    let mut v = filesystem::cases();
    v.extend(network::cases());
    v.extend(privilege::cases());
    v.extend(resources::cases());
    v.extend(components::cases());
    v.extend(policy::cases());
    v.extend(hostside::cases());
    v.extend(inbox::cases());
    v.extend(itself::cases());
    v.extend(persistence::cases());
    v.extend(supply::cases());
    v.extend(credential::cases());
    v
}

fn run_one(scene: &Scene, case: &'static Case) -> Row {
    let started = Instant::now();
    let obs = std::panic::catch_unwind(AssertUnwindSafe(|| (case.run)(scene))).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Observed::new(false, format!("the case itself panicked: {msg}"))
    });
    Row {
        case,
        observed: scene.redact(&obs.observed).replace('\n', "\\n"),
        contained: obs.contained,
        limit: obs.limit,
        skipped: obs.skipped,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Runs `cases` on `workers` threads, each taking the next case.
fn run_all(scene: &Scene, cases: &[&'static Case], workers: usize) -> Vec<Row> {
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let row = run_one(scene, case);
                    rows.lock().unwrap().push((i, row));
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by_key(|(i, _)| *i);
    rows.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn the_escape_battery() {
    let started = Instant::now();
    let scene = Scene::new();
    let cases: &'static [Case] = Box::leak(all_cases().into_boxed_slice());
    let mut ids: Vec<&str> = cases.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), cases.len(), "case ids must be unique");
    if !scene.root {
        println!(
            "note: not running as root; the root-only paths (capability drop, pids cgroup, uid 0) are not exercised"
        );
    }
    // WARDEN_ESCAPE_ONLY=net-tcp,res-memfd runs the cases whose id contains one of the words (while working on them).
    let only: Vec<String> = std::env::var("WARDEN_ESCAPE_ONLY")
        .map(|v| v.split(',').filter(|w| !w.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    let chosen = |c: &&Case| only.is_empty() || only.iter().any(|w| c.id.contains(w.as_str()));
    let light: Vec<&Case> = cases.iter().filter(|c| !c.heavy).filter(chosen).collect();
    let heavy: Vec<&Case> = cases.iter().filter(|c| c.heavy).filter(chosen).collect();
    // A filter that matches nothing would pass having attempted nothing.
    assert!(!light.is_empty() || !heavy.is_empty(), "WARDEN_ESCAPE_ONLY={only:?} matches no case id");
    let mut rows = run_all(&scene, &light, 3);
    rows.extend(run_all(&scene, &heavy, 1));
    let order = |r: &Row| cases.iter().position(|c| c.id == r.case.id).unwrap_or(usize::MAX);
    rows.sort_by_key(order);

    let doc: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({
                "id": r.case.id,
                "class": r.case.class,
                "runtime": r.case.runtime,
                "attempt": r.case.attempt,
                "expected": r.case.expected,
                "observed": r.observed,
                "contained": r.contained,
                "verdict": r.verdict(),
                "limit": r.limit,
                "skipped": r.skipped,
                "seconds": (r.seconds * 1000.0).round() / 1000.0,
            })
        })
        .collect();
    let report = json!({
        "cases": doc,
        "root": scene.root,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    });
    // As root (and for whoever owns target/): target/escape.json. An ordinary user
    // running the root-built binaries (.ci/unprivileged) writes target/tmp/escape-uid-N.json.
    let text = serde_json::to_string_pretty(&report).unwrap();
    let mut path = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("escape.json");
    if std::fs::write(&path, &text).is_err() {
        path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("escape-uid-{}.json", nix::unistd::geteuid()));
        if let Err(e) = std::fs::write(&path, &text) {
            println!("warning: cannot write the report {}: {e}", path.display());
        }
    }

    println!(
        "\nThe escape battery: {} of {} cases, {:.1} s (report: {})\n",
        rows.len(),
        cases.len(),
        started.elapsed().as_secs_f64(),
        path.display()
    );
    for r in &rows {
        println!("{:<9} {:<10} {:<9} {}", r.verdict(), r.case.class, r.case.runtime, r.case.id);
        println!("          attempt:  {}", r.case.attempt);
        println!("          expected: {}", r.case.expected);
        println!("          observed: {}", r.observed);
        if let Some(l) = r.limit {
            println!("          limit:    {l} (docs/security.md, Known limits)");
        }
    }
    let mut classes: Vec<&str> = rows.iter().map(|r| r.case.class).collect();
    classes.dedup();
    println!();
    for class in classes {
        let of: Vec<&Row> = rows.iter().filter(|r| r.case.class == class).collect();
        let count = |v: &str| of.iter().filter(|r| r.verdict() == v).count();
        println!(
            "{class:<10} {:>3} cases: {} contained, {} partial (a documented limit), {} skipped, {} escaped",
            of.len(),
            count("contained"),
            count("partial"),
            count("skipped"),
            count("ESCAPED")
        );
    }
    for r in rows.iter().filter(|r| r.skipped.is_some()) {
        println!("skipped {}: {}", r.case.id, r.skipped.as_deref().unwrap_or_default());
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.verdict() == "ESCAPED")
        .map(|r| format!("{} ({}): expected {}; observed {}", r.case.id, r.case.class, r.case.expected, r.observed))
        .collect();
    assert!(failed.is_empty(), "{} case(s) not contained:\n{}", failed.len(), failed.join("\n"));
}
