#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, HeapType, Module, RefType, TableSection,
    TableType, TypeSection, ValType,
};

/// The cache key and the pin of the builtin come from `build.rs`'s hash.
#[test]
fn a_plugin_file_that_is_a_fifo_or_a_device_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fifo = dir.path().join("x.wasm");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
    let e = read_component_file(&fifo).err().unwrap_or_else(|| panic!("a FIFO was read"));
    assert!(e.1.contains("not a regular file"), "{}", e.1);
    let zero = dir.path().join("z.wasm");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap_or_else(|e| panic!("{e}"));
    let e = read_component_file(&zero).err().unwrap_or_else(|| panic!("/dev/zero was read"));
    assert!(e.1.contains("not a regular file"), "{}", e.1);
    let file = dir.path().join("ok.wasm");
    std::fs::write(&file, b"\0asm").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read_component_file(&file).unwrap_or_default(), b"\0asm");
}

#[test]
fn the_builtin_hash_is_the_embedded_bytes_hash() {
    assert_eq!(BUILTIN_FS_SHA256, hex::encode(Sha256::digest(BUILTIN_FS)));
    assert_eq!(BUILTIN_NET_SHA256, hex::encode(Sha256::digest(BUILTIN_NET)));
}

/// A core module with a funcref table of `initial` elements and `grow(n) -> old size or -1`.
fn table_module(initial: u64) -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I32]);
    let mut funcs = FunctionSection::new();
    funcs.function(0);
    let mut tables = TableSection::new();
    tables.table(TableType {
        element_type: RefType::FUNCREF,
        table64: false,
        minimum: initial,
        maximum: None,
        shared: false,
    });
    let mut exports = ExportSection::new();
    exports.export("grow", ExportKind::Func, 0);
    let mut f = Function::new([]);
    f.instructions().ref_null(HeapType::FUNC).local_get(0).table_grow(0).end();
    let mut code = CodeSection::new();
    code.function(&f);
    let mut m = Module::new();
    m.section(&types).section(&funcs).section(&tables).section(&exports).section(&code);
    m.finish()
}

fn walls() -> Walls {
    let limits = crate::policy::Limits {
        timeout: Duration::from_secs(10),
        memory: 64 << 20,
        max_output: 1 << 20,
        cpu: Duration::from_secs(10),
        processes: 1,
        open_files: 8,
        file_size: 0,
        tmp_size: 0,
        tmp_files: 0,
    };
    Walls::nothing(PathBuf::from("/"), limits)
}

/// Table growth is bounded like memory: a guest asking for a million more
/// elements gets -1 (the limiter refuses, and says so), small growth works,
/// and a module that declares a table past the bound does not instantiate.
/// A core module in warden's own engine and store: no Rust guest can emit
/// `table.grow`, and the limiter is the store's whatever the module is.
#[test]
fn tables_cannot_grow_past_the_bound() {
    let rt = ComponentRuntime::new(None).unwrap();
    let (mut store, _, _) = rt.store("t", &walls(), Cancel::new(), &[], None).unwrap();
    let module = wasmtime::Module::new(&rt.started().unwrap().engine, table_module(1)).unwrap();
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
    let grow = instance.get_typed_func::<u32, i32>(&mut store, "grow").unwrap();
    assert_eq!(grow.call(&mut store, 1_000_000).unwrap(), -1, "a million elements were granted");
    assert!(store.data().limiter.refused, "the refusal is not recorded (it would not be reported)");
    assert_eq!(grow.call(&mut store, 10).unwrap(), 1, "a small growth is refused");
    assert_eq!(grow.call(&mut store, u32::MAX).unwrap(), -1);

    let (mut store, _, _) = rt.store("t", &walls(), Cancel::new(), &[], None).unwrap();
    let huge = wasmtime::Module::new(&rt.started().unwrap().engine, table_module(MAX_TABLE_ELEMENTS as u64 * 10));
    let instantiated = huge.and_then(|m| wasmtime::Instance::new(&mut store, &m, &[]));
    assert!(instantiated.is_err(), "a table of {} elements was created", MAX_TABLE_ELEMENTS * 10);
}
