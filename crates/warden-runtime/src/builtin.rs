//! The components `build.rs` builds from `plugins/`: the builtin tools this crate
//! embeds, and the test components the host's self-test and tests load.

/// The builtin `fs` component (`plugins/fs`).
pub static FS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fs.wasm"));
/// Its sha256, computed by `build.rs` from the same file.
pub const FS_SHA256: &str = env!("WARDEN_BUILTIN_FS_SHA256");
/// The builtin `net` component (`http_fetch` over wasi:http, `plugins/net`).
pub static NET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/net.wasm"));
/// Its sha256.
pub const NET_SHA256: &str = env!("WARDEN_BUILTIN_NET_SHA256");
/// The hostile testkit component (`plugins/testkit`) that `warden checkup` runs.
pub static TESTKIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/testkit.wasm"));
/// Where the testkit component was placed (tests load it by path).
pub const TESTKIT_WASM: &str = env!("WARDEN_TESTKIT_WASM");
/// Where the `warden:plugin@0.2.0` fixture of the MCP tests (`plugins/conformance`) was placed.
pub const CONFORMANCE_WASM: &str = env!("WARDEN_CONFORMANCE_WASM");
