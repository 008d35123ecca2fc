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
//! answering the server. Landing is the flush machine ([`crate::lake::flush`]) carried out by one IO
//! task (`pipeline/land.rs`): intents and uploads may run ahead, commit entries and confirms go strictly
//! in sequence order. Sink failures are retried with backoff for as long as they last;
//! transform and encode failures stop the pipeline with nothing past the last commit confirmed.
//! A commit that finds its sequence number taken means another instance has taken over: this
//! one removes its own files of the flushes it can no longer commit, and stops.

mod budget;
mod encode;
mod error;
mod feed;
pub mod health;
pub mod http;
mod land;
mod latency;
mod load;
mod messages;
pub mod metrics;
mod position;
pub mod preflight;
mod read;
mod reconnect;
mod refill;
mod reload;
mod retry;
mod slot_watch;
mod standby_watch;
mod start;
mod start_journal;
mod stop_watch;
mod transform;

use budget::Budget;
use encode::encode_stage;
use read::Reader;

pub use error::PipelineError;
pub use latency::Latencies;
use messages::LoadCut;
pub use messages::{Progress, Shutdown, StageTimes};

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use crate::config::PipelineConfig;
use crate::failpoint;
use crate::lake::commit::{CommitError, PluginRecord};
use crate::lake::encode::{EncodeOptions, Encoder};
use crate::lake::flush::FlushMachine;
use crate::stream::assemble::{SpillMedia, SpillMedium, SpillSettings};
use crate::stream::batch::BatchLimits;
use crate::stream::read::{ReadMachine, ReadSettings};
use crate::transform::TransformChain;

/// The highest pgoutput protocol version this pipeline speaks. Streaming of in-progress
/// transactions needs 2 (PostgreSQL 14); 3 (15) adds two-phase and 4 (16) parallel streaming,
/// neither of which is asked for, so the newest is taken only to keep up with the server.
pub(crate) const PROTO_VERSION: u32 = 4;
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

/// How a run was started.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Start across this one gap between the sink's last commit and the slot: the exact text
    /// the refusal printed (see [`crate::lake::commit::gap_token`]).
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

/// Run the pipeline until `shutdown` turns true or an error stops it. Its end, and why, is
/// published in `progress` too, for the health probe.
pub async fn run(
    config: PipelineConfig,
    options: RunOptions,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
) -> Result<Progress, PipelineError> {
    let mut options = options;
    let result = loop {
        let ended = run_to_end(
            config.clone(),
            options.clone(),
            shutdown.clone(),
            progress.clone(),
        )
        .await;
        match ended {
            // Trigger capture loads at a start: start again to take the load asked for. The
            // first start judged any gap; the run that ended lets go of the journal as its
            // tasks wind down, which the new start waits for.
            Err(PipelineError::Commit(CommitError::LoadDue { .. })) => {
                tracing::info!("starting again to load every table");
                options.accept_gap = None;
                options.wait_for_slot = true;
            }
            ended => break ended,
        }
    };
    progress.send_modify(|p| {
        p.streaming = false;
        p.ended = Some(match &result {
            Ok(_) => "stopped as asked".to_owned(),
            Err(e) => crate::error_chain(e),
        });
    });
    result
}

/// Start a pipeline: open it ([`start::open`]: the preflight, the plugins, the sink), then go
/// on reading a slot or a trigger journal; `None` when a stop came first.
async fn start(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
) -> Result<Option<start::Started>, PipelineError> {
    let Some((capture, opening)) = start::open(config, options, shutdown).await? else {
        return Ok(None);
    };
    match capture {
        crate::source::prerequisites::Capture::Trigger => {
            start_journal::start(config, options, shutdown, opening).await
        }
        _ => start::start_slot(config, options, shutdown, opening).await,
    }
}

async fn run_to_end(
    config: PipelineConfig,
    options: RunOptions,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
) -> Result<Progress, PipelineError> {
    failpoint::announce().map_err(PipelineError::Failpoints)?;
    // Boxed as `dyn Send` so the compiler checks Send here, with concrete lifetimes; checked
    // through `tokio::spawn` instead, it trips over the borrows held across awaits.
    let start: BoxFuture<'_, _> = Box::pin(start(&config, &options, &shutdown));
    let Some(started) = start.await? else {
        tracing::info!("stopped before the slot was free");
        return Ok(progress.borrow().clone());
    };
    progress.send_modify(|p| {
        p.last_entry = Some(started.opened.clone());
        p.accepted_gaps += started.opened.accepted_gaps();
        p.streaming = true;
    });
    // Only the metrics endpoint shows the slot's figures (or the journal's): without it, no
    // session is spent on them.
    let watched = match started.feed {
        feed::Feed::Slot { .. } => slot_watch::Watched::Slot(config.source.slot.clone()),
        feed::Feed::Journal(_) => {
            slot_watch::Watched::Journal(config.source.trigger_schema.clone())
        }
    };
    let _slot_watch = config.metrics.listen.is_some().then(|| {
        AbortOnDrop(tokio::spawn(slot_watch::watch(
            started.pg.clone(),
            watched,
            Duration::from_secs(config.source.status_interval_secs),
            progress.clone(),
        )))
    });
    // With a failover slot: failover readiness watched, and the standby's copy hastened.
    let (records, watched_records) = watch::channel(None);
    let failover = matches!(started.feed, feed::Feed::Slot { .. }) && config.source.failover;
    let _standby_watch = failover.then(|| {
        AbortOnDrop(tokio::spawn(standby_watch::watch(
            standby_watch::StandbyWatch {
                primary: started.pg.clone(),
                standby_url: config.source.standby_url.clone(),
                slot: config.source.slot.clone(),
                every: Duration::from_secs(config.source.status_interval_secs),
                records,
                progress: progress.clone(),
            },
        )))
    });
    let records = failover.then_some(watched_records);
    let _stop_watch = matches!(started.feed, feed::Feed::Slot { .. }).then(|| {
        AbortOnDrop(tokio::spawn(stop_watch::watch(
            started.pg.clone(),
            started.feed.confirmer(),
        )))
    });
    let stages: BoxFuture<'_, _> = Box::pin(run_stages(
        config,
        started,
        shutdown,
        progress.clone(),
        records,
    ));
    let feed = stages.await?;
    let landed = progress.borrow().clone();
    // A clean goodbye: the final status update carries the last confirmed position (the
    // journal's rows of what landed are deleted).
    feed.shutdown().await?;
    Ok(landed)
}

/// A task that ends with the scope holding it, however the scope is left.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The stages, each a future of its own, joined by bounded queues; the in-flight budget bounds
/// what they hold together. Returns the stream once everything read has landed.
async fn run_stages(
    config: PipelineConfig,
    started: start::Started,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
    records: Option<watch::Receiver<Option<crate::Lsn>>>,
) -> Result<feed::Feed, PipelineError> {
    let flush = &config.flush;
    let writer = started.log.writer().clone();
    let budget = Budget::new(flush.in_flight_mib);
    let (cut_tx, cut_rx) = mpsc::channel(STAGE_QUEUE);
    let (transformed_tx, transformed_rx) = mpsc::channel(STAGE_QUEUE);
    let (encoded_tx, encoded_rx) = mpsc::channel(STAGE_QUEUE);
    let machine = FlushMachine::new(
        started.checkpoint,
        writer.clone(),
        started.name.clone(),
        started.plugins.clone(),
    )
    .with_retry_limit(config.retry.limit())
    .with_timeline(started.timeline);
    let machine = match &started.tables {
        Some(_) => machine.with_tables(started.opened.sequence),
        None => machine,
    };
    let confirmer = started.feed.confirmer();
    let followed = started.followed;
    let load_settings = load::LoadSettings {
        pg: started.pg.clone(),
        publication: match &started.feed {
            feed::Feed::Slot { .. } => Some(config.source.publication.clone()),
            feed::Feed::Journal(_) => None,
        },
        binary: config.source.binary,
        temporary_slot: crate::source::snapshot::temporary_slot_name("load"),
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
    let reading = ReadMachine::new(
        ReadSettings {
            proto_version: started.proto_version,
            limits: BatchLimits {
                max_rows: flush.max_rows,
                max_bytes: flush.max_mib << 20,
                max_delay: Duration::from_millis(flush.max_delay_ms),
            },
            spill: spill_settings_for(flush, &started.transforms),
            tracked: started.tracked,
        },
        read::landed(&started.checkpoint),
        Instant::now(),
    );
    let reader = Reader {
        feed: started.feed,
        machine: reading,
        catalog: started.catalog,
        budget,
        spill_read: Duration::ZERO,
        output: cut_tx,
        shutdown: shutdown.clone(),
        progress: progress.clone(),
        load_settings,
        loading: None,
        to_load: resumed,
        records,
    };
    let tables = config.sink.format.has_tables();
    let encoder = Encoder::new(&EncodeOptions {
        format: config.sink.format,
        partitions: config.partitions(),
        ..config.parquet.encode_options()
    })?;
    let read = reader.stage(job);
    let (feed, _instances, (), ()) = tokio::try_join!(
        read,
        transform::stage(
            started.transforms,
            reload::Reloader::new(config.transform_specs()),
            cut_rx,
            transformed_tx,
            flush.parallel_transforms,
        ),
        encode_stage(encoder, writer, tables, transformed_rx, encoded_tx),
        land::land(
            machine,
            encoded_rx,
            land::Lake {
                log: started.log,
                tables: started.tables,
            },
            confirmer,
            shutdown,
            progress,
            followed,
        ),
    )?;
    Ok(feed)
}

/// Where large transactions wait for their commit, and the size of their parts.
fn spill_settings(flush: &crate::config::FlushConfig) -> SpillSettings {
    SpillSettings {
        media: spill_files_in(flush.spill_dir.clone().unwrap_or_else(std::env::temp_dir)),
        part_bytes: flush.chunk_mib << 20,
    }
}

/// Spill media that are unnamed files in `dir` (created with `O_TMPFILE` or unlinked at once),
/// so the operating system removes one when it is dropped or the process dies: a crash leaves
/// nothing behind, and the server replays the transaction anyway.
fn spill_files_in(dir: std::path::PathBuf) -> SpillMedia {
    SpillMedia::new(
        dir.display().to_string(),
        "set flush.spill_dir to a directory with room (a large transaction is held there until \
         it commits)",
        move || Ok(Box::new(tempfile::tempfile_in(&dir)?) as Box<dyn SpillMedium>),
    )
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
    let media = spill_settings(flush).media;
    media.open().err().map(|e| PipelineError::SpillDir {
        dir: media.place().to_string(),
        reason: e.to_string(),
    })
}

/// How often landing a large transaction says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// Queued items between two stages; the in-flight budget, not this, bounds memory.
const STAGE_QUEUE: usize = 1;

async fn load_transforms(
    config: &PipelineConfig,
) -> Result<(TransformChain, Vec<PluginRecord>), PipelineError> {
    let specs = config.transform_specs();
    let chain = tokio::task::spawn_blocking(move || TransformChain::load(&specs))
        .await
        .map_err(|e| PipelineError::Task(e.to_string()))??;
    let plugins = chain.plugins().iter().map(PluginRecord::from).collect();
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

    use super::{StageTimes, proto_version, spill_dir_problem, spill_settings};
    use crate::config::FlushConfig;
    use crate::stream::assemble::{AssembleError, Assembler};
    use crate::wire::pgoutput::LogicalMessage;

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

    fn flush_spilling_to(dir: &std::path::Path) -> FlushConfig {
        FlushConfig {
            spill_dir: Some(dir.to_path_buf()),
            ..FlushConfig::default()
        }
    }

    #[test]
    fn spill_files_are_unnamed_and_read_back_what_was_written() {
        use std::io::{Read, Seek, SeekFrom, Write};

        let dir = tempfile::tempdir().unwrap();
        let settings = spill_settings(&flush_spilling_to(dir.path()));
        assert_eq!(settings.media.place(), dir.path().display().to_string());
        let mut medium = settings.media.open().unwrap();
        medium.write_all(b"spilled rows").unwrap();
        // Unnamed: nothing shows in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        medium.seek(SeekFrom::Start(0)).unwrap();
        let mut read = String::new();
        medium.read_to_string(&mut read).unwrap();
        assert_eq!(read, "spilled rows");
        assert!(spill_dir_problem(&flush_spilling_to(dir.path())).is_none());
    }

    #[test]
    fn a_missing_spill_directory_is_an_error() {
        let flush = flush_spilling_to(std::path::Path::new("/nonexistent/tributary-spill"));
        let err = spill_settings(&flush).media.open().err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        let problem = spill_dir_problem(&flush).unwrap().to_string();
        assert!(
            problem
                .starts_with("flush.spill_dir /nonexistent/tributary-spill cannot take a file: ")
                && problem.contains("name a directory this user can write to"),
            "{problem}"
        );
        // Said once, as the command prints it (issue 21).
        let printed = crate::error_chain(&spill_dir_problem(&flush).unwrap());
        assert_eq!(printed.matches("os error 2").count(), 1, "{printed}");
    }

    #[test]
    fn a_spill_directory_that_cannot_take_a_file_names_the_setting() {
        let flush = FlushConfig {
            chunk_mib: 1,
            ..flush_spilling_to(std::path::Path::new("/nonexistent/spill"))
        };
        let mut a = Assembler::with_spill(spill_settings(&flush));
        let err = a
            .push(LogicalMessage::StreamStart {
                xid: 5,
                first_segment: true,
            })
            .unwrap_err();
        assert!(
            matches!(err, AssembleError::Spill { xid: 5, .. }),
            "{err:?}"
        );
        let text = crate::error_chain(&err);
        assert_eq!(text.matches("os error 2").count(), 1, "{text}");
        assert!(
            text.starts_with("spilling transaction 5 to /nonexistent/spill: ")
                && text.contains("set flush.spill_dir"),
            "{text}"
        );
    }
}
