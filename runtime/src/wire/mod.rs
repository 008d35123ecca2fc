//! PostgreSQL's formats, decoded without IO: the messages of the pgoutput plugin
//! ([`pgoutput`]) and the text and binary forms of the values they carry ([`pgtype`]).
//!
//! Owns: bytes in, typed messages and values out. May import: the crate root only (`Lsn`).
//! Pure: no tokio, no socket, no file system, no clock.

pub mod pgoutput;
pub mod pgtype;
