//! Checkpoints of a table's log: the state at one version as a Parquet file
//! (`_delta_log/<version>.checkpoint.parquet`), one row per action that state holds (the
//! protocol, the metadata, each application's `txn`, each live file's `add`, and a `remove`
//! tombstone for each file removed within the default retention, which a vacuum reading from
//! the checkpoint needs), so a reader starts from it instead of replaying every commit before.
//! `_delta_log/_last_checkpoint` names the latest. No IO.

use std::sync::Arc;

use arrow_array::builder::{MapBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;

use super::state::TableState;

/// A table is checkpointed at every version that is a multiple of this.
pub const CHECKPOINT_EVERY: u64 = 10;

/// Whether version `version` of a table gets a checkpoint.
pub fn due(version: u64) -> bool {
    version > 0 && version.is_multiple_of(CHECKPOINT_EVERY)
}

/// What each row of the checkpoint holds.
enum Row<'a> {
    Protocol,
    Metadata,
    Txn(&'a str, u64),
    Add(&'a super::actions::Add),
    Remove(&'a super::actions::Remove),
}

fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn long(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}

fn strings(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("element", DataType::Utf8, true))),
        true,
    )
}

/// A column of string-to-string maps: `Some` rows hold the pairs, `None` rows are null.
fn maps<'a>(
    rows: impl Iterator<Item = Option<Vec<(&'a str, Option<&'a str>)>>>,
) -> (Field, ArrayRef) {
    let mut builder = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for row in rows {
        match row {
            Some(pairs) => {
                for (k, v) in pairs {
                    builder.keys().append_value(k);
                    builder.values().append_option(v);
                }
                builder.append(true).expect("keys and values line up");
            }
            None => builder.append(false).expect("keys and values line up"),
        }
    }
    let array = builder.finish();
    (
        Field::new("unused", array.data_type().clone(), true),
        Arc::new(array),
    )
}

/// A nullable list-of-strings column.
fn string_lists(rows: &[Option<Vec<String>>]) -> ArrayRef {
    let lengths = rows.iter().map(|r| r.as_ref().map_or(0, Vec::len));
    let values: StringArray = rows.iter().flatten().flatten().map(Some).collect();
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    Arc::new(ListArray::new(
        Arc::new(Field::new("element", DataType::Utf8, true)),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(values),
        Some(nulls),
    ))
}

fn structure(fields: Vec<(Field, ArrayRef)>, present: &[bool]) -> (DataType, ArrayRef) {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = fields.into_iter().unzip();
    let fields = Fields::from(fields);
    let array = StructArray::new(
        fields.clone(),
        arrays,
        Some(NullBuffer::from(present.to_vec())),
    );
    (DataType::Struct(fields), Arc::new(array))
}

/// The checkpoint of `state` (which must hold a protocol and metadata) written at `now_ms`:
/// the Parquet file and its number of rows.
pub fn checkpoint(state: &TableState, now_ms: i64) -> (Bytes, u64) {
    let protocol = state.protocol.as_ref().expect("a table has a protocol");
    let metadata = state.metadata.as_ref().expect("a table has metadata");
    let rows = Rows::of(state, now_ms);
    let (txn_type, txn_array) = rows.txn_column();
    let (add_type, add_array) = rows.add_column();
    let (remove_type, remove_array) = rows.remove_column();
    let (metadata_type, metadata_array) = rows.metadata_column(metadata);
    let (protocol_type, protocol_array) = rows.protocol_column(protocol);
    let schema = Arc::new(Schema::new(vec![
        Field::new("txn", txn_type, true),
        Field::new("add", add_type, true),
        Field::new("remove", remove_type, true),
        Field::new("metaData", metadata_type, true),
        Field::new("protocol", protocol_type, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            txn_array,
            add_array,
            remove_array,
            metadata_array,
            protocol_array,
        ],
    )
    .expect("the checkpoint's columns line up");
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, None).expect("a Parquet writer");
    writer.write(&batch).expect("writing to memory");
    let bytes = writer.into_inner().expect("writing to memory");
    (Bytes::from(bytes), rows.0.len() as u64)
}

/// The rows of a checkpoint, in the order they are written. Each action kind is one struct
/// column, null in the rows of the other kinds; the methods build one column each.
struct Rows<'a>(Vec<Row<'a>>);

impl<'a> Rows<'a> {
    /// The actions of `state` at `now_ms`: the protocol, the metadata, each `txn`, each live
    /// file, and the tombstones a vacuum still needs (removed within the default retention).
    fn of(state: &'a TableState, now_ms: i64) -> Rows<'a> {
        let mut rows = vec![Row::Protocol, Row::Metadata];
        rows.extend(state.txns.iter().map(|(app, v)| Row::Txn(app, *v)));
        rows.extend(state.files.values().map(Row::Add));
        let expired = now_ms.saturating_sub(crate::lake::tables::tend::DEFAULT_RETENTION_MS);
        rows.extend(
            state
                .tombstones
                .values()
                .filter(|r| r.deletion_timestamp.is_none_or(|at| at > expired))
                .map(Row::Remove),
        );
        Rows(rows)
    }

    /// Which rows a kind's struct is present in (not null).
    fn is(&self, f: fn(&Row) -> bool) -> Vec<bool> {
        self.0.iter().map(f).collect()
    }

    /// A 64-bit integer column, null where `f` gives nothing.
    fn longs(&self, f: impl Fn(&Row<'a>) -> Option<i64>) -> ArrayRef {
        Arc::new(Int64Array::from_iter(self.0.iter().map(f)))
    }

    /// A string column, null where `f` gives nothing.
    fn texts<S: AsRef<str>>(&self, f: impl Fn(&Row<'a>) -> Option<S>) -> ArrayRef {
        Arc::new(StringArray::from_iter(self.0.iter().map(f)))
    }

    /// A boolean column, null where `f` gives nothing.
    fn flags(&self, f: impl Fn(&Row<'a>) -> Option<bool>) -> ArrayRef {
        Arc::new(BooleanArray::from_iter(self.0.iter().map(f)))
    }

    /// The `add` column: each live file's path, partition values, size, time and stats.
    fn add_column(&self) -> (DataType, ArrayRef) {
        let add = |row: &Row<'a>| match row {
            Row::Add(a) => Some(*a),
            _ => None,
        };
        let (partition_field, partition_values) = maps(self.0.iter().map(|r| {
            add(r).map(|a| {
                a.partition_values
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect()
            })
        }));
        structure(
            vec![
                (text("path"), self.texts(|r| add(r).map(|a| a.path.clone()))),
                (
                    partition_field.with_name("partitionValues"),
                    partition_values,
                ),
                (long("size"), self.longs(|r| add(r).map(|a| a.size as i64))),
                (
                    long("modificationTime"),
                    self.longs(|r| add(r).map(|a| a.modification_time)),
                ),
                (
                    Field::new("dataChange", DataType::Boolean, true),
                    self.flags(|r| add(r).map(|a| a.data_change)),
                ),
                (
                    text("stats"),
                    self.texts(|r| add(r).and_then(|a| a.stats.clone())),
                ),
            ],
            &self.is(|r| matches!(r, Row::Add(_))),
        )
    }

    /// The `remove` column: the tombstones' paths, deletion times, and sizes.
    fn remove_column(&self) -> (DataType, ArrayRef) {
        let remove = |row: &Row<'a>| match row {
            Row::Remove(r) => Some(*r),
            _ => None,
        };
        structure(
            vec![
                (
                    text("path"),
                    self.texts(|r| remove(r).map(|a| a.path.as_str())),
                ),
                (
                    long("deletionTimestamp"),
                    self.longs(|r| remove(r).and_then(|a| a.deletion_timestamp)),
                ),
                (
                    Field::new("dataChange", DataType::Boolean, true),
                    self.flags(|r| remove(r).map(|a| a.data_change)),
                ),
                (
                    long("size"),
                    self.longs(|r| remove(r).and_then(|a| a.size.map(|s| s as i64))),
                ),
            ],
            &self.is(|r| matches!(r, Row::Remove(_))),
        )
    }

    /// The `txn` column: the version each application committed last.
    fn txn_column(&self) -> (DataType, ArrayRef) {
        structure(
            vec![
                (
                    text("appId"),
                    self.texts(|r| match r {
                        Row::Txn(app, _) => Some(*app),
                        _ => None,
                    }),
                ),
                (
                    long("version"),
                    self.longs(|r| match r {
                        Row::Txn(_, v) => Some(*v as i64),
                        _ => None,
                    }),
                ),
            ],
            &self.is(|r| matches!(r, Row::Txn(..))),
        )
    }

    /// The `protocol` column: reader and writer versions and features, in its one row.
    fn protocol_column(&self, protocol: &super::actions::Protocol) -> (DataType, ArrayRef) {
        let only_protocol = |v: i32| -> ArrayRef {
            Arc::new(Int32Array::from_iter(
                self.0
                    .iter()
                    .map(|r| matches!(r, Row::Protocol).then_some(v)),
            ))
        };
        let features = |f: &Option<Vec<String>>| -> ArrayRef {
            let column: Vec<Option<Vec<String>>> = self
                .0
                .iter()
                .map(|r| match r {
                    Row::Protocol => f.clone(),
                    _ => None,
                })
                .collect();
            string_lists(&column)
        };
        structure(
            vec![
                (
                    Field::new("minReaderVersion", DataType::Int32, true),
                    only_protocol(protocol.min_reader_version as i32),
                ),
                (
                    Field::new("minWriterVersion", DataType::Int32, true),
                    only_protocol(protocol.min_writer_version as i32),
                ),
                (
                    strings("readerFeatures"),
                    features(&protocol.reader_features),
                ),
                (
                    strings("writerFeatures"),
                    features(&protocol.writer_features),
                ),
            ],
            &self.is(|r| matches!(r, Row::Protocol)),
        )
    }

    /// A string-to-string map column holding `pairs` in the metadata's row.
    fn metadata_map(
        &self,
        pairs: &'a std::collections::BTreeMap<String, String>,
    ) -> (Field, ArrayRef) {
        maps(self.0.iter().map(|r| {
            matches!(r, Row::Metadata).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect()
            })
        }))
    }

    /// The `metaData` column: the table's id, name, format, schema, partitioning and
    /// configuration, in its one row.
    fn metadata_column(&self, metadata: &'a super::actions::Metadata) -> (DataType, ArrayRef) {
        let only_metadata = |v: Option<String>| {
            self.texts(|r| match r {
                Row::Metadata => v.clone(),
                _ => None,
            })
        };
        let metadata_rows = self.is(|r| matches!(r, Row::Metadata));
        let (options_field, options) = self.metadata_map(&metadata.format.options);
        let (format_type, format_array) = structure(
            vec![
                (
                    text("provider"),
                    only_metadata(Some(metadata.format.provider.clone())),
                ),
                (options_field.with_name("options"), options),
            ],
            &metadata_rows,
        );
        let (configuration_field, configuration) = self.metadata_map(&metadata.configuration);
        let partition_columns: Vec<Option<Vec<String>>> = self
            .0
            .iter()
            .map(|r| matches!(r, Row::Metadata).then(|| metadata.partition_columns.clone()))
            .collect();
        structure(
            vec![
                (text("id"), only_metadata(Some(metadata.id.clone()))),
                (text("name"), only_metadata(metadata.name.clone())),
                (
                    text("description"),
                    only_metadata(metadata.description.clone()),
                ),
                (Field::new("format", format_type, true), format_array),
                (
                    text("schemaString"),
                    only_metadata(Some(metadata.schema_string.clone())),
                ),
                (
                    strings("partitionColumns"),
                    string_lists(&partition_columns),
                ),
                (
                    configuration_field.with_name("configuration"),
                    configuration,
                ),
                (
                    long("createdTime"),
                    self.longs(|r| match r {
                        Row::Metadata => metadata.created_time,
                        _ => None,
                    }),
                ),
            ],
            &metadata_rows,
        )
    }
}

/// The `_last_checkpoint` object naming checkpoint `version` of `size` rows.
pub fn last_checkpoint(version: u64, size: u64) -> Bytes {
    Bytes::from(format!(r#"{{"version":{version},"size":{size}}}"#))
}

/// What `_last_checkpoint` says: the version of the latest checkpoint, when it names a
/// single-file checkpoint (the kind this writer writes and reads back).
pub fn parse_last_checkpoint(bytes: &[u8]) -> Result<u64, String> {
    let last: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    if last.get("parts").is_some_and(|p| !p.is_null()) {
        return Err("it names a checkpoint in parts, which this build does not read".into());
    }
    last.get("version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| "it names no version".into())
}

/// The actions a checkpoint file holds: the state of its table at the checkpoint's version,
/// as if every commit up to it were replayed. Columns other than the ones this writer writes
/// are read past; a checkpoint another writer wrote in its own column types (large strings,
/// 32-bit sizes) is read through a cast.
pub fn read(bytes: Bytes) -> Result<Vec<super::actions::Action>, String> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| format!("not a Parquet checkpoint: {e}"))?;
    let mut actions = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| format!("its rows: {e}"))?;
        let kinds = Kinds::of(&batch)?;
        for row in 0..batch.num_rows() {
            if let Some(action) = kinds.action(row)? {
                actions.push(action);
            }
        }
    }
    Ok(actions)
}

/// The action columns of a checkpoint's batch, each present or not.
struct Kinds<'a> {
    protocol: Option<&'a StructArray>,
    metadata: Option<&'a StructArray>,
    txn: Option<&'a StructArray>,
    add: Option<&'a StructArray>,
    remove: Option<&'a StructArray>,
}

impl<'a> Kinds<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Kinds<'a>, String> {
        let kind = |name: &str| -> Result<Option<&'a StructArray>, String> {
            match batch.column_by_name(name) {
                None => Ok(None),
                Some(column) => column
                    .as_any()
                    .downcast_ref::<StructArray>()
                    .map(Some)
                    .ok_or_else(|| format!("its {name} column is not a struct")),
            }
        };
        Ok(Kinds {
            protocol: kind("protocol")?,
            metadata: kind("metaData")?,
            txn: kind("txn")?,
            add: kind("add")?,
            remove: kind("remove")?,
        })
    }

    /// The action of `row`, if it holds one of the kinds this writer uses.
    fn action(&self, row: usize) -> Result<Option<super::actions::Action>, String> {
        use super::actions::{Action, Add, Format, Metadata, Protocol, Remove, Txn};
        let here = |kind: Option<&'a StructArray>| kind.filter(|s| s.is_valid(row));
        if let Some(p) = here(self.protocol) {
            return Ok(Some(Action::Protocol(Protocol {
                min_reader_version: number(p, "minReaderVersion", row)?,
                min_writer_version: number(p, "minWriterVersion", row)?,
                reader_features: texts(p, "readerFeatures", row)?,
                writer_features: texts(p, "writerFeatures", row)?,
            })));
        }
        if let Some(m) = here(self.metadata) {
            let format = m
                .column_by_name("format")
                .and_then(|f| f.as_any().downcast_ref::<StructArray>())
                .ok_or("its metaData has no format")?;
            return Ok(Some(Action::Metadata(Metadata {
                id: required(m, "id", row)?,
                name: text_at(m, "name", row)?,
                description: text_at(m, "description", row)?,
                format: Format {
                    provider: required(format, "provider", row)?,
                    options: pairs(format, "options", row)?
                        .into_iter()
                        .filter_map(|(k, v)| Some((k, v?)))
                        .collect(),
                },
                schema_string: required(m, "schemaString", row)?,
                partition_columns: texts(m, "partitionColumns", row)?.unwrap_or_default(),
                created_time: long_at(m, "createdTime", row)?,
                configuration: pairs(m, "configuration", row)?
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, v?)))
                    .collect(),
            })));
        }
        if let Some(t) = here(self.txn) {
            return Ok(Some(Action::Txn(Txn {
                app_id: required(t, "appId", row)?,
                version: number(t, "version", row)?,
                last_updated: long_at(t, "lastUpdated", row)?,
            })));
        }
        if let Some(a) = here(self.add) {
            return Ok(Some(Action::Add(Add {
                path: required(a, "path", row)?,
                partition_values: pairs(a, "partitionValues", row)?.into_iter().collect(),
                size: number(a, "size", row)?,
                modification_time: long_at(a, "modificationTime", row)?.unwrap_or_default(),
                data_change: flag_at(a, "dataChange", row)?.unwrap_or(false),
                stats: text_at(a, "stats", row)?,
            })));
        }
        if let Some(r) = here(self.remove) {
            return Ok(Some(Action::Remove(Remove {
                path: required(r, "path", row)?,
                deletion_timestamp: long_at(r, "deletionTimestamp", row)?,
                data_change: flag_at(r, "dataChange", row)?.unwrap_or(false),
                size: long_at(r, "size", row)?.map(|s| s as u64),
            })));
        }
        Ok(None)
    }
}

/// Field `name` of `kind`, cast to `to`; `None` when the checkpoint has no such field.
fn field_as(kind: &StructArray, name: &str, to: &DataType) -> Result<Option<ArrayRef>, String> {
    match kind.column_by_name(name) {
        None => Ok(None),
        Some(column) if column.data_type() == to => Ok(Some(column.clone())),
        Some(column) => arrow_cast::cast(column, to)
            .map(Some)
            .map_err(|e| format!("its field {name}: {e}")),
    }
}

fn text_at(kind: &StructArray, name: &str, row: usize) -> Result<Option<String>, String> {
    Ok(field_as(kind, name, &DataType::Utf8)?.and_then(|column| {
        let column = column.as_string::<i32>();
        column.is_valid(row).then(|| column.value(row).to_owned())
    }))
}

fn long_at(kind: &StructArray, name: &str, row: usize) -> Result<Option<i64>, String> {
    Ok(field_as(kind, name, &DataType::Int64)?.and_then(|column| {
        let column = column.as_primitive::<arrow_array::types::Int64Type>();
        column.is_valid(row).then(|| column.value(row))
    }))
}

fn flag_at(kind: &StructArray, name: &str, row: usize) -> Result<Option<bool>, String> {
    Ok(
        field_as(kind, name, &DataType::Boolean)?.and_then(|column| {
            let column = column.as_boolean();
            column.is_valid(row).then(|| column.value(row))
        }),
    )
}

fn required(kind: &StructArray, name: &str, row: usize) -> Result<String, String> {
    text_at(kind, name, row)?.ok_or_else(|| format!("row {row} has no {name}"))
}

fn number<T: TryFrom<i64>>(kind: &StructArray, name: &str, row: usize) -> Result<T, String> {
    let value = long_at(kind, name, row)?.ok_or_else(|| format!("row {row} has no {name}"))?;
    T::try_from(value).map_err(|_| format!("row {row}: {name} {value} is out of range"))
}

/// A list-of-strings field at `row`.
fn texts(kind: &StructArray, name: &str, row: usize) -> Result<Option<Vec<String>>, String> {
    let Some(column) = kind.column_by_name(name) else {
        return Ok(None);
    };
    let Some(list) = column.as_list_opt::<i32>() else {
        return Err(format!("its field {name} is not a list"));
    };
    if !list.is_valid(row) {
        return Ok(None);
    }
    let items = arrow_cast::cast(&list.value(row), &DataType::Utf8)
        .map_err(|e| format!("its field {name}: {e}"))?;
    Ok(Some(
        items
            .as_string::<i32>()
            .iter()
            .flatten()
            .map(str::to_owned)
            .collect(),
    ))
}

/// A string-to-string map field at `row`, as pairs (empty when null).
fn pairs(
    kind: &StructArray,
    name: &str,
    row: usize,
) -> Result<Vec<(String, Option<String>)>, String> {
    let Some(column) = kind.column_by_name(name) else {
        return Ok(Vec::new());
    };
    let Some(map) = column.as_map_opt() else {
        return Err(format!("its field {name} is not a map"));
    };
    if !map.is_valid(row) {
        return Ok(Vec::new());
    }
    let entries = map.value(row);
    let cast = |column: &ArrayRef| {
        arrow_cast::cast(column, &DataType::Utf8).map_err(|e| format!("its field {name}: {e}"))
    };
    let keys = cast(entries.column(0))?;
    let values = cast(entries.column(1))?;
    let (keys, values) = (keys.as_string::<i32>(), values.as_string::<i32>());
    Ok((0..keys.len())
        .map(|i| {
            let value = values.is_valid(i).then(|| values.value(i).to_owned());
            (keys.value(i).to_owned(), value)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;
    use crate::lake::delta::actions::{Action, Add, Format, Metadata, Protocol, Txn};

    #[test]
    fn a_checkpoint_holds_one_row_per_action_of_the_state() {
        let mut state = TableState::default();
        let add = |path: &str| {
            Action::Add(Add {
                path: path.into(),
                partition_values: Default::default(),
                size: 7,
                modification_time: 1,
                data_change: true,
                stats: Some(r#"{"numRecords":1}"#.into()),
            })
        };
        state
            .apply(
                0,
                vec![
                    Action::Protocol(Protocol::needed(true)),
                    Action::Metadata(Metadata {
                        id: "id".into(),
                        name: None,
                        description: None,
                        format: Format {
                            provider: "parquet".into(),
                            options: Default::default(),
                        },
                        schema_string: r#"{"type":"struct","fields":[]}"#.into(),
                        partition_columns: vec![],
                        created_time: Some(1),
                        configuration: Default::default(),
                    }),
                    add("a.parquet"),
                    add("b.parquet"),
                    Action::Txn(Txn {
                        app_id: "app".into(),
                        version: 9,
                        last_updated: None,
                    }),
                ],
            )
            .unwrap();
        let remove = |path: &str, at: i64| {
            Action::Remove(crate::lake::delta::actions::Remove {
                path: path.into(),
                deletion_timestamp: Some(at),
                data_change: false,
                size: Some(7),
            })
        };
        let day = 86_400_000;
        state
            .apply(
                1,
                vec![
                    add("c.parquet"),
                    add("d.parquet"),
                    remove("c.parquet", day),
                    remove("d.parquet", 9 * day),
                ],
            )
            .unwrap();
        // At day 10, c's removal is past the default retention of seven days, d's is not.
        let (bytes, size) = checkpoint(&state, 10 * day);
        assert_eq!(size, 6);
        let batches: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let batch = &batches[0];
        let adds = batch.column_by_name("add").unwrap().as_struct();
        assert_eq!(adds.len() - adds.null_count(), 2);
        let paths = adds.column_by_name("path").unwrap().as_string::<i32>();
        assert_eq!(
            paths.iter().flatten().collect::<Vec<_>>(),
            ["a.parquet", "b.parquet"]
        );
        let removes = batch.column_by_name("remove").unwrap().as_struct();
        let paths = removes.column_by_name("path").unwrap().as_string::<i32>();
        assert_eq!(paths.iter().flatten().collect::<Vec<_>>(), ["d.parquet"]);
        let protocol = batch.column_by_name("protocol").unwrap().as_struct();
        assert_eq!(protocol.len() - protocol.null_count(), 1);
        assert!(due(10) && due(20) && !due(0) && !due(11));
        assert_eq!(&last_checkpoint(10, 5)[..], br#"{"version":10,"size":5}"#);
    }

    #[test]
    fn a_checkpoint_reads_back_as_the_state_it_was_written_from() {
        let mut state = TableState::default();
        let metadata = Metadata {
            id: "id".into(),
            name: Some("t".into()),
            description: None,
            format: Format {
                provider: "parquet".into(),
                options: [("k".to_owned(), "v".to_owned())].into(),
            },
            schema_string: r#"{"type":"struct","fields":[]}"#.into(),
            partition_columns: vec!["day".into()],
            created_time: Some(1),
            configuration: [("delta.appendOnly".to_owned(), "false".to_owned())].into(),
        };
        let add = |path: &str, day: Option<&str>| {
            Action::Add(Add {
                path: path.into(),
                partition_values: [("day".to_owned(), day.map(str::to_owned))].into(),
                size: 7,
                modification_time: 3,
                data_change: true,
                stats: Some(r#"{"numRecords":1}"#.into()),
            })
        };
        let txn = |app: &str, version| {
            Action::Txn(Txn {
                app_id: app.into(),
                version,
                last_updated: None,
            })
        };
        let actions = vec![
            Action::Protocol(Protocol::needed(true)),
            Action::Metadata(metadata),
            add("a.parquet", Some("2026-12-04")),
            add("b.parquet", None),
            txn("app", 9),
            txn("other", 2),
        ];
        state.apply(0, actions).unwrap();
        let removed = crate::lake::delta::actions::Remove {
            path: "a.parquet".into(),
            deletion_timestamp: Some(5),
            data_change: false,
            size: Some(7),
        };
        state
            .apply(1, vec![Action::Remove(removed), txn("app", 10)])
            .unwrap();
        let (bytes, _) = checkpoint(&state, 6);
        let read_back = TableState::checkpointed(1, read(bytes).unwrap()).unwrap();
        assert_eq!(read_back, state);

        assert!(read(Bytes::from_static(b"PAR1")).is_err());
        let err = TableState::checkpointed(3, vec![txn("app", 1)]).unwrap_err();
        assert!(err.to_string().contains("version 3"), "{err}");
        assert_eq!(parse_last_checkpoint(br#"{"version":20,"size":3}"#), Ok(20));
        assert!(parse_last_checkpoint(br#"{"version":20,"parts":4}"#).is_err());
    }
}
