//! The terminal prompt: written to and read from `/dev/tty`, never stdout
//! (which carries results) or stdin (which may carry the call).

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};

use super::Request;
use crate::policy::Tier;
use crate::shape::sanitize_str;

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
    let args = super::arguments_text(req.args);
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
