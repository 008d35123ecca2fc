//! What the stages hand each other, and what the pipeline tells its caller: a cut batch, its
//! transformed and encoded forms, the stop request and the progress published after every
//! commit.

use std::time::Duration;

use tokio::sync::watch;

use super::budget::Share;
use super::health::{Backlog, Faults};
use super::latency::Latencies;
use crate::Lsn;
use crate::lake::commit::CommitEntry;
use crate::lake::flush::EncodedFlush;
use crate::source::slot_wal::SlotWal;
use crate::stream::change::{Batch, OutputBatch};
use crate::stream::load::LoadState;
use crate::transform::Tallies;

/// What the pipeline has landed so far; published after every commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub flushes: u64,
    pub transactions: u64,
    pub changes: u64,
    pub rows_written: u64,
    pub files_written: u64,
    pub bytes_written: u64,
    /// Transactions the server replayed that were already landed.
    pub replays_skipped: u64,
    pub last_entry: Option<CommitEntry>,
    /// The slot is being read: every transaction that commits from now on will be landed.
    pub streaming: bool,
    /// Where the time went, summed over the run.
    pub stages: StageTimes,
    /// How long flushes, data file uploads and commit entries took, as histograms that every
    /// copy of the progress shares.
    pub latencies: Latencies,
    /// What each plugin counted in the flushes committed so far, by plugin name.
    pub plugins: Tallies,
    /// Attempts of sink steps (intents, uploads, commit entries) that failed and were retried.
    pub sink_retries: u64,
    /// Gaps (or changes of timeline) accepted with `--accept-gap` since the process started,
    /// as the open entries record them.
    pub accepted_gaps: u64,
    /// A sink step is failing and being retried right now.
    pub sink_failing: bool,
    /// A full load under way: what it has read so far.
    pub load: Option<crate::stream::load::LoadProgress>,
    /// Steps failing now and being retried, for the readiness probe.
    pub faults: Faults,
    /// Transactions read and not yet landed, for `tributary_lag_seconds`.
    pub backlog: Backlog,
    /// The slot's WAL figures as the source last told them (sampled only while the metrics
    /// endpoint is on); `None` before the first sample or when the slot is gone.
    pub slot: Option<SlotWal>,
    /// With trigger capture, the journal's rows and size as last sampled (likewise).
    pub journal: Option<crate::source::trigger::capture::JournalSize>,
    /// With `source.failover` and `source.standby_url`: whether the standby holds a copy of
    /// the slot that a promotion keeps, as last looked at (`None` before the first look, and
    /// without a standby to look at). For the `tributary_failover_ready` gauge.
    pub failover_ready: Option<bool>,
    /// A stop was requested: the flush in flight is finishing.
    pub stopping: bool,
    /// The stages have ended, and why (an error, or the stop asked for).
    pub ended: Option<String>,
}

/// Wall time spent in each stage, summed over a run: where a pipeline's time goes. The rest of
/// a run's time is spent waiting for the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Decoding pgoutput messages and assembling transactions.
    pub decode: Duration,
    /// The transform chain: the plugins, or the built-in derivation without any.
    pub transform: Duration,
    /// Arrow and Parquet encoding.
    pub encode: Duration,
    /// Writing the intent and uploading the data files.
    pub upload: Duration,
    /// Writing the commit entry, removing the intent and, into Delta tables, their commits.
    pub commit: Duration,
}

impl StageTimes {
    /// The sum of all stages.
    pub fn total(&self) -> Duration {
        self.decode + self.transform + self.encode + self.upload + self.commit
    }
}

/// Stop request: send `true` to finish the in-flight flush, land what is pending, and stop.
pub type Shutdown = watch::Receiver<bool>;

/// A batch cut by the reader, numbered, holding its share of the budget: a flush, or one part
/// of a flush that lands a large transaction.
pub(super) struct Cut {
    pub(super) batch: Batch,
    pub(super) sequence: u64,
    pub(super) part: u32,
    /// The batch's last transaction ends in it.
    pub(super) last: bool,
    /// Set on an empty batch that only records how far the server's WAL moved on.
    pub(super) advance: Option<Advance>,
    /// Set on a part of a full load's chunk.
    pub(super) load: Option<LoadCut>,
    /// While a load runs, on the last part: the load's progress as of this flush, which its
    /// entry records (so that a crash at any entry knows what is left to load).
    pub(super) state: Option<LoadState>,
    pub(super) share: Share,
}

/// The stream positions a load chunk's entry keeps: a load does not move them.
pub(super) struct LoadCut {
    pub(super) last_commit: Lsn,
    pub(super) end: Lsn,
}

/// The positions of an advance entry: the last commit landed, and the server's WAL position.
#[derive(Debug, Clone, Copy)]
pub(super) struct Advance {
    pub(super) last_commit: Lsn,
    pub(super) end: Lsn,
}

/// What the transforms made of a cut.
pub(super) struct Transformed {
    pub(super) flush: EncodedFlush,
    pub(super) outputs: Vec<OutputBatch>,
    pub(super) share: Share,
    pub(super) transform: Duration,
    pub(super) tallies: Tallies,
}

/// An encoded flush (or part of one) and the share of the in-flight budget it holds until its
/// files are up.
pub(super) struct Encoded {
    pub flush: EncodedFlush,
    /// Held, not read: dropping it gives the budget back.
    pub _budget: Share,
    /// Time spent on it so far, for the stage timers.
    pub transform: Duration,
    pub encode: Duration,
    /// What the plugins counted making it.
    pub tallies: Tallies,
}
