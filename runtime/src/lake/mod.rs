//! What lands in object storage, and the protocol that makes it exactly once: rows encoded as
//! Parquet ([`encode`]), objects written to the bucket or directory ([`sink`]), the commit
//! log and the fence ([`commit`]), and the flush machine that orders every step of landing
//! ([`flush`]).
//!
//! Two table formats ([`TableFormat`]) share the data files ([`commit::data_file_path`]) and the
//! commit log under `_tributary/`: `parquet` is those alone; `delta` ([`delta`]) also makes each
//! output a Delta Lake table, one Delta commit per output after each commit entry (the flush
//! machine's publish step). The pipeline reaches a format only through [`tables`].
//!
//! Owns: every byte written to the sink. May import: [`crate::stream`], [`crate::wire`] and
//! the crate root. [`encode`], [`flush`] and the protocol in [`commit`] are pure; [`sink`] and
//! the commit log's reads and writes do the IO.

pub mod commit;
pub mod delta;
pub mod encode;
pub mod flush;
pub mod iceberg;
pub mod sink;
pub mod tables;

/// How landed flushes are made visible to readers (`sink.format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableFormat {
    /// Parquet files under `<output>/`, and the commit log that names the committed ones.
    #[default]
    Parquet,
    /// The same, and each output a Delta Lake table whose log adds each flush's files.
    Delta,
    /// The same, and each output an Apache Iceberg table (format version 2) with a snapshot
    /// per flush.
    Iceberg,
}

impl TableFormat {
    /// The format's name, for people.
    pub fn name(self) -> &'static str {
        match self {
            TableFormat::Parquet => "Parquet",
            TableFormat::Delta => "Delta",
            TableFormat::Iceberg => "Iceberg",
        }
    }

    /// The format as `sink.format` names it.
    pub fn key(self) -> &'static str {
        match self {
            TableFormat::Parquet => "parquet",
            TableFormat::Delta => "delta",
            TableFormat::Iceberg => "iceberg",
        }
    }

    /// Whether the format keeps tables beside the commit log.
    pub fn has_tables(self) -> bool {
        self != TableFormat::Parquet
    }
}
