//! What one record holds ([`Record`], [`Decision`]) and how it is encoded as a
//! chained line, shrunk below [`MAX_RECORD_BYTES`] when it must be.

use super::*;

/// What was decided for a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// It ran (or was cleared to run).
    Allowed,
    /// The policy denied it.
    Denied,
    /// It needed approval and nobody could answer.
    ApprovalRequired,
    /// Someone said no.
    Rejected,
    /// It failed before a decision (unknown tool, invalid arguments).
    #[default]
    None,
}

/// One call's record, before it is chained.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Record {
    /// RFC 3339 UTC time the call started.
    pub ts: String,
    /// The call's id.
    pub call_id: String,
    /// The session (one CLI process, or one MCP connection).
    pub session: String,
    /// The requested tool name.
    pub tool: String,
    /// sha256 of the arguments' JSON.
    pub args_sha256: String,
    /// The arguments, secrets redacted and long values cut.
    pub args: Value,
    /// The tier the decision came to.
    pub tier: Option<Tier>,
    /// The rule that set the tier, `file:line:column`.
    pub rule: Option<String>,
    /// What was decided.
    pub decision: Decision,
    /// Who approved it.
    pub approved_by: Option<ApprovedBy>,
    /// `success`, `error`, `rejected` or `cancelled`; `running` in the start
    /// record of a background job (its end record has the same call id).
    pub status: &'static str,
    /// The error code, if any.
    pub error_code: Option<&'static str>,
    /// Wall time of the whole call.
    pub duration_ms: f64,
    /// What the tool used.
    pub usage: Option<Usage>,
    /// The sandbox it ran under.
    pub sandbox: Option<SandboxReport>,
    /// What it asked of the network, as warden's egress proxy saw it: counts,
    /// bytes, and each attempt (host, port, address, allowed or refused and
    /// why, bytes each way, duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Value>,
    /// How the program ended, for a call that ran one (process tools and
    /// command components): `{"exit_code": N}` or `{"signal": "SIGKILL"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<Value>,
    /// The `--profile` the call was made under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// What the result cache did: `{"hit": true, "call_id": first call, "age_ms"}`,
    /// `{"hit": false}`, or `{"hit": false, "bypassed": why}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<Value>,
    /// What a content result (`warden:plugin@0.2.0`) held, as returned to the
    /// caller: each block's type, MIME type and size in bytes, and the size of
    /// its structured content; never the bytes themselves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// A component tool's provenance: `{"plugin", "source": "file:/abs" |
    /// "builtin:NAME", "sha256", "signer": "SHA256:…" | null}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<Value>,
    /// Who answered an `ask` or `confirm` call, and where: `{"id": "a-…" (an
    /// inbox answer) | "l-…" (a lasting approval), "who": "name (uid N)",
    /// "via": "terminal /dev/pts/3" | "console 127.0.0.1:PORT"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
}

#[derive(Serialize)]
struct Chained<'a> {
    #[serde(flatten)]
    record: &'a Record,
    seq: u64,
    prev: String,
}

pub(super) fn encode(record: &Record, seq: u64, prev: &str) -> std::io::Result<(Vec<u8>, String)> {
    let mut line = serde_json::to_vec(&Chained { record, seq, prev: prev.to_string() })?;
    if line.len() >= MAX_RECORD_BYTES {
        line = shrink_record(record, seq, prev)?;
    }
    let hash = sha256_hex(&line);
    line.push(b'\n');
    Ok((line, hash))
}

/// `record` cut below [`MAX_RECORD_BYTES`]: its largest fields (other than `seq`
/// and `prev`) are shrunk in turn, and `"shrunk": true` says so.
fn shrink_record(record: &Record, seq: u64, prev: &str) -> std::io::Result<Vec<u8>> {
    let Value::Object(mut doc) = serde_json::to_value(Chained { record, seq, prev: prev.to_string() })? else {
        return Err(std::io::Error::other("an audit record is not a JSON object"));
    };
    doc.insert("shrunk".into(), Value::Bool(true));
    let limit = MAX_RECORD_BYTES - 1;
    loop {
        let size = serde_json::to_vec(&doc)?.len();
        if size <= limit {
            return Ok(serde_json::to_vec(&doc)?);
        }
        let field_size = |v: &Value| serde_json::to_vec(v).map_or(0, |b| b.len());
        let largest = doc
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "seq" | "prev" | "shrunk"))
            .map(|(k, v)| (field_size(v), k.clone()))
            .max();
        match largest {
            Some((n, key)) if n > 256 => {
                let budget = n.saturating_sub(size - limit).max(n / 2).min(n - 64).max(64);
                if let Some(v) = doc.get_mut(&key) {
                    let cut = crate::shape::truncate(v.take(), budget).0;
                    // A value the shape cannot cut (a long number) goes whole.
                    *v = if field_size(&cut) < n { cut } else { Value::from(format!("…[{n} bytes cut]")) };
                }
            }
            _ => {
                return Err(std::io::Error::other(format!(
                    "the audit record is {size} bytes and cannot be cut to {MAX_RECORD_BYTES}"
                )));
            }
        }
    }
}
