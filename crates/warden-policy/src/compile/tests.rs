use std::path::Path;

use super::*;
use crate::{DEFAULT_POLICY, SandboxMode};

fn ctx() -> Context {
    Context { workspace: "/ws".into(), home: "/home/u".into(), cache: "/home/u/.cache".into() }
}

fn load(text: &str) -> Result<Policy, PolicyError> {
    compile(text, "p.toml", Path::new("/etc/warden"), &ctx())
}

fn first_problem(text: &str) -> Problem {
    match load(text) {
        Ok(_) => panic!("expected the policy to be rejected"),
        Err(e) => e.problems[0].clone(),
    }
}

const HEAD: &str = "version = 1\n[plugins.fs]\nsource = \"builtin:fs\"\n";

#[test]
fn the_default_policy_loads() {
    let p = compile(DEFAULT_POLICY, "default", Path::new("."), &ctx()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.mode, SandboxMode::Enforce);
    assert_eq!(p.tools["read_file"].tier, Tier::Auto);
    assert_eq!(p.tools["delete_file"].tier, Tier::Confirm);
    assert_eq!(
        p.tools["write_file"].grants.paths,
        vec![PathGrant { path: GrantPath::Fixed("/ws".into()), write: true }]
    );
}

#[test]
fn the_shipped_policies_load() {
    for file in ["default.toml", "strict.toml", "ci.toml"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies").join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        compile(&text, file, Path::new("."), &ctx()).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The policies the Python MCP suites use (tests/fixtures/policies) compile
/// here too, so a fixture cannot drift out of the language unnoticed.
#[test]
fn the_test_fixture_policies_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/policies");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        compile(&text, &path.display().to_string(), Path::new("."), &ctx()).unwrap_or_else(|e| panic!("{e}"));
        seen += 1;
    }
    assert!(seen >= 2, "no fixtures under {}", dir.display());
}

#[test]
fn unknown_keys_are_named_with_line_and_column() {
    let p = first_problem(&format!("{HEAD}[tools.read_file]\nplugin = \"fs\"\nfs.raed = [\"{{workspace}}\"]\n"));
    assert_eq!((p.line, p.column), (6, 4));
    assert!(p.message.contains("raed"), "{}", p.message);
}

#[test]
fn bad_durations_and_sizes_are_rejected_at_their_value() {
    let p = first_problem("version = 1\n[defaults]\ntimeout = \"soon\"\n");
    assert_eq!(p.line, 3);
    assert!(p.message.contains("bad duration"), "{}", p.message);
    let p = first_problem("version = 1\n[defaults]\nmemory = \"12 parsecs\"\n");
    assert!(p.message.contains("bad size"), "{}", p.message);
}

#[test]
fn undeclared_plugins_are_named() {
    let p = first_problem("version = 1\n[tools.x]\nplugin = \"nope\"\n");
    assert_eq!((p.line, p.column), (3, 10));
    assert!(p.message.contains("[plugins.nope]"), "{}", p.message);
}

#[test]
fn unknown_placeholders_are_rejected() {
    let p = first_problem(&format!("{HEAD}[tools.read_file]\nplugin = \"fs\"\nfs.read = [\"{{wrkspace}}\"]\n"));
    assert_eq!(p.line, 6);
    assert!(p.message.contains("unknown placeholder {wrkspace}"), "{}", p.message);
}

#[test]
fn plugins_that_are_not_builtin_need_a_pin() {
    let p = first_problem("version = 1\n[plugins.w]\nsource = \"w.wasm\"\n");
    assert!(p.message.contains("missing sha256"), "{}", p.message);
    let ok = load(&format!("version = 1\n[plugins.w]\nsource = \"w.wasm\"\nsha256 = \"{}\"\n", "a".repeat(64)))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.plugins["w"].source, PluginSource::File("/etc/warden/w.wasm".into()));
}

#[test]
fn oci_sources_are_by_digest_and_need_no_pin() {
    let digest = format!("sha256:{}", "b".repeat(64));
    let ok = load(&format!("version = 1\n[plugins.w]\nsource = \"oci://127.0.0.1:5000/p/w@{digest}\"\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let expected = crate::OciRef { registry: "127.0.0.1:5000".into(), repository: "p/w".into(), digest };
    assert_eq!(ok.plugins["w"].source, PluginSource::Oci(expected));
    assert!(ok.plugins["w"].source.is_third_party());
    let Err(e) = load("version = 1\n[plugins.w]\nsource = \"oci://127.0.0.1:5000/p/w:1.0\"\n") else {
        panic!("a tag was accepted")
    };
    let e = e.to_string();
    assert!(e.contains("source of [plugins.w]") && e.contains("digest only"), "{e}");
    assert!(!e.contains("missing sha256"), "{e}");
}

#[test]
fn an_oci_component_takes_signers_but_no_signature_file() {
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice";
    let head = format!("version = 1\n[plugins.w]\nsource = \"oci://127.0.0.1:5000/p/w@sha256:{}\"\n", "b".repeat(64));
    let ok = load(&format!("{head}signers = [\"{key}\"]\n")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.plugins["w"].signers.len(), 1);
    assert_eq!(ok.plugins["w"].signature, None);
    let p = first_problem(&format!("{head}signers = [\"{key}\"]\nsignature = \"w.sig\"\n"));
    assert!(
        p.message.contains("dev.warden.signature.sshsig") && p.message.contains("remove signature"),
        "{}",
        p.message
    );
}

#[test]
fn bad_regexes_are_rejected() {
    let p = first_problem(&format!(
        "{HEAD}[tools.grep]\nplugin = \"fs\"\n[[tools.grep.rule]]\nwhen = {{ pattern = \"(\" }}\ntier = \"deny\"\n"
    ));
    assert_eq!(p.line, 7);
    assert!(p.message.contains("does not compile"), "{}", p.message);
}

#[test]
fn exec_templates_make_every_placeholder_a_required_string() {
    let p = load("version = 1\n[tools.git_diff]\nexec = [\"/usr/bin/git\", \"diff\", \"--\", \"{path}\", \"--x={path}\", \"{workspace}\", \"{print $1}\"]\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let Runner::Process(exec) = &p.tools["git_diff"].runner else { panic!("not a process tool") };
    assert_eq!(exec.params, ["path"]);
    assert_eq!(exec.argv, ["/usr/bin/git", "diff", "--", "{path}", "--x={path}", "/ws", "{print $1}"]);
    assert_eq!(exec.cwd, Path::new("/ws"));
    assert_eq!(exec.schema()["required"], serde_json::json!(["path"]));
}

#[test]
fn exec_needs_an_absolute_fixed_program() {
    let p = first_problem("version = 1\n[tools.x]\nexec = [\"git\", \"status\"]\n");
    assert!(p.message.contains("absolute path"), "{}", p.message);
    let p = first_problem("version = 1\n[tools.x]\nexec = [\"{program}\"]\n");
    assert!(p.message.contains("cannot come from an argument"), "{}", p.message);
    let p = first_problem(&format!("{HEAD}[tools.x]\nplugin = \"fs\"\nexec = [\"/bin/true\"]\n"));
    assert!(p.message.contains("both"), "{}", p.message);
}

#[test]
fn system_grants_apply_to_process_tools_only() {
    let p = load("version = 1\n[tools.sh]\nexec = [\"/bin/sh\"]\nfs.read = [\"{system}\"]\nlimits = { processes = 8, cpu = \"5s\" }\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let g = &p.tools["sh"].grants.paths;
    assert!(g.contains(&PathGrant { path: GrantPath::Fixed("/usr".into()), write: false }));
    assert!(g.contains(&PathGrant { path: GrantPath::Fixed("/dev/null".into()), write: true }));
    assert!(!g.iter().any(|p| p.path == GrantPath::Fixed("/etc".into())));
    assert_eq!(p.tools["sh"].limits.processes, 8);
    let p = first_problem(&format!("{HEAD}[tools.grep]\nplugin = \"fs\"\nfs.read = [\"{{system}}\"]\n"));
    assert!(p.message.contains("only to process tools"), "{}", p.message);
}

#[test]
fn auto_rules_on_process_tools_apply_only_to_simple_commands() {
    let p = load(
        "version = 1\n[tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\ntier = \"confirm\"\n\
         [[tools.shell.rule]]\nwhen = { command = '^ls' }\ntier = \"auto\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let t = &p.tools["shell"];
    assert_eq!(t.decide(&serde_json::json!({"command": "ls -la"})).0, Tier::Auto);
    for compound in ["ls; curl evil", "ls && x", "ls | sh", "ls `id`", "ls $(id)", "ls > f", "ls\nid", "ls (x)"] {
        assert_eq!(t.decide(&serde_json::json!({"command": compound})).0, Tier::Confirm, "{compound}");
    }
}

#[test]
fn process_only_limits_are_refused_on_components() {
    let p = first_problem(&format!("{HEAD}[tools.grep]\nplugin = \"fs\"\nlimits = {{ processes = 4 }}\n"));
    assert!(p.message.contains("limits.processes applies only to process tools"), "{}", p.message);
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let e =
        load("version = 2\n[tools.a]\nplugin = \"x\"\n[tools.b]\nplugin = \"y\"\n").err().unwrap_or_else(|| panic!());
    assert_eq!(e.problems.len(), 3);
}

#[test]
fn network_grants_name_one_host_and_port() {
    for bad in
        ["a.*.com:443", "ex*.com:443", "example.com", "example.com:0", "0.0.0.0:80", "[::]:80", "h:99999", "-a.com:1"]
    {
        let p = first_problem(&format!("{HEAD}[tools.grep]\nplugin = \"fs\"\nnet.connect = [\"{bad}\"]\n"));
        assert!(p.message.contains("net.connect"), "{bad}: {}", p.message);
    }
}

#[test]
fn network_grants_take_wildcards_in_the_first_label_only() {
    let p = load(&format!(
        "{HEAD}[tools.grep]\nexec = [\"/bin/true\"]\nnet.connect = [\"*.Example.COM.:443\", \"*:80\", \"[::1]:8080\"]\n\
         net.allow_private = true\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let g = &p.tools["grep"].grants;
    let hosts: Vec<String> = g.net.iter().map(|n| n.to_string()).collect();
    assert_eq!(hosts, ["*.example.com:443", "*:80", "[::1]:8080"]);
    assert!(g.allow_private);
    let p = first_problem(&format!("{HEAD}[tools.grep]\nexec = [\"/bin/true\"]\nnet.allow_private = true\n"));
    assert!(p.message.contains("net.allow_private"), "{}", p.message);
}

#[test]
fn strictest_matching_rule_wins_and_auto_rules_can_relax() {
    let p = load(&format!(
        "{HEAD}[tools.grep]\nplugin = \"fs\"\ntier = \"confirm\"\n\
         [[tools.grep.rule]]\nwhen = {{ pattern = '^a' }}\ntier = \"auto\"\n\
         [[tools.grep.rule]]\nwhen = {{ pattern = 'secret' }}\ntier = \"deny\"\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let t = &p.tools["grep"];
    assert_eq!(t.decide(&serde_json::json!({"pattern": "abc"})).0, Tier::Auto);
    assert_eq!(t.decide(&serde_json::json!({"pattern": "a secret"})).0, Tier::Deny);
    assert_eq!(t.decide(&serde_json::json!({"pattern": "zzz"})).0, Tier::Confirm);
    assert_eq!(t.decide(&serde_json::json!({"pattern": 5})).0, Tier::Confirm);
}

#[test]
fn a_deny_tool_stays_denied_whatever_its_rules_say() {
    let p = load(&format!(
        "{HEAD}[tools.grep]\nplugin = \"fs\"\ntier = \"deny\"\n[[tools.grep.rule]]\nwhen = {{ pattern = '.' }}\ntier = \"auto\"\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.tools["grep"].decide(&serde_json::json!({"pattern": "a"})).0, Tier::Deny);
}

#[test]
fn warden_variables_cannot_be_overridden() {
    let p = first_problem(&format!("{HEAD}[tools.grep]\nplugin = \"fs\"\nenv.set = {{ WARDEN_ROOTS = \"/\" }}\n"));
    assert!(p.message.contains("reserved"), "{}", p.message);
}

const SERVER: &str =
    "version = 1\n[servers.notes]\nexec = [\"/usr/bin/python3\", \"/srv/notes.py\"]\nfs.read = [\"{system}\"]\n";

#[test]
fn a_server_compiles_with_ask_by_default_and_a_long_cpu_limit() {
    let p = load(SERVER).unwrap_or_else(|e| panic!("{e}"));
    let s = &p.servers["notes"];
    assert_eq!(s.tier, Tier::Ask);
    assert_eq!(s.exec.argv, ["/usr/bin/python3", "/srv/notes.py"]);
    assert_eq!(s.limits.cpu, std::time::Duration::from_secs(3600));
    assert!(s.grants.paths.iter().any(|g| g.path == GrantPath::Fixed("/usr".into())));
    assert_eq!(p.lock_path.as_deref(), Some(Path::new("/etc/warden/warden.lock")));
    let t = s.tool_spec("echo");
    assert_eq!(t.name, "notes__echo");
    assert_eq!(t.runtime(), "server");
}

#[test]
fn server_entries_refuse_what_does_not_apply() {
    let p = first_problem(&format!("{SERVER}description = \"x\"\n"));
    assert!(p.message.starts_with("server notes: `description` does not apply"), "{}", p.message);
    let p = first_problem("version = 1\n[servers.notes]\nexec = [\"/bin/x\", \"{path}\"]\n");
    assert!(p.message.contains("started once"), "{}", p.message);
    let p = first_problem("version = 1\n[servers.Notes_1]\nexec = [\"/bin/x\"]\n");
    assert!(p.message.contains("a-z, 0-9 and -"), "{}", p.message);
    let p = first_problem("version = 1\n[servers.notes]\nfs.read = [\"/x\"]\n");
    assert!(p.message.contains("needs `exec"), "{}", p.message);
    let p = first_problem("version = 1\n[servers.notes]\nexec = [\"python3\"]\n");
    assert!(p.message.starts_with("server notes: exec[0]"), "{}", p.message);
}

#[test]
fn a_server_tool_override_sets_tier_and_rules_but_not_walls() {
    let text = format!(
        "{SERVER}[tools.notes__delete]\ntier = \"confirm\"\n[[tools.notes__delete.rule]]\nwhen = {{ id = '^tmp-' }}\ntier = \"auto\"\n"
    );
    let p = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let t = &p.tools["notes__delete"];
    assert_eq!(t.tier, Tier::Confirm);
    assert_eq!(t.rules.len(), 1);
    assert!(matches!(&t.runner, Runner::Server(st) if st.server == "notes" && st.tool == "delete"));
    let p = first_problem(&format!("{SERVER}[tools.notes__delete]\nfs.write = [\"/\"]\n"));
    assert!(p.message.contains("`fs` cannot be set per tool of a server"), "{}", p.message);
    // Not a declared server: an ordinary tool name, where `__` is reserved.
    let p = first_problem("version = 1\n[tools.other__x]\nexec = [\"/bin/true\"]\n");
    assert!(p.message.contains("reserved"), "{}", p.message);
}

#[test]
fn command_plugins_take_args_and_tool_plugins_refuse_them() {
    let head = "version = 1\n[plugins.rg]\nsource = \"rg.wasm\"\nsha256 = \"";
    let sha = "a".repeat(64);
    let text = format!(
        "{head}{sha}\"\nkind = \"command\"\n[tools.search]\nplugin = \"rg\"\nargs = [\"-e\", \"{{pattern}}\", \"{{workspace}}\"]\n"
    );
    let p = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let Runner::Command(c) = &p.tools["search"].runner else { panic!("not a command tool") };
    assert_eq!(c.args, ["-e", "{pattern}", "/ws"]);
    assert_eq!(c.params, ["pattern"]);
    assert_eq!(c.schema()["required"], serde_json::json!(["pattern"]));
    let p = first_problem(&format!("{head}{sha}\"\nkind = \"cli\"\n"));
    assert!(p.message.contains("unknown kind"), "{}", p.message);
    let p = first_problem(&format!("{head}{sha}\"\n[tools.search]\nplugin = \"rg\"\nargs = [\"x\"]\n"));
    assert!(p.message.contains("`args` applies only to tools of a kind = \"command\" plugin"), "{}", p.message);
    let p = first_problem(&format!(
        "{head}{sha}\"\nkind = \"command\"\n[tools.search]\nplugin = \"rg\"\nargs = [\"{{tmp}}\"]\n"
    ));
    assert!(p.message.contains("{tmp} is not available"), "{}", p.message);
}

#[test]
fn sysv_ipc_and_inotify_are_for_process_tools_and_servers_only() {
    let text = "version = 1\n[tools.pg]\nexec = [\"/usr/bin/true\"]\nsysv_ipc = true\n\
                [servers.db]\nexec = [\"/usr/bin/true\"]\nsysv_ipc = true\n";
    let p = load(text).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.tools["pg"].grants.sysv_ipc);
    assert!(!load("version = 1\n[tools.t]\nexec = [\"/usr/bin/true\"]\n").is_ok_and(|p| p.tools["t"].grants.sysv_ipc));
    let p = first_problem(&format!("{HEAD}[tools.read_file]\nplugin = \"fs\"\nsysv_ipc = true\n"));
    assert!(p.message.contains("sysv_ipc applies to process tools"), "{}", p.message);
    let p = first_problem(&format!("{HEAD}[tools.read_file]\nplugin = \"fs\"\ninotify = true\n"));
    assert!(p.message.contains("inotify applies to process tools"), "{}", p.message);
}

const BG: &str =
    "[tools.bg]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\nbackground = true\nlimits = { timeout = \"6h\" }\n";

#[test]
fn background_tools_may_run_for_hours_and_max_jobs_defaults_to_four() {
    let p = load(&format!("{HEAD}{BG}")).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.tools["bg"].background);
    assert_eq!(p.tools["bg"].limits.timeout, std::time::Duration::from_secs(6 * 3600));
    assert_eq!(p.max_jobs, DEFAULT_MAX_JOBS);
    let p = load(&format!("{HEAD}[defaults]\nmax_jobs = 9\n{BG}")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.max_jobs, 9);
}

#[test]
fn max_jobs_out_of_range_is_named() {
    for n in ["0", "-1", "100000"] {
        let p = first_problem(&format!("{HEAD}[defaults]\nmax_jobs = {n}\n"));
        assert!(p.message.contains("[defaults] max_jobs must be from 1 to"), "{}", p.message);
    }
}

#[test]
fn job_tool_names_are_reserved_while_a_tool_is_background() {
    let job_status = "[tools.job_status]\nexec = [\"/bin/true\"]\n";
    let p = first_problem(&format!("{HEAD}{BG}{job_status}"));
    assert!(p.message.contains("tool job_status: this name belongs to warden's own job tools"), "{}", p.message);
    assert!(p.message.contains("tool bg has `background = true`"), "{}", p.message);
    // Without a background tool the name is free.
    load(&format!("{HEAD}{job_status}")).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn background_is_refused_on_servers_and_with_cache() {
    let p = first_problem(&format!("{HEAD}[servers.s]\nexec = [\"/bin/true\"]\nbackground = true\n"));
    assert!(p.message.contains("server s: `background` does not apply to a server"), "{}", p.message);
    let p = first_problem(&format!(
        "{HEAD}[tools.read_file]\nplugin = \"fs\"\ntier = \"auto\"\nfs.read = [\"{{workspace}}\"]\ncache = \"60s\"\nbackground = true\n"
    ));
    assert!(p.message.contains("`background = true` and `cache` do not go together"), "{}", p.message);
    // A server's tool may be background.
    let p = load(&format!("{HEAD}[servers.s]\nexec = [\"/bin/true\"]\n[tools.\"s__t\"]\nbackground = true\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(p.tools["s__t"].background);
}

#[test]
fn a_tool_with_neither_exec_nor_plugin_only_lends_its_walls() {
    let p = load("version = 1\n[tools.run]\nfs.read = [\"{workspace}\"]\n").unwrap_or_else(|e| panic!("{e}"));
    match &p.tools["run"].runner {
        Runner::Process(exec) => assert!(exec.argv.is_empty() && exec.params.is_empty()),
        _ => panic!("a run-only tool is a process tool without a program"),
    }
    for key in ["args = [\"x\"]", "cache = \"1m\"", "background = true", "input_schema = '{\"type\":\"object\"}'"] {
        let problem = first_problem(&format!("version = 1\n[tools.run]\n{key}\n"));
        assert!(
            problem.message.contains("only lends its walls to `warden run --tool run -- CMD`"),
            "{key}: {problem:?}"
        );
    }
}

const CRED: &str = r#"version = 1
[credentials.gh]
from = { env = "GH_TOKEN" }
variable = "GH_TOKEN"
[[credentials.gh.bind]]
host = "api.github.com"
inject = "bearer"
methods = ["get"]
paths = ["/repos/acme/"]
[[credentials.gh.bind]]
host = "github.com"
inject = "basic"
always = true
"#;

const HOLDER: &str =
    "[tools.gh]\nexec = [\"/bin/true\"]\nnet.connect = [\"api.github.com:443\"]\ncredentials = [\"gh\"]\n";

#[test]
fn a_tool_holds_the_credentials_it_names() {
    let p = load(&format!("{CRED}{HOLDER}")).unwrap_or_else(|e| panic!("{e}"));
    let held = &p.tools["gh"].grants.credentials;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].variable, "GH_TOKEN");
    assert_eq!(held[0].binds[0].methods, ["GET"]);
    assert_eq!(held[0].binds[1].user, "x-access-token");
    assert!(held[0].binds[0].covers("API.github.com.", 443, "GET", "/repos/acme/x"));
    assert!(!held[0].binds[0].covers("api.github.com", 443, "POST", "/repos/acme/x"));
    assert!(!held[0].binds[0].covers("api.github.com", 443, "GET", "/repos/other"));
    assert_eq!(p.credentials["gh"].source, crate::Source::Env("GH_TOKEN".into()));
}

#[test]
fn credential_mistakes_are_refused_naming_the_key() {
    let cases: &[(String, &str)] = &[
        (format!("{CRED}{HOLDER}").replace("credentials = [\"gh\"]", "credentials = [\"gx\"]"), "no [credentials.gx]"),
        (format!("{CRED}{HOLDER}env.set = {{ GH_TOKEN = \"x\" }}\n"), "env.pass or env.set also names"),
        (
            format!("{CRED}{HOLDER}[tools.other]\nexec = [\"/bin/true\"]\nenv.pass = [\"GH_TOKEN\"]\n"),
            "passes GH_TOKEN",
        ),
        (
            format!("{CRED}{HOLDER}[tools.other]\nexec = [\"/bin/true\"]\nfs.read = [\"/etc/warden\"]\n")
                .replace("{ env = \"GH_TOKEN\" }", "{ file = \"/etc/warden/gh\" }"),
            "may read /etc/warden/gh",
        ),
        (
            format!("{CRED}{HOLDER}")
                .replace("net.connect = [\"api.github.com:443\"]", "net.connect = [\"x.org:443\"]"),
            "does not grant",
        ),
        (CRED.replace("host = \"api.github.com\"", "host = \"10.0.0.1\""), "one DNS name"),
        (CRED.replace("host = \"api.github.com\"", "host = \"*.github.com\""), "one DNS name"),
        (CRED.replace("inject = \"bearer\"", "inject = \"cookie\""), "credentials.gh.bind.inject"),
        (CRED.replace("inject = \"bearer\"", "inject = { header = \"Host\" }"), "credentials.gh.bind.inject"),
        (CRED.replace("from = { env = \"GH_TOKEN\" }", "from = { env = \"A\", file = \"/x\" }"), "exactly one of"),
        (CRED.replace("from = { env = \"GH_TOKEN\" }", "from = { file = \"rel/path\" }"), "absolute path"),
        (CRED.replace("paths = [\"/repos/acme/\"]", "paths = [\"/a/../b\"]"), "a path prefix"),
        (
            format!(
                "{HEAD}{}[tools.r]\nplugin = \"fs\"\ncredentials = [\"gh\"]\n",
                CRED.replacen("version = 1\n", "", 1)
            ),
            "process tools",
        ),
    ];
    for (text, needle) in cases {
        let p = first_problem(text);
        assert!(p.message.contains(needle), "{needle:?} not in {:?}", p.message);
    }
}
