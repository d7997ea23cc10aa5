//! warden's egress proxy ([`Proxy`]): the one way out of a process tool's
//! network namespace. The sandbox helper listens on [`PROXY_ADDR`] inside the
//! namespace and hands the socket to warden, which accepts on it from the host
//! ([`Proxy::start`]); each `CONNECT`, plain HTTP or SOCKS5 request is checked
//! against the tool's grants and addresses ([`rules`]), connected by warden,
//! and journalled ([`Journal`]) for the audit record. Its modules, runtime and
//! bounds are described in docs/security.md, "The egress proxy".

mod accept;
mod body;
pub mod ca;
pub mod http;
mod inject;
pub mod intercept;
pub mod journal;
pub mod rules;
pub mod scan;
pub mod socks;
mod tunnel;
pub mod vault;

pub use journal::{Attempt, CredentialUse, Journal};
pub use rules::EgressPolicy;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Connections one proxy serves at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Bytes one proxy carries each way over its life (8 GiB); connections past it
/// end and new ones are refused.
pub const MAX_BYTES: u64 = 8 << 30;
/// How long a request head (or a SOCKS greeting and request) may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request head, in bytes.
pub const MAX_HEAD: usize = 64 * 1024;
/// The most header lines in a request head.
pub const MAX_HEADERS: usize = 100;
/// How long connecting upstream may take, over all the admitted addresses.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A tunnel or forwarded request with no byte either way for this long ends.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// warden's egress runtime: built on first use, shared by every proxy of the
/// process, never shut down.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("warden-egress")
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| format!("cannot start the egress proxy's runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

pub use warden_sandbox::netns::PROXY_ADDR;

/// The environment variables that point programs at the proxy (both cases of
/// the standard ones, and those npm, yarn, pip, cargo and Node read instead).
///
/// `NO_PROXY` names the namespace's own loopback (servers a test suite starts
/// inside) unless a grant names a loopback address or `localhost`: such a
/// grant means the *host's* loopback, which only the proxy reaches, so then
/// every request goes to the proxy.
pub fn proxy_env(grants: &[warden_policy::NetGrant]) -> Vec<(&'static str, String)> {
    let http = format!("http://{PROXY_ADDR}");
    let socks = format!("socks5h://{PROXY_ADDR}");
    let host_loopback = grants.iter().any(|g| {
        g.host.eq_ignore_ascii_case("localhost")
            || g.host.parse::<std::net::IpAddr>().is_ok_and(|ip| rules::private_kind(ip) == Some("loopback"))
    });
    let mut env = vec![
        ("HTTP_PROXY", http.clone()),
        ("http_proxy", http.clone()),
        ("HTTPS_PROXY", http.clone()),
        ("https_proxy", http.clone()),
        ("ALL_PROXY", socks.clone()),
        ("all_proxy", socks),
        ("npm_config_proxy", http.clone()),
        ("npm_config_https_proxy", http.clone()),
        ("YARN_HTTP_PROXY", http.clone()),
        ("YARN_HTTPS_PROXY", http.clone()),
        ("PIP_PROXY", http.clone()),
        ("CARGO_HTTP_PROXY", http.clone()),
        ("GLOBAL_AGENT_HTTP_PROXY", http),
        ("NODE_USE_ENV_PROXY", "1".to_string()),
    ];
    if !host_loopback {
        let no_proxy = "localhost,127.0.0.1,::1".to_string();
        env.push(("NO_PROXY", no_proxy.clone()));
        env.push(("no_proxy", no_proxy.clone()));
        env.push(("npm_config_noproxy", no_proxy));
    }
    env
}

/// A running proxy for one call (or one server's life). Dropping it stops
/// accepting and closes every connection it holds.
pub struct Proxy {
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Proxy {
    /// Serves `listener` (accepted on from the host namespace) under `policy`,
    /// recording each attempt in `journal`, on warden's egress runtime.
    pub fn start(
        listener: std::net::TcpListener,
        policy: Arc<EgressPolicy>,
        journal: Arc<Journal>,
    ) -> Result<Proxy, String> {
        let stop = tokio_util::sync::CancellationToken::new();
        accept::serve(listener, policy, journal, stop.clone())?;
        Ok(Proxy { stop })
    }
}

#[cfg(test)]
mod tests;
