//! An Iceberg table read for `tributary verify`'s audit ([`crate::lake::tables::audit`]).
//!
//! The versions are the current snapshot and its ancestors, each named by its sequence
//! number: those carrying the pipeline's position (`tributary.app`, `tributary.sequence`) are
//! held against the commit log with the data files they added (the `Added` entries of the
//! manifests each wrote); the others (a compaction's `replace`, another engine's) are passed
//! over, as Delta's audit passes over commits without a `txn`. When the ancestry stops at a
//! parent that is gone (a vacuum expired it), the audit starts from the oldest kept snapshot:
//! the entries before the first one it holds are taken as held. A kept snapshot of the
//! pipeline's that is no ancestor of the current one (the snapshots between it and the
//! current one expired) is a defect: the table no longer says it holds that entry.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryStreamExt;
use object_store::path::Path;

use super::metadata::{APP_KEY, SEQUENCE_KEY, Snapshot, TableMetadata};
use super::pointer::Catalog;
use super::table::{IcebergError, Table};
use super::tables::commit_error;
use crate::lake::commit::CommitError;
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::audit::{self, Base, TableAudit, Version, Versions};
use crate::lake::tables::mirror_name;

/// Hold `output`'s table against the commit log: `entries` are the entries with files of the
/// output, each with its files' paths relative to the table (see [`audit::audit`]).
pub async fn audit_table(
    sink: &Sink,
    catalog: Option<&Catalog>,
    output: &str,
    app: &str,
    entries: &BTreeMap<u64, BTreeSet<String>>,
) -> Result<TableAudit, CommitError> {
    let history = History::read(sink, catalog, output, app, true).await?;
    let history = history.unwrap_or_default();
    let mut found = audit::audit(
        output,
        history.log(),
        &history.live,
        &history.present,
        entries,
    );
    history.cut_off(&mut found);
    Ok(found)
}

/// Hold `output`'s current-state table against the commit log, whose entries with files of
/// the output are `entries` (see [`audit::audit_mirror`]); `None` when it has none.
pub async fn audit_mirror_table(
    sink: &Sink,
    catalog: Option<&Catalog>,
    output: &str,
    app: &str,
    entries: &BTreeSet<u64>,
) -> Result<Option<TableAudit>, CommitError> {
    let name = mirror_name(output);
    let Some(history) = History::read(sink, catalog, &name, app, false).await? else {
        return Ok(None);
    };
    let mut found = audit::audit_mirror(
        &name,
        history.log(),
        &history.live,
        &history.present,
        entries,
    );
    history.cut_off(&mut found);
    Ok(Some(found))
}

/// A table's snapshots as an audit reads them.
#[derive(Debug, Default)]
struct History {
    /// The current snapshot's sequence number.
    current: Option<u64>,
    /// What each snapshot of the current ancestry did, oldest first.
    read: Vec<Version>,
    /// The oldest kept snapshot, when its parent expired.
    base: Option<Base>,
    /// The data files the current snapshot reads, relative to the table.
    live: BTreeSet<String>,
    /// The files in the table's folder outside `metadata/`, relative to it.
    present: BTreeSet<String>,
    /// Kept snapshots carrying the pipeline's position outside the current ancestry: their id,
    /// sequence number and position.
    stray: Vec<(i64, u64, u64)>,
}

impl History {
    fn log(&self) -> audit::Log<'_> {
        audit::Log {
            versions: Versions::Snapshots(self.current),
            read: &self.read,
            base: self.base,
        }
    }

    /// Name each stray snapshot whose entry is past what `found` says the table holds.
    fn cut_off(&self, found: &mut TableAudit) {
        for &(id, version, txn) in &self.stray {
            if found.holds.is_some_and(|h| h >= txn) {
                continue;
            }
            found.problems.push(format!(
                "snapshot {id} (version {version}) holds commit entry {txn} and is no ancestor of the current snapshot (the snapshots between them expired): the table no longer says it holds the entry"
            ));
        }
    }

    /// Table `name` as `app`'s audit needs it, with the files each of `app`'s snapshots added
    /// when `adds` (a current-state table's are not checked); `None` for no table.
    async fn read(
        sink: &Sink,
        catalog: Option<&Catalog>,
        name: &str,
        app: &str,
        adds: bool,
    ) -> Result<Option<History>, CommitError> {
        let failed = |e| commit_error(name, 0, e);
        let table = Table::open(sink.clone(), name, catalog);
        let Some(loaded) = table.load().await.map_err(failed)? else {
            return Ok(None);
        };
        let metadata = &loaded.metadata;
        let mut ancestry: Vec<&Snapshot> = metadata.ancestry().collect();
        ancestry.reverse();
        let mut read = Vec::with_capacity(ancestry.len());
        for snapshot in &ancestry {
            let txn = position(snapshot, app, &loaded.location).map_err(failed)?;
            let mut added = BTreeSet::new();
            if adds && txn.is_some() {
                for uri in table.added_files(snapshot).await.map_err(failed)? {
                    added.insert(table.relative(&uri));
                }
            }
            read.push(Version {
                version: sequence_number(snapshot),
                txn,
                adds: added,
            });
        }
        let mut history = History {
            current: metadata.current_snapshot().map(sequence_number),
            base: base(metadata, &ancestry, &read),
            read,
            ..History::default()
        };
        for snapshot in &metadata.snapshots {
            let kin = ancestry
                .iter()
                .any(|a| a.snapshot_id == snapshot.snapshot_id);
            if !kin && let Some(txn) = position(snapshot, app, &loaded.location).map_err(failed)? {
                let id = snapshot.snapshot_id;
                history.stray.push((id, sequence_number(snapshot), txn));
            }
        }
        if let Some(snapshot) = metadata.current_snapshot() {
            for file in table.live_files(snapshot).await.map_err(failed)? {
                history.live.insert(table.relative(&file.file_path));
            }
        }
        // The data files matter only to a table a reader reads.
        if !history.live.is_empty() {
            history.present = data_files(sink, name).await?;
        }
        Ok(Some(history))
    }
}

/// A snapshot's sequence number as a version (a table's first snapshots, written before
/// format version 2, have none: 0).
fn sequence_number(snapshot: &Snapshot) -> u64 {
    u64::try_from(snapshot.sequence_number).unwrap_or_default()
}

/// The position of `app` that `snapshot` carries, if `app` wrote it; a position that is not a
/// number is a defect of the metadata at `location`.
fn position(snapshot: &Snapshot, app: &str, location: &str) -> Result<Option<u64>, IcebergError> {
    if snapshot.summary.get(APP_KEY).map(String::as_str) != Some(app) {
        return Ok(None);
    }
    let Some(sequence) = snapshot.summary.get(SEQUENCE_KEY) else {
        return Ok(None);
    };
    match sequence.parse() {
        Ok(sequence) => Ok(Some(sequence)),
        Err(_) => Err(IcebergError::Corrupt {
            path: location.to_owned(),
            reason: format!(
                "snapshot {} carries {SEQUENCE_KEY} {sequence:?}, which is not a commit entry's sequence number",
                snapshot.snapshot_id
            ),
        }),
    }
}

/// Where the audit starts when the oldest kept snapshot of the ancestry (`oldest_first`) names
/// a parent the table no longer has: that snapshot, the entries before the first one a kept
/// snapshot holds taken as held. `None` when the ancestry reaches the table's first snapshot.
fn base(metadata: &TableMetadata, oldest_first: &[&Snapshot], read: &[Version]) -> Option<Base> {
    let oldest = oldest_first.first()?;
    let parent = oldest.parent_snapshot_id?;
    if metadata.snapshot(parent).is_some() {
        return None;
    }
    let first = read.iter().find_map(|v| v.txn);
    Some(Base {
        version: sequence_number(oldest),
        txn: first.and_then(|t| t.checked_sub(1)),
    })
}

/// The files under table `name`'s folder, at any depth, except its `metadata/`: relative to
/// the table.
async fn data_files(sink: &Sink, name: &str) -> Result<BTreeSet<String>, SinkError> {
    let root = Path::from(name);
    let listed: Vec<_> = sink
        .store()
        .list(Some(&root))
        .try_collect()
        .await
        .map_err(|e| sink.error(e))?;
    Ok(listed
        .into_iter()
        .filter_map(|o| {
            let relative = o.location.prefix_match(&root)?;
            let relative = relative.map(|p| p.as_ref().to_owned());
            Some(relative.collect::<Vec<_>>().join("/"))
        })
        .filter(|r| !r.is_empty() && !r.starts_with("metadata/"))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::lake::iceberg::metadata::Operation;
    use crate::lake::iceberg::table::tests::{compacted, land};

    fn entries(files: &[(u64, &str)]) -> BTreeMap<u64, BTreeSet<String>> {
        files
            .iter()
            .map(|&(sequence, name)| (sequence, BTreeSet::from([format!("{name}.parquet")])))
            .collect()
    }

    #[tokio::test]
    async fn a_table_is_held_against_the_entries_before_and_after_its_snapshots_expire() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        // A compaction's replace carries no position: the audit passes over it.
        let table = compacted(&sink, "public.t").await;
        let f3 = land(&sink, "public.t", "f3", 4, 1).await;
        table.publish("app", 4, &[f3]).await.unwrap();
        let flushes = entries(&[(1, "f1"), (2, "f2"), (4, "f3"), (6, "f6")]);

        let found = audit_table(&sink, None, "public.t", "app", &flushes)
            .await
            .unwrap();
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.version, found.holds), (Some(4), Some(4)));
        assert_eq!((found.behind.as_slice(), found.base), (&[6][..], None));

        // The snapshots before the last expire: the audit starts from it.
        table.expire(i64::MAX).await.unwrap().unwrap();
        let found = audit_table(&sink, None, "public.t", "app", &flushes)
            .await
            .unwrap();
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.holds, found.base), (Some(4), Some(4)));

        // Entries naming other files than the snapshot added.
        let other = entries(&[(4, "f9")]);
        let found = audit_table(&sink, None, "public.t", "app", &other)
            .await
            .unwrap();
        assert_eq!(
            found.problems,
            ["version 4 adds 1 files for commit entry 4, which names 2 other ones"]
        );

        // A data file a reader reads, deleted from the sink.
        sink.delete(&Path::from("public.t/f3.parquet"))
            .await
            .unwrap();
        let found = audit_table(&sink, None, "public.t", "app", &flushes)
            .await
            .unwrap();
        assert_eq!(
            found.problems,
            ["f3.parquet, which a reader of version 4 reads, is not in the sink"]
        );
    }

    #[tokio::test]
    async fn a_current_state_table_holds_rising_entries_and_a_missing_one_is_none() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        let flushes = BTreeSet::from([1, 2, 4]);
        let none = audit_mirror_table(&sink, None, "public.t", "app", &flushes).await;
        assert_eq!(none.unwrap(), None);

        let table = Table::new(sink.clone(), "public.t__current");
        let m1 = land(&sink, "public.t__current", "m1", 0, 2).await;
        let m2 = land(&sink, "public.t__current", "m2", 2, 2).await;
        table.publish("app", 2, &[m1]).await.unwrap();
        table.publish("other", 9, &[m2]).await.unwrap();
        let found = audit_mirror_table(&sink, None, "public.t", "app", &flushes)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.output, "public.t__current");
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.version, found.holds), (Some(2), Some(2)));
        assert_eq!(found.behind, [4]);

        let m3 = land(&sink, "public.t__current", "m3", 4, 1).await;
        table.publish("app", 3, &[m3]).await.unwrap();
        let found = audit_mirror_table(&sink, None, "public.t", "app", &flushes)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            found.problems,
            ["version 3 holds commit entry 3, which has no files of its output"]
        );
    }

    /// A kept snapshot of the pipeline's whose children up to the current snapshot are gone
    /// from the metadata: the current ancestry stops short of it, so the table no longer says
    /// it holds its entry.
    #[tokio::test]
    async fn a_snapshot_of_the_pipeline_cut_off_from_the_current_one_is_named() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        let table = Table::new(sink.clone(), "public.t");
        let f1 = land(&sink, "public.t", "f1", 0, 2).await;
        table
            .publish("app", 1, std::slice::from_ref(&f1))
            .await
            .unwrap();
        let m1 = land(&sink, "public.t", "m1", 0, 2).await;
        table
            .replace(Operation::Replace, &[f1.path], std::slice::from_ref(&m1))
            .await
            .unwrap();
        let m2 = land(&sink, "public.t", "m2", 0, 2).await;
        table
            .replace(Operation::Replace, &[m1.path], &[m2])
            .await
            .unwrap();
        let loaded = table.load().await.unwrap().unwrap();
        let mut next = loaded.metadata.clone();
        next.snapshots.retain(|s| s.sequence_number != 2);
        let pointer = crate::lake::iceberg::table::Pointer::of(&sink, "public.t", None);
        pointer.swap(Some(&loaded), &next).await.unwrap();

        let found = audit_table(&sink, None, "public.t", "app", &entries(&[(1, "f1")]))
            .await
            .unwrap();
        assert_eq!((found.holds, found.base), (None, Some(3)));
        let first = next.snapshots[0].snapshot_id;
        assert_eq!(
            found.problems,
            [format!(
                "snapshot {first} (version 1) holds commit entry 1 and is no ancestor of the current snapshot (the snapshots between them expired): the table no longer says it holds the entry"
            )]
        );
    }
}
