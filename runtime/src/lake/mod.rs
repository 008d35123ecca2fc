//! What lands in object storage, and the protocol that makes it exactly once: rows encoded as
//! Parquet ([`encode`]), objects written to the bucket or directory ([`sink`]), the commit
//! log and the fence ([`commit`]), and the flush machine that orders every step of landing
//! ([`flush`]).
//!
//! The table format is Parquet data files plus the commit log under `_tributary/`; its file
//! names are [`commit::data_file_path`]. A second format (a table log beside the data files)
//! plugs in behind the commit, with the flush machine unchanged unless it needs a step.
//!
//! Owns: every byte written to the sink. May import: [`crate::stream`], [`crate::wire`] and
//! the crate root. [`encode`], [`flush`] and the protocol in [`commit`] are pure; [`sink`] and
//! the commit log's reads and writes do the IO.

pub mod commit;
pub mod encode;
pub mod flush;
pub mod sink;
