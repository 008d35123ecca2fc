//! Outputs as Apache Iceberg tables (format version 2), over the same data files the commit
//! log names: each published flush is one snapshot whose summary carries the pipeline's
//! position (`tributary.app`, `tributary.sequence`), as a Delta commit carries its `txn`.
//!
//! Written without a catalog, in the layout readers open from storage alone:
//! `<output>/metadata/v<N>.metadata.json`, created put-if-absent (that create is the commit),
//! and `metadata/version-hint.text` naming the latest `N` (a hint: loading probes past it).
//! [`table::Pointer`] is the one place that knows this, so that a catalog can take it over.
//!
//! The data files carry no Iceberg field ids (the encoder writes the same files for every
//! format); the table's `schema.name-mapping.default` maps their column names to ids, which
//! pyiceberg and DuckDB both read (see docs/design.md, "Iceberg tables").
//!
//! A catalog may hold each table's pointer instead ([`catalog`]): an Iceberg REST catalog
//! ([`rest`]) or a SQL catalog in PostgreSQL ([`sql`]); [`pointer`] is the sink's catalog as
//! the tables use it (`sink.catalog`).
//!
//! [`avro`] reads and writes the manifests' container files; [`schema`] maps Arrow types to
//! Iceberg's and evolves a table's schema; [`partition`] makes partition specs and tuples;
//! [`stats`] turns Parquet footers into column statistics; [`manifest`] and [`metadata`] are
//! the files; [`plan`] plans appends, replaces and expiries without IO; [`table`] does the IO;
//! [`tables`] publishes the pipeline's flushes, and [`current`] keeps its current-state tables;
//! [`tend`] answers the commands, and [`compact`] and [`vacuum`] are theirs; [`audit`] reads a
//! table for `verify`'s audit.

pub mod audit;
pub mod avro;
pub mod catalog;
pub mod compact;
pub mod current;
pub mod manifest;
pub mod metadata;
pub mod partition;
pub mod plan;
pub mod pointer;
pub mod rest;
pub mod schema;
pub mod sql;
pub mod stats;
pub mod table;
pub mod tables;
pub mod tend;
pub mod vacuum;
