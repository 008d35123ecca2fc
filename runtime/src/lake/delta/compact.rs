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
    let mut groups = Vec::new();
    let mut group: Vec<Add> = Vec::new();
    let mut bytes = 0;
    for add in files {
        group.push(add.clone());
        bytes += add.size;
        if bytes >= target {
            groups.push(std::mem::take(&mut group));
            bytes = 0;
        }
    }
    groups.push(group);
    groups.retain(|g| g.len() > 1);
    groups
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
    use std::sync::Arc;

    use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StructArray};
    use arrow_schema::{DataType, Field, Fields, Schema};

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
