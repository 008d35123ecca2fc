//! The pgoutput logical replication protocol, decoded without IO.
//!
//! Bytes in, typed messages out: [`Decoder::decode`] takes the payload of one `XLogData`
//! frame and returns a [`LogicalMessage`], or a [`DecodeError`] for anything malformed. It
//! never panics, never reads a clock and never touches a socket; the replication module feeds
//! it. The decoder keeps the relation cache, so row messages arrive already tied to their
//! [`Relation`] and checked against its arity.
//!
//! The order of calls is the order of the stream: create one [`Decoder`] per replication
//! session with the negotiated `proto_version`, and pass it every message from the first
//! onwards. Protocol 1 gives whole transactions (`Begin`, rows, `Commit`). Protocol 2 and
//! later may also stream a large transaction in chunks before it commits: each chunk sits
//! between `StreamStart` and `StreamStop`, its messages carry the (sub)transaction's xid, and
//! the transaction ends later with `StreamCommit` or `StreamAbort`. Protocol 3 adds two-phase
//! commit (sent only when the slot decodes prepared transactions): `BeginPrepare`, rows and
//! `Prepare` (or `StreamPrepare` after streamed chunks) at `PREPARE TRANSACTION`, then later
//! `CommitPrepared` or `RollbackPrepared`.
//!
//! [`Decoder::decode_bytes`] takes the frame as [`bytes::Bytes`] and hands out column values
//! as views into it, so a row costs one allocation (its tuple) rather than one per column.

mod decode;
pub mod encode;
#[cfg(test)]
pub(crate) mod fixture;
mod message;
mod reader;
pub mod tag;
#[cfg(test)]
mod tests;

pub use decode::{DecodeError, Decoder};
pub use message::*;
