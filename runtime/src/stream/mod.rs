//! From decoded messages to batches, without IO: transactions assembled from the stream's
//! messages ([`assemble`], with unchanged TOAST values filled in by [`toast`]), the changes
//! they hold ([`change`]), the batches the pipeline cuts ([`batch`]), the plan and identities
//! of a full load ([`load`]), and the read stage's decisions from frames to numbered flushes
//! ([`read`]).
//!
//! Owns: the change model every later room reads. May import: [`crate::wire`] and the crate
//! root. Pure: no tokio, no socket, no file system, no clock. A large transaction's rows are
//! spilled (`assemble/spill.rs`) to a medium the caller gives ([`assemble::SpillMedia`]),
//! written and read back through the `std::io` traits: the pipeline gives unnamed local files,
//! tests give memory.

pub mod assemble;
pub mod batch;
pub mod change;
pub mod load;
pub mod read;
pub mod toast;
