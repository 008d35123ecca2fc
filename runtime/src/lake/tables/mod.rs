//! The seam between the pipeline and the table formats its outputs are published as
//! (`sink.format`): after a flush's commit entry, each output it touched gets a commit of the
//! format that adds its files (and applies the flush to its current-state table), and a start
//! brings every table up to the commit log. The pipeline holds a [`Tables`] and names no
//! format; [`file`] is what every format is given. Delta ([`crate::lake::delta`]) is the one
//! format so far.

pub mod file;

use std::collections::BTreeSet;
use std::sync::Arc;

use parquet::file::properties::WriterProperties;

pub use file::{Asked, MIRROR_SUFFIX, Reload, TableFile, TypeChange, mirror_name, table_columns};

use super::TableFormat;
use super::commit::{CommitError, CommitLog, Writer};
use super::delta;
use super::sink::Sink;

/// How a pipeline's tables are kept.
pub struct Keeping {
    /// Whose tables: the database and slot (or journal schema) that name the pipeline.
    pub database: String,
    pub slot: String,
    pub on_type_change: TypeChange,
    /// Outputs that keep a current-state table.
    pub mirrored: BTreeSet<String>,
    /// How a current-state table's files are written, and the size a file is cut at.
    pub properties: WriterProperties,
    pub target: u64,
    pub reload: Option<Arc<dyn Reload>>,
}

/// The tables a pipeline publishes its flushes to, in the sink's format.
#[derive(Clone)]
pub enum Tables {
    Delta(delta::Tables),
}

impl Tables {
    /// The tables of a sink in `format` (`None`: Parquet files alone, no tables).
    pub fn open(
        format: TableFormat,
        sink: &Sink,
        writer: Writer,
        keeping: Keeping,
    ) -> Option<Tables> {
        match format {
            TableFormat::Parquet => None,
            TableFormat::Delta => Some(Tables::Delta(
                delta::Tables::new(
                    sink.clone(),
                    delta::app_id(&keeping.database, &keeping.slot),
                    writer,
                )
                .on_type_change(keeping.on_type_change)
                .with_mirrors(delta::current::Mirrors {
                    outputs: keeping.mirrored,
                    properties: keeping.properties,
                    target: keeping.target,
                    reload: keeping.reload,
                }),
            )),
        }
    }

    /// Publish flush `sequence`'s `files` to their outputs' tables, idempotently and fenced:
    /// a table that holds the flush is left alone, one that holds a later flush of this
    /// pipeline means another instance took over.
    pub async fn publish(&self, sequence: u64, files: &[TableFile]) -> Result<(), CommitError> {
        match self {
            Tables::Delta(tables) => tables.publish(sequence, files).await,
        }
    }

    /// Bring every table up to the commit `log` through entry `upto`, from the entry after
    /// `through` (what the log says the tables held); returns how many entries it published.
    pub async fn catch_up(
        &self,
        log: &CommitLog,
        through: Option<u64>,
        upto: u64,
    ) -> Result<u64, CommitError> {
        match self {
            Tables::Delta(tables) => delta::catch_up(log, tables, through, upto).await,
        }
    }
}
