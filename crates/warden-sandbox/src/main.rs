//! `warden-sandbox`: the sandbox helper alone. It does what `warden
//! --warden-sandbox-helper` does, from a binary small enough to start in a
//! fraction of the time (no component engine to relocate at every exec).
//! warden uses it when it sits next to the `warden` binary. With
//! `--warden-sandbox-probe` it tries each layer instead (`warden doctor`).

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == warden_sandbox::probe::PROBE_ARG) {
        warden_sandbox::probe::run_main();
    }
    warden_sandbox::helper::run_main();
}
