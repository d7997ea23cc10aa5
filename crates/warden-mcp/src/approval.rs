//! Approval over MCP: the question put to the client's user, and the two ways
//! it travels: an `elicitation/create` request in the middle of the call for a
//! legacy session that declared elicitation ([`Live`]), or, for a 2026-07-28
//! client, an `input_required` result with an HMAC-sealed `requestState` bound
//! to the tool and the arguments' sha256, accepted once before it expires
//! ([`Stateless`]). Every failure is a [`Verdict`] that stops the call: nothing
//! runs without an answer. docs/mcp.md, "Approval".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, RequestStateCodec, SealOptions,
};
use rmcp::service::{Peer, ServiceError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use warden_core::approval::{self, ApprovedBy, GRANT_TTL, Request, Verdict};
use warden_policy::Tier;

/// The key of warden's question in `inputRequests` / `inputResponses`.
pub const INPUT_KEY: &str = "warden-approval";
/// The most approval nonces remembered (each for the state's lifetime).
const MAX_NONCES: usize = 65_536;
/// Longest preview (diff) shown in the question.
const MAX_PREVIEW_CHARS: usize = 4096;

/// What every approval of one server shares: the sealing key, the nonces
/// already used, and how long an answer may take.
pub struct Sealer {
    codec: RequestStateCodec,
    used: Mutex<HashMap<String, Instant>>,
    /// How long a client has to answer (legacy) or to come back (2026-07-28).
    pub timeout: Duration,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// What a sealed state carries (readable by the client: nothing secret).
#[derive(Debug, Serialize, Deserialize)]
struct Sealed {
    v: u32,
    tool: String,
    nonce: String,
}

impl Sealer {
    /// A sealer with `key` (at least 32 bytes) and `timeout`.
    pub fn new(key: Vec<u8>, timeout: Duration) -> Result<Sealer, String> {
        let codec = RequestStateCodec::try_new(key).map_err(|e| format!("the requestState key is unusable: {e}"))?;
        Ok(Sealer { codec, used: Mutex::default(), timeout })
    }

    fn associated_data(req: &Request<'_>) -> Vec<u8> {
        format!("warden-approval\0{}\0{}", req.tool, req.args_sha256).into_bytes()
    }

    fn seal(&self, req: &Request<'_>) -> Result<String, String> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| format!("no randomness: {e}"))?;
        let payload = Sealed { v: 1, tool: req.tool.to_string(), nonce: hex::encode(nonce) };
        let ad = Self::associated_data(req);
        self.codec
            .seal_json_with(&payload, &SealOptions::new().associated_data(&ad).ttl(self.timeout))
            .map_err(|e| format!("cannot seal the approval state: {e}"))
    }

    /// Opens `state` for `req` and spends its nonce. One error for every failure,
    /// as a forger learns nothing from the difference.
    fn open_once(&self, state: &str, req: &Request<'_>) -> Result<(), String> {
        let refused = || {
            format!(
                "{}: the approval state (requestState) was refused: it is forged, altered, bound to other \
                 arguments, expired (older than {}s) or already used; nothing ran. Call the tool again to be asked anew",
                req.tool,
                self.timeout.as_secs()
            )
        };
        let sealed: Sealed = self.codec.open_json_with(state, &Self::associated_data(req)).map_err(|_| refused())?;
        if sealed.v != 1 || sealed.tool != req.tool {
            return Err(refused());
        }
        let now = Instant::now();
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.retain(|_, until| *until > now);
        if used.contains_key(&sealed.nonce) {
            return Err(refused());
        }
        if used.len() >= MAX_NONCES {
            return Err(format!(
                "{}: too many approvals in flight ({MAX_NONCES} within {}s); nothing ran, try again later",
                req.tool,
                self.timeout.as_secs()
            ));
        }
        // Kept a little past the state's own expiry, so it cannot outlive its nonce.
        used.insert(sealed.nonce, now + self.timeout + Duration::from_secs(5));
        Ok(())
    }
}

/// Standing "always for this session" answers of one MCP session.
#[derive(Debug, Default)]
pub struct SessionGrants(Mutex<HashMap<String, Instant>>);

impl SessionGrants {
    /// Whether `req` is covered (only `ask` tools ever are).
    pub fn covers(&self, req: &Request<'_>) -> bool {
        let now = Instant::now();
        let mut g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        g.retain(|_, until| *until > now);
        req.tier == Tier::Ask && g.contains_key(req.tool)
    }

    fn grant(&self, tool: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(tool.to_string(), Instant::now() + GRANT_TTL);
    }
}

/// The elicitation that asks about `req`; `always` offers the session-wide choice.
pub fn question(req: &Request<'_>, always: bool) -> ElicitRequestParams {
    let mut message = format!(
        "warden: the agent wants to run `{}` (tier {}, set at {}).\n\nArguments:\n{}\n",
        req.tool,
        req.tier,
        req.location,
        approval::arguments_text(req.args)
    );
    if !req.preview.is_empty() {
        let preview = warden_runtime::shape::sanitize_str(&req.preview);
        let count = preview.chars().count();
        let preview: String = if count > MAX_PREVIEW_CHARS {
            let head: String = preview.chars().take(MAX_PREVIEW_CHARS).collect();
            format!("{head}\n[… {} more characters of the preview NOT SHOWN …]", count - MAX_PREVIEW_CHARS)
        } else {
            preview
        };
        message.push_str(&format!("\n{preview}\n"));
    }
    message.push_str(if req.tier == Tier::Confirm {
        "\nAccept to run this call with exactly these arguments; decline to refuse it."
    } else {
        "\nAccept to run this call; decline to refuse it."
    });
    let schema = if always && req.tier == Tier::Ask {
        json!({"type": "object", "properties": {"always": {
            "type": "boolean",
            "title": "Allow every call of this tool for the rest of this session",
            "default": false
        }}})
    } else {
        json!({"type": "object", "properties": {}})
    };
    let requested_schema: ElicitationSchema = serde_json::from_value(schema).unwrap_or_else(|_| {
        // The literal schemas above always parse; an empty object is the safe fallback.
        ElicitationSchema::builder().build_unchecked()
    });
    ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema }
}

/// Turns a client's answer into a verdict (and a grant for "always").
fn verdict(req: &Request<'_>, answer: &ElicitResult, grants: Option<&SessionGrants>) -> Verdict {
    match answer.action {
        ElicitationAction::Accept => {
            let always = answer.content.as_ref().and_then(|c| c.get("always")).and_then(|v| v.as_bool());
            if always == Some(true)
                && req.tier == Tier::Ask
                && let Some(g) = grants
            {
                g.grant(req.tool);
            }
            Verdict::Approved(ApprovedBy::Elicitation)
        }
        ElicitationAction::Decline => Verdict::Rejected("declined by the user of the MCP client".into()),
        _ => Verdict::Required(format!(
            "{} needs approval and the user of the MCP client dismissed the question; nothing ran{}",
            req.tool,
            pre_approve_hint(req)
        )),
    }
}

/// How to pre-approve `req` in the policy.
pub fn pre_approve_hint(req: &Request<'_>) -> String {
    format!(". To pre-approve it, set tier = \"auto\" (or add an auto rule) at {}", req.location)
}

/// The verdict for a client that cannot be asked at all: the call waits in
/// warden's inbox where `serve` offers one and the tool may.
pub fn no_channel(req: &Request<'_>, why: &str) -> Verdict {
    match cannot_ask(req, why) {
        Verdict::Required(m) => Verdict::CannotAsk(m),
        v => v,
    }
}

/// The verdict for a client whose asking failed.
pub fn cannot_ask(req: &Request<'_>, why: &str) -> Verdict {
    Verdict::Required(format!(
        "{} needs approval (tier {}) and {why}; nothing ran{}",
        req.tool,
        req.tier,
        pre_approve_hint(req)
    ))
}

/// Approval for a legacy session: ask now, on the open connection.
pub struct Live {
    /// The runtime to wait on (the call runs on a blocking thread).
    pub handle: tokio::runtime::Handle,
    /// The client.
    pub peer: Peer<RoleServer>,
    /// Fires when the client cancels the call.
    pub cancelled: tokio_util::sync::CancellationToken,
    /// Shared settings.
    pub sealer: Arc<Sealer>,
    /// This session's standing answers.
    pub grants: Arc<SessionGrants>,
}

impl Live {
    /// Asks the client's user and waits (blocking this thread) for the answer.
    pub fn ask(&self, req: &Request<'_>) -> Verdict {
        if self.grants.covers(req) {
            return Verdict::Approved(ApprovedBy::Grant);
        }
        let params = question(req, true);
        let timeout = self.sealer.timeout;
        let answer = self.handle.block_on(async {
            tokio::select! {
                _ = self.cancelled.cancelled() => None,
                r = self.peer.create_elicitation_with_timeout(params, Some(timeout)) => Some(r),
            }
        });
        match answer {
            None => {
                Verdict::Required(format!("{}: the client cancelled the call while it was being approved", req.tool))
            }
            Some(Ok(answer)) => verdict(req, &answer, Some(&self.grants)),
            Some(Err(ServiceError::Timeout { .. })) => cannot_ask(
                req,
                &format!(
                    "the user of the MCP client did not answer within {}s (--approval-timeout)",
                    timeout.as_secs()
                ),
            ),
            Some(Err(e)) => cannot_ask(
                req,
                &format!(
                    "the MCP client could not ask its user ({})",
                    warden_runtime::shape::sanitize_str(&e.to_string())
                ),
            ),
        }
    }
}

/// Approval for a 2026-07-28 request: answer from the retry, or ask for input.
pub struct Stateless {
    /// The sealed state the client brought back, if this is a retry.
    pub state: Option<String>,
    /// The client's answers.
    pub responses: Option<InputResponses>,
    /// Shared settings.
    pub sealer: Arc<Sealer>,
    /// This session's standing answers, when the transport has sessions.
    pub grants: Option<Arc<SessionGrants>>,
    /// The result to send when the client must be asked first.
    pub input_required: Mutex<Option<InputRequiredResult>>,
}

impl Stateless {
    /// Decides from the client's answer, or records the question to send back.
    pub fn ask(&self, req: &Request<'_>) -> Verdict {
        if self.grants.as_ref().is_some_and(|g| g.covers(req)) {
            return Verdict::Approved(ApprovedBy::Grant);
        }
        let Some(state) = &self.state else {
            let sealed = match self.sealer.seal(req) {
                Ok(s) => s,
                Err(e) => return cannot_ask(req, &e),
            };
            let mut requests = InputRequests::new();
            requests.insert(
                INPUT_KEY.into(),
                InputRequest::Elicitation(ElicitRequest::new(question(req, self.grants.is_some()))),
            );
            *self.input_required.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(InputRequiredResult::new(Some(requests), Some(sealed)));
            return Verdict::Required(format!(
                "{}: waiting for the MCP client's user to approve (input_required)",
                req.tool
            ));
        };
        if let Err(why) = self.sealer.open_once(state, req) {
            return Verdict::Required(why);
        }
        let answer = self
            .responses
            .as_ref()
            .and_then(|r| r.get(INPUT_KEY))
            .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
        match answer {
            Some(answer) => verdict(req, &answer, self.grants.as_deref()),
            None => cannot_ask(req, &format!("the retry carried no answer under inputResponses.{INPUT_KEY}")),
        }
    }
}
