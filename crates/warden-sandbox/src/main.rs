//! `warden-sandbox`: the sandbox helper alone. It does what `warden
//! --warden-sandbox-helper` does, from a binary small enough to start in a
//! fraction of the time (no component engine to relocate at every exec).
//! warden uses it when it sits next to the `warden` binary.

fn main() {
    warden_sandbox::helper::run_main();
}
