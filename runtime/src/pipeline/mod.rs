//! The running pipeline: start-up (`pipeline/start.rs`), then four stages that run side by side,
//! joined by short queues, data flowing one way:
//!
//! ```text
//! read (socket, decode, assemble, cut) ─► transform (plugins) ─► encode (Parquet) ─► land
//!   ▲                                                                               │
//!   └──────────────── confirm: the end of the last committed flush ◄────────────────┘
//! ```
//!
//! One file per stage: `read.rs`, `transform.rs`, `encode.rs`, `land.rs`; the budget they
//! share is `budget.rs`, and this file is the wiring and the messages on the queues.
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

mod budget;
mod encode;
mod land;
mod load;
pub(crate) mod position;
mod read;
mod reconnect;
mod reload;
mod retry;
mod start;
mod transform;

use budget::{Budget, Share};
use encode::encode_stage;
use read::Reader;

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use crate::Lsn;
use crate::assemble::{AssembleError, Assembler, SpillSettings};
use crate::batch::{BatchLimits, Batcher};
use crate::catalog::CatalogError;
use crate::change::{Batch, OutputBatch};
use crate::commit::{CommitEntry, CommitError};
use crate::config::PipelineConfig;
use crate::encode::{EncodeError, Encoder};
use crate::failpoint;
use crate::flush::{EncodedFlush, FlushMachine};
use crate::load::LoadState;
use crate::pgoutput::{DecodeError, Decoder};
use crate::provision::ProvisionError;
use crate::replication::{ReplicationError, ReplicationStream};
use crate::sink::SinkError;
use crate::transform::{PluginInfo, Tallies, TransformChain, TransformError};

/// The highest pgoutput protocol version this pipeline speaks. Streaming of in-progress
/// transactions needs 2 (PostgreSQL 14); 3 (15) adds two-phase and 4 (16) parallel streaming,
/// neither of which is asked for, so the newest is taken only to keep up with the server.
const PROTO_VERSION: u32 = 4;
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
    let reader = Reader {
        load_settings,
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
    let read = reader.stage(job);
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

/// How often landing a large transaction says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// Queued items between two stages; the in-flight budget, not this, bounds memory.
const STAGE_QUEUE: usize = 1;

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

    use super::{StageTimes, proto_version};

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
