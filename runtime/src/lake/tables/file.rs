//! What every table format is given and asked, whatever it writes: the data files a flush
//! brings to an output's table, the policy for a column whose type changed, how an output's
//! current-state table is named, and who is asked for an output's rows again. Imports no
//! format, so that each format imports it.

use std::sync::Arc;

use arrow_schema::SchemaRef;

use crate::lake::encode::partition::FilePartition;

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
