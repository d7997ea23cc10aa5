//! The lint rules: each with its stable id and name, severity, SARIF score,
//! what it finds, why it matters and what to change.

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth a look.
    Warning,
    /// Fix before relying on the policy.
    Error,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One lint rule.
#[derive(Debug)]
pub struct LintRule {
    /// Stable id, for example `WL101`.
    pub id: &'static str,
    /// Stable short name, for example `write-too-broad`.
    pub name: &'static str,
    /// Its severity.
    pub severity: Severity,
    /// One line.
    pub short: &'static str,
    /// What it finds and why it matters.
    pub full: &'static str,
    /// What to change.
    pub help: &'static str,
    /// CVSS-like score, 0.0 to 10.0, as GitHub code scanning reads it.
    pub security_severity: &'static str,
}

/// Every rule, in id order.
pub const RULES: &[LintRule] = &[
    LintRule {
        id: "WL000",
        name: "policy-invalid",
        severity: Severity::Error,
        short: "The policy does not load",
        full: "warden refuses this policy file: no tool runs under it until the problem is fixed.",
        help: "Fix the key or value named in the message; `warden policy check` lists every problem.",
        security_severity: "5.0",
    },
    LintRule {
        id: "WL101",
        name: "write-too-broad",
        severity: Severity::Error,
        short: "Write access to /, the home directory, or a parent of the workspace",
        full: "A write grant that covers /, {home} or a directory above the workspace lets the tool change files \
               far outside the project: shell start-up files, SSH keys, other projects, warden's own policy and log.",
        help: "Grant {workspace} (or a directory inside it) instead.",
        security_severity: "8.5",
    },
    LintRule {
        id: "WL102",
        name: "home-readable",
        severity: Severity::Warning,
        short: "The home directory is readable",
        full: "A read grant that covers {home} exposes SSH keys, cloud credentials and tokens kept in dotfiles to \
               the tool, and through its result to the agent; and, where the call's root is built from its grants, \
               the daemons whose sockets live there (gpg-agent, an ssh ControlMaster) to its AF_UNIX sockets.",
        help: "Grant the specific directories the tool needs, or {workspace}.",
        security_severity: "6.5",
    },
    LintRule {
        id: "WL103",
        name: "net-any-host",
        severity: Severity::Warning,
        short: "A process tool's network grant reaches every host on that port on this host",
        full: "A process tool's grants hold by host only inside a network namespace of the call's own, whose one \
               way out is warden's egress proxy. This host cannot make one, so in enforce mode the tool is \
               unavailable, and in best-effort mode Landlock filters its TCP by port only: granted \
               api.example.com:443, it can connect to any host on port 443, which is enough to send data anywhere.",
        help: "Enable unprivileged user namespaces (or run warden as root) so the proxy holds the grant, or run the \
               networked tool as a component.",
        security_severity: "5.0",
    },
    LintRule {
        id: "WL104",
        name: "auto-interpreter",
        severity: Severity::Warning,
        short: "A shell or interpreter runs agent-chosen code at tier auto, with no rules",
        full: "A process tool whose program is a shell or interpreter and whose arguments come from the agent runs \
               whatever the agent writes, without anyone seeing it first.",
        help: "Set tier = \"ask\" or \"confirm\", and add anchored auto rules for the commands that are safe.",
        security_severity: "7.0",
    },
    LintRule {
        id: "WL105",
        name: "auto-rule-unanchored",
        severity: Severity::Warning,
        short: "An auto rule's pattern is not anchored at both ends",
        full: "An auto rule on a process tool whose regex lacks ^ and $ matches any command that merely contains \
               the safe text, so `ls` also approves `rm -rf x; ls`-like arguments that pass the simple-command check.",
        help: "Anchor the pattern: ^…$.",
        security_severity: "7.5",
    },
    LintRule {
        id: "WL106",
        name: "plugin-unpinned",
        severity: Severity::Error,
        short: "A plugin file without sha256",
        full: "A plugin that is not builtin loads only when pinned by sha256; without it the plugin's tools are \
               unavailable, and pinning is what stops a swapped file from running.",
        help: "Add sha256 = \"…\" (`sha256sum FILE` prints it) after reviewing the file.",
        security_severity: "8.0",
    },
    LintRule {
        id: "WL107",
        name: "secret-in-env",
        severity: Severity::Warning,
        short: "A secret-looking variable is passed to a tool",
        full: "env.pass hands the variable's value to the tool, which can return it to the agent or send it \
               wherever its grants reach.",
        help: "Pass secrets only to tools that need them, with no other reach; prefer a narrower credential.",
        security_severity: "6.0",
    },
    LintRule {
        id: "WL108",
        name: "best-effort",
        severity: Severity::Warning,
        short: "The sandbox runs in best-effort mode",
        full: "In best-effort mode a process tool runs even when Landlock or seccomp is missing, with whatever \
               layers this kernel has.",
        help: "Use mode = \"enforce\" (the default) on kernels that have Landlock ABI 4 and seccomp.",
        security_severity: "5.5",
    },
    LintRule {
        id: "WL109",
        name: "limit-too-high",
        severity: Severity::Warning,
        short: "A limit far above its default",
        full: "Limits bound what a runaway or hostile tool can consume; one far above the default lets a single \
               call exhaust the machine. The timeout and cpu limits of a tool with neither exec nor plugin \
               (one that only lends its walls to `warden run`) are not judged: its command line is a person's \
               own test suite or build.",
        help: "Keep limits near the defaults unless the tool needs more.",
        security_severity: "3.0",
    },
    LintRule {
        id: "WL110",
        name: "rule-shadowed",
        severity: Severity::Warning,
        short: "A rule never takes effect: a stricter rule matches everything it matches",
        full: "When rules overlap, the strictest matching tier wins, so a rule whose pattern is the same as (or \
               covered by a match-everything pattern of) a stricter rule on the same argument never decides a call.",
        help: "Remove the shadowed rule, or narrow the stricter one.",
        security_severity: "2.0",
    },
    LintRule {
        id: "WL111",
        name: "tool-poisoning",
        severity: Severity::Error,
        short: "A tool description carries instructions or hidden text aimed at the model",
        full: "Descriptions are shown to the model. Invisible characters, bidirectional controls or phrases such \
               as \"ignore previous instructions\" in a description are a known way to steer an agent (tool \
               poisoning).",
        help: "Replace the description in the policy (`description = \"…\"`) with plain text you have read.",
        security_severity: "8.0",
    },
    LintRule {
        id: "WL112",
        name: "writes-warden-files",
        severity: Severity::Warning,
        short: "A tool can write warden's own policy, audit log or component cache",
        full: "A write grant that covers the policy file lets a tool approve itself at the next start; one that \
               covers the audit log or the compiled-component cache lets it rewrite the record or what runs. \
               Every call protects these files inside its grants, but in best-effort mode a process tool may run \
               without the mount namespace that holds the protection.",
        help: "Keep the policy, the log (--audit-log) and the cache (WARDEN_CACHE_DIR) outside every write grant, \
               for example by granting a subdirectory of the workspace.",
        security_severity: "7.0",
    },
    LintRule {
        id: "WL113",
        name: "hard-linked-files-in-grant",
        severity: Severity::Warning,
        short: "A granted directory holds hard links to files outside it",
        full: "Landlock and the WASI preopens authorise a path, never a file: a hard link inside a grant to a file \
               elsewhere gives the tool that file, with the grant's rights, whatever the policy says of its other \
               paths. A tool cannot make such a link itself; someone outside the sandbox did.",
        help: "Grant a directory without such links (`find DIR -type f -links +1` lists candidates), or replace the \
               links with copies.",
        security_severity: "5.0",
    },
    LintRule {
        id: "WL114",
        name: "sysv-ipc-shared",
        severity: Severity::Warning,
        short: "A process tool may use the host's SysV IPC and POSIX message queues",
        full: "`sysv_ipc = true` admits shmget, msgget, semget and mq_open where warden cannot give the call a \
               private IPC namespace (an ordinary user): the tool then sees, reads and consumes the shared memory \
               and message queues of every process of its uid, warden's neighbours included, and what it makes \
               outlives the call (memory outside every limit). As root each call has a namespace of its own and \
               the key changes nothing.",
        help: "Remove `sysv_ipc`, or run warden as root (as CI does), where every call gets a private IPC namespace.",
        security_severity: "5.0",
    },
    LintRule {
        id: "WL115",
        name: "inotify-anywhere",
        severity: Severity::Warning,
        short: "A process tool may watch any directory its uid can read",
        full: "`inotify = true` admits inotify watches. Landlock does not check the path of a watch, so the tool \
               learns, while it runs, the names of the files that others create, open, rename or delete in any \
               directory its uid may read (`~/.ssh`, `/tmp`), granted or not.",
        help: "Remove `inotify` unless the program needs file watching (a dev server, a watch mode); most tools \
               fall back to polling.",
        security_severity: "4.0",
    },
    LintRule {
        id: "WL116",
        name: "protected-path-released",
        severity: Severity::Warning,
        short: "A tool may write a path that runs on the host",
        full: "`fs.unprotect` releases one of warden's built-in protected paths (`.git/hooks`, `.git/config`, \
               `.envrc`, `.vscode`, `.mcp.json`, shell start-up files, …) for this tool: what it writes there runs \
               outside the sandbox, as the user, the next time git, the shell, the editor or an agent reads it.",
        help: "Remove the entry unless this tool's job is to edit that file; review what it wrote before you run git, \
               open the folder or start an agent there.",
        security_severity: "6.0",
    },
    LintRule {
        id: "WL117",
        name: "net-wide-grant",
        severity: Severity::Warning,
        short: "An auto-tier tool's network grant is wider than one registrable domain",
        full: "`net.connect = [\"*:443\"]` or `[\"*.com:443\"]` lets the tool reach any host of the internet (or of a \
               whole public suffix) on that port: enough to send anything it reads anywhere. warden's proxy still \
               refuses private and metadata addresses.",
        help: "Name the hosts the tool needs, or one domain with `*.example.com:443`; or set the tool's tier to \
               `ask` so a person approves each call.",
        security_severity: "6.0",
    },
    LintRule {
        id: "WL118",
        name: "profile-pattern-unmatched",
        severity: Severity::Warning,
        short: "A profile names a tool pattern that matches no tool of the policy",
        full: "`[profiles.NAME] tools` lists the tools one agent gets. A pattern that matches nothing offers \
               nothing: usually a misspelt name, or a server that did not start, so the agent lacks a tool its \
               operator meant to give it.",
        help: "Fix the name (`warden list` shows the tools there are), or remove the entry.",
        security_severity: "1.0",
    },
    LintRule {
        id: "WL119",
        name: "unix-socket-root",
        severity: Severity::Warning,
        short: "net.unix grants a socket whose daemon acts as root for whoever connects",
        full: "A client of the Docker, containerd, Podman (rootful), CRI-O, BuildKit, libvirt, LXD, Incus or \
               snapd socket, of systemd's private socket, or (as uid 0) of the system bus, can have the daemon start a privileged container, mount \
               the host's root or install software: root on the host, whatever the sandbox around the client. \
               Each daemon's own documentation says so (Docker: \"the docker group grants root-level privileges\").",
        help: "Remove the entry, or run the tool that needs the daemon outside warden, on a machine that is \
               itself the boundary.",
        security_severity: "8.0",
    },
    LintRule {
        id: "WL120",
        name: "socket-dirs-granted",
        severity: Severity::Warning,
        short: "A grant covers where host daemons keep their sockets",
        full: "Landlock does not mediate connect() to a pathname unix socket: inside a call whose root is built \
               from its grants, a socket under a read or write grant can be reached by path. /run, /var/run and \
               /run/user hold the system's and each user's daemon sockets (the D-Bus buses, systemd, Docker, \
               ssh and gpg agents), /tmp holds tmux's, X11's and many others'.",
        help: "Grant the files the tool reads there by name, and one socket it needs with net.unix.",
        security_severity: "6.0",
    },
    LintRule {
        id: "WL121",
        name: "plugin-unsigned",
        severity: Severity::Warning,
        short: "A third-party plugin has no signers",
        full: "Its sha256 pins the bytes you reviewed, but nothing says who built them: whoever gave you the file \
               (a mirror, a registry, a pull request that updated the pin) chose what runs. With `signers`, a \
               component loads only with a valid signature by one of the listed keys (`ssh-keygen -Y sign -n \
               warden-plugin`), checked before it is compiled.",
        help: "Ask the author for their SSH public key and the signature file, and add signers = \
               [\"ssh-ed25519 AAAA… author\"] to [plugins.NAME].",
        security_severity: "4.0",
    },
    LintRule {
        id: "WL122",
        name: "plugin-imports-beyond-grants",
        severity: Severity::Warning,
        short: "A component imports network interfaces none of its tools is granted",
        full: "The component imports wasi:sockets or wasi:http, but no tool of the plugin has net.connect. warden \
               refuses every connection it was not granted, so nothing leaks today; but a plugin that asks for more \
               than its job needs is either built carelessly or waiting for a grant, and a later, wider grant to \
               one of its tools hands the network to all of its code.",
        help: "Ask the author why it imports the network, or use a build without it; grant net.connect only to the \
               tool that needs it, with named hosts.",
        security_severity: "3.0",
    },
    LintRule {
        id: "WL123",
        name: "lasting-approval-inert",
        severity: Severity::Warning,
        short: "A lasting approval can no longer apply",
        full: "An entry of warden.approvals.toml has expired, names a tool the policy no longer offers, or was given \
               for a definition of the tool (its policy entry, description or input schema) that has changed since. \
               warden never applies it, so the person who relies on it is asked again; an entry nobody can use is \
               noise in a file people review.",
        help: "Revoke it with `warden approvals revoke ID`; approve the changed tool anew if it is still wanted.",
        security_severity: "1.0",
    },
    LintRule {
        id: "WL124",
        name: "lasting-approval-unbounded",
        severity: Severity::Warning,
        short: "A lasting approval covers every call of a tool with no end date",
        full: "An entry with match = \"tool\" and no `until` approves every call of an ask tool in its workspace for \
               as long as the tool's definition stays the same: an agent steered by a prompt injection gets the same \
               yes as the task the person had in mind.",
        help: "Narrow it to a rule (`warden approvals always ID --match rule --when ARG=REGEX`) or give it an end \
               (`--until YYYY-MM-DD`); revoke it with `warden approvals revoke ID`.",
        security_severity: "4.0",
    },
    LintRule {
        id: "WL125",
        name: "credential-unused",
        severity: Severity::Warning,
        short: "A credential nothing can use",
        full: "A [credentials.NAME] table with no bind, or that no tool or server holds, is loaded by no call: its \
               source is a secret kept in reach for nothing, and a reviewer cannot tell what it was meant for.",
        help: "Add a [[credentials.NAME.bind]] and name it in a tool's credentials = [...], or remove it.",
        security_severity: "1.0",
    },
    LintRule {
        id: "WL126",
        name: "credential-exfiltration-path",
        severity: Severity::Warning,
        short: "A tool holds a credential and may reach other destinations too",
        full: "The tool never sees the real value, but it can read what the credential opens (a private repository, \
               an API's answers) and send that to another host its net.connect grants, or through a unix socket.",
        help: "Grant the holding tool only the hosts its credentials bind; give other destinations to another tool.",
        security_severity: "5.0",
    },
    LintRule {
        id: "WL127",
        name: "credential-in-body",
        severity: Severity::Warning,
        short: "A credential is substituted in request bodies",
        full: "With body = true warden replaces the placeholder anywhere in a request body toward the bound host: a \
               tool can make that host store the real value (an issue comment, a gist) and read it back.",
        help: "Keep body = false unless the API takes the secret in its body, and bind it to that path only.",
        security_severity: "5.5",
    },
    LintRule {
        id: "WL128",
        name: "credential-ca-overridden",
        severity: Severity::Warning,
        short: "A tool that holds a credential sets its own CA bundle",
        full: "warden points a holding tool's clients at a bundle of the system roots and its egress CA (SSL_CERT_FILE, \
               REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS and others). A policy value for one of them wins, and the \
               client then refuses warden's interception, so requests to the bound host fail.",
        help: "Remove the variable from env.set and env.pass; warden's bundle already holds the system roots.",
        security_severity: "2.0",
    },
    LintRule {
        id: "WL129",
        name: "credential-source-readable",
        severity: Severity::Error,
        short: "A credential's source file lies in a tool's grant",
        full: "The tool that can read the file reads the real value itself: the placeholder protects nothing.",
        help: "Move the file outside every fs.read and fs.write grant (for example under ~/.config/warden), mode 600.",
        security_severity: "8.0",
    },
    LintRule {
        id: "WL200",
        name: "self-test-escape",
        severity: Severity::Error,
        short: "An escape attempt of the self-test was not contained",
        full: "warden audit runs real escape attempts under the sandbox this host gives the policy's tools; one of \
               them worked, so tools can do what the message describes.",
        help: "Run with mode = \"enforce\" on a kernel with Landlock ABI 4 or newer and seccomp, or fix the layer the \
               message names as missing.",
        security_severity: "9.0",
    },
];

/// The rule with `id`.
pub fn rule(id: &str) -> &'static LintRule {
    RULES.iter().find(|r| r.id == id).unwrap_or(&RULES[0])
}
