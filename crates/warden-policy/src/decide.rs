//! A call's tier: the tool's rules and base tier, then each managed floor's.

use crate::{Rule, Runner, Tier, ToolSpec};

impl ToolSpec {
    /// The tier for a call with `args`, and the rule that set it (if any).
    ///
    /// Matching rules decide and the strictest of them wins
    /// (`deny` > `confirm` > `ask` > `auto`); with no matching rule, the base tier
    /// stands. A tool whose base tier is `deny` stays denied: no rule relaxes it.
    ///
    /// A managed floor's decision (its base tier and rules, decided the same
    /// way) is taken instead where it is stricter.
    pub fn decide(&self, args: &serde_json::Value) -> (Tier, Option<&Rule>) {
        let process = matches!(self.runner, Runner::Process(_));
        let (mut tier, mut rule) = if self.tier == Tier::Deny {
            // A floor's deny names the floor (it set the tier); the policy's own names nothing.
            (Tier::Deny, self.floors.iter().map(|f| f.decide(args, process)).find(|r| r.tier == Tier::Deny))
        } else {
            match strictest(&self.rules, args, process) {
                Some(rule) => (rule.tier, Some(rule)),
                None => (self.tier, None),
            }
        };
        for floor in &self.floors {
            let decided = floor.decide(args, process);
            if decided.tier > tier {
                (tier, rule) = (decided.tier, Some(decided));
            }
        }
        (tier, rule)
    }
}

/// The strictest of `rules` that matches `args` (an `auto` rule of a process
/// tool matches only simple commands).
pub(crate) fn strictest<'a>(rules: &'a [Rule], args: &serde_json::Value, process: bool) -> Option<&'a Rule> {
    let mut best: Option<&Rule> = None;
    for rule in rules {
        let matches = rule.when.iter().all(|(sel, re)| {
            sel.select(args).is_some_and(|v| {
                // An auto rule on a process tool applies only to simple commands.
                re.is_match(v) && !(process && rule.tier == Tier::Auto && !is_simple_command(v))
            })
        });
        if matches && best.is_none_or(|b| rule.tier > b.tier) {
            best = Some(rule);
        }
    }
    best
}

/// Whether `s` is a simple command: no `;` `&` `|` backtick `$(` `<` `>` newline or
/// parenthesis, so that an `auto` rule written for `ls` cannot carry `ls; curl evil`.
pub fn is_simple_command(s: &str) -> bool {
    !s.contains("$(")
        && !s.chars().any(|c| matches!(c, ';' | '&' | '|' | '`' | '<' | '>' | '\n' | '\r' | '(' | ')' | '\0'))
}
