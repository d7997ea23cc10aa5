//! warden: a security-first executor for the tools that LLM agents call.
//!
//! This crate is the `warden` command: [`cli`] (one file per command), [`checkup`]
//! and [`lint`] (`warden audit`). The rest lives in the workspace's crates and is
//! re-exported here under one name each: the call pipeline ([`executor`], [`catalog`],
//! [`approval`], [`audit`], [`lock`], … from `warden-core`), [`mcp`], [`runtime`],
//! [`egress`] and [`policy`]. README.md, "Layout", draws the crate graph.

#![deny(unsafe_code)]

pub mod checkup;
pub mod cli;
pub use warden_egress as egress;
#[doc(hidden)]
pub mod fuzzing;
pub mod lint;
pub use warden_core::{approval, audit, cache, catalog, executor, live, lock, poisoning, workspace_read};
pub use warden_mcp as mcp;
pub use warden_policy as policy;
pub use warden_runtime as runtime;
pub use warden_runtime::{error, paths, shape};

pub use error::{CallError, ErrorCode};
pub use executor::{CallResponse, Executor, Options, Status, ToolCall};
pub use policy::{Policy, Tier};
