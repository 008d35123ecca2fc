//! Tributary: change data capture from PostgreSQL, through WebAssembly transforms, to Parquet
//! in object storage, exactly once.
//!
//! The tree is the pipeline: one room per concern, data flowing one way.
//!
//! ```text
//!  source ──► wire ──► stream ──────────► transform ──► lake ─────────────────────────┐
//!  replication  pgoutput  read machine       Wasm plugins  encode ─► sink ─► commit ─► flush
//!  (socket)     pgtype    assemble (toast)                                            │
//!                         batch, load                                                 │
//!     ▲                                                                               │
//!     └──────────── standby status update: flush = end of the last committed flush ◄─┘
//! ```
//!
//! - [`source`] owns every connection to PostgreSQL: the connection factory, the replication
//!   socket, the catalog, provisioning, the prerequisite report and a full load's snapshot;
//! - [`wire`] decodes pgoutput messages and PostgreSQL values, without IO;
//! - [`stream`] turns frames into batches without IO: the read machine (replays, cuts, idle
//!   advances, resync turns), whole transactions assembled, unchanged TOAST values filled, full
//!   loads planned;
//! - [`transform`] hosts the WebAssembly plugins;
//! - [`lake`] encodes Parquet, writes the sink, keeps the commit log (what is durable, who may
//!   write it, how far the slot may move) and runs the flush machine (which step of which
//!   flush lands next, without IO);
//! - [`pipeline`] is the wiring: it starts a pipeline and runs the stages side by side;
//! - [`commands`] are `check`, `status`, `teardown`, `resync` and `verify`.
//!
//! [`config`] reads the pipeline file. The `tributary` command is the `tributary-cli` crate.
//! Which room may import which is in `docs/design.md`.

mod basics;
pub mod commands;
pub mod config;
pub mod failpoint;
pub mod lake;
pub mod pipeline;
pub mod source;
pub mod stream;
pub mod transform;
pub mod wire;

pub(crate) use basics::clock;
pub use basics::lsn::{Lsn, ParseLsnError};
pub use basics::units;

/// An error and its causes, each said once: a cause whose text the message already holds is not
/// repeated (tokio-postgres ends its text with its cause; object_store and thiserror messages
/// such as `cannot read plugin {path}: {source}` embed theirs). Messages that render a library
/// error use this instead of chaining it as a `source`, and the `tributary` command prints its
/// errors with it.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}
