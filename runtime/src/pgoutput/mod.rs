//! The pgoutput logical replication protocol, decoded without IO.
//!
//! Bytes in, typed messages out: [`Decoder::decode`] takes the payload of one `XLogData`
//! frame and returns a [`LogicalMessage`], or a [`DecodeError`] for anything malformed. It
//! never panics, never reads a clock and never touches a socket; the replication module feeds
//! it. The decoder keeps the relation cache, so row messages arrive already tied to their
//! [`Relation`] and checked against its arity.

mod decode;
mod message;

pub use decode::{DecodeError, Decoder};
pub use message::*;
