//! Output rows to Parquet files.
//!
//! One [`OutputBatch`] becomes one or more Parquet files that share one schema
//! ([`arrow_schema`]): the change metadata columns first, then the output's columns in order.
//!
//! | column | Arrow type |
//! |---|---|
//! | `_op` | `Utf8` (`insert`, `update`, `delete`, `truncate`; dictionary-encoded on disk) |
//! | `_commit_lsn` | `UInt64` |
//! | `_seq` | `UInt32`, the change's ordinal within its transaction |
//! | `_xid` | `UInt32` |
//! | `_commit_time` | `Timestamp(Microsecond, "UTC")` |
//! | `_schema` | `Utf8`, the fingerprint of the output's columns ([`fingerprint`]); dictionary-encoded |
//! | `_unchanged_toast` | `List<Utf8>`: the columns that hold an unchanged TOAST value (landed as null); null when none |
//!
//! Outputs derived from a source table end with `_old`, a struct with the table's columns:
//! the row before an update or delete (key columns only, others null, unless the table is
//! `REPLICA IDENTITY FULL`), null for inserts, truncates and updates that sent no old row.
//! Outputs a plugin declared end with `_sub` (`UInt32`): which of the rows one change or
//! message gave rise to a row is, so `(_commit_lsn, _seq, _sub)` identifies it.
//!
//! Output columns map from their PostgreSQL type. All are nullable, except the columns of a
//! declared output that its plugin declared not nullable; declared key columns carry the
//! field metadata `tributary.key = true`:
//!
//! | PostgreSQL | Arrow | notes |
//! |---|---|---|
//! | `bool` | `Boolean` | |
//! | `int2` / `int4` / `int8` | `Int16` / `Int32` / `Int64` | |
//! | `oid` | `UInt32` | |
//! | `float4` / `float8` | `Float32` / `Float64` | NaN and ±infinity kept |
//! | `numeric(p,s)`, `p <= 38` | `Decimal128(p,s)` | |
//! | `numeric(p,s)`, `p > 38` | `Utf8` | exact text: DuckDB misreads wider Parquet decimals, Spark and Trino stop at 38 digits |
//! | `numeric` without a modifier | `Utf8` | the exact text: no fixed scale holds every value, and NaN/Infinity are legal |
//! | `numeric(p,s)` with `s < 0` or `s > p` | `Utf8` | exact text; Parquet decimals cannot hold them |
//! | `text`, `varchar`, `bpchar`, `name`, `"char"` | `Utf8` | |
//! | `bytea` | `Binary` | |
//! | `date` | `Date32` | infinity is `i32::MAX`, -infinity `i32::MIN + 1` (DuckDB reads both as infinities) |
//! | `time` | `Time64(Microsecond)` | |
//! | `timestamp` | `Timestamp(Microsecond, None)` | infinity is `i64::MAX`, -infinity `i64::MIN + 1` (as DuckDB reads them) |
//! | `timestamptz` | `Timestamp(Microsecond, "UTC")` | as above |
//! | `interval` | `Struct{months: Int32, days: Int32, micros: Int64}` | see below |
//! | `uuid` | `FixedSizeBinary(16)` | Parquet `UUID` logical type |
//! | `json`, `jsonb` | `Utf8` | Parquet `JSON` logical type |
//! | `money` | `Decimal128(19, d)` | `d` is the server's `lc_monetary` fraction digits |
//! | `timetz` | `Struct{time: Time64(Microsecond), offset_seconds: Int32}` | local time and its offset east of UTC |
//! | `inet`, `cidr`, `macaddr`, `macaddr8`, `xml`, enums | `Utf8` | as PostgreSQL prints them |
//! | a domain | its base type's | `pg.type` names the domain |
//! | arrays of any of these | `List` of the element type, one level per declared dimension | `pg.dims` holds the dimensions |
//! | composites, ranges, everything else | `Utf8` | PostgreSQL's text form; `pg.type` names the type |
//!
//! `interval` is a struct because Arrow's `Interval(MonthDayNano)`, which both pyarrow and
//! DuckDB read, cannot be written by the Parquet crate, and Parquet's own `INTERVAL` holds
//! neither negative parts nor microseconds. The struct keeps PostgreSQL's three fields exactly.
//!
//! Each output column's field metadata names its PostgreSQL type: `pg.type` (the `typname`,
//! for built-in types), `pg.oid`, and `pg.typmod` when the column has a modifier.
//!
//! A column takes exactly the [`Value`](crate::stream::change::Value) variant that
//! [`pgtype::decode_text`](crate::wire::pgtype::decode_text) produces for its type (`Int8` for an
//! `oid`), plus `Null`. Anything else (text in an `int4` column, a numeric that does not fit
//! `numeric(p,s)`, NaN in a decimal) is an [`EncodeError::Value`] naming the output, the
//! column, its type and the change: transforms that emit rows which do not match their
//! declared schema are caught here. `UnchangedToast` is written as null and named in `_unchanged_toast`.
//!
//! Rows are encoded in chunks; a file is closed after the chunk that takes it past
//! [`EncodeOptions::target_file_bytes`], so files split only at row boundaries and a file
//! may overshoot the target by up to one chunk. An empty batch produces no file.

mod columns;
mod decimal;
pub mod partition;
mod schema;
mod values;

use std::sync::Arc;

use arrow_array::types::UInt32Type;
use arrow_array::{ArrayRef, PrimitiveArray, RecordBatch};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::Lsn;
use crate::lake::tables;
use crate::stream::change::{OutputBatch, OutputColumn, OutputRow, Value};

pub use schema::{
    LIST_ITEM, METADATA_COLUMNS, OLD_COLUMN, PG_DIMS_KEY, PG_OID_KEY, PG_TYPE_KEY, PG_TYPMOD_KEY,
    SUB_COLUMN, arrow_schema, fingerprint,
};

use schema::Kind;

pub(crate) use values::column_values;

/// The Arrow field of an output column, as its files hold it (name, type, nullability, the
/// `pg.*` metadata): for the columnar plugin interface, which hands plugins columns typed as
/// they land.
pub(crate) fn column_field(column: &OutputColumn) -> arrow_schema::Field {
    schema::column_field(column)
}

/// The values of an output column as the Arrow array its files hold, or the index of the
/// first value that does not fit it and why.
pub(crate) fn column_array(
    column: &OutputColumn,
    values: &[&Value],
) -> Result<ArrayRef, (usize, String)> {
    let field = schema::column_field(column);
    columns::build_values(values, Kind::of(column), column.ty.dims, field.data_type())
}

/// Most rows built into Arrow arrays at once: keeps the arrays cache-sized and bounds how far
/// a file overshoots its target.
const MAX_CHUNK_ROWS: usize = 8192;
/// The zstd level files are written at unless `parquet.zstd_level` says otherwise.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;
/// Most payload bytes built into Arrow arrays at once.
const MAX_CHUNK_BYTES: usize = 32 << 20;

#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Rows per row group.
    pub row_group_rows: usize,
    /// A file is closed and the next one started once it reaches about this size.
    pub target_file_bytes: usize,
    pub compression: Codec,
    /// The table format the files are for: a table's columns take the types its format has
    /// ([`crate::lake::tables::conform_schema`]).
    pub format: crate::lake::TableFormat,
    /// Outputs whose files each hold one partition's rows, by output.
    pub partitions: std::collections::BTreeMap<String, partition::Partition>,
}

/// How the pages of a file are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// zstd at this level (1 to 22): the default, read by every Parquet reader.
    Zstd(i32),
    /// Snappy: faster to write, larger files.
    Snappy,
    /// No compression.
    Uncompressed,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            row_group_rows: 128 * 1024,
            target_file_bytes: 128 << 20,
            compression: Codec::Zstd(DEFAULT_ZSTD_LEVEL),
            format: crate::lake::TableFormat::Parquet,
            partitions: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("output {output:?}: {message}")]
    Invalid { output: String, message: String },
    /// A row cannot be given a partition (`[outputs."<output>"] partition_by`).
    #[error(
        "output {output:?}: {reason} (see partition_by in [outputs.{output:?}] of the pipeline file)"
    )]
    Partition { output: String, reason: String },
    /// A value does not fit its column.
    #[error(
        "output {output:?} column {column:?} ({pg_type}): change at commit lsn {commit_lsn} \
         seq {seq}: {reason} (hint: rows must match the output's declared column types)"
    )]
    Value {
        output: String,
        column: String,
        pg_type: String,
        commit_lsn: Lsn,
        seq: u32,
        reason: String,
    },
    /// A row has a different number of values than the output has columns.
    #[error(
        "output {output:?}: change at commit lsn {commit_lsn} seq {seq} has {values} values \
         for {columns} columns"
    )]
    Arity {
        output: String,
        commit_lsn: Lsn,
        seq: u32,
        values: usize,
        columns: usize,
    },
    #[error("invalid encode options: {0}")]
    Options(String),
    #[error("output {output:?}: building arrow arrays failed")]
    Arrow {
        output: String,
        #[source]
        source: ArrowError,
    },
    #[error("output {output:?}: writing parquet failed")]
    Parquet {
        output: String,
        #[source]
        source: ParquetError,
    },
}

/// Encodes output batches with writer properties built once.
#[derive(Debug, Clone)]
pub struct Encoder {
    properties: WriterProperties,
    chunk_rows: usize,
    target_file_bytes: usize,
    /// The table format whose types the files are written in.
    format: crate::lake::TableFormat,
    partitions: Arc<std::collections::BTreeMap<String, partition::Partition>>,
}

impl Encoder {
    pub fn new(options: &EncodeOptions) -> Result<Self, EncodeError> {
        if options.row_group_rows == 0 {
            return Err(EncodeError::Options(
                "row_group_rows must be at least 1".into(),
            ));
        }
        let compression = match options.compression {
            Codec::Zstd(level) => Compression::ZSTD(
                ZstdLevel::try_new(level)
                    .map_err(|e| EncodeError::Options(format!("zstd level {level}: {e}")))?,
            ),
            Codec::Snappy => Compression::SNAPPY,
            Codec::Uncompressed => Compression::UNCOMPRESSED,
        };
        let properties = WriterProperties::builder()
            .set_compression(compression)
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_max_row_group_row_count(Some(options.row_group_rows))
            .set_column_dictionary_enabled(ColumnPath::from("_op"), true)
            .set_column_dictionary_enabled(ColumnPath::from("_schema"), true)
            .set_created_by(format!("tributary {}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Encoder {
            properties,
            chunk_rows: options.row_group_rows.min(MAX_CHUNK_ROWS),
            target_file_bytes: options.target_file_bytes,
            format: options.format,
            partitions: Arc::new(options.partitions.clone()),
        })
    }

    /// The Parquet writer properties every data file is written with.
    pub fn properties(&self) -> &WriterProperties {
        &self.properties
    }

    /// Encode one output batch as one or more Parquet files (more when it passes the target
    /// size), in row order, each with its row count and schema fingerprint.
    pub fn encode(&self, batch: &OutputBatch) -> Result<Vec<EncodedFile>, EncodeError> {
        check_arity(batch)?;
        let Some(partition) = self.partitions.get(&batch.output) else {
            return self.encode_rows(batch, &batch.rows, None);
        };
        let refused = |reason: String| EncodeError::Partition {
            output: batch.output.clone(),
            reason,
        };
        let at = partition.locate(&batch.columns).map_err(refused)?;
        let parts = batch
            .rows
            .iter()
            .map(|r| partition.of(r, at))
            .collect::<Result<Vec<_>, _>>()
            .map_err(refused)?;
        let Some(first) = parts.first() else {
            return Ok(Vec::new());
        };
        if parts.iter().all(|p| p == first) {
            return self.encode_rows(batch, &batch.rows, Some(first));
        }
        // Rows of several partitions: each partition's rows, in order, into files of their own.
        let mut groups: std::collections::BTreeMap<Option<&str>, Vec<OutputRow>> =
            std::collections::BTreeMap::new();
        for (row, part) in batch.rows.iter().zip(&parts) {
            groups
                .entry(part.value.as_deref())
                .or_default()
                .push(row.clone());
        }
        let mut files = Vec::new();
        for (value, rows) in groups {
            let part = parts
                .iter()
                .find(|p| p.value.as_deref() == value)
                .expect("a group's partition");
            files.extend(self.encode_rows(batch, &rows, Some(part))?);
        }
        Ok(files)
    }

    /// Encode `rows` (of `batch`) into files, each recording `partition` when there is one.
    fn encode_rows(
        &self,
        batch: &OutputBatch,
        rows: &[OutputRow],
        partition: Option<&partition::FilePartition>,
    ) -> Result<Vec<EncodedFile>, EncodeError> {
        let output = &batch.output;
        let schema = arrow_schema(&batch.columns, batch.old_image);
        let written = tables::conform_schema(self.format, &schema);
        let kinds: Vec<Kind> = batch.columns.iter().map(Kind::of).collect();
        let fingerprint = fingerprint(&batch.columns);
        let parquet_err = |source| EncodeError::Parquet {
            output: output.clone(),
            source,
        };

        let mut files = Vec::new();
        let mut writer: Option<ArrowWriter<Vec<u8>>> = None;
        let mut rows_in_file = 0u64;
        let mut start = 0;
        let tag = partition.map(|p| {
            parquet::file::metadata::KeyValue::new(
                partition::PARTITION_KEY.to_owned(),
                serde_json::to_string(p).expect("a partition serializes"),
            )
        });
        let finish = |mut w: ArrowWriter<Vec<u8>>| {
            if let Some(tag) = &tag {
                w.append_key_value_metadata(tag.clone());
            }
            w.into_inner().map_err(parquet_err)
        };
        while start < rows.len() {
            let end = self.chunk_end(batch, rows, start)?;
            let record = record_batch(batch, &schema, &kinds, &fingerprint, &rows[start..end])?;
            let record =
                tables::conform_batch(self.format, &record, &written).map_err(|source| {
                    EncodeError::Arrow {
                        output: output.clone(),
                        source,
                    }
                })?;
            let w = match &mut writer {
                Some(w) => w,
                None => writer.insert(
                    ArrowWriter::try_new(
                        Vec::new(),
                        written.clone(),
                        Some(self.properties.clone()),
                    )
                    .map_err(parquet_err)?,
                ),
            };
            w.write(&record).map_err(parquet_err)?;
            rows_in_file += (end - start) as u64;
            if w.bytes_written() + w.in_progress_size() >= self.target_file_bytes
                && let Some(full) = writer.take()
            {
                files.push(EncodedFile {
                    bytes: Bytes::from(finish(full)?),
                    rows: std::mem::take(&mut rows_in_file),
                    schema: fingerprint.clone(),
                    columns: written.clone(),
                    partition: partition.cloned(),
                });
            }
            start = end;
        }
        if let Some(last) = writer {
            files.push(EncodedFile {
                bytes: Bytes::from(finish(last)?),
                rows: rows_in_file,
                schema: fingerprint.clone(),
                columns: written.clone(),
                partition: partition.cloned(),
            });
        }
        Ok(files)
    }

    /// The end of the chunk that starts at `start`: at least one row, then up to the row and
    /// byte bounds.
    fn chunk_end(
        &self,
        batch: &OutputBatch,
        rows: &[OutputRow],
        start: usize,
    ) -> Result<usize, EncodeError> {
        let mut bytes = 0;
        let mut end = start;
        while end < rows.len() && end - start < self.chunk_rows && bytes < MAX_CHUNK_BYTES {
            for (col, value) in rows[end].values.iter().enumerate() {
                let len = columns::value_bytes(value);
                // Arrow's string and binary arrays address their bytes with i32 offsets.
                if len > i32::MAX as usize {
                    return Err(value_error(
                        batch,
                        col,
                        &rows[end],
                        format!("a value of {len} bytes is larger than an Arrow array holds"),
                    ));
                }
                bytes += len;
            }
            if let Some(old) = &rows[end].old {
                bytes += old.iter().map(columns::value_bytes).sum::<usize>();
            }
            end += 1;
        }
        Ok(end)
    }
}

/// One Parquet file of an output, with what the commit log records of it.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedFile {
    pub bytes: Bytes,
    pub rows: u64,
    /// The fingerprint of the output's columns ([`fingerprint`]).
    pub schema: String,
    /// The Arrow schema the file was written with.
    pub columns: SchemaRef,
    /// The partition whose rows it holds, when its output is partitioned.
    pub partition: Option<partition::FilePartition>,
}

/// Encode one output batch as one or more Parquet files (more when it passes the target size).
///
/// Builds the writer properties for this call; a caller encoding many batches with the same
/// options keeps an [`Encoder`] instead.
pub fn encode(
    batch: &OutputBatch,
    options: &EncodeOptions,
) -> Result<Vec<EncodedFile>, EncodeError> {
    Encoder::new(options)?.encode(batch)
}

/// The Arrow columns of a whole output batch, exactly as [`Encoder::encode`] builds them
/// before they become Parquet: for readers that compare values with what landed (`tributary
/// verify` takes the source's rows through here).
pub fn to_record_batch(batch: &OutputBatch) -> Result<RecordBatch, EncodeError> {
    check_arity(batch)?;
    let schema = arrow_schema(&batch.columns, batch.old_image);
    let kinds: Vec<Kind> = batch.columns.iter().map(Kind::of).collect();
    record_batch(
        batch,
        &schema,
        &kinds,
        &fingerprint(&batch.columns),
        &batch.rows,
    )
}

/// Every row holds one value per column, and so does its old image.
fn check_arity(batch: &OutputBatch) -> Result<(), EncodeError> {
    let columns = batch.columns.len();
    for row in &batch.rows {
        let old_len = row.old.as_ref().map_or(columns, Vec::len);
        if row.values.len() != columns || old_len != columns {
            return Err(EncodeError::Arity {
                output: batch.output.clone(),
                commit_lsn: row.commit_lsn,
                seq: row.seq,
                values: if row.values.len() != columns {
                    row.values.len()
                } else {
                    old_len
                },
                columns,
            });
        }
    }
    Ok(())
}

fn value_error(batch: &OutputBatch, col: usize, row: &OutputRow, reason: String) -> EncodeError {
    let column = &batch.columns[col];
    EncodeError::Value {
        output: batch.output.clone(),
        column: column.name.clone(),
        pg_type: schema::type_label(column),
        commit_lsn: row.commit_lsn,
        seq: row.seq,
        reason,
    }
}

fn record_batch(
    batch: &OutputBatch,
    schema: &SchemaRef,
    kinds: &[Kind],
    fingerprint: &str,
    rows: &[OutputRow],
) -> Result<RecordBatch, EncodeError> {
    let offset = METADATA_COLUMNS.len();
    let commit_time_type = schema.field(4).data_type();
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(offset + kinds.len());
    arrays.extend(columns::metadata(
        rows,
        &batch.columns,
        commit_time_type,
        fingerprint,
    ));
    for (col, &kind) in kinds.iter().enumerate() {
        let data_type: &DataType = schema.field(offset + col).data_type();
        let dims = batch.columns[col].ty.dims;
        let array = columns::build_column(rows, col, kind, dims, data_type)
            .map_err(|(i, reason)| value_error(batch, col, &rows[i], reason))?;
        arrays.push(array);
    }
    if batch.old_image {
        let data_type = schema.field(offset + kinds.len()).data_type();
        let old = columns::old_images(rows, &batch.columns, kinds, data_type)
            .map_err(|(i, col, reason)| value_error(batch, col, &rows[i], reason))?;
        arrays.push(old);
    } else {
        arrays.push(Arc::new(PrimitiveArray::<UInt32Type>::from_iter_values(
            rows.iter().map(|r| r.sub),
        )));
    }
    RecordBatch::try_new(Arc::clone(schema), arrays).map_err(|source| EncodeError::Arrow {
        output: batch.output.clone(),
        source,
    })
}

#[cfg(test)]
mod tests;
