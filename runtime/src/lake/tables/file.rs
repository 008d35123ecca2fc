//! What every table format is given and asked, whatever it writes: the data files a flush
//! brings to an output's table, the policy for a column whose type changed, how an output's
//! current-state table is named, and who is asked for an output's rows again. Imports no
//! format, so that each format imports it.

use std::sync::Arc;

use arrow_schema::SchemaRef;
use object_store::path::Path;

use crate::lake::commit::{CommitError, FileEntry};
use crate::lake::encode::partition::{FilePartition, PARTITION_KEY};
use crate::lake::sink::Sink;

/// What one data file of a flush brings to its output's table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableFile {
    pub output: String,
    /// Relative to the sink root, as the commit log names it.
    pub path: String,
    pub size: u64,
    pub rows: u64,
    /// The file's columns, as written (conformed to the format's types), and a derived
    /// partition column the table has beside them.
    pub schema: SchemaRef,
    /// The partition whose rows the file holds, when its output is partitioned.
    pub partition: Option<FilePartition>,
    /// The file's Parquet footer (its encoded metadata, without the length and the magic),
    /// when its writer had the file at hand: a format that reads footers then reads nothing.
    pub footer: Option<bytes::Bytes>,
}

/// A flush's files by output: each output's table takes its own in one commit.
pub fn by_output(files: &[TableFile]) -> std::collections::BTreeMap<&str, Vec<&TableFile>> {
    let mut by_output: std::collections::BTreeMap<&str, Vec<&TableFile>> = Default::default();
    for file in files {
        by_output.entry(&file.output).or_default().push(file);
    }
    by_output
}

/// The columns a file brings to its table: its own, and a derived partition column.
pub fn table_columns(columns: SchemaRef, partition: Option<&FilePartition>) -> SchemaRef {
    match partition.and_then(FilePartition::derived_field) {
        None => columns,
        Some(field) => {
            let mut fields: Vec<_> = columns.fields().iter().cloned().collect();
            fields.push(field);
            Arc::new(arrow_schema::Schema::new_with_metadata(
                fields,
                columns.metadata().clone(),
            ))
        }
    }
}

/// What a flush whose column changed type does to its table (`sink.on_type_change`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeChange {
    /// The pipeline stops, naming the column and both types.
    #[default]
    Stop,
    /// The table starts a new version: the flush's commit replaces the schema with the files'
    /// and removes every earlier file, which readers still find by time travel.
    NewVersion,
}

/// What an output's current-state table is called after it: `<output>__current`.
pub const MIRROR_SUFFIX: &str = "__current";

/// The name of `output`'s current-state table.
pub fn mirror_name(output: &str) -> String {
    format!("{output}{MIRROR_SUFFIX}")
}

/// Asks for an output's rows to be loaded again, because a column came into its
/// current-state table while it held rows: no change carries that column's value in the
/// rows not changed since, which may not be null (a column renamed, or added with a default).
/// Asked before the flush that brings the column is applied, so a crash in between asks
/// again.
pub trait Reload: Send + Sync {
    fn request<'a>(
        &'a self,
        output: &'a str,
        columns: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<Asked, String>>;
}

/// How a load asked for comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// Beside the stream, once it reaches the request.
    Beside,
    /// At the next start, which the pipeline makes now.
    AtStart,
    /// At this start, which asked before (its catch-up meets the flush again).
    Due,
}

/// What a table that holds a later flush of the pipeline than the one being published means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Later {
    /// Another instance appended after this writer lost the pipeline: stop.
    TakenOver,
    /// The table holds the flush already. Every writer appends its flushes in order, and a
    /// start catches up before its first flush, so a table holding a later flush of the
    /// pipeline holds every earlier one. A catch-up meets such tables: an entry names through
    /// which flush the tables were up to date when it was written, and the writer before
    /// went on publishing the entries it had committed meanwhile.
    Holds,
}

/// What a landed data file brings to its table, read from its Parquet footer: for flushes
/// committed to the log but not yet to their tables when the writer stopped.
pub async fn file_from_footer(sink: &Sink, file: &FileEntry) -> Result<TableFile, CommitError> {
    let path = Path::from(file.path.as_str());
    let corrupt = |reason: String| CommitError::Corrupt {
        path: file.path.clone(),
        reason,
    };
    let size = file.bytes;
    let metadata = footer(sink, &path, size, None).await?;
    let meta = metadata.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(meta.schema_descr(), meta.key_value_metadata())
            .map_err(|e| corrupt(format!("its Parquet schema: {e}")))?;
    let partition = partition_of(meta.key_value_metadata()).map_err(corrupt)?;
    Ok(TableFile {
        output: file.output.clone(),
        path: file.path.clone(),
        size,
        rows: file.rows,
        schema: table_columns(Arc::new(schema), partition.as_ref()),
        partition,
        footer: None,
    })
}

/// The partition a data file's footer names (its key-value metadata), if any.
pub fn partition_of(
    metadata: Option<&Vec<parquet::file::metadata::KeyValue>>,
) -> Result<Option<FilePartition>, String> {
    metadata
        .into_iter()
        .flatten()
        .find(|kv| kv.key == PARTITION_KEY)
        .and_then(|kv| kv.value.as_deref())
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| format!("its partition: {e}"))
}

/// The encoded footer of a whole Parquet file, `None` when `file` does not end in one.
pub fn footer_of(file: &[u8]) -> Option<bytes::Bytes> {
    let size = file.len();
    let tail = file.get(size.checked_sub(8)?..)?;
    let length = u32::from_le_bytes(tail[..4].try_into().ok()?) as usize;
    if &tail[4..] != b"PAR1" || length + 8 > size {
        return None;
    }
    Some(bytes::Bytes::copy_from_slice(
        &file[size - 8 - length..size - 8],
    ))
}

/// The Parquet footer of the data file at `path`, `size` bytes long: `known` (its encoded
/// footer, [`TableFile::footer`]) decoded when given, else two ranged reads.
pub async fn footer(
    sink: &Sink,
    path: &Path,
    size: u64,
    known: Option<&bytes::Bytes>,
) -> Result<parquet::file::metadata::ParquetMetaData, CommitError> {
    let corrupt = |reason: String| CommitError::Corrupt {
        path: path.to_string(),
        reason,
    };
    let metadata = match known {
        Some(known) => known.clone(),
        None => {
            if size < 12 {
                return Err(corrupt(format!("{size} bytes is too short for Parquet")));
            }
            let tail = sink.get_range(path, size - 8..size).await?;
            let footer = u32::from_le_bytes(tail[..4].try_into().expect("four bytes")) as u64;
            if &tail[4..] != b"PAR1" || footer + 8 > size {
                return Err(corrupt("does not end in a Parquet footer".into()));
            }
            sink.get_range(path, size - 8 - footer..size - 8).await?
        }
    };
    parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&metadata)
        .map_err(|e| corrupt(format!("its Parquet footer: {e}")))
}
