//! The checkpoint protocol: what is durable in the sink, who may write it, and how far the
//! slot may move.
//!
//! # Contract
//!
//! - **Writers only create.** Every object a writer puts in the sink is created with
//!   create-if-absent under a name that holds the writer's id ([`Writer`], 64 random bits per
//!   process run): data files `<output>/part-<n>-<writer>-<k>.parquet`, intents
//!   `_tributary/intent/<n>-<writer>.json`. No writer can produce another's names, so a
//!   committed file is never overwritten; the only deletes are of files that can never be
//!   committed (below).
//! - **The log is the order.** Entry `n` (`_tributary/log/<n>.json`) is created with
//!   create-if-absent and names the LSN range, the files with their row counts and schema
//!   fingerprints, and the plugins (with digests). A writer that read entry `n - 1` is the
//!   only kind that tries `n`; of two such writers exactly one succeeds, and the other stops
//!   ([`CommitError::Conflict`]) and writes nothing more.
//! - **Taking over fences every earlier writer.** A starting writer first holds the slot (one
//!   walsender per slot), then re-reads the log and appends an *open* entry ([`EntryKind::Open`],
//!   no files, positions unchanged). Every writer that started earlier read the log before that
//!   entry, so its next sequence number is already taken: even one that was paused (a stopped
//!   VM) and resumes can never commit again. A conflict while opening means an earlier writer
//!   committed in between; the starting writer reads the log again and opens after it.
//! - **An idle pipeline advances.** When nothing of the pipeline's tables commits while the
//!   server's WAL moves on, an *advance* entry ([`EntryKind::Advance`], no files, the last commit
//!   position kept) moves `last_end_lsn` to where the server had sent, and the slot is confirmed
//!   there: the log always ends where the slot may be.
//! - **Intent before data.** Before any data file of flush `n` is written, an intent lists the
//!   files it will write. At start, after its open entry `m`, a writer deletes the files of
//!   every intent numbered at or below `m` that its own entry does not name: nobody can commit
//!   them any more. Intents above `m` belong to a writer that started later and are left alone.
//! - **Confirm after commit.** Only after entry `n` exists is the slot told it may release WAL:
//!   the confirmed (flush) position becomes the end LSN of the entry's last transaction. It
//!   never moves backward and never passes the latest committed entry.
//! - **Replays are dropped.** PostgreSQL replays everything after the slot's confirmed
//!   position, which is at or before the latest entry; transactions whose commit LSN is at or
//!   below the entry's last commit LSN are dropped. So every change lands exactly once, however
//!   often a process stops, and whoever takes over.
//! - **Gaps are refused.** If the slot's confirmed position is past the latest entry (the slot
//!   was recreated or consumed by someone else), changes were lost to this sink: start is
//!   refused unless the operator accepts the gap. A sink belongs to one pipeline (one slot on
//!   one database of one server, recorded in `_tributary/pipeline.json`); another is refused
//!   before it writes anything.
//!
//! [`Checkpoint`] holds these decisions without IO; [`CommitLog`] reads and writes the objects.

mod log;
mod writer;

use serde::{Deserialize, Serialize};

use crate::Lsn;
use crate::lake::sink::SinkError;

pub use log::{CommitLog, Recovery};
pub use writer::Writer;
pub(crate) use writer::unix_micros;
pub(crate) use writer::utc_text;

/// Where Tributary's own bookkeeping lives in the sink; outputs never start with `_`.
pub const STATE_PREFIX: &str = "_tributary";
/// Version of the commit entry format this build writes. It reads this one and format 1
/// (entries before writer ids and open entries).
pub const FORMAT: u32 = 2;
const OLDEST_FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("{path} in the sink is not a valid entry: {reason}")]
    Corrupt { path: String, reason: String },
    #[error(
        "commit entry {sequence} was written by another tributary, {holder}: it has taken over this pipeline, so this one ({ours}) stops and writes nothing more"
    )]
    Conflict {
        sequence: u64,
        holder: Box<Writer>,
        ours: Box<Writer>,
    },
    /// A flush's files cannot be appended to its output's table (of the format named).
    #[error("output {output:?}: its {format} table cannot take flush {sequence}: {source}")]
    Table {
        output: String,
        sequence: u64,
        format: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Columns came into an output's current-state table, and its rows are loaded again at a
    /// start (trigger capture): the pipeline starts again.
    #[error(
        "output {output:?}: columns {columns} came into its current-state table, whose rows are loaded again at a start: starting again"
    )]
    LoadDue { output: String, columns: String },
    #[error(
        "output {output:?}: its table already holds flush {theirs} of this pipeline, past this writer's flush {ours}: another tributary has taken over this pipeline, so this one ({writer}) stops and writes nothing more"
    )]
    TableAhead {
        output: String,
        ours: u64,
        theirs: u64,
        writer: Box<Writer>,
    },
    #[error(
        "the sink holds flushes landed without tables (commit entry {sequence} is the first): sink.format = \"{format}\" is chosen when a sink is first written; land into a new sink prefix, or set sink.format = \"parquet\" again"
    )]
    NotTables { sequence: u64, format: &'static str },
    #[error(
        "another tributary keeps committing to this sink while this one starts (last entry {sequence} by {holder}): is a second instance reading the same slot from another server? stop it"
    )]
    Contended { sequence: u64, holder: Box<Writer> },
    #[error(
        "the sink belongs to another pipeline: {theirs}, first written by {created_by}; this one reads {ours}: give each pipeline a sink prefix of its own"
    )]
    OtherPipeline {
        theirs: String,
        ours: String,
        created_by: Box<Writer>,
    },
    #[error(
        "the sink was written from slot {slot:?} on database {database:?} of the server with \
         system identifier {theirs}, but the server at source.url has system identifier {ours}: \
         another server answers at this address (restored from a backup, or promoted without \
         being a physical copy), and its WAL positions mean nothing for this lake; point \
         source.url at the original server, or give this source a sink prefix of its own"
    )]
    OtherServer {
        slot: String,
        database: String,
        theirs: String,
        ours: String,
    },
    #[error(
        "slot {slot:?} has confirmed up to {slot_confirmed} but the sink holds changes only up to {committed}: the changes in between never reached this sink (was the slot recreated, advanced by hand, or read by another consumer, or the database restored from a backup?); to start anyway and accept this gap and no other, pass --accept-gap \"{committed}..{slot_confirmed}\" (it is recorded in the commit log)"
    )]
    Gap {
        slot: String,
        slot_confirmed: Lsn,
        committed: Lsn,
    },
    #[error(
        "slot {slot:?} does not exist but the sink already holds changes up to {committed}: a new slot would start at the current WAL position and lose the changes since; to start anyway and accept that gap and no other, pass --accept-gap \"{committed}..new slot\" (it is recorded in the commit log)"
    )]
    SlotMissing { slot: String, committed: Lsn },
    #[error(
        "the source server is on timeline {to}, but this sink was written from timeline {from} \
         (commit entry {sequence}): the server was promoted or restored to a point in time \
         since, so its WAL may have forked from what this lake holds (changes the lake has that \
         the server lost, or changes made since that reuse the same positions), and the move \
         cannot be followed by itself: {why}. The way back: resynchronise into a new sink \
         prefix, or, if the new timeline continues what was landed (a planned failover with the \
         slot synchronised), accept this change and no other with \
         --accept-gap \"timeline {from}..{to}\" (it is recorded in the commit log). To follow \
         a promotion by itself, set source.failover = true (PostgreSQL 17) with a standby that \
         synchronises the slot"
    )]
    Timeline {
        from: u32,
        to: u32,
        sequence: u64,
        why: String,
    },
    #[error(
        "the source server was promoted onto timeline {to}, whose history ends timeline {from} \
         at {switch_point}, but this sink holds changes up to {committed} (commit entry \
         {sequence}): the lake has the changes between {switch_point} and {committed}, which \
         the new primary never had (they had not reached the standby when it was promoted). \
         Resynchronise into a new sink prefix, or, to keep those changes in the lake and go on \
         from the new primary, accept this move and no other with \
         --accept-gap \"timeline {from}..{to}\" (it is recorded in the commit log)"
    )]
    FailoverAhead {
        from: u32,
        to: u32,
        switch_point: Lsn,
        committed: Lsn,
        sequence: u64,
    },
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

/// What flush `sequence` of `writer` will write, recorded before it writes anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub sequence: u64,
    pub writer: Writer,
    pub files: Vec<String>,
}

/// What an entry records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// Landed transactions: files, LSN range, counts.
    #[default]
    Flush,
    /// A writer took over the pipeline; no files, the positions of the entry before it (or,
    /// for a sink's first entry, the slot's position at that moment).
    Open,
    /// Nothing of the pipeline's tables committed since the entry before, but the server's
    /// WAL moved on (other tables, other databases): no files, the commit positions of the entry
    /// before, and `last_end_lsn` where the server had sent, so that the slot may release the
    /// WAL before it.
    Advance,
    /// A chunk of a full load landed: files, the load's progress (`load`), and the positions
    /// of the entry before (a load reads a snapshot, not the stream).
    Load,
}

/// A committed entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitEntry {
    pub format: u32,
    #[serde(default)]
    pub kind: EntryKind,
    pub sequence: u64,
    pub writer: Writer,
    pub slot: String,
    /// Commit LSN of the first and last transaction landed.
    pub first_commit_lsn: Lsn,
    pub last_commit_lsn: Lsn,
    /// End LSN of the last transaction: the slot's confirmed position after this entry.
    pub last_end_lsn: Lsn,
    pub transactions: u64,
    pub changes: u64,
    pub files: Vec<FileEntry>,
    pub plugins: Vec<PluginRecord>,
    /// Microseconds since the Unix epoch.
    pub committed_at: i64,
    /// On an open entry: the gap an operator accepted (`--accept-gap`), the changes between
    /// the two positions never landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_gap: Option<AcceptedGap>,
    /// Changes plugins rejected that landed in the dead-letter output, in this entry and all
    /// before it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_letters: u64,
    /// The source server's timeline (`IDENTIFY_SYSTEM`) when the entry was written; absent in
    /// entries of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// On an open entry: the change of timeline an operator accepted (`--accept-gap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_timeline: Option<AcceptedTimeline>,
    /// On the first entry after the pipeline followed a promotion of a standby (its failover
    /// slot synchronised there): the move, and where the old timeline ended. Absent in entries
    /// of older versions, which never followed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
    /// On the first open entry: where the pipeline's first run started (`source.start_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_from: Option<StartedFrom>,
    /// While a full load runs (from the open entry that starts it to the entry of its last
    /// chunk): every tracked table's progress, as of this entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::stream::load::LoadState>,
    /// With `sink.format = "delta"`: every entry up to this one had its files committed to
    /// their outputs' Delta tables when this entry was written. A start brings the tables up
    /// to the log from the entry after it; absent, from the first entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables_through: Option<u64>,
}

impl CommitEntry {
    /// The first open entry of a lake, starting at `started.lsn` when that is past the slot's
    /// confirmed position (a first run from the tail, or from a position of its own).
    pub fn starting(mut self, started: StartedFrom) -> CommitEntry {
        debug_assert!(self.sequence == 1 && self.kind == EntryKind::Open);
        self.last_end_lsn = self.last_end_lsn.max(started.lsn);
        self.started_from = Some(started);
        self
    }

    /// Gaps an operator accepted with `--accept-gap` that this open entry records: a gap
    /// between the lake and the slot or the trigger journal, and a change of timeline (one
    /// text names one of them, so 0 or 1).
    pub fn accepted_gaps(&self) -> u64 {
        u64::from(self.accepted_gap.is_some()) + u64::from(self.accepted_timeline.is_some())
    }
}

/// A plugin that made an entry's files, as the entry records it: which build it was (the
/// digest), so a lake says what transformed each flush. The transform host fills it; the
/// protocol only carries it, and its fields are the entry format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    pub path: String,
    /// SHA-256 of the plugin file, hex.
    pub digest: String,
}

/// Where a pipeline's first run started reading, as its open entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedFrom {
    /// `source.start_from` as the first run read it: `tail`, `head`, `lsn:X/Y` or `full`.
    pub start_from: String,
    /// Where the lake starts: no transaction committed before it landed.
    pub lsn: Lsn,
}

/// A change of the source's timeline that an operator accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedTimeline {
    pub from: u32,
    pub to: u32,
}

/// A promotion of a standby that the pipeline followed without an operator: the source moved
/// from timeline `from` to `to`, the new primary's history says `from` ended at
/// `switch_point`, and the lake ended at `lake_end`, at or before it, so the lake holds
/// nothing the new primary lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failover {
    pub from: u32,
    pub to: u32,
    pub switch_point: Lsn,
    pub lake_end: Lsn,
}

/// Why a move to another timeline is not followed by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFollowed {
    /// The lake ends past where the old timeline ended on the new primary: it holds changes
    /// the new primary never had.
    Ahead { switch_point: Lsn },
    /// Not a promotion the pipeline can follow (no failover slot synchronised there, or the
    /// old timeline is not in the server's history): why.
    Unfollowable(String),
}

/// Whether a lake that ends at `lake_end` on timeline `from` may go on from a server on
/// timeline `to`. `switch` is where `from` ended in that server's history when the move is a
/// promotion the pipeline can follow (its failover slot synchronised to the promoted
/// standby), or why it is not one.
pub fn follow_promotion(
    from: u32,
    to: u32,
    lake_end: Lsn,
    switch: &Result<Lsn, String>,
) -> Result<Failover, NotFollowed> {
    match switch {
        Ok(end) if lake_end <= *end => Ok(Failover {
            from,
            to,
            switch_point: *end,
            lake_end,
        }),
        Ok(end) => Err(NotFollowed::Ahead { switch_point: *end }),
        Err(why) => Err(NotFollowed::Unfollowable(why.clone())),
    }
}

/// How a start meets the source's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimelineMove {
    /// The timeline of the latest entry (or a lake that does not say).
    Same,
    /// Another one, accepted with `--accept-gap`.
    Accepted,
    /// Another one, a promotion the pipeline follows by itself.
    Followed(Failover),
}

/// What `--accept-gap` must say to accept the source's move from timeline `from` to `to`.
pub fn timeline_token(from: u32, to: u32) -> String {
    format!("timeline {from}..{to}")
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A gap between the sink and the slot that an operator accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedGap {
    /// Where the sink's changes ended.
    pub from: Lsn,
    /// Where the slot resumed.
    pub to: Lsn,
}

/// What `--accept-gap` must say to accept the gap between the sink's end `committed` and the
/// slot's `slot_confirmed` (`None`: the slot does not exist yet): exactly what the refusal
/// printed.
pub fn gap_token(committed: Lsn, slot_confirmed: Option<Lsn>) -> String {
    match slot_confirmed {
        Some(confirmed) => format!("{committed}..{confirmed}"),
        None => format!("{committed}..new slot"),
    }
}

/// Which pipeline a sink belongs to: written once, by the first writer that opens it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineIdentity {
    pub format: u32,
    /// `IDENTIFY_SYSTEM`'s system identifier of the source server.
    pub system_identifier: String,
    pub database: String,
    pub slot: String,
    pub created_by: Writer,
    /// Microseconds since the Unix epoch.
    pub created_at: i64,
}

impl PipelineIdentity {
    /// The same source: one slot, on one database, of one server.
    pub fn same_source(&self, other: &PipelineIdentity) -> bool {
        (&self.system_identifier, &self.database, &self.slot)
            == (&other.system_identifier, &other.database, &other.slot)
    }

    pub fn describe(&self) -> String {
        let source = match journal_schema(&self.slot) {
            Some(schema) => format!("the trigger journal in schema {schema:?}"),
            None => format!("slot {:?}", self.slot),
        };
        format!(
            "{source} on database {:?} of the server with system identifier {}",
            self.database, self.system_identifier
        )
    }
}

/// What a lake captured by triggers records where a slot's name goes (its identity, its
/// entries): the journal's schema, in a form no slot name takes (slot names have no `:`).
pub fn journal_name(schema: &str) -> String {
    format!("trigger:{schema}")
}

/// The journal's schema when `name` is a [`journal_name`].
pub fn journal_schema(name: &str) -> Option<&str> {
    name.strip_prefix("trigger:")
}

/// A source-side object Tributary created for this pipeline, recorded in the sink
/// (`_tributary/created/<kind>.json`) so that `tributary teardown` drops exactly what was
/// created and nothing an operator made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provisioned {
    pub kind: ProvisionedKind,
    pub name: String,
    pub database: String,
    /// `IDENTIFY_SYSTEM`'s system identifier of the server it was created on.
    pub system_identifier: String,
    pub created_by: Writer,
    /// Microseconds since the Unix epoch.
    pub created_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProvisionedKind {
    Slot,
    Publication,
    /// Trigger capture's schema, with its journal, functions and triggers.
    #[serde(rename = "trigger_capture")]
    TriggerCapture,
}

impl ProvisionedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProvisionedKind::Slot => "slot",
            ProvisionedKind::Publication => "publication",
            ProvisionedKind::TriggerCapture => "trigger capture",
        }
    }
}

/// The durable position and the decisions that follow from it. No IO.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoint {
    sequence: u64,
    last_commit_lsn: Lsn,
    last_end_lsn: Lsn,
    dead_letters: u64,
    /// The source's timeline when the latest entry was written, if it says.
    timeline: Option<u32>,
    tables_through: Option<u64>,
}

impl Checkpoint {
    pub fn from_entry(entry: Option<&CommitEntry>) -> Self {
        entry.map_or_else(Checkpoint::default, |e| Checkpoint {
            sequence: e.sequence,
            last_commit_lsn: e.last_commit_lsn,
            last_end_lsn: e.last_end_lsn,
            dead_letters: e.dead_letters,
            timeline: e.timeline,
            tables_through: e.tables_through,
        })
    }

    /// Through which entry the Delta tables are known to be up to date (see
    /// [`CommitEntry::tables_through`]).
    pub fn tables_through(&self) -> Option<u64> {
        self.tables_through
    }

    /// The source's timeline when the latest entry was written, if it says.
    pub fn timeline(&self) -> Option<u32> {
        self.timeline.filter(|_| self.sequence > 0)
    }

    /// Decide whether the pipeline may start against a server on `timeline`. When it moved to
    /// another timeline since the latest entry, `switch` says where the entry's timeline ended
    /// in the server's history if the move is a promotion the pipeline can follow, or why not
    /// (see [`follow_promotion`]); `accept` may name the move (see [`timeline_token`]).
    /// Entries that do not say (older versions) accept any.
    pub fn judge_timeline(
        &self,
        timeline: u32,
        switch: &Result<Lsn, String>,
        accept: Option<&str>,
    ) -> Result<TimelineMove, CommitError> {
        let Some(from) = self.timeline().filter(|&from| from != timeline) else {
            return Ok(TimelineMove::Same);
        };
        let accepted = accept == Some(timeline_token(from, timeline).as_str());
        match follow_promotion(from, timeline, self.last_end_lsn, switch) {
            Ok(failover) => Ok(TimelineMove::Followed(failover)),
            Err(_) if accepted => Ok(TimelineMove::Accepted),
            Err(NotFollowed::Ahead { switch_point }) => Err(CommitError::FailoverAhead {
                from,
                to: timeline,
                switch_point,
                committed: self.last_end_lsn,
                sequence: self.sequence,
            }),
            Err(NotFollowed::Unfollowable(why)) => Err(CommitError::Timeline {
                from,
                to: timeline,
                sequence: self.sequence,
                why,
            }),
        }
    }

    /// [`judge_timeline`](Self::judge_timeline) of a move that is no promotion the pipeline
    /// follows: `Ok(true)` when `accept` names it.
    pub fn check_timeline(&self, timeline: u32, accept: Option<&str>) -> Result<bool, CommitError> {
        let not_followed = Err("no failover slot was checked".to_owned());
        self.judge_timeline(timeline, &not_followed, accept)
            .map(|judged| judged == TimelineMove::Accepted)
    }

    /// Dead letters landed up to the latest entry.
    pub fn dead_letters(&self) -> u64 {
        self.dead_letters
    }

    /// Sequence number of the latest entry; 0 before the first.
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

    /// Decide whether the pipeline may start against a slot in this state: `Ok(true)` when
    /// there is a gap and `accept` names it exactly (see [`gap_token`]; the token of a missing
    /// slot also accepts the gap to the slot created for it).
    ///
    /// `slot_confirmed` is the slot's `confirmed_flush_lsn`, `None` if the slot does not exist.
    pub fn check_slot(
        &self,
        slot: &str,
        slot_confirmed: Option<Lsn>,
        accept: Option<&str>,
    ) -> Result<bool, CommitError> {
        if self.sequence == 0 {
            return Ok(false);
        }
        let accepted = |to: Option<Lsn>| {
            accept.is_some_and(|given| {
                given == gap_token(self.last_end_lsn, to)
                    || given == gap_token(self.last_end_lsn, None)
            })
        };
        match slot_confirmed {
            None if accepted(None) => Ok(true),
            None => Err(CommitError::SlotMissing {
                slot: slot.to_owned(),
                committed: self.last_end_lsn,
            }),
            Some(confirmed) if confirmed > self.last_end_lsn => {
                if accepted(Some(confirmed)) {
                    return Ok(true);
                }
                Err(CommitError::Gap {
                    slot: slot.to_owned(),
                    slot_confirmed: confirmed,
                    committed: self.last_end_lsn,
                })
            }
            Some(_) => Ok(false),
        }
    }

    /// The open entry that makes `writer` the pipeline's only writer, to be created as the next
    /// sequence number. `slot_confirmed` is the slot's position now: a sink's first entry
    /// starts the lake there, and so does an accepted gap (`gap_accepted`, the slot ahead of the
    /// log); otherwise the positions of the entry before are kept.
    pub fn open_entry(
        &self,
        writer: &Writer,
        slot: &str,
        slot_confirmed: Lsn,
        gap_accepted: bool,
        timeline: u32,
    ) -> CommitEntry {
        let last_commit_lsn = self.last_commit_lsn;
        let gap = gap_accepted && self.sequence > 0 && slot_confirmed > self.last_end_lsn;
        let last_end_lsn = if self.sequence == 0 || gap {
            slot_confirmed
        } else {
            self.last_end_lsn
        };
        CommitEntry {
            format: FORMAT,
            kind: EntryKind::Open,
            sequence: self.next_sequence(),
            writer: writer.clone(),
            slot: slot.to_owned(),
            first_commit_lsn: last_commit_lsn,
            last_commit_lsn,
            last_end_lsn,
            transactions: 0,
            changes: 0,
            files: Vec::new(),
            plugins: Vec::new(),
            committed_at: unix_micros(),
            accepted_gap: gap.then_some(AcceptedGap {
                from: self.last_end_lsn,
                to: slot_confirmed,
            }),
            dead_letters: self.dead_letters,
            timeline: Some(timeline),
            accepted_timeline: self
                .timeline
                .filter(|&from| self.sequence > 0 && from != timeline)
                .map(|from| AcceptedTimeline { from, to: timeline }),
            failover: None,
            started_from: None,
            load: None,
            tables_through: self.tables_through,
        }
    }

    /// Accept a newly committed entry; it must follow this checkpoint.
    pub fn advance(&mut self, entry: &CommitEntry) -> Result<(), CommitError> {
        let backward = match entry.kind {
            EntryKind::Flush => self.sequence > 0 && entry.first_commit_lsn <= self.last_commit_lsn,
            EntryKind::Open => entry.last_commit_lsn < self.last_commit_lsn,
            EntryKind::Advance | EntryKind::Load => {
                entry.last_commit_lsn < self.last_commit_lsn
                    || entry.last_end_lsn < self.last_end_lsn
            }
        };
        if backward {
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

/// Name of data file `part` of `writer`'s flush `sequence`: sorts by sequence, and no other
/// writer can produce it.
pub fn data_file_path(output: &str, sequence: u64, writer: &Writer, part: usize) -> String {
    format!(
        "{output}/part-{sequence:020}-{}-{part:04}.parquet",
        writer.id
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn entry(sequence: u64, first: u64, last: u64, writer: &str) -> CommitEntry {
        CommitEntry {
            format: FORMAT,
            kind: EntryKind::Flush,
            sequence,
            writer: Writer::named(writer),
            slot: "s".into(),
            first_commit_lsn: Lsn(first),
            last_commit_lsn: Lsn(last),
            last_end_lsn: Lsn(last + 0x30),
            transactions: 1,
            changes: 1,
            files: vec![],
            plugins: vec![],
            committed_at: 0,
            accepted_gap: None,
            dead_letters: 0,
            timeline: None,
            accepted_timeline: None,
            failover: None,
            started_from: None,
            load: None,
            tables_through: None,
        }
    }

    #[test]
    fn a_first_open_entry_records_where_it_started_and_starts_the_lake_there() {
        let w = Writer::named("b");
        let tail = StartedFrom {
            start_from: "tail".into(),
            lsn: Lsn(0x900),
        };
        let first = Checkpoint::default()
            .open_entry(&w, "s", Lsn(0x500), false, 1)
            .starting(tail.clone());
        assert_eq!(
            first.last_end_lsn,
            Lsn(0x900),
            "the held changes are skipped"
        );
        assert_eq!(first.started_from.as_ref(), Some(&tail));
        let mut c = Checkpoint::default();
        c.advance(&first).unwrap();
        assert_eq!(c.confirmed(), Lsn(0x900));
        assert!(!c.check_slot("s", Some(Lsn(0x900)), None).unwrap());
        // From the head, the lake starts where the slot is.
        let head = Checkpoint::default()
            .open_entry(&w, "s", Lsn(0x500), false, 1)
            .starting(StartedFrom {
                start_from: "head".into(),
                lsn: Lsn::ZERO,
            });
        assert_eq!(head.last_end_lsn, Lsn(0x500));
        let json = serde_json::to_string(&first).unwrap();
        assert!(
            json.contains(r#""started_from":{"start_from":"tail","lsn":"0/900"}"#),
            "{json}"
        );
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
    fn another_timeline_is_refused_unless_that_move_is_accepted_and_then_recorded() {
        let w = Writer::named("b");
        let mut c = Checkpoint::default();
        assert!(
            !c.check_timeline(7, None).unwrap(),
            "an empty lake takes any"
        );
        c.advance(&Checkpoint::default().open_entry(&w, "s", Lsn(0x500), false, 1))
            .unwrap();
        assert!(!c.check_timeline(1, None).unwrap());
        let err = c.check_timeline(2, None).unwrap_err();
        assert!(
            matches!(
                err,
                CommitError::Timeline {
                    from: 1,
                    to: 2,
                    sequence: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("--accept-gap \"timeline 1..2\""),
            "{err}"
        );
        assert!(c.check_timeline(2, Some("timeline 1..3")).is_err());
        assert!(c.check_timeline(2, Some("timeline 1..2")).unwrap());
        let open = c.open_entry(&w, "s", Lsn(0x500), false, 2);
        assert_eq!(
            (open.timeline, open.accepted_timeline),
            (Some(2), Some(AcceptedTimeline { from: 1, to: 2 }))
        );
        assert_eq!(open.accepted_gaps(), 1);
        c.advance(&open).unwrap();
        assert_eq!(
            c.open_entry(&w, "s", Lsn(0x500), false, 2).accepted_gaps(),
            0
        );
        assert!(
            !c.check_timeline(2, None).unwrap(),
            "the next start needs no flag"
        );
        // Entries of versions that did not record the timeline take any.
        c.advance(&entry(3, 0x600, 0x700, "b")).unwrap();
        assert!(!c.check_timeline(5, None).unwrap());
    }

    #[test]
    fn a_promotion_is_followed_only_when_the_lake_ends_at_or_before_the_switch_point() {
        let w = Writer::named("b");
        let mut c = Checkpoint::default();
        c.advance(&Checkpoint::default().open_entry(&w, "s", Lsn(0x500), false, 1))
            .unwrap();
        // The lake ends at 0x500 on timeline 1.
        assert_eq!(c.timeline(), Some(1));
        let same = c.judge_timeline(1, &Err("unused".into()), None).unwrap();
        assert_eq!(same, TimelineMove::Same);
        let followed = c.judge_timeline(2, &Ok(Lsn(0x500)), None).unwrap();
        assert_eq!(
            followed,
            TimelineMove::Followed(Failover {
                from: 1,
                to: 2,
                switch_point: Lsn(0x500),
                lake_end: Lsn(0x500),
            }),
            "a lake that ends at the switch point holds nothing the new primary lacks"
        );
        let ahead = c.judge_timeline(2, &Ok(Lsn(0x4ff)), None).unwrap_err();
        let said = ahead.to_string();
        assert!(
            matches!(
                ahead,
                CommitError::FailoverAhead {
                    from: 1,
                    to: 2,
                    switch_point: Lsn(0x4ff),
                    committed: Lsn(0x500),
                    sequence: 1
                }
            ),
            "{ahead:?}"
        );
        assert!(
            said.contains("between 0/4FF and 0/500, which the new primary never had")
                && said.contains("--accept-gap \"timeline 1..2\""),
            "{said}"
        );
        assert_eq!(
            c.judge_timeline(2, &Ok(Lsn(0x4ff)), Some("timeline 1..2"))
                .unwrap(),
            TimelineMove::Accepted,
            "the operator may keep the lake's extra changes"
        );
        let refused = c
            .judge_timeline(2, &Err("slot \"s\" is not a failover slot".into()), None)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("cannot be followed by itself: slot \"s\" is not a failover slot")
                && refused.contains("The way back: resynchronise"),
            "{refused}"
        );
        let entry = CommitEntry {
            failover: match followed {
                TimelineMove::Followed(f) => Some(f),
                _ => None,
            },
            ..c.open_entry(&w, "s", Lsn(0x500), false, 2)
        };
        let json = serde_json::to_string(&entry).unwrap();
        assert!(
            json.contains(
                r#""failover":{"from":1,"to":2,"switch_point":"0/500","lake_end":"0/500"}"#
            ),
            "{json}"
        );
        let read: CommitEntry = serde_json::from_str(&json).unwrap();
        assert_eq!(read.failover, entry.failover);
        let older = json.replace(
            r#","failover":{"from":1,"to":2,"switch_point":"0/500","lake_end":"0/500"}"#,
            "",
        );
        let read: CommitEntry = serde_json::from_str(&older).unwrap();
        assert_eq!(
            read.failover, None,
            "entries of older versions stay readable"
        );
    }

    #[test]
    fn open_entries_keep_the_position_and_a_first_one_starts_the_lake_at_the_slot() {
        let w = Writer::named("b");
        let first = Checkpoint::default().open_entry(&w, "s", Lsn(0x500), false, 1);
        assert_eq!((first.sequence, first.kind), (1, EntryKind::Open));
        let mut c = Checkpoint::default();
        c.advance(&first).unwrap();
        assert_eq!(
            (c.confirmed(), c.last_commit_lsn()),
            (Lsn(0x500), Lsn::ZERO)
        );
        assert!(!c.is_replay(Lsn(0x10)), "the lake holds no transaction yet");
        let err = c.check_slot("s", Some(Lsn(0x501)), None).unwrap_err();
        assert!(matches!(err, CommitError::Gap { .. }), "{err}");

        c.advance(&entry(2, 0x600, 0x700, "b")).unwrap();
        let again = c.open_entry(&w, "s", Lsn(0x9999), false, 1);
        assert_eq!(again.sequence, 3);
        assert_eq!(
            (again.last_commit_lsn, again.last_end_lsn, again.files.len()),
            (Lsn(0x700), Lsn(0x730), 0),
            "a later open entry ignores the slot and keeps the log's position"
        );
        c.advance(&again).unwrap();
        assert_eq!((c.sequence(), c.confirmed()), (3, Lsn(0x730)));
        assert!(c.is_replay(Lsn(0x700)));

        // An accepted gap starts the lake again at the slot, so the next start needs no flag.
        let accepted = c.open_entry(&w, "s", Lsn(0x9999), true, 1);
        assert_eq!(
            (accepted.last_commit_lsn, accepted.last_end_lsn),
            (Lsn(0x700), Lsn(0x9999))
        );
        assert_eq!(
            accepted.accepted_gap,
            Some(AcceptedGap {
                from: Lsn(0x730),
                to: Lsn(0x9999)
            }),
            "the log records what was accepted"
        );
        assert_eq!(accepted.accepted_gaps(), 1);
        assert_eq!(again.accepted_gaps(), 0);
        c.advance(&accepted).unwrap();
        assert!(!c.check_slot("s", Some(Lsn(0x9999)), None).unwrap());
    }

    #[test]
    fn checkpoint_refuses_a_slot_that_moved_past_the_sink() {
        let c = Checkpoint::from_entry(Some(&entry(3, 0x100, 0x200, "w")));
        assert!(!c.check_slot("s", Some(Lsn(0x230)), None).unwrap());
        assert!(!c.check_slot("s", Some(Lsn(0x100)), None).unwrap());
        let err = c
            .check_slot("s", Some(Lsn(0x231)), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("confirmed up to 0/231") && err.contains("--accept-gap \"0/230..0/231\""),
            "{err}"
        );
        // Only that gap: another token, or the same one for another gap, is refused.
        assert!(
            c.check_slot("s", Some(Lsn(0x231)), Some("0/230..0/231"))
                .unwrap()
        );
        assert!(
            c.check_slot("s", Some(Lsn(0x232)), Some("0/230..0/231"))
                .is_err()
        );
        assert!(
            c.check_slot("s", Some(Lsn(0x231)), Some("0/230..0/232"))
                .is_err()
        );
        let missing = c.check_slot("s", None, None).unwrap_err();
        assert!(matches!(missing, CommitError::SlotMissing { .. }));
        assert!(
            missing
                .to_string()
                .contains("--accept-gap \"0/230..new slot\"")
        );
        // A missing slot's token also accepts the gap to the slot created for it.
        assert!(c.check_slot("s", None, Some("0/230..new slot")).unwrap());
        assert!(
            c.check_slot("s", Some(Lsn(0x999)), Some("0/230..new slot"))
                .unwrap()
        );
        assert!(
            !Checkpoint::default()
                .check_slot("s", Some(Lsn(0x999)), None)
                .unwrap()
        );
    }

    #[test]
    fn data_file_names_differ_between_writers_of_the_same_flush() {
        let (a, b) = (
            Writer::named("00000000000000aa"),
            Writer::named("00000000000000bb"),
        );
        assert_eq!(
            data_file_path("public.t", 9, &a, 0),
            "public.t/part-00000000000000000009-00000000000000aa-0000.parquet"
        );
        assert_ne!(
            data_file_path("public.t", 9, &a, 0),
            data_file_path("public.t", 9, &b, 0)
        );
    }

    #[test]
    fn plugin_records_keep_the_entry_format() {
        let json =
            r#"{"name":"mask","version":"1.2.0","path":"plugins/mask.wasm","digest":"0a1b"}"#;
        let record: PluginRecord = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), json);
    }

    #[test]
    fn format_1_entries_still_read() {
        let old = r#"{"format":1,"sequence":4,"writer":"h:7:100","slot":"s",
            "first_commit_lsn":"0/10","last_commit_lsn":"0/20","last_end_lsn":"0/28",
            "transactions":1,"changes":2,"files":[],"plugins":[],"committed_at":5}"#;
        let e: CommitEntry = serde_json::from_str(old).unwrap();
        assert_eq!(
            (e.kind, e.writer.pid, e.last_end_lsn),
            (EntryKind::Flush, 7, Lsn(0x28))
        );
    }
}
