//! The command line: the one place flags and subcommands are defined.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// warden: a security-first executor for the tools that LLM agents call.
///
/// Checks each call against a declarative policy, asks a person where the policy
/// says so, runs the tool in a sandbox whose walls come from the policy, and
/// returns a bounded result with a tamper-evident audit record.
#[derive(Debug, Parser)]
#[command(name = "warden", version = super::package::VERSION, about, long_about = None)]
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
    /// The policy's `[profiles.NAME]` to act as: only its tools, at its tiers (one agent's reach)
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
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
    /// Wait in warden's approval inbox for a person answering with
    /// `warden approvals` or in `warden console` (up to the approval timeout).
    Inbox,
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
        /// Exit with the program's own status (its exit code; 128+N when signal N
        /// ended it) when the call ran a program, for CI steps; warden's own codes
        /// for its refusals and limits. stdout still carries the result document.
        #[arg(long)]
        exit_status: bool,
        /// Copy the program's stdout and stderr to warden's stderr as they
        /// arrive (control characters removed), to watch a long run.
        #[arg(long)]
        stream: bool,
    },
    /// Run a command line under a tool's walls: its grants, environment and
    /// limits, the call's layer and a record, the program found on the tool's
    /// PATH; it gets warden's stdin, stdout and stderr (a terminal passes
    /// through), and warden exits with its status (128+N for signal N).
    ///
    /// The tool is a `[tools.NAME]` entry, by default `run` (a tool without
    /// `exec` lends only its walls); its tier and rules decide as for a call,
    /// with the command line as the argument `command`.
    Run {
        /// The tool whose walls the command runs under.
        #[arg(long, value_name = "NAME", default_value = "run")]
        tool: String,
        /// The command line, after --.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
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
    /// Serve the policy's tools over MCP: stdio by default, Streamable HTTP with --http.
    ///
    /// Approvals go to the MCP client's user (elicitation); a client that cannot
    /// ask waits in warden's approval inbox (`warden approvals`, `warden console`)
    /// for up to --approval-timeout.
    Serve {
        /// Serve Streamable HTTP at this address (for example 127.0.0.1:8765)
        /// instead of stdio. Every request needs the bearer token: set
        /// WARDEN_HTTP_TOKEN, or one is generated and printed to stderr.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// How long the client's user has to answer an approval question.
        #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
        approval_timeout: std::time::Duration,
        /// An Origin admitted over HTTP besides loopback ones (exact, like
        /// https://app.example:443); repeatable.
        #[arg(long, value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// A name admitted in the Host header over HTTP besides loopback names and
        /// the listening address (a Compose or Kubernetes service name, like
        /// warden.internal); repeatable. See docs/mcp.md on DNS rebinding.
        #[arg(long, value_name = "NAME")]
        allow_host: Vec<String>,
    },
    /// Audit the confinement and the policy: host report, the layers each tool
    /// gets here, and lint findings at policy lines.
    Audit {
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: AuditFormat,
        /// Exit 1 when a finding at least this severe exists.
        #[arg(long, value_enum, default_value = "error")]
        fail_on: FailOn,
        /// Skip the self-test (the battery of real escape attempts).
        #[arg(long)]
        no_self_test: bool,
    },
    /// Probe each sandbox layer on this host for real (in the sandbox helper),
    /// say what each tool gets in enforce and best-effort mode, and print the
    /// fix for each missing layer. Exit 0 all layers, 1 degraded, 5 refused.
    Doctor {
        /// One JSON document (schema in docs/doctor.md).
        #[arg(long)]
        json: bool,
    },
    /// Pin the tool definitions (name, description, input schema) of the policy's
    /// plugins and MCP servers in warden.lock beside the policy file.
    ///
    /// Once warden.lock exists, a tool whose definition no longer matches it (a
    /// "rug pull") is refused until you review the change and run this again.
    Lock {
        /// Write nothing; exit 1 when warden.lock is missing or out of date.
        #[arg(long)]
        check: bool,
        /// Write nothing; print the definition TOOL has now (description, input
        /// schema, any poisoning found) and what changed since it was pinned.
        #[arg(long, value_name = "TOOL", conflicts_with = "check")]
        show: Option<String>,
    },
    /// A local web page that shows, live, every warden process on this audit
    /// log: calls, denials and egress, pending approvals (answer them there),
    /// background jobs, definition changes awaiting `warden lock`, and a search
    /// over the log. Prints its address (with a one-time token in the URL's
    /// fragment) on stderr. See docs/console.md.
    Console {
        /// Listen here [default: 127.0.0.1:0, a free loopback port]. Only an
        /// explicit address may be a non-loopback one.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// A name the page may be reached by besides 127.0.0.1, localhost and
        /// [::1] (the `Host` header: NAME or NAME:PORT); repeatable.
        #[arg(long, value_name = "NAME")]
        allow_host: Vec<String>,
    },
    /// Plugin commands.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Policy commands.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Audit log commands.
    #[command(subcommand)]
    Log(LogCommand),
    /// The approval inbox: calls waiting for a person (their client cannot ask),
    /// and lasting approvals.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Print the completion script for SHELL on stdout (docs/install.md says where
    /// each shell looks for it).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print warden's man page (roff) on stdout, for `warden man | man -l -`; with
    /// --dir, write one page per command there (warden.1, warden-call.1, …).
    #[command(hide = true)]
    Man {
        /// Write every page into this directory (which must exist) instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `warden approvals …`
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The calls waiting for a person (and, with --lasting, the lasting approvals).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also list the lasting approvals kept beside the policy.
        #[arg(long)]
        lasting: bool,
    },
    /// One waiting call: its arguments and what it would do (the diff).
    Show {
        /// The approval id (a-…).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Let a waiting call run, once.
    Approve {
        /// The approval id (a-…).
        id: String,
    },
    /// Refuse a waiting call: its agent gets REJECTED.
    Reject {
        /// The approval id (a-…).
        id: String,
        /// Why, passed to the agent.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Let a waiting call run and keep approving what --match describes.
    Always {
        /// The approval id (a-…).
        id: String,
        /// What it covers: these exact arguments, a rule (--when), or every call (ask tools only).
        #[arg(long = "match", value_enum, default_value = "args")]
        matches: MatchArg,
        /// For --match rule: ARG=REGEX, as in [[tools.NAME.rule]] `when`; repeatable.
        #[arg(long, value_name = "ARG=REGEX")]
        when: Vec<String>,
        /// Where it lasts: this workspace, or this session only.
        #[arg(long, value_enum, default_value = "workspace")]
        scope: ScopeArg,
        /// The last day it applies (YYYY-MM-DD, UTC) or an RFC 3339 time.
        #[arg(long, value_name = "DATE")]
        until: Option<String>,
    },
    /// Remove a lasting approval.
    Revoke {
        /// The lasting approval's id (l-…).
        id: String,
    },
}

/// `approvals always --match`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MatchArg {
    /// These exact arguments.
    Args,
    /// Arguments matching --when.
    Rule,
    /// Every call of the tool (ask tools only).
    Tool,
}

/// `approvals always --scope`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScopeArg {
    /// In this workspace.
    Workspace,
    /// In the waiting call's session only.
    Session,
}

/// `warden policy …`
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy and print what it grants; exit 0 valid, 1 invalid.
    Check {
        /// The policy [default: as --policy]
        file: Option<PathBuf>,
    },
    /// Each key of one tool as it stands for calls, and which layer decided it
    /// (the policy, a managed floor in /etc/warden, the profile).
    Explain {
        /// The tool (`SERVER__TOOL` for a server's tool)
        tool: String,
    },
    /// Print the embedded default policy, byte for byte (the policy used when
    /// neither --policy nor ./warden.toml is there; errors point into it).
    ShowDefault,
}

/// `warden plugin …`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Show what a component is and could reach before granting it anything:
    /// sha256, size, its tools and schemas, and the interfaces it imports.
    Inspect {
        /// The component (.wasm).
        file: PathBuf,
        /// Its SSH signature file (`ssh-keygen -Y sign -n warden-plugin`) [default: FILE.sig when present].
        #[arg(long, value_name = "SIG")]
        signature: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Publish a component to an OCI registry (the CNCF Wasm layout) and print
    /// the `source = "oci://…@sha256:…"` line that pins it by digest.
    Push {
        /// The component (.wasm).
        file: PathBuf,
        /// Where: oci://HOST[:PORT]/REPO[:TAG] (https; plain http only to loopback).
        target: String,
        /// An armored sshsig signature of the component (`ssh-keygen -Y sign -n warden-plugin`),
        /// stored as the manifest's dev.warden.signature.sshsig annotation.
        #[arg(long, value_name = "FILE")]
        signature: Option<PathBuf>,
    },
    /// Fetch oci://HOST/REPO@sha256:… into the cache, checked as a policy load
    /// checks it, and print where it lies and its sha256.
    Pull {
        /// The reference, by digest.
        reference: String,
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
    /// Print the record(s) of one call as pretty JSON (both of a background job); exit 1 if none.
    Show {
        /// The call's id (`call_id` in the record, `warden call` prints it).
        call_id: String,
        /// The log [default: as --audit-log]
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Print the last records as JSON lines, across rotated files.
    Tail {
        /// How many records (at most 100000).
        #[arg(short = 'n', long = "lines", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        lines: u32,
        /// Then keep printing new records as they are written (across rotations) until interrupted.
        #[arg(short, long)]
        follow: bool,
        /// The log [default: as --audit-log]
        #[arg(long)]
        file: Option<PathBuf>,
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

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 2m)"))
}

/// `audit --format`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditFormat {
    /// A readable report.
    Text,
    /// JSON.
    Json,
    /// SARIF 2.1.0, for code scanning.
    Sarif,
}

/// `audit --fail-on`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// Fail on error findings.
    Error,
    /// Fail on warnings and errors.
    Warning,
    /// Always exit 0 (unless the audit cannot run).
    Never,
}
