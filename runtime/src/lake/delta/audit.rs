//! A table's log held against the commit log (`tributary verify`): no missing version, no
//! `txn` version twice, each version adding exactly its entry's files of the output, every
//! file a reader reads present. No IO.

use std::collections::{BTreeMap, BTreeSet};

/// What one version of a table's log did, as far as the audit needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub version: u64,
    /// This pipeline's `txn` version, if the commit carries one.
    pub txn: Option<u64>,
    /// Paths the commit adds with `dataChange` (relative to the table).
    pub adds: BTreeSet<String>,
}

/// What verify says of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableAudit {
    pub output: String,
    /// The latest version; `None` when the table has no log.
    pub version: Option<u64>,
    /// The latest commit entry the table holds.
    pub holds: Option<u64>,
    /// Entries with files of the output that are past what the table holds: flushes a running
    /// pipeline is still publishing (or that a stopped one left for its next start).
    pub behind: Vec<u64>,
    /// Defects, one sentence each.
    pub problems: Vec<String>,
}

/// Audit `output`'s table: `listed` are the versions whose commit files exist, `read` what the
/// contiguous versions from 0 did, `live` the files a reader of the latest version reads,
/// `present` the output's data files in the sink, `entries` each commit entry with files of
/// the output and those files (relative to the table).
pub fn audit(
    output: &str,
    listed: &[u64],
    read: &[Version],
    live: &BTreeSet<String>,
    present: &BTreeSet<String>,
    entries: &BTreeMap<u64, BTreeSet<String>>,
) -> TableAudit {
    let latest = listed.iter().max().copied();
    let mut problems = missing_versions(listed);
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    let mut holds = None;
    for v in read {
        let Some(txn) = v.txn else {
            continue;
        };
        if let Some(first) = seen.insert(txn, v.version) {
            problems.push(format!(
                "commit entry {txn} is in versions {first} and {} (a txn version written twice)",
                v.version
            ));
            continue;
        }
        if holds.is_some_and(|h| txn < h) {
            problems.push(format!(
                "version {} holds commit entry {txn} after entry {}",
                v.version,
                holds.unwrap_or_default()
            ));
        }
        holds = holds.max(Some(txn));
        match entries.get(&txn) {
            None => problems.push(format!(
                "version {} holds commit entry {txn}, which has no files of {output}",
                v.version
            )),
            Some(files) if *files != v.adds => problems.push(format!(
                "version {} adds {} files for commit entry {txn}, which names {} other ones",
                v.version,
                v.adds.len(),
                files.symmetric_difference(&v.adds).count()
            )),
            Some(_) => {}
        }
    }
    let mut behind = Vec::new();
    for &sequence in entries.keys() {
        if seen.contains_key(&sequence) {
            continue;
        }
        if holds.is_some_and(|h| sequence < h) {
            problems.push(format!(
                "commit entry {sequence} is not in the table, though later entries are"
            ));
        } else {
            behind.push(sequence);
        }
    }
    problems.extend(missing_files(live, present, latest));
    TableAudit {
        output: output.to_owned(),
        version: latest,
        holds,
        behind,
        problems,
    }
}

/// Audit `output`'s current-state table (`table`): no missing version, its `txn` versions
/// rising, each an entry with files of the output (the versions that build the table from
/// the change log hold the entry the change log held then), every file a reader reads
/// present; `entries` are the entries with files of the output.
pub fn audit_mirror(
    table: &str,
    listed: &[u64],
    read: &[Version],
    live: &BTreeSet<String>,
    present: &BTreeSet<String>,
    entries: &BTreeSet<u64>,
) -> TableAudit {
    let latest = listed.iter().max().copied();
    let mut problems = missing_versions(listed);
    let mut holds: Option<u64> = None;
    for v in read {
        let Some(txn) = v.txn else {
            continue;
        };
        if holds.is_some_and(|h| txn <= h) {
            problems.push(format!(
                "version {} holds commit entry {txn} after entry {} (the entries of a current-state table rise)",
                v.version,
                holds.unwrap_or_default()
            ));
        }
        if !entries.contains(&txn) {
            problems.push(format!(
                "version {} holds commit entry {txn}, which has no files of its output",
                v.version
            ));
        }
        holds = holds.max(Some(txn));
    }
    let behind = entries
        .iter()
        .copied()
        .filter(|&e| holds.is_none_or(|h| e > h))
        .collect();
    problems.extend(missing_files(live, present, latest));
    TableAudit {
        output: table.to_owned(),
        version: latest,
        holds,
        behind,
        problems,
    }
}

/// The versions below the latest whose commit files are gone.
fn missing_versions(listed: &[u64]) -> Vec<String> {
    let Some(&latest) = listed.iter().max() else {
        return Vec::new();
    };
    let have: BTreeSet<u64> = listed.iter().copied().collect();
    let missing: Vec<u64> = (0..=latest).filter(|v| !have.contains(v)).collect();
    match missing.is_empty() {
        true => Vec::new(),
        false => vec![format!("versions {missing:?} of its log are missing")],
    }
}

/// The files a reader of the latest version reads that the sink lacks.
fn missing_files(
    live: &BTreeSet<String>,
    present: &BTreeSet<String>,
    latest: Option<u64>,
) -> Vec<String> {
    live.difference(present)
        .map(|path| {
            format!(
                "{path}, which a reader of version {} reads, is not in the sink",
                latest.unwrap_or_default()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&str]) -> BTreeSet<String> {
        paths.iter().map(|p| (*p).to_owned()).collect()
    }

    fn version(version: u64, txn: u64, adds: &[&str]) -> Version {
        Version {
            version,
            txn: Some(txn),
            adds: set(adds),
        }
    }

    #[test]
    fn a_table_that_follows_the_log_is_intact_and_one_behind_is_not_a_defect() {
        let entries = BTreeMap::from([(2, set(&["a"])), (4, set(&["b", "c"])), (5, set(&["d"]))]);
        let read = [version(0, 2, &["a"]), version(1, 4, &["b", "c"])];
        let files = set(&["a", "b", "c"]);
        let audit = audit("public.t", &[0, 1], &read, &files, &files, &entries);
        assert_eq!(audit.problems, Vec::<String>::new());
        assert_eq!((audit.version, audit.holds), (Some(1), Some(4)));
        assert_eq!(audit.behind, [5]);
    }

    #[test]
    fn gaps_doubled_entries_wrong_files_skipped_entries_and_missing_files_are_named() {
        let entries = BTreeMap::from([(2, set(&["a"])), (3, set(&["x"])), (4, set(&["b"]))]);
        let read = [
            version(0, 2, &["a"]),
            version(1, 2, &["a"]),
            version(2, 4, &["b", "z"]),
        ];
        let live = set(&["a", "b", "z"]);
        let audit = audit(
            "public.t",
            &[0, 1, 2, 4],
            &read,
            &live,
            &set(&["a", "b"]),
            &entries,
        );
        let text = audit.problems.join("\n");
        assert!(
            text.contains("versions [3] of its log are missing"),
            "{text}"
        );
        assert!(
            text.contains("commit entry 2 is in versions 0 and 1"),
            "{text}"
        );
        assert!(
            text.contains("version 2 adds 2 files for commit entry 4"),
            "{text}"
        );
        assert!(
            text.contains("commit entry 3 is not in the table"),
            "{text}"
        );
        assert!(
            text.contains("z, which a reader of version 4 reads"),
            "{text}"
        );
        assert_eq!(audit.problems.len(), 5);
    }

    #[test]
    fn a_current_state_table_holds_rising_entries_of_its_output() {
        let entries = BTreeSet::from([2, 4, 5, 7]);
        let files = set(&["m1", "m2"]);
        let read = [version(0, 4, &["m1"]), version(1, 5, &["m2"])];
        let audit = audit_mirror(
            "public.t__current",
            &[0, 1],
            &read,
            &files,
            &files,
            &entries,
        );
        assert_eq!(audit.problems, Vec::<String>::new());
        assert_eq!((audit.holds, audit.behind.as_slice()), (Some(5), &[7][..]));

        let read = [
            version(0, 4, &["m1"]),
            version(1, 3, &["m2"]),
            version(2, 4, &[]),
        ];
        let audit = audit_mirror(
            "public.t__current",
            &[0, 1, 2],
            &read,
            &files,
            &set(&["m1"]),
            &entries,
        );
        let text = audit.problems.join("\n");
        assert!(
            text.contains("version 1 holds commit entry 3 after entry 4"),
            "{text}"
        );
        assert!(
            text.contains("version 1 holds commit entry 3, which has no files"),
            "{text}"
        );
        assert!(
            text.contains("version 2 holds commit entry 4 after entry 4"),
            "{text}"
        );
        assert!(
            text.contains("m2, which a reader of version 2 reads, is not in the sink"),
            "{text}"
        );
    }
}
