//! warden: a security-first executor for the tools that LLM agents call.
//!
//! A call ([`ToolCall`]) goes through the [`Executor`]: resolved in the
//! [`catalog`], validated, decided under the [`policy`], approved where it asks
//! ([`approval`]), run in a sandbox whose walls come from that policy
//! ([`runtime`]; process tools through the `warden-sandbox` helper, their network
//! through [`egress`]), shaped ([`shape`]) and recorded ([`audit`]). Around it:
//! [`mcp`] (`warden serve`), [`cli`], [`checkup`] and [`lint`] (`warden audit`),
//! [`lock`] (`warden.lock`), [`poisoning`] (definitions that address the model), [`cache`], [`workspace_read`], [`error`] (the stable
//! codes). README.md, "Layout", draws the crate graph.

#![deny(unsafe_code)]

pub mod approval;
pub mod audit;
pub mod cache;
pub mod catalog;
pub mod checkup;
pub mod cli;
pub use warden_egress as egress;
pub mod executor;
#[doc(hidden)]
pub mod fuzzing;
pub mod lint;
pub mod lock;
pub mod mcp;
pub mod poisoning;
pub use warden_policy as policy;
pub use warden_runtime as runtime;
pub use warden_runtime::{error, paths, shape};
pub mod workspace_read;

pub use error::{CallError, ErrorCode};
pub use executor::{CallResponse, Executor, Options, Status, ToolCall};
pub use policy::{Policy, Tier};
