//! The running pipeline: start-up (`pipeline/start.rs`), then four stages that run side by side,
//! joined by short queues, data flowing one way:
//!
//! ```text
//! read (socket, decode, assemble, cut) ─► transform (plugins) ─► encode (Parquet) ─► land
//!   ▲                                                                               │
//!   └──────────────── confirm: the end of the last committed flush ◄────────────────┘
//! ```
//!
//! While flush *n* uploads, flush *n + 1* is transformed and encoded and the slot is read on.
//! Memory is bounded by the in-flight budget (`flush.in_flight_mib`): a batch takes its
//! decoded size when the reader cuts it and gives it back when it has landed, and the reader
//! waits for room before it reads on, so the socket pauses while the replication driver keeps
//! answering the server. Landing is the flush machine ([`crate::flush`]) carried out by one IO
//! task (`pipeline/land.rs`): intents and uploads may run ahead, commit entries and confirms go strictly
//! in sequence order. Sink failures are retried with backoff for as long as they last;
//! transform and encode failures stop the pipeline with nothing past the last commit confirmed.
//! A commit that finds its sequence number taken means another instance has taken over: this
//! one removes its own files of the flushes it can no longer commit, and stops.

mod land;
mod load;
pub(crate) mod position;
mod reconnect;
mod reload;
mod retry;
mod start;
mod transform;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::Lsn;
use crate::assemble::{AssembleError, Assembler, Completed, SpillSettings, Spilled};
use crate::batch::{BatchLimits, Batcher};
use crate::catalog::{Catalog, CatalogError};
use crate::change::{Batch, OutputBatch};
use crate::commit::{Checkpoint, CommitEntry, CommitError, FileEntry, Writer, data_file_path};
use crate::config::PipelineConfig;
use crate::encode::{EncodeError, Encoder};
use crate::failpoint;
use crate::flush::{EncodedFlush, FlushMachine};
use crate::load::{LoadState, ResyncRequest, TableLoad};
use crate::pgoutput::{DecodeError, Decoder, LogicalMessage};
use crate::provision::ProvisionError;
use crate::replication::{ReplicationError, ReplicationStream, XLogData};
use crate::sink::SinkError;
use crate::transform::{PluginInfo, Tallies, TransformChain, TransformError};

/// The highest pgoutput protocol version this pipeline speaks. Streaming of in-progress
/// transactions needs 2 (PostgreSQL 14); 3 (15) adds two-phase and 4 (16) parallel streaming,
/// neither of which is asked for, so the newest is taken only to keep up with the server.
const PROTO_VERSION: u32 = 4;
/// Frames taken from the replication driver per wake-up.
const RECV_BATCH: usize = 1024;
/// How long start-up waits by default for another consumer to release the slot: long enough
/// for a previous instance's walsender to go away after it stopped.
pub const SLOT_GRACE: Duration = Duration::from_secs(15);

/// The pgoutput protocol version to ask a server for, from its `server_version_num`; an
/// unknown version gets protocol 1, which every supported server speaks.
fn proto_version(server_version_num: Option<u32>) -> u32 {
    match server_version_num {
        Some(v) if v >= 160_000 => PROTO_VERSION,
        Some(v) if v >= 150_000 => 3,
        Some(v) if v >= 140_000 => 2,
        _ => 1,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    /// The prerequisite check found several problems: all of them, each with its fix.
    #[error("{}", crate::check::describe_failures(.0))]
    Prerequisites(crate::check::Report),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("malformed pgoutput message at {lsn}: {source}")]
    Decode {
        lsn: Lsn,
        #[source]
        source: DecodeError,
    },
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("full load: {0}")]
    Load(#[from] crate::snapshot::SnapshotError),
    #[error(
        "source.binary = true needs pgoutput protocol 2 (PostgreSQL 14 or newer); this server speaks protocol {0}: set source.binary = false"
    )]
    BinaryUnsupported(u32),
    #[error(
        "flush.spill_dir {dir} cannot take a file: {reason}; large transactions are held there \
         until they commit: name a directory this user can write to"
    )]
    SpillDir { dir: String, reason: String },
    #[error(transparent)]
    Transform(#[from] TransformError),
    #[error("parquet encoder settings: {0}")]
    EncoderSettings(#[from] EncodeError),
    #[error("encoding flush {sequence} (commits {first}..{last}): {source}")]
    Encode {
        sequence: u64,
        first: Lsn,
        last: Lsn,
        #[source]
        source: EncodeError,
    },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(
        "stopped while {what} kept failing: nothing past {confirmed} was confirmed, and the unfinished flush is cleaned up and replayed at the next start"
    )]
    Interrupted { what: &'static str, confirmed: Lsn },
    /// The replication connection came back from another server, or from the same one on
    /// another timeline (a failover or a recovery), which start-up would have refused.
    #[error(
        "the replication connection came back to {now}, but the pipeline started on {was} (a \
         failover, a recovery or another server behind the same address): stopped before \
         reading from it, nothing past {confirmed} was confirmed. Start `tributary run` again: \
         it checks the commit log against this server and says how to accept the move if the \
         lake may differ from it"
    )]
    ServerMoved {
        was: String,
        now: String,
        confirmed: Lsn,
    },
    #[error(
        "{what} kept failing for {failing_for_secs} s ({attempts} attempts), longer than \
         retry.limit_secs = {limit_secs} allows: {error}; stopped, nothing past {confirmed} was \
         confirmed, and the next start resumes there (remove retry.limit_secs to retry for as \
         long as a fault lasts)"
    )]
    GaveUp {
        what: &'static str,
        failing_for_secs: u64,
        attempts: u32,
        limit_secs: u64,
        error: String,
        confirmed: Lsn,
    },
    #[error(
        "stopped after the sink gave no answer for {seconds} s: nothing past {confirmed} was confirmed, and the unfinished flush is cleaned up and replayed at the next start"
    )]
    StopTimedOut { seconds: u64, confirmed: Lsn },
    #[error("a blocking task failed: {0}")]
    Task(String),
    #[error("{0}")]
    Failpoints(String),
}

/// How a run was started.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Start across this one gap between the sink's last commit and the slot: the exact text
    /// the refusal printed (see [`crate::commit::gap_token`]).
    pub accept_gap: Option<String>,
    /// Wait for as long as another consumer holds the slot, instead of giving up after
    /// `slot_grace`.
    pub wait_for_slot: bool,
    /// How long to wait for a slot another consumer holds before refusing to start.
    pub slot_grace: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            accept_gap: None,
            wait_for_slot: false,
            slot_grace: SLOT_GRACE,
        }
    }
}

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
    /// What each plugin counted in the flushes committed so far, by plugin name.
    pub plugins: Tallies,
    /// Attempts of sink steps (intents, uploads, commit entries) that failed and were retried.
    pub sink_retries: u64,
    /// A sink step is failing and being retried right now.
    pub sink_failing: bool,
    /// A full load under way: what it has read so far.
    pub load: Option<crate::load::LoadProgress>,
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
    /// Writing the commit entry and removing the intent.
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

/// Run the pipeline until `shutdown` turns true or an error stops it.
pub async fn run(
    config: PipelineConfig,
    options: RunOptions,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
) -> Result<Progress, PipelineError> {
    failpoint::announce().map_err(PipelineError::Failpoints)?;
    // Boxed as `dyn Send` so the compiler checks Send here, with concrete lifetimes; checked
    // through `tokio::spawn` instead, it trips over the borrows held across awaits.
    let start: BoxFuture<'_, _> = Box::pin(start::start(&config, &options, &shutdown));
    let Some(started) = start.await? else {
        tracing::info!("stopped before the slot was free");
        return Ok(progress.borrow().clone());
    };
    progress.send_modify(|p| {
        p.last_entry = Some(started.opened.clone());
        p.streaming = true;
    });
    let stages: BoxFuture<'_, _> =
        Box::pin(run_stages(config, started, shutdown, progress.clone()));
    let stream = stages.await?;
    let landed = progress.borrow().clone();
    // A clean goodbye: the final status update carries the last confirmed position.
    stream.shutdown().await?;
    Ok(landed)
}

/// The stages, each a future of its own, joined by bounded queues; the in-flight budget bounds
/// what they hold together. Returns the stream once everything read has landed.
async fn run_stages(
    config: PipelineConfig,
    started: start::Started,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
) -> Result<ReplicationStream, PipelineError> {
    let flush = &config.flush;
    let writer = started.log.writer().clone();
    let budget = Budget::new(flush.in_flight_mib);
    let (cut_tx, cut_rx) = mpsc::channel(STAGE_QUEUE);
    let (transformed_tx, transformed_rx) = mpsc::channel(STAGE_QUEUE);
    let (encoded_tx, encoded_rx) = mpsc::channel(STAGE_QUEUE);
    let machine = FlushMachine::new(
        started.checkpoint,
        writer.clone(),
        config.source.slot.clone(),
        started.plugins.clone(),
    )
    .with_retry_limit(config.retry.limit())
    .with_timeline(started.timeline);
    let confirmer = started.stream.confirmer();
    let load_settings = load::LoadSettings {
        pg: started.reconnect.pg.clone(),
        publication: config.source.publication.clone(),
        binary: config.source.binary,
        temporary_slot: crate::snapshot::temporary_slot_name("load"),
        parallelism: config.load.parallelism,
        chunk_pages: u32::try_from((config.load.chunk_mib << 20) / 8192).unwrap_or(u32::MAX),
        part_bytes: match started.transforms.wants_whole_transactions().is_empty() {
            true => flush.chunk_mib << 20,
            false => usize::MAX,
        },
        positions: (
            started.checkpoint.last_commit_lsn(),
            started.checkpoint.confirmed(),
        ),
    };
    let mut job = started.load;
    // A resync a stop interrupted goes on beside the stream, as it ran; a first full load
    // runs before it.
    let resumed = job.take_if(|j| j.state.resync);
    let mut reader = Reader {
        load_settings: load_settings.clone(),
        tracked: started.tracked,
        loading: None,
        to_load: resumed,
        batcher: Batcher::new(BatchLimits {
            max_rows: flush.max_rows,
            max_bytes: flush.max_mib << 20,
            max_delay: Duration::from_millis(flush.max_delay_ms),
        }),
        decoder: Decoder::new(started.proto_version),
        proto_version: started.proto_version,
        assembler: Assembler::with_spill(spill_settings_for(flush, &started.transforms)),
        reconnect: started.reconnect,
        handed: Lsn::ZERO,
        handed_end: Lsn::ZERO,
        advanced: None,
        last_handed: Instant::now(),
        stream: started.stream,
        catalog: started.catalog,
        checkpoint: started.checkpoint,
        next_sequence: started.checkpoint.next_sequence(),
        budget,
        spill_read: Duration::ZERO,
        output: cut_tx,
        shutdown: shutdown.clone(),
        progress: progress.clone(),
    };
    let encoder = Encoder::new(&config.parquet.encode_options())?;
    let read = async move {
        if let Some(job) = job {
            let loaded = load::run(
                job,
                load_settings,
                reader.next_sequence,
                reader.budget.clone(),
                reader.output.clone(),
                reader.shutdown.clone(),
                reader.progress.clone(),
            )
            .await?;
            reader.next_sequence = loaded.next_sequence;
            if let Some(at) = loaded.covers_all {
                // Every table is in the lake as of the snapshot: what committed before it
                // is in there already.
                reader.handed = reader.handed.max(at);
            }
            if loaded.stopped {
                return Ok(reader.stream);
            }
        }
        reader.run().await
    };
    let (stream, _instances, (), ()) = tokio::try_join!(
        read,
        transform::stage(
            started.transforms,
            reload::Reloader::new(config.transform_specs()),
            cut_rx,
            transformed_tx,
            flush.parallel_transforms,
        ),
        encode_stage(encoder, writer, transformed_rx, encoded_tx),
        land::land(
            machine,
            encoded_rx,
            started.log,
            confirmer,
            shutdown,
            progress
        ),
    )?;
    Ok(stream)
}

/// Where large transactions wait for their commit, and the size of their parts.
fn spill_settings(flush: &crate::config::FlushConfig) -> SpillSettings {
    SpillSettings {
        dir: flush.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
        part_bytes: flush.chunk_mib << 20,
    }
}

/// The spill settings of a pipeline whose plugins are `chain`: a plugin that must see every
/// transaction whole gets it in one part, held in memory whole.
fn spill_settings_for(flush: &crate::config::FlushConfig, chain: &TransformChain) -> SpillSettings {
    let mut settings = spill_settings(flush);
    let whole = chain.wants_whole_transactions();
    if !whole.is_empty() {
        tracing::warn!(
            plugins = ?whole,
            "these plugins ask to see every transaction whole, so a large transaction is held \
             in memory whole instead of in parts of {} MiB; memory is bounded only by the \
             largest transaction",
            flush.chunk_mib
        );
        settings.part_bytes = usize::MAX >> 2;
    }
    settings
}

/// What is wrong with the spill directory, if it cannot take a file: checked before anything
/// is created, since a large transaction would otherwise stop the pipeline only once it
/// arrives.
fn spill_dir_problem(flush: &crate::config::FlushConfig) -> Option<PipelineError> {
    let dir = spill_settings(flush).dir;
    tempfile::tempfile_in(&dir)
        .err()
        .map(|e| PipelineError::SpillDir {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        })
}

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

/// How often landing a large transaction says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// Queued items between two stages; the in-flight budget, not this, bounds memory.
const STAGE_QUEUE: usize = 1;
/// Flushes encoded at once.
const ENCODERS: usize = 2;
/// The most forms a batch takes at once, each about its decoded size: the changes and what the
/// transforms make of them while they run; their output and its Arrow columns and Parquet
/// while it is encoded.
const PEAK_COPIES: usize = 2;

/// The in-flight budget, in KiB: a batch takes the most it will occupy at once when it is cut,
/// holds less as stages let go of its earlier forms, and gives the rest back once its files are
/// uploaded. Later stages never wait for it, so the budget can never deadlock the pipeline.
#[derive(Clone)]
struct Budget {
    semaphore: Arc<Semaphore>,
    total_kib: u32,
}

impl Budget {
    fn new(mib: usize) -> Self {
        let total_kib = u32::try_from(mib.saturating_mul(1024)).unwrap_or(u32::MAX >> 4);
        Budget {
            semaphore: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// Wait for `bytes` of room (at most the whole budget, so a batch larger than it still
    /// goes, alone).
    async fn take(&self, bytes: usize) -> Share {
        let kib = kib(bytes).min(self.total_kib);
        let permit = self
            .semaphore
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the budget is never closed");
        Share(permit)
    }
}

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024))
        .unwrap_or(u32::MAX)
        .max(1)
}

/// One batch's share of the in-flight budget; dropping it gives it back.
pub(super) struct Share(OwnedSemaphorePermit);

impl Share {
    /// Keep room for `bytes` only, giving back the rest: a stage let go of a form of the batch.
    fn shrink_to(&mut self, bytes: usize) {
        let keep = kib(bytes) as usize;
        let held = self.0.num_permits();
        if held > keep {
            drop(self.0.split(held - keep));
        }
    }
}

/// A batch cut by the reader, numbered, holding its share of the budget: a flush, or one part
/// of a flush that lands a large transaction.
struct Cut {
    batch: Batch,
    sequence: u64,
    part: u32,
    /// The batch's last transaction ends in it.
    last: bool,
    /// Set on an empty batch that only records how far the server's WAL moved on.
    advance: Option<Advance>,
    /// Set on a part of a full load's chunk.
    load: Option<LoadCut>,
    /// While a load runs, on the last part: the load's progress as of this flush, which its
    /// entry records (so that a crash at any entry knows what is left to load).
    state: Option<LoadState>,
    share: Share,
}

/// The stream positions a load chunk's entry keeps: a load does not move them.
struct LoadCut {
    last_commit: Lsn,
    end: Lsn,
}

/// The positions of an advance entry: the last commit landed, and the server's WAL position.
#[derive(Debug, Clone, Copy)]
struct Advance {
    last_commit: Lsn,
    end: Lsn,
}

/// What the transforms made of a cut.
struct Transformed {
    flush: EncodedFlush,
    outputs: Vec<OutputBatch>,
    share: Share,
    transform: Duration,
    tallies: Tallies,
}

/// The read stage: the replication stream, decoding, assembling, dropping replays and cutting
/// batches. It pauses (and with it the socket) while the budget is full.
struct Reader {
    stream: ReplicationStream,
    /// Opens the stream again when the connection is lost.
    reconnect: reconnect::Reconnect,
    decoder: Decoder,
    proto_version: u32,
    assembler: Assembler,
    /// The commit LSN of the last transaction handed on: after a reconnect, the server sends
    /// again everything not yet confirmed, and what was already handed on is a replay.
    handed: Lsn,
    /// The end LSN of the last flush handed on: everything handed on has landed once the
    /// confirmed position reaches it.
    handed_end: Lsn,
    /// When the last advance was handed on.
    advanced: Option<Instant>,
    /// When the last flush was handed on (or the reader started).
    last_handed: Instant,
    batcher: Batcher,
    /// Resolves user-defined types and array dimensions of the relations that arrive.
    catalog: Catalog,
    /// What the sink held at start: transactions at or below it are replays.
    checkpoint: Checkpoint,
    next_sequence: u64,
    budget: Budget,
    /// Time spent reading back spilled transactions, not yet counted as decoding.
    spill_read: Duration,
    output: mpsc::Sender<Cut>,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
    /// How a resync's load reads.
    load_settings: load::LoadSettings,
    /// The tables the pipeline tracks.
    tracked: Vec<String>,
    /// A resync's load under way, its chunks handed on between the stream's batches.
    loading: Option<load::Loading>,
    /// A load to start once the batch asking for it is handed on (whose entry records it, so
    /// that a crash before the load's first entry still knows it is due).
    to_load: Option<load::LoadJob>,
}

impl Reader {
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

/// The encode stage: Parquet files of every output, named for this writer, on a blocking
/// thread.
async fn encode_stage(
    encoder: Encoder,
    writer: Writer,
    mut input: mpsc::Receiver<Transformed>,
    output: mpsc::Sender<land::Encoded>,
) -> Result<(), PipelineError> {
    use futures::StreamExt;
    let encoder = Arc::new(encoder);
    // Flushes encode side by side, each on a blocking thread, and are named and handed on in
    // the order they came: the encoder is the busiest stage of a wide or loading pipeline.
    let mut encoding = futures::stream::FuturesOrdered::new();
    // The file ordinals of the flush being named, per output: the parts of one flush number
    // their files on from the part before.
    let mut numbering: (u64, BTreeMap<String, usize>) = (u64::MAX, BTreeMap::new());
    let mut open = true;
    loop {
        tokio::select! {
            transformed = input.recv(), if open && encoding.len() < ENCODERS => {
                let Some(transformed) = transformed else {
                    open = false;
                    continue;
                };
                let started = Instant::now();
                let mut transformed: Transformed = transformed;
                let outputs = std::mem::take(&mut transformed.outputs);
                let encoder = encoder.clone();
                let files = tokio::task::spawn_blocking(move || {
                    outputs
                        .iter()
                        .map(|o| encoder.encode(o).map(|files| (o.output.clone(), files)))
                        .collect::<Result<Vec<_>, EncodeError>>()
                });
                encoding.push_back(async move { (transformed, started, files.await) });
            }
            Some((transformed, started, files)) = encoding.next(), if !encoding.is_empty() => {
                let Transformed {
                    mut flush,
                    mut share,
                    transform,
                    tallies,
                    ..
                } = transformed;
                let sequence = flush.sequence;
                let files = files
                    .map_err(|e| PipelineError::Task(e.to_string()))?
                    .map_err(|source| PipelineError::Encode {
                        sequence,
                        first: flush.first_commit_lsn,
                        last: flush.last_commit_lsn,
                        source,
                    })?;
                if numbering.0 != sequence {
                    numbering = (sequence, BTreeMap::new());
                }
                flush.files = name_files(files, sequence, &writer, &mut numbering.1);
                // Only the files are left until they are uploaded.
                share.shrink_to(flush.files.iter().map(|(_, b)| b.len()).sum());
                let encoded = land::Encoded {
                    flush,
                    _budget: share,
                    transform,
                    encode: started.elapsed(),
                    tallies,
                };
                if output.send(encoded).await.is_err() {
                    return Ok(());
                }
            }
            else => break,
        }
    }
    Ok(())
}

/// Name the encoded files of a flush (or part of one); `ordinals` holds the next file ordinal
/// of each output in this flush.
fn name_files(
    outputs: Vec<(String, Vec<crate::encode::EncodedFile>)>,
    sequence: u64,
    writer: &Writer,
    ordinals: &mut BTreeMap<String, usize>,
) -> Vec<(FileEntry, Bytes)> {
    let mut files = Vec::new();
    for (output, encoded) in outputs {
        for encoded in encoded {
            let part = ordinals.entry(output.clone()).or_default();
            let path = data_file_path(&output, sequence, writer, *part);
            *part += 1;
            let file = FileEntry {
                path,
                output: output.clone(),
                rows: encoded.rows,
                bytes: encoded.bytes.len() as u64,
                schema: encoded.schema,
            };
            files.push((file, encoded.bytes));
        }
    }
    files
}

/// `SIGHUP`, where there is one.
#[cfg(unix)]
fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

#[cfg(not(unix))]
fn hangup_signal() -> Option<()> {
    None
}

#[cfg(unix)]
async fn next_hangup(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Option<()>) {
    std::future::pending().await
}

async fn load_transforms(
    config: &PipelineConfig,
) -> Result<(TransformChain, Vec<PluginInfo>), PipelineError> {
    let specs = config.transform_specs();
    let chain = tokio::task::spawn_blocking(move || TransformChain::load(&specs))
        .await
        .map_err(|e| PipelineError::Task(e.to_string()))??;
    let plugins = chain.plugins();
    Ok((chain, plugins))
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Budget, StageTimes, proto_version};

    #[tokio::test]
    async fn a_share_gives_back_what_a_stage_let_go_of_and_the_rest_when_dropped() {
        let budget = Budget::new(1);
        let mut share = budget.take(600 << 10).await;
        assert_eq!(budget.semaphore.available_permits(), 424);
        share.shrink_to(100 << 10);
        assert_eq!(budget.semaphore.available_permits(), 924);
        share.shrink_to(500 << 10);
        assert_eq!(
            budget.semaphore.available_permits(),
            924,
            "a share never grows"
        );
        // More than the whole budget goes through alone.
        drop(share);
        let whole = budget.take(5 << 20).await;
        assert_eq!(budget.semaphore.available_permits(), 0);
        drop(whole);
        assert_eq!(budget.semaphore.available_permits(), 1024);
    }

    #[test]
    fn stage_times_add_up() {
        let stages = StageTimes {
            decode: Duration::from_millis(1),
            transform: Duration::from_millis(2),
            encode: Duration::from_millis(3),
            upload: Duration::from_millis(4),
            commit: Duration::from_millis(5),
        };
        assert_eq!(stages.total(), Duration::from_millis(15));
        assert_eq!(StageTimes::default().total(), Duration::ZERO);
    }

    #[test]
    fn protocol_follows_the_server_version() {
        let asked: Vec<u32> = [
            None,
            Some(130_011),
            Some(140_000),
            Some(150_004),
            Some(160_002),
            Some(180_000),
        ]
        .into_iter()
        .map(proto_version)
        .collect();
        assert_eq!(asked, [1, 1, 2, 3, 4, 4]);
    }
}
