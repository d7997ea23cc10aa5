//! warden's sandbox: what confines one process call, and nothing else.
//!
//! The host decides a call's walls and hands them over as a [`spec::SandboxSpec`];
//! the helper (this crate's `warden-sandbox` binary, or `warden
//! --warden-sandbox-helper`) applies them to itself and `execve`s the tool. This
//! crate links no component engine, no async runtime and no MCP code: what
//! runs between `fork` and the tool is only this. One file per mechanism:
//! [`namespaces`], [`netns`], [`mounts`], [`tmpfs`], [`landlock`], [`seccomp`],
//! [`limits`], [`init`] (pid 1 of the call), [`probe`] (each layer tried, for `warden doctor`), [`fdpass`] and [`progress`]
//! (descriptors over the helper socket); [`rules`] and [`spec`] are the data the
//! host and the helper share; [`helper`] runs the steps in order.

#![deny(unsafe_code)]

pub mod fdpass;
pub mod helper;
pub mod init;
pub mod landlock;
pub mod limits;
pub mod mounts;
pub mod namespaces;
pub mod netns;
pub mod probe;
pub mod progress;
pub mod rules;
pub mod seccomp;
pub mod spec;
pub mod tmpfs;
