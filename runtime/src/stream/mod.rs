//! From decoded messages to batches, without IO: transactions assembled from the stream's
//! messages ([`assemble`], with unchanged TOAST values filled in by [`toast`]), the changes
//! they hold ([`change`]), the batches the pipeline cuts ([`batch`]), and the plan and
//! identities of a full load ([`load`]).
//!
//! Owns: the change model every later room reads. May import: [`crate::wire`] and the crate
//! root. Pure: no tokio, no socket, no clock; the one exception is a large transaction's
//! spill file (`assemble/spill.rs`), an unnamed local file the assembler writes and reads back
//! through `std::io`, which never outlives the process.

pub mod assemble;
pub mod batch;
pub mod change;
pub mod load;
pub mod toast;
