//! One plugin inside wasmtime: compile once, instantiate, call under limits, recover from
//! traps.
//!
//! All plugins share one [`Engine`], and one ticker thread advances its epoch every
//! [`EPOCH_TICK`]. A call's deadline is a number of ticks, so the time limit is enforced to
//! within a tick without the guest paying for fuel metering.
//!
//! The instance (and its `Store`) is reused across batches. Whatever goes wrong inside the
//! guest (a trap, the deadline, the memory cap) can leave its memory half-updated, so the
//! instance is dropped and the next call starts from a fresh one, with `describe` and `init`
//! run again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{Config, Engine, ResourceLimiter, Store, StoreLimits, Trap};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{Call, HostLimits, TransformError};

mod bindings {
    // The world that exports both interfaces and imports the column functions: its bindings
    // serve the plain `transform` and `columnar-transform` worlds too, since each exported
    // interface is looked up on its own and a plugin need not import what the linker offers.
    wasmtime::component::bindgen!({
        path: "../guest-sdk/wit",
        world: "columnar-functions",
    });
}

/// The WIT types, as the host sees them.
pub(super) mod wit {
    pub use super::bindings::tributary::transform::host::Level;
    pub use super::bindings::tributary::transform::types::*;
    /// The `columnar` interface's types.
    pub mod columnar {
        pub use super::super::bindings::exports::tributary::transform::columnar::*;
    }
    /// The column functions' types (`tributary:functions/columns`).
    pub mod functions {
        pub use super::super::bindings::tributary::functions::columns::*;
    }
}

use bindings::ColumnarFunctions;
use bindings::exports::tributary::transform::{columnar, plugin};

/// The contract this host serves, as plugins export it.
pub(super) const CONTRACT: &str = "tributary:transform/plugin@1.0.0";

/// The optional interface of batches by column, as plugins export it.
pub(super) const COLUMNAR: &str = "tributary:transform/columnar@1.0.0";

/// The column functions this host serves, as plugins import them.
pub(super) const FUNCTIONS: &str = "tributary:functions/columns@1.0.0";

/// How often the epoch advances.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What a guest may print to stdout or stderr per call before the rest is dropped.
const CAPTURE_BYTES: usize = 64 << 10;

/// The engine of plugins with `stack_bytes` of WebAssembly stack, with its epoch ticker
/// started. Plugins with the same stack limit share one engine (and its compiled code).
fn engine(stack_bytes: usize) -> Result<Engine, TransformError> {
    static ENGINES: OnceLock<Mutex<std::collections::HashMap<usize, Engine>>> = OnceLock::new();
    let mut engines = ENGINES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(engine) = engines.get(&stack_bytes) {
        return Ok(engine.clone());
    }
    let failed = |message: String| TransformError::Engine { message };
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.max_wasm_stack(stack_bytes);
    let engine = Engine::new(&config).map_err(|e| failed(format!("{e:#}")))?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("tributary-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map_err(|e| failed(format!("cannot start the epoch ticker: {e}")))?;
    engines.insert(stack_bytes, engine.clone());
    Ok(engine)
}

/// A loaded plugin: compiled, linked, described and initialized.
pub(super) struct Plugin {
    pub name: String,
    pub version: String,
    pub path: PathBuf,
    /// SHA-256 of the file, hex.
    pub digest: String,
    /// What `init` declared.
    pub setup: wit::Setup,
    config: Vec<(String, String)>,
    limits: HostLimits,
    pre: InstancePre<HostState>,
    exports: Exports,
    /// The live instance, if any: `None` after a trap until the next call.
    live: Option<Live>,
}

/// Where the interfaces the plugin exports are.
#[derive(Clone)]
struct Exports {
    plugin: plugin::GuestIndices,
    /// Set when the plugin exports [`COLUMNAR`].
    columnar: Option<columnar::GuestIndices>,
}

/// A live instance and its exports.
struct Bindings {
    plugin: plugin::Guest,
    columnar: Option<columnar::Guest>,
}

struct Live {
    store: Store<HostState>,
    bindings: Bindings,
}

impl Plugin {
    pub fn load(
        path: &Path,
        config: Vec<(String, String)>,
        limits: &HostLimits,
    ) -> Result<Plugin, TransformError> {
        let engine = &engine(limits.stack_bytes)?;
        let bytes = std::fs::read(path).map_err(|source| TransformError::Read {
            path: path.to_owned(),
            source,
        })?;
        let digest = hex(&Sha256::digest(&bytes));
        let invalid = |message: String| TransformError::Invalid {
            path: path.to_owned(),
            message,
        };
        if !bytes.starts_with(b"\0asm") {
            return Err(invalid(
                "not a WebAssembly file (it does not start with the bytes \\0asm); point \
                 transform.plugin at the plugin's built .wasm component"
                    .into(),
            ));
        }
        if !wasmparser_is_component(&bytes) {
            return Err(invalid(
                "a core WebAssembly module, not a component; build the plugin for \
                 wasm32-wasip2, or turn the core module (a C build, say) into a component with \
                 `tributary plugin componentize`"
                    .into(),
            ));
        }
        let component =
            compile(engine, path, &bytes, &digest).map_err(|e| invalid(format!("{e:#}")))?;
        let columnar = check_contract(engine, &component).map_err(invalid)?;
        let mut linker = Linker::<HostState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| invalid(format!("{e:#}")))?;
        ColumnarFunctions::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| invalid(format!("{e:#}")))?;
        check_imports(engine, &component).map_err(invalid)?;
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            invalid(format!(
                "{e:#}; a plugin may only import the tributary host interface, the column \
                 functions ({FUNCTIONS}) and WASI"
            ))
        })?;
        let mismatch = |contract: &str, e: wasmtime::Error| {
            invalid(format!(
                "{e:#}; its {contract} export does not match the contract \
                 (guest-sdk/wit/transform.wit)"
            ))
        };
        let exports = Exports {
            plugin: plugin::GuestIndices::new(&pre).map_err(|e| mismatch(CONTRACT, e))?,
            columnar: match columnar {
                true => Some(columnar::GuestIndices::new(&pre).map_err(|e| mismatch(COLUMNAR, e))?),
                false => None,
            },
        };
        let file_name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut plugin = Plugin {
            name: file_name,
            version: String::new(),
            path: path.to_owned(),
            digest,
            setup: wit::Setup {
                outputs: Vec::new(),
                reshapes: Vec::new(),
                interest: wit::Interest {
                    columns: None,
                    old_images: true,
                    messages: true,
                    whole_transactions: false,
                },
            },
            config,
            limits: limits.clone(),
            pre,
            exports,
            live: None,
        };
        let (info, setup) = plugin.start(Call::Load)?;
        plugin.name = info.name;
        plugin.version = info.version;
        plugin.setup = setup;
        Ok(plugin)
    }

    /// Another instance of the same plugin, with its settings and limits, for batches run
    /// beside this one's: it is instantiated and initialized at its first call, as after a
    /// trap, so making it costs no plugin call.
    pub fn fork(&self) -> Plugin {
        Plugin {
            name: self.name.clone(),
            version: self.version.clone(),
            path: self.path.clone(),
            digest: self.digest.clone(),
            setup: self.setup.clone(),
            config: self.config.clone(),
            limits: self.limits.clone(),
            pre: self.pre.clone(),
            exports: self.exports.clone(),
            live: None,
        }
    }

    /// Run `process` on the live instance, starting one if there is none.
    pub fn process(
        &mut self,
        batch: &wit::Batch,
        call: Call,
    ) -> Result<Result<wit::Processed, wit::Error>, TransformError> {
        if self.live.is_none() {
            self.start(call)?;
        }
        self.call(call, |bindings, store| {
            bindings.plugin.call_process(store, batch)
        })
    }

    /// Whether the plugin exports [`COLUMNAR`], and so takes its batches by column.
    pub fn is_columnar(&self) -> bool {
        self.exports.columnar.is_some()
    }

    /// Run `process-columns` on the live instance, starting one if there is none. Only for a
    /// plugin that [`is_columnar`](Plugin::is_columnar).
    pub fn process_columns(
        &mut self,
        batch: &wit::columnar::ColumnBatch,
        call: Call,
    ) -> Result<Result<wit::columnar::ColumnOutput, wit::Error>, TransformError> {
        if self.live.is_none() {
            self.start(call)?;
        }
        let plugin = self.name.clone();
        self.call(call, |bindings, store| match &bindings.columnar {
            Some(columnar) => columnar.call_process_columns(store, batch),
            None => Err(wasmtime::format_err!(
                "plugin {plugin:?} does not export {COLUMNAR}"
            )),
        })
    }

    /// The counters the plugin added to since the last call of this, by name.
    pub fn take_counters(&mut self) -> Vec<(String, u64)> {
        match &mut self.live {
            Some(live) => std::mem::take(&mut live.store.data_mut().counters)
                .into_iter()
                .collect(),
            None => Vec::new(),
        }
    }

    /// Instantiate, `describe`, and `init`; the instance stays live.
    fn start(&mut self, call: Call) -> Result<(wit::PluginInfo, wit::Setup), TransformError> {
        let mut store = Store::new(self.pre.engine(), HostState::new(&self.name, &self.limits));
        store.limiter(|state| &mut state.limiter);
        // What a plugin returns from one call is bounded by what it can hold: let it return
        // that much, not only the runtime's default of 128 MiB.
        store.set_hostcall_fuel(self.limits.memory_bytes.max(128 << 20));
        store.set_epoch_deadline(deadline_ticks(self.limits.call_timeout));
        let loaded = self.pre.instantiate(&mut store).and_then(|instance| {
            Ok(Bindings {
                plugin: self.exports.plugin.load(&mut store, &instance)?,
                columnar: match &self.exports.columnar {
                    Some(indices) => Some(indices.load(&mut store, &instance)?),
                    None => None,
                },
            })
        });
        let bindings = match loaded {
            Ok(bindings) => bindings,
            Err(error) => return Err(self.failure(call, &mut store, error)),
        };
        self.live = Some(Live { store, bindings });
        let info = self.call(call, |bindings, store| bindings.plugin.call_describe(store))?;
        let config = self.config.clone();
        let init = self.call(call, |bindings, store| {
            bindings.plugin.call_init(store, &config)
        })?;
        match init {
            Ok(setup) => Ok((info, setup)),
            Err(message) => {
                self.live = None;
                Err(TransformError::Init {
                    plugin: info.name,
                    path: self.path.clone(),
                    message,
                })
            }
        }
    }

    /// Call into the live instance under the deadline; any failure poisons the instance.
    fn call<R>(
        &mut self,
        call: Call,
        f: impl FnOnce(&Bindings, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, TransformError> {
        let Some(mut live) = self.live.take() else {
            return Err(TransformError::Plugin {
                plugin: self.name.clone(),
                message: "no live instance".into(),
            });
        };
        live.store
            .set_epoch_deadline(deadline_ticks(self.limits.call_timeout));
        live.store.data_mut().limiter.refused = None;
        let result = f(&live.bindings, &mut live.store);
        match result {
            Ok(value) => {
                live.store.data_mut().flush_output();
                self.live = Some(live);
                Ok(value)
            }
            Err(error) => Err(self.failure(call, &mut live.store, error)),
        }
    }

    /// Turn what wasmtime reported into an error a person can act on.
    fn failure(
        &self,
        call: Call,
        store: &mut Store<HostState>,
        error: wasmtime::Error,
    ) -> TransformError {
        let state = store.data_mut();
        let stderr = state.stderr.take();
        state.flush_output();
        let plugin = self.name.clone();
        let path = self.path.clone();
        if error.downcast_ref::<Trap>() == Some(&Trap::StackOverflow) {
            return TransformError::StackLimit {
                plugin,
                path,
                call,
                limit_kib: self.limits.stack_bytes >> 10,
            };
        }
        if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            let limit_ms = self.limits.call_timeout.as_millis();
            return TransformError::Timeout {
                plugin,
                path,
                limit_ms,
                call,
            };
        }
        if let Some(requested) = state.limiter.refused {
            return TransformError::MemoryLimit {
                plugin,
                path,
                limit: self.limits.memory_bytes,
                requested,
                call,
            };
        }
        // The wasm backtrace is for the plugin's author; the error keeps to one line.
        tracing::debug!(plugin = %plugin, "trap details: {error:?}");
        let mut message = match error.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            None => error.root_cause().to_string(),
        };
        let stderr = String::from_utf8_lossy(&stderr);
        let said: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        if !said.is_empty() {
            message.push_str("; the plugin wrote: ");
            message.push_str(&said.join(" "));
        }
        TransformError::Trap {
            plugin,
            path,
            message,
            call,
        }
    }
}

/// The component, from the compile cache when this engine compiled the same file before, else
/// compiled (saying so, and how long it took) and stored there.
///
/// The key is the file's SHA-256 and the engine's compatibility hash (wasmtime version,
/// target, settings), so a new plugin version, a new Tributary or another machine type
/// compiles afresh. An unreadable or stale cache entry is only a miss.
fn compile(
    engine: &Engine,
    path: &Path,
    bytes: &[u8],
    digest: &str,
) -> wasmtime::Result<Component> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let key = format!("{digest}-{:016x}", hasher.finish());
    let cache = super::cache::PluginCache::open();
    let cached = cache.as_ref().map(|cache| cache.entry(&key));
    if let Some(file) = cached.as_deref().filter(|f| f.is_file()) {
        let started = std::time::Instant::now();
        // SAFETY: the file is one this function serialized from a component it compiled with
        // an engine of the same compatibility hash, written to a temporary name and renamed
        // into place whole. It lives in the user's own cache directory: whoever can replace it
        // can replace the tributary binary as well.
        match unsafe { Component::deserialize_file(engine, file) } {
            Ok(component) => {
                tracing::debug!(
                    plugin = %path.display(),
                    "loaded the compiled plugin from {} in {} ms",
                    file.display(),
                    started.elapsed().as_millis()
                );
                if let Some(cache) = &cache {
                    cache.touch(file);
                }
                return Ok(component);
            }
            Err(error) => tracing::warn!(
                plugin = %path.display(),
                "cannot use the compiled plugin in {}, compiling again: {error:#}",
                file.display()
            ),
        }
    }
    tracing::info!(
        plugin = %path.display(),
        "compiling the plugin ({:.1} MiB); the first start of each plugin version does this once",
        bytes.len() as f64 / f64::from(1 << 20)
    );
    let started = std::time::Instant::now();
    let component = Component::new(engine, bytes)?;
    tracing::info!(
        plugin = %path.display(),
        "compiled the plugin in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if let (Some(cache), Some(file)) = (cache, cached) {
        match store_compiled(&component, &file) {
            Ok(()) => evict(&cache, &file),
            Err(error) => tracing::warn!(
                plugin = %path.display(),
                "cannot keep the compiled plugin in {} (the next start compiles again): {error}",
                file.display()
            ),
        }
    }
    Ok(component)
}

/// Keeps the cache inside its bound after a new entry, saying what went.
fn evict(cache: &super::cache::PluginCache, kept: &Path) {
    match cache.evict(kept) {
        Ok(removed) if !removed.is_empty() => tracing::info!(
            cache = %cache.dir().display(),
            "removed {} compiled plugin(s) used least recently ({:.0} MiB) to keep the cache within {} MiB (TRIBUTARY_PLUGIN_CACHE_MIB)",
            removed.len(),
            removed.iter().map(|e| e.bytes).sum::<u64>() as f64 / f64::from(1 << 20),
            cache.cap() >> 20
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(
            cache = %cache.dir().display(),
            "cannot trim the compiled plugin cache: {error}"
        ),
    }
}

/// Write a compiled component to the cache: under a temporary name, then renamed, so a reader
/// never sees half a file.
fn store_compiled(component: &Component, file: &Path) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut temp, &bytes)?;
    temp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

/// Whether the component exports the contract this host serves, with a message saying how to
/// rebuild it when it exports another; and whether it also exports [`COLUMNAR`].
fn check_contract(engine: &Engine, component: &Component) -> Result<bool, String> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    if exports.iter().any(|e| e == CONTRACT) {
        return Ok(exports.iter().any(|e| e == COLUMNAR));
    }
    if exports.iter().any(|e| e == "process") && exports.iter().any(|e| e == "describe") {
        return Err(format!(
            "it was built against the tributary:transform@0.1.0 contract, which this version \
             no longer loads; rebuild it against {CONTRACT} (guest-sdk/wit/transform.wit, \
             docs/plugins.md: a Rust plugin moves to the current tributary-guest crate and \
             returns its setup from init)"
        ));
    }
    let listed = if exports.is_empty() {
        "nothing".to_owned()
    } else {
        exports.join(", ")
    };
    Err(format!(
        "it does not export {CONTRACT} (it exports {listed}); build it for the transform \
         world of guest-sdk/wit/transform.wit"
    ))
}

/// The packages of `tributary:` interfaces this host serves, each at its version.
const SERVED: [(&str, (u64, u64, u64)); 2] = [
    ("tributary:transform", (1, 0, 0)),
    (
        super::functions::FUNCTIONS_PACKAGE,
        super::functions::FUNCTIONS_VERSION,
    ),
];

/// Whether this host serves every `tributary:` interface the component imports, at its
/// version, with a message naming the first it does not and saying what to do. (The linker
/// would refuse it too, but in its own words: an instance "not found".)
fn check_imports(engine: &Engine, component: &Component) -> Result<(), String> {
    for (name, _) in component.component_type().imports(engine) {
        let Some((interface, version)) = name.split_once('@') else {
            continue;
        };
        let Some((package, _)) = interface.split_once('/') else {
            continue;
        };
        if !package.starts_with("tributary:") {
            continue;
        }
        let wanted = parse_version(version);
        let served = SERVED.iter().find(|(p, _)| *p == package).map(|(_, v)| *v);
        // A 1.x host serves every 1.y with y ≤ x: later minors only add.
        if let (Some(wanted), Some(served)) = (wanted, served)
            && wanted.0 == served.0
            && wanted <= served
        {
            continue;
        }
        return Err(unserved(name, package, version, served));
    }
    Ok(())
}

/// What to say of an import of `package` at `version` that this host does not serve.
fn unserved(name: &str, package: &str, version: &str, served: Option<(u64, u64, u64)>) -> String {
    let serves = match served {
        Some((major, minor, patch)) => format!("serves {package} {major}.{minor}.{patch} only"),
        None => format!("does not serve {package} at any version"),
    };
    let todo = if package == super::functions::FUNCTIONS_PACKAGE {
        format!(
            "run it on a Tributary that serves {package} {version} (upgrade Tributary), or load \
             the plugin's build that does not import the column functions (built for the \
             columnar-transform world, computing the values itself)"
        )
    } else {
        format!(
            "rebuild it against {CONTRACT} (guest-sdk/wit/transform.wit), or run it on a \
             Tributary that serves {package} {version}"
        )
    };
    format!("it imports {name}, but this Tributary {serves}; {todo}")
}

/// `major.minor.patch`, without pre-release or build parts.
fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

fn deadline_ticks(timeout: Duration) -> u64 {
    let ticks = timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos());
    // One more tick: the ticker may fire right after the deadline is set.
    u64::try_from(ticks).unwrap_or(u64::MAX - 1).max(1) + 1
}

/// A component starts with the preamble `\0asm`, then version 0x0d and layer 1; a core
/// module has version 1 and layer 0. Checked before compiling so the error can say which.
fn wasmparser_is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// What the host keeps per instance.
struct HostState {
    plugin: String,
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    stdout: Captured,
    stderr: Captured,
    /// What the plugin counted through `host.count` since the counters were last taken.
    counters: std::collections::BTreeMap<String, u64>,
    /// The column functions' state (compiled patterns).
    functions: super::functions::Functions,
    /// The plugin's memory limit, which also bounds what one call of the functions returns.
    memory_bytes: usize,
}

impl HostState {
    fn new(plugin: &str, limits: &HostLimits) -> HostState {
        let stdout = Captured::default();
        let stderr = Captured::default();
        // No preopened directories, environment, arguments, network or inherited stdio:
        // only clocks and randomness, which std needs and which grant nothing.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        HostState {
            plugin: plugin.to_owned(),
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                limits: wasmtime::StoreLimitsBuilder::new()
                    .memory_size(limits.memory_bytes)
                    .build(),
                refused: None,
            },
            stdout,
            stderr,
            counters: Default::default(),
            functions: Default::default(),
            memory_bytes: limits.memory_bytes,
        }
    }

    /// Move what the guest printed into the host log.
    fn flush_output(&mut self) {
        for (stream, bytes) in [
            ("stdout", self.stdout.take()),
            ("stderr", self.stderr.take()),
        ] {
            for line in String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                tracing::info!(plugin = %self.plugin, stream, "{line}");
            }
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

// The types interface has no functions; its trait is empty.
impl bindings::tributary::transform::types::Host for HostState {}

impl bindings::tributary::transform::host::Host for HostState {
    fn log(&mut self, level: wit::Level, message: String, fields: Vec<(String, String)>) {
        let plugin = &self.plugin;
        let fields = Fields(&fields);
        match level {
            wit::Level::Trace => tracing::trace!(plugin = %plugin, "{message}{fields}"),
            wit::Level::Debug => tracing::debug!(plugin = %plugin, "{message}{fields}"),
            wit::Level::Info => tracing::info!(plugin = %plugin, "{message}{fields}"),
            wit::Level::Warn => tracing::warn!(plugin = %plugin, "{message}{fields}"),
            wit::Level::Error => tracing::error!(plugin = %plugin, "{message}{fields}"),
        }
    }

    fn count(&mut self, name: String, delta: u64) {
        let counter = self.counters.entry(name).or_default();
        *counter = counter.saturating_add(delta);
    }
}

impl bindings::tributary::functions::columns::Host for HostState {
    fn apply(
        &mut self,
        rows: Vec<u8>,
        steps: Vec<wit::functions::Step>,
    ) -> Result<wit::functions::Applied, String> {
        self.functions.apply(&rows, &steps, self.memory_bytes)
    }
}

/// A plugin's log fields, after its message: ` table=public.users rows=3`.
struct Fields<'a>(&'a [(String, String)]);

impl std::fmt::Display for Fields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (key, value) in self.0 {
            if value.is_empty() || value.contains(char::is_whitespace) {
                write!(f, " {key}={value:?}")?;
            } else {
                write!(f, " {key}={value}")?;
            }
        }
        Ok(())
    }
}

/// `StoreLimits`, remembering a refused memory growth so a trap that follows it (an
/// allocator aborting) can be reported as the memory cap it is.
struct Limiter {
    limits: StoreLimits,
    refused: Option<usize>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.refused = Some(desired);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// A guest's stdout or stderr, kept in memory up to [`CAPTURE_BYTES`]; the rest is dropped
/// rather than failing the guest's write.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn append(&self, bytes: &[u8]) {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let room = CAPTURE_BYTES.saturating_sub(buf.len());
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

impl OutputStream for Captured {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(CAPTURE_BYTES)
    }
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.append(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod import_tests {
    use super::{parse_version, unserved};

    #[test]
    fn versions_parse_as_three_numbers_only() {
        assert_eq!(parse_version("1.0.0"), Some((1, 0, 0)));
        assert_eq!(parse_version("2.10.3"), Some((2, 10, 3)));
        assert_eq!(parse_version("1.0"), None);
        assert_eq!(parse_version("1.0.0-rc1"), None);
        assert_eq!(parse_version("1.0.0.1"), None);
    }

    #[test]
    fn an_unserved_import_is_named_with_what_to_do() {
        let functions = unserved(
            "tributary:functions/columns@2.0.0",
            "tributary:functions",
            "2.0.0",
            Some((1, 0, 0)),
        );
        assert_eq!(
            functions,
            "it imports tributary:functions/columns@2.0.0, but this Tributary serves \
             tributary:functions 1.0.0 only; run it on a Tributary that serves \
             tributary:functions 2.0.0 (upgrade Tributary), or load the plugin's build that \
             does not import the column functions (built for the columnar-transform world, \
             computing the values itself)"
        );
        let contract = unserved(
            "tributary:transform/host@2.0.0",
            "tributary:transform",
            "2.0.0",
            Some((1, 0, 0)),
        );
        assert!(
            contract.contains("rebuild it against tributary:transform/plugin@1.0.0"),
            "{contract}"
        );
        let unknown = unserved("tributary:other/x@1.0.0", "tributary:other", "1.0.0", None);
        assert!(
            unknown.contains("does not serve tributary:other at any version"),
            "{unknown}"
        );
    }
}
