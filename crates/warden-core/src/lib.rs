//! warden's core: what happens to one call between a client and a runtime.
//!
//! The [`executor`] runs the pipeline: resolve in the [`catalog`] (checked against
//! [`lock`], definitions screened by [`poisoning`]), decide under the policy, ask a
//! person ([`approval`]), reuse a [`cache`]d result, run in `warden-runtime`, shape,
//! and record ([`audit`]). The MCP server and the CLI sit above this crate; it
//! cannot reach them.

#![deny(unsafe_code)]

use warden_egress as egress;
use warden_policy as policy;
use warden_runtime as runtime;
use warden_runtime::{error, paths, shape};

pub mod approval;
pub mod audit;
pub mod cache;
pub mod catalog;
pub mod executor;
pub mod live;
pub mod lock;
pub mod poisoning;
pub mod workspace_read;
