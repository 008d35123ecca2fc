//! Outputs as Delta Lake tables (`sink.format = "delta"`): the same data files the commit log
//! names, made visible to table readers by one Delta commit per output and flush.
//!
//! The commit log stays the source of truth. After a flush's commit entry exists, each output
//! it touched gets a Delta commit that adds its files and carries a `txn` action: application
//! id the pipeline ([`crate::lake::tables::app_id`]), version the entry's sequence number. A table's `txn` version
//! says how far it has caught up with the log, so an append is idempotent (a version already
//! there is not written again) and fenced (a table that holds a later flush than a writer's
//! next one means another instance took over). A start brings every table up to the log.
//!
//! [`schema`] maps the files' Arrow types to Delta's and evolves a table's schema; [`actions`]
//! is the log's JSON; [`state`] replays a log and plans an append; [`compact`] plans the
//! rewrite of small files; [`vacuum`] which files may go; [`tend`] answers the commands; [`mirror`] is what a current-state table's Delta files say of their keys; [`table`] and
//! [`current`] do the IO.

pub mod actions;
pub mod checkpoint;
pub mod compact;
pub mod current;
pub mod mirror;
pub mod schema;
pub mod state;
pub mod table;
pub mod tend;
pub mod vacuum;

pub use mirror::{MIRROR_SUFFIX, mirror_name};
pub use state::{TableError, TableFile, TableState, TypeChange};
pub use table::{
    Tables, audit_mirror_table, audit_table, compact_table, read_latest, read_table,
    read_table_holding, table_names,
};
