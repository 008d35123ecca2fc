//! The read stage: frames from the replication stream decoded, assembled into transactions,
//! replays dropped, and batches cut and handed to the transforms; a resync's chunks taken in
//! turn with the stream.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::budget::{Budget, PEAK_COPIES};
use super::error::PipelineError;
use super::messages::{Advance, Cut, Progress, Shutdown};
use super::{PROGRESS_EVERY, load, reconnect, sleep_until};
use crate::Lsn;
use crate::lake::commit::Checkpoint;
use crate::source::catalog::Catalog;
use crate::source::replication::{ReplicationError, ReplicationStream, XLogData};
use crate::stream::assemble::{Assembler, Completed, Spilled};
use crate::stream::batch::Batcher;
use crate::stream::change::Batch;
use crate::stream::load::{LoadState, ResyncRequest, TableLoad};
use crate::wire::pgoutput::{Decoder, LogicalMessage};

/// Frames taken from the replication driver per wake-up.
const RECV_BATCH: usize = 1024;
/// How often the reader looks whether it is idle and the server's WAL moved on.
const IDLE_CHECK: Duration = Duration::from_secs(1);
/// An idle pipeline records that the server's WAL moved on (an advance entry) once it moved
/// this far past the confirmed position (a WAL segment)...
const ADVANCE_BYTES: u64 = 16 << 20;
/// ...and at most this often, so that an idle slot retains about a segment and a minute of WAL
/// while the log gains at most one entry a minute...
const ADVANCE_EVERY: Duration = Duration::from_secs(60);
/// ...and only after nothing was handed on for this long: a busy pipeline confirms as it lands.
const ADVANCE_IDLE: Duration = Duration::from_secs(10);

/// The read stage: the replication stream, decoding, assembling, dropping replays and cutting
/// batches. It pauses (and with it the socket) while the budget is full.
pub(super) struct Reader {
    pub(super) stream: ReplicationStream,
    /// Opens the stream again when the connection is lost.
    pub(super) reconnect: reconnect::Reconnect,
    pub(super) decoder: Decoder,
    pub(super) proto_version: u32,
    pub(super) assembler: Assembler,
    /// The commit LSN of the last transaction handed on: after a reconnect, the server sends
    /// again everything not yet confirmed, and what was already handed on is a replay.
    pub(super) handed: Lsn,
    /// The end LSN of the last flush handed on: everything handed on has landed once the
    /// confirmed position reaches it.
    pub(super) handed_end: Lsn,
    /// When the last advance was handed on.
    pub(super) advanced: Option<Instant>,
    /// When the last flush was handed on (or the reader started).
    pub(super) last_handed: Instant,
    pub(super) batcher: Batcher,
    /// Resolves user-defined types and array dimensions of the relations that arrive.
    pub(super) catalog: Catalog,
    /// What the sink held at start: transactions at or below it are replays.
    pub(super) checkpoint: Checkpoint,
    pub(super) next_sequence: u64,
    pub(super) budget: Budget,
    /// Time spent reading back spilled transactions, not yet counted as decoding.
    pub(super) spill_read: Duration,
    pub(super) output: mpsc::Sender<Cut>,
    pub(super) shutdown: Shutdown,
    pub(super) progress: watch::Sender<Progress>,
    /// How a resync's load reads.
    pub(super) load_settings: load::LoadSettings,
    /// The tables the pipeline tracks.
    pub(super) tracked: Vec<String>,
    /// A resync's load under way, its chunks handed on between the stream's batches.
    pub(super) loading: Option<load::Loading>,
    /// A load to start once the batch asking for it is handed on (whose entry records it, so
    /// that a crash before the load's first entry still knows it is due).
    pub(super) to_load: Option<load::LoadJob>,
}

impl Reader {
    /// The read stage: a first full load, when one is due, then the stream until a stop is
    /// requested; returns the stream.
    pub(super) async fn stage(
        mut self,
        first_load: Option<load::LoadJob>,
    ) -> Result<ReplicationStream, PipelineError> {
        if let Some(job) = first_load {
            let loaded = load::run(
                job,
                self.load_settings.clone(),
                self.next_sequence,
                self.budget.clone(),
                self.output.clone(),
                self.shutdown.clone(),
                self.progress.clone(),
            )
            .await?;
            self.next_sequence = loaded.next_sequence;
            if let Some(at) = loaded.covers_all {
                // Every table is in the lake as of the snapshot: what committed before it
                // is in there already.
                self.handed = self.handed.max(at);
            }
            if loaded.stopped {
                return Ok(self.stream);
            }
        }
        self.run().await
    }

    /// Read until a stop is requested, then cut what is pending; returns the stream.
    async fn run(mut self) -> Result<ReplicationStream, PipelineError> {
        let mut frames: Vec<XLogData> = Vec::with_capacity(RECV_BATCH);
        let mut shutdown = self.shutdown.clone();
        let mut idle_check = tokio::time::interval(IDLE_CHECK);
        idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.start_load().await?;
        loop {
            let deadline = self.batcher.deadline().map(tokio::time::Instant::from_std);
            // Not biased: while a resync loads, its chunks and the stream take turns.
            tokio::select! {
                changed = shutdown.changed() => {
                    // A dropped controller can never ask again: treat it as a stop request.
                    if changed.is_err() || *shutdown.borrow() { break }
                }
                _ = sleep_until(deadline) => {}
                _ = idle_check.tick() => {
                    if !self.advance_if_idle().await {
                        return Ok(self.stream);
                    }
                }
                received = self.stream.recv_many(&mut frames, RECV_BATCH) => {
                    let lost = match received {
                        // The server finished the stream: it is going away.
                        Ok(0) => Some(ReplicationError::ServerEnded),
                        Ok(_) => None,
                        Err(error) if error.is_transient() => Some(error),
                        Err(error) => return Err(error.into()),
                    };
                    if let Some(lost) = lost {
                        frames.clear();
                        if !self.resume(&lost).await? {
                            // Stopped while reconnecting, or a later stage stopped (its error
                            // is the pipeline's): nothing is pending to land.
                            return Ok(self.stream);
                        }
                    } else if !self.decode(&mut frames).await? {
                        // A later stage stopped; its error is the pipeline's.
                        return Ok(self.stream);
                    }
                }
                ready = chunk_ready(&mut self.loading) => {
                    if !self.hand_over_chunk(ready?).await? {
                        return Ok(self.stream);
                    }
                }
            }
            if self.batcher.is_due(Instant::now()) && !self.cut().await {
                // A later stage stopped; its error is the pipeline's.
                return Ok(self.stream);
            }
            self.start_load().await?;
        }
        // Land what is committed and pending; an open transaction is replayed next time.
        if !self.batcher.is_empty() {
            self.cut().await;
        }
        Ok(self.stream)
    }

    /// The connection was lost: hand on the whole transactions already received (the new
    /// stream's replays of them are dropped), forget the one in progress (the server sends it
    /// again) and open a new stream. `false` when a stop came first, or a later stage stopped.
    ///
    /// Handing on first also means a writer that lost its slot to another instance learns it
    /// at that flush's commit and stops, instead of retrying the slot for as long as the other
    /// holds it.
    async fn resume(&mut self, lost: &ReplicationError) -> Result<bool, PipelineError> {
        self.assembler.reset();
        if !self.batcher.is_empty() && !self.cut().await {
            return Ok(false);
        }
        // The new session sends its relations again before their rows.
        self.decoder = Decoder::new(self.proto_version);
        match self.reconnect.reopen(lost, &self.shutdown).await? {
            Some(stream) => {
                self.stream = stream;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// With nothing held, nothing pending and everything handed on landed, hand on an advance
    /// to where the server's WAL went (other databases and tables write it too), so that the
    /// slot does not retain it; at once when the server asks for a reply past the confirmed
    /// position (it shuts down). `false` when the next stage is gone.
    async fn advance_if_idle(&mut self) -> bool {
        let confirmed = self.reconnect.confirmer.confirmed();
        if !self.batcher.is_empty() || !self.assembler.is_idle() || confirmed < self.handed_end {
            return true;
        }
        let Some(end) = self.stream.idle_position() else {
            return true;
        };
        // A server shutting down waits for the confirmed position to reach everything its
        // walsender sent, asking for a reply until it does: then the advance is due at once,
        // or the shutdown never finishes.
        let asked = self.stream.reply_wanted() > confirmed;
        let due = asked
            || (end.0 >= confirmed.0.saturating_add(ADVANCE_BYTES)
                && self.last_handed.elapsed() >= ADVANCE_IDLE
                && self.advanced.is_none_or(|t| t.elapsed() >= ADVANCE_EVERY));
        if end <= confirmed || !due {
            return true;
        }
        self.advanced = Some(Instant::now());
        self.handed_end = end;
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        tracing::debug!(%end, sequence, "idle: recording that the server's WAL moved on");
        let advance = Advance {
            last_commit: self.handed.max(self.checkpoint.last_commit_lsn()),
            end,
        };
        let share = self.budget.take(0).await;
        self.output
            .send(Cut {
                batch: Batch::default(),
                sequence,
                part: 0,
                last: true,
                advance: Some(advance),
                load: None,
                state: self.load_state(),
                share,
            })
            .await
            .is_ok()
    }

    /// Decode and assemble what arrived; `false` when a later stage is gone.
    async fn decode(&mut self, frames: &mut Vec<XLogData>) -> Result<bool, PipelineError> {
        let now = Instant::now();
        let mut replays = 0;
        let mut landing = Duration::ZERO;
        for frame in frames.drain(..) {
            let message =
                self.decoder
                    .decode_bytes(frame.data)
                    .map_err(|source| PipelineError::Decode {
                        lsn: frame.wal_start,
                        source,
                    })?;
            if let LogicalMessage::Relation { relation, .. } = &message
                && let Some(types) = self.catalog.resolve(relation).await?
            {
                self.decoder.resolve_types(relation.id, types);
            }
            let Some(done) = self.assembler.push(message)? else {
                continue;
            };
            if self.checkpoint.is_replay(done.commit_lsn()) || done.commit_lsn() <= self.handed {
                replays += 1;
                continue;
            }
            match done {
                Completed::Whole(assembled) => self.batcher.push(assembled, now),
                Completed::Spilled(spilled) => {
                    let started = Instant::now();
                    let handed = self.land_spilled(spilled).await?;
                    landing += started.elapsed();
                    if !handed {
                        return Ok(false);
                    }
                }
            }
        }
        // Reading back a spilled transaction is decoding; waiting for the budget is not.
        let decoded = now.elapsed().saturating_sub(landing) + std::mem::take(&mut self.spill_read);
        self.progress.send_if_modified(|p| {
            p.stages.decode += decoded;
            p.replays_skipped += replays;
            // Subscribers hear of replays; decode time is read along with a flush.
            replays > 0
        });
        Ok(true)
    }

    /// Hand on a large transaction as one flush in parts, each taking its share of the budget
    /// as it is read back: what is pending goes first, as a flush of its own. `false` when a
    /// later stage is gone.
    async fn land_spilled(&mut self, mut spilled: Spilled) -> Result<bool, PipelineError> {
        if !self.batcher.is_empty() && !self.cut().await {
            return Ok(false);
        }
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.handed = spilled.commit_lsn;
        self.handed_end = spilled.end_lsn;
        self.last_handed = Instant::now();
        tracing::info!(
            xid = spilled.xid,
            commit = %spilled.commit_lsn,
            sequence,
            spilled_mib = spilled.spilled_bytes >> 20,
            "landing a large transaction from disk in parts; it becomes visible at once when the last is committed"
        );
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

    /// Cut the pending batch and hand it on once the budget has room; `false` when the next
    /// stage is gone.
    async fn cut(&mut self) -> bool {
        let bytes = self.batcher.held_bytes();
        let batch = self
            .batcher
            .take()
            .expect("a due batcher holds transactions");
        self.note_resync(&batch);
        if let Some((_, last)) = batch.lsn_range() {
            self.handed = last;
        }
        if let Some(t) = batch.transactions.last() {
            self.handed_end = t.end_lsn;
        }
        self.last_handed = Instant::now();
        let waited = Instant::now();
        let share = self.budget.take(bytes.saturating_mul(PEAK_COPIES)).await;
        if waited.elapsed() > Duration::from_secs(1) {
            tracing::debug!(waited = ?waited.elapsed(), "reading paused while the in-flight budget was full");
        }
        let sequence = self.next_sequence;
        self.next_sequence += 1;
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
    /// Note the tables a `tributary resync` message in `batch` asks for, before the batch is
    /// handed on, so that its entry records them: in the state of the load under way, or as
    /// the load to start once the batch is handed on.
    fn note_resync(&mut self, batch: &Batch) {
        for message in batch.transactions.iter().flat_map(|t| &t.messages) {
            let Some(request) = ResyncRequest::from_message(&message.prefix, &message.content)
            else {
                continue;
            };
            let request = match request {
                Ok(request) => request,
                Err(e) => {
                    tracing::warn!(lsn = %message.lsn, "ignoring it: {e}");
                    continue;
                }
            };
            let (tables, unknown) = request.select(&self.tracked);
            if !unknown.is_empty() {
                tracing::warn!(lsn = %message.lsn, tables = ?unknown, "a resync names tables this pipeline does not track; ignoring them");
            }
            if tables.is_empty() {
                continue;
            }
            tracing::info!(tables = %tables.join(", "), lsn = %message.lsn, "resync requested: loading the tables again while streaming goes on");
            if let Some(loading) = &mut self.loading {
                loading.request(tables, message.lsn);
                continue;
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
        let positions = (
            self.handed.max(self.checkpoint.last_commit_lsn()),
            self.handed_end.max(self.checkpoint.confirmed()),
        );
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.last_handed = Instant::now();
        loading
            .hand_over(sequence, positions, &self.budget, &self.output)
            .await
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
