//! What a Delta current-state table adds to the rows every format keeps
//! ([`crate::lake::tables::keyed`]): its files' key bounds in their `stats`, its key columns
//! in its schema, and how `tributary compact` groups its files by key. No IO.

use super::actions::Add;

pub use crate::lake::tables::keyed::*;

/// The bounds `add`'s statistics give the key columns `names`.
pub fn bounds(add: &Add, names: &[String]) -> Bounds {
    let stats: Option<serde_json::Value> = add
        .stats
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok());
    let bound = |which: &str, name: &str| -> Option<Part> {
        let value = stats.as_ref()?.get(which)?.get(name)?;
        match value {
            serde_json::Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .map(Part::Int),
            serde_json::Value::String(s) => Some(Part::Text(s.clone())),
            _ => None,
        }
    };
    Bounds::new(
        names
            .iter()
            .map(|n| Some((bound("minValues", n)?, bound("maxValues", n)?)))
            .collect(),
    )
}

/// The key columns of a current-state table, as its schema marks them.
pub fn key_columns(schema: &super::schema::StructType) -> Vec<String> {
    schema
        .fields
        .iter()
        .filter(|f| f.metadata.get(KEY_FIELD).and_then(|v| v.as_str()) == Some("true"))
        .map(|f| f.name.clone())
        .collect()
}

/// Groups of a current-state table's files to rewrite together, each into files sorted by
/// key: files below `target` bytes in the order of their first key column's lower bound
/// (files without one last), cut when a group reaches `target`, so a group holds neighbouring
/// keys and its files' bounds stay narrow. A group of one file is left alone.
pub fn plan_compaction<'a>(
    files: impl IntoIterator<Item = &'a Add>,
    keys: &[String],
    target: u64,
) -> Vec<Vec<Add>> {
    let mut small: Vec<(Option<Part>, &Add)> = files
        .into_iter()
        .filter(|a| a.size < target)
        .map(|a| (bounds(a, keys).lower(), a))
        .collect();
    small.sort_by(|(a, x), (b, y)| (a.is_none(), a, &x.path).cmp(&(b.is_none(), b, &y.path)));
    super::compact::pack(small.into_iter().map(|(_, add)| add), target)
}

/// A file's `stats`: its row count and, for each key column of an integer or text type, the
/// least and greatest value (text longer than a bound is given none).
pub fn stats<'k>(names: &[String], keys: impl IntoIterator<Item = &'k Key>) -> String {
    stats_json(names, &KeyStats::of(names.len(), keys))
}

/// `stats` as a Delta file's statistics spell them.
pub fn stats_json(names: &[String], stats: &KeyStats) -> String {
    let json = |p: &Part| match p {
        Part::Int(v) => serde_json::json!(*v as i64),
        Part::Text(t) => serde_json::json!(t),
        _ => serde_json::Value::Null,
    };
    let (mut min, mut max, mut null_count) = (
        serde_json::Map::new(),
        serde_json::Map::new(),
        serde_json::Map::new(),
    );
    for (c, name) in names.iter().enumerate() {
        null_count.insert(name.clone(), serde_json::json!(stats.nulls[c]));
        if let Some((lo, hi)) = &stats.bounds[c] {
            min.insert(name.clone(), json(lo));
            max.insert(name.clone(), json(hi));
        }
    }
    serde_json::json!({
        "numRecords": stats.rows,
        "minValues": min,
        "maxValues": max,
        "nullCount": null_count,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn k(v: i128) -> Key {
        vec![Part::Int(v)]
    }

    #[test]
    fn bounds_from_statistics_prune_the_files_a_key_cannot_be_in() {
        let names = vec!["id".to_owned(), "name".to_owned()];
        let keys = [
            vec![Part::Int(10), Part::Text("b".into())],
            vec![Part::Int(20), Part::Text("a".into())],
            vec![Part::Int(15), Part::Null],
        ];
        let stats = stats(&names, keys.iter());
        let value: serde_json::Value = serde_json::from_str(&stats).unwrap();
        assert_eq!(value["numRecords"], 3);
        assert_eq!(value["minValues"]["id"], 10);
        assert_eq!(value["maxValues"]["name"], "b");
        assert_eq!(value["nullCount"]["name"], 1);
        let add = Add {
            path: "f.parquet".into(),
            partition_values: BTreeMap::new(),
            size: 1,
            modification_time: 0,
            data_change: true,
            stats: Some(stats),
        };
        let bounded = bounds(&add, &names);
        assert!(bounded.may_hold(&vec![Part::Int(12), Part::Text("a".into())]));
        assert!(!bounded.may_hold(&vec![Part::Int(21), Part::Text("a".into())]));
        let far: BTreeSet<Key> = [
            vec![Part::Int(1), Part::Text("a".into())],
            vec![Part::Int(30), Part::Text("a".into())],
        ]
        .into();
        assert!(!bounded.may_hold_any(&far));
        // A file without statistics may hold anything.
        let bare = bounds(&Add { stats: None, ..add }, &names);
        assert!(bare.may_hold_any(&far));
    }

    #[test]
    fn compaction_groups_small_files_by_their_keys() {
        let names = vec!["id".to_owned()];
        let file = |path: &str, size: u64, ids: Option<[i128; 2]>| Add {
            path: path.into(),
            partition_values: BTreeMap::new(),
            size,
            modification_time: 0,
            data_change: true,
            stats: ids.map(|ids| stats(&names, ids.map(k).iter())),
        };
        let files = [
            file("c", 10, Some([200, 300])),
            file("a", 10, Some([1, 100])),
            file("big", 1000, Some([101, 199])),
            file("d", 10, None),
            file("b", 10, Some([150, 160])),
        ];
        let groups = plan_compaction(&files, &names, 25);
        let paths: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.iter().map(|a| a.path.as_str()).collect())
            .collect();
        assert_eq!(
            paths,
            [vec!["a", "b", "c"]],
            "by key; d left alone, big too"
        );
    }
}
