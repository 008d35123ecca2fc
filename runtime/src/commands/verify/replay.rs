//! Replaying landed changes into a table's state, and comparing it with the source's. No IO.
//!
//! A table's landed changes are sorted by identity `(_commit_lsn, _seq, _sub)`, the order the
//! source applied them in. An identity seen twice is a duplicate: reported, and replayed
//! once. Only changes the snapshot holds are replayed ([`Cutoff`]): an insert or an
//! update makes its row the key's version (an update whose old image carries another key
//! moves the row), a delete removes the key, a truncate empties the table. Tables without a
//! key are multisets of row digests. Cells an update left as unchanged TOAST take the digest
//! of the same cell in the key's version before.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::digest::{Digest, UNKNOWN_CELL};
use crate::source::trigger::visible::SnapshotXids;
use crate::stream::change::Op;

/// Digests are uniformly distributed already: a map keyed by them needs no hashing of its
/// own, only the bits folded to 64.
#[derive(Debug, Clone, Copy, Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u128(&mut self, digest: u128) {
        self.0 ^= (digest as u64) ^ ((digest >> 64) as u64);
    }
}

/// A map keyed by digests.
pub type DigestMap<V> = HashMap<Digest, V, BuildHasherDefault<DigestHasher>>;
/// A set of digests.
pub type DigestSet = HashSet<Digest, BuildHasherDefault<DigestHasher>>;

/// A change's identity: the order of all changes, and what exactly-once promises is unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeId {
    pub commit_lsn: u64,
    pub seq: u32,
    pub sub: u32,
}

/// Where a landed row is: a committed file (by its position in the list of committed files)
/// and the row's position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowAt {
    pub file: u32,
    pub row: u32,
}

/// One landed change of a table, as digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub id: ChangeId,
    pub op: Op,
    /// The transaction it came from (`_xid`): pgoutput's 32 bits.
    pub xid: u32,
    /// The key of the row an insert or update writes or a delete removes; for a table
    /// without a key, the digest of that whole row.
    pub key: Digest,
    /// An update's old image, when [`has_old`](Self::has_old): the row it replaces.
    pub old_key: Digest,
    pub has_old: bool,
    /// The digest of the row it writes, leaving out its unchanged TOAST cells.
    pub row: Digest,
    pub at: RowAt,
    /// Read only for a table whose lake holds unchanged TOAST values: the digest of each
    /// column's cell that may be one ([`Shape::toast`](super::digest::Shape::toast) order),
    /// `None` where it is.
    pub toast: Option<Box<[Option<Digest>]>>,
}

impl Landed {
    /// The key an update replaces: its old image's, or its own.
    fn replaces(&self) -> Digest {
        if self.has_old { self.old_key } else { self.key }
    }
}

/// A cell filled in from an earlier version: its digest and the row that holds its value, or
/// `None` when the lake never had the value.
pub type Filled = Option<(Digest, RowAt)>;

/// A key's current row in the lake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub row: Digest,
    /// Where the change that wrote it landed.
    pub at: RowAt,
    /// The TOAST-able cells, with the rows their values come from.
    pub toast: Option<Box<[Filled]>>,
}

/// What a table holds after the replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Key to its current row.
    Keyed(DigestMap<Version>),
    /// Row digest to how many such rows, and where one of them is.
    Rows(DigestMap<(u32, RowAt)>),
}

impl State {
    pub fn rows(&self) -> u64 {
        match self {
            State::Keyed(map) => map.len() as u64,
            State::Rows(map) => map.values().map(|(n, _)| u64::from(*n)).sum(),
        }
    }
}

/// An identity that landed more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duplicate {
    pub id: ChangeId,
    pub first: RowAt,
    pub again: RowAt,
}

/// Sort `items` by identity and find the identities that occur more than once.
pub fn sort_and_find_duplicates<T>(
    items: &mut [T],
    at: impl Fn(&T) -> (ChangeId, RowAt),
) -> Vec<Duplicate> {
    items.sort_unstable_by_key(&at);
    let mut duplicates = Vec::new();
    let mut first: Option<(ChangeId, RowAt)> = None;
    for item in items.iter() {
        let (id, row) = at(item);
        match first {
            Some((seen, where_first)) if seen == id => duplicates.push(Duplicate {
                id,
                first: where_first,
                again: row,
            }),
            _ => first = Some((id, row)),
        }
    }
    duplicates
}

/// Which landed changes the source's snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cutoff {
    /// Those committed before a WAL position: a slot's snapshot.
    Before(u64),
    /// Trigger capture's: those landed at or before position `landed` (which had landed
    /// before the snapshot was taken, so it sees their transactions), a full load's rows, and
    /// each other whose transaction the snapshot sees.
    Sees { landed: u64, xids: SnapshotXids },
}

impl Cutoff {
    fn holds(&self, change: &Landed) -> bool {
        match self {
            Cutoff::Before(before) => change.id.commit_lsn < *before,
            Cutoff::Sees { landed, xids } => {
                change.id.commit_lsn <= *landed
                    || change.xid == crate::stream::load::LOAD_XID
                    || xids.sees_xid32(change.xid)
            }
        }
    }

    /// Whether no change after one it does not hold can be held (positions split the lake).
    fn ordered(&self) -> bool {
        matches!(self, Cutoff::Before(_))
    }
}

/// Replay a table's landed changes that `cutoff` holds. Returns the state and the duplicate
/// identities among all of them.
pub fn replay(mut changes: Vec<Landed>, cutoff: &Cutoff, keyed: bool) -> (State, Vec<Duplicate>) {
    let duplicates = sort_and_find_duplicates(&mut changes, |c| (c.id, c.at));
    let mut state = match keyed {
        true => State::Keyed(DigestMap::default()),
        false => State::Rows(DigestMap::default()),
    };
    let mut last: Option<ChangeId> = None;
    for change in changes {
        if last == Some(change.id) {
            continue;
        }
        last = Some(change.id);
        if !cutoff.holds(&change) {
            match cutoff.ordered() {
                true => break,
                false => continue,
            }
        }
        match &mut state {
            State::Keyed(map) => apply_keyed(map, change),
            State::Rows(map) => apply_rows(map, &change),
        }
    }
    (state, duplicates)
}

fn apply_keyed(map: &mut DigestMap<Version>, change: Landed) {
    match change.op {
        Op::Truncate | Op::Load => map.clear(),
        Op::Delete => {
            map.remove(&change.key);
        }
        Op::Insert | Op::Update => {
            let before = map.remove(&change.replaces());
            let (row, toast) = fill_toast(&change, before.as_ref());
            map.insert(
                change.key,
                Version {
                    row,
                    at: change.at,
                    toast,
                },
            );
        }
    }
}

/// The row's digest with its unchanged TOAST cells taken from the version before.
fn fill_toast(change: &Landed, before: Option<&Version>) -> (Digest, Option<Box<[Filled]>>) {
    let Some(cells) = &change.toast else {
        return (change.row, None);
    };
    let mut row = change.row;
    let filled = cells
        .iter()
        .enumerate()
        .map(|(j, cell)| {
            let filled = match cell {
                Some(digest) => Some((*digest, change.at)),
                None => before.and_then(|v| v.toast.as_ref()?.get(j).copied().flatten()),
            };
            if cell.is_none() {
                row = row.wrapping_add(filled.map_or(UNKNOWN_CELL, |(d, _)| d));
            }
            filled
        })
        .collect();
    (row, Some(filled))
}

fn apply_rows(map: &mut DigestMap<(u32, RowAt)>, change: &Landed) {
    let mut remove = |digest: Digest| {
        if let Some((n, _)) = map.get_mut(&digest) {
            *n -= 1;
            if *n == 0 {
                map.remove(&digest);
            }
        }
    };
    match change.op {
        Op::Truncate | Op::Load => map.clear(),
        Op::Delete => remove(change.key),
        Op::Insert | Op::Update => {
            if change.has_old {
                remove(change.old_key);
            }
            map.entry(change.key)
                .and_modify(|(n, _)| *n += 1)
                .or_insert((1, change.at));
        }
    }
}

/// The source's side of a table: key to row digest, or row digest to count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceState {
    Keyed(DigestMap<Digest>),
    Rows(DigestMap<u32>),
}

impl SourceState {
    pub fn new(keyed: bool) -> SourceState {
        match keyed {
            true => SourceState::Keyed(DigestMap::default()),
            false => SourceState::Rows(DigestMap::default()),
        }
    }

    /// Add a row; `false` when its key was there already (a key that is not unique).
    pub fn add(&mut self, key: Digest, row: Digest) -> bool {
        match self {
            SourceState::Keyed(map) => map.insert(key, row).is_none(),
            SourceState::Rows(map) => {
                *map.entry(row).or_default() += 1;
                true
            }
        }
    }

    pub fn rows(&self) -> u64 {
        match self {
            SourceState::Keyed(map) => map.len() as u64,
            SourceState::Rows(map) => map.values().map(|&n| u64::from(n)).sum(),
        }
    }

    /// How `other` (a table read as it is, like a current-state table) differs from this:
    /// `(missing, extra, changed)` keys, or rows without a key.
    pub fn differences(&self, other: &SourceState) -> (u64, u64, u64) {
        match (self, other) {
            (SourceState::Keyed(ours), SourceState::Keyed(theirs)) => {
                let missing = ours.keys().filter(|k| !theirs.contains_key(*k)).count();
                let extra = theirs.keys().filter(|k| !ours.contains_key(*k)).count();
                let changed = ours
                    .iter()
                    .filter(|(k, row)| theirs.get(*k).is_some_and(|r| r != *row))
                    .count();
                (missing as u64, extra as u64, changed as u64)
            }
            (SourceState::Rows(ours), SourceState::Rows(theirs)) => {
                let count = |map: &DigestMap<u32>, row: &Digest| map.get(row).copied().unwrap_or(0);
                let missing = ours
                    .iter()
                    .map(|(row, &n)| u64::from(n.saturating_sub(count(theirs, row))))
                    .sum();
                let extra = theirs
                    .iter()
                    .map(|(row, &n)| u64::from(n.saturating_sub(count(ours, row))))
                    .sum();
                (missing, extra, 0)
            }
            _ => (self.rows(), other.rows(), 0),
        }
    }
}

/// How a key (or, without a key, a row) differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Difference {
    /// In the source, not in the lake.
    Missing,
    /// In both, with other values.
    Changed,
    /// In the lake, not in the source.
    Extra,
}

/// One differing key picked to be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub difference: Difference,
    /// The key's digest (the row's, without a key): how the source's row is found again.
    pub key: Digest,
    /// The lake's row, unless it is missing there.
    pub lake: Option<Version>,
}

/// How a table's lake differs from its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDiff {
    pub source_rows: u64,
    pub lake_rows: u64,
    pub missing: u64,
    pub extra: u64,
    pub changed: u64,
    /// Up to `show` keys of each kind of difference, the smallest digests first: the same
    /// keys every time for the same difference.
    pub samples: Vec<Sample>,
}

impl TableDiff {
    pub fn is_equal(&self) -> bool {
        self.missing + self.extra + self.changed == 0
    }
}

/// The `show` smallest digests of a kind, kept while scanning.
struct Smallest {
    show: usize,
    heap: BinaryHeap<(Digest, Option<Version>)>,
}

impl Smallest {
    fn new(show: usize) -> Smallest {
        Smallest {
            show,
            heap: BinaryHeap::new(),
        }
    }

    fn offer(&mut self, key: Digest, lake: impl FnOnce() -> Option<Version>) {
        if self.heap.len() < self.show {
            self.heap.push((key, lake()));
        } else if self.heap.peek().is_some_and(|(top, _)| key < *top) {
            self.heap.pop();
            self.heap.push((key, lake()));
        }
    }

    fn into_samples(self, difference: Difference) -> impl Iterator<Item = Sample> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(move |(key, lake)| Sample {
                difference,
                key,
                lake,
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.row, self.at).cmp(&(other.row, other.at))
    }
}

/// Compare a table's source and lake, keeping up to `show` samples of each kind of difference.
pub fn compare(source: &SourceState, lake: &State, show: usize) -> TableDiff {
    let (mut missing, mut extra, mut changed) = (0, 0, 0);
    let mut samples = [
        Smallest::new(show),
        Smallest::new(show),
        Smallest::new(show),
    ];
    match (source, lake) {
        (SourceState::Keyed(source), State::Keyed(lake)) => {
            for (key, row) in source {
                match lake.get(key) {
                    None => {
                        missing += 1;
                        samples[0].offer(*key, || None);
                    }
                    Some(version) if version.row != *row => {
                        changed += 1;
                        samples[2].offer(*key, || Some(version.clone()));
                    }
                    Some(_) => {}
                }
            }
            for (key, version) in lake {
                if !source.contains_key(key) {
                    extra += 1;
                    samples[1].offer(*key, || Some(version.clone()));
                }
            }
        }
        (SourceState::Rows(source), State::Rows(lake)) => {
            for (row, &n) in source {
                let landed = lake.get(row).map_or(0, |(n, _)| *n);
                if n > landed {
                    missing += u64::from(n - landed);
                    samples[0].offer(*row, || None);
                }
            }
            for (row, &(n, at)) in lake {
                let there = source.get(row).copied().unwrap_or(0);
                if n > there {
                    extra += u64::from(n - there);
                    let version = Version {
                        row: *row,
                        at,
                        toast: None,
                    };
                    samples[1].offer(*row, || Some(version));
                }
            }
        }
        _ => unreachable!("both sides of a table are keyed alike"),
    }
    let [m, e, c] = samples;
    TableDiff {
        source_rows: source.rows(),
        lake_rows: lake.rows(),
        missing,
        extra,
        changed,
        samples: m
            .into_samples(Difference::Missing)
            .chain(c.into_samples(Difference::Changed))
            .chain(e.into_samples(Difference::Extra))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(commit_lsn: u64, seq: u32) -> ChangeId {
        ChangeId {
            commit_lsn,
            seq,
            sub: 0,
        }
    }

    fn at(file: u32, row: u32) -> RowAt {
        RowAt { file, row }
    }

    fn change(lsn: u64, seq: u32, op: Op, key: Digest, row: Digest) -> Landed {
        Landed {
            id: id(lsn, seq),
            op,
            xid: lsn as u32,
            key,
            old_key: 0,
            has_old: false,
            row,
            at: at(0, seq),
            toast: None,
        }
    }

    /// An update whose old image carries `old`.
    fn moved(lsn: u64, seq: u32, key: Digest, row: Digest, old: Digest) -> Landed {
        Landed {
            old_key: old,
            has_old: true,
            ..change(lsn, seq, Op::Update, key, row)
        }
    }

    fn keyed(state: &State) -> Vec<(Digest, Digest)> {
        let State::Keyed(map) = state else {
            panic!("keyed")
        };
        let mut rows: Vec<_> = map.iter().map(|(k, v)| (*k, v.row)).collect();
        rows.sort();
        rows
    }

    #[test]
    fn the_latest_version_per_key_wins_in_identity_order_whatever_the_file_order() {
        let changes = vec![
            // Out of order on purpose: files are read in log order, not identity order.
            change(20, 1, Op::Update, 1, 101),
            change(10, 0, Op::Insert, 1, 100),
            change(10, 1, Op::Insert, 2, 200),
            change(10, 2, Op::Insert, 3, 300),
            change(20, 0, Op::Delete, 3, 0),
            moved(30, 0, 5, 500, 2),
            // At or after the snapshot: not replayed.
            change(40, 0, Op::Delete, 1, 0),
        ];
        let (state, duplicates) = replay(changes, &Cutoff::Before(40), true);
        assert!(duplicates.is_empty());
        assert_eq!(keyed(&state), [(1, 101), (5, 500)]);
    }

    #[test]
    fn with_trigger_capture_the_changes_of_transactions_the_snapshot_sees_are_replayed() {
        let with_xid = |mut c: Landed, xid| {
            c.xid = xid;
            c
        };
        let changes = vec![
            // Landed before the snapshot was taken.
            with_xid(change(1, 0, Op::Insert, 1, 100), 500),
            // A load's rows.
            with_xid(
                change(2, 1, Op::Insert, 2, 200),
                crate::stream::load::LOAD_XID,
            ),
            // Landed after it: transaction 612 was running when it was taken, 604 had ended,
            // 640 began after it.
            with_xid(change(3, 0, Op::Update, 1, 101), 612),
            with_xid(change(4, 0, Op::Insert, 3, 300), 604),
            with_xid(change(5, 0, Op::Delete, 2, 0), 640),
        ];
        let cutoff = Cutoff::Sees {
            landed: 1,
            xids: SnapshotXids::parse("600:620:612").unwrap(),
        };
        let (state, _) = replay(changes, &cutoff, true);
        assert_eq!(keyed(&state), [(1, 100), (2, 200), (3, 300)]);
    }

    #[test]
    fn a_truncate_empties_the_table_and_what_follows_it_lands() {
        let changes = vec![
            change(10, 0, Op::Insert, 1, 100),
            change(10, 1, Op::Insert, 2, 200),
            change(20, 0, Op::Truncate, 0, 0),
            change(20, 1, Op::Insert, 3, 300),
        ];
        let (state, _) = replay(changes, &Cutoff::Before(u64::MAX), true);
        assert_eq!(keyed(&state), [(3, 300)]);
    }

    #[test]
    fn a_duplicate_identity_is_reported_and_replayed_once() {
        let mut again = change(10, 0, Op::Insert, 1, 100);
        again.at = at(7, 0);
        let rows = vec![
            change(10, 0, Op::Insert, 1, 100),
            change(10, 1, Op::Update, 1, 101),
            again,
        ];
        let (state, duplicates) = replay(rows, &Cutoff::Before(u64::MAX), true);
        assert_eq!(
            duplicates,
            [Duplicate {
                id: id(10, 0),
                first: at(0, 0),
                again: at(7, 0)
            }]
        );
        assert_eq!(
            keyed(&state),
            [(1, 101)],
            "the copy does not undo the update"
        );
    }

    #[test]
    fn unchanged_toast_cells_take_the_earlier_versions_value() {
        let toasted = |lsn, key, row, cell: Option<Digest>| Landed {
            toast: Some(vec![cell].into_boxed_slice()),
            ..change(lsn, 0, Op::Update, key, row)
        };
        let mut insert = toasted(10, 1, 100, Some(7));
        insert.op = Op::Insert;
        // Key 2's earlier version is not in the lake: its value is unknown.
        let changes = vec![insert, toasted(20, 1, 110, None), toasted(30, 2, 200, None)];
        let (state, _) = replay(changes, &Cutoff::Before(u64::MAX), true);
        let State::Keyed(map) = &state else { panic!() };
        assert_eq!(map[&1].row, 117, "the update's cells plus the kept one");
        assert_eq!(map[&1].toast.as_deref(), Some(&[Some((7, at(0, 0)))][..]));
        assert_eq!(map[&2].row, 200u128.wrapping_add(UNKNOWN_CELL));
        assert_eq!(map[&2].toast.as_deref(), Some(&[None][..]));
    }

    #[test]
    fn tables_without_a_key_replay_as_multisets() {
        let changes = vec![
            change(10, 0, Op::Insert, 10, 10),
            change(10, 1, Op::Insert, 10, 10),
            change(10, 2, Op::Insert, 20, 20),
            moved(20, 0, 30, 30, 10),
            change(20, 1, Op::Delete, 20, 0),
            // A row the lake never had: nothing to remove.
            change(20, 2, Op::Delete, 99, 0),
        ];
        let (state, _) = replay(changes, &Cutoff::Before(u64::MAX), false);
        let State::Rows(map) = &state else { panic!() };
        let mut counts: Vec<(Digest, u32)> = map.iter().map(|(d, (n, _))| (*d, *n)).collect();
        counts.sort();
        assert_eq!(counts, [(10, 1), (30, 1)]);
        assert_eq!(state.rows(), 2);
    }

    #[test]
    fn compare_counts_each_kind_and_samples_the_smallest_keys() {
        let mut source = SourceState::new(true);
        for (k, r) in [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)] {
            assert!(source.add(k, r));
        }
        let changes = vec![
            change(10, 0, Op::Insert, 1, 10),
            change(10, 1, Op::Insert, 2, 21),
            change(10, 2, Op::Insert, 9, 90),
            change(10, 3, Op::Insert, 5, 50),
        ];
        let (lake, _) = replay(changes, &Cutoff::Before(u64::MAX), true);
        let diff = compare(&source, &lake, 1);
        assert_eq!(
            (
                diff.source_rows,
                diff.lake_rows,
                diff.missing,
                diff.extra,
                diff.changed
            ),
            (5, 4, 2, 1, 1)
        );
        assert!(!diff.is_equal());
        let shown: Vec<(Difference, Digest, bool)> = diff
            .samples
            .iter()
            .map(|s| (s.difference, s.key, s.lake.is_some()))
            .collect();
        assert_eq!(
            shown,
            [
                (Difference::Missing, 3, false),
                (Difference::Changed, 2, true),
                (Difference::Extra, 9, true)
            ]
        );

        let mut rows = SourceState::new(false);
        rows.add(0, 10);
        rows.add(0, 10);
        let (lake, _) = replay(
            vec![change(10, 0, Op::Insert, 10, 10)],
            &Cutoff::Before(u64::MAX),
            false,
        );
        let diff = compare(&rows, &lake, 10);
        assert_eq!((diff.missing, diff.extra), (1, 0));
        let (lake, _) = replay(
            vec![
                change(10, 0, Op::Insert, 10, 10),
                change(10, 1, Op::Insert, 10, 10),
            ],
            &Cutoff::Before(u64::MAX),
            false,
        );
        assert!(compare(&rows, &lake, 10).is_equal());
    }
}
