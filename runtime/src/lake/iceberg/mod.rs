//! Apache Iceberg tables: the catalogs that hold each table's pointer to its current metadata
//! file ([`catalog`]): an Iceberg REST catalog ([`rest`]) or a SQL catalog in PostgreSQL
//! ([`sql`]).

pub mod catalog;
pub mod rest;
pub mod sql;
