//! What `tributary vacuum` does to an Iceberg table. The snapshots older than the retention
//! expire in one commit ([`Table::expire`]), except the current one, those a branch or tag
//! names, and each pipeline's newest (its position); then what only they referenced goes:
//! their manifest lists, the manifests no kept snapshot lists, and the data files no kept
//! snapshot reads. A reader of a snapshot from within the retention still finds every file.
//!
//! Beside those, the metadata files older than the retention that the table's metadata log
//! no longer names (it keeps `write.metadata.previous-versions-max`, 100 unless set), and what
//! a commit or a compaction left when it stopped before its swap: manifests under
//! `metadata/` and files under `_compacted/` that no snapshot references, once older than the
//! retention and a day (a commit or compaction still running keeps its files).
//!
//! Nothing else is deleted. A data file at a table's root that no snapshot references belongs
//! to a flush the table does not hold yet (its entry is being published, or a start will
//! catch up), or to a flush that never committed, which recovery removes by its intent.

use std::collections::{BTreeMap, BTreeSet};

use object_store::path::Path;

use super::pointer::{Catalog, sequence_of};
use super::table::{Expiry, Table};
use super::tables::commit_error;
use crate::lake::commit::CommitError;
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::tend::{COMPACTED, Plan, Present, Vacuumable, cutoffs};

/// What a vacuum at `now_ms` deletes from table `name`, keeping what its snapshots stopped
/// reading less than `retention_ms` ago; with `commit`, the expiry is committed first and the
/// plan is what it left (without, nothing is changed: a dry run).
pub async fn vacuumable(
    sink: &Sink,
    catalog: Option<&Catalog>,
    name: &str,
    app: &str,
    now_ms: i64,
    retention_ms: i64,
    commit: bool,
) -> Result<Vacuumable, CommitError> {
    let table = Table::open(sink.clone(), name, catalog);
    let (cutoff, _) = cutoffs(now_ms, retention_ms);
    let expiry = match commit {
        true => table.expire(cutoff).await,
        false => table.expiry(cutoff).await,
    };
    let Some(expiry) = expiry.map_err(|e| commit_error(name, 0, e))? else {
        return Ok(Vacuumable::Plan {
            plan: Plan::default(),
            holds: None,
        });
    };
    let present = listing(sink, name).await?;
    let root = format!("{}/", table.location());
    Ok(Vacuumable::Plan {
        plan: plan(&root, &expiry, &present, now_ms, retention_ms),
        holds: expiry.current.metadata.position(app),
    })
}

/// The files under table `name`'s `metadata/` and `_compacted/`, relative to the table.
async fn listing(sink: &Sink, name: &str) -> Result<BTreeMap<String, Present>, SinkError> {
    let mut present = BTreeMap::new();
    for folder in ["metadata", COMPACTED] {
        for (file, size, modified_ms) in sink
            .list_dated(&Path::from(format!("{name}/{folder}")))
            .await?
        {
            present.insert(format!("{folder}/{file}"), Present { size, modified_ms });
        }
    }
    Ok(present)
}

/// Plan the vacuum of the table at `root` (its location, ending in `/`) after `expiry`, whose
/// folders hold `present` (paths relative to the table). No IO.
pub fn plan(
    root: &str,
    expiry: &Expiry,
    present: &BTreeMap<String, Present>,
    now_ms: i64,
    retention_ms: i64,
) -> Plan {
    let (cutoff, orphan_cutoff) = cutoffs(now_ms, retention_ms);
    let inside = |uri: &str| uri.strip_prefix(root).map(str::to_owned);
    let size = |uri: &str, relative: &str| {
        expiry
            .sizes
            .get(uri)
            .copied()
            .or_else(|| present.get(relative).map(|p| p.size))
            .unwrap_or_default()
    };
    let mut plan = Plan::default();
    let mut deleted = BTreeSet::new();
    let gone = &expiry.gone;
    for uri in gone
        .data_files
        .iter()
        .chain(&gone.manifests)
        .chain(&gone.manifest_lists)
    {
        if let Some(relative) = inside(uri)
            && deleted.insert(relative.clone())
        {
            plan.delete.push((relative.clone(), size(uri, &relative)));
        }
    }
    // Metadata files the log no longer names, older than the current one and the retention.
    let metadata = expiry.next.as_ref().unwrap_or(&expiry.current.metadata);
    let logged: BTreeSet<String> = metadata
        .metadata_log
        .iter()
        .filter_map(|e| inside(&e.metadata_file))
        .collect();
    let newest = sequence_of(&expiry.current.location).unwrap_or_default();
    for (relative, file) in present {
        let old_metadata = relative.ends_with(".metadata.json")
            && sequence_of(relative).is_some_and(|n| n < newest)
            && !logged.contains(relative)
            && file.modified_ms <= cutoff;
        if old_metadata && deleted.insert(relative.clone()) {
            plan.delete.push((relative.clone(), file.size));
        }
    }
    // What stopped commits and compactions left.
    let mut orphans = 0;
    for (relative, file) in present {
        let leftover = (relative.starts_with(&format!("{COMPACTED}/"))
            || relative.ends_with(".avro"))
            && !expiry.referenced.contains(&format!("{root}{relative}"))
            && file.modified_ms <= orphan_cutoff;
        if leftover && deleted.insert(relative.clone()) {
            plan.delete.push((relative.clone(), file.size));
            orphans += 1;
        }
    }
    plan.orphans = orphans;
    for uri in &expiry.waiting {
        if !gone.data_files.contains(uri) {
            plan.waiting += 1;
            plan.waiting_bytes += expiry.sizes.get(uri).copied().unwrap_or_default();
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;
    use parquet::file::properties::WriterProperties;

    use super::super::compact::compact_table;
    use super::super::table::tests::land;
    use super::*;

    fn names(plan: &Plan) -> Vec<&str> {
        let mut names: Vec<&str> = plan.delete.iter().map(|(p, _)| p.as_str()).collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_dry_run_changes_nothing_and_the_expiry_leaves_what_the_compaction_replaced() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        let table = Table::new(sink.clone(), "t");
        for (i, name) in ["f1", "f2"].into_iter().enumerate() {
            let file = land(&sink, "t", name, i as i32 * 2, 2).await;
            table.publish("app", i as u64 + 1, &[file]).await.unwrap();
        }
        let properties = WriterProperties::default();
        let compacted = compact_table(&sink, None, "t", 1 << 20, &properties)
            .await
            .unwrap();
        assert_eq!(
            (compacted.replaced, compacted.written, compacted.rows),
            (2, 1, 4)
        );
        assert_eq!(compacted.version, Some(3));
        let f3 = land(&sink, "t", "f3", 4, 1).await;
        table.publish("app", 3, &[f3]).await.unwrap();
        let later = crate::clock::unix_micros() / 1000 + 60_000;

        let Vacuumable::Plan { plan, holds } = vacuumable(&sink, None, "t", "app", later, 0, false)
            .await
            .unwrap()
        else {
            panic!("left alone")
        };
        assert_eq!(holds, Some(3));
        let data: Vec<&str> = names(&plan)
            .into_iter()
            .filter(|p| p.ends_with(".parquet"))
            .collect();
        assert_eq!(data, ["f1.parquet", "f2.parquet"]);
        assert!(
            names(&plan).iter().any(|p| p.ends_with(".avro")),
            "{plan:?}"
        );
        assert_eq!(plan.orphans, 0);
        let before = table.load().await.unwrap().unwrap();
        assert_eq!(
            before.metadata.snapshots.len(),
            4,
            "a dry run commits nothing"
        );

        let Vacuumable::Plan { plan: done, .. } =
            vacuumable(&sink, None, "t", "app", later, 0, true)
                .await
                .unwrap()
        else {
            panic!("left alone")
        };
        assert_eq!(names(&done), names(&plan));
        let after = table.load().await.unwrap().unwrap();
        assert_eq!(
            after.metadata.snapshots.len(),
            1,
            "only the pipeline's newest is kept"
        );
        assert_eq!(after.metadata.position("app"), Some(3));
        let live = table
            .live_files(after.metadata.current_snapshot().unwrap())
            .await
            .unwrap();
        assert_eq!(live.iter().map(|f| f.record_count).sum::<i64>(), 5);
        // Within the retention, nothing goes and the replaced files wait.
        let f4 = land(&sink, "t", "f4", 5, 1).await;
        table.publish("app", 4, &[f4]).await.unwrap();
        let Vacuumable::Plan { plan: kept, .. } =
            vacuumable(&sink, None, "t", "app", later, 3_600_000, false)
                .await
                .unwrap()
        else {
            panic!("left alone")
        };
        assert!(kept.delete.is_empty(), "{kept:?}");
    }
}
