//! Hints at the wall: when a process call failed after the sandbox
//! refused something, its result's `hints` name the key and the value to add,
//! once each, for a person scanning a CI log (`--stream` and `warden run`
//! print them at the end).
//!
//! They are read from what the call already produced: the tail of its stderr
//! and its egress journal. No hint looks at the host's files, so a hint never
//! tells the caller whether a path outside the grants exists: a path the
//! program was refused that lies outside every grant is named as such.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The most hints one result carries.
pub const MAX_HINTS: usize = 5;
/// The stderr lines looked at (the last ones).
const MAX_LINES: usize = 200;
/// The longest path or name a hint quotes.
const MAX_WORD: usize = 256;

/// What a process call's grants are, for [`from_stderr`].
pub struct Grants<'a> {
    /// The tool.
    pub tool: &'a str,
    /// Granted paths (canonical), with write access or not.
    pub dirs: &'a [(PathBuf, bool)],
    /// The same grants as spelled where a link made them differ.
    pub links: &'a [PathBuf],
    /// Whether the tool has any `net.connect` entry.
    pub net: bool,
    /// Protected and denied paths: never suggested.
    pub protected: &'a [PathBuf],
}

/// Places no hint suggests granting, whatever the program printed: where
/// credentials live (ssh and GnuPG keys, cloud and cluster credentials,
/// registry and git tokens, the system's password hashes). A hint is read from
/// text the tool controls; it must not talk a person into handing those over.
const NEVER: &[&str] = &[
    "/.ssh",
    "/.gnupg",
    "/.aws",
    "/.azure",
    "/.kube",
    "/.docker",
    "/.netrc",
    "/.git-credentials",
    "/.npmrc",
    "/.pypirc",
    "/.config/gcloud",
    "/.config/gh",
    "/.cargo/credentials",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
];

fn never(p: &str) -> bool {
    NEVER.iter().any(|n| p.contains(n))
}

/// What a failed call's stderr says the sandbox refused: paths outside the
/// grants, programs not on the tool's `PATH`, names that cannot resolve
/// without a network grant.
pub fn from_stderr(g: &Grants<'_>, stderr: &str) -> Vec<String> {
    let mut out = Hints::default();
    let tool = g.tool;
    let lines: Vec<&str> = stderr.lines().collect();
    for line in &lines[lines.len().saturating_sub(MAX_LINES)..] {
        let lower = line.to_ascii_lowercase();
        let refused = lower.contains("permission denied") || lower.contains("no such file or directory");
        let read_only = lower.contains("read-only file system");
        if refused || read_only {
            for p in absolute_paths(line) {
                let path = Path::new(&p);
                if never(&p) || g.protected.iter().any(|r| path.starts_with(r)) {
                    continue;
                }
                let read =
                    g.dirs.iter().any(|(d, _)| path.starts_with(d)) || g.links.iter().any(|l| path.starts_with(l));
                let write = g.dirs.iter().any(|(d, w)| *w && path.starts_with(d));
                if !read && refused {
                    out.push(format!(
                        "the program was refused {p}, outside every grant of {tool}: if it needs it, add \"{p}\" (or \
                         a directory above it) to its fs.read"
                    ));
                } else if read_only && !write {
                    out.push(format!(
                        "the program could not change {p}, outside the write grants of {tool}: if it must, add \"{p}\" \
                         (or a directory above it) to its fs.write"
                    ));
                }
            }
        }
        if let Some(name) = not_found(line) {
            out.push(format!(
                "{name} is not on the PATH of {tool} inside the call: add the directory that holds it (its \
                 toolchain's installation) to fs.read and keep it on PATH (env.pass or env.set)"
            ));
        }
        if !g.net && resolves(&lower) {
            let target = host_of(line).unwrap_or_else(|| "HOST:443".to_string());
            out.push(format!(
                "{tool} has no network grant, so no name resolves inside the call: add \"{target}\" to its \
                 net.connect (every connection then goes through warden's egress proxy)"
            ));
        }
    }
    out.0
}

/// The egress proxy's refusals in the call's journal: one hint per
/// destination, `HOST:PORT` quoted once.
pub fn from_network(tool: &str, journal: &Value) -> Vec<String> {
    let mut out = Hints::default();
    for a in journal["attempts"].as_array().into_iter().flatten().filter(|a| a["allowed"] == false) {
        let host = a["host"].as_str().unwrap_or_default();
        if host.is_empty() || host.len() > MAX_WORD {
            continue;
        }
        let port = a["port"].as_u64().unwrap_or(443);
        // A granted name that resolved to a private address: the grant is there, the address is not.
        let reason = a["reason"].as_str().unwrap_or_default();
        if reason.contains("net.allow_private") && reason.len() <= 2 * MAX_WORD {
            out.push(format!("{tool} was refused {host}:{port}: {reason}"));
            continue;
        }
        out.push(format!("{tool} was refused {host}:{port}: add \"{host}:{port}\" to its net.connect if it needs it"));
    }
    out.0
}

/// Hints, once each, at most [`MAX_HINTS`].
#[derive(Default)]
struct Hints(Vec<String>);

impl Hints {
    fn push(&mut self, hint: String) {
        if self.0.len() < MAX_HINTS && !self.0.contains(&hint) {
            self.0.push(hint);
        }
    }
}

/// The absolute paths a line quotes (as `cat: /a/b: …`, `'/a/b'`, `"/a/b"`).
fn absolute_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i] == b'/' && (i == 0 || matches!(bytes[i - 1], b' ' | b'\'' | b'"' | b'(' | b'=' | b'`'));
        if !starts {
            i += 1;
            continue;
        }
        let end = line[i..]
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | ':' | ',' | ')' | '`'))
            .map_or(line.len(), |n| i + n);
        let word = &line[i..end];
        if word.len() > 1 && word.len() <= MAX_WORD && !out.iter().any(|w| w == word) {
            out.push(word.to_string());
        }
        i = end.max(i + 1);
    }
    out
}

/// The program a shell or `env` could not find: `sh: 1: node: not found`,
/// `bash: node: command not found`, `/usr/bin/env: 'node': No such file or directory`.
fn not_found(line: &str) -> Option<String> {
    let word = |w: &str| {
        let w = w.trim().trim_matches(|c| c == '\'' || c == '"' || c == '`');
        (!w.is_empty() && w.len() <= MAX_WORD && !w.contains(char::is_whitespace) && !w.starts_with('/'))
            .then(|| w.to_string())
    };
    if let Some(head) = line.strip_suffix(": command not found").or_else(|| line.strip_suffix(": not found")) {
        return head.rsplit(": ").next().and_then(word);
    }
    if let Some(rest) = line.strip_suffix(": No such file or directory")
        && let Some((program, name)) = rest.rsplit_once(": ")
        && program.ends_with("env")
    {
        return word(name);
    }
    None
}

/// Whether a line says a name did not resolve.
fn resolves(lower: &str) -> bool {
    [
        "temporary failure in name resolution",
        "eai_again",
        "enotfound",
        "could not resolve host",
        "name or service not known",
        "failed to resolve",
        "nodename nor servname",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// The host (and port) a resolution failure names: curl's `Could not resolve
/// host: H`, node's `getaddrinfo EAI_AGAIN H`, urllib3's `host='H', port=P`.
fn host_of(line: &str) -> Option<String> {
    let clean = |h: &str| {
        let h: String = h.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-')).collect();
        (h.contains('.') && h.len() <= MAX_WORD).then_some(h)
    };
    if let Some(i) = line.find("host='") {
        let host = clean(&line[i + 6..])?;
        let port = line
            .find("port=")
            .and_then(|j| line[j + 5..].split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(443);
        return Some(format!("{host}:{port}"));
    }
    for marker in ["Could not resolve host: ", "EAI_AGAIN ", "ENOTFOUND "] {
        if let Some(i) = line.find(marker) {
            return clean(&line[i + marker.len()..]).map(|h| format!("{h}:443"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants() -> (Vec<(PathBuf, bool)>, Vec<PathBuf>) {
        (vec![(PathBuf::from("/usr"), false), (PathBuf::from("/ws"), true)], vec![PathBuf::from("/bin")])
    }

    #[test]
    fn paths_outside_the_grants_programs_and_names_are_hinted_once() {
        let (dirs, links) = grants();
        let g = Grants { tool: "test", dirs: &dirs, links: &links, net: false, protected: &[] };
        let stderr = "cat: /opt/tc/bin/x: No such file or directory\n\
                      cat: /opt/tc/bin/x: No such file or directory\n\
                      cat: /ws/missing: No such file or directory\n\
                      touch: cannot touch '/usr/lib/y': Read-only file system\n\
                      sh: 1: node: not found\n\
                      /usr/bin/env: 'python9': No such file or directory\n\
                      npm error request to https://registry.npmjs.org/x failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org\n\
                      urllib3 HTTPSConnectionPool(host='pypi.org', port=443): Temporary failure in name resolution\n";
        let h = from_stderr(&g, stderr);
        assert_eq!(h.len(), MAX_HINTS, "{h:#?}");
        assert!(h[0].starts_with("the program was refused /opt/tc/bin/x, outside every grant of test"), "{h:#?}");
        assert!(h[0].contains("fs.read"), "{h:#?}");
        assert!(h[1].starts_with("the program could not change /usr/lib/y") && h[1].contains("fs.write"), "{h:#?}");
        assert!(h[2].starts_with("node is not on the PATH of test"), "{h:#?}");
        assert!(h[3].starts_with("python9 is not on the PATH"), "{h:#?}");
        assert!(h[4].contains("add \"registry.npmjs.org:443\" to its net.connect"), "{h:#?}");
        // A path inside a grant that is missing is the program's business.
        assert!(!h.iter().any(|x| x.contains("/ws/missing")), "{h:#?}");
    }

    #[test]
    fn a_granted_name_on_a_private_address_is_hinted_with_allow_private() {
        let reason = "index.crates.io resolves to 203.0.113.80, a reserved address; name the address in net.connect \
                      (\"203.0.113.80:443\") or set net.allow_private = true for fetch";
        let journal = serde_json::json!({"attempts": [
            {"host": "index.crates.io", "port": 443, "allowed": false, "reason": reason},
        ]});
        let h = from_network("fetch", &journal);
        assert_eq!(h.len(), 1, "{h:#?}");
        assert!(h[0].contains("net.allow_private = true") && !h[0].contains("to its net.connect if"), "{h:#?}");
    }

    #[test]
    fn a_tool_with_a_grant_gets_the_proxys_refusals_not_resolution_hints() {
        let (dirs, links) = grants();
        let g = Grants { tool: "t", dirs: &dirs, links: &links, net: true, protected: &[] };
        assert!(from_stderr(&g, "getaddrinfo EAI_AGAIN example.org\n").is_empty());
        let journal = serde_json::json!({"attempts": [
            {"host": "registry.npmjs.org", "port": 443, "allowed": false},
            {"host": "registry.npmjs.org", "port": 443, "allowed": false},
            {"host": "ok.example", "port": 443, "allowed": true},
        ]});
        assert_eq!(
            from_network("t", &journal),
            vec![
                "t was refused registry.npmjs.org:443: add \"registry.npmjs.org:443\" to its net.connect if it needs it"
            ]
        );
        let g = Grants { tool: "t", dirs: &dirs, links: &links, net: false, protected: &[] };
        // What the tool prints cannot make a hint suggest a credential.
        assert!(from_stderr(&g, "cat: /home/u/.ssh/id_ed25519: Permission denied\n").is_empty());
        assert_eq!(
            from_stderr(
                &g,
                "urllib3 HTTPSConnectionPool(host='pypi.org', port=443): Max retries (Temporary failure in name resolution)\n"
            ),
            vec![
                "t has no network grant, so no name resolves inside the call: add \"pypi.org:443\" to its net.connect (every connection then goes through warden's egress proxy)"
            ]
        );
    }
}
