//! The commands beside `tributary run`, each over the rooms it needs and never the running
//! pipeline: [`check`] (the whole pipeline, as a start would find it), [`status`],
//! [`teardown`], [`resync`], [`verify`] and [`compact`] (Delta tables' small files).
//!
//! May import: every room but [`crate::pipeline`].

pub mod check;
pub mod compact;
pub mod resync;
pub mod status;
pub mod teardown;
pub mod verify;
