//! `tributary plugin ...`: tools for people who write transform plugins.
//!
//! `check` loads a plugin as a pipeline would and says what it declared and reads; `test`
//! runs it on sample changes written as JSON lines ([`changes`]) and prints what it lands;
//! `new` writes a plugin to start from ([`scaffold`]); `cache` shows or clears the compiled
//! plugins kept across starts.
//!
//! `componentize` turns the core WebAssembly module that a C (or any wasm32-wasi) toolchain
//! links into the component Tributary loads. wit-bindgen's C generator leaves the world's
//! component type in a custom section of the module (its `*_component_type.o`); the WASI
//! preview1 imports that wasi-libc makes are bridged to WASI 0.2 by the reactor adapter, which
//! this binary carries (the one of the wasmtime release Tributary is built with).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use tributary::transform::{HostLimits, Processed, TransformChain, TransformSpec};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wasmparser::{Parser, Payload};
use wit_component::{ComponentEncoder, DecodedWasm};

mod changes;
mod landed;
mod scaffold;
mod summary;

/// The interface every transform plugin exports.
const PLUGIN_EXPORT: &str = "tributary:transform/plugin@1.0.0";

/// The prefix of the custom sections in which wit-bindgen leaves a world's component type.
const COMPONENT_TYPE_SECTION: &str = "component-type";

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Turn a core WebAssembly module into a plugin component.
    ///
    /// The module is what clang and wasm-ld wrote for wasm32-wasi, linked with the
    /// `*_component_type.o` that `wit-bindgen c` generated for the transform world. Its WASI
    /// preview1 imports are bridged by the WASI reactor adapter built into this binary.
    Componentize(ComponentizeArgs),
    /// Load a plugin as a pipeline would and say what it is, declares and reads.
    ///
    /// Compiles the component, calls `describe` and `init` with the settings given, and prints
    /// its name, version, SHA-256, contract, declared outputs and their columns, reshapes, and
    /// what it reads. A plugin that cannot be loaded or refuses its settings is an error.
    Check(CheckArgs),
    /// Run a plugin on sample changes and print what it lands, per output.
    ///
    /// Reads the changes (JSON lines, below) into one batch of transactions, loads the plugin
    /// with the settings given, and prints the rows the batch lands in each output: a table per
    /// output, or with --json one object per row. A change the plugin rejects is an error, as
    /// under a pipeline's default failure policy.
    #[command(after_long_help = changes::FORMAT)]
    Test(TestArgs),
    /// Write a new plugin to start from, in Rust, Python, JavaScript or C.
    ///
    /// The plugin keeps every change as it came; it comes in its language's own layout, with
    /// its build and its test, and a comment says where to edit. The directory gets the contract (wit/transform.wit) and, for Rust, a copy of the guest
    /// SDK, so it builds with nothing but the language's own toolchain and registry.
    New(NewArgs),
    /// Show the cache of compiled plugins, or clear it.
    ///
    /// Each plugin build is compiled once and kept, so later starts load it at once. The cache
    /// keeps within TRIBUTARY_PLUGIN_CACHE_MIB (1024 by default), dropping the entries used
    /// least recently; TRIBUTARY_PLUGIN_CACHE names another directory.
    Cache(CacheArgs),
}

#[derive(Args)]
pub struct CacheArgs {
    /// Remove every compiled plugin (each compiles again at its next start).
    #[arg(long)]
    clear: bool,
}

/// The plugin and its settings, as a `[[transform]]` gives them.
#[derive(Args)]
pub struct PluginArgs {
    /// The plugin component (`.wasm`).
    #[arg(value_name = "PLUGIN.wasm")]
    plugin: PathBuf,
    /// A setting for `init`, as in the transform's `config = { ... }`; repeat for more.
    #[arg(long, value_name = "KEY=VALUE", value_parser = setting)]
    config: Vec<(String, String)>,
}

#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    plugin: PluginArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TestArgs {
    #[command(flatten)]
    plugin: PluginArgs,
    /// The sample changes, as JSON lines (the format ends `--help`); `-` reads them from
    /// stdin.
    #[arg(long, value_name = "FILE.jsonl")]
    changes: PathBuf,
    /// Print one JSON object per landed row instead of tables: output, op, commit_lsn, seq,
    /// sub, values by column name, old.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct NewArgs {
    /// The language to write the plugin in.
    #[arg(long, value_enum)]
    lang: scaffold::Lang,
    /// The plugin's name: lowercase ASCII letters, digits, '-' and '_', starting with a
    /// letter.
    name: String,
    /// The directory to write it into (default: ./NAME); it must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

fn setting(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("{text:?}: expected KEY=VALUE, like columns=email")),
    }
}

#[derive(Args)]
pub struct ComponentizeArgs {
    /// The core module (wasm32-wasi) to turn into a component.
    #[arg(value_name = "CORE.wasm")]
    module: PathBuf,
    /// Where to write the component.
    #[arg(long, short, value_name = "PLUGIN.wasm")]
    output: PathBuf,
    /// A WASI preview1 adapter module to use instead of the built-in reactor adapter.
    #[arg(long, value_name = "FILE")]
    adapter: Option<PathBuf>,
}

pub fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Componentize(args) => componentize_command(&args),
        PluginCommand::Check(args) => check_command(&args),
        PluginCommand::Test(args) => test_command(&args),
        PluginCommand::New(args) => new_command(&args),
        PluginCommand::Cache(args) => cache_command(&args),
    }
}

/// Load the plugin alone, with the default limits of a pipeline.
fn load(args: &PluginArgs) -> anyhow::Result<TransformChain> {
    let spec = TransformSpec {
        plugin: args.plugin.clone(),
        config: args.config.clone(),
        // A rejection stops, as by default in a pipeline: here that shows it as an error.
        on_error: Default::default(),
    };
    Ok(TransformChain::load(&[(spec, HostLimits::default())])?)
}

fn check_command(args: &CheckArgs) -> anyhow::Result<()> {
    let chain = load(&args.plugin)?;
    for summary in chain.summaries() {
        let report = summary::Report::of(&summary);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.text());
        }
    }
    Ok(())
}

fn test_command(args: &TestArgs) -> anyhow::Result<()> {
    let (source, text) = if args.changes == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the changes from stdin")?;
        ("stdin".to_owned(), text)
    } else {
        let text = std::fs::read_to_string(&args.changes)
            .with_context(|| format!("reading the changes {}", args.changes.display()))?;
        (args.changes.display().to_string(), text)
    };
    // The sample first: a mistake in it shows before the plugin is compiled.
    let batch = changes::read(&source, &text)?;
    let mut chain = load(&args.plugin)?;
    let landed = match batch.transactions.is_empty() {
        true => Vec::new(),
        false => {
            let mut processed = chain.process(batch)?;
            loop {
                let retry = match processed {
                    Processed::Done(landed) => break landed,
                    Processed::Retry(retry) => retry,
                };
                tracing::warn!(plugin = %retry.plugin, attempt = retry.attempt, "{retry}");
                std::thread::sleep(retry.due.saturating_duration_since(Instant::now()));
                processed = chain.resume(retry)?;
            }
        }
    };
    if args.json {
        let mut out = String::new();
        for output in &landed {
            for row in &output.rows {
                out.push_str(&landed::json_line(output, row));
                out.push('\n');
            }
        }
        print!("{out}");
    } else {
        print!("{}", landed::tables(&landed));
    }
    Ok(())
}

fn new_command(args: &NewArgs) -> anyhow::Result<()> {
    scaffold::check_name(&args.name)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let files = scaffold::files(args.lang, &args.name)?;
    scaffold::write(&dir, &files)?;
    print!("{}", scaffold::next_steps(args.lang, &args.name, &dir));
    Ok(())
}

fn cache_command(args: &CacheArgs) -> anyhow::Result<()> {
    use tributary::transform::cache::PluginCache;
    let cache = PluginCache::open()
        .context("no cache directory: set TRIBUTARY_PLUGIN_CACHE, XDG_CACHE_HOME or HOME")?;
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    if args.clear {
        let (count, bytes) = cache
            .clear()
            .with_context(|| format!("clearing {}", cache.dir().display()))?;
        println!(
            "removed {count} compiled plugin(s), {:.1} MiB, from {}",
            mib(bytes),
            cache.dir().display()
        );
        return Ok(());
    }
    let entries = cache
        .entries()
        .with_context(|| format!("reading {}", cache.dir().display()))?;
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!("cache     {}", cache.dir().display());
    println!(
        "bound     {} MiB (TRIBUTARY_PLUGIN_CACHE_MIB); the entries used least recently go first",
        cache.cap() >> 20
    );
    println!("entries   {}, {:.1} MiB", entries.len(), mib(total));
    let now = std::time::SystemTime::now();
    for entry in &entries {
        let ago = now.duration_since(entry.used).unwrap_or_default().as_secs();
        let ago = match ago {
            0..120 => format!("{ago} s"),
            120..7200 => format!("{} min", ago / 60),
            7200..172_800 => format!("{} h", ago / 3600),
            _ => format!("{} days", ago / 86_400),
        };
        println!(
            "  {:>7.1} MiB  used {ago} ago  {}",
            mib(entry.bytes),
            entry.path.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    Ok(())
}

fn componentize_command(args: &ComponentizeArgs) -> anyhow::Result<()> {
    let module = read(&args.module, "the core module")?;
    let adapter = match &args.adapter {
        Some(path) => {
            let bytes = read(path, "the adapter")?;
            if !Parser::is_core_wasm(&bytes) {
                bail!(
                    "the adapter {} is not a core WebAssembly module (a WASI preview1 adapter such as wasi_snapshot_preview1.reactor.wasm is)",
                    path.display()
                );
            }
            Adapter::File { path, bytes }
        }
        None => Adapter::BuiltIn,
    };
    let component = componentize(&module, adapter.bytes())
        .with_context(|| format!("componentizing {}", args.module.display()))?;
    std::fs::write(&args.output, &component)
        .with_context(|| format!("writing the component to {}", args.output.display()))?;

    let world = ComponentWorld::of(&component)
        .with_context(|| format!("reading back the component {}", args.output.display()))?;
    let adapter = if imports_wasi_preview1(&module) {
        adapter.to_string()
    } else {
        "none needed, the module makes no WASI calls".to_owned()
    };
    println!(
        "wrote {} ({} bytes; WASI adapter: {adapter})",
        args.output.display(),
        component.len(),
    );
    print!("{world}");
    if !world.exports.iter().any(|e| e == PLUGIN_EXPORT) {
        eprintln!(
            "warning: the component does not export {PLUGIN_EXPORT}, so Tributary will not load it as a transform plugin"
        );
    }
    Ok(())
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))
}

/// What bridges the module's WASI preview1 imports.
enum Adapter<'a> {
    BuiltIn,
    File { path: &'a Path, bytes: Vec<u8> },
}

impl Adapter<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Adapter::BuiltIn => WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            Adapter::File { bytes, .. } => bytes,
        }
    }
}

impl fmt::Display for Adapter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Adapter::BuiltIn => f.write_str("the built-in WASI preview1 reactor adapter"),
            Adapter::File { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

/// Encodes `module` (a core module carrying a component-type section) as a component, with
/// `adapter` bridging its WASI preview1 imports, and validates the result.
pub fn componentize(module: &[u8], adapter: &[u8]) -> anyhow::Result<Vec<u8>> {
    check_core_module(module)?;
    ComponentEncoder::default()
        .validate(true)
        .module(module)
        .context("reading the module's component type")?
        .adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, adapter)
        .context("loading the WASI preview1 adapter")?
        .encode()
}

/// Refuses what is not a core module with a component-type section, saying what it is.
fn check_core_module(bytes: &[u8]) -> anyhow::Result<()> {
    if Parser::is_component(bytes) {
        bail!(
            "it is a component already; componentize takes the core module that clang and wasm-ld wrote"
        );
    }
    if !Parser::is_core_wasm(bytes) {
        bail!(
            "it is not a WebAssembly module (no `\\0asm` header of version 1); give the .wasm file the linker wrote"
        );
    }
    let mut found = false;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.context("it is not a valid WebAssembly module")?;
        if let Payload::CustomSection(section) = payload
            && section.name().starts_with(COMPONENT_TYPE_SECTION)
        {
            found = true;
        }
    }
    if !found {
        bail!(
            "it has no `{COMPONENT_TYPE_SECTION}` custom section, which says what world the module implements; link the `*_component_type.o` that `wit-bindgen c` generated next to the bindings (e.g. transform_component_type.o) into the module"
        );
    }
    Ok(())
}

/// Whether the (already checked) core module imports anything from WASI preview1, which is
/// what the adapter is for.
fn imports_wasi_preview1(module: &[u8]) -> bool {
    Parser::new(0)
        .parse_all(module)
        .any(|payload| match payload {
            Ok(Payload::ImportSection(imports)) => imports.into_imports().any(|import| {
                import.is_ok_and(|import| import.module == WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME)
            }),
            _ => false,
        })
}

/// What a component imports and exports, by name (`tributary:transform/host@1.0.0`).
#[derive(Debug)]
pub struct ComponentWorld {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

impl ComponentWorld {
    pub fn of(component: &[u8]) -> anyhow::Result<Self> {
        let DecodedWasm::Component(resolve, world) = wit_component::decode(component)? else {
            bail!("it is a WIT package, not a component");
        };
        let world = &resolve.worlds[world];
        Ok(ComponentWorld {
            imports: world
                .imports
                .keys()
                .map(|k| resolve.name_world_key(k))
                .collect(),
            exports: world
                .exports
                .keys()
                .map(|k| resolve.name_world_key(k))
                .collect(),
        })
    }
}

impl fmt::Display for ComponentWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for name in &self.exports {
            writeln!(f, "  exports {name}")?;
        }
        for name in &self.imports {
            writeln!(f, "  imports {name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIT: &str = include_str!("../../../guest-sdk/wit/transform.wit");

    /// A core module shaped like what clang makes of wit-bindgen's C bindings for the
    /// transform world, with one WASI preview1 import, and its component type embedded.
    fn core_module(with_component_type: bool) -> Vec<u8> {
        let mut module = wat::parse_str(
            r#"(module
                (import "tributary:transform/host@1.0.0" "log"
                    (func (param i32 i32 i32 i32 i32)))
                (import "wasi_snapshot_preview1" "fd_write"
                    (func (param i32 i32 i32 i32) (result i32)))
                (memory (export "memory") 1)
                (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
                (func (export "tributary:transform/plugin@1.0.0#describe") (result i32) unreachable)
                (func (export "tributary:transform/plugin@1.0.0#init")
                    (param i32 i32) (result i32) unreachable)
                (func (export "tributary:transform/plugin@1.0.0#process")
                    (param i32 i32 i32 i32 i32 i32) (result i32) unreachable)
            )"#,
        )
        .expect("the test module parses");
        if with_component_type {
            let mut resolve = wit_parser::Resolve::new();
            let package = resolve
                .push_str("transform.wit", WIT)
                .expect("the WIT parses");
            let world = resolve
                .select_world(&[package], Some("transform"))
                .expect("the WIT has the transform world");
            wit_component::embed_component_metadata(
                &mut module,
                &resolve,
                world,
                wit_component::StringEncoding::UTF8,
            )
            .expect("embedding the component type");
        }
        module
    }

    fn error_of(result: anyhow::Result<Vec<u8>>) -> String {
        format!("{:#}", result.expect_err("componentize should refuse this"))
    }

    #[test]
    fn a_module_with_its_component_type_becomes_a_transform_component() {
        let component = componentize(&core_module(true), WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
            .expect("componentize");
        assert!(Parser::is_component(&component));
        let world = ComponentWorld::of(&component).expect("decode");
        assert_eq!(world.exports, [PLUGIN_EXPORT]);
        assert!(
            world
                .imports
                .iter()
                .any(|i| i == "tributary:transform/host@1.0.0"),
            "{world}"
        );
        // fd_write came through the adapter as WASI 0.2 streams.
        assert!(
            world
                .imports
                .iter()
                .any(|i| i.starts_with("wasi:io/streams@0.2")),
            "{world}"
        );
        assert!(
            !world.imports.iter().any(|i| i.contains("preview1")),
            "{world}"
        );
    }

    #[test]
    fn the_adapter_is_needed_only_for_wasi_imports() {
        assert!(imports_wasi_preview1(&core_module(true)));
        let no_wasi = wat::parse_str(r#"(module (import "env" "f" (func)))"#).unwrap();
        assert!(!imports_wasi_preview1(&no_wasi));
    }

    #[test]
    fn a_component_is_refused_as_one() {
        let component = componentize(&core_module(true), WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
            .expect("componentize");
        let error = error_of(componentize(
            &component,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        ));
        assert!(error.contains("is a component already"), "{error}");
    }

    #[test]
    fn a_module_without_component_type_names_the_object_to_link() {
        let error = error_of(componentize(
            &core_module(false),
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        ));
        assert!(
            error.contains("no `component-type` custom section"),
            "{error}"
        );
        assert!(error.contains("_component_type.o"), "{error}");
    }

    #[test]
    fn other_files_are_refused_as_not_webassembly() {
        for bytes in [&b""[..], b"#!/bin/sh\n", b"\0asm\x02\0\0\0"] {
            let error = error_of(componentize(bytes, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER));
            assert!(error.contains("not a WebAssembly module"), "{error}");
        }
    }

    #[test]
    fn a_truncated_module_is_refused_as_invalid() {
        let mut module = core_module(true);
        module.truncate(module.len() - 3);
        let error = error_of(componentize(
            &module,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        ));
        assert!(error.contains("not a valid WebAssembly module"), "{error}");
    }

    #[test]
    fn a_bad_adapter_is_reported_as_such() {
        let error = error_of(componentize(&core_module(true), b"\0asm\x01\0\0\0"));
        assert!(error.contains("adapter"), "{error}");
    }
}
