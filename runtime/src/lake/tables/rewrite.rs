//! Rewriting a group of a table's small data files as one file, the same for every format:
//! the files' schemas merged (older files take the columns added since as nulls), their rows
//! copied in order and counted against what the table says they hold, and the new file
//! written under the table's `_compacted/` folder with the group's partition. Each format
//! chooses the groups ([`pack`]) and commits the swap of old files for new.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, new_null_array};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use object_store::path::Path;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::tend::{COMPACTED, CompactError};
use crate::lake::commit::CommitError;
use crate::lake::encode::partition::{FilePartition, PARTITION_KEY};
use crate::lake::sink::Sink;

/// A random (version 4) UUID, for the names of new files and tables.
pub fn random_uuid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the system's random source");
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    crate::wire::pgtype::uuid_text(&b)
}

/// Items in the order given, cut into groups when one reaches `target` bytes (`size` says an
/// item's); groups of one are left out (rewriting a file alone would gain nothing).
pub fn pack<T>(
    items: impl IntoIterator<Item = T>,
    size: impl Fn(&T) -> u64,
    target: u64,
) -> Vec<Vec<T>> {
    let mut groups = Vec::new();
    let mut group = Vec::new();
    let mut bytes = 0;
    for item in items {
        bytes += size(&item);
        group.push(item);
        if bytes >= target {
            groups.push(std::mem::take(&mut group));
            bytes = 0;
        }
    }
    groups.push(group);
    groups.retain(|g| g.len() > 1);
    groups
}

/// One file of a group to rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Small {
    /// Relative to the sink root.
    pub path: String,
    /// Its rows, when the table's metadata says.
    pub rows: Option<u64>,
}

/// The file a group was rewritten as, written and not yet committed.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// Relative to the sink root: `<table>/_compacted/<uuid>.parquet`.
    pub path: String,
    pub size: u64,
    pub rows: u64,
    /// Its columns ([`merged_schema`] of the group's).
    pub schema: SchemaRef,
    /// The partition of the group's first file, which the new file carries too.
    pub partition: Option<FilePartition>,
}

/// Rewrite `group`, files of table `table`, as one file under `<table>/_compacted/`. Each
/// file is held in memory while read.
pub async fn rewrite(
    sink: &Sink,
    table: &str,
    group: &[Small],
    properties: &WriterProperties,
) -> Result<Rewrite, CompactError> {
    let bad = |path: &str, reason: String| CompactError::File {
        output: table.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let mut readers = Vec::with_capacity(group.len());
    for small in group {
        let bytes = sink
            .get(&Path::from(small.path.as_str()))
            .await
            .map_err(CommitError::from)?
            .ok_or_else(|| {
                bad(
                    &small.path,
                    "the table reads it, but it is not in the sink".into(),
                )
            })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(|e| bad(&small.path, format!("not readable as Parquet: {e}")))?;
        readers.push((small, reader));
    }
    let partition = match readers.first() {
        Some((small, reader)) => {
            partition_of(reader.metadata().file_metadata().key_value_metadata())
                .map_err(|reason| bad(&small.path, reason))?
        }
        None => None,
    };
    let schemas: Vec<_> = readers.iter().map(|(_, r)| r.schema().clone()).collect();
    let schema = merged_schema(&schemas).map_err(|e| bad(table, e.to_string()))?;
    let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties.clone()))
        .map_err(|e| bad(table, e.to_string()))?;
    if let Some(p) = &partition {
        let value = serde_json::to_string(p).expect("a partition serializes");
        writer.append_key_value_metadata(KeyValue::new(PARTITION_KEY.to_owned(), value));
    }
    let (mut rows, mut expected) = (0u64, 0u64);
    for (small, reader) in readers {
        let reader = reader
            .build()
            .map_err(|e| bad(&small.path, e.to_string()))?;
        let before = rows;
        for batch in reader {
            let batch = batch.map_err(|e| bad(&small.path, e.to_string()))?;
            let batch = fit(&batch, &schema).map_err(|e| bad(&small.path, e.to_string()))?;
            rows += batch.num_rows() as u64;
            writer
                .write(&batch)
                .map_err(|e| bad(&small.path, e.to_string()))?;
        }
        expected += small.rows.unwrap_or(rows - before);
    }
    if rows != expected {
        return Err(bad(
            table,
            format!("the files held {rows} rows where the table says {expected}"),
        ));
    }
    let bytes = writer.into_inner().map_err(|e| bad(table, e.to_string()))?;
    let path = format!("{table}/{COMPACTED}/{}.parquet", random_uuid());
    let size = bytes.len() as u64;
    sink.create(&Path::from(path.as_str()), bytes.into())
        .await
        .map_err(CommitError::from)?;
    Ok(Rewrite {
        path,
        size,
        rows,
        schema,
        partition,
    })
}

/// The partition a file's footer names, if any.
fn partition_of(metadata: Option<&Vec<KeyValue>>) -> Result<Option<FilePartition>, String> {
    metadata
        .into_iter()
        .flatten()
        .find(|kv| kv.key == PARTITION_KEY)
        .and_then(|kv| kv.value.as_deref())
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| format!("its partition: {e}"))
}

/// Delete the files of a compaction that did not commit (paths relative to the sink; a
/// failure to delete is only told: no table reads them).
pub async fn remove_written<'a>(sink: &Sink, paths: impl IntoIterator<Item = &'a str>) {
    for path in paths {
        let path = Path::from(path);
        if let Err(e) = sink.delete(&path).await {
            tracing::warn!(%path, error = %e, "could not delete a file of a compaction that did not commit; no table reads it");
        }
    }
}

/// The schema of a file that holds all of `schemas`' rows: every column of any of them, in
/// the order they first appear (older files first, so added columns come last, as in the
/// table), nested columns merged the same way, every column nullable. A column keeps the
/// metadata of the last file that has it (its PostgreSQL type, whether it is a key column):
/// what the column is as of the newest rows. A current-state table built from a compacted
/// change log finds its key there.
pub fn merged_schema(schemas: &[SchemaRef]) -> Result<SchemaRef, ArrowError> {
    let mut fields: Vec<FieldRef> = Vec::new();
    for schema in schemas {
        fields = merge_fields(&fields, schema.fields())?;
    }
    Ok(Arc::new(Schema::new(fields)))
}

fn merge_fields(into: &[FieldRef], from: &Fields) -> Result<Vec<FieldRef>, ArrowError> {
    let mut merged: Vec<FieldRef> = into.to_vec();
    for field in from {
        match merged.iter().position(|f| f.name() == field.name()) {
            None => merged.push(Arc::new(field.as_ref().clone().with_nullable(true))),
            Some(at) => {
                let have = &merged[at];
                let data_type = match (have.data_type(), field.data_type()) {
                    (DataType::Struct(a), DataType::Struct(b)) => DataType::Struct(
                        merge_fields(&a.iter().cloned().collect::<Vec<_>>(), b)?.into(),
                    ),
                    (a, b) if a == b => a.clone(),
                    (a, b) => {
                        return Err(ArrowError::SchemaError(format!(
                            "column {} is {a} in one file and {b} in another",
                            field.name()
                        )));
                    }
                };
                merged[at] = Arc::new(
                    Field::new(have.name(), data_type, true)
                        .with_metadata(field.metadata().clone()),
                );
            }
        }
    }
    Ok(merged)
}

/// `batch` with the columns of `schema` (a [`merged_schema`] that includes its own): the ones
/// it lacks are null, nested ones alike.
pub fn fit(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let columns = fit_columns(
        batch.schema().fields(),
        batch.columns(),
        schema.fields(),
        batch.num_rows(),
    )?;
    RecordBatch::try_new(schema.clone(), columns)
}

fn fit_columns(
    have: &Fields,
    columns: &[ArrayRef],
    want: &Fields,
    rows: usize,
) -> Result<Vec<ArrayRef>, ArrowError> {
    want.iter()
        .map(|field| {
            let Some(at) = have.iter().position(|f| f.name() == field.name()) else {
                return Ok(new_null_array(field.data_type(), rows));
            };
            let column = &columns[at];
            match (column.data_type(), field.data_type()) {
                (DataType::Struct(inner), DataType::Struct(wanted)) if inner != wanted => {
                    let array = column
                        .as_any()
                        .downcast_ref::<StructArray>()
                        .expect("a struct column is a StructArray");
                    let children = fit_columns(inner, array.columns(), wanted, rows)?;
                    Ok(Arc::new(StructArray::try_new(
                        wanted.clone(),
                        children,
                        array.nulls().cloned(),
                    )?) as ArrayRef)
                }
                _ => Ok(column.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow_array::Int64Array;

    use super::*;

    #[test]
    fn items_are_packed_in_order_into_groups_of_the_target_and_a_lone_one_is_left() {
        let groups = pack([40u64, 40, 40, 40, 40], |s| *s, 100);
        assert_eq!(groups, [vec![40, 40, 40], vec![40, 40]]);
        assert!(pack([40u64], |s| *s, 100).is_empty());
        assert!(
            pack([500u64, 500], |s| *s, 100).is_empty(),
            "each at the target already"
        );
    }

    #[test]
    fn a_column_in_several_files_keeps_the_metadata_of_the_last() {
        let marked = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<std::collections::HashMap<_, _>>()
        };
        let key = [("tributary.key", "true"), ("pg.type", "int4")];
        let older = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false).with_metadata(marked(&key)),
            Field::new("v", DataType::Utf8, true).with_metadata(marked(&[("pg.type", "text")])),
        ]));
        let newer = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false)
                .with_metadata(marked(&[("tributary.key", "true"), ("pg.type", "int8")])),
            Field::new("v", DataType::Utf8, true),
        ]));
        let merged = merged_schema(&[older.clone(), older.clone()]).unwrap();
        assert_eq!(
            merged.field(0).metadata(),
            &marked(&key),
            "the key stays marked"
        );
        let merged = merged_schema(&[older, newer]).unwrap();
        assert_eq!(
            merged.field(0).metadata(),
            &marked(&[("tributary.key", "true"), ("pg.type", "int8")])
        );
        assert!(
            merged.field(1).metadata().is_empty(),
            "as the last file has it"
        );
    }

    #[test]
    fn older_files_take_the_columns_added_since_as_nulls_nested_ones_too() {
        let old_inner = Fields::from(vec![Field::new("id", DataType::Int64, true)]);
        let new_inner = Fields::from(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("note", DataType::Utf8, true),
        ]);
        let older = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("_old", DataType::Struct(old_inner.clone()), true),
        ]));
        let newer = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("_old", DataType::Struct(new_inner.clone()), true),
            Field::new("note", DataType::Utf8, true),
        ]));
        let merged = merged_schema(&[older.clone(), newer.clone()]).unwrap();
        let names: Vec<&str> = merged.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "_old", "note"]);
        assert_eq!(
            merged.field(1).data_type(),
            &DataType::Struct(new_inner.clone())
        );

        let old_struct = StructArray::new(
            old_inner,
            vec![Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef],
            Some(vec![true, false].into()),
        );
        let batch = RecordBatch::try_new(
            older,
            vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(old_struct)],
        )
        .unwrap();
        let fitted = fit(&batch, &merged).unwrap();
        assert_eq!(fitted.num_columns(), 3);
        assert_eq!(fitted.column(2).null_count(), 2);
        let old = fitted
            .column(1)
            .as_any()
            .downcast_ref::<StructArray>()
            .unwrap();
        assert_eq!(old.null_count(), 1, "a row without an old image keeps none");
        assert_eq!(old.column(1).len(), 2);
        assert_eq!(old.column(1).null_count(), 2);

        let mismatched = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, true)]));
        let err = merged_schema(&[merged, mismatched])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column id is Int64 in one file and Utf8"),
            "{err}"
        );
    }
}
