//! The checkpoint protocol: what is durable in the sink, and how far the slot may move.
//!
//! # Contract
//!
//! - Every flush gets the next sequence number `n`. Before any data file of `n` is written,
//!   an *intent* for `n` (`_tributary/intent/<n>.json`) lists the files it will write. Data
//!   file names derive from `n`, so a retried flush rewrites the same names.
//! - `n` is committed by creating `_tributary/log/<n>.json` with create-if-absent. The entry
//!   records the LSN range, the files with their row counts and schema fingerprints, and the
//!   plugins (with digests) that produced them. If entry `n` already exists and another
//!   writer made it, another process owns this pipeline: stop, write nothing more.
//! - Only after the entry exists is the slot told it may release WAL: the confirmed (flush)
//!   position becomes the end LSN of the entry's last transaction. It never moves backward
//!   and never passes the latest committed entry.
//! - On start, the latest entry is the durable position. Files of any intent above it are
//!   deleted: they were never committed. PostgreSQL replays everything after the slot's
//!   confirmed position, which is at or before the latest entry; transactions whose commit LSN
//!   is at or below the entry's last commit LSN are dropped as replays. So every change lands
//!   exactly once, however often the process stops.
//! - If the slot's confirmed position is past the latest entry (the slot was recreated or
//!   consumed by someone else), changes were lost to this sink: start is refused unless the
//!   operator accepts the gap.
//!
//! [`Checkpoint`] holds these decisions without IO; [`CommitLog`] reads and writes the objects.

use bytes::Bytes;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::Lsn;
use crate::sink::{Sink, SinkError};
use crate::transform::PluginInfo;

/// Where Tributary's own bookkeeping lives in the sink; outputs never start with `_`.
pub const STATE_PREFIX: &str = "_tributary";
const LOG_DIR: &str = "_tributary/log";
const INTENT_DIR: &str = "_tributary/intent";
/// Version of the commit entry format this build writes and reads.
pub const FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("{path} in the sink is not a valid entry: {reason}")]
    Corrupt { path: String, reason: String },
    #[error(
        "commit entry {sequence} already exists and was written by {other:?}, not by this process ({ours:?}): another tributary is writing this pipeline; stop it or point this one at another sink"
    )]
    Conflict {
        sequence: u64,
        other: String,
        ours: String,
    },
    #[error(
        "slot {slot:?} has confirmed up to {slot_confirmed} but the sink holds changes only up to {committed}: the changes in between never reached this sink (was the slot recreated or read by another consumer?); to start anyway and accept the gap, pass --allow-gap"
    )]
    Gap {
        slot: String,
        slot_confirmed: Lsn,
        committed: Lsn,
    },
    #[error(
        "slot {slot:?} does not exist but the sink already holds changes up to {committed}: a new slot would start at the current WAL position and lose the changes since; to start anyway and accept the gap, pass --allow-gap"
    )]
    SlotMissing { slot: String, committed: Lsn },
    #[error(
        "flush {sequence} covers commits {first}..{last}, but the sink already holds commits up to {committed}"
    )]
    Backward {
        sequence: u64,
        first: Lsn,
        last: Lsn,
        committed: Lsn,
    },
}

/// One data file of a flush.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the sink root.
    pub path: String,
    pub output: String,
    pub rows: u64,
    pub bytes: u64,
    /// Fingerprint of the output's columns: files with different fingerprints differ in schema.
    pub schema: String,
}

/// What flush `sequence` will write, recorded before it writes anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub sequence: u64,
    pub writer: String,
    pub files: Vec<String>,
}

/// A committed flush.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitEntry {
    pub format: u32,
    pub sequence: u64,
    pub writer: String,
    pub slot: String,
    /// Commit LSN of the first and last transaction landed.
    pub first_commit_lsn: Lsn,
    pub last_commit_lsn: Lsn,
    /// End LSN of the last transaction: the slot's confirmed position after this entry.
    pub last_end_lsn: Lsn,
    pub transactions: u64,
    pub changes: u64,
    pub files: Vec<FileEntry>,
    pub plugins: Vec<PluginInfo>,
    /// Microseconds since the Unix epoch.
    pub committed_at: i64,
}

/// The durable position and the decisions that follow from it. No IO.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoint {
    sequence: u64,
    last_commit_lsn: Lsn,
    last_end_lsn: Lsn,
}

impl Checkpoint {
    pub fn from_entry(entry: Option<&CommitEntry>) -> Self {
        entry.map_or_else(Checkpoint::default, |e| Checkpoint {
            sequence: e.sequence,
            last_commit_lsn: e.last_commit_lsn,
            last_end_lsn: e.last_end_lsn,
        })
    }

    /// Sequence number of the latest committed flush; 0 before the first.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    pub fn next_sequence(&self) -> u64 {
        self.sequence + 1
    }

    /// The position the slot may be confirmed to: the end of the last landed transaction.
    pub fn confirmed(&self) -> Lsn {
        self.last_end_lsn
    }

    pub fn last_commit_lsn(&self) -> Lsn {
        self.last_commit_lsn
    }

    /// A transaction that committed at or before the last landed one is a replay.
    pub fn is_replay(&self, commit_lsn: Lsn) -> bool {
        self.sequence > 0 && commit_lsn <= self.last_commit_lsn
    }

    /// Decide whether the pipeline may start against a slot in this state.
    ///
    /// `slot_confirmed` is the slot's `confirmed_flush_lsn`, `None` if the slot does not exist.
    pub fn check_slot(
        &self,
        slot: &str,
        slot_confirmed: Option<Lsn>,
        allow_gap: bool,
    ) -> Result<(), CommitError> {
        if allow_gap || self.sequence == 0 {
            return Ok(());
        }
        match slot_confirmed {
            None => Err(CommitError::SlotMissing {
                slot: slot.to_owned(),
                committed: self.last_end_lsn,
            }),
            Some(confirmed) if confirmed > self.last_end_lsn => Err(CommitError::Gap {
                slot: slot.to_owned(),
                slot_confirmed: confirmed,
                committed: self.last_end_lsn,
            }),
            Some(_) => Ok(()),
        }
    }

    /// Accept a newly committed entry; it must follow this checkpoint.
    pub fn advance(&mut self, entry: &CommitEntry) -> Result<(), CommitError> {
        if self.sequence > 0 && entry.first_commit_lsn <= self.last_commit_lsn {
            return Err(CommitError::Backward {
                sequence: entry.sequence,
                first: entry.first_commit_lsn,
                last: entry.last_commit_lsn,
                committed: self.last_commit_lsn,
            });
        }
        *self = Checkpoint::from_entry(Some(entry));
        Ok(())
    }
}

/// Name of a data file of flush `sequence`: sortable, and the same on every retry.
pub fn data_file_path(output: &str, sequence: u64, part: usize) -> String {
    format!("{output}/part-{sequence:020}-{part:04}.parquet")
}

fn log_path(sequence: u64) -> Path {
    Path::from(format!("{LOG_DIR}/{sequence:020}.json"))
}

fn intent_path(sequence: u64) -> Path {
    Path::from(format!("{INTENT_DIR}/{sequence:020}.json"))
}

fn sequence_of(name: &str) -> Option<u64> {
    name.strip_suffix(".json")?.parse().ok()
}

/// What start-up found in the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub latest: Option<CommitEntry>,
    /// Intents above the latest entry: flushes that started but never committed.
    pub abandoned: Vec<Intent>,
    /// Intents at or below the latest entry, left behind after their commit.
    pub stale: Vec<u64>,
}

/// The commit log and intents, in the sink.
#[derive(Debug, Clone)]
pub struct CommitLog {
    sink: Sink,
    writer: String,
}

impl CommitLog {
    /// `writer` identifies this process in what it writes, to tell its own retries from
    /// another writer's entries.
    pub fn new(sink: Sink, writer: impl Into<String>) -> Self {
        CommitLog {
            sink,
            writer: writer.into(),
        }
    }

    pub fn writer(&self) -> &str {
        &self.writer
    }

    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// The latest committed entry, if any.
    pub async fn latest(&self) -> Result<Option<CommitEntry>, CommitError> {
        let names = self.sink.list_names(&Path::from(LOG_DIR)).await?;
        match names.iter().filter_map(|n| sequence_of(n)).max() {
            Some(sequence) => self.read_entry(sequence).await,
            None => Ok(None),
        }
    }

    pub async fn read_entry(&self, sequence: u64) -> Result<Option<CommitEntry>, CommitError> {
        let path = log_path(sequence);
        let Some(bytes) = self.sink.get(&path).await? else {
            return Ok(None);
        };
        let entry: CommitEntry = parse(&path, &bytes)?;
        if entry.sequence != sequence || entry.format != FORMAT {
            return Err(CommitError::Corrupt {
                path: path.to_string(),
                reason: format!(
                    "holds sequence {} in format {}, expected sequence {sequence} in format {FORMAT}",
                    entry.sequence, entry.format
                ),
            });
        }
        Ok(Some(entry))
    }

    /// Read the durable state: the latest entry and the intents around it.
    pub async fn recover(&self) -> Result<Recovery, CommitError> {
        let latest = self.latest().await?;
        let committed = latest.as_ref().map_or(0, |e| e.sequence);
        let mut abandoned = Vec::new();
        let mut stale = Vec::new();
        for name in self.sink.list_names(&Path::from(INTENT_DIR)).await? {
            let Some(sequence) = sequence_of(&name) else {
                continue;
            };
            if sequence <= committed {
                stale.push(sequence);
                continue;
            }
            let path = intent_path(sequence);
            if let Some(bytes) = self.sink.get(&path).await? {
                abandoned.push(parse(&path, &bytes)?);
            }
        }
        abandoned.sort_by_key(|i: &Intent| i.sequence);
        stale.sort_unstable();
        Ok(Recovery {
            latest,
            abandoned,
            stale,
        })
    }

    /// Delete what uncommitted flushes wrote, and intents their commits left behind.
    /// Returns the data files removed.
    pub async fn clean_up(&self, recovery: &Recovery) -> Result<Vec<String>, CommitError> {
        let mut removed = Vec::new();
        for intent in &recovery.abandoned {
            for file in &intent.files {
                self.sink.delete(&Path::from(file.as_str())).await?;
                removed.push(file.clone());
            }
            self.sink.delete(&intent_path(intent.sequence)).await?;
        }
        for &sequence in &recovery.stale {
            self.sink.delete(&intent_path(sequence)).await?;
        }
        Ok(removed)
    }

    pub async fn write_intent(&self, sequence: u64, files: &[String]) -> Result<(), CommitError> {
        let intent = Intent {
            sequence,
            writer: self.writer.clone(),
            files: files.to_vec(),
        };
        self.sink
            .put(&intent_path(sequence), to_json(&intent))
            .await?;
        Ok(())
    }

    /// Create entry `entry.sequence`, unless it exists. An existing entry written by this
    /// writer with the same content is our own earlier attempt whose reply was lost.
    pub async fn commit(&self, entry: &CommitEntry) -> Result<(), CommitError> {
        let path = log_path(entry.sequence);
        if self.sink.put_if_absent(&path, to_json(entry)).await? {
            return Ok(());
        }
        let existing = self.read_entry(entry.sequence).await?;
        match existing {
            Some(e) if e == *entry => Ok(()),
            other => Err(CommitError::Conflict {
                sequence: entry.sequence,
                other: other.map_or_else(|| "an unknown writer".to_owned(), |e| e.writer),
                ours: self.writer.clone(),
            }),
        }
    }

    /// The intent is no longer needed once its entry exists.
    pub async fn clear_intent(&self, sequence: u64) -> Result<(), CommitError> {
        self.sink.delete(&intent_path(sequence)).await?;
        Ok(())
    }
}

fn to_json<T: Serialize>(value: &T) -> Bytes {
    let mut text = serde_json::to_vec_pretty(value).expect("bookkeeping types serialize");
    text.push(b'\n');
    Bytes::from(text)
}

fn parse<T: for<'de> Deserialize<'de>>(path: &Path, bytes: &[u8]) -> Result<T, CommitError> {
    serde_json::from_slice(bytes).map_err(|e| CommitError::Corrupt {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;

    fn entry(sequence: u64, first: u64, last: u64, writer: &str) -> CommitEntry {
        CommitEntry {
            format: FORMAT,
            sequence,
            writer: writer.into(),
            slot: "s".into(),
            first_commit_lsn: Lsn(first),
            last_commit_lsn: Lsn(last),
            last_end_lsn: Lsn(last + 0x30),
            transactions: 1,
            changes: 1,
            files: vec![],
            plugins: vec![],
            committed_at: 0,
        }
    }

    fn log(sink: &Sink, writer: &str) -> CommitLog {
        CommitLog::new(sink.clone(), writer)
    }

    #[test]
    fn checkpoint_drops_replays_and_confirms_the_end_of_the_last_commit() {
        let mut c = Checkpoint::default();
        assert!(
            !c.is_replay(Lsn(0)),
            "nothing is a replay before the first commit"
        );
        assert_eq!((c.next_sequence(), c.confirmed()), (1, Lsn::ZERO));
        c.advance(&entry(1, 0x100, 0x200, "w")).unwrap();
        assert!(c.is_replay(Lsn(0x100)) && c.is_replay(Lsn(0x200)));
        assert!(!c.is_replay(Lsn(0x201)));
        assert_eq!((c.next_sequence(), c.confirmed()), (2, Lsn(0x230)));
        let err = c.advance(&entry(2, 0x200, 0x300, "w")).unwrap_err();
        assert!(matches!(err, CommitError::Backward { .. }), "{err}");
    }

    #[test]
    fn checkpoint_refuses_a_slot_that_moved_past_the_sink() {
        let c = Checkpoint::from_entry(Some(&entry(3, 0x100, 0x200, "w")));
        c.check_slot("s", Some(Lsn(0x230)), false).unwrap();
        c.check_slot("s", Some(Lsn(0x100)), false).unwrap();
        let err = c
            .check_slot("s", Some(Lsn(0x231)), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("confirmed up to 0/231") && err.contains("--allow-gap"),
            "{err}"
        );
        assert!(matches!(
            c.check_slot("s", None, false).unwrap_err(),
            CommitError::SlotMissing { .. }
        ));
        c.check_slot("s", Some(Lsn(0x999)), true).unwrap();
        Checkpoint::default()
            .check_slot("s", Some(Lsn(0x999)), false)
            .unwrap();
    }

    #[tokio::test]
    async fn commit_is_create_if_absent_and_names_the_other_writer() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let a = log(&sink, "writer-a");
        a.commit(&entry(1, 0x10, 0x20, "writer-a")).await.unwrap();
        // A retry of our own commit whose reply was lost is fine.
        a.commit(&entry(1, 0x10, 0x20, "writer-a")).await.unwrap();
        let b = log(&sink, "writer-b");
        let err = b
            .commit(&entry(1, 0x10, 0x20, "writer-b"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"writer-a\"") && err.contains("another tributary"),
            "{err}"
        );
        assert_eq!(b.latest().await.unwrap().unwrap().writer, "writer-a");
    }

    #[tokio::test]
    async fn recovery_finds_the_latest_entry_and_removes_uncommitted_files() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let w = log(&sink, "w");
        for (n, lsn) in [(1, 0x10), (2, 0x20), (10, 0x100)] {
            w.write_intent(n, &[data_file_path("public.t", n, 0)])
                .await
                .unwrap();
            w.commit(&entry(n, lsn, lsn, "w")).await.unwrap();
        }
        w.clear_intent(1).await.unwrap();
        // Flush 11 wrote its intent and one file, then the process died.
        let orphan = data_file_path("public.t", 11, 0);
        w.write_intent(11, std::slice::from_ref(&orphan))
            .await
            .unwrap();
        sink.put(&Path::from(orphan.as_str()), Bytes::from_static(b"x"))
            .await
            .unwrap();

        let recovery = w.recover().await.unwrap();
        assert_eq!(
            recovery.latest.as_ref().unwrap().sequence,
            10,
            "10 sorts after 2"
        );
        assert_eq!(recovery.stale, [2, 10]);
        assert_eq!(recovery.abandoned.len(), 1);
        assert_eq!(
            w.clean_up(&recovery).await.unwrap(),
            std::slice::from_ref(&orphan)
        );
        assert!(
            sink.get(&Path::from(orphan.as_str()))
                .await
                .unwrap()
                .is_none()
        );
        let again = w.recover().await.unwrap();
        assert!(again.abandoned.is_empty() && again.stale.is_empty());
    }

    #[tokio::test]
    async fn a_corrupt_entry_is_named() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        sink.put(&log_path(4), Bytes::from_static(b"{not json"))
            .await
            .unwrap();
        let err = log(&sink, "w").latest().await.unwrap_err().to_string();
        assert!(
            err.starts_with("_tributary/log/00000000000000000004.json in the sink"),
            "{err}"
        );
    }
}
