//! The operations on a table as pure planning over its metadata and manifests: what a commit
//! writes (manifests, a manifest list, the next metadata) for an append, a replace or an
//! overwrite, and what an expiry drops and which files it leaves unreferenced. No IO: the
//! caller reads the parent's manifests and writes what the plan says ([`super::table`]).

use std::collections::{BTreeMap, BTreeSet};

use super::manifest::{self, DataFile, ManifestEntry, ManifestFile, Status};
use super::metadata::{
    APP_KEY, MetadataLogEntry, Operation, SEQUENCE_KEY, Snapshot, TableMetadata, new_snapshot_id,
    new_table_uuid,
};
use super::schema::{NAME_MAPPING, Schema, name_mapping};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "data file {0} is not live in the table's current snapshot: another writer removed it \
         first (run the operation again on the table as it is now)"
    )]
    NotLive(String),
    #[error("the table's metadata is incomplete: {0}")]
    Incomplete(String),
}

/// What one commit changes.
#[derive(Debug, Clone)]
pub struct Change {
    pub operation: Operation,
    /// Data files to add, their statistics and partition tuples filled.
    pub added: Vec<DataFile>,
    /// Paths of live data files to remove.
    pub removed: BTreeSet<String>,
    /// The pipeline's position, when the commit publishes a flush: (app, sequence).
    pub position: Option<(String, u64)>,
    /// The table's schema after the change and its last column id, when it evolved.
    pub schema: Option<(Schema, i32)>,
}

/// The parent a commit is planned on: the table's metadata (from the metadata file at
/// `location`, `None` for a table not created yet) and its current snapshot's manifests.
pub struct Parent<'a> {
    pub metadata: &'a TableMetadata,
    pub location: Option<&'a str>,
    pub manifests: &'a [ManifestFile],
    /// The entries of the manifests that name a removed file and of those [`merging`] names
    /// (read only for those).
    pub entries: &'a BTreeMap<String, Vec<ManifestEntry>>,
}

/// A commit that would leave this many manifests of the default partition spec merges the
/// small ones into one, as Iceberg's own writers do past `commit.manifest.min-count-to-merge`
/// (100 by default): without it, every flush adds a manifest, and the manifest list every
/// commit writes and every reader plans from grows with the table's age.
pub const MERGE_AT: usize = 100;

/// A manifest this large is left as it is by a merge (`commit.manifest.target-size-bytes`).
pub const MERGE_TARGET: i64 = 8 << 20;

/// The parent's manifests a commit adding a manifest (`adds`) on them merges: when the live
/// manifests of the partition spec `spec_id` would reach [`MERGE_AT`], those of them under
/// [`MERGE_TARGET`]; otherwise none. Their entries are the caller's to read.
pub fn merging(manifests: &[ManifestFile], spec_id: i32, adds: bool) -> Vec<&ManifestFile> {
    let same: Vec<&ManifestFile> = manifests
        .iter()
        .filter(|m| m.has_live_files() && m.partition_spec_id == spec_id)
        .collect();
    if same.len() + usize::from(adds) < MERGE_AT {
        return Vec::new();
    }
    same.into_iter()
        .filter(|m| m.manifest_length < MERGE_TARGET)
        .collect()
}

/// A planned commit: the objects to create (absolute URI and bytes, all under new names),
/// then the metadata to swap in, and the metadata files its log no longer names.
#[derive(Debug)]
pub struct Planned {
    pub objects: Vec<(String, Vec<u8>)>,
    /// The manifests the new snapshot lists.
    pub manifests: Vec<ManifestFile>,
    pub metadata: TableMetadata,
    pub dropped: Vec<MetadataLogEntry>,
}

/// The metadata folder of a table at `location`.
pub fn metadata_dir(location: &str) -> String {
    format!("{}/metadata", location.trim_end_matches('/'))
}

/// What the attempts of one commit share: the snapshot id and the stem of the names of what
/// it writes, and the manifests written, by what they hold. An attempt planned again on a
/// parent that moved (another writer swapped first) writes only what the move changed: a new
/// manifest list, and the manifests whose sources the winner rewrote. The window between
/// loading the parent and swapping is then a few requests, however large the commit.
#[derive(Debug)]
pub struct Attempts {
    snapshot_id: i64,
    stem: String,
    attempt: u32,
    /// By the schema and the partition spec they were written with, and the parent's
    /// manifests they rewrite (none: the commit's added files).
    written: BTreeMap<(i32, i32, Vec<String>), WrittenManifest>,
}

#[derive(Debug)]
struct WrittenManifest {
    path: String,
    length: i64,
    entries: Vec<ManifestEntry>,
}

impl Attempts {
    pub fn new() -> Attempts {
        Attempts {
            snapshot_id: new_snapshot_id(),
            stem: new_table_uuid(),
            attempt: 0,
            written: BTreeMap::new(),
        }
    }

    /// The manifests the attempts wrote that `listed` (the committed snapshot's manifests)
    /// does not name, or every one without it: nothing reads them.
    pub fn unused(&self, listed: Option<&[ManifestFile]>) -> Vec<String> {
        let named: BTreeSet<&str> = listed
            .unwrap_or_default()
            .iter()
            .map(|m| m.manifest_path.as_str())
            .collect();
        self.written
            .values()
            .map(|w| w.path.clone())
            .filter(|p| !named.contains(p.as_str()))
            .collect()
    }

    /// The manifest `key` names, written now when no attempt wrote it yet (added to
    /// `objects`): its path, length and entries.
    fn manifest(
        &mut self,
        key: (i32, i32, Vec<String>),
        dir: &str,
        write: impl FnOnce() -> Result<(Vec<ManifestEntry>, Vec<u8>), String>,
        objects: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<&WrittenManifest, PlanError> {
        let n = self.written.len();
        if !self.written.contains_key(&key) {
            let (entries, bytes) = write().map_err(PlanError::Incomplete)?;
            let path = format!("{dir}/{}-m{n}.avro", self.stem);
            let length = bytes.len() as i64;
            objects.push((path.clone(), bytes));
            self.written.insert(
                key.clone(),
                WrittenManifest {
                    path,
                    length,
                    entries,
                },
            );
        }
        Ok(&self.written[&key])
    }
}

impl Default for Attempts {
    fn default() -> Self {
        Attempts::new()
    }
}

/// Plan a commit of `change` on `parent`, at `now_ms`, as one more of its `attempts`.
pub fn plan(
    parent: &Parent<'_>,
    change: Change,
    now_ms: i64,
    attempts: &mut Attempts,
) -> Result<Planned, PlanError> {
    let mut base = parent.metadata.clone();
    if let Some((schema, last_column_id)) = &change.schema {
        if !base.schemas.iter().any(|s| s.schema_id == schema.schema_id) {
            base.schemas.push(schema.clone());
        }
        base.current_schema_id = schema.schema_id;
        base.last_column_id = base.last_column_id.max(*last_column_id);
        base.properties
            .insert(NAME_MAPPING.into(), name_mapping(schema));
    }
    let schema = base
        .current_schema()
        .ok_or_else(|| PlanError::Incomplete("no current schema".into()))?
        .clone();
    let spec = base
        .default_spec()
        .ok_or_else(|| PlanError::Incomplete("no default partition spec".into()))?
        .clone();
    attempts.attempt += 1;
    let snapshot_id = attempts.snapshot_id;
    let sequence_number = base.last_sequence_number + 1;
    let dir = metadata_dir(&base.location);
    let mut objects = Vec::new();
    let mut listed = Vec::new();
    let incomplete = |e: String| PlanError::Incomplete(e);

    if !change.added.is_empty() {
        let key = (schema.schema_id, spec.spec_id, Vec::new());
        let written = attempts.manifest(
            key,
            &dir,
            || {
                let entries: Vec<ManifestEntry> = change
                    .added
                    .iter()
                    .map(|f| ManifestEntry {
                        status: Status::Added,
                        snapshot_id: Some(snapshot_id),
                        sequence_number: None,
                        file_sequence_number: None,
                        data_file: f.clone(),
                    })
                    .collect();
                let bytes = manifest::write_manifest(&entries, &schema, &spec)?;
                Ok((entries, bytes))
            },
            &mut objects,
        )?;
        listed.push(manifest::summarize(
            &written.entries,
            written.path.clone(),
            written.length,
            &spec,
            snapshot_id,
            sequence_number,
        ));
    }
    let merge: BTreeSet<&str> = merging(parent.manifests, spec.spec_id, !change.added.is_empty())
        .into_iter()
        .map(|m| m.manifest_path.as_str())
        .collect();
    let (rewritten, removed) = remove(parent, &change.removed, &merge, snapshot_id)?;
    let replaced: BTreeSet<&str> = rewritten
        .iter()
        .map(|(m, _)| m.manifest_path.as_str())
        .collect();
    for (spec_id, _, sources, entries) in groups(&rewritten) {
        let spec = parent
            .metadata
            .partition_specs
            .iter()
            .find(|s| s.spec_id == spec_id)
            .unwrap_or(&spec);
        let written = attempts.manifest(
            (schema.schema_id, spec_id, sources),
            &dir,
            || {
                let bytes = manifest::write_manifest(&entries, &schema, spec)?;
                Ok((entries, bytes))
            },
            &mut objects,
        )?;
        listed.push(manifest::summarize(
            &written.entries,
            written.path.clone(),
            written.length,
            spec,
            snapshot_id,
            sequence_number,
        ));
    }
    listed.extend(
        parent
            .manifests
            .iter()
            .filter(|m| m.has_live_files() && !replaced.contains(m.manifest_path.as_str()))
            .cloned(),
    );
    let parent_id = parent.metadata.current_snapshot_id;
    let list_path = format!(
        "{dir}/snap-{snapshot_id}-{}-{}.avro",
        attempts.attempt, attempts.stem
    );
    let list = manifest::write_manifest_list(&listed, snapshot_id, parent_id, sequence_number)
        .map_err(incomplete)?;
    objects.push((list_path.clone(), list));

    let summary = summary(
        &change,
        &removed,
        &listed,
        parent.metadata.current_snapshot(),
    );
    let snapshot = Snapshot {
        snapshot_id,
        parent_snapshot_id: parent_id,
        sequence_number,
        timestamp_ms: now_ms,
        manifest_list: list_path,
        summary,
        schema_id: Some(schema.schema_id),
        extra: Default::default(),
    };
    let (metadata, dropped) = base.with_snapshot(snapshot, parent.location);
    Ok(Planned {
        objects,
        manifests: listed,
        metadata,
        dropped,
    })
}

/// The manifests that named a removed file and those merged (`rewritten`), grouped to be
/// written again as few manifests per partition spec, each up to the target size: a commit
/// writes a few objects however many flushes it removes files of, and the manifests stay few.
/// Each group (its spec, size, sources and entries) is named by the manifests it rewrites: an
/// attempt on a parent whose winner left them as they were writes the same group, and reuses
/// the manifest written for it.
#[allow(clippy::type_complexity)]
fn groups(
    rewritten: &[(ManifestFile, Vec<ManifestEntry>)],
) -> Vec<(i32, i64, Vec<String>, Vec<ManifestEntry>)> {
    let mut merged: Vec<(i32, i64, Vec<String>, Vec<ManifestEntry>)> = Vec::new();
    for (old, entries) in rewritten {
        let spec_id = old.partition_spec_id;
        match merged
            .iter_mut()
            .rfind(|(s, size, ..)| *s == spec_id && size + old.manifest_length <= MERGE_TARGET)
        {
            Some((_, size, sources, into)) => {
                *size += old.manifest_length;
                sources.push(old.manifest_path.clone());
                into.extend(entries.iter().cloned());
            }
            None => merged.push((
                spec_id,
                old.manifest_length,
                vec![old.manifest_path.clone()],
                entries.clone(),
            )),
        }
    }
    merged
}

/// The parent's manifests that name a removed file or are in `merge`, rewritten: the
/// removed files `Deleted` by this snapshot, the others `Existing`, entries deleted by earlier
/// snapshots dropped; the others are listed as they are. Also the removed files' entries.
/// Every removed path must be live.
#[allow(clippy::type_complexity)]
fn remove(
    parent: &Parent<'_>,
    paths: &BTreeSet<String>,
    merge: &BTreeSet<&str>,
    snapshot_id: i64,
) -> Result<(Vec<(ManifestFile, Vec<ManifestEntry>)>, Vec<DataFile>), PlanError> {
    let mut found = BTreeSet::new();
    let mut removed = Vec::new();
    let mut rewritten = Vec::new();
    for m in parent.manifests {
        let merged = merge.contains(m.manifest_path.as_str());
        let Some(entries) = parent.entries.get(&m.manifest_path) else {
            if merged {
                return Err(PlanError::Incomplete(format!(
                    "manifest {} is to be merged and was not read",
                    m.manifest_path
                )));
            }
            continue;
        };
        let mut kept = Vec::with_capacity(entries.len());
        for e in entries.iter().filter(|e| e.status != Status::Deleted) {
            let mut e = e.clone();
            if paths.contains(&e.data_file.file_path) {
                found.insert(e.data_file.file_path.clone());
                removed.push(e.data_file.clone());
                e.status = Status::Deleted;
                e.snapshot_id = Some(snapshot_id);
            } else {
                e.status = Status::Existing;
            }
            kept.push(e);
        }
        if merged || kept.iter().any(|e| e.status == Status::Deleted) {
            rewritten.push((m.clone(), kept));
        }
    }
    if let Some(missing) = paths.difference(&found).next() {
        return Err(PlanError::NotLive(missing.clone()));
    }
    Ok((rewritten, removed))
}

/// The snapshot summary: the operation, the pipeline's position, and the standard counters.
fn summary(
    change: &Change,
    removed: &[DataFile],
    listed: &[ManifestFile],
    parent: Option<&Snapshot>,
) -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    let mut put = |k: &str, v: i64| {
        s.insert(k.to_owned(), v.to_string());
    };
    let added_size: i64 = change.added.iter().map(|f| f.file_size_in_bytes).sum();
    let removed_size: i64 = removed.iter().map(|f| f.file_size_in_bytes).sum();
    if !change.added.is_empty() {
        put("added-data-files", change.added.len() as i64);
        put(
            "added-records",
            change.added.iter().map(|f| f.record_count).sum(),
        );
        put("added-files-size", added_size);
    }
    if !removed.is_empty() {
        put("deleted-data-files", removed.len() as i64);
        put(
            "deleted-records",
            removed.iter().map(|f| f.record_count).sum(),
        );
        put("removed-files-size", removed_size);
    }
    let live = |m: &ManifestFile| (m.added_files_count + m.existing_files_count) as i64;
    put("total-data-files", listed.iter().map(live).sum());
    put(
        "total-records",
        listed
            .iter()
            .map(|m| m.added_rows_count + m.existing_rows_count)
            .sum(),
    );
    let parent_size = match parent {
        None => Some(0),
        Some(p) => p
            .summary
            .get("total-files-size")
            .and_then(|v| v.parse::<i64>().ok()),
    };
    if let Some(size) = parent_size {
        put("total-files-size", size + added_size - removed_size);
    }
    for zero in [
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    ] {
        put(zero, 0);
    }
    s.insert("operation".into(), change.operation.name().into());
    if let Some((app, sequence)) = &change.position {
        s.insert(APP_KEY.into(), app.clone());
        s.insert(SEQUENCE_KEY.into(), sequence.to_string());
    }
    s
}

/// What an expiry keeps and drops.
#[derive(Debug)]
pub struct Expiry {
    pub metadata: TableMetadata,
    pub expired: Vec<Snapshot>,
}

/// Expire the snapshots older than `older_than_ms`, except the current one, those a ref
/// names, and the newest snapshot of each Tributary application in the current ancestry
/// (its position: without it a pipeline would take the table to hold none of its flushes).
/// `None` when nothing expires.
pub fn expire(metadata: &TableMetadata, older_than_ms: i64) -> Option<Expiry> {
    let mut keep: BTreeSet<i64> = metadata.refs.values().map(|r| r.snapshot_id).collect();
    keep.extend(metadata.current_snapshot_id);
    // Each application's newest snapshot, and every one of the current ancestry after it: a
    // position is read along the ancestry, which an expired snapshot between (a compaction's,
    // say) would cut short of it.
    let ancestry: Vec<&Snapshot> = metadata.ancestry().collect();
    let mut apps = BTreeSet::new();
    let mut reach = 0;
    for (i, s) in ancestry.iter().enumerate() {
        if let Some(app) = s.summary.get(APP_KEY)
            && apps.insert(app.clone())
        {
            reach = i + 1;
        }
    }
    keep.extend(ancestry[..reach].iter().map(|s| s.snapshot_id));
    let (kept, expired): (Vec<Snapshot>, Vec<Snapshot>) = metadata
        .snapshots
        .iter()
        .cloned()
        .partition(|s| s.timestamp_ms >= older_than_ms || keep.contains(&s.snapshot_id));
    if expired.is_empty() {
        return None;
    }
    let mut next = metadata.clone();
    let kept_ids: BTreeSet<i64> = kept.iter().map(|s| s.snapshot_id).collect();
    next.snapshot_log
        .retain(|e| kept_ids.contains(&e.snapshot_id));
    next.snapshots = kept;
    Some(Expiry {
        metadata: next,
        expired,
    })
}

/// One snapshot's manifest list and manifests, each with its entries, as read back.
pub struct SnapshotFiles {
    pub manifest_list: String,
    pub manifests: Vec<(ManifestFile, Vec<ManifestEntry>)>,
}

/// The files only expired snapshots reference: their manifest lists, the manifests no kept
/// snapshot lists, and the data files no kept snapshot holds live; and the metadata files
/// the metadata log let go of.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unreferenced {
    pub manifest_lists: BTreeSet<String>,
    pub manifests: BTreeSet<String>,
    pub data_files: BTreeSet<String>,
    pub metadata_files: BTreeSet<String>,
}

pub fn unreferenced(expired: &[SnapshotFiles], kept: &[SnapshotFiles]) -> Unreferenced {
    let kept_manifests: BTreeSet<&str> = kept
        .iter()
        .flat_map(|s| s.manifests.iter().map(|(m, _)| m.manifest_path.as_str()))
        .collect();
    let kept_lists: BTreeSet<&str> = kept.iter().map(|s| s.manifest_list.as_str()).collect();
    let live: BTreeSet<&str> = kept
        .iter()
        .flat_map(|s| s.manifests.iter().flat_map(|(_, entries)| entries))
        .filter(|e| e.status != Status::Deleted)
        .map(|e| e.data_file.file_path.as_str())
        .collect();
    let mut out = Unreferenced::default();
    for s in expired {
        if !kept_lists.contains(s.manifest_list.as_str()) {
            out.manifest_lists.insert(s.manifest_list.clone());
        }
        for (m, entries) in &s.manifests {
            if !kept_manifests.contains(m.manifest_path.as_str()) {
                out.manifests.insert(m.manifest_path.clone());
            }
            for e in entries {
                if !live.contains(e.data_file.file_path.as_str()) {
                    out.data_files.insert(e.data_file.file_path.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field};

    use super::super::metadata::new_table;
    use super::super::{avro, partition, schema};
    use super::*;

    fn file(name: &str, rows: i64) -> DataFile {
        DataFile {
            file_path: format!("file:///lake/t/{name}"),
            record_count: rows,
            file_size_in_bytes: rows * 100,
            ..Default::default()
        }
    }

    fn table() -> TableMetadata {
        let columns = arrow_schema::Schema::new(vec![Field::new("id", DataType::Int64, false)]);
        let (schema, last) = schema::fresh(&columns).unwrap();
        new_table(
            "file:///lake/t",
            schema,
            last,
            partition::unpartitioned(),
            1000,
        )
    }

    fn append(files: Vec<DataFile>, app: &str, sequence: u64) -> Change {
        Change {
            operation: Operation::Append,
            added: files,
            removed: BTreeSet::new(),
            position: Some((app.into(), sequence)),
            schema: None,
        }
    }

    /// Commit `change` on `metadata`, reading manifests back from `store` as the IO would.
    fn commit(
        metadata: &TableMetadata,
        location: Option<&str>,
        store: &mut BTreeMap<String, Vec<u8>>,
        change: Change,
        now: i64,
    ) -> TableMetadata {
        attempt(metadata, location, store, change, now, &mut Attempts::new()).0
    }

    /// One of `attempts` at committing `change` on `metadata`: the next metadata, and the
    /// objects it wrote.
    fn attempt(
        metadata: &TableMetadata,
        location: Option<&str>,
        store: &mut BTreeMap<String, Vec<u8>>,
        change: Change,
        now: i64,
        attempts: &mut Attempts,
    ) -> (TableMetadata, Vec<String>) {
        let manifests = match metadata.current_snapshot() {
            None => Vec::new(),
            Some(s) => manifest::read_manifest_list(&store[&s.manifest_list]).unwrap(),
        };
        let spec_id = metadata.default_spec_id;
        let merge: BTreeSet<&str> = merging(&manifests, spec_id, !change.added.is_empty())
            .into_iter()
            .map(|m| m.manifest_path.as_str())
            .collect();
        let entries: BTreeMap<String, Vec<ManifestEntry>> = manifests
            .iter()
            .map(|m| {
                let entries =
                    manifest::read_manifest(&store[&m.manifest_path], m.sequence_number).unwrap();
                (m.manifest_path.clone(), entries)
            })
            .filter(|(path, entries)| {
                merge.contains(path.as_str())
                    || entries
                        .iter()
                        .any(|e| change.removed.contains(&e.data_file.file_path))
            })
            .collect();
        let parent = Parent {
            metadata,
            location,
            manifests: &manifests,
            entries: &entries,
        };
        let planned = plan(&parent, change, now, attempts).unwrap();
        let mut written = Vec::new();
        for (path, bytes) in planned.objects {
            assert!(
                store.insert(path.clone(), bytes).is_none(),
                "every object is new"
            );
            written.push(path);
        }
        (planned.metadata, written)
    }

    /// The live files of the current snapshot, with their data sequence numbers.
    fn live(metadata: &TableMetadata, store: &BTreeMap<String, Vec<u8>>) -> Vec<(String, i64)> {
        let list = &store[&metadata.current_snapshot().unwrap().manifest_list];
        let mut out: Vec<(String, i64)> = manifest::read_manifest_list(list)
            .unwrap()
            .iter()
            .flat_map(|m| {
                manifest::read_manifest(&store[&m.manifest_path], m.sequence_number).unwrap()
            })
            .filter(|e| e.status != Status::Deleted)
            .map(|e| {
                (
                    e.data_file.file_path.rsplit('/').next().unwrap().to_owned(),
                    e.sequence_number.unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn appends_carry_the_parents_manifests_and_number_sequences() {
        let mut store = BTreeMap::new();
        let m0 = table();
        let m1 = commit(
            &m0,
            None,
            &mut store,
            append(vec![file("a", 3)], "app", 1),
            2000,
        );
        let m2 = commit(
            &m1,
            Some("v1"),
            &mut store,
            append(vec![file("b", 4), file("c", 5)], "app", 2),
            3000,
        );
        assert_eq!(
            live(&m2, &store),
            [("a".into(), 1), ("b".into(), 2), ("c".into(), 2)]
        );
        let s = m2.current_snapshot().unwrap();
        assert_eq!(
            (s.sequence_number, s.parent_snapshot_id),
            (2, m1.current_snapshot_id)
        );
        assert_eq!(s.summary["operation"], "append");
        assert_eq!(s.summary["added-data-files"], "2");
        assert_eq!(s.summary["added-records"], "9");
        assert_eq!(s.summary["total-records"], "12");
        assert_eq!(s.summary["total-data-files"], "3");
        assert_eq!(s.summary["total-files-size"], "1200");
        assert_eq!(m2.position("app"), Some(2));
        assert_eq!(m2.last_sequence_number, 2);
        assert_eq!(
            m2.metadata_log.len(),
            1,
            "v1 is named; the new table had no file before"
        );
        // The manifest list says who added what, at which sequence number.
        let list = manifest::read_manifest_list(&store[&s.manifest_list]).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(
            (list[0].added_snapshot_id, list[0].sequence_number),
            (s.snapshot_id, 2)
        );
        assert_eq!((list[1].sequence_number, list[1].added_files_count), (1, 1));
        let container = avro::read_container(&store[&s.manifest_list]).unwrap();
        assert_eq!(container.metadata["sequence-number"], "2");
    }

    #[test]
    fn the_hundredth_manifest_merges_the_small_ones_keeping_every_files_sequence() {
        let mut store = BTreeMap::new();
        let (mut metadata, mut location) = (table(), None);
        let mut snapshots = Vec::new();
        for i in 1..MERGE_AT as u64 {
            let change = append(vec![file(&format!("f{i:03}"), 1)], "app", i);
            metadata = commit(&metadata, location, &mut store, change, 1000 + i as i64);
            location = Some("v");
            snapshots.push(metadata.current_snapshot_id.unwrap());
        }
        let list = |store: &BTreeMap<String, Vec<u8>>, m: &TableMetadata| {
            manifest::read_manifest_list(&store[&m.current_snapshot().unwrap().manifest_list])
                .unwrap()
        };
        assert_eq!(
            list(&store, &metadata).len(),
            MERGE_AT - 1,
            "one manifest per append"
        );
        let last = MERGE_AT as u64;
        let change = append(vec![file("last", 1)], "app", last);
        metadata = commit(&metadata, location, &mut store, change, 5000);
        let manifests = list(&store, &metadata);
        assert_eq!(
            manifests.len(),
            2,
            "the new one and the merge of the others"
        );
        assert_eq!(
            (
                manifests[1].existing_files_count,
                manifests[1].added_files_count
            ),
            (MERGE_AT as i32 - 1, 0)
        );
        assert_eq!(manifests[1].min_sequence_number, 1);
        let live = live(&metadata, &store);
        assert_eq!(live.len(), MERGE_AT);
        for (i, (name, sequence)) in live.iter().take(MERGE_AT - 1).enumerate() {
            assert_eq!(
                (name.as_str(), *sequence),
                (format!("f{:03}", i + 1).as_str(), i as i64 + 1),
                "a merged file keeps the sequence number it was added at"
            );
        }
        let merged = manifest::read_manifest(&store[&manifests[1].manifest_path], 0).unwrap();
        assert!(merged.iter().all(|e| e.status == Status::Existing));
        let mut added_by: Vec<i64> = merged.iter().map(|e| e.snapshot_id.unwrap()).collect();
        added_by.sort();
        snapshots.sort();
        assert_eq!(
            added_by, snapshots,
            "a merged file keeps the snapshot that added it"
        );
        let s = metadata.current_snapshot().unwrap();
        assert_eq!(s.summary["total-data-files"], MERGE_AT.to_string());
        assert_eq!(s.summary["total-records"], MERGE_AT.to_string());
        // The next append stays below the count again.
        let change = append(vec![file("next", 1)], "app", last + 1);
        metadata = commit(&metadata, Some("v"), &mut store, change, 6000);
        assert_eq!(list(&store, &metadata).len(), 3);
    }

    /// A table of two appends (a and b, then c) and a compaction of a and c into ac:
    /// the metadata after the second append and after the compaction, and the compaction.
    fn compacted(store: &mut BTreeMap<String, Vec<u8>>) -> (TableMetadata, TableMetadata, Change) {
        let m1 = commit(
            &table(),
            None,
            store,
            append(vec![file("a", 3), file("b", 4)], "app", 1),
            2000,
        );
        let m2 = commit(
            &m1,
            Some("v1"),
            store,
            append(vec![file("c", 5)], "app", 2),
            3000,
        );
        let compaction = Change {
            operation: Operation::Replace,
            added: vec![file("ac", 8)],
            removed: BTreeSet::from([file("a", 0).file_path, file("c", 0).file_path]),
            position: None,
            schema: None,
        };
        let m3 = commit(&m2, Some("v2"), store, compaction.clone(), 4000);
        (m2, m3, compaction)
    }

    /// A snapshot's manifest list and manifests, read back.
    fn snapshot_files(store: &BTreeMap<String, Vec<u8>>, s: &Snapshot) -> SnapshotFiles {
        SnapshotFiles {
            manifest_list: s.manifest_list.clone(),
            manifests: manifest::read_manifest_list(&store[&s.manifest_list])
                .unwrap()
                .into_iter()
                .map(|m| {
                    let e = manifest::read_manifest(&store[&m.manifest_path], m.sequence_number)
                        .unwrap();
                    (m, e)
                })
                .collect(),
        }
    }

    #[test]
    fn a_replace_deletes_some_files_and_keeps_the_rest_existing() {
        let mut store = BTreeMap::new();
        let (_, m3, compaction) = compacted(&mut store);
        assert_eq!(live(&m3, &store), [("ac".into(), 3), ("b".into(), 1)]);
        let s = m3.current_snapshot().unwrap();
        assert_eq!(s.summary["operation"], "replace");
        assert_eq!(s.summary["deleted-data-files"], "2");
        assert_eq!(s.summary["total-records"], "12");
        assert_eq!(
            m3.position("app"),
            Some(2),
            "a compaction keeps the pipeline's position"
        );
        // Removing a file that is gone already is refused.
        let files = snapshot_files(&store, s);
        let manifests: Vec<ManifestFile> = files.manifests.iter().map(|(m, _)| m.clone()).collect();
        let entries = files
            .manifests
            .into_iter()
            .map(|(m, e)| (m.manifest_path, e))
            .collect();
        let parent = Parent {
            metadata: &m3,
            location: Some("v3"),
            manifests: &manifests,
            entries: &entries,
        };
        let e = plan(&parent, compaction, 5000, &mut Attempts::new()).unwrap_err();
        assert!(matches!(e, PlanError::NotLive(p) if p.ends_with("/a")));
    }

    #[test]
    fn a_replace_planned_again_after_an_append_won_writes_only_a_manifest_list() {
        let mut store = BTreeMap::new();
        let (m2, _, compaction) = compacted(&mut store);
        // The compaction's first attempt, planned on m2, loses to an append (m3).
        let mut attempts = Attempts::new();
        let (lost, first) = attempt(
            &m2,
            Some("v2"),
            &mut store,
            compaction.clone(),
            4000,
            &mut attempts,
        );
        assert_eq!(
            first.len(),
            3,
            "the added files' manifest, a rewritten one, a list"
        );
        let m3 = commit(
            &m2,
            Some("v2"),
            &mut store,
            append(vec![file("d", 6)], "app", 3),
            4500,
        );
        let (m4, second) = attempt(&m3, Some("v3"), &mut store, compaction, 5000, &mut attempts);
        assert_eq!(second.len(), 1, "{second:?}");
        assert!(second[0].contains("/snap-"), "{second:?}");
        let snapshot = m4.current_snapshot().unwrap();
        assert_eq!(
            snapshot.snapshot_id,
            lost.current_snapshot_id.unwrap(),
            "the attempts are one commit"
        );
        assert_eq!(snapshot.sequence_number, 4);
        assert_eq!(
            live(&m4, &store),
            [("ac".into(), 4), ("b".into(), 1), ("d".into(), 3)],
            "the compacted file takes the commit's sequence number, the append's stays its own"
        );
        assert_eq!(m4.position("app"), Some(3));
        let listed = manifest::read_manifest_list(&store[&snapshot.manifest_list]).unwrap();
        assert!(attempts.unused(Some(&listed)).is_empty());

        // When the winner rewrote a manifest the compaction rewrites too, that one is new.
        let mut store = BTreeMap::new();
        let (m2, _, compaction) = compacted(&mut store);
        let mut attempts = Attempts::new();
        attempt(
            &m2,
            Some("v2"),
            &mut store,
            compaction.clone(),
            4000,
            &mut attempts,
        );
        let other = Change {
            operation: Operation::Replace,
            added: vec![file("b2", 4)],
            removed: BTreeSet::from([file("b", 0).file_path]),
            position: None,
            schema: None,
        };
        let m3 = commit(&m2, Some("v2"), &mut store, other, 4500);
        let (m4, second) = attempt(&m3, Some("v3"), &mut store, compaction, 5000, &mut attempts);
        assert_eq!(
            second.len(),
            2,
            "a manifest rewritten anew, a list: {second:?}"
        );
        assert_eq!(live(&m4, &store), [("ac".into(), 4), ("b2".into(), 3)],);
        let listed =
            manifest::read_manifest_list(&store[&m4.current_snapshot().unwrap().manifest_list])
                .unwrap();
        assert_eq!(
            attempts.unused(Some(&listed)).len(),
            1,
            "the first attempt's rewrite"
        );
    }

    #[test]
    fn expiry_keeps_the_current_the_refs_and_each_apps_position() {
        let mut store = BTreeMap::new();
        let (m2, m3, _) = compacted(&mut store);
        assert!(expire(&m3, 1000).is_none(), "nothing that old");
        let expiry = expire(&m3, 10_000).unwrap();
        let ids = |m: &TableMetadata| {
            m.snapshots
                .iter()
                .map(|s| s.snapshot_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(&expiry.metadata),
            [
                m2.current_snapshot_id.unwrap(),
                m3.current_snapshot_id.unwrap()
            ],
            "m2 is the app's position"
        );
        assert_eq!(expiry.metadata.position("app"), Some(2));

        let m4 = commit(
            &m3,
            Some("v3"),
            &mut store,
            append(vec![file("d", 1)], "app", 3),
            5000,
        );
        let expiry = expire(&m4, 10_000).unwrap();
        assert_eq!(ids(&expiry.metadata), [m4.current_snapshot_id.unwrap()]);
        assert_eq!(expiry.metadata.snapshot_log.len(), 1);
        let files = |s: &Snapshot| snapshot_files(&store, s);
        let expired: Vec<SnapshotFiles> = expiry.expired.iter().map(files).collect();
        let kept: Vec<SnapshotFiles> = expiry.metadata.snapshots.iter().map(files).collect();
        let gone = unreferenced(&expired, &kept);
        assert_eq!(gone.manifest_lists.len(), 3);
        let names: Vec<&str> = gone
            .data_files
            .iter()
            .map(|p| p.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(names, ["a", "c"], "b, ac and d are live in m4");
        // m1's and m2's manifests; m3 merged its rewrites of both into one, which still
        // holds b.
        assert_eq!(gone.manifests.len(), 2);
    }

    #[test]
    fn expiry_keeps_the_snapshots_between_a_position_and_the_current_one() {
        let mut store = BTreeMap::new();
        let (_, m3, _) = compacted(&mut store);
        // A second compaction: the app's position (m2) is now two snapshots back.
        let again = Change {
            operation: Operation::Replace,
            added: vec![file("abc", 12)],
            removed: BTreeSet::from([file("ac", 0).file_path, file("b", 0).file_path]),
            position: None,
            schema: None,
        };
        let m4 = commit(&m3, Some("v3"), &mut store, again, 5000);
        let expiry = expire(&m4, i64::MAX).unwrap();
        assert_eq!(
            expiry.metadata.snapshots.len(),
            3,
            "m2, the compaction after it and the current one"
        );
        assert_eq!(
            expiry.metadata.position("app"),
            Some(2),
            "the position is still found along the ancestry"
        );
        assert_eq!(expiry.expired.len(), 1, "only m1 expires");
    }
}
