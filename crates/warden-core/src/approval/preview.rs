//! What a person sees before saying yes: a unified diff for `write_file` and
//! `edit_file`, the target for deletes, moves and copies.
//!
//! The host reads the current file to build the diff while tools may run
//! concurrently in the same workspace, so it reads the way every host-side read of
//! workspace content does ([`crate::workspace_read`]): opened once beneath the
//! workspace fd, no symbolic link followed, regular files only, at most
//! [`MAX_PREVIEW_FILE`] bytes. A file it will not read is never shown: the preview
//! says it cannot show it, and why.

use std::path::Path;

use serde_json::Value;

use crate::workspace_read::{Dir, ReadError};

/// Largest file a preview reads.
pub const MAX_PREVIEW_FILE: u64 = 1 << 20;
/// Longest preview, in characters.
const MAX_PREVIEW_CHARS: usize = 16 << 10;

/// The preview of a builtin `fs` tool call; empty for tools it does not know.
pub fn for_fs_tool(tool: &str, args: &Value, workspace: &Path) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default();
    let text = match tool {
        "write_file" => {
            let append = args.get("append").and_then(Value::as_bool) == Some(true);
            match current(workspace, s("path")) {
                Ok(old) => {
                    let old = old.unwrap_or_default();
                    let new = if append { format!("{old}{}", s("content")) } else { s("content").to_string() };
                    diff(s("path"), &old, &new)
                }
                Err(why) => format!(
                    "{} {} (cannot show the current file: {why}); the text it {}:\n{}",
                    if append { "append to" } else { "write" },
                    s("path"),
                    if append { "appends" } else { "writes" },
                    diff(s("path"), "", s("content"))
                ),
            }
        }
        "edit_file" => match current(workspace, s("path")) {
            Ok(Some(old)) => {
                let new = if args.get("replace_all").and_then(Value::as_bool) == Some(true) {
                    old.replace(s("old"), s("new"))
                } else {
                    old.replacen(s("old"), s("new"), 1)
                };
                diff(s("path"), &old, &new)
            }
            Ok(None) => format!("edit {} (cannot preview: no such file in the workspace)", s("path")),
            Err(why) => format!("edit {} (cannot preview: {why})", s("path")),
        },
        "delete_file" => format!("will delete: {}", s("path")),
        "move_file" => format!("will move: {} -> {}", s("source"), s("dest")),
        "copy_file" => format!("will copy: {} -> {}", s("source"), s("dest")),
        "create_directory" => format!("will create directory: {}", s("path")),
        _ => String::new(),
    };
    if text.chars().count() > MAX_PREVIEW_CHARS {
        let cut: String = text.chars().take(MAX_PREVIEW_CHARS).collect();
        format!("{cut}\n… (preview truncated)")
    } else {
        text
    }
}

fn diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// The current text of `rel` in the workspace: `Ok(None)` when there is no such
/// file, `Err(why)` when there is something the preview will not show (outside the
/// workspace, behind a link, not a regular file, too large, not UTF-8 text).
fn current(workspace: &Path, rel: &str) -> Result<Option<String>, String> {
    let read = Dir::open(workspace).and_then(|dir| dir.read(Path::new(rel), MAX_PREVIEW_FILE));
    let bounded = match read {
        Ok(b) => b,
        Err(ReadError::NotFound) => return Ok(None),
        Err(ReadError::Outside) => return Err("not a file in the workspace".into()),
        Err(e) => return Err(e.to_string()),
    };
    if bounded.truncated {
        return Err(format!("larger than the {MAX_PREVIEW_FILE} bytes a preview reads"));
    }
    String::from_utf8(bounded.bytes).map(Some).map_err(|_| "not UTF-8 text".into())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn write_preview_is_a_unified_diff() {
        let p = for_fs_tool(
            "write_file",
            &serde_json::json!({"path": "new.txt", "content": "hello\n"}),
            Path::new("/nonexistent"),
        );
        assert!(p.contains("+++ b/new.txt"));
        assert!(p.contains("+hello"));
    }

    #[test]
    fn preview_never_reads_outside_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        assert!(current(&ws, "/etc/passwd").is_err());
        assert!(current(&ws, "../../etc/passwd").is_err());
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        let p = for_fs_tool("edit_file", &serde_json::json!({"path": "etc/passwd", "old": "r", "new": "x"}), &ws);
        assert!(p.starts_with("edit etc/passwd (cannot preview: a symbolic link"), "{p}");
        assert!(!p.contains("root:"), "{p}");
    }

    #[test]
    fn preview_diffs_a_file_of_the_workspace_and_names_what_it_cannot_show() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
        let p = for_fs_tool("edit_file", &serde_json::json!({"path": "a.txt", "old": "two", "new": "2"}), &ws);
        assert!(p.contains("-two") && p.contains("+2"), "{p}");
        let abs = ws.join("a.txt").display().to_string();
        let p = for_fs_tool("write_file", &serde_json::json!({"path": abs, "content": "x\n", "append": true}), &ws);
        assert!(p.contains("+x") && !p.contains("-one"), "{p}");
        std::fs::write(ws.join("big"), vec![b'a'; MAX_PREVIEW_FILE as usize + 1]).unwrap();
        let p = for_fs_tool("write_file", &serde_json::json!({"path": "big", "content": "new\n"}), &ws);
        assert!(p.starts_with("write big (cannot show the current file: larger than"), "{p}");
        assert!(p.contains("+new"), "{p}");
    }
}
