//! Which of a table's data files `tributary vacuum` deletes. No IO.
//!
//! A file goes when a commit removed it (a compaction replaced it, a current-state table
//! rewrote it, a new version of the table dropped it), no later commit added it again, and the
//! removal is older than the retention: a reader of a version from within the retention still
//! finds every file it names. A file under `_compacted/` that no commit ever named is what a
//! compaction left when it stopped before committing; it goes once it is older than the
//! retention and a day, so a compaction still running keeps its files.
//!
//! Nothing else is deleted. A data file at a table's root that no commit names belongs to a
//! flush the table does not hold yet (its entry is being published, or a start will catch up),
//! or to a flush that never committed, which recovery removes by its intent.

use std::collections::BTreeMap;

use super::state::TableState;
use crate::lake::tables::tend::{COMPACTED, Plan, Present, cutoffs};

/// Plan the vacuum of a table read up to its latest version (`state`), whose folder holds
/// `present` (paths relative to the table), at `now_ms`, keeping removals younger than
/// `retention_ms`.
pub fn plan(
    state: &TableState,
    present: &BTreeMap<String, Present>,
    now_ms: i64,
    retention_ms: i64,
) -> Plan {
    let (cutoff, orphan_cutoff) = cutoffs(now_ms, retention_ms);
    let mut plan = Plan::default();
    let mut orphans = Vec::new();
    for (path, file) in present {
        if state.files.contains_key(path) {
            continue;
        }
        match state.tombstones.get(path) {
            Some(removed) => {
                let at = removed.deletion_timestamp.unwrap_or(file.modified_ms);
                if at <= cutoff {
                    plan.delete.push((path.clone(), file.size));
                } else {
                    plan.waiting += 1;
                    plan.waiting_bytes += file.size;
                }
            }
            None if path.starts_with(&format!("{COMPACTED}/"))
                && file.modified_ms <= orphan_cutoff =>
            {
                orphans.push((path.clone(), file.size));
            }
            None => {}
        }
    }
    plan.orphans = orphans.len();
    plan.delete.extend(orphans);
    plan
}

#[cfg(test)]
mod tests {
    use super::super::actions::{Action, Add, Remove};
    use super::*;
    use crate::lake::tables::tend::DAY_MS;

    fn add(path: &str) -> Action {
        Action::Add(Add {
            path: path.into(),
            partition_values: BTreeMap::new(),
            size: 10,
            modification_time: 0,
            data_change: true,
            stats: None,
        })
    }

    fn remove(path: &str, at: i64) -> Action {
        Action::Remove(Remove {
            path: path.into(),
            deletion_timestamp: Some(at),
            data_change: false,
            size: Some(10),
        })
    }

    fn present(paths: &[(&str, i64)]) -> BTreeMap<String, Present> {
        paths
            .iter()
            .map(|(p, modified_ms)| {
                let file = Present {
                    size: 10,
                    modified_ms: *modified_ms,
                };
                ((*p).to_owned(), file)
            })
            .collect()
    }

    #[test]
    fn removed_files_past_the_retention_go_and_the_rest_stay() {
        let mut state = TableState::default();
        state
            .apply(
                0,
                vec![add("a.parquet"), add("b.parquet"), add("c.parquet")],
            )
            .unwrap();
        state
            .apply(
                1,
                vec![
                    remove("a.parquet", 1_000),
                    remove("b.parquet", 1_000),
                    add("_compacted/x.parquet"),
                ],
            )
            .unwrap();
        state
            .apply(2, vec![remove("c.parquet", 9_000), add("b.parquet")])
            .unwrap();
        let files = present(&[
            ("a.parquet", 0),
            ("b.parquet", 0),
            ("c.parquet", 0),
            ("d.parquet", 0),
            ("_compacted/x.parquet", 0),
        ]);
        let plan = plan(&state, &files, 10_000, 5_000);
        // b was added again; c was removed within the retention; d is named by no commit.
        assert_eq!(plan.delete, [("a.parquet".to_owned(), 10)]);
        assert_eq!((plan.waiting, plan.waiting_bytes, plan.orphans), (1, 10, 0));
        let none_kept = super::plan(&state, &files, 10_000, 0);
        assert_eq!(none_kept.delete.len(), 2);
    }

    #[test]
    fn a_compactions_uncommitted_files_go_only_after_a_day() {
        let mut state = TableState::default();
        state.apply(0, vec![add("a.parquet")]).unwrap();
        let now = 10 * DAY_MS;
        let files = present(&[
            ("_compacted/old.parquet", now - DAY_MS - 1),
            ("_compacted/new.parquet", now - 1_000),
            ("e.parquet", 0),
        ]);
        let plan = plan(&state, &files, now, 0);
        assert_eq!(plan.delete, [("_compacted/old.parquet".to_owned(), 10)]);
        assert_eq!(plan.orphans, 1);
    }
}
