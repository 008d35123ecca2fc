//! Everything that talks to the source database: the connection factory ([`connect`]), the
//! replication socket ([`replication`]), the catalog queries that resolve types
//! ([`catalog`]), failover slots and standbys ([`failover`]), the source-side set-up and its
//! refusals ([`provision`]), the WAL a slot holds back ([`slot_wal`]), the prerequisite report ([`prerequisites`]), requests for a new load ([`resync`]), a full load's
//! snapshot reads ([`snapshot`]), which columns may be stored out of line as TOAST ([`toast`], without IO), and capture
//! through triggers where no slot can be had ([`trigger`]).
//!
//! Owns: every socket to PostgreSQL; TLS and credentials belong in [`connect`]. May import:
//! [`crate::wire`], [`crate::stream`] and the crate root. Never the pipeline or the commands.

pub mod catalog;
pub mod connect;
pub mod failover;
pub mod prerequisites;
pub mod provision;
mod quote;
pub mod replication;
pub mod resync;
pub mod slot_wal;
pub mod snapshot;
pub mod toast;
pub mod trigger;

pub use quote::{quote_ident, quote_literal};
