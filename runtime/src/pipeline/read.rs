//! The read stage: frames from the replication stream decoded, assembled into transactions,
//! replays dropped, and batches cut and handed to the transforms; a resync's chunks taken in
//! turn with the stream.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::budget::{Budget, PEAK_COPIES};
use super::error::PipelineError;
use super::feed::{Feed, Received};
use super::health::Pending;
use super::messages::{Advance, Cut, Progress, Shutdown};
use super::{PROGRESS_EVERY, load, sleep_until};
use crate::Lsn;
use crate::lake::commit::Checkpoint;
use crate::source::catalog::Catalog;
use crate::source::replication::ReplicationError;
use crate::stream::assemble::Spilled;
use crate::stream::change::{Batch, Transaction};
use crate::stream::load::{LoadState, TableLoad};
use crate::stream::read::{Frame, IdleFacts, Landed, ReadAction, ReadError, ReadMachine};

/// How often the reader looks whether it is idle and the server's WAL moved on.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The read stage: the replication stream (or the trigger journal) fed to the read machine,
/// whose cuts it hands on. It pauses (and with it the socket) while the budget is full.
pub(super) struct Reader {
    pub(super) feed: Feed,
    /// Decoding, assembling, dropping replays, batching and numbering the flushes.
    pub(super) machine: ReadMachine,
    /// Resolves user-defined types and array dimensions of the relations that arrive.
    pub(super) catalog: Catalog,
    pub(super) budget: Budget,
    /// Time spent reading back spilled transactions, not yet counted as decoding.
    pub(super) spill_read: Duration,
    pub(super) output: mpsc::Sender<Cut>,
    pub(super) shutdown: Shutdown,
    pub(super) progress: watch::Sender<Progress>,
    /// How a resync's load reads.
    pub(super) load_settings: load::LoadSettings,
    /// A resync's load under way, its chunks handed on between the stream's batches.
    pub(super) loading: Option<load::Loading>,
    /// A load to start once the batch asking for it is handed on (whose entry records it, so
    /// that a crash before the load's first entry still knows it is due).
    pub(super) to_load: Option<load::LoadJob>,
    /// With a failover slot: the running-xacts records the primary was asked for, each to be
    /// confirmed past promptly (see `standby_watch.rs`); `None` without.
    pub(super) records: Option<watch::Receiver<Option<Lsn>>>,
}

/// What the sink held at start, as the read machine needs it.
pub(super) fn landed(checkpoint: &Checkpoint) -> Landed {
    Landed {
        next_sequence: checkpoint.next_sequence(),
        last_commit: checkpoint.last_commit_lsn(),
        confirmed: checkpoint.confirmed(),
        // The checkpoint's own rule, asked of the highest commit it calls a replay.
        replays_through: checkpoint
            .is_replay(checkpoint.last_commit_lsn())
            .then_some(checkpoint.last_commit_lsn()),
    }
}

impl From<ReadError> for PipelineError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Decode { lsn, source } => PipelineError::Decode { lsn, source },
            ReadError::Assemble(error) => PipelineError::Assemble(error),
        }
    }
}

/// The next running-xacts record to confirm past; pending for ever without one (or once the
/// task that asks for them is gone).
async fn next_record(records: &mut Option<watch::Receiver<Option<Lsn>>>) -> Lsn {
    if let Some(receiver) = records {
        while receiver.changed().await.is_ok() {
            if let Some(lsn) = *receiver.borrow_and_update() {
                return lsn;
            }
        }
        *records = None;
    }
    std::future::pending().await
}

/// Frames arrived and not yet all decoded: when they arrived, and the time since spent handing
/// on, which is not decoding.
struct Decoding {
    since: Instant,
    landing: Duration,
}

impl Reader {
    /// The read stage: a first full load, when one is due, then the stream until a stop is
    /// requested; returns the feed.
    pub(super) async fn stage(
        mut self,
        first_load: Option<load::LoadJob>,
    ) -> Result<Feed, PipelineError> {
        if let Some(job) = first_load {
            let loaded = load::run(
                job,
                self.load_settings.clone(),
                self.machine.next_sequence(),
                self.budget.clone(),
                self.output.clone(),
                self.shutdown.clone(),
                self.progress.clone(),
            )
            .await?;
            // Every table in the lake as of one snapshot: what committed before it is in
            // there already.
            self.machine.loaded(loaded.next_sequence, loaded.covers_all);
            if loaded.stopped {
                return Ok(self.feed);
            }
        }
        self.run().await
    }

    /// Read until a stop is requested, then cut what is pending; returns the feed.
    async fn run(mut self) -> Result<Feed, PipelineError> {
        let mut frames: Vec<Frame> = Vec::new();
        let mut shutdown = self.shutdown.clone();
        let mut idle_check = tokio::time::interval(IDLE_CHECK);
        idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut decoding = None;
        self.start_load().await?;
        loop {
            let deadline = self
                .machine
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            // Not biased: while a resync loads, its chunks and the stream take turns.
            tokio::select! {
                changed = shutdown.changed() => {
                    // A dropped controller can never ask again: treat it as a stop request.
                    if changed.is_err() || *shutdown.borrow() { break }
                }
                _ = sleep_until(deadline) => {}
                lsn = next_record(&mut self.records) => self.machine.advance_past(lsn),
                _ = idle_check.tick() => {
                    let facts = IdleFacts {
                        confirmed: self.feed.confirmer().confirmed(),
                        idle_position: self.feed.idle_position(),
                        reply_wanted: self.feed.reply_wanted(),
                    };
                    self.machine.handle_idle(facts, Instant::now());
                }
                received = self.feed.recv(&mut frames) => {
                    let lost = match received? {
                        Received::Frames => {
                            let now = Instant::now();
                            self.machine.handle_frames(frames.drain(..), now);
                            decoding = Some(Decoding {
                                since: now,
                                landing: Duration::ZERO,
                            });
                            None
                        }
                        Received::Lost(lost) => Some(Some(lost)),
                        Received::Reread => Some(None),
                    };
                    if let Some(lost) = lost {
                        frames.clear();
                        if !self.resume(lost.as_ref()).await? {
                            // Stopped while reconnecting, or a later stage stopped (its error
                            // is the pipeline's): nothing is pending to land.
                            return Ok(self.feed);
                        }
                    }
                }
                ready = chunk_ready(&mut self.loading) => {
                    if !self.hand_over_chunk(ready?).await? {
                        return Ok(self.feed);
                    }
                }
            }
            if !self.drive(&mut decoding).await? {
                // A later stage stopped; its error is the pipeline's.
                return Ok(self.feed);
            }
            self.start_load().await?;
        }
        // Land what is committed and pending; an open transaction is replayed next time.
        self.machine.finish(Instant::now());
        self.drive(&mut decoding).await?;
        Ok(self.feed)
    }

    /// The connection was lost: hand on the whole transactions already received (the new
    /// stream's replays of them are dropped), forget the one in progress (the server sends it
    /// again) and open a new stream (`lost` is the slot's error; the journal's reader opens
    /// its own). `false` when a stop came first, or a later stage stopped.
    ///
    /// Handing on first also means a writer that lost its slot to another instance learns it
    /// at that flush's commit and stops, instead of retrying the slot for as long as the other
    /// holds it.
    async fn resume(&mut self, lost: Option<&ReplicationError>) -> Result<bool, PipelineError> {
        self.machine.handle_lost(Instant::now());
        if !self.drive(&mut None).await? {
            return Ok(false);
        }
        let handed_end = self.machine.handed_end();
        let (
            Feed::Slot {
                stream, reconnect, ..
            },
            Some(lost),
        ) = (&mut self.feed, lost)
        else {
            return Ok(true);
        };
        match reconnect
            .reopen(lost, handed_end, &self.shutdown, &self.progress)
            .await?
        {
            Some(reopened) => {
                *stream = reopened;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Carry out what the machine asks for until it waits for more input; `decoding` times
    /// the frames handed to it. `false` when a later stage is gone.
    async fn drive(&mut self, decoding: &mut Option<Decoding>) -> Result<bool, PipelineError> {
        while let Some(action) = self.machine.poll_action(Instant::now())? {
            let started = Instant::now();
            let handed = match action {
                ReadAction::Resolve(relation) => {
                    let types = self.catalog.resolve(&relation).await?;
                    let key = self.catalog.row_key(&relation).await?;
                    self.machine.handle_resolved(relation.id, types, key);
                    // Resolving a relation is decoding.
                    continue;
                }
                ReadAction::Resync {
                    lsn,
                    tables,
                    unknown,
                } => {
                    self.note_resync(lsn, tables, unknown);
                    true
                }
                ReadAction::BadResync { lsn, error } => {
                    tracing::warn!(%lsn, "ignoring it: {error}");
                    true
                }
                ReadAction::Cut {
                    batch,
                    sequence,
                    bytes,
                } => self.cut(batch, sequence, bytes).await,
                ReadAction::LandSpilled { spilled, sequence } => {
                    self.land_spilled(spilled, sequence).await?
                }
                ReadAction::Advance {
                    sequence,
                    last_commit,
                    end,
                } => self.advance(sequence, last_commit, end).await,
                ReadAction::Decoded { replays } => {
                    let Some(Decoding { since, landing }) = decoding.take() else {
                        continue;
                    };
                    // Reading back a spilled transaction is decoding; waiting for the budget
                    // is not.
                    let decoded = since.elapsed().saturating_sub(landing)
                        + std::mem::take(&mut self.spill_read);
                    self.progress.send_if_modified(|p| {
                        p.stages.decode += decoded;
                        p.replays_skipped += replays;
                        // Subscribers hear of replays; decode time is read along with a flush.
                        replays > 0
                    });
                    continue;
                }
            };
            if let Some(decoding) = decoding {
                decoding.landing += started.elapsed();
            }
            if !handed {
                return Ok(false);
            }
        }
        self.note_gathering();
        Ok(true)
    }

    /// Tell the lag gauge which transaction the batch being gathered starts with.
    fn note_gathering(&self) {
        let first = self.machine.gathering().map(pending);
        self.progress.send_if_modified(|p| {
            p.backlog.gathering(first);
            false
        });
    }

    /// Tell the lag gauge that a flush starting with `first` was handed on.
    fn note_handed_on(&self, first: Pending) {
        self.progress.send_if_modified(|p| {
            p.backlog.handed_on(first);
            false
        });
    }

    /// Hand on an advance: flush `sequence` records that the server's WAL moved on to `end`.
    /// `false` when the next stage is gone.
    async fn advance(&mut self, sequence: u64, last_commit: Lsn, end: Lsn) -> bool {
        tracing::debug!(%end, sequence, "idle: recording that the server's WAL moved on");
        let share = self.budget.take(0).await;
        self.output
            .send(Cut {
                batch: Batch::default(),
                sequence,
                part: 0,
                last: true,
                advance: Some(Advance { last_commit, end }),
                load: None,
                state: self.load_state(),
                share,
            })
            .await
            .is_ok()
    }

    /// Hand on a large transaction as flush `sequence` in parts, each taking its share of the
    /// budget as it is read back. `false` when a later stage is gone.
    async fn land_spilled(
        &mut self,
        mut spilled: Box<Spilled>,
        sequence: u64,
    ) -> Result<bool, PipelineError> {
        tracing::info!(
            xid = spilled.xid,
            commit = %spilled.commit_lsn,
            sequence,
            spilled_mib = spilled.spilled_bytes >> 20,
            "landing a large transaction from disk in parts; it becomes visible at once when the last is committed"
        );
        self.note_handed_on(Pending {
            end: spilled.end_lsn,
            commit_time: spilled.commit_time,
        });
        let mut messages = std::mem::take(&mut spilled.preceding);
        let (mut part, mut changes) = (0u32, 0u64);
        let mut said = Instant::now();
        loop {
            // Room first, then the part: what is read back is always inside the budget.
            let share = self
                .budget
                .take(spilled.part_bytes().saturating_mul(PEAK_COPIES))
                .await;
            let reading = Instant::now();
            let Some(next) = spilled.next_part()? else {
                unreachable!("the part before was not the last")
            };
            self.spill_read += reading.elapsed();
            changes += next.transaction.changes.len() as u64;
            let cut = Cut {
                batch: Batch {
                    transactions: vec![next.transaction],
                    messages: std::mem::take(&mut messages),
                },
                sequence,
                part,
                last: next.last,
                advance: None,
                load: None,
                state: self.load_state(),
                share,
            };
            if self.output.send(cut).await.is_err() {
                return Ok(false);
            }
            if next.last {
                break;
            }
            part += 1;
            if said.elapsed() >= PROGRESS_EVERY {
                said = Instant::now();
                tracing::info!(
                    xid = spilled.xid,
                    sequence,
                    parts = part,
                    changes,
                    "landing a large transaction"
                );
            }
        }
        tracing::info!(
            xid = spilled.xid,
            sequence,
            parts = part + 1,
            changes,
            "large transaction handed on"
        );
        Ok(true)
    }

    /// Hand on `batch` as flush `sequence` once the budget has room for its `bytes`; `false`
    /// when the next stage is gone.
    async fn cut(&mut self, batch: Batch, sequence: u64, bytes: usize) -> bool {
        let waited = Instant::now();
        let share = self.budget.take(bytes.saturating_mul(PEAK_COPIES)).await;
        if waited.elapsed() > Duration::from_secs(1) {
            tracing::debug!(waited = ?waited.elapsed(), "reading paused while the in-flight budget was full");
        }
        if let Some(first) = batch.transactions.first() {
            self.note_handed_on(pending(first));
        }
        let state = self.load_state();
        self.output
            .send(Cut {
                batch,
                sequence,
                part: 0,
                last: true,
                advance: None,
                load: None,
                state,
                share,
            })
            .await
            .is_ok()
    }
}

impl Reader {
    /// Note the tables a `tributary resync` message at `lsn` asks for, before the batch
    /// holding it is handed on, so that its entry records them: in the state of the load under
    /// way, or as the load to start once the batch is handed on.
    fn note_resync(&mut self, lsn: Lsn, tables: Vec<String>, unknown: Vec<String>) {
        if !unknown.is_empty() {
            tracing::warn!(%lsn, tables = ?unknown, "a resync names tables this pipeline does not track; ignoring them");
        }
        if tables.is_empty() {
            return;
        }
        tracing::info!(tables = %tables.join(", "), %lsn, "resync requested: loading the tables again while streaming goes on");
        if let Some(loading) = &mut self.loading {
            loading.request(tables, lsn);
            return;
        }
        let job = self.to_load.get_or_insert_with(|| load::LoadJob {
            anchor: None,
            state: LoadState::pending(&[], true),
        });
        for table in tables {
            if !job.state.tables.iter().any(|t| t.table == table) {
                job.state.tables.push(TableLoad::pending(table));
            }
        }
    }

    /// What an entry written now records of a load: the one under way, or the one about to
    /// start.
    fn load_state(&self) -> Option<LoadState> {
        match (&self.loading, &self.to_load) {
            (Some(loading), _) => Some(loading.state().clone()),
            (None, Some(job)) => Some(job.state.clone()),
            (None, None) => None,
        }
    }

    /// Start the load due, if one is and none runs: take its snapshot and start its
    /// connections reading.
    async fn start_load(&mut self) -> Result<(), PipelineError> {
        if self.loading.is_some() {
            return Ok(());
        }
        let Some(job) = self.to_load.take() else {
            return Ok(());
        };
        self.loading =
            Some(load::Loading::start(job, &self.load_settings, self.progress.clone()).await?);
        Ok(())
    }

    /// Hand on the load's next chunk between the stream's batches (`ready`), or end the load
    /// once every chunk was handed on, starting the next one if tables were asked for
    /// meanwhile. `false` when a later stage is gone.
    async fn hand_over_chunk(&mut self, ready: bool) -> Result<bool, PipelineError> {
        let loading = self
            .loading
            .as_mut()
            .expect("a chunk comes only from a load");
        if !ready {
            let next = loading.next_job();
            if let Some(finished) = self.loading.take() {
                finished.finish();
            }
            self.to_load = next;
            self.start_load().await?;
            return Ok(true);
        }
        // The chunk's entry keeps the positions of the entry before it.
        let ticket = self.machine.load_chunk(Instant::now());
        loading
            .hand_over(
                ticket.sequence,
                ticket.positions,
                &self.budget,
                &self.output,
            )
            .await
    }
}

/// Where a transaction ends and when it committed, for the lag gauge.
fn pending(transaction: &Transaction) -> Pending {
    Pending {
        end: transaction.end_lsn,
        commit_time: transaction.commit_time,
    }
}

/// Whether the load under way has its next chunk ready (`true`) or handed every chunk on
/// (`false`); never resolves without a load. Cancel-safe.
async fn chunk_ready(loading: &mut Option<load::Loading>) -> Result<bool, PipelineError> {
    match loading {
        Some(loading) => loading.ready().await,
        None => std::future::pending().await,
    }
}
