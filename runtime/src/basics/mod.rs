//! What every room uses and nothing else owns: positions in the WAL ([`lsn`]), the wall
//! clock ([`clock`]) and quantities written for people ([`units`]). Imports no room.

pub(crate) mod clock;
pub(crate) mod lsn;
pub mod units;
