//! Tributary: change data capture from PostgreSQL, through WebAssembly transforms, to Parquet
//! in object storage, exactly once.
//!
//! One module per pipeline stage, data flowing one way:
//!
//! ```text
//! slot ─► replication ─► pgoutput ─► batch ─► transform ─► encode ─► sink ─► commit ─┐
//!           ▲                                                                       │
//!           └──────────── standby status update: flush = last committed LSN ◄───────┘
//! ```
//!
//! - [`replication`] owns the replication socket (the only IO with the slot);
//! - [`pgoutput`] decodes message bytes into typed messages, without IO;
//! - [`batch`] assembles whole transactions and decides when to cut a batch, without IO;
//! - [`transform`] hosts the WebAssembly plugins;
//! - [`encode`] turns output rows into Parquet;
//! - [`sink`] writes objects to the bucket or directory;
//! - [`commit`] is the checkpoint protocol: what is durable, who may write it, and how far the
//!   slot may move;
//! - [`flush`] decides, without IO, which step of which flush lands next.
//!
//! [`pipeline`] starts a pipeline and runs the stages side by side, after [`check`] found the
//! source ready; [`config`] reads the pipeline file; [`teardown`] drops what a pipeline
//! created; [`verify`] proves the lake equals the source at a [`snapshot`] of it. The
//! `tributary` command is the `tributary-cli` crate.

pub mod assemble;
pub mod batch;
pub mod catalog;
pub mod change;
pub mod check;
pub mod commit;
pub mod config;
pub mod encode;
pub mod failpoint;
pub mod flush;
pub mod load;
mod lsn;
pub mod metrics;
pub mod pgoutput;
pub mod pgtype;
pub mod pipeline;
pub mod provision;
pub mod replication;
pub mod resync;
pub mod sink;
pub mod snapshot;
pub mod status;
pub mod teardown;
pub mod toast;
pub mod transform;
pub mod units;
pub mod verify;

pub use lsn::{Lsn, ParseLsnError};

/// An error and its causes, each said once: clients whose own text already ends with their
/// cause (tokio-postgres does) are not repeated. Messages that render a library error use this
/// instead of chaining it as a `source`.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}
