//! Which destinations a tool's grants admit, and which addresses are private.
//! (Issue 18: being written.)

use crate::policy::NetGrant;

/// What the proxy checks each connection against.
#[derive(Debug, Clone)]
pub struct EgressPolicy {
    /// The tool (or server) the connections belong to, for refusal texts.
    pub tool: String,
    /// Its `net.connect` grants.
    pub grants: Vec<NetGrant>,
    /// `net.allow_private = true`.
    pub allow_private: bool,
}
