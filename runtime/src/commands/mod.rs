//! The commands beside `tributary run`, each over the rooms it needs and never the running
//! pipeline: [`check`] (the whole pipeline, as a start would find it), [`status`],
//! [`teardown`], [`resync`], [`verify`], [`compact`] (Delta tables' small files) and [`vacuum`] (the files they no
//! longer read).
//!
//! May import: every room but [`crate::pipeline`], except its preflight, which `check` prints.

pub mod check;
pub mod compact;
pub mod resync;
pub mod status;
pub mod teardown;
pub mod vacuum;
pub mod verify;
