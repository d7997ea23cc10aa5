//! The approve stage: a lasting approval, the client's channel or warden's
//! approver, and the inbox for calls whose channel cannot ask.

use super::{CallHooks, Executor, ToolCall, Trace};
use crate::approval::{self, ApprovedBy, Verdict};
use crate::audit::Decision;
use crate::error::{CallError, ErrorCode};
use crate::policy::{PluginSource, Tier};

impl Executor {
    /// The approve stage: an `ask` or `confirm` call's verdict from the client's
    /// user (`hooks.approve`) or warden's approver; `rule` is where its tier came from
    /// (the tool's own entry when `None`).
    pub(super) fn approve(
        &self,
        spec: &crate::policy::ToolSpec,
        (tier, rule): (Tier, Option<&str>),
        call: &ToolCall,
        (args_sha256, definition): (&str, &dyn Fn() -> String),
        trace: &mut Trace,
        hooks: &CallHooks<'_>,
    ) -> Result<(), CallError> {
        let name = spec.name.as_str();
        trace.approved_by = Some(ApprovedBy::Auto);
        if !matches!(tier, Tier::Ask | Tier::Confirm) {
            return Ok(());
        }
        let builtin_fs = spec
            .plugin()
            .and_then(|p| self.policy.plugins.get(p))
            .is_some_and(|p| p.source == PluginSource::Builtin("fs".into()));
        let preview = if builtin_fs {
            approval::preview::for_fs_tool(name, &call.args, &self.policy.workspace)
        } else {
            String::new()
        };
        let location = rule.unwrap_or(spec.location.as_str());
        let request = approval::Request {
            tool: name,
            tier,
            args: &call.args,
            args_sha256,
            preview,
            location,
            session: &self.session,
        };
        let definition = definition();
        let lasting = if self.approver.honours_lasting() {
            self.lasting.find(&request, &definition, &self.policy.workspace)
        } else {
            None
        };
        let verdict = match lasting {
            Some(e) => Verdict::Answered(approval::Answered {
                approved: true,
                by: ApprovedBy::Lasting,
                id: e.id,
                who: e.who,
                via: e.via,
                reason: String::new(),
            }),
            None => match hooks.approve {
                Some(approve) => approve(&request),
                None => self.approver.approve(&request),
            },
        };
        let verdict = match verdict {
            Verdict::CannotAsk(why) => self.wait_in_inbox(spec, &request, why, &definition, hooks),
            v => v,
        };
        match verdict {
            Verdict::Approved(by) => trace.approved_by = Some(by),
            Verdict::Answered(a) => {
                trace.approved_by = Some(a.by);
                trace.approval = Some(a.to_json());
                if !a.approved {
                    trace.decision = Decision::Rejected;
                    return Err(CallError::new(ErrorCode::Rejected, a.reason));
                }
            }
            Verdict::Rejected(why) => {
                trace.approved_by =
                    Some(if hooks.approve.is_some() { ApprovedBy::Elicitation } else { ApprovedBy::Prompt });
                trace.decision = Decision::Rejected;
                return Err(CallError::new(ErrorCode::Rejected, why));
            }
            Verdict::Required(why) | Verdict::CannotAsk(why) => {
                trace.approved_by = None;
                trace.decision = Decision::ApprovalRequired;
                return Err(CallError::new(ErrorCode::ApprovalRequired, why));
            }
        }
        Ok(())
    }

    /// A call whose channel cannot ask: it waits in warden's inbox when one is
    /// offered ([`Executor::offer_inbox`]) and its tool may (`inbox`), else it
    /// is refused with `why`.
    fn wait_in_inbox(
        &self,
        spec: &crate::policy::ToolSpec,
        request: &approval::Request<'_>,
        why: String,
        definition: &str,
        hooks: &CallHooks<'_>,
    ) -> Verdict {
        let Some(settings) = &self.inbox else {
            return Verdict::Required(why);
        };
        if !self.policy.may_wait(spec) {
            return Verdict::Required(format!(
                "{why} (the policy sets inbox = false for {}, so it does not wait in warden's approval inbox)",
                spec.name
            ));
        }
        let file = self.policy.approvals_path();
        let ctx = approval::inbox::Context {
            file: file.as_deref(),
            workspace: &self.policy.workspace,
            definition,
            client: hooks.client.unwrap_or("warden call"),
            progress: hooks.progress.as_ref(),
        };
        approval::inbox::ask(settings, request, &why, &hooks.cancel, &ctx)
    }
}
