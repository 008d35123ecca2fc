//! Compaction: which small files of a table are rewritten together, the batches of files
//! written under older schemas fitted to the rewritten file's, and the commit that swaps
//! them. No IO (`table::compact` reads, writes and commits).
//!
//! A streaming pipeline leaves one file per output per flush. Compaction packs files smaller
//! than the target size into groups of about that size, oldest first, and rewrites each group
//! as one file. The commit removes the old files and adds the new ones, all with
//! `dataChange = false`: the table's rows do not change, so a streaming reader of the table
//! skips the commit, and the pipeline's `txn` is not touched.

use super::actions::{Action, Add, Remove};

pub use crate::lake::tables::keyed::{fit, merged_schema};

/// Groups of live files to rewrite, each into one file: files below `target` bytes, oldest
/// first (by modification time, then path), cut when a group reaches `target`. A group of one
/// file is left alone: rewriting it would gain nothing.
pub fn plan<'a>(files: impl IntoIterator<Item = &'a Add>, target: u64) -> Vec<Vec<Add>> {
    // Files of one partition only are rewritten together.
    let mut partitions: std::collections::BTreeMap<_, Vec<&Add>> = Default::default();
    for add in files.into_iter().filter(|a| a.size < target) {
        partitions
            .entry(&add.partition_values)
            .or_default()
            .push(add);
    }
    let mut groups = Vec::new();
    for mut small in partitions.into_values() {
        small.sort_by(|a, b| (a.modification_time, &a.path).cmp(&(b.modification_time, &b.path)));
        groups.extend(pack(small, target));
    }
    groups
}

/// Files in the order given, cut into groups when one reaches `target` bytes; groups of one
/// file are left out (rewriting it alone would gain nothing).
pub fn pack<'a>(files: impl IntoIterator<Item = &'a Add>, target: u64) -> Vec<Vec<Add>> {
    crate::lake::tables::rewrite::pack(files.into_iter().cloned(), |a| a.size, target)
}

/// The rows a file holds, from its `numRecords` statistic.
pub fn records(add: &Add) -> Option<u64> {
    let stats: serde_json::Value = serde_json::from_str(add.stats.as_deref()?).ok()?;
    stats.get("numRecords")?.as_u64()
}

/// The commit that replaces `replaced` with `written` (paths relative to the table).
pub fn commit(replaced: &[Add], written: &[Add], target: u64, now_ms: i64) -> Vec<Action> {
    let mut actions = vec![Action::CommitInfo(serde_json::json!({
        "timestamp": now_ms,
        "operation": "OPTIMIZE",
        "operationParameters": { "targetSize": target.to_string() },
        "isBlindAppend": false,
        "engineInfo": format!("tributary {}", env!("CARGO_PKG_VERSION")),
    }))];
    for old in replaced {
        actions.push(Action::Remove(Remove {
            path: old.path.clone(),
            deletion_timestamp: Some(now_ms),
            data_change: false,
            size: Some(old.size),
        }));
    }
    for new in written {
        actions.push(Action::Add(Add {
            data_change: false,
            ..new.clone()
        }));
    }
    actions
}

#[cfg(test)]
mod tests {

    use super::*;

    fn add(path: &str, size: u64, time: i64) -> Add {
        Add {
            path: path.into(),
            partition_values: Default::default(),
            size,
            modification_time: time,
            data_change: true,
            stats: Some(r#"{"numRecords":3}"#.into()),
        }
    }

    #[test]
    fn small_files_are_packed_oldest_first_into_groups_of_the_target_and_a_lone_one_is_left() {
        let files = [
            add("e", 40, 5),
            add("big", 500, 1),
            add("a", 40, 1),
            add("b", 40, 2),
            add("c", 40, 3),
            add("d", 40, 4),
        ];
        let groups: Vec<Vec<String>> = plan(&files, 100)
            .iter()
            .map(|g| g.iter().map(|a| a.path.clone()).collect())
            .collect();
        // a+b+c reach the target; d+e are a group; "big" is at the target already.
        assert_eq!(groups, [vec!["a", "b", "c"], vec!["d", "e"]]);
        assert!(
            plan(&files[..2], 100).is_empty(),
            "one small file is left alone"
        );
        assert_eq!(records(&files[0]), Some(3));
    }

    #[test]
    fn the_commit_removes_and_adds_without_a_data_change() {
        let old = [add("a", 40, 1), add("b", 40, 2)];
        let new = add("_compacted/x.parquet", 70, 9);
        let actions = commit(&old, std::slice::from_ref(&new), 100, 9);
        assert!(matches!(&actions[0], Action::CommitInfo(c) if c["operation"] == "OPTIMIZE"));
        let removes: Vec<&Remove> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Remove(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(removes.len(), 2);
        assert!(
            removes
                .iter()
                .all(|r| !r.data_change && r.deletion_timestamp == Some(9))
        );
        assert!(matches!(&actions[3], Action::Add(a) if !a.data_change && a.path == new.path));
    }
}
