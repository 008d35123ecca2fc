//! The WebAssembly transform host.
//!
//! A transform is a WebAssembly component exporting `tributary:transform/plugin@1.0.0` (the
//! WIT in `guest-sdk/wit/`, which is also the plugin author's documentation; the reasoning
//! behind it is in `docs/plugins.md`). A pipeline has zero or more of them, applied in order by
//! a [`TransformChain`]:
//!
//! ```text
//! Batch ─► plugin 1 ─► source rows ─► plugin 2 ─► ... ─► source rows ─► outputs per table
//!             └─► declared rows ─────────┴──────────────────────────────► declared outputs
//! ```
//!
//! - Each plugin gets the batch as typed WIT values, as much of it as its `interest` reads
//!   (the columns it names, old images and messages when it asks), and returns emits:
//!   `keep` (the change as it came), `edit` (some values replaced) or a whole `row`. A table's
//!   rows may be reshaped (columns dropped, renamed, added) by the plugin's setup; they land in
//!   the output derived from the table and are what the next plugin sees as changes. A row
//!   emitted to an output the plugin declared goes straight out.
//! - With no plugins the chain is the identity: every change becomes one row of its table's
//!   output (the new row, the old row of a delete, nulls for a truncate).
//! - Every value a plugin spells out is checked against its column; identities (commit LSN,
//!   `seq`, `_sub`) come from the emit's origin, so a plugin cannot make two rows collide or
//!   point at a transaction the batch does not hold.
//! - Logical decoding messages reach every plugin that asks for them, unchanged; nothing lands
//!   for them unless a plugin emits rows for them.
//! - A plugin that also exports `tributary:transform/columnar@1.0.0` gets every batch by column
//!   instead: one Arrow IPC stream per relation, built by the encoder, and answers per relation
//!   (rows that land, replaced columns, rejections). `columnar.rs` turns the answer into the
//!   typed emits, so everything after it is shared.
//!
//! Loading compiles each plugin once (one shared engine, with the compile cache; a slow
//! compile is logged), refuses components built against another contract with a message saying
//! how to rebuild, links it against the `host` interface and an empty WASI context (no files,
//! network, environment or arguments), and calls `describe` and `init`. Each call runs under an
//! epoch deadline ([`HostLimits::call_timeout`]) and a memory cap ([`HostLimits::memory_bytes`]).
//! A trap, a timeout or the memory cap poisons the instance: it is dropped, and the next call
//! starts a fresh one (`describe` and `init` again). None of these errors is retryable: plugins
//! are deterministic, so the same batch fails the same way. A plugin that asks to retry a batch
//! is called again after a pause, for about ten minutes: the chain hands the batch back with
//! when to call again ([`Processed::Retry`]), and its caller waits.
//!
//! Owns: the plugins, from the file to the emits read back. May import: [`crate::stream`],
//! [`crate::wire`], [`crate::lake::encode`] (the columnar path builds its arrays with the
//! encoder's builders) and the crate root; never the commit protocol, which records plugins in
//! a type of its own that the pipeline fills from [`PluginInfo`].

pub mod cache;
mod chain;
mod columnar;
mod convert;
mod functions;
mod host;
mod retry;
mod route;
mod shape;

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::Lsn;
use crate::stream::change::{Batch, OutputBatch, OutputColumn};

/// One `[[transform]]` of the pipeline file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransformSpec {
    pub plugin: PathBuf,
    pub config: Vec<(String, String)>,
    pub on_error: FailurePolicy,
}

/// What becomes of a change a plugin rejects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// Stop the pipeline; nothing past the previous batch is confirmed.
    #[default]
    Stop,
    /// Land the change in the dead-letter output ([`DEAD_LETTERS`]) with why, and go on.
    DeadLetter,
}

/// The output that holds the changes plugins rejected under [`FailurePolicy::DeadLetter`].
pub const DEAD_LETTERS: &str = "_dead_letters";

/// What each plugin call may use.
#[derive(Debug, Clone)]
pub struct HostLimits {
    /// The most linear memory one plugin instance may have, in bytes.
    pub memory_bytes: usize,
    /// The longest one call (`init`, `process`) may run.
    pub call_timeout: Duration,
    /// The most WebAssembly stack one call may use, in bytes.
    pub stack_bytes: usize,
}

/// The largest stack limit a plugin may have: calls run on the host's blocking threads, whose
/// own stacks (2 MiB) must hold it with room to spare.
pub const MAX_STACK_BYTES: usize = 1 << 20;

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            memory_bytes: 256 << 20,
            call_timeout: Duration::from_secs(30),
            stack_bytes: 512 << 10,
        }
    }
}

/// A loaded plugin: what it calls itself, where it was loaded from, and which build it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub path: String,
    /// SHA-256 of the plugin file, hex.
    pub digest: String,
}

/// What one plugin counted while it ran: its own counters (`host.count`, by name), the changes
/// it sent to the dead-letter output, and its `process` calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginTally {
    pub counters: std::collections::BTreeMap<String, u64>,
    pub dead_letters: u64,
    pub calls: u64,
}

impl PluginTally {
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty() && self.dead_letters == 0 && self.calls == 0
    }

    /// Add what `other` counted.
    pub fn add(&mut self, other: &PluginTally) {
        for (name, delta) in &other.counters {
            *self.counters.entry(name.clone()).or_default() += delta;
        }
        self.dead_letters += other.dead_letters;
        self.calls += other.calls;
    }
}

/// Tallies by plugin name; two transforms of one plugin name count together.
pub type Tallies = std::collections::BTreeMap<String, PluginTally>;

/// Add every tally of `from` to `into`.
pub fn add_tallies(into: &mut Tallies, from: &Tallies) {
    for (plugin, tally) in from {
        into.entry(plugin.clone()).or_default().add(tally);
    }
}

/// `mask: 3 calls, values_masked 240; flatten: 2 calls, 1 dead letter`.
pub fn describe_tallies(tallies: &Tallies) -> String {
    let mut plugins = Vec::with_capacity(tallies.len());
    for (plugin, tally) in tallies {
        let mut parts = vec![format!("{} calls", tally.calls)];
        if tally.dead_letters > 0 {
            parts.push(format!("{} dead letters", tally.dead_letters));
        }
        parts.extend(tally.counters.iter().map(|(n, v)| format!("{n} {v}")));
        plugins.push(format!("{plugin}: {}", parts.join(", ")));
    }
    plugins.join("; ")
}

/// What a loaded plugin is and declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSummary {
    pub info: PluginInfo,
    /// The contract it implements (`tributary:transform/plugin@1.0.0`).
    pub contract: String,
    /// Its declared outputs and their columns.
    pub outputs: Vec<(String, Vec<OutputColumn>)>,
    /// Its reshapes of table outputs, one line each (`public.users: drop ssn; add region text`).
    pub reshapes: Vec<String>,
    /// The columns it reads, `None` for all.
    pub reads_columns: Option<Vec<String>>,
    pub reads_old_images: bool,
    pub reads_messages: bool,
    pub whole_transactions: bool,
}

/// Which call into a plugin failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `describe` and `init`, when the plugin is loaded or re-instantiated.
    Load,
    /// `process`, on the batch whose first and last commit LSNs these are.
    Batch(Option<(Lsn, Lsn)>),
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Load => f.write_str("while starting (describe, init)"),
            Call::Batch(Some((first, last))) => {
                write!(f, "processing the batch of commit lsn {first} to {last}")
            }
            Call::Batch(None) => f.write_str("processing an empty batch"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error("plugin {plugin:?}: {message}")]
    Plugin { plugin: String, message: String },

    #[error("cannot read plugin {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("plugin {} is not a usable transform: {message}", path.display())]
    Invalid { path: PathBuf, message: String },

    #[error("plugin {plugin:?} ({}) refused its configuration: {message}", path.display())]
    Init {
        plugin: String,
        path: PathBuf,
        message: String,
    },

    #[error("plugin {plugin:?} ({}) trapped {call}: {message}", path.display())]
    Trap {
        plugin: String,
        path: PathBuf,
        call: Call,
        message: String,
    },

    #[error(
        "plugin {plugin:?} ({}) exceeded its time limit of {limit_ms} ms {call}; \
         raise the call timeout if batches legitimately take this long",
        path.display()
    )]
    Timeout {
        plugin: String,
        path: PathBuf,
        call: Call,
        limit_ms: u128,
    },

    #[error(
        "plugin {plugin:?} ({}) exceeded its stack limit of {limit_kib} KiB {call} (deep \
         recursion?); raise transform.stack_kib (at most 1024) if it legitimately needs more",
        path.display()
    )]
    StackLimit {
        plugin: String,
        path: PathBuf,
        call: Call,
        limit_kib: usize,
    },

    #[error(
        "plugin {plugin:?} ({}) exceeded its memory limit of {limit} bytes (it asked for \
         {requested}) {call}",
        path.display()
    )]
    MemoryLimit {
        plugin: String,
        path: PathBuf,
        call: Call,
        limit: usize,
        requested: usize,
    },

    #[error("plugin {plugin:?} ({}) failed {call}: {message}", path.display())]
    Fatal {
        plugin: String,
        path: PathBuf,
        call: Call,
        message: String,
    },

    #[error(
        "plugin {plugin:?} emitted a row for output {output:?}{} at commit lsn {lsn} that does \
         not fit: {message}",
        column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default()
    )]
    Emit {
        plugin: String,
        output: String,
        column: Option<String>,
        lsn: Lsn,
        message: String,
    },

    /// What a plugin returned through the `columnar` interface does not fit the batch.
    #[error(
        "plugin {plugin:?} returned columns{}{} that do not fit: {message}",
        table.as_ref().map(|t| format!(" for table {t}")).unwrap_or_default(),
        column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default()
    )]
    Columnar {
        plugin: String,
        table: Option<String>,
        column: Option<String>,
        message: String,
    },

    #[error("{0}")]
    Rejected(Box<Rejected>),

    #[error("cannot start the WebAssembly engine: {message}")]
    Engine { message: String },
}

/// A change a plugin could not transform, under the `stop` failure policy.
#[derive(Debug)]
pub struct Rejected {
    pub plugin: String,
    pub path: PathBuf,
    pub call: Call,
    pub commit_lsn: Option<Lsn>,
    pub seq: Option<u32>,
    pub table: Option<String>,
    pub class: String,
    pub message: String,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plugin {:?} ({}) rejected ",
            self.plugin,
            self.path.display()
        )?;
        match (self.commit_lsn, self.seq, &self.table) {
            (Some(lsn), Some(seq), Some(table)) => {
                write!(f, "the change at commit lsn {lsn}, seq {seq} of {table}")?
            }
            _ => write!(f, "a change it named wrongly {}", self.call)?,
        }
        write!(
            f,
            " ({}): {}; the pipeline stops here, so nothing past the previous batch is \
             confirmed: fix the plugin or the data and start again",
            self.class, self.message
        )
    }
}

impl TransformError {
    /// Whether processing the same batch again could succeed. Never for now: plugins are
    /// deterministic, and every failure here is the plugin's or the pipeline file's.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// What the chain made of a batch: its outputs, or a plugin's ask to be called again.
#[derive(Debug)]
pub enum Processed {
    Done(Vec<OutputBatch>),
    Retry(Retry),
}

/// A plugin asked to retry the batch: the caller waits until `due`, then hands this to
/// [`TransformChain::resume`] of the same chain, which calls that plugin again and carries on
/// from there. The chain gives up with an error once the plugin has asked for about ten
/// minutes. Waiting is the caller's, so a pipeline's blocking threads never sleep.
pub struct Retry {
    pub plugin: String,
    pub call: Call,
    /// What the plugin said.
    pub message: String,
    /// Which call again this is, from 1.
    pub attempt: u32,
    pub pause: Duration,
    pub due: Instant,
    run: Box<chain::Run>,
}

impl fmt::Display for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "asked to retry {} ({}); calling again in {} s",
            self.call,
            self.message,
            self.pause.as_secs()
        )
    }
}

impl fmt::Debug for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("plugin", &self.plugin)
            .field("call", &self.call)
            .field("message", &self.message)
            .field("attempt", &self.attempt)
            .field("pause", &self.pause)
            .finish_non_exhaustive()
    }
}

/// The transforms of a pipeline, applied in order. With none, every change lands in the
/// output derived from its table.
pub struct TransformChain {
    stages: Vec<chain::Stage>,
    /// The commit LSN of the transaction whose parts are coming in, and how many messages its
    /// parts so far held: message rows of a later part number on from them.
    parts_seen: Option<(Lsn, u32)>,
}

impl TransformChain {
    /// Compile, instantiate, describe and initialize every plugin, in order, each with its
    /// own limits.
    pub fn load(specs: &[(TransformSpec, HostLimits)]) -> Result<Self, TransformError> {
        let mut stages: Vec<chain::Stage> = Vec::with_capacity(specs.len());
        for (spec, limits) in specs {
            let plugin = host::Plugin::load(&spec.plugin, spec.config.clone(), limits)?;
            let stage = chain::Stage::new(plugin, spec.on_error)?;
            for name in stage.declared_names() {
                if let Some(other) = stages.iter().find(|s| s.declares(name)) {
                    return Err(TransformError::Invalid {
                        path: spec.plugin.clone(),
                        message: format!(
                            "it declares output {name:?}, which plugin {:?} already declares; \
                             output names must be unique in a pipeline",
                            other.plugin.name
                        ),
                    });
                }
            }
            stages.push(stage);
        }
        Ok(TransformChain {
            stages,
            parts_seen: None,
        })
    }

    /// The same chain on new instances of its plugins, to process other batches beside this
    /// one. Each instance starts (instantiate, `describe`, `init`) at its first batch; what it
    /// returns for a batch is what this chain would, since a plugin's output may depend only
    /// on the change, its transaction and the settings.
    pub fn fork(&self) -> TransformChain {
        TransformChain {
            stages: self.stages.iter().map(chain::Stage::fork).collect(),
            parts_seen: None,
        }
    }

    /// The loaded plugins, in pipeline order.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.stages
            .iter()
            .map(|s| PluginInfo {
                name: s.plugin.name.clone(),
                version: s.plugin.version.clone(),
                path: s.plugin.path.display().to_string(),
                digest: s.plugin.digest.clone(),
            })
            .collect()
    }

    /// What each loaded plugin declared at `init`, in pipeline order: for `tributary plugin
    /// check` and the start-up log.
    pub fn summaries(&self) -> Vec<PluginSummary> {
        self.stages.iter().map(chain::Stage::summary).collect()
    }

    /// What each plugin counted since this was last called, by plugin name (plugins that
    /// counted nothing left out).
    pub fn take_tallies(&mut self) -> Tallies {
        let mut tallies = Tallies::new();
        for stage in &mut self.stages {
            let tally = std::mem::take(&mut stage.tally);
            if !tally.is_empty() {
                tallies
                    .entry(stage.plugin.name.clone())
                    .or_default()
                    .add(&tally);
            }
        }
        tallies
    }

    /// The plugins that must see every transaction in one call (`interest.whole-transactions`).
    pub fn wants_whole_transactions(&self) -> Vec<String> {
        self.stages
            .iter()
            .filter(|s| s.plugin.setup.interest.whole_transactions)
            .map(|s| s.plugin.name.clone())
            .collect()
    }

    /// Run a batch of whole transactions through every plugin and group what comes out per
    /// output, each output's rows in commit order; or stop where a plugin asks to retry, to be
    /// resumed (see [`Retry`]).
    ///
    /// This blocks for as long as the plugins compute (up to the call timeout per plugin). In
    /// an async program call it from a blocking thread (`tokio::task::spawn_blocking`), never
    /// from an async task: the WASI streams behind a guest's stdout and stderr block on the
    /// current runtime.
    pub fn process(&mut self, batch: Batch) -> Result<Processed, TransformError> {
        self.parts_seen = None;
        chain::process(&mut self.stages, batch, chain::Parts::default())
    }

    /// Like [`TransformChain::process`], for one part of a large transaction: the batch holds
    /// that transaction alone, `part` counts from 0, and `last` marks the end. Parts come in
    /// order.
    pub fn process_part(
        &mut self,
        batch: Batch,
        part: u32,
        last: bool,
    ) -> Result<Processed, TransformError> {
        let lsn = batch.transactions.first().map(|t| t.commit_lsn);
        let messages = batch
            .transactions
            .first()
            .map_or(0, |t| t.messages.len() as u32);
        let earlier = match (self.parts_seen, lsn) {
            (Some((seen, count)), Some(lsn)) if part > 0 && seen == lsn => count,
            _ => 0,
        };
        self.parts_seen = lsn.map(|lsn| (lsn, earlier + messages));
        let parts = chain::Parts {
            part: Some((part, last)),
            earlier_messages: earlier,
        };
        chain::process(&mut self.stages, batch, parts)
    }

    /// Carry on with the batch a plugin of this chain asked to retry, once `retry.due` has
    /// passed: that plugin is called again, then the rest of the chain (blocking, as
    /// [`TransformChain::process`]).
    pub fn resume(&mut self, retry: Retry) -> Result<Processed, TransformError> {
        chain::resume(&mut self.stages, retry.run)
    }
}
