//! Per-agent profiles: `[profiles.NAME]`, chosen with `warden --profile NAME`.
//!
//! One policy serves several agents with different reach. A profile names the
//! tools its agent gets (`tools = ["read_file", "git_*", "srv__*"]` or `"*"`)
//! and may make some of them stricter (`[profiles.NAME.tiers]`, never looser).
//! Under a profile, every other tool is hidden from listings and refused with
//! `DENIED`, naming the profile and the key to change; a server none of whose
//! tools the profile can match is never started.

use std::collections::BTreeMap;

use crate::{Rule, SERVER_TOOL_SEPARATOR, Tier, ToolSpec};

/// `[profiles.NAME]`, checked.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// The tools it admits: exact names, or patterns where `*` stands for any run of characters.
    pub tools: Vec<String>,
    /// `[profiles.NAME.tiers]`: a stricter tier for some of its tools, with the key's `file:line:column`.
    pub tiers: BTreeMap<String, (Tier, String)>,
    /// `file:line:column` of its table.
    pub location: String,
    /// What it is for.
    pub description: Option<String>,
}

impl Profile {
    /// Whether the profile admits the tool `name`.
    pub fn admits(&self, name: &str) -> bool {
        self.tools.iter().any(|p| crate::glob::matches(p, name))
    }

    /// Whether some tool of server `server` (named `server__…`) could be admitted.
    pub fn may_admit_server(&self, server: &str) -> bool {
        let prefix = format!("{server}{SERVER_TOOL_SEPARATOR}");
        self.tools.iter().any(|p| {
            let fixed = p.split('*').next().unwrap_or_default();
            // The pattern's fixed start and the server's prefix must agree as far as both go.
            let n = fixed.len().min(prefix.len());
            fixed.as_bytes()[..n] == prefix.as_bytes()[..n] && (p.contains('*') || fixed.len() > prefix.len())
        })
    }

    /// Applies the profile to one tool's policy entry: a tool it does not admit
    /// becomes `deny` and says why; a tier override becomes a rule that always
    /// matches (the strictest matching rule wins, so it never relaxes a tier).
    pub fn apply(&self, spec: &mut ToolSpec) {
        if !self.admits(&spec.name) {
            spec.tier = Tier::Deny;
            spec.hidden_by = Some(format!(
                "{}: not in profile {} ({}); add it to `tools` of [profiles.{}] to offer it to this agent",
                spec.name, self.name, self.location, self.name
            ));
            return;
        }
        if let Some((tier, location)) = self.tiers.get(&spec.name) {
            spec.tier = spec.tier.max(*tier);
            spec.rules.push(Rule {
                when: Vec::new(),
                tier: *tier,
                reason: Some(format!("profile {} sets tier = \"{tier}\"", self.name)),
                location: location.clone(),
            });
        }
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Up to three of `candidates` close to `requested`, closest first.
pub fn closest<'a>(requested: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let lower = requested.to_lowercase();
    let mut scored: Vec<(usize, &str)> = candidates
        .map(|n| (distance(&lower, &n.to_lowercase()), n))
        .filter(|(d, n)| *d <= (n.len() / 3).max(2) || n.contains(requested) || requested.contains(n))
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(tools: &[&str]) -> Profile {
        Profile {
            name: "p".into(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            tiers: BTreeMap::new(),
            location: "x:1:1".into(),
            description: None,
        }
    }

    #[test]
    fn servers_are_admitted_only_when_a_pattern_can_reach_them() {
        assert!(profile(&["*"]).may_admit_server("notes"));
        assert!(profile(&["notes__*"]).may_admit_server("notes"));
        assert!(profile(&["notes__read"]).may_admit_server("notes"));
        assert!(profile(&["no*"]).may_admit_server("notes"));
        assert!(!profile(&["notes"]).may_admit_server("notes"));
        assert!(!profile(&["read_file", "git_*"]).may_admit_server("notes"));
        assert!(!profile(&["other__*"]).may_admit_server("notes"));
    }

    #[test]
    fn suggestions_are_close_names() {
        assert_eq!(closest("read_fil", ["read_file", "write_file", "shell"].into_iter()), vec!["read_file"]);
        assert!(closest("zzz", ["read_file"].into_iter()).is_empty());
    }
}
