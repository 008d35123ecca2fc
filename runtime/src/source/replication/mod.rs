//! The replication connection: the only code that owns the replication socket.
//!
//! PostgreSQL streams a logical slot over a connection opened with `replication=database`. The
//! order of calls is:
//!
//! 1. [`ReplicationConnection::connect`] sends the startup packet (with session settings that
//!    make pgoutput's text output unambiguous: ISO dates, UTC, hex bytea, UTF-8, full float
//!    precision) and authenticates (trust, password, md5, scram-sha-256);
//! 2. replication commands run with the simple query protocol:
//!    [`identify_system`](ReplicationConnection::identify_system),
//!    [`create_logical_slot`](ReplicationConnection::create_logical_slot),
//!    [`drop_slot`](ReplicationConnection::drop_slot),
//!    [`simple_query`](ReplicationConnection::simple_query);
//! 3. [`start_logical`](ReplicationConnection::start_logical) issues `START_REPLICATION`, waits
//!    for `CopyBothResponse`, and hands the socket to a driver task. From then on the
//!    [`ReplicationStream`] yields [`XLogData`] frames (one pgoutput message each) and takes
//!    confirmations; the driver answers keepalives and sends standby status updates on its own.
//!
//! The position reported to the server as flushed is exactly what the consumer passed to
//! [`ReplicationStream::confirm`], never more, and it never moves backward. Everything after it
//! is replayed by the server on the next start, so dropping a stream or losing the connection
//! loses nothing.
//!
//! The connection runs over any `AsyncRead + AsyncWrite` transport: TCP, TLS over TCP, or a
//! Unix socket. Under TLS the stream paces its reads (`pace`): a busy stream wakes the driver
//! per chunk rather than per message.

mod command;
mod conn;
mod error;
mod failover;
pub mod frame;
mod pace;
mod stream;

#[cfg(test)]
mod live_tests;

use bytes::Bytes;

use crate::Lsn;

pub use conn::ReplicationConnection;
pub use error::{ReplicationError, ServerError};
pub use failover::{TimelineHistory, TimelineSwitch};
pub use stream::{Confirmer, ReplicationStream};

/// The answer to `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemIdentity {
    pub system_id: String,
    pub timeline: u32,
    /// The current end of WAL on the server.
    pub xlog_pos: Lsn,
    pub dbname: Option<String>,
}

/// The answer to `CREATE_REPLICATION_SLOT ... LOGICAL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedSlot {
    pub slot_name: String,
    /// The slot's first position: changes committed after it are streamed.
    pub consistent_point: Lsn,
    /// Set only when a snapshot was exported.
    pub snapshot_name: Option<String>,
}

/// One `XLogData` frame: a pgoutput message and where it sits in the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogData {
    pub wal_start: Lsn,
    pub wal_end: Lsn,
    /// When the server sent it, in microseconds since 2000-01-01 UTC
    /// (see [`frame::system_time`]).
    pub send_time: i64,
    /// The pgoutput message; shares memory with the socket read it came from.
    pub data: Bytes,
}
