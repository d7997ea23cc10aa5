//! The command line: the one place flags and subcommands are defined.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// warden: a security-first executor for the tools that LLM agents call.
///
/// Checks each call against a declarative policy, asks a person where the policy
/// says so, runs the tool in a sandbox whose walls come from the policy, and
/// returns a bounded result with a tamper-evident audit record.
#[derive(Debug, Parser)]
#[command(name = "warden", version, about, long_about = None)]
pub struct Cli {
    /// Policy file [default: ./warden.toml if present, else the embedded default policy]
    #[arg(long, global = true, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Workspace directory [default: the current directory]
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Audit log [default: $XDG_STATE_HOME/warden/audit.jsonl]
    #[arg(long, global = true, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Who answers `ask`/`confirm` calls [default: prompt with a terminal, deny without]
    #[arg(long, global = true, value_enum, value_name = "MODE")]
    pub approve: Option<ApproveArg>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--approve` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApproveArg {
    /// Ask on the controlling terminal.
    Prompt,
    /// Refuse every call that needs approval (APPROVAL_REQUIRED).
    Deny,
    /// Approve every call (recorded as `flag` in the audit log).
    Yes,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one call; prints one result document.
    Call {
        /// The tool's name (or PLUGIN.TOOL).
        tool: String,
        /// The arguments as a JSON object, or - to read them from stdin.
        #[arg(default_value = "{}")]
        args: String,
    },
    /// Read one tool call from stdin (an OpenAI tool_calls item or assistant message,
    /// or an Anthropic tool_use block or assistant message) and print the tool-result message(s).
    Exec,
    /// The tools visible under the policy, sorted by name.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Policy commands.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Audit log commands.
    #[command(subcommand)]
    Log(LogCommand),
}

/// `warden policy …`
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy and print what it grants; exit 0 valid, 1 invalid.
    Check {
        /// The policy [default: as --policy]
        file: Option<PathBuf>,
    },
}

/// `warden log …`
#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Check the audit log's hash chain; exit 0 intact, 1 broken.
    Verify {
        /// The log [default: as --audit-log]
        file: Option<PathBuf>,
    },
    /// Per-tool counts and latencies from the audit log.
    Stats {
        /// The log [default: as --audit-log]
        file: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: StatsFormat,
    },
}

/// `log stats --format`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    /// A table.
    Text,
    /// JSON.
    Json,
}
