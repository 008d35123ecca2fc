//! `tributary compact`: rewrite the small files of a pipeline's tables into files of
//! `parquet.target_file_mb`, beside the running pipeline (see [`TableSet::compact`]).
//!
//! A table's rows do not change, so the commit says `dataChange = false`; the files it
//! replaced stay in the sink (the commit log names them, and `verify` reads them), and a
//! reader of an older version of the table still finds them. A current-state table
//! (`<output>__current`) is compacted by key: neighbouring small files are merged, their rows
//! sorted by key, so each new file's key bounds stay narrow.

use std::fmt;

use crate::config::PipelineConfig;
use crate::lake::commit::{CommitError, CommitLog, Writer};
use crate::lake::encode::{EncodeError, Encoder};
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::{CompactError, Compacted, TableSet, app_id};

#[derive(Debug, thiserror::Error)]
pub enum CompactCommandError {
    #[error(
        "tributary compact rewrites the files of a sink's tables, and this pipeline lands Parquet files with a commit log (sink.format = \"parquet\"): there is nothing to compact"
    )]
    NotTables,
    #[error(transparent)]
    Tables(#[from] TablesError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Compact(#[from] CompactError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Why the tables of a command cannot be chosen.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    #[error(
        "{output:?} is not a table of this sink (its tables: {tables}); name one of them, or none for all"
    )]
    NoSuchTable { output: String, tables: String },
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// The sink's tables, in `config`'s format (`None` for Parquet files alone), named for the
/// pipeline the sink's commit log says it holds.
pub(super) async fn table_set(
    config: &PipelineConfig,
    sink: &Sink,
    command: &str,
) -> Result<Option<TableSet>, CommitError> {
    let log = CommitLog::new(sink.clone(), Writer::named(command));
    let app = log.identity().await?.map(|i| app_id(&i.database, &i.slot));
    Ok(TableSet::open(
        config.sink.format,
        sink,
        app,
        config.sink.catalog(),
    ))
}

/// The set's tables, or only `output`, which must be one.
pub(super) async fn tables(
    set: &TableSet,
    output: Option<&str>,
) -> Result<Vec<String>, TablesError> {
    let mut names = set.names().await?;
    if let Some(output) = output {
        if !names.iter().any(|n| n == output) {
            return Err(TablesError::NoSuchTable {
                output: output.to_owned(),
                tables: names.join(", "),
            });
        }
        names.retain(|n| n == output);
    }
    Ok(names)
}

/// What a compaction of the pipeline's tables did, one line per table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub tables: Vec<Compacted>,
}

/// Compact every table of the pipeline's sink, or only `output`.
pub async fn run(
    config: &PipelineConfig,
    output: Option<&str>,
) -> Result<Compaction, CompactCommandError> {
    let sink = Sink::open(&config.sink.url, &config.sink.options)?;
    let set = table_set(config, &sink, "compact")
        .await
        .map_err(TablesError::from)?
        .ok_or(CompactCommandError::NotTables)?;
    let names = tables(&set, output).await?;
    let encoder = Encoder::new(&config.parquet.encode_options())?;
    let target = config.parquet.target_file_bytes();
    let mut tables = Vec::new();
    for name in names {
        tracing::info!(output = %name, target_mib = target >> 20, "compacting: rewriting the table's files smaller than the target size");
        let done = set.compact(&name, target, encoder.properties()).await?;
        tracing::info!(
            output = %name,
            version = ?done.version,
            replaced = done.replaced,
            written = done.written,
            rows = done.rows,
            "compacted"
        );
        tables.push(done);
    }
    Ok(Compaction { tables })
}

impl fmt::Display for Compaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tables {
            if let Some(reason) = &t.left_alone {
                writeln!(f, "compact: {}: left alone: {reason}", t.output)?;
                continue;
            }
            match t.version {
                None => writeln!(
                    f,
                    "compact: {}: nothing to compact (no two files below the target size)",
                    t.output
                )?,
                Some(version) => writeln!(
                    f,
                    "compact: {}: {} files ({} bytes) rewritten as {} ({} bytes), {} rows, version {version}",
                    t.output, t.replaced, t.replaced_bytes, t.written, t.written_bytes, t.rows
                )?,
            }
        }
        if self.tables.is_empty() {
            writeln!(f, "compact: the sink holds no table yet")?;
        }
        Ok(())
    }
}
