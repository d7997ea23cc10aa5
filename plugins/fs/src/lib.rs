//! warden's builtin file tools, as a WebAssembly component.
//!
//! The component has no ambient authority: the host preopens each directory the
//! policy grants (at the same path it has on the host) with read-only or
//! read-write permissions, and passes two variables:
//!
//! * `WARDEN_WORKSPACE`: the workspace root; relative paths are joined to it and
//!   results show paths relative to it.
//! * `WARDEN_ROOTS`: the granted roots, one per line. A path that does not
//!   normalise to somewhere under one of them is refused here, before any access;
//!   the preopens refuse it again (symlinks included) if this check were wrong.
//!
//! Every listing and search has a fixed cap (`MAX_*`), reported as `truncated`.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde_json::{Value, json};

wit_bindgen::generate!({ world: "plugin", path: "../wit" });

use exports::warden::plugin::tool::{Guest, ToolError, ToolInfo};

/// Most bytes of file content `read_file` returns (the host's `max_output` cuts further).
const MAX_READ_BYTES: usize = 4 << 20;
/// Most entries `list_directory` returns.
const MAX_ENTRIES: usize = 10_000;
/// Most matches `search_files` and `grep` return.
const MAX_MATCHES: usize = 10_000;
/// Deepest recursion of any walk.
const MAX_DEPTH: usize = 64;
/// Files larger than this are skipped by `grep`.
const MAX_GREP_FILE: u64 = 8 << 20;
/// Longest line text `grep` returns, in characters.
const MAX_GREP_LINE: usize = 512;
/// Largest file `edit_file` and `copy_file` handle.
const MAX_EDIT_FILE: u64 = 64 << 20;

struct Fs;

type Res = Result<Value, ToolError>;

fn path_prop(description: &str) -> Value {
    json!({"type": "string", "format": "path", "minLength": 1, "maxLength": 4096, "description": description})
}

fn schema(props: Value, required: &[&str]) -> String {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
    .to_string()
}

fn info(name: &str, description: &str, input_schema: String) -> ToolInfo {
    ToolInfo { name: name.into(), description: description.into(), input_schema }
}

impl Guest for Fs {
    fn describe() -> Vec<ToolInfo> {
        let path = || path_prop("File path, relative to the workspace");
        vec![
            info("copy_file", "Copy a file", schema(json!({"source": path(), "dest": path()}), &["source", "dest"])),
            info(
                "create_directory",
                "Create a directory and any missing parents",
                schema(json!({"path": path()}), &["path"]),
            ),
            info(
                "delete_file",
                "Delete a file, a symbolic link or an empty directory",
                schema(json!({"path": path()}), &["path"]),
            ),
            info(
                "edit_file",
                "Replace text in a file: `old` must occur exactly once unless `replace_all` is set",
                schema(
                    json!({"path": path(), "old": {"type": "string", "minLength": 1}, "new": {"type": "string"}, "replace_all": {"type": "boolean"}}),
                    &["path", "old", "new"],
                ),
            ),
            info("file_info", "Type, size and modification time of a path", schema(json!({"path": path()}), &["path"])),
            info(
                "grep",
                "Search file contents for a regular expression",
                schema(
                    json!({"pattern": {"type": "string", "minLength": 1, "maxLength": 4096}, "path": path(), "glob": {"type": "string", "maxLength": 1024}}),
                    &["pattern"],
                ),
            ),
            info(
                "list_directory",
                "List a directory, optionally recursively",
                schema(json!({"path": path(), "depth": {"type": "integer", "minimum": 1, "maximum": 16}}), &[]),
            ),
            info(
                "move_file",
                "Move or rename a file",
                schema(json!({"source": path(), "dest": path()}), &["source", "dest"]),
            ),
            info(
                "read_file",
                "Read a text file, optionally a range of lines (offset is the first line, from 1)",
                schema(
                    json!({"path": path(), "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}}),
                    &["path"],
                ),
            ),
            info(
                "search_files",
                "Find files whose path matches a glob pattern",
                schema(
                    json!({"pattern": {"type": "string", "minLength": 1, "maxLength": 1024}, "path": path()}),
                    &["pattern"],
                ),
            ),
            info(
                "write_file",
                "Write a file, replacing it unless `append` is set",
                schema(
                    json!({"path": path(), "content": {"type": "string"}, "append": {"type": "boolean"}, "create_parents": {"type": "boolean"}}),
                    &["path", "content"],
                ),
            ),
        ]
    }

    fn call(name: String, args: String) -> Result<String, ToolError> {
        let args: Value =
            serde_json::from_str(&args).map_err(|e| ToolError::InvalidArgs(format!("arguments are not JSON: {e}")))?;
        let ctx = Ctx::from_env()?;
        let out = match name.as_str() {
            "read_file" => ctx.read_file(&args),
            "list_directory" => ctx.list_directory(&args),
            "search_files" => ctx.search_files(&args),
            "grep" => ctx.grep(&args),
            "file_info" => ctx.file_info(&args),
            "write_file" => ctx.write_file(&args),
            "edit_file" => ctx.edit_file(&args),
            "create_directory" => ctx.create_directory(&args),
            "copy_file" => ctx.copy_file(&args),
            "move_file" => ctx.move_file(&args),
            "delete_file" => ctx.delete_file(&args),
            other => Err(ToolError::NotFound(format!("the fs plugin has no tool named {other:?}"))),
        }?;
        Ok(out.to_string())
    }
}

export!(Fs);

/// Where this call may reach: the workspace and the granted roots.
struct Ctx {
    workspace: PathBuf,
    roots: Vec<PathBuf>,
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| ToolError::InvalidArgs(format!("`{key}` must be a string")))
}

fn opt_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn opt_u64(args: &Value, key: &str) -> Option<u64> {
    args.get(key).and_then(Value::as_u64)
}

fn opt_bool(args: &Value, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Turns an I/O error into the tool error a user can act on, naming the path.
fn io_err(what: &str, shown: &str, e: std::io::Error) -> ToolError {
    use std::io::ErrorKind::*;
    let msg = format!("{what} {shown}: {e}");
    match e.kind() {
        NotFound => ToolError::NotFound(msg),
        PermissionDenied | ReadOnlyFilesystem => ToolError::PermissionDenied(msg),
        // cap-std reports escapes (symlinks out of a preopen) as EPERM/ENOTCAPABLE.
        _ if matches!(e.raw_os_error(), Some(63) | Some(76) | Some(2)) => ToolError::PermissionDenied(msg),
        _ => ToolError::Failed(msg),
    }
}

impl Ctx {
    fn from_env() -> Result<Ctx, ToolError> {
        let workspace = std::env::var("WARDEN_WORKSPACE")
            .map_err(|_| ToolError::Failed("the host did not pass WARDEN_WORKSPACE".into()))?;
        let roots = std::env::var("WARDEN_ROOTS").unwrap_or_default();
        Ok(Ctx {
            workspace: PathBuf::from(workspace),
            roots: roots.lines().filter(|l| !l.is_empty()).map(PathBuf::from).collect(),
        })
    }

    /// Joins `raw` to the workspace and normalises it lexically; refuses paths
    /// that climb above `/` or land outside every granted root.
    fn resolve(&self, raw: &str) -> Result<PathBuf, ToolError> {
        if raw.contains('\0') {
            return Err(ToolError::InvalidArgs(format!("path {raw:?} contains a NUL byte")));
        }
        let joined = if Path::new(raw).is_absolute() { PathBuf::from(raw) } else { self.workspace.join(raw) };
        let mut out = PathBuf::from("/");
        for c in joined.components() {
            match c {
                Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(ToolError::PermissionDenied(format!("invalid path: {raw:?} climbs above /")));
                    }
                }
                Component::Normal(s) => out.push(s),
            }
        }
        if !self.roots.iter().any(|r| out.starts_with(r)) {
            return Err(ToolError::PermissionDenied(format!(
                "invalid path: {raw:?} is outside the directories granted to this tool"
            )));
        }
        Ok(out)
    }

    /// How a path is shown in results: relative to the workspace when inside it.
    fn show(&self, p: &Path) -> String {
        match p.strip_prefix(&self.workspace) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => p.to_string_lossy().into_owned(),
        }
    }

    fn read_file(&self, a: &Value) -> Res {
        let p = self.resolve(str_arg(a, "path")?)?;
        let shown = self.show(&p);
        let f = fs::File::open(&p).map_err(|e| io_err("cannot open", &shown, e))?;
        let meta = f.metadata().map_err(|e| io_err("cannot stat", &shown, e))?;
        if meta.is_dir() {
            return Err(ToolError::InvalidArgs(format!("{shown} is a directory: use list_directory")));
        }
        let first = opt_u64(a, "offset").unwrap_or(1).max(1);
        let limit = opt_u64(a, "limit").unwrap_or(u64::MAX);
        let mut reader = BufReader::new(f);
        let mut content = Vec::new();
        let mut line = Vec::new();
        let (mut lineno, mut taken, mut truncated) = (0u64, 0u64, false);
        loop {
            line.clear();
            let n = reader.by_ref().take((MAX_READ_BYTES + 1) as u64).read_until(b'\n', &mut line);
            let n = n.map_err(|e| io_err("cannot read", &shown, e))?;
            if n == 0 {
                break;
            }
            lineno += 1;
            if lineno < first {
                continue;
            }
            if taken == limit {
                truncated = true;
                break;
            }
            if content.len() + line.len() > MAX_READ_BYTES {
                let room = MAX_READ_BYTES - content.len();
                content.extend_from_slice(&line[..room]);
                truncated = true;
                taken += 1;
                break;
            }
            content.extend_from_slice(&line);
            taken += 1;
        }
        Ok(json!({
            "path": shown,
            "content": String::from_utf8_lossy(&content),
            "lines": taken,
            "size": meta.len(),
            "truncated": truncated,
        }))
    }

    fn entry(&self, p: &Path, meta: &fs::Metadata) -> Value {
        json!({
            "name": p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "path": self.show(p),
            "type": kind(meta),
            "size": meta.len(),
        })
    }

    fn list_directory(&self, a: &Value) -> Res {
        let p = self.resolve(opt_str(a, "path").unwrap_or("."))?;
        let depth = opt_u64(a, "depth").unwrap_or(1).clamp(1, 16) as usize;
        let shown = self.show(&p);
        let meta = fs::symlink_metadata(&p).map_err(|e| io_err("cannot stat", &shown, e))?;
        if !meta.is_dir() {
            return Err(ToolError::InvalidArgs(format!("{shown} is not a directory")));
        }
        let mut entries = Vec::new();
        let mut truncated = false;
        walk(&p, depth, &mut |path, meta| {
            if entries.len() == MAX_ENTRIES {
                truncated = true;
                return false;
            }
            entries.push(self.entry(path, meta));
            true
        })
        .map_err(|e| io_err("cannot list", &shown, e))?;
        Ok(json!({"path": shown, "entries": entries, "truncated": truncated}))
    }

    fn search_files(&self, a: &Value) -> Res {
        let pattern = str_arg(a, "pattern")?;
        let glob = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::InvalidArgs(format!("`pattern` is not a valid glob: {e}")))?
            .compile_matcher();
        let root = self.resolve(opt_str(a, "path").unwrap_or("."))?;
        let shown = self.show(&root);
        let mut matches = Vec::new();
        let mut truncated = false;
        walk(&root, MAX_DEPTH, &mut |path, _| {
            let rel = path.strip_prefix(&root).unwrap_or(path);
            let by_name = !pattern.contains('/') && path.file_name().is_some_and(|n| glob.is_match(n));
            if by_name || glob.is_match(rel) {
                if matches.len() == MAX_MATCHES {
                    truncated = true;
                    return false;
                }
                matches.push(Value::String(self.show(path)));
            }
            true
        })
        .map_err(|e| io_err("cannot search", &shown, e))?;
        Ok(json!({"matches": matches, "truncated": truncated}))
    }

    fn grep(&self, a: &Value) -> Res {
        let re = regex::RegexBuilder::new(str_arg(a, "pattern")?)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::InvalidArgs(format!("`pattern` is not a valid regex: {e}")))?;
        let glob = match opt_str(a, "glob") {
            Some(g) => Some(
                globset::Glob::new(g)
                    .map_err(|e| ToolError::InvalidArgs(format!("`glob` is not a valid glob: {e}")))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let root = self.resolve(opt_str(a, "path").unwrap_or("."))?;
        let shown = self.show(&root);
        let mut matches = Vec::new();
        let mut truncated = false;
        let mut search = |path: &Path, meta: &fs::Metadata| -> bool {
            if !meta.is_file() || meta.len() > MAX_GREP_FILE {
                return true;
            }
            if let Some(g) = &glob {
                if !path.file_name().is_some_and(|n| g.is_match(n)) {
                    return true;
                }
            }
            let Ok(bytes) = fs::read(path) else { return true };
            if bytes[..bytes.len().min(8192)].contains(&0) {
                return true; // binary
            }
            for (i, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
                if re.is_match(line) {
                    if matches.len() == MAX_MATCHES {
                        truncated = true;
                        return false;
                    }
                    let text: String = line.chars().take(MAX_GREP_LINE).collect();
                    matches.push(json!({"path": self.show(path), "line": i + 1, "text": text}));
                }
            }
            true
        };
        let meta = fs::symlink_metadata(&root).map_err(|e| io_err("cannot stat", &shown, e))?;
        if meta.is_dir() {
            walk(&root, MAX_DEPTH, &mut search).map_err(|e| io_err("cannot search", &shown, e))?;
        } else {
            fs::File::open(&root).map_err(|e| io_err("cannot open", &shown, e))?;
            search(&root, &meta);
        }
        Ok(json!({"matches": matches, "truncated": truncated}))
    }

    fn file_info(&self, a: &Value) -> Res {
        let p = self.resolve(str_arg(a, "path")?)?;
        let shown = self.show(&p);
        let meta = fs::symlink_metadata(&p).map_err(|e| io_err("cannot stat", &shown, e))?;
        let modified =
            meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| rfc3339(d.as_secs() as i64));
        Ok(json!({"path": shown, "type": kind(&meta), "size": meta.len(), "modified": modified}))
    }

    fn write_file(&self, a: &Value) -> Res {
        let p = self.resolve(str_arg(a, "path")?)?;
        let content = str_arg(a, "content")?;
        let shown = self.show(&p);
        if opt_bool(a, "create_parents") {
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).map_err(|e| io_err("cannot create parents of", &shown, e))?;
            }
        }
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true);
        if opt_bool(a, "append") {
            opts.append(true)
        } else {
            opts.truncate(true)
        };
        let mut f = opts.open(&p).map_err(|e| io_err("cannot open for writing", &shown, e))?;
        f.write_all(content.as_bytes()).map_err(|e| io_err("cannot write", &shown, e))?;
        Ok(json!({"path": shown, "bytes_written": content.len()}))
    }

    fn edit_file(&self, a: &Value) -> Res {
        let p = self.resolve(str_arg(a, "path")?)?;
        let (old, new) = (str_arg(a, "old")?, str_arg(a, "new")?);
        let shown = self.show(&p);
        if old.is_empty() {
            return Err(ToolError::InvalidArgs("`old` must not be empty".into()));
        }
        let meta = fs::metadata(&p).map_err(|e| io_err("cannot stat", &shown, e))?;
        if meta.len() > MAX_EDIT_FILE {
            return Err(ToolError::Failed(format!("{shown} is larger than {MAX_EDIT_FILE} bytes")));
        }
        let text = fs::read_to_string(&p).map_err(|e| io_err("cannot read", &shown, e))?;
        let count = text.matches(old).count();
        if count == 0 {
            return Err(ToolError::InvalidArgs(format!("`old` does not occur in {shown}")));
        }
        let replace_all = opt_bool(a, "replace_all");
        if count > 1 && !replace_all {
            return Err(ToolError::InvalidArgs(format!(
                "`old` occurs {count} times in {shown}: make it unique or set replace_all"
            )));
        }
        let edited = if replace_all { text.replace(old, new) } else { text.replacen(old, new, 1) };
        fs::write(&p, edited).map_err(|e| io_err("cannot write", &shown, e))?;
        Ok(json!({"path": shown, "replacements": if replace_all { count } else { 1 }}))
    }

    fn create_directory(&self, a: &Value) -> Res {
        let p = self.resolve(str_arg(a, "path")?)?;
        let shown = self.show(&p);
        fs::create_dir_all(&p).map_err(|e| io_err("cannot create", &shown, e))?;
        Ok(json!({"path": shown}))
    }

    fn copy_file(&self, a: &Value) -> Res {
        let (src, dst) = (self.resolve(str_arg(a, "source")?)?, self.resolve(str_arg(a, "dest")?)?);
        let (s, d) = (self.show(&src), self.show(&dst));
        let meta = fs::metadata(&src).map_err(|e| io_err("cannot stat", &s, e))?;
        if !meta.is_file() {
            return Err(ToolError::InvalidArgs(format!("{s} is not a regular file")));
        }
        let mut from = fs::File::open(&src).map_err(|e| io_err("cannot open", &s, e))?;
        let mut to = fs::File::create(&dst).map_err(|e| io_err("cannot create", &d, e))?;
        std::io::copy(&mut from, &mut to).map_err(|e| io_err("cannot copy to", &d, e))?;
        Ok(json!({"source": s, "dest": d}))
    }

    fn move_file(&self, a: &Value) -> Res {
        let (src, dst) = (self.resolve(str_arg(a, "source")?)?, self.resolve(str_arg(a, "dest")?)?);
        let (s, d) = (self.show(&src), self.show(&dst));
        if src == self.workspace {
            return Err(ToolError::InvalidArgs("cannot move the workspace itself".into()));
        }
        fs::symlink_metadata(&src).map_err(|e| io_err("cannot stat", &s, e))?;
        fs::rename(&src, &dst).map_err(|e| io_err("cannot move to", &d, e))?;
        Ok(json!({"source": s, "dest": d}))
    }

    fn delete_file(&self, a: &Value) -> Res {
        let p = self.resolve(str_arg(a, "path")?)?;
        let shown = self.show(&p);
        if self.roots.iter().any(|r| r == &p) || p == self.workspace {
            return Err(ToolError::InvalidArgs(format!("{shown} is a granted root and cannot be deleted")));
        }
        let meta = fs::symlink_metadata(&p).map_err(|e| io_err("cannot stat", &shown, e))?;
        if meta.is_dir() {
            fs::remove_dir(&p).map_err(|e| io_err("cannot delete directory (it must be empty)", &shown, e))?;
        } else {
            fs::remove_file(&p).map_err(|e| io_err("cannot delete", &shown, e))?;
        }
        Ok(json!({"path": shown}))
    }
}

fn kind(meta: &fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "directory"
    } else if t.is_file() {
        "file"
    } else {
        "other"
    }
}

/// Depth-first walk below `dir` in name order, never following symbolic links;
/// `visit` returns false to stop.
fn walk(dir: &Path, depth: usize, visit: &mut dyn FnMut(&Path, &fs::Metadata) -> bool) -> std::io::Result<bool> {
    let mut names: Vec<_> = fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.path()).collect();
    names.sort();
    for path in names {
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if !visit(&path, &meta) {
            return Ok(false);
        }
        if meta.is_dir() && depth > 1 && !walk(&path, depth - 1, visit).unwrap_or(true) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Seconds since the epoch as an RFC 3339 UTC timestamp.
fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}
