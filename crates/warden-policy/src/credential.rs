//! `[credentials.NAME]`: secrets a tool may use but never see. warden loads
//! the real value (from its own environment, an owner-only file, a command or
//! the keyring); the tool sees a placeholder of the same shape in `variable`;
//! warden's egress proxy puts the real value in place of the placeholder only
//! in requests toward a `bind` (host, port, methods, paths), where `inject`
//! says. docs/credentials.md has the whole contract.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::compile::Checker;
use crate::{NetGrant, Runner, ToolSpec};

/// The most credentials a policy may declare.
pub const MAX_CREDENTIALS: usize = 64;
/// The most binds one credential may have.
pub const MAX_BINDS: usize = 32;

/// `[credentials.NAME]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCredential {
    pub from: Spanned<RawSource>,
    pub variable: Spanned<String>,
    #[serde(default)]
    pub bind: Vec<Spanned<RawBind>>,
    pub description: Option<String>,
}

/// `from = { env = … } | { file = … } | { command = [...] } | { keyring = {…} }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub env: Option<String>,
    pub file: Option<String>,
    pub command: Option<Vec<String>>,
    pub keyring: Option<RawKeyring>,
}

/// `keyring = { service = …, account = … }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeyring {
    pub service: String,
    pub account: String,
}

/// `[[credentials.NAME.bind]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBind {
    pub host: Spanned<String>,
    pub port: Option<u16>,
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub inject: Spanned<toml::Value>,
    pub always: Option<bool>,
    pub user: Option<String>,
    pub body: Option<Spanned<bool>>,
}

/// Where warden reads a credential's real value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A variable of warden's own environment.
    Env(String),
    /// A regular file owned by warden's user and readable by it alone.
    File(PathBuf),
    /// A program run once, without a shell; its standard output is the value.
    /// The keyring source is `secret-tool lookup service S account A`.
    Command(Vec<String>),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Env(v) => write!(f, "warden's environment variable {v}"),
            Source::File(p) => write!(f, "the file {}", p.display()),
            Source::Command(argv) => write!(f, "the command {argv:?}"),
        }
    }
}

/// Where in a request the placeholder is replaced by the real value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inject {
    /// `Authorization: Bearer <placeholder>`.
    Bearer,
    /// `Authorization: Basic base64(user:password)`, the placeholder in either part.
    Basic,
    /// Any occurrence in the value of this header (lower case).
    Header(String),
    /// The value of this query parameter.
    Query(String),
}

impl std::fmt::Display for Inject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inject::Bearer => write!(f, "Authorization: Bearer"),
            Inject::Basic => write!(f, "Authorization: Basic"),
            Inject::Header(h) => write!(f, "header {h}"),
            Inject::Query(q) => write!(f, "query parameter {q}"),
        }
    }
}

/// One place a credential may be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// A DNS name, lower case (never `*`, a wildcard or an address).
    pub host: String,
    pub port: u16,
    /// Upper-case methods; empty: any.
    pub methods: Vec<String>,
    /// Path prefixes; empty: any.
    pub paths: Vec<String>,
    pub inject: Inject,
    /// Add the header when the request carries none (bearer, basic, header).
    pub always: bool,
    /// The user of an added `Basic` header.
    pub user: String,
    /// Also replace the placeholder in request bodies.
    pub body: bool,
}

impl Bind {
    /// Whether this bind covers a request for `path` (origin-form, query
    /// excluded) with `method` to `host:port`.
    pub fn covers(&self, host: &str, port: u16, method: &str, path: &str) -> bool {
        self.host.eq_ignore_ascii_case(host.trim_end_matches('.'))
            && self.port == port
            && (self.methods.is_empty() || self.methods.iter().any(|m| m.eq_ignore_ascii_case(method)))
            && (self.paths.is_empty() || self.paths.iter().any(|p| path.starts_with(p.as_str())))
    }
}

/// `[credentials.NAME]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub name: String,
    pub source: Source,
    /// The variable in which a holding tool sees the placeholder.
    pub variable: String,
    pub binds: Vec<Bind>,
    pub description: Option<String>,
    /// `file:line:column` of its table.
    pub location: String,
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Compiles `[credentials.*]`.
pub(crate) fn compile_credentials(
    c: &mut Checker<'_>,
    raw: &BTreeMap<Spanned<String>, Spanned<RawCredential>>,
    ctx: &crate::Context,
) -> BTreeMap<String, Credential> {
    let mut out = BTreeMap::new();
    if raw.len() > MAX_CREDENTIALS {
        c.problem(0..0, format!("too many credentials: {} (at most {MAX_CREDENTIALS})", raw.len()));
    }
    for (name, cred) in raw {
        let n = name.get_ref();
        if !valid_name(n) {
            c.problem(name.span(), format!("credential {n:?}: a name is lower-case letters, digits, - and _"));
            continue;
        }
        if let Some(compiled) = compile_one(c, n, cred, ctx) {
            out.insert(n.clone(), compiled);
        }
    }
    out
}

fn compile_one(
    c: &mut Checker<'_>,
    n: &str,
    cred: &Spanned<RawCredential>,
    ctx: &crate::Context,
) -> Option<Credential> {
    let raw = cred.get_ref();
    let source = compile_source(c, n, &raw.from, ctx)?;
    let var = raw.variable.get_ref();
    if !crate::compile::valid_env_name(var) {
        c.problem(raw.variable.span(), format!("credentials.{n}.variable {var:?} is not a variable name"));
    }
    if raw.bind.is_empty() {
        c.problem(
            cred.span(),
            format!("credentials.{n} has no [[credentials.{n}.bind]]: name the host it may be sent to"),
        );
    }
    if raw.bind.len() > MAX_BINDS {
        c.problem(cred.span(), format!("credentials.{n}: {} binds (at most {MAX_BINDS})", raw.bind.len()));
    }
    let binds: Vec<Bind> = raw.bind.iter().filter_map(|b| compile_bind(c, n, b)).collect();
    Some(Credential {
        name: n.to_string(),
        source,
        variable: var.clone(),
        binds,
        description: raw.description.clone(),
        location: c.location(cred.span()),
    })
}

fn compile_source(c: &mut Checker<'_>, n: &str, from: &Spanned<RawSource>, ctx: &crate::Context) -> Option<Source> {
    let f = from.get_ref();
    let given = [f.env.is_some(), f.file.is_some(), f.command.is_some(), f.keyring.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        c.problem(from.span(), format!("credentials.{n}.from: give exactly one of env, file, command or keyring"));
        return None;
    }
    let bad = |c: &mut Checker<'_>, why: String| {
        c.problem(from.span(), format!("credentials.{n}.from: {why}"));
        None
    };
    if let Some(v) = &f.env {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return bad(c, format!("env {v:?} is not a variable name"));
        }
        return Some(Source::Env(v.clone()));
    }
    if let Some(p) = &f.file {
        let p = match crate::compile::expand_text(p, ctx, false) {
            Ok(p) => PathBuf::from(p),
            Err(e) => return bad(c, format!("file {p:?}: {e}")),
        };
        if !p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return bad(c, format!("file {:?} must be an absolute path without `..`", p.display()));
        }
        return Some(Source::File(p));
    }
    if let Some(argv) = &f.command {
        if argv.is_empty() || argv[0].is_empty() || argv.len() > 64 {
            return bad(c, "command is a program and its arguments (1 to 64 strings), run without a shell".into());
        }
        // `./tok.sh` would run whatever sits in warden's working directory (often the workspace, which tools write).
        if argv[0].contains('/') && !argv[0].starts_with('/') {
            return bad(
                c,
                format!("command {:?}: name the program by absolute path, or by a bare name found in PATH", argv[0]),
            );
        }
        return Some(Source::Command(argv.clone()));
    }
    let k = f.keyring.as_ref()?;
    Some(Source::Command(vec![
        "secret-tool".into(),
        "lookup".into(),
        "service".into(),
        k.service.clone(),
        "account".into(),
        k.account.clone(),
    ]))
}

fn compile_bind(c: &mut Checker<'_>, n: &str, b: &Spanned<RawBind>) -> Option<Bind> {
    let raw = b.get_ref();
    let at = b.span();
    let host = raw.host.get_ref().trim_end_matches('.').to_ascii_lowercase();
    let port = raw.port.unwrap_or(443);
    let name_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if host.parse::<std::net::IpAddr>().is_ok()
        || host.contains('*')
        || host.len() > 253
        || !host.split('.').all(name_ok)
        || host.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        c.problem(
            raw.host.span(),
            format!(
                "credentials.{n}.bind.host {:?}: a credential binds to one DNS name (no wildcard, no address), \
                 the name its TLS certificate is checked against",
                raw.host.get_ref()
            ),
        );
        return None;
    }
    if port == 0 {
        c.problem(at.clone(), format!("credentials.{n}.bind.port 0 is not a destination"));
        return None;
    }
    let methods: Vec<String> = raw.methods.clone().unwrap_or_default().iter().map(|m| m.to_ascii_uppercase()).collect();
    if methods.iter().any(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase())) {
        c.problem(at.clone(), format!("credentials.{n}.bind.methods: HTTP method names, such as \"GET\""));
    }
    let paths = raw.paths.clone().unwrap_or_default();
    if let Some(p) =
        paths.iter().find(|p| !p.starts_with('/') || p.contains("..") || p.contains('%') || p.contains('?'))
    {
        c.problem(
            at.clone(),
            format!("credentials.{n}.bind.paths {p:?}: a path prefix starts with / and holds no `..`, `%` or `?`"),
        );
    }
    let inject = compile_inject(c, n, &raw.inject)?;
    let always = raw.always.unwrap_or(false);
    if always && matches!(inject, Inject::Query(_)) {
        c.problem(at.clone(), format!("credentials.{n}.bind.always: warden adds headers, not query parameters"));
    }
    if raw.user.is_some() && !(inject == Inject::Basic && always) {
        c.problem(at.clone(), format!("credentials.{n}.bind.user: only with inject = \"basic\" and always = true"));
    }
    let user = raw.user.clone().unwrap_or_else(|| "x-access-token".into());
    if user.contains([':', '\r', '\n', '\0']) {
        c.problem(at.clone(), format!("credentials.{n}.bind.user {user:?} may not hold `:` or control characters"));
    }
    Some(Bind {
        host,
        port,
        methods,
        paths,
        inject,
        always,
        user,
        body: raw.body.as_ref().is_some_and(|b| *b.get_ref()),
    })
}

fn compile_inject(c: &mut Checker<'_>, n: &str, v: &Spanned<toml::Value>) -> Option<Inject> {
    let header_ok =
        |h: &str| !h.is_empty() && h.len() <= 64 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let got = match v.get_ref() {
        toml::Value::String(s) if s == "bearer" => Some(Inject::Bearer),
        toml::Value::String(s) if s == "basic" => Some(Inject::Basic),
        toml::Value::Table(t) if t.len() == 1 => match t.iter().next() {
            Some((k, toml::Value::String(h))) if k == "header" && header_ok(h) => {
                let lower = h.to_ascii_lowercase();
                if matches!(lower.as_str(), "host" | "content-length" | "transfer-encoding" | "connection") {
                    None
                } else {
                    Some(Inject::Header(lower))
                }
            }
            Some((k, toml::Value::String(q))) if k == "query" && !q.is_empty() && q.len() <= 64 => {
                Some(Inject::Query(q.clone()))
            }
            _ => None,
        },
        _ => None,
    };
    if got.is_none() {
        c.problem(
            v.span(),
            format!(
                "credentials.{n}.bind.inject: write \"bearer\", \"basic\", {{ header = \"X-Api-Key\" }} or \
                 {{ query = \"access_token\" }} (Host and framing headers cannot carry a credential)"
            ),
        );
    }
    got
}

/// Checks one tool's `credentials = [...]` and returns the credentials it holds.
pub(crate) fn held(
    c: &mut Checker<'_>,
    creds: &BTreeMap<String, Credential>,
    subject: &str,
    names: &[Spanned<String>],
    spec: &ToolSpec,
    span: Range<usize>,
) -> Vec<Credential> {
    let mut out: Vec<Credential> = Vec::new();
    if names.is_empty() {
        return out;
    }
    let process = matches!(spec.runner, Runner::Process(_) | Runner::Server(_));
    if !process || subject.contains(crate::SERVER_TOOL_SEPARATOR) {
        c.problem(
            span,
            format!(
                "{subject}: credentials reach process tools and [servers.*] only (through the egress proxy); \
                 a server's tools hold what [servers.NAME] credentials names"
            ),
        );
        return out;
    }
    for name in names {
        let n = name.get_ref();
        let Some(cred) = creds.get(n) else {
            let known: Vec<&str> = creds.keys().map(String::as_str).collect();
            c.problem(
                name.span(),
                format!(
                    "{subject}: credentials names {n:?}, which no [credentials.{n}] declares{}",
                    if known.is_empty() { String::new() } else { format!(" (declared: {})", known.join(", ")) }
                ),
            );
            continue;
        };
        if out.iter().any(|o| o.name == *n) {
            continue;
        }
        let g = &spec.grants;
        if g.env_pass.contains(&cred.variable) || g.env_set.contains_key(&cred.variable) {
            c.problem(
                name.span(),
                format!(
                    "{subject}: credential {n} puts its placeholder in {v}, which env.pass or env.set also names; \
                     remove {v} from env (the real value never reaches the tool)",
                    v = cred.variable
                ),
            );
        }
        if let Some(other) = out.iter().find(|o| o.variable == cred.variable) {
            c.problem(
                name.span(),
                format!("{subject}: credentials {} and {n} both use the variable {}", other.name, cred.variable),
            );
        }
        if !cred.binds.iter().any(|b| reaches(&g.net, b)) {
            c.problem(
                name.span(),
                format!(
                    "{subject}: credential {n} binds to {}, which its net.connect does not grant; add \"{}:{}\" to \
                     net.connect or drop the credential",
                    cred.binds.iter().map(|b| format!("{}:{}", b.host, b.port)).collect::<Vec<_>>().join(", "),
                    cred.binds.first().map_or("HOST", |b| b.host.as_str()),
                    cred.binds.first().map_or(443, |b| b.port),
                ),
            );
        }
        out.push(cred.clone());
    }
    out
}

/// Whether `grants` reach `bind`'s host and port.
pub fn reaches(grants: &[NetGrant], bind: &Bind) -> bool {
    grants.iter().any(|g| {
        g.port == bind.port
            && (g.host == "*"
                || g.host == bind.host
                || g.host.strip_prefix("*.").is_some_and(|s| bind.host.ends_with(&format!(".{s}"))))
    })
}

/// No tool or server may reach a credential's source itself: its variable
/// passed with `env.pass`, or its file inside a grant.
pub(crate) fn check_sources(
    c: &mut Checker<'_>,
    raw: &BTreeMap<Spanned<String>, Spanned<RawCredential>>,
    creds: &BTreeMap<String, Credential>,
    holders: Vec<(String, &crate::Grants)>,
) {
    for (name, spanned) in raw {
        let Some(cred) = creds.get(name.get_ref()) else { continue };
        let n = &cred.name;
        for (who, g) in &holders {
            let reached = match &cred.source {
                Source::Env(v) if g.env_pass.contains(v) => Some(format!("passes {v} (env.pass)")),
                Source::File(f) => g.paths.iter().find_map(|p| match &p.path {
                    crate::GrantPath::Fixed(dir) if f.starts_with(dir) => {
                        Some(format!("may read {} (its grant {})", f.display(), dir.display()))
                    }
                    _ => None,
                }),
                _ => None,
            };
            if let Some(how) = reached {
                c.problem(
                    spanned.get_ref().from.span(),
                    format!(
                        "credentials.{n}.from: {who} {how}, so it would read the real value itself; keep the source \
                         out of every tool's reach"
                    ),
                );
            }
        }
    }
}
