//! A table's versions held against the commit log (`tributary verify`), in every format: no
//! entry in two versions, the pipeline's entries rising, each version that holds one adding
//! exactly that entry's files of the output, every file a reader reads present, and, where the
//! versions are numbered files (a Delta log), none of them missing. No IO: each format reads
//! its table into a [`Log`].

use std::collections::{BTreeMap, BTreeSet};

pub use super::tend::TableAudit;

/// What one version of a table did, as far as the audit needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// A Delta commit's version; an Iceberg snapshot's sequence number.
    pub version: u64,
    /// The pipeline's position the version carries (Delta's `txn` version, an Iceberg
    /// snapshot's `tributary.sequence`), if it carries one.
    pub txn: Option<u64>,
    /// Paths the version adds with its data (relative to the table).
    pub adds: BTreeSet<String>,
}

/// Where an audit starts when a table's first versions are gone: a Delta log cleaned up before
/// a checkpoint (other Delta writers do that), whose version and pipeline's `txn` this is; an
/// Iceberg table whose older snapshots expired, the oldest kept one's sequence number and the
/// entry before the first it holds. The entries up to `txn` are taken as held; what each
/// version before did is no longer there to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Base {
    pub version: u64,
    pub txn: Option<u64>,
}

/// How a format keeps its versions, which decides what an audit checks of them.
#[derive(Debug, Clone, Copy)]
pub enum Versions<'a> {
    /// Numbered commit files (a Delta log), these the ones that exist: every version from the
    /// first to the latest must be there.
    Files(&'a [u64]),
    /// Snapshots (an Iceberg table's), named by their sequence numbers, which have no file of
    /// their own to miss; this is the current snapshot's.
    Snapshots(Option<u64>),
}

/// A table's versions as an audit read them.
#[derive(Debug, Clone, Copy)]
pub struct Log<'a> {
    pub versions: Versions<'a>,
    /// What each version from the first (or from `base`) did, oldest first.
    pub read: &'a [Version],
    pub base: Option<Base>,
}

impl Log<'_> {
    /// The latest version.
    fn latest(&self) -> Option<u64> {
        match self.versions {
            Versions::Files(listed) => listed.iter().max().copied(),
            Versions::Snapshots(current) => current,
        }
    }

    /// The numbered versions missing, as a problem.
    fn gaps(&self) -> Vec<String> {
        match self.versions {
            Versions::Files(listed) => {
                missing_versions(listed, self.base.map_or(0, |b| b.version + 1))
            }
            Versions::Snapshots(_) => Vec::new(),
        }
    }

    /// The entry the versions before the audit's start hold, when it starts from a base.
    fn base_txn(&self) -> Option<u64> {
        self.base.and_then(|b| b.txn)
    }

    /// Version `v` holds entry `txn`, which the versions before the base held.
    fn held_before(&self, v: u64, txn: u64, base: Base) -> String {
        match self.versions {
            Versions::Files(_) => format!(
                "version {v} holds commit entry {txn}, which the checkpoint at version {} holds already",
                base.version
            ),
            Versions::Snapshots(_) => format!(
                "version {v} holds commit entry {txn}, which the table held before version {} (its older snapshots expired)",
                base.version
            ),
        }
    }

    /// Entry `txn` is in versions `first` and `then`.
    fn twice(&self, txn: u64, first: u64, then: u64) -> String {
        let what = match self.versions {
            Versions::Files(_) => "a txn version written twice",
            Versions::Snapshots(_) => "a flush published twice",
        };
        format!("commit entry {txn} is in versions {first} and {then} ({what})")
    }
}

/// Audit `output`'s table: `log` is its log, `live` the files a reader of the latest version
/// reads, `present` the output's data files in the sink, `entries` each commit entry with
/// files of the output and those files (relative to the table).
pub fn audit(
    output: &str,
    log: Log,
    live: &BTreeSet<String>,
    present: &BTreeSet<String>,
    entries: &BTreeMap<u64, BTreeSet<String>>,
) -> TableAudit {
    let latest = log.latest();
    let mut problems = log.gaps();
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    let mut holds = log.base_txn();
    for v in log.read {
        let Some(txn) = v.txn else {
            continue;
        };
        if let Some(base) = log.base.filter(|b| b.txn.is_some_and(|t| txn <= t)) {
            problems.push(log.held_before(v.version, txn, base));
            continue;
        }
        if let Some(first) = seen.insert(txn, v.version) {
            problems.push(log.twice(txn, first, v.version));
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
        if seen.contains_key(&sequence) || log.base_txn().is_some_and(|t| sequence <= t) {
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
        base: log.base.map(|b| b.version),
    }
}

/// Audit `output`'s current-state table (`table`): no missing version, the entries its
/// versions hold rising, each an entry with files of the output (the versions that build the table from
/// the change log hold the entry the change log held then), every file a reader reads
/// present; `entries` are the entries with files of the output.
pub fn audit_mirror(
    table: &str,
    log: Log,
    live: &BTreeSet<String>,
    present: &BTreeSet<String>,
    entries: &BTreeSet<u64>,
) -> TableAudit {
    let latest = log.latest();
    let mut problems = log.gaps();
    let mut holds: Option<u64> = log.base_txn();
    for v in log.read {
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
        base: log.base.map(|b| b.version),
    }
}

/// The versions from `first` to the latest whose commit files are gone.
fn missing_versions(listed: &[u64], first: u64) -> Vec<String> {
    let Some(&latest) = listed.iter().max() else {
        return Vec::new();
    };
    let have: BTreeSet<u64> = listed.iter().copied().collect();
    let missing: Vec<u64> = (first..=latest).filter(|v| !have.contains(v)).collect();
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

    fn log<'a>(listed: &'a [u64], read: &'a [Version]) -> Log<'a> {
        Log {
            versions: Versions::Files(listed),
            read,
            base: None,
        }
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
        let audit = audit("public.t", log(&[0, 1], &read), &files, &files, &entries);
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
            log(&[0, 1, 2, 4], &read),
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
            log(&[0, 1], &read),
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
            log(&[0, 1, 2], &read),
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

    #[test]
    fn a_log_cleaned_up_before_a_checkpoint_is_audited_from_the_checkpoint() {
        let entries = BTreeMap::from([
            (2, set(&["a"])),
            (4, set(&["b"])),
            (6, set(&["c"])),
            (8, set(&["d"])),
        ]);
        let files = set(&["a", "b", "c"]);
        // The commits up to version 10 are gone; the checkpoint at 10 holds entry 4.
        let base = Some(Base {
            version: 10,
            txn: Some(4),
        });
        let read = [version(11, 6, &["c"])];
        let cleaned = Log {
            versions: Versions::Files(&[10, 11]),
            read: &read,
            base,
        };
        let found = audit("public.t", cleaned, &files, &files, &entries);
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.holds, found.behind.as_slice()), (Some(6), &[8][..]));
        assert_eq!(found.base, Some(10));

        // A version after the checkpoint holding an entry the checkpoint holds is a doubled
        // txn; a version missing after the checkpoint is a gap.
        let read = [version(11, 4, &["b"]), version(12, 6, &["c"])];
        let doubled = Log {
            versions: Versions::Files(&[10, 11, 12, 14]),
            read: &read,
            base,
        };
        let text = audit("public.t", doubled, &files, &files, &entries)
            .problems
            .join("\n");
        assert!(
            text.contains(
                "version 11 holds commit entry 4, which the checkpoint at version 10 holds already"
            ),
            "{text}"
        );
        assert!(
            text.contains("versions [13] of its log are missing"),
            "{text}"
        );
        assert!(!text.contains("[0"), "{text}");
    }

    fn snapshots<'a>(current: u64, read: &'a [Version], base: Option<Base>) -> Log<'a> {
        Log {
            versions: Versions::Snapshots(Some(current)),
            read,
            base,
        }
    }

    #[test]
    fn snapshots_numbered_with_gaps_and_others_between_are_intact() {
        let entries = BTreeMap::from([(2, set(&["a"])), (5, set(&["b"])), (9, set(&["c"]))]);
        // Sequence numbers 1, 3 and 7: a compaction's replace (4) and another app's append
        // (6) carry no position of the pipeline's.
        let replace = Version {
            version: 4,
            txn: None,
            adds: set(&["_compacted/x"]),
        };
        let read = [version(1, 2, &["a"]), version(3, 5, &["b"]), replace];
        let files = set(&["_compacted/x"]);
        let found = audit(
            "public.t",
            snapshots(7, &read, None),
            &files,
            &files,
            &entries,
        );
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.version, found.holds), (Some(7), Some(5)));
        assert_eq!((found.behind.as_slice(), found.base), (&[9][..], None));
    }

    #[test]
    fn snapshots_after_an_expiry_are_audited_from_the_oldest_kept() {
        let entries = BTreeMap::from([
            (2, set(&["a"])),
            (4, set(&["b"])),
            (6, set(&["c"])),
            (8, set(&["d"])),
        ]);
        let files = set(&["b", "c", "d"]);
        // The snapshots before sequence number 12 expired; the oldest kept holds entry 6, so
        // the entries before it are taken as held.
        let base = Some(Base {
            version: 12,
            txn: Some(5),
        });
        let read = [version(12, 6, &["c"]), version(13, 8, &["d"])];
        let found = audit(
            "public.t",
            snapshots(13, &read, base),
            &files,
            &files,
            &entries,
        );
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.holds, found.base), (Some(8), Some(12)));
        assert!(found.behind.is_empty());

        // No gap check: the kept snapshots' numbers skip freely; one after them holding an
        // entry before the first kept one's is named.
        let read = [version(12, 6, &["c"]), version(20, 4, &["b"])];
        let text = audit(
            "public.t",
            snapshots(20, &read, base),
            &files,
            &files,
            &entries,
        )
        .problems
        .join("\n");
        assert!(
            text.contains(
                "version 20 holds commit entry 4, which the table held before version 12 (its older snapshots expired)"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn a_flush_in_two_snapshots_and_a_snapshot_adding_other_files_are_named() {
        let entries = BTreeMap::from([(2, set(&["a"])), (3, set(&["b"])), (4, set(&["c"]))]);
        let read = [
            version(1, 2, &["a"]),
            version(2, 2, &["a"]),
            version(3, 3, &["b", "stray"]),
            version(4, 4, &["other"]),
        ];
        let live = set(&["a", "b", "stray", "other"]);
        let found = audit(
            "public.t",
            snapshots(4, &read, None),
            &live,
            &live,
            &entries,
        );
        let text = found.problems.join("\n");
        assert!(
            text.contains("commit entry 2 is in versions 1 and 2 (a flush published twice)"),
            "{text}"
        );
        assert!(
            text.contains("version 3 adds 2 files for commit entry 3, which names 1 other ones"),
            "{text}"
        );
        assert!(
            text.contains("version 4 adds 1 files for commit entry 4, which names 2 other ones"),
            "{text}"
        );
        assert_eq!(found.problems.len(), 3, "{text}");
        assert_eq!(found.holds, Some(4));
    }

    #[test]
    fn a_current_state_table_of_snapshots_is_audited_from_its_oldest_kept() {
        let entries = BTreeSet::from([2, 4, 5, 7]);
        let files = set(&["m1", "m2"]);
        let base = Some(Base {
            version: 30,
            txn: Some(3),
        });
        let read = [version(30, 4, &["m1"]), version(35, 5, &["m2"])];
        let found = audit_mirror(
            "public.t__current",
            snapshots(35, &read, base),
            &files,
            &files,
            &entries,
        );
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!((found.holds, found.behind.as_slice()), (Some(5), &[7][..]));
        assert_eq!((found.version, found.base), (Some(35), Some(30)));
    }
}
