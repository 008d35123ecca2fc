//! Checkpoints of a table's log: the state at one version as a Parquet file
//! (`_delta_log/<version>.checkpoint.parquet`), one row per action that state holds (the
//! protocol, the metadata, each application's `txn`, each live file's `add`, and a `remove`
//! tombstone for each file removed within the default retention, which a vacuum reading from
//! the checkpoint needs), so a reader starts from it instead of replaying every commit before.
//! `_delta_log/_last_checkpoint` names the latest. No IO.

use std::sync::Arc;

use arrow_array::builder::{MapBuilder, StringBuilder};
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
    let mut rows = vec![Row::Protocol, Row::Metadata];
    rows.extend(state.txns.iter().map(|(app, v)| Row::Txn(app, *v)));
    rows.extend(state.files.values().map(Row::Add));
    let expired = now_ms.saturating_sub(super::vacuum::DEFAULT_RETENTION_MS);
    rows.extend(
        state
            .tombstones
            .values()
            .filter(|r| r.deletion_timestamp.is_none_or(|at| at > expired))
            .map(Row::Remove),
    );
    let is = |f: fn(&Row) -> bool| rows.iter().map(f).collect::<Vec<bool>>();

    let add = |f: &dyn Fn(&super::actions::Add) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| match r {
            Row::Add(a) => f(a),
            _ => None,
        })))
    };
    let add_text = |f: &dyn Fn(&super::actions::Add) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from_iter(rows.iter().map(|r| match r {
            Row::Add(a) => f(a),
            _ => None,
        })))
    };
    let (mut partition_field, partition_values) = maps(rows.iter().map(|r| {
        match r {
            Row::Add(a) => Some(
                a.partition_values
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect(),
            ),
            _ => None,
        }
    }));
    partition_field = partition_field.with_name("partitionValues");
    let (add_type, add_array) = structure(
        vec![
            (text("path"), add_text(&|a| Some(a.path.clone()))),
            (partition_field, partition_values),
            (long("size"), add(&|a| Some(a.size as i64))),
            (
                long("modificationTime"),
                add(&|a| Some(a.modification_time)),
            ),
            (
                Field::new("dataChange", DataType::Boolean, true),
                Arc::new(BooleanArray::from_iter(rows.iter().map(|r| match r {
                    Row::Add(a) => Some(a.data_change),
                    _ => None,
                }))),
            ),
            (text("stats"), add_text(&|a| a.stats.clone())),
        ],
        &is(|r| matches!(r, Row::Add(_))),
    );

    let remove = |f: &dyn Fn(&super::actions::Remove) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| match r {
            Row::Remove(a) => f(a),
            _ => None,
        })))
    };
    let (remove_type, remove_array) = structure(
        vec![
            (
                text("path"),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| match r {
                    Row::Remove(a) => Some(a.path.as_str()),
                    _ => None,
                }))),
            ),
            (long("deletionTimestamp"), remove(&|r| r.deletion_timestamp)),
            (
                Field::new("dataChange", DataType::Boolean, true),
                Arc::new(BooleanArray::from_iter(rows.iter().map(|r| match r {
                    Row::Remove(a) => Some(a.data_change),
                    _ => None,
                }))),
            ),
            (long("size"), remove(&|r| r.size.map(|s| s as i64))),
        ],
        &is(|r| matches!(r, Row::Remove(_))),
    );

    let (txn_type, txn_array) = structure(
        vec![
            (
                text("appId"),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| match r {
                    Row::Txn(app, _) => Some(*app),
                    _ => None,
                }))),
            ),
            (
                long("version"),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| match r {
                    Row::Txn(_, v) => Some(*v as i64),
                    _ => None,
                }))),
            ),
        ],
        &is(|r| matches!(r, Row::Txn(..))),
    );

    let only_protocol = |v: i32| -> ArrayRef {
        Arc::new(Int32Array::from_iter(
            rows.iter().map(|r| matches!(r, Row::Protocol).then_some(v)),
        ))
    };
    let features = |f: &Option<Vec<String>>| -> ArrayRef {
        let column: Vec<Option<Vec<String>>> = rows
            .iter()
            .map(|r| match r {
                Row::Protocol => f.clone(),
                _ => None,
            })
            .collect();
        string_lists(&column)
    };
    let (protocol_type, protocol_array) = structure(
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
        &is(|r| matches!(r, Row::Protocol)),
    );

    let only_metadata = |v: Option<String>| -> ArrayRef {
        Arc::new(StringArray::from_iter(rows.iter().map(|r| match r {
            Row::Metadata => v.clone(),
            _ => None,
        })))
    };
    let metadata_rows = is(|r| matches!(r, Row::Metadata));
    let (options_field, options) = maps(rows.iter().map(|r| {
        match r {
            Row::Metadata => Some(
                metadata
                    .format
                    .options
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect(),
            ),
            _ => None,
        }
    }));
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
    let (configuration_field, configuration) = maps(rows.iter().map(|r| {
        match r {
            Row::Metadata => Some(
                metadata
                    .configuration
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect(),
            ),
            _ => None,
        }
    }));
    let partition_columns: Vec<Option<Vec<String>>> = rows
        .iter()
        .map(|r| matches!(r, Row::Metadata).then(|| metadata.partition_columns.clone()))
        .collect();
    let (metadata_type, metadata_array) = structure(
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
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| match r {
                    Row::Metadata => metadata.created_time,
                    _ => None,
                }))),
            ),
        ],
        &metadata_rows,
    );

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
    (Bytes::from(bytes), rows.len() as u64)
}

/// The `_last_checkpoint` object naming checkpoint `version` of `size` rows.
pub fn last_checkpoint(version: u64, size: u64) -> Bytes {
    Bytes::from(format!(r#"{{"version":{version},"size":{size}}}"#))
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
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
}
