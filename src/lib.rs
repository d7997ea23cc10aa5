//! warden: a security-first executor for the tools that LLM agents call.
//!
//! A call goes in; it is resolved, validated, decided under a declarative
//! policy, approved where the policy asks, run inside a sandbox whose walls come
//! from that policy, and a bounded result plus a durable, hash-chained audit
//! record come out.
//!
//! # Layout
//!
//! Read the file names to follow a call:
//!
//! * [`policy`] (the `warden-policy` crate): the policy file: loading, checking, the tier decision.
//! * [`lint`]: the policy's findings with stable rule ids (`warden audit`).
//! * [`catalog`]: the tools that exist under the policy; name resolution.
//! * [`lock`]: `warden.lock`, the pinned tool definitions of plugins and servers.
//! * [`executor`]: the pipeline that takes one call from request to response.
//! * [`approval`]: who says yes to `ask` and `confirm` calls, and the preview.
//! * [`runtime`]: the sandboxes; [`runtime::wasm`] runs WebAssembly components,
//!   [`runtime::process`] runs programs under rlimits, Landlock and seccomp
//!   (the helper that applies them is the `warden-sandbox` crate),
//!   [`runtime::server`] runs MCP servers inside that same sandbox;
//!   [`runtime::persist`] judges what a call may leave in its grants, and
//!   [`runtime::layer`] holds a process call's writes until it has.
//! * [`shape`]: result sanitising and type-aware truncation.
//! * [`workspace_read`]: the one way the host reads workspace content (once, beneath
//!   the workspace fd, regular files only, bounded).
//! * [`audit`]: the durable hash-chained log, `log verify` and `log stats`.
//! * [`egress`] (the `warden-egress` crate): the egress proxy, process tools' one way out of
//!   their network namespace.
//! * [`mcp`]: `warden serve`, the tools over the Model Context Protocol.
//! * [`checkup`]: `warden audit`: the host, each tool's layers, policy lint, SARIF.
//! * [`cli`]: the `warden` command line.
//! * [`error`]: the stable error codes and their exit codes.

#![deny(unsafe_code)]

pub mod approval;
pub mod audit;
pub mod cache;
pub mod catalog;
pub mod checkup;
pub mod cli;
pub use warden_egress as egress;
pub mod error;
pub mod executor;
#[doc(hidden)]
pub mod fuzzing;
pub mod lint;
pub mod lock;
pub mod mcp;
pub mod paths;
pub use warden_policy as policy;
pub mod runtime;
pub mod shape;
pub mod workspace_read;

pub use error::{CallError, ErrorCode};
pub use executor::{CallResponse, Executor, Options, Status, ToolCall};
pub use policy::{Policy, Tier};
