//! The `warden` binary: everything happens in [`warden::cli::run`].

fn main() -> std::process::ExitCode {
    warden::cli::run()
}
