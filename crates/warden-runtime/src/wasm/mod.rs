//! The component runtime ([`ComponentRuntime`]): wasmtime + wasmtime-wasi, one
//! engine per process, configured in one place ([`engine_config`]); each call
//! gets a fresh `Store` from a cached `InstancePre`. Guest code is untrusted:
//! its authority is exactly the call's [`Walls`] (preopens, an explicit
//! environment, captured output, the network of its grants), its memory capped
//! by a [`ResourceLimiter`], its time by an epoch deadline ([`TICK`]) and an
//! outer wait; protected paths are enforced in the filesystem interface (module
//! `guard`). docs/security.md, "Component tools".

pub(crate) mod cache;
mod guard;
mod invoke;
pub(crate) mod net;
mod pipe;
mod rich;
mod threads;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use threads::CallThreads;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use self::cache::ComponentCache;
use self::pipe::CappedPipe;
use super::{Cancel, OutputTap, RunOutput, SandboxReport, Stream, ToolDef, Usage, Walls, capture};
use crate::error::{CallError, ErrorCode};
use crate::policy::{MAX_COMPONENT_MEMORY, PluginKind, PluginSource, PluginSpec};

use self::invoke::{run_command_in_store, run_in_store};

/// `warden:plugin@0.1.0`: `call` returns one JSON document.
mod bindings {
    wasmtime::component::bindgen!({ world: "plugin", path: "../../plugins/wit" });
}

/// `warden:plugin@0.2.0`: `call` returns MCP content blocks and structured
/// content, and the guest may report progress ([`rich`]).
mod bindings_v2 {
    wasmtime::component::bindgen!({ world: "plugin", path: "../../plugins/wit-0.2.0" });
}

/// The export that marks a `warden:plugin@0.2.0` component.
const TOOL_V2_EXPORT: &str = "warden:plugin/tool@0.2.0";

use bindings::exports::warden::plugin::tool::ToolError;
use bindings::{Plugin, PluginPre};
use wasmtime_wasi::p2::bindings::sync::CommandPre;

/// How often the epoch advances; deadlines are counted in ticks.
pub const TICK: Duration = Duration::from_millis(10);
/// The largest component file warden loads.
pub const MAX_COMPONENT_FILE: u64 = 64 << 20;
/// Extra wall time the outer wait allows past the epoch deadline.
const OUTER_GRACE: Duration = Duration::from_secs(2);
/// How often the outer wait looks at the cancel switch.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// The error a cancelled component traps with.
#[derive(Debug)]
struct CancelledByCaller;

impl std::fmt::Display for CancelledByCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cancelled by the caller")
    }
}

impl std::error::Error for CancelledByCaller {}
/// Limits for `describe()`, which runs once at load.
const DESCRIBE_MEMORY: u64 = 64 << 20;
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The bytes of a reused instance slot's memory reset in place (see [`engine_config`]);
/// the builtin `fs` component touches about this much per call.
const KEEP_RESIDENT: usize = 4 << 20;
/// Most tables elements a call may grow to.
const MAX_TABLE_ELEMENTS: usize = 100_000;
use crate::builtin::{
    FS as BUILTIN_FS, FS_SHA256 as BUILTIN_FS_SHA256, NET as BUILTIN_NET, NET_SHA256 as BUILTIN_NET_SHA256,
};

/// A plugin's component bytes, their sha256 and its OCI signature annotation.
type SourceBytes = (std::borrow::Cow<'static, [u8]>, String, Option<String>);
/// A component's bytes after its pin and signature checks, their sha256, the accepted signer.
type CheckedBytes = (std::borrow::Cow<'static, [u8]>, String, Option<crate::signature::Verified>);

/// A loaded plugin: its hash, what it offers, and a ready-to-instantiate component.
pub struct LoadedPlugin {
    /// The policy's name for it.
    pub name: String,
    /// sha256 of the component bytes.
    pub sha256: String,
    /// Where it came from: `builtin:NAME` or `file:/abs/path`.
    pub source: String,
    /// The signer the policy's `signers` accepted (`None` when it lists none).
    pub signer: Option<crate::signature::Verified>,
    /// Its tools, from `describe()` (none for a command: the policy defines those).
    pub tools: Vec<ToolDef>,
    pre: Pre,
}

/// A component ready to instantiate, by the world it fits.
enum Pre {
    /// `warden:plugin@0.1.0`.
    Tool(PluginPre<HostState>),
    /// `warden:plugin@0.2.0`.
    ToolV2(bindings_v2::PluginPre<HostState>),
    /// `wasi:cli/command`.
    Command(CommandPre<HostState>),
}

impl LoadedPlugin {
    /// Where it came from, as a call's audit record names it (`component`).
    pub fn provenance(&self) -> serde_json::Value {
        let signer = self.signer.as_ref().map(|s| s.fingerprint.as_str());
        serde_json::json!({"plugin": self.name, "source": self.source, "sha256": self.sha256, "signer": signer})
    }
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin").field("name", &self.name).field("sha256", &self.sha256).finish()
    }
}

/// The per-store host state: the WASI context, the memory limiter, the
/// guard of the protected paths ([`guard`]), and the call's network ([`net`]:
/// its grants, lookups and `wasi:http` hook).
struct HostState {
    wasi: Wasi,
    limiter: MemoryLimiter,
    guard: guard::Guard,
    net: net::Net,
    http: wasmtime_wasi_http::WasiHttpCtx,
    /// Where the call's progress reports go (0.2.0 components).
    progress: crate::progress::Reporter,
}

impl bindings_v2::warden::plugin::host::Host for HostState {
    fn progress(&mut self, done: u64, total: Option<u64>, message: String) {
        self.progress.report(done, total, &message);
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView { ctx: &mut self.http, table: &mut self.wasi.table, hooks: &mut self.net }
    }
}

impl HostState {
    /// What warden refused during the call (a path, a destination), for its error.
    fn note(&self) -> Option<String> {
        match (self.guard.note(), self.net.note()) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        }
    }
}

/// The WASI context and its resources, apart from the rest of the state so
/// that the guarded filesystem can borrow it beside the guard.
struct Wasi {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Wasi {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.ctx, table: &mut self.table }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.wasi.ctx()
    }
}

/// Caps linear memory and tables, and remembers whether it refused a growth.
struct MemoryLimiter {
    memory: usize,
    peak: usize,
    refused: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory {
            self.refused = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }
    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }
    fn instances(&self) -> usize {
        64
    }
    fn memories(&self) -> usize {
        16
    }
    fn tables(&self) -> usize {
        64
    }
}

/// The engine's whole configuration.
fn engine_config(pooling: bool) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.memory_init_cow(true);
    c.parallel_compilation(true);
    c.max_wasm_stack(1 << 20);
    if pooling {
        let mut p = PoolingAllocationConfig::new();
        p.total_component_instances(64);
        p.total_core_instances(512);
        p.total_memories(128);
        p.total_tables(256);
        // Calls are synchronous: no fiber stacks. The default (1000) costs a
        // guard-page mprotect each at start and their unmapping at exit, about
        // a third of a one-shot `warden call`.
        p.total_stacks(0);
        // A reused slot's memory is zeroed in place up to this much instead of
        // being given back to the kernel and faulted in again page by page.
        p.linear_memory_keep_resident(KEEP_RESIDENT);
        p.table_keep_resident(64 << 10);
        p.max_memory_size(MAX_COMPONENT_MEMORY as usize);
        p.max_unused_warm_slots(16);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
    }
    c
}

/// Runs component tools.
pub struct ComponentRuntime {
    cache_dir: Option<PathBuf>,
    /// One call and exit (`warden call`): instances are allocated on demand,
    /// not from a pool whose reservation and teardown cost more than the call.
    one_shot: bool,
    /// wasmtime, started on first use: a `warden call` of a process tool
    /// never builds an engine, its pool or its linker.
    started: OnceLock<Result<Started, CallError>>,
    loaded: Mutex<HashMap<String, Arc<LoadedPlugin>>>,
    threads: CallThreads,
}

/// The engine, the linker and the compiled-component cache.
struct Started {
    engine: Engine,
    linker: Linker<HostState>,
    cache: ComponentCache,
}

impl Started {
    fn new(cache_dir: Option<PathBuf>, pooling: bool) -> Result<Started, CallError> {
        let engine = match Engine::new(&engine_config(pooling)) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("pooling allocator unavailable ({e:#}); allocating instances on demand");
                Engine::new(&engine_config(false)).map_err(|e| {
                    CallError::new(ErrorCode::SandboxUnavailable, format!("cannot start wasmtime: {e:#}"))
                })?
            }
        };
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("warden-epoch".into())
            .spawn(move || {
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(TICK);
                }
            })
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot start the epoch ticker: {e}")))?;
        let mut linker = Linker::new(&engine);
        guard::add_to_linker(&mut linker)
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot link WASI: {e:#}")))?;
        // wasi:http for every component; the call's grants decide in the send hook ([`net`]).
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot link wasi:http: {e:#}")))?;
        // warden:plugin@0.2.0's host interface (progress); 0.1.0 components do not import it.
        bindings_v2::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot link warden:plugin/host: {e:#}")))?;
        let cache = ComponentCache::new(&engine, cache_dir);
        Ok(Started { engine, linker, cache })
    }
}

impl std::fmt::Debug for ComponentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentRuntime").finish_non_exhaustive()
    }
}

impl crate::Runtime for ComponentRuntime {
    type Target = Arc<LoadedPlugin>;

    fn report(&self, walls: &Walls) -> SandboxReport {
        Self::sandbox_report(walls)
    }

    fn run(&self, plugin: &Arc<LoadedPlugin>, call: crate::Invocation<'_>) -> Result<RunOutput, CallError> {
        let crate::Invocation { tool, input, walls, tmp: _, watch } = call;
        match input {
            crate::Input::Args(args) => self.call(plugin, tool, args.to_string(), walls, watch),
            crate::Input::Argv(argv) => self.run_command(plugin, tool, argv, walls, watch.cancel, watch.tap),
        }
    }
}

impl ComponentRuntime {
    /// A runtime whose compiled components are cached in `cache_dir` (`None`: no cache).
    /// A runtime whose engine starts on first use ([`ComponentRuntime::started`]).
    pub fn new(cache_dir: Option<PathBuf>) -> Result<ComponentRuntime, CallError> {
        Ok(ComponentRuntime {
            cache_dir,
            one_shot: false,
            started: OnceLock::new(),
            loaded: Mutex::default(),
            threads: CallThreads::default(),
        })
    }

    /// [`ComponentRuntime::new`] for a process that makes one call and exits:
    /// no instance pool (its reservation and teardown cost more than one call).
    pub fn one_shot(cache_dir: Option<PathBuf>) -> ComponentRuntime {
        ComponentRuntime {
            cache_dir,
            one_shot: true,
            started: OnceLock::new(),
            loaded: Mutex::default(),
            threads: CallThreads::default(),
        }
    }

    /// The engine, linker and cache, started now if they were not (a failure is kept and repeated).
    fn started(&self) -> Result<&Started, CallError> {
        self.started.get_or_init(|| Started::new(self.cache_dir.clone(), !self.one_shot)).as_ref().map_err(Clone::clone)
    }

    /// The interfaces a component imports (what it could ask the host for),
    /// sorted; compiles it (or takes it from the cache) without running it.
    pub fn imports(&self, bytes: &[u8]) -> Result<Vec<String>, CallError> {
        self.interfaces(bytes, |ty, engine| ty.imports(engine).map(|(name, _)| name.to_string()).collect())
    }

    /// The interfaces a component exports, sorted (`wasi:cli/run@…` marks a command program).
    pub fn exports(&self, bytes: &[u8]) -> Result<Vec<String>, CallError> {
        self.interfaces(bytes, |ty, engine| ty.exports(engine).map(|(name, _)| name.to_string()).collect())
    }

    /// The names `list` reads from a component's type, sorted; compiles it (or
    /// takes it from the cache) without running it.
    fn interfaces(
        &self,
        bytes: &[u8],
        list: impl Fn(&wasmtime::component::types::Component, &Engine) -> Vec<String>,
    ) -> Result<Vec<String>, CallError> {
        let sha256 = hex::encode(Sha256::digest(bytes));
        let rt = self.started()?;
        let component = rt.cache.load(&rt.engine, &sha256, bytes).map_err(|e| {
            CallError::new(ErrorCode::ExecutionFailed, format!("not a valid WebAssembly component: {e:#}"))
        })?;
        let mut names = list(&component.component_type(), &rt.engine);
        names.sort();
        Ok(names)
    }

    /// Loads (or returns the already loaded) plugin: reads it, checks its pin
    /// and its signature (`signers`), compiles it (or takes it from the cache) and calls `describe()`.
    pub fn load(&self, spec: &PluginSpec) -> Result<Arc<LoadedPlugin>, CallError> {
        if let Some(p) = self.loaded.lock().unwrap_or_else(PoisonError::into_inner).get(&spec.name) {
            return Ok(p.clone());
        }
        let fail = |code, msg: String| CallError::new(code, format!("plugin {} ({}): {msg}", spec.name, spec.location));
        let (bytes, sha256, signer) = self.checked_bytes(spec)?;
        let source = crate::signature::source_label(&spec.source);
        let rt = self.started()?;
        let component = rt
            .cache
            .load(&rt.engine, &sha256, &bytes)
            .map_err(|e| fail(ErrorCode::ExecutionFailed, format!("not a valid component: {e:#}")))?;
        if spec.kind == PluginKind::Command {
            let pre = rt.linker.instantiate_pre(&component).and_then(CommandPre::new).map_err(|e| {
                fail(
                    ErrorCode::ExecutionFailed,
                    format!(
                        "is declared kind = \"command\" but is not a wasi:cli/command component warden can \
                         link: {e:#}"
                    ),
                )
            })?;
            let pre = Pre::Command(pre);
            let loaded =
                Arc::new(LoadedPlugin { name: spec.name.clone(), sha256, source, signer, tools: Vec::new(), pre });
            self.loaded.lock().unwrap_or_else(PoisonError::into_inner).insert(spec.name.clone(), loaded.clone());
            return Ok(loaded);
        }
        let v2 = component.component_type().exports(&rt.engine).any(|(n, _)| n == TOOL_V2_EXPORT);
        let pre = rt
            .linker
            .instantiate_pre(&component)
            .and_then(|pre| {
                if v2 { bindings_v2::PluginPre::new(pre).map(Pre::ToolV2) } else { PluginPre::new(pre).map(Pre::Tool) }
            })
            .map_err(|e| {
                let hint = if component.component_type().exports(&rt.engine).any(|(n, _)| n.starts_with("wasi:cli/run"))
                {
                    " (it exports wasi:cli/run: a command program is declared with kind = \"command\")"
                } else {
                    ""
                };
                let world = if v2 { "warden:plugin@0.2.0" } else { "warden:plugin@0.1.0" };
                fail(ErrorCode::ExecutionFailed, format!("does not fit the {world} world: {e:#}{hint}"))
            })?;
        let limits = crate::policy::Limits {
            timeout: DESCRIBE_TIMEOUT,
            memory: DESCRIBE_MEMORY,
            max_output: 1 << 20,
            cpu: DESCRIBE_TIMEOUT,
            processes: 1,
            open_files: 1,
            file_size: 0,
            tmp_size: 0,
            tmp_files: 0,
        };
        let walls = Walls::nothing(PathBuf::from("/"), limits);
        let (mut store, _out, _err) = self.store("describe", &walls, Cancel::new(), &[], None)?;
        let described: wasmtime::Result<Vec<ToolDef>> = match &pre {
            Pre::Tool(pre) => {
                pre.instantiate(&mut store).and_then(|p| p.warden_plugin_tool().call_describe(&mut store)).map(|t| {
                    t.into_iter()
                        .map(|t| ToolDef { name: t.name, description: t.description, input_schema: t.input_schema })
                        .collect()
                })
            }
            Pre::ToolV2(pre) => {
                pre.instantiate(&mut store).and_then(|p| p.warden_plugin_tool().call_describe(&mut store)).map(|t| {
                    t.into_iter()
                        .map(|t| ToolDef { name: t.name, description: t.description, input_schema: t.input_schema })
                        .collect()
                })
            }
            Pre::Command(_) => Ok(Vec::new()),
        };
        let tools = described.map_err(|e| fail(ErrorCode::ExecutionFailed, format!("describe() failed: {e:#}")))?;
        let loaded = Arc::new(LoadedPlugin { name: spec.name.clone(), sha256, source, signer, tools, pre });
        self.loaded.lock().unwrap_or_else(PoisonError::into_inner).insert(spec.name.clone(), loaded.clone());
        Ok(loaded)
    }

    /// The interfaces `spec`'s component imports, read from wherever its source
    /// keeps it (a file, a registry, warden itself) with the checks of
    /// [`Self::load`] up to its signature; nothing is instantiated.
    pub fn plugin_imports(&self, spec: &PluginSpec) -> Result<Vec<String>, CallError> {
        let (bytes, _, _) = self.checked_bytes(spec)?;
        self.imports(&bytes)
    }

    /// `spec`'s component bytes as far as they are checked before anything
    /// compiles them: read from their source, held to the policy's sha256 pin,
    /// then to its `signers` (an OCI component's signature comes from its
    /// manifest's annotation, a file's from its signature file); with their
    /// sha256 and the accepted signer.
    fn checked_bytes(&self, spec: &PluginSpec) -> Result<CheckedBytes, CallError> {
        let fail = |code, msg: String| CallError::new(code, format!("plugin {} ({}): {msg}", spec.name, spec.location));
        let (bytes, sha256, oci_signature) = self.source_bytes(spec)?;
        if let Some(pinned) = &spec.sha256
            && *pinned != sha256
        {
            return Err(fail(
                ErrorCode::Denied,
                format!(
                    "sha256 mismatch: the policy pins {pinned} but the component has {sha256}; the plugin is not \
                     loaded (update sha256 only if you trust the new component)"
                ),
            ));
        }
        let text = match oci_signature {
            Some(text) => Some(text),
            None => crate::signature::signature_text(spec).map_err(|(code, msg)| fail(code, msg))?,
        };
        let signer = crate::signature::check(spec, &bytes, text.as_deref()).map_err(|(code, msg)| fail(code, msg))?;
        Ok((bytes, sha256, signer))
    }

    /// A plugin's component bytes, their sha256 and, from an OCI manifest, its
    /// signature annotation (`dev.warden.signature.sshsig`).
    fn source_bytes(&self, spec: &PluginSpec) -> Result<SourceBytes, CallError> {
        let fail = |code, msg: String| CallError::new(code, format!("plugin {} ({}): {msg}", spec.name, spec.location));
        match &spec.source {
            PluginSource::Builtin(name) if name == "fs" => Ok((BUILTIN_FS.into(), BUILTIN_FS_SHA256.to_string(), None)),
            PluginSource::Builtin(name) if name == "net" => {
                Ok((BUILTIN_NET.into(), BUILTIN_NET_SHA256.to_string(), None))
            }
            PluginSource::Builtin(name) => Err(fail(ErrorCode::NotFound, format!("no builtin named {name}"))),
            PluginSource::File(path) => {
                let bytes = read_component_file(path).map_err(|(code, msg)| fail(code, msg))?;
                let sha256 = hex::encode(Sha256::digest(&bytes));
                Ok((bytes.into(), sha256, None))
            }
            PluginSource::Oci(r) => {
                let fetched = crate::oci::fetch(r, self.cache_dir.as_deref()).map_err(|e| {
                    let code = if e.integrity { ErrorCode::Denied } else { ErrorCode::ExecutionFailed };
                    fail(code, format!("source {r}: {}; the plugin is not loaded", e.message))
                })?;
                Ok((fetched.bytes.into(), fetched.sha256, fetched.signature))
            }
        }
    }

    /// A fresh store confined to `walls`, with its stdout and stderr pipes; it
    /// traps at the next epoch tick once `cancel` is switched on. `argv` is given
    /// to command components (empty for tool plugins).
    fn store(
        &self,
        tool: &str,
        walls: &Walls,
        cancel: Cancel,
        argv: &[String],
        tap: Option<&OutputTap>,
    ) -> Result<(Store<HostState>, CappedPipe, CappedPipe), CallError> {
        let cap = usize::try_from(walls.limits.max_output).unwrap_or(usize::MAX);
        let out = CappedPipe::new(cap).tapped(tap, Stream::Stdout);
        let err = CappedPipe::new(cap).tapped(tap, Stream::Stderr);
        let mut b = WasiCtxBuilder::new();
        // Must precede the preopens: each Dir captures it when opened.
        b.allow_blocking_current_thread(true);
        b.stdout(out.clone()).stderr(err.clone());
        // Components are granted directories only; a granted file is not reachable.
        for (dir, write) in walls.dirs.iter().filter(|(d, _)| d.is_dir()) {
            let perms = if *write { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            let guest = dir.to_string_lossy();
            let held = open_no_symlinks(dir)?;
            b.preopened_dir(&held.path, &guest, perms).map_err(|e| {
                CallError::new(
                    ErrorCode::SandboxUnavailable,
                    format!("cannot open granted directory {}: {e:#}", dir.display()),
                )
            })?;
        }
        // A command program resolves relative paths against a preopen named ".":
        // the workspace, when it is granted.
        if !argv.is_empty()
            && let Some((dir, write)) = walls.dirs.iter().find(|(d, _)| *d == walls.workspace && d.is_dir())
        {
            let perms = if *write { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            b.preopened_dir(dir, ".", perms).map_err(|e| {
                CallError::new(
                    ErrorCode::SandboxUnavailable,
                    format!("cannot open granted directory {}: {e:#}", dir.display()),
                )
            })?;
        }
        b.args(argv);
        let mut roots = String::new();
        for (dir, _) in walls.dirs.iter().filter(|(d, _)| d.is_dir()) {
            roots.push_str(&dir.to_string_lossy());
            roots.push('\n');
        }
        b.env("WARDEN_WORKSPACE", walls.workspace.to_string_lossy());
        b.env("WARDEN_ROOTS", roots);
        for (k, v) in &walls.env {
            b.env(k, v);
        }
        // The call's network ([`net`]): sockets and name lookups only with a
        // grant, each connect and each lookup answer judged by egress::rules.
        let policy = crate::egress::EgressPolicy {
            tool: tool.to_string(),
            grants: walls.net.clone(),
            allow_private: walls.allow_private,
            credentials: Vec::new(),
        };
        let deadline = Instant::now() + walls.limits.timeout;
        let net = net::Net::new(policy, walls.journal.clone(), deadline, walls.limits.max_output);
        b.allow_udp(false);
        b.allow_tcp(!walls.net.is_empty());
        b.allow_ip_name_lookup(!walls.net.is_empty());
        if !walls.net.is_empty() {
            b.socket_addr_check(net.socket_check());
        }
        let memory = usize::try_from(walls.limits.memory).unwrap_or(usize::MAX);
        let state = HostState {
            wasi: Wasi { ctx: b.build(), table: ResourceTable::new() },
            limiter: MemoryLimiter { memory, peak: 0, refused: false },
            guard: guard::Guard::new(walls.protect.clone(), crate::layer::roots_of(&walls.dirs, walls.tmp.as_deref())),
            net,
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            progress: crate::progress::Reporter::default(),
        };
        let mut store = Store::new(&self.started()?.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Every tick the callback looks at the cancel switch and counts down the timeout.
        let mut ticks_left = walls.limits.timeout.as_millis().div_ceil(TICK.as_millis()).max(1) as u64 + 1;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if cancel.is_cancelled() {
                return Err(wasmtime::Error::new(CancelledByCaller));
            }
            ticks_left = ticks_left.saturating_sub(1);
            if ticks_left == 0 {
                return Err(wasmtime::Error::new(Trap::Interrupt));
            }
            Ok(wasmtime::UpdateDeadline::Continue(1))
        });
        Ok((store, out, err))
    }

    /// Runs `tool` of `plugin` with `args` (a JSON object as text) inside `walls`;
    /// a 0.2.0 component's progress reports go to `progress` (or as lines to `tap`).
    ///
    /// The call runs on its own thread; if it has not finished by the timeout plus
    /// a grace period (for example blocked in a host call), it is abandoned with
    /// `TIMEOUT` and its epoch deadline ends it when it next runs guest code.
    fn call(
        &self,
        plugin: &Arc<LoadedPlugin>,
        tool: &str,
        args: String,
        walls: &Walls,
        watch: crate::Watch<'_>,
    ) -> Result<RunOutput, CallError> {
        let crate::Watch { cancel, tap, progress } = watch;
        let (mut store, out, err) = self.store(tool, walls, cancel.clone(), &[], tap)?;
        store.data_mut().progress = crate::progress::Reporter::new(tool, progress.cloned(), tap.cloned());
        let plugin = plugin.clone();
        let tool_name = tool.to_string();
        self.on_call_thread(tool, walls, cancel, move || {
            let mut store = store;
            let result = run_in_store(&mut store, &plugin, &tool_name, &args, out, err);
            (result, store)
        })
    }

    /// Runs the command component `plugin` as tool `tool` with `argv` (the program
    /// name first) inside `walls`: no stdin, stdout and stderr captured, the exit
    /// code reported, like a process tool.
    fn run_command(
        &self,
        plugin: &Arc<LoadedPlugin>,
        tool: &str,
        argv: Vec<String>,
        walls: &Walls,
        cancel: &Cancel,
        tap: Option<&OutputTap>,
    ) -> Result<RunOutput, CallError> {
        let (store, out, err) = self.store(tool, walls, cancel.clone(), &argv, tap)?;
        let plugin = plugin.clone();
        let tool_name = tool.to_string();
        let cap = usize::try_from(walls.limits.max_output).unwrap_or(usize::MAX);
        self.on_call_thread(tool, walls, cancel, move || {
            let mut store = store;
            let result = run_command_in_store(&mut store, &plugin, &tool_name, (out, err), cap);
            (result, store)
        })
    }

    /// Runs `job` on a call thread of its own ([`threads`]) and waits for it, within the timeout (plus a
    /// grace period) and the cancel switch. The store `job` hands back is dropped on the call thread
    /// after the result is delivered: resetting its instance slot (zeroing the memory it used) then
    /// overlaps the caller's shaping and audit record instead of delaying them.
    fn on_call_thread(
        &self,
        tool: &str,
        walls: &Walls,
        cancel: &Cancel,
        job: impl FnOnce() -> (Result<RunOutput, CallError>, Store<HostState>) + Send + 'static,
    ) -> Result<RunOutput, CallError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.threads
            .run(Box::new(move || {
                let (result, store) = job();
                Box::new(move || {
                    let _ = tx.send(result);
                    drop(store);
                })
            }))
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("{tool}: cannot start a call thread: {e}")))?;
        let started = Instant::now();
        let mut limit = walls.limits.timeout + OUTER_GRACE;
        let mut cancelled_at = None;
        loop {
            let waited = started.elapsed();
            if waited >= limit {
                break;
            }
            match rx.recv_timeout(CANCEL_POLL.min(limit - waited)) {
                Ok(result) => return result,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            if cancelled_at.is_none() && cancel.is_cancelled() {
                // The guest traps at its next tick; a host call in progress gets the grace period.
                cancelled_at = Some(started.elapsed());
                limit = limit.min(started.elapsed() + OUTER_GRACE);
            }
        }
        Err(match cancelled_at {
            Some(at) => CallError::new(
                ErrorCode::Cancelled,
                format!("{tool}: cancelled by the caller after {:.1}s", at.as_secs_f64()),
            ),
            None => CallError::new(
                ErrorCode::Timeout,
                format!("{tool}: did not finish within {:?} (limits.timeout)", walls.limits.timeout),
            ),
        })
    }

    /// What the component runtime enforces for these walls.
    fn sandbox_report(walls: &Walls) -> SandboxReport {
        SandboxReport {
            runtime: "component",
            landlock_abi: None,
            seccomp: false,
            rlimits: false,
            uid: None,
            processes: None,
            dirs: walls.dirs_text(),
            net: walls.net.iter().map(|g| g.to_string()).collect(),
            tmp_quota: None,
            memory: None,
            ipc: None,
            paths: (!walls.protect.is_empty()).then_some("wasi-host"),
            namespaces: Vec::new(),
            proc: None,
            metadata: None,
            view: None,
            egress: (!walls.net.is_empty()).then_some("wasi-host"),
        }
    }
}

/// A plugin's file, read once from one open descriptor: a regular file of at
/// most [`MAX_COMPONENT_FILE`] bytes. The file may sit where a tool can write
/// (a policy kept in the workspace names `plugins/x.wasm`): a FIFO put in its
/// place must not hang warden (opened non-blocking, then refused), nor a link
/// to `/dev/zero` exhaust its memory (refused; and the read stops at the bound
/// whatever the size says). The sha256 pin then judges the content.
fn read_component_file(path: &Path) -> Result<Vec<u8>, (ErrorCode, String)> {
    use crate::paths::ReadFail;
    crate::paths::read_regular(path, MAX_COMPONENT_FILE).map_err(|e| match e {
        ReadFail::Missing(e) | ReadFail::Io(e) => (ErrorCode::NotFound, format!("cannot read {}: {e}", path.display())),
        ReadFail::NotRegular => (ErrorCode::NotFound, format!("{} is not a regular file", path.display())),
        ReadFail::TooLarge => {
            (ErrorCode::LimitExceeded, format!("{} is larger than {MAX_COMPONENT_FILE} bytes", path.display()))
        }
    })
}

/// A granted directory opened without following any symbolic link (its path is
/// canonical: [`crate::resolve_grant`] resolved it), and the path
/// through which wasmtime opens that very directory again: `/proc/self/fd/N`
/// reopens the descriptor's own directory, never a path looked up anew. A link
/// planted since the check fails the call.
struct HeldDir {
    _fd: std::os::fd::OwnedFd,
    path: PathBuf,
}

fn open_no_symlinks(dir: &Path) -> Result<HeldDir, CallError> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags, openat2};
    use std::os::fd::AsRawFd;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = openat2(CWD, dir, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS).map_err(
        |e| {
            let why = if e == rustix::io::Errno::LOOP {
                "it now passes through a symbolic link (planted since warden checked it)".to_string()
            } else {
                e.to_string()
            };
            CallError::new(
                ErrorCode::PermissionDenied,
                format!("cannot open granted directory {}: {why}", dir.display()),
            )
        },
    )?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    if !path.exists() {
        // No /proc: the canonical path itself (checked a moment ago).
        return Ok(HeldDir { _fd: fd, path: dir.to_path_buf() });
    }
    Ok(HeldDir { _fd: fd, path })
}

fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map(Duration::from).unwrap_or_default()
}

#[cfg(test)]
mod tests;
