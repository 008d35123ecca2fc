//! Manifests (which data files a snapshot holds, each with its partition and column
//! statistics) and manifest lists (which manifests a snapshot reads), as the Avro files of
//! format version 2 spell them. Field names and ids are the spec's; reading takes fields by
//! name from whatever schema the writer embedded, so manifests of other writers read too.

use std::collections::BTreeMap;

use serde_json::json;

use super::avro::{self, AvroError, Codec, Value};
use super::metadata::PartitionSpec;
use super::partition::{self, FieldSummary};
use super::schema::Schema;

/// What a manifest entry says of its file in the snapshot that wrote the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Existing = 0,
    Added = 1,
    Deleted = 2,
}

/// One data file as a manifest describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DataFile {
    /// An absolute URI (`file:///...`, `s3://...`).
    pub file_path: String,
    /// The partition tuple, by partition field name, in the spec's order.
    pub partition: Vec<(String, Value)>,
    pub record_count: i64,
    pub file_size_in_bytes: i64,
    /// Statistics by field id (see [`super::stats`]).
    pub column_sizes: BTreeMap<i32, i64>,
    pub value_counts: BTreeMap<i32, i64>,
    pub null_value_counts: BTreeMap<i32, i64>,
    pub nan_value_counts: BTreeMap<i32, i64>,
    pub lower_bounds: BTreeMap<i32, Vec<u8>>,
    pub upper_bounds: BTreeMap<i32, Vec<u8>>,
    pub split_offsets: Option<Vec<i64>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ManifestEntry {
    pub status: Status,
    pub snapshot_id: Option<i64>,
    /// The data sequence number; `None` for an entry added by the manifest's own snapshot,
    /// which inherits the manifest's (so that a commit retried at another sequence number
    /// needs no new manifest).
    pub sequence_number: Option<i64>,
    pub file_sequence_number: Option<i64>,
    pub data_file: DataFile,
}

/// One manifest as a manifest list names it.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestFile {
    pub manifest_path: String,
    pub manifest_length: i64,
    pub partition_spec_id: i32,
    /// 0: data files; 1: delete files (which this writer never writes).
    pub content: i32,
    pub sequence_number: i64,
    pub min_sequence_number: i64,
    pub added_snapshot_id: i64,
    pub added_files_count: i32,
    pub existing_files_count: i32,
    pub deleted_files_count: i32,
    pub added_rows_count: i64,
    pub existing_rows_count: i64,
    pub deleted_rows_count: i64,
    pub partitions: Vec<FieldSummary>,
}

impl ManifestFile {
    /// Whether the manifest names a file that is still live.
    pub fn has_live_files(&self) -> bool {
        self.added_files_count > 0 || self.existing_files_count > 0
    }
}

fn optional(ty: serde_json::Value) -> serde_json::Value {
    json!(["null", ty])
}

/// An Iceberg map with non-string keys: an array of key/value records.
fn map_schema(key_id: i32, value_id: i32, value: &str) -> serde_json::Value {
    optional(json!({
        "type": "array", "logicalType": "map",
        "items": {"type": "record", "name": format!("k{key_id}_v{value_id}"), "fields": [
            {"name": "key", "type": "int", "field-id": key_id},
            {"name": "value", "type": value, "field-id": value_id}
        ]}
    }))
}

fn field(name: &str, id: i32, ty: serde_json::Value) -> serde_json::Value {
    let optional = ty.is_array();
    let mut f = json!({"name": name, "type": ty, "field-id": id});
    if optional {
        f["default"] = serde_json::Value::Null;
    }
    f
}

/// The Avro schema of a manifest entry (`manifest_entry`), its partition record `r102`.
fn entry_schema(partition: serde_json::Value) -> serde_json::Value {
    let data_file = json!({"type": "record", "name": "r2", "fields": [
        field("content", 134, "int".into()),
        field("file_path", 100, "string".into()),
        field("file_format", 101, "string".into()),
        field("partition", 102, partition),
        field("record_count", 103, "long".into()),
        field("file_size_in_bytes", 104, "long".into()),
        field("column_sizes", 108, map_schema(117, 118, "long")),
        field("value_counts", 109, map_schema(119, 120, "long")),
        field("null_value_counts", 110, map_schema(121, 122, "long")),
        field("nan_value_counts", 137, map_schema(138, 139, "long")),
        field("lower_bounds", 125, map_schema(126, 127, "bytes")),
        field("upper_bounds", 128, map_schema(129, 130, "bytes")),
        field("key_metadata", 131, optional("bytes".into())),
        field("split_offsets", 132, optional(json!({"type": "array", "items": "long", "element-id": 133}))),
        field("equality_ids", 135, optional(json!({"type": "array", "items": "int", "element-id": 136}))),
        field("sort_order_id", 140, optional("int".into())),
    ]});
    json!({"type": "record", "name": "manifest_entry", "fields": [
        field("status", 0, "int".into()),
        field("snapshot_id", 1, optional("long".into())),
        field("sequence_number", 3, optional("long".into())),
        field("file_sequence_number", 4, optional("long".into())),
        field("data_file", 2, data_file),
    ]})
}

fn manifest_list_schema() -> serde_json::Value {
    let summary = json!({"type": "record", "name": "r508", "fields": [
        field("contains_null", 509, "boolean".into()),
        field("contains_nan", 518, optional("boolean".into())),
        field("lower_bound", 510, optional("bytes".into())),
        field("upper_bound", 511, optional("bytes".into())),
    ]});
    json!({"type": "record", "name": "manifest_file", "fields": [
        field("manifest_path", 500, "string".into()),
        field("manifest_length", 501, "long".into()),
        field("partition_spec_id", 502, "int".into()),
        field("content", 517, "int".into()),
        field("sequence_number", 515, "long".into()),
        field("min_sequence_number", 516, "long".into()),
        field("added_snapshot_id", 503, "long".into()),
        field("added_files_count", 504, "int".into()),
        field("existing_files_count", 505, "int".into()),
        field("deleted_files_count", 506, "int".into()),
        field("added_rows_count", 512, "long".into()),
        field("existing_rows_count", 513, "long".into()),
        field("deleted_rows_count", 514, "long".into()),
        field("partitions", 507, optional(json!({"type": "array", "items": summary, "element-id": 508}))),
        field("key_metadata", 519, optional("bytes".into())),
    ]})
}

fn long_map(map: &BTreeMap<i32, i64>) -> Value {
    Value::Array(
        map.iter()
            .map(|(k, v)| {
                Value::Record(vec![
                    ("key".into(), Value::Int(*k)),
                    ("value".into(), Value::Long(*v)),
                ])
            })
            .collect(),
    )
}

fn bytes_map(map: &BTreeMap<i32, Vec<u8>>) -> Value {
    Value::Array(
        map.iter()
            .map(|(k, v)| {
                Value::Record(vec![
                    ("key".into(), Value::Int(*k)),
                    ("value".into(), Value::Bytes(v.clone())),
                ])
            })
            .collect(),
    )
}

fn opt_long(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::Long)
}

fn entry_value(entry: &ManifestEntry) -> Value {
    let f = &entry.data_file;
    let data_file = Value::Record(vec![
        ("content".into(), Value::Int(0)),
        ("file_path".into(), Value::String(f.file_path.clone())),
        ("file_format".into(), Value::String("PARQUET".into())),
        ("partition".into(), Value::Record(f.partition.clone())),
        ("record_count".into(), Value::Long(f.record_count)),
        (
            "file_size_in_bytes".into(),
            Value::Long(f.file_size_in_bytes),
        ),
        ("column_sizes".into(), long_map(&f.column_sizes)),
        ("value_counts".into(), long_map(&f.value_counts)),
        ("null_value_counts".into(), long_map(&f.null_value_counts)),
        ("nan_value_counts".into(), long_map(&f.nan_value_counts)),
        ("lower_bounds".into(), bytes_map(&f.lower_bounds)),
        ("upper_bounds".into(), bytes_map(&f.upper_bounds)),
        (
            "split_offsets".into(),
            f.split_offsets.as_ref().map_or(Value::Null, |o| {
                Value::Array(o.iter().map(|v| Value::Long(*v)).collect())
            }),
        ),
    ]);
    Value::Record(vec![
        ("status".into(), Value::Int(entry.status as i32)),
        ("snapshot_id".into(), opt_long(entry.snapshot_id)),
        ("sequence_number".into(), opt_long(entry.sequence_number)),
        (
            "file_sequence_number".into(),
            opt_long(entry.file_sequence_number),
        ),
        ("data_file".into(), data_file),
    ])
}

/// A manifest file of `entries`, for a table with `schema` partitioned by `spec`.
pub fn write_manifest(
    entries: &[ManifestEntry],
    schema: &Schema,
    spec: &PartitionSpec,
) -> Result<Vec<u8>, String> {
    let avro_schema = entry_schema(partition::avro_schema(spec, schema)?);
    let metadata = [
        (
            "schema",
            serde_json::to_string(schema).expect("a schema serializes"),
        ),
        ("schema-id", schema.schema_id.to_string()),
        (
            "partition-spec",
            serde_json::to_string(&spec.fields).expect("a spec serializes"),
        ),
        ("partition-spec-id", spec.spec_id.to_string()),
        ("format-version", "2".into()),
        ("content", "data".into()),
    ];
    let records: Vec<Value> = entries.iter().map(entry_value).collect();
    avro::write_container(&avro_schema, &metadata, &records, Codec::Deflate)
        .map_err(|e| format!("writing a manifest: {e}"))
}

/// A manifest list naming `manifests`, for snapshot `snapshot_id`.
pub fn write_manifest_list(
    manifests: &[ManifestFile],
    snapshot_id: i64,
    parent: Option<i64>,
    sequence_number: i64,
) -> Result<Vec<u8>, String> {
    let records: Vec<Value> = manifests.iter().map(manifest_file_value).collect();
    let metadata = [
        ("snapshot-id", snapshot_id.to_string()),
        (
            "parent-snapshot-id",
            parent.map_or("null".into(), |p| p.to_string()),
        ),
        ("sequence-number", sequence_number.to_string()),
        ("format-version", "2".into()),
    ];
    avro::write_container(&manifest_list_schema(), &metadata, &records, Codec::Deflate)
        .map_err(|e| format!("writing a manifest list: {e}"))
}

fn manifest_file_value(m: &ManifestFile) -> Value {
    let summaries = m
        .partitions
        .iter()
        .map(|s| {
            Value::Record(vec![
                ("contains_null".into(), Value::Boolean(s.contains_null)),
                (
                    "contains_nan".into(),
                    s.contains_nan.map_or(Value::Null, Value::Boolean),
                ),
                (
                    "lower_bound".into(),
                    s.lower_bound.clone().map_or(Value::Null, Value::Bytes),
                ),
                (
                    "upper_bound".into(),
                    s.upper_bound.clone().map_or(Value::Null, Value::Bytes),
                ),
            ])
        })
        .collect();
    Value::Record(vec![
        (
            "manifest_path".into(),
            Value::String(m.manifest_path.clone()),
        ),
        ("manifest_length".into(), Value::Long(m.manifest_length)),
        ("partition_spec_id".into(), Value::Int(m.partition_spec_id)),
        ("content".into(), Value::Int(m.content)),
        ("sequence_number".into(), Value::Long(m.sequence_number)),
        (
            "min_sequence_number".into(),
            Value::Long(m.min_sequence_number),
        ),
        ("added_snapshot_id".into(), Value::Long(m.added_snapshot_id)),
        ("added_files_count".into(), Value::Int(m.added_files_count)),
        (
            "existing_files_count".into(),
            Value::Int(m.existing_files_count),
        ),
        (
            "deleted_files_count".into(),
            Value::Int(m.deleted_files_count),
        ),
        ("added_rows_count".into(), Value::Long(m.added_rows_count)),
        (
            "existing_rows_count".into(),
            Value::Long(m.existing_rows_count),
        ),
        (
            "deleted_rows_count".into(),
            Value::Long(m.deleted_rows_count),
        ),
        ("partitions".into(), Value::Array(summaries)),
    ])
}

/// Reads a record's fields by name, saying which is missing or mistyped.
struct Fields<'a> {
    what: &'static str,
    record: &'a Value,
}

impl<'a> Fields<'a> {
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.record.field(name).filter(|v| **v != Value::Null)
    }

    fn long(&self, name: &str) -> Result<i64, String> {
        self.get(name)
            .and_then(Value::as_long)
            .ok_or_else(|| format!("a {} without a number in {name:?}", self.what))
    }

    fn long_or(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(_) => self.long(name),
        }
    }

    fn string(&self, name: &str) -> Result<String, String> {
        self.get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("a {} without text in {name:?}", self.what))
    }
}

fn id_map<T>(value: Option<&Value>, get: impl Fn(&Value) -> Option<T>) -> BTreeMap<i32, T> {
    let pairs = value.and_then(Value::as_array).unwrap_or_default();
    pairs
        .iter()
        .filter_map(|pair| {
            let key = i32::try_from(pair.field("key")?.as_long()?).ok()?;
            Some((key, get(pair.field("value")?)?))
        })
        .collect()
}

fn read_data_file(record: &Value) -> Result<DataFile, String> {
    let f = Fields {
        what: "data file",
        record,
    };
    let format = f.string("file_format")?;
    if !format.eq_ignore_ascii_case("parquet") {
        return Err(format!(
            "data file format {format} (this writer reads Parquet)"
        ));
    }
    let partition = match f.get("partition") {
        Some(Value::Record(fields)) => fields.clone(),
        _ => Vec::new(),
    };
    Ok(DataFile {
        file_path: f.string("file_path")?,
        partition,
        record_count: f.long("record_count")?,
        file_size_in_bytes: f.long("file_size_in_bytes")?,
        column_sizes: id_map(f.get("column_sizes"), Value::as_long),
        value_counts: id_map(f.get("value_counts"), Value::as_long),
        null_value_counts: id_map(f.get("null_value_counts"), Value::as_long),
        nan_value_counts: id_map(f.get("nan_value_counts"), Value::as_long),
        lower_bounds: id_map(f.get("lower_bounds"), |v| v.as_bytes().map(<[u8]>::to_vec)),
        upper_bounds: id_map(f.get("upper_bounds"), |v| v.as_bytes().map(<[u8]>::to_vec)),
        split_offsets: f
            .get("split_offsets")
            .and_then(Value::as_array)
            .map(|o| o.iter().filter_map(Value::as_long).collect()),
    })
}

/// The entries of a manifest, whoever wrote it. `inherited` is the sequence number the
/// manifest list gives the manifest: entries without one of their own take it. Delete files
/// (content 1 and 2) are refused: this writer neither writes nor applies them.
pub fn read_manifest(bytes: &[u8], inherited: i64) -> Result<Vec<ManifestEntry>, String> {
    let container = avro::read_container(bytes).map_err(|e: AvroError| e.0)?;
    container
        .records
        .iter()
        .map(|record| {
            let f = Fields {
                what: "manifest entry",
                record,
            };
            let status = match f.long("status")? {
                0 => Status::Existing,
                1 => Status::Added,
                2 => Status::Deleted,
                other => return Err(format!("manifest entry status {other}")),
            };
            let data = f.get("data_file").ok_or("a manifest entry without data_file")?;
            let content = Fields { what: "data file", record: data }.long_or("content", 0)?;
            if content != 0 {
                return Err(format!(
                    "the table has delete files (content {content}), which this writer does not apply"
                ));
            }
            let sequence_number = f.get("sequence_number").and_then(Value::as_long);
            Ok(ManifestEntry {
                status,
                snapshot_id: f.get("snapshot_id").and_then(Value::as_long),
                sequence_number: sequence_number.or(Some(inherited)),
                file_sequence_number: f
                    .get("file_sequence_number")
                    .and_then(Value::as_long)
                    .or(Some(inherited)),
                data_file: read_data_file(data)?,
            })
        })
        .collect()
}

/// The manifests a manifest list names, whoever wrote it.
pub fn read_manifest_list(bytes: &[u8]) -> Result<Vec<ManifestFile>, String> {
    let container = avro::read_container(bytes).map_err(|e| e.0)?;
    container
        .records
        .iter()
        .map(|record| {
            let f = Fields {
                what: "manifest list entry",
                record,
            };
            let count = |name: &str| f.long_or(name, 0).map(|v| v as i32);
            let partitions = f
                .get("partitions")
                .and_then(Value::as_array)
                .unwrap_or_default()
                .iter()
                .map(|s| FieldSummary {
                    contains_null: s
                        .field("contains_null")
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                    contains_nan: s.field("contains_nan").and_then(Value::as_bool),
                    lower_bound: s
                        .field("lower_bound")
                        .and_then(Value::as_bytes)
                        .map(<[u8]>::to_vec),
                    upper_bound: s
                        .field("upper_bound")
                        .and_then(Value::as_bytes)
                        .map(<[u8]>::to_vec),
                })
                .collect();
            Ok(ManifestFile {
                manifest_path: f.string("manifest_path")?,
                manifest_length: f.long("manifest_length")?,
                partition_spec_id: f.long("partition_spec_id")? as i32,
                content: f.long_or("content", 0)? as i32,
                sequence_number: f.long_or("sequence_number", 0)?,
                min_sequence_number: f.long_or("min_sequence_number", 0)?,
                added_snapshot_id: f.long("added_snapshot_id")?,
                added_files_count: count("added_files_count")?,
                existing_files_count: count("existing_files_count")?,
                deleted_files_count: count("deleted_files_count")?,
                added_rows_count: f.long_or("added_rows_count", 0)?,
                existing_rows_count: f.long_or("existing_rows_count", 0)?,
                deleted_rows_count: f.long_or("deleted_rows_count", 0)?,
                partitions,
            })
        })
        .collect()
}

/// The manifest list entry of a manifest of `entries`, written by snapshot `snapshot_id` at
/// `sequence_number`, `length` bytes long at `path`.
pub fn summarize(
    entries: &[ManifestEntry],
    path: String,
    length: i64,
    spec: &PartitionSpec,
    snapshot_id: i64,
    sequence_number: i64,
) -> ManifestFile {
    let (mut counts, mut rows) = ([0i32; 3], [0i64; 3]);
    for e in entries {
        let i = match e.status {
            Status::Added => 0,
            Status::Existing => 1,
            Status::Deleted => 2,
        };
        counts[i] += 1;
        rows[i] += e.data_file.record_count;
    }
    let min_sequence_number = entries
        .iter()
        .filter(|e| e.status != Status::Deleted)
        .map(|e| e.sequence_number.unwrap_or(sequence_number))
        .min()
        .unwrap_or(sequence_number);
    let live = entries.iter().filter(|e| e.status != Status::Deleted);
    ManifestFile {
        manifest_path: path,
        manifest_length: length,
        partition_spec_id: spec.spec_id,
        content: 0,
        sequence_number,
        min_sequence_number,
        added_snapshot_id: snapshot_id,
        added_files_count: counts[0],
        existing_files_count: counts[1],
        deleted_files_count: counts[2],
        added_rows_count: rows[0],
        existing_rows_count: rows[1],
        deleted_rows_count: rows[2],
        partitions: partition::summaries(
            spec.fields.len(),
            live.map(|e| e.data_file.partition.as_slice()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_file(path: &str, day: i32) -> DataFile {
        DataFile {
            file_path: path.into(),
            partition: vec![("d_day".into(), Value::Int(day))],
            record_count: 10,
            file_size_in_bytes: 1000,
            column_sizes: BTreeMap::from([(1, 400), (2, 600)]),
            value_counts: BTreeMap::from([(1, 10), (2, 10)]),
            null_value_counts: BTreeMap::from([(1, 0), (2, 3)]),
            nan_value_counts: BTreeMap::new(),
            lower_bounds: BTreeMap::from([(1, 5i64.to_le_bytes().to_vec())]),
            upper_bounds: BTreeMap::from([(1, 9i64.to_le_bytes().to_vec())]),
            split_offsets: Some(vec![4]),
        }
    }

    fn schema_and_spec() -> (Schema, PartitionSpec) {
        use arrow_schema::{DataType, Field};
        let (schema, _) = super::super::schema::fresh(&arrow_schema::Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("d", DataType::Date32, true),
        ]))
        .unwrap();
        let spec = super::super::partition::spec(
            &crate::lake::encode::partition::Partition::parse("day(d)").unwrap(),
            &schema,
        )
        .unwrap();
        (schema, spec)
    }

    #[test]
    fn manifests_round_trip_and_added_entries_inherit_the_sequence_number() {
        let (schema, spec) = schema_and_spec();
        let entries = vec![
            ManifestEntry {
                status: Status::Added,
                snapshot_id: Some(7),
                sequence_number: None,
                file_sequence_number: None,
                data_file: data_file("file:///t/a.parquet", 3),
            },
            ManifestEntry {
                status: Status::Existing,
                snapshot_id: Some(5),
                sequence_number: Some(2),
                file_sequence_number: Some(2),
                data_file: data_file("file:///t/b.parquet", 1),
            },
        ];
        let bytes = write_manifest(&entries, &schema, &spec).unwrap();
        let read = read_manifest(&bytes, 4).unwrap();
        assert_eq!(read[0].sequence_number, Some(4), "inherited");
        assert_eq!(read[0].data_file, entries[0].data_file);
        assert_eq!(read[1], entries[1]);
        let container = avro::read_container(&bytes).unwrap();
        assert_eq!(container.metadata["format-version"], "2");
        assert!(container.metadata["partition-spec"].contains("\"transform\":\"day\""));

        let listed = summarize(&entries, "m.avro".into(), bytes.len() as i64, &spec, 7, 4);
        assert_eq!(
            (
                listed.added_files_count,
                listed.existing_files_count,
                listed.min_sequence_number
            ),
            (1, 1, 2)
        );
        assert_eq!(
            listed.partitions[0].lower_bound,
            Some(1i32.to_le_bytes().to_vec())
        );
        let list = write_manifest_list(std::slice::from_ref(&listed), 7, Some(5), 4).unwrap();
        assert_eq!(read_manifest_list(&list).unwrap(), [listed]);
    }

    /// A table pyiceberg 0.12 wrote (two appends, partitioned by `identity(name)`): its
    /// manifest list and manifests, deflated, read by the schemas they embed.
    #[test]
    fn manifests_another_writer_wrote_read() {
        let metadata = super::super::metadata::TableMetadata::from_json(include_bytes!(
            "testdata/pyiceberg.metadata.json"
        ))
        .unwrap();
        let snapshot = metadata.current_snapshot().unwrap();
        assert_eq!(snapshot.summary["total-records"], "4");
        let list = read_manifest_list(include_bytes!("testdata/pyiceberg-list.avro")).unwrap();
        assert_eq!(list.len(), 2);
        let newest = list
            .iter()
            .find(|m| m.added_snapshot_id == snapshot.snapshot_id)
            .unwrap();
        assert_eq!((newest.added_files_count, newest.added_rows_count), (1, 1));
        assert_eq!(newest.sequence_number, 2);
        assert_eq!(newest.partitions[0].lower_bound.as_deref(), Some(&b"a"[..]));

        let mut rows = 0;
        let mut names = Vec::new();
        for bytes in [
            &include_bytes!("testdata/pyiceberg-m0.avro")[..],
            &include_bytes!("testdata/pyiceberg-m1.avro")[..],
        ] {
            for entry in read_manifest(bytes, 9).unwrap() {
                assert_eq!(entry.status, Status::Added);
                let file = &entry.data_file;
                assert!(file.file_path.starts_with("file:///"), "{}", file.file_path);
                assert!(file.file_path.ends_with(".parquet"));
                assert_eq!(file.value_counts.get(&1), Some(&file.record_count));
                assert!(file.lower_bounds.contains_key(&1));
                rows += file.record_count;
                names.push(file.partition[0].1.clone());
            }
        }
        assert_eq!(rows, 4);
        names.sort_by_key(|v| format!("{v:?}"));
        assert_eq!(
            names,
            [
                Value::Null,
                Value::String("a".into()),
                Value::String("a".into()),
                Value::String("b".into())
            ]
        );
    }
}
