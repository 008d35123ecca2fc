//! Table metadata, format version 2: the JSON document each commit writes whole
//! (`metadata/v<N>.metadata.json`), read back from any writer. Fields this writer does not
//! use (statistics files, encryption keys, whatever a later engine adds) are kept as they
//! were read and written out again, so a table another engine touched stays whole.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::schema::Schema;

type Extra = serde_json::Map<String, serde_json::Value>;

/// The summary key of the application that wrote a snapshot: the pipeline, as Delta's `txn`
/// `appId` names it.
pub const APP_KEY: &str = "tributary.app";
/// The summary key of the commit-log entry whose flush a snapshot published.
pub const SEQUENCE_KEY: &str = "tributary.sequence";
/// The table property bounding how many earlier metadata files the metadata log names.
pub const PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";
const DEFAULT_PREVIOUS_VERSIONS_MAX: usize = 100;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: u8,
    pub table_uuid: String,
    pub location: String,
    pub last_sequence_number: i64,
    pub last_updated_ms: i64,
    pub last_column_id: i32,
    pub schemas: Vec<Schema>,
    pub current_schema_id: i32,
    pub partition_specs: Vec<PartitionSpec>,
    pub default_spec_id: i32,
    pub last_partition_id: i32,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// None when the table has no snapshot (other writers spell that -1, or leave it out).
    #[serde(
        default,
        deserialize_with = "snapshot_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub snapshot_log: Vec<SnapshotLogEntry>,
    #[serde(default)]
    pub metadata_log: Vec<MetadataLogEntry>,
    #[serde(default = "unsorted")]
    pub sort_orders: Vec<serde_json::Value>,
    #[serde(default)]
    pub default_sort_order_id: i32,
    #[serde(default)]
    pub refs: BTreeMap<String, SnapshotRef>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn snapshot_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Option::<i64>::deserialize(d)?.filter(|&id| id != -1))
}

fn unsorted() -> Vec<serde_json::Value> {
    vec![serde_json::json!({"order-id": 0, "fields": []})]
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionSpec {
    pub spec_id: i32,
    pub fields: Vec<PartitionField>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionField {
    pub source_id: i32,
    pub field_id: i32,
    pub name: String,
    /// `identity`, `day`, ... as the spec spells transforms.
    pub transform: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_snapshot_id: Option<i64>,
    #[serde(default)]
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub manifest_list: String,
    /// `operation` (append, replace, overwrite, delete) and the counters, as text.
    #[serde(default)]
    pub summary: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<i32>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotLogEntry {
    pub timestamp_ms: i64,
    pub snapshot_id: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetadataLogEntry {
    pub timestamp_ms: i64,
    pub metadata_file: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotRef {
    pub snapshot_id: i64,
    /// `branch` or `tag`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Retention settings (`max-ref-age-ms`, ...), kept as they were.
    #[serde(flatten)]
    pub extra: Extra,
}

/// What a snapshot does, as its summary's `operation` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Only adds files: a flush.
    Append,
    /// Rewrites files without changing the rows (compaction).
    Replace,
    /// Removes files and adds others that change the rows (a copy-on-write rewrite).
    Overwrite,
    /// Only removes files.
    Delete,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Append => "append",
            Operation::Replace => "replace",
            Operation::Overwrite => "overwrite",
            Operation::Delete => "delete",
        }
    }
}

impl TableMetadata {
    pub fn from_json(bytes: &[u8]) -> Result<TableMetadata, String> {
        let metadata: TableMetadata = serde_json::from_slice(bytes)
            .map_err(|e| format!("not Iceberg table metadata: {e}"))?;
        if metadata.format_version != 2 {
            return Err(format!(
                "format version {} (this writer writes version 2 tables only)",
                metadata.format_version
            ));
        }
        Ok(metadata)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("metadata serializes")
    }

    pub fn current_schema(&self) -> Option<&Schema> {
        self.schemas
            .iter()
            .find(|s| s.schema_id == self.current_schema_id)
    }

    pub fn default_spec(&self) -> Option<&PartitionSpec> {
        self.partition_specs
            .iter()
            .find(|s| s.spec_id == self.default_spec_id)
    }

    pub fn snapshot(&self, id: i64) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    pub fn current_snapshot(&self) -> Option<&Snapshot> {
        self.snapshot(self.current_snapshot_id?)
    }

    /// The current snapshot and its ancestors, newest first, as far as they are kept.
    pub fn ancestry(&self) -> impl Iterator<Item = &Snapshot> {
        std::iter::successors(self.current_snapshot(), |s| {
            self.snapshot(s.parent_snapshot_id?)
        })
    }

    /// The commit position the table holds for application `app`: the `tributary.sequence`
    /// of the newest snapshot in the current snapshot's ancestry that `app` wrote. This is
    /// Delta's `txn` version: it makes a publish idempotent and fences a writer that lost
    /// the pipeline. Snapshots other engines (or a compaction) wrote are passed over.
    pub fn position(&self, app: &str) -> Option<u64> {
        self.ancestry()
            .filter(|s| s.summary.get(APP_KEY).map(String::as_str) == Some(app))
            .find_map(|s| s.summary.get(SEQUENCE_KEY)?.parse().ok())
    }

    /// How many earlier metadata files the metadata log keeps.
    fn previous_versions_max(&self) -> usize {
        self.properties
            .get(PREVIOUS_VERSIONS_MAX)
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_PREVIOUS_VERSIONS_MAX)
    }

    /// The metadata after `snapshot` is committed on top of this one, which was read from
    /// `previous` (the metadata log names it; entries past `write.metadata.previous-versions-
    /// max` are dropped, and returned so that they can be deleted). `None` for a new table.
    pub fn with_snapshot(
        &self,
        snapshot: Snapshot,
        previous: Option<&str>,
    ) -> (TableMetadata, Vec<MetadataLogEntry>) {
        let mut next = self.clone();
        next.last_sequence_number = next.last_sequence_number.max(snapshot.sequence_number);
        next.last_updated_ms = snapshot.timestamp_ms.max(self.last_updated_ms);
        next.current_snapshot_id = Some(snapshot.snapshot_id);
        next.snapshot_log.push(SnapshotLogEntry {
            timestamp_ms: snapshot.timestamp_ms,
            snapshot_id: snapshot.snapshot_id,
        });
        next.refs.insert(
            "main".into(),
            SnapshotRef {
                snapshot_id: snapshot.snapshot_id,
                kind: "branch".into(),
                extra: Extra::new(),
            },
        );
        next.snapshots.push(snapshot);
        let dropped = match previous {
            Some(previous) => next.log_metadata(previous, self.last_updated_ms),
            None => Vec::new(),
        };
        (next, dropped)
    }

    /// Name `previous` in the metadata log, keeping the newest entries the table allows;
    /// returns the entries dropped.
    pub fn log_metadata(&mut self, previous: &str, at_ms: i64) -> Vec<MetadataLogEntry> {
        self.metadata_log.push(MetadataLogEntry {
            timestamp_ms: at_ms,
            metadata_file: previous.to_owned(),
        });
        let keep = self.previous_versions_max().max(1);
        let excess = self.metadata_log.len().saturating_sub(keep);
        self.metadata_log.drain(..excess).collect()
    }
}

/// A new snapshot id: positive, random (ids only need to be unique within a table).
pub fn new_snapshot_id() -> i64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the system's random source");
    (i64::from_le_bytes(bytes) & i64::MAX).max(1)
}

/// A new table's uuid, in its canonical text.
pub fn new_table_uuid() -> String {
    crate::lake::tables::rewrite::random_uuid()
}

/// The metadata of a new table at `location` with `schema`, partitioned by `spec` (which may
/// have no fields), before its first snapshot.
pub fn new_table(
    location: &str,
    schema: Schema,
    last_column_id: i32,
    spec: PartitionSpec,
    now_ms: i64,
) -> TableMetadata {
    let mut properties = BTreeMap::new();
    properties.insert(
        super::schema::NAME_MAPPING.to_owned(),
        super::schema::name_mapping(&schema),
    );
    TableMetadata {
        format_version: 2,
        table_uuid: new_table_uuid(),
        location: location.to_owned(),
        last_sequence_number: 0,
        last_updated_ms: now_ms,
        last_column_id,
        current_schema_id: schema.schema_id,
        schemas: vec![schema],
        default_spec_id: spec.spec_id,
        last_partition_id: spec.fields.iter().map(|f| f.field_id).max().unwrap_or(999),
        partition_specs: vec![spec],
        properties,
        current_snapshot_id: None,
        snapshots: Vec::new(),
        snapshot_log: Vec::new(),
        metadata_log: Vec::new(),
        sort_orders: unsorted(),
        default_sort_order_id: 0,
        refs: BTreeMap::new(),
        extra: Extra::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata pyiceberg wrote (trimmed), with fields this writer does not know.
    const PYICEBERG: &str = r#"{
      "location": "file:///tmp/warehouse/t", "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
      "last-updated-ms": 1700000000000, "last-column-id": 2,
      "schemas": [{"type": "struct", "fields": [
          {"id": 1, "name": "id", "type": "long", "required": true},
          {"id": 2, "name": "v", "type": "string", "required": false, "write-default": "x"}],
        "schema-id": 0, "identifier-field-ids": []}],
      "current-schema-id": 0,
      "partition-specs": [{"spec-id": 0, "fields": []}], "default-spec-id": 0,
      "last-partition-id": 999, "properties": {}, "current-snapshot-id": -1,
      "snapshots": [], "snapshot-log": [], "metadata-log": [],
      "sort-orders": [{"order-id": 0, "fields": []}], "default-sort-order-id": 0,
      "refs": {}, "statistics": [], "partition-statistics": [],
      "format-version": 2, "last-sequence-number": 0
    }"#;

    #[test]
    fn metadata_from_another_writer_loads_and_keeps_what_it_does_not_know() {
        let metadata = TableMetadata::from_json(PYICEBERG.as_bytes()).unwrap();
        assert_eq!(metadata.current_snapshot_id, None, "-1 is no snapshot");
        assert!(metadata.extra.contains_key("statistics"));
        let schema = metadata.current_schema().unwrap();
        assert_eq!(schema.fields[1].extra["write-default"], "x");
        let again = TableMetadata::from_json(&metadata.to_json()).unwrap();
        assert_eq!(again, metadata);
        let v1 = PYICEBERG.replace("\"format-version\": 2", "\"format-version\": 1");
        assert!(
            TableMetadata::from_json(v1.as_bytes())
                .unwrap_err()
                .contains("format version 1")
        );
    }

    fn snapshot(id: i64, parent: Option<i64>, app: Option<(&str, u64)>) -> Snapshot {
        let mut summary = BTreeMap::from([("operation".to_owned(), "append".to_owned())]);
        if let Some((app, sequence)) = app {
            summary.insert(APP_KEY.into(), app.into());
            summary.insert(SEQUENCE_KEY.into(), sequence.to_string());
        }
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: parent,
            sequence_number: id,
            timestamp_ms: id * 1000,
            manifest_list: format!("snap-{id}.avro"),
            summary,
            schema_id: Some(0),
            extra: Extra::new(),
        }
    }

    #[test]
    fn the_position_is_the_newest_of_the_apps_snapshots_in_the_current_ancestry() {
        let base = TableMetadata::from_json(PYICEBERG.as_bytes()).unwrap();
        assert_eq!(base.position("a"), None);
        let (m, _) = base.with_snapshot(snapshot(1, None, Some(("a", 7))), Some("v1.json"));
        let (m, _) = m.with_snapshot(snapshot(2, Some(1), Some(("b", 40))), Some("v2.json"));
        let (m, _) = m.with_snapshot(snapshot(3, Some(2), None), Some("v3.json"));
        assert_eq!((m.position("a"), m.position("b")), (Some(7), Some(40)));
        assert_eq!(m.last_sequence_number, 3);
        assert_eq!(m.refs["main"].snapshot_id, 3);
        assert_eq!(m.metadata_log.len(), 3);
        // A snapshot off the current ancestry (a rolled-back branch) does not count.
        let (mut m, _) = m.with_snapshot(snapshot(4, Some(3), Some(("a", 9))), Some("v4.json"));
        m.current_snapshot_id = Some(3);
        assert_eq!(m.position("a"), Some(7));
    }

    #[test]
    fn the_metadata_log_keeps_the_newest_previous_versions() {
        let mut m = TableMetadata::from_json(PYICEBERG.as_bytes()).unwrap();
        m.properties
            .insert(PREVIOUS_VERSIONS_MAX.into(), "2".into());
        let mut dropped = Vec::new();
        for i in 1..=4 {
            let (next, gone) = m.with_snapshot(
                snapshot(i, (i > 1).then(|| i - 1), None),
                Some(&format!("v{i}.json")),
            );
            m = next;
            dropped.extend(gone.into_iter().map(|e| e.metadata_file));
        }
        let kept: Vec<&str> = m
            .metadata_log
            .iter()
            .map(|e| e.metadata_file.as_str())
            .collect();
        assert_eq!(kept, ["v3.json", "v4.json"]);
        assert_eq!(dropped, ["v1.json", "v2.json"]);
    }
}
