//! The WebAssembly transform host.
//!
//! A transform is a WebAssembly component implementing the `tributary:transform@0.1.0` world
//! (the WIT in `guest-sdk/wit/`, which is also the plugin author's documentation). A pipeline
//! has zero or more of them, applied in order by a [`TransformChain`]:
//!
//! ```text
//! Batch ─► plugin 1 ─► source rows ─► plugin 2 ─► ... ─► source rows ─► outputs per table
//!             └─► declared rows ─────────┴──────────────────────────────► declared outputs
//! ```
//!
//! - Each plugin gets the batch as typed WIT values and returns `emit`s. A row emitted to
//!   `source(relation)` lands in the output derived from that table (`schema.table`, the
//!   table's columns) and is what the next plugin sees as a change; a row emitted to an output
//!   the plugin declared goes straight out.
//! - With no plugins the chain is the identity: every change becomes one row of its table's
//!   output (the new row, the old row of a delete, nulls for a truncate).
//! - Every emitted row is checked against its output's columns (arity and value kinds) and
//!   must carry the commit LSN of a transaction of the batch; the host fills in xid and commit
//!   time from it, so identities stay exact.
//! - Logical decoding messages (`transaction.messages`, `batch.messages`) reach every plugin of
//!   the chain unchanged; nothing lands for them unless a plugin emits rows for them.
//!
//! Loading compiles each plugin once (one shared engine, with the compile cache), links it
//! against the `host` interface and an empty WASI context (no files, network, environment or
//! arguments), and calls `describe` and `init`. Each call runs under an epoch deadline
//! ([`HostLimits::call_timeout`]) and a memory cap ([`HostLimits::memory_bytes`]). A trap,
//! a timeout or the memory cap poisons the instance: it is dropped, and the next call starts
//! a fresh one (`describe` and `init` again). None of these errors is retryable: plugins are
//! deterministic, so the same batch fails the same way.

mod chain;
mod convert;
mod host;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::Lsn;
use crate::change::{Batch, OutputBatch};

/// One `[[transform]]` of the pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformSpec {
    pub plugin: PathBuf,
    pub config: Vec<(String, String)>,
}

/// What each plugin call may use.
#[derive(Debug, Clone)]
pub struct HostLimits {
    /// The most linear memory one plugin instance may have, in bytes.
    pub memory_bytes: usize,
    /// The longest one call (`init`, `process`) may run.
    pub call_timeout: Duration,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            memory_bytes: 256 << 20,
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// A loaded plugin as recorded in commit entries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub path: String,
    /// SHA-256 of the plugin file, hex.
    pub digest: String,
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

    #[error("cannot start the WebAssembly engine: {message}")]
    Engine { message: String },
}

impl TransformError {
    /// Whether processing the same batch again could succeed. Never for now: plugins are
    /// deterministic, and every failure here is the plugin's or the pipeline file's.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// The transforms of a pipeline, applied in order. With none, every change lands in the
/// output derived from its table.
pub struct TransformChain {
    stages: Vec<chain::Stage>,
}

impl TransformChain {
    /// Compile, instantiate, describe and initialize every plugin, in order, each with its
    /// own limits.
    pub fn load(specs: &[(TransformSpec, HostLimits)]) -> Result<Self, TransformError> {
        let mut stages: Vec<chain::Stage> = Vec::with_capacity(specs.len());
        for (spec, limits) in specs {
            let plugin = host::Plugin::load(&spec.plugin, spec.config.clone(), limits)?;
            let stage = chain::Stage::new(plugin)?;
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
        Ok(TransformChain { stages })
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

    /// Run the batch through every plugin and group what comes out per output, each output's
    /// rows in commit order.
    ///
    /// This blocks for as long as the plugins compute (up to the call timeout per plugin). In
    /// an async program call it from a blocking thread (`tokio::task::spawn_blocking`), never
    /// from an async task: the WASI streams behind a guest's stdout and stderr block on the
    /// current runtime.
    pub fn process(&mut self, batch: &Batch) -> Result<Vec<OutputBatch>, TransformError> {
        chain::process(&mut self.stages, batch)
    }
}
