//! What a person sees before saying yes: a unified diff for `write_file` and
//! `edit_file`, the target for deletes, moves and copies.
//!
//! The host reads the current file to build the diff, so it reads only paths that
//! stay inside the workspace after symbolic links are resolved, and at most
//! [`MAX_PREVIEW_FILE`] bytes: a preview never shows what the tool could not reach.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Largest file a preview reads.
pub const MAX_PREVIEW_FILE: u64 = 1 << 20;
/// Longest preview, in characters.
const MAX_PREVIEW_CHARS: usize = 16 << 10;

/// The preview of a builtin `fs` tool call; empty for tools it does not know.
pub fn for_fs_tool(tool: &str, args: &Value, workspace: &Path) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default();
    let text = match tool {
        "write_file" => {
            let old = current(workspace, s("path")).unwrap_or_default();
            let new = if args.get("append").and_then(Value::as_bool) == Some(true) {
                format!("{old}{}", s("content"))
            } else {
                s("content").to_string()
            };
            diff(s("path"), &old, &new)
        }
        "edit_file" => match current(workspace, s("path")) {
            Some(old) => {
                let new = if args.get("replace_all").and_then(Value::as_bool) == Some(true) {
                    old.replace(s("old"), s("new"))
                } else {
                    old.replacen(s("old"), s("new"), 1)
                };
                diff(s("path"), &old, &new)
            }
            None => format!("edit {} (cannot preview: not a readable text file in the workspace)", s("path")),
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

/// The current text of `rel` when it is a small file inside the workspace.
fn current(workspace: &Path, rel: &str) -> Option<String> {
    let p = PathBuf::from(rel);
    let joined = if p.is_absolute() { p } else { workspace.join(p) };
    let real = joined.canonicalize().ok()?;
    if !real.starts_with(workspace) {
        return None;
    }
    let meta = std::fs::metadata(&real).ok()?;
    if !meta.is_file() || meta.len() > MAX_PREVIEW_FILE {
        return None;
    }
    std::fs::read_to_string(real).ok()
}

#[cfg(test)]
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
        let ws = std::env::temp_dir();
        assert_eq!(current(&ws, "/etc/passwd"), None);
        assert_eq!(current(&ws, "../../etc/passwd"), None);
    }
}
