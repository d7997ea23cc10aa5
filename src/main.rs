//! The `warden` binary: the sandbox helper when re-executed as one (checked
//! first, before any thread or runtime exists), else [`warden::cli::run`].

fn main() -> std::process::ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == warden_sandbox::helper::HELPER_ARG) {
        warden_sandbox::helper::run_main();
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == warden_sandbox::probe::PROBE_ARG) {
        warden_sandbox::probe::run_main();
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == warden::checkup::probe::PROBE_ARG) {
        warden::checkup::probe::run_main();
    }
    warden::cli::run()
}
