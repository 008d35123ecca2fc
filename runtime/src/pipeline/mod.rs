//! The running pipeline: start-up (see [`start`]), then the loop that reads the slot and
//! lands batches.
//!
//! The loop decodes frames into transactions, drops replays, and hands due batches to
//! [`Pipeline::flush`], which runs transform → encode → intent → upload → commit and only
//! then confirms the batch's end LSN to the slot. A flush blocks further reading; the
//! replication driver keeps answering the server meanwhile, so a slow sink slows the slot
//! down instead of losing anything. Sink failures are retried with backoff for as long as they
//! last; transform and encode failures stop the pipeline with nothing past the last commit
//! confirmed. A commit that finds its sequence number taken means another instance has taken
//! over: this one removes its own files of that flush and stops.

mod retry;
mod start;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::Lsn;
use crate::batch::{Assembler, BatchError, BatchLimits, Batcher};
use crate::catalog::{Catalog, CatalogError};
use crate::change::{Batch, OutputBatch};
use crate::commit::{
    Checkpoint, CommitEntry, CommitError, CommitLog, EntryKind, FileEntry, Writer, data_file_path,
    unix_micros,
};
use crate::config::PipelineConfig;
use crate::encode::{EncodeError, EncodeOptions, Encoder};
use crate::failpoint;
use crate::pgoutput::{DecodeError, Decoder, LogicalMessage};
use crate::provision::ProvisionError;
use crate::replication::{ReplicationError, ReplicationStream, XLogData};
use crate::sink::{Created, Sink, SinkError};
use crate::transform::{PluginInfo, TransformChain, TransformError};
use retry::with_retry;

/// The highest pgoutput protocol version this pipeline speaks. Streaming of in-progress
/// transactions needs 2 (PostgreSQL 14); 3 (15) adds two-phase and 4 (16) parallel streaming,
/// neither of which is asked for, so the newest is taken only to keep up with the server.
const PROTO_VERSION: u32 = 4;
/// Frames taken from the replication driver per wake-up.
const RECV_BATCH: usize = 1024;
/// Concurrent uploads within one flush.
const UPLOAD_CONCURRENCY: usize = 4;
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
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("malformed pgoutput message at {lsn}: {source}")]
    Decode {
        lsn: Lsn,
        #[source]
        source: DecodeError,
    },
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(
        "source.binary = true needs pgoutput protocol 2 (PostgreSQL 14 or newer); this server speaks protocol {0}: set source.binary = false"
    )]
    BinaryUnsupported(u32),
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
    #[error("the replication stream ended unexpectedly after {0}")]
    StreamEnded(Lsn),
    #[error("a blocking task failed: {0}")]
    Task(String),
    #[error("{0}")]
    Failpoints(String),
}

/// How a run was started.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Start even if the slot has moved past the sink's last commit.
    pub allow_gap: bool,
    /// Wait for as long as another consumer holds the slot, instead of giving up after
    /// `slot_grace`.
    pub wait_for_slot: bool,
    /// How long to wait for a slot another consumer holds before refusing to start.
    pub slot_grace: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            allow_gap: false,
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
    // Boxed as `dyn Send` so the compiler checks Send here, with concrete lifetimes; checked
    // through `tokio::spawn` instead, it trips over the borrows held across awaits.
    failpoint::announce().map_err(PipelineError::Failpoints)?;
    let start: BoxFuture<'_, _> = Box::pin(start::start(&config, &options, &shutdown));
    let Some(started) = start.await? else {
        tracing::info!("stopped before the slot was free");
        return Ok(progress.borrow().clone());
    };
    progress.send_modify(|p| {
        p.last_entry = Some(started.opened.clone());
        p.streaming = true;
    });
    let mut pipeline = Pipeline {
        encoder: Arc::new(Encoder::new(&EncodeOptions::default())?),
        writer: started.log.writer().clone(),
        config,
        sink: started.sink,
        log: started.log,
        checkpoint: started.checkpoint,
        transforms: Some(started.transforms),
        plugins: started.plugins,
        stream: started.stream,
        proto_version: started.proto_version,
        catalog: started.catalog,
        shutdown,
        progress,
    };
    let stream: BoxFuture<'_, _> = Box::pin(pipeline.stream());
    stream.await?;
    let landed = pipeline.progress.borrow().clone();
    // A clean goodbye: the final status update carries the last confirmed position.
    pipeline.stream.shutdown().await?;
    Ok(landed)
}

struct Pipeline {
    config: PipelineConfig,
    sink: Sink,
    log: CommitLog,
    writer: Writer,
    checkpoint: Checkpoint,
    transforms: Option<TransformChain>,
    plugins: Vec<PluginInfo>,
    encoder: Arc<Encoder>,
    stream: ReplicationStream,
    /// The pgoutput protocol version the stream was started with.
    proto_version: u32,
    /// Resolves user-defined types and array dimensions of the relations that arrive.
    catalog: Catalog,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
}

impl Pipeline {
    /// Read, assemble, batch and flush until shutdown.
    async fn stream(&mut self) -> Result<(), PipelineError> {
        let flush = &self.config.flush;
        let mut batcher = Batcher::new(BatchLimits {
            max_rows: flush.max_rows,
            max_bytes: flush.max_mib << 20,
            max_delay: Duration::from_millis(flush.max_delay_ms),
        });
        let mut decoder = Decoder::new(self.proto_version);
        let mut assembler = Assembler::new();
        let mut frames: Vec<XLogData> = Vec::with_capacity(RECV_BATCH);
        let mut shutdown = self.shutdown.clone();

        loop {
            let deadline = batcher.deadline().map(tokio::time::Instant::from_std);
            tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    // A dropped controller can never ask again: treat it as a stop request.
                    if changed.is_err() || *shutdown.borrow() { break }
                }
                _ = sleep_until(deadline) => {}
                received = self.stream.recv_many(&mut frames, RECV_BATCH) => {
                    if received? == 0 {
                        return Err(PipelineError::StreamEnded(self.checkpoint.confirmed()));
                    }
                    let now = Instant::now();
                    let mut replays = 0;
                    for frame in frames.drain(..) {
                        let message = decoder.decode_bytes(frame.data).map_err(|source| {
                            PipelineError::Decode { lsn: frame.wal_start, source }
                        })?;
                        if let LogicalMessage::Relation { relation, .. } = &message
                            && let Some(types) = self.catalog.resolve(relation).await?
                        {
                            decoder.resolve_types(relation.id, types);
                        }
                        if let Some(done) = assembler.push(message)? {
                            if self.checkpoint.is_replay(done.transaction.commit_lsn) {
                                replays += 1;
                                continue;
                            }
                            batcher.push(done, now);
                        }
                    }
                    let decoded = now.elapsed();
                    self.progress.send_if_modified(|p| {
                        p.stages.decode += decoded;
                        p.replays_skipped += replays;
                        // Subscribers hear of replays; decode time is read along with a flush.
                        replays > 0
                    });
                }
            }
            if batcher.is_due(Instant::now()) {
                let batch = batcher.take().expect("a due batcher holds transactions");
                self.flush(batch).await?;
            }
        }

        // Land what is committed and pending; an open transaction is replayed next time.
        if let Some(batch) = batcher.take() {
            self.flush(batch).await?;
        }
        Ok(())
    }

    /// Transform, encode, upload and commit one batch, then confirm it to the slot.
    async fn flush(&mut self, batch: Batch) -> Result<(), PipelineError> {
        let sequence = self.checkpoint.next_sequence();
        let (first, last) = batch.lsn_range().expect("batches are never empty");
        let last_end_lsn = batch
            .transactions
            .last()
            .map(|t| t.end_lsn)
            .unwrap_or_default();
        let transactions = batch.transactions.len() as u64;
        let changes = batch.change_count() as u64;

        let mut chain = self
            .transforms
            .take()
            .expect("transforms are put back after each flush");
        let started = Instant::now();
        let (chain, outputs) = tokio::task::spawn_blocking(move || {
            let outputs = chain.process(&batch);
            (chain, outputs)
        })
        .await
        .map_err(|e| PipelineError::Task(e.to_string()))?;
        self.transforms = Some(chain);
        let outputs = outputs?;
        let transformed = Instant::now();

        let encoder = self.encoder.clone();
        let writer = self.writer.clone();
        let encoded = tokio::task::spawn_blocking(move || {
            encode_outputs(&encoder, &outputs, sequence, &writer)
        })
        .await
        .map_err(|e| PipelineError::Task(e.to_string()))?
        .map_err(|source| PipelineError::Encode {
            sequence,
            first,
            last,
            source,
        })?;
        let encoded_at = Instant::now();

        let paths: Vec<String> = encoded.iter().map(|(f, _)| f.path.clone()).collect();
        let confirmed = self.checkpoint.confirmed();
        let mut shutdown = self.shutdown.clone();
        with_retry!(
            "writing the intent",
            confirmed,
            &mut shutdown,
            self.log.write_intent(sequence, &paths)
        )?;
        failpoint::reached("flush.after-intent").await;
        with_retry!(
            "uploading data files",
            confirmed,
            &mut shutdown,
            upload_all(&self.sink, &encoded)
        )?;
        failpoint::reached("flush.before-commit").await;
        let uploaded = Instant::now();

        let entry = CommitEntry {
            format: crate::commit::FORMAT,
            kind: EntryKind::Flush,
            sequence,
            writer: self.writer.clone(),
            slot: self.config.source.slot.clone(),
            first_commit_lsn: first,
            last_commit_lsn: last,
            last_end_lsn,
            transactions,
            changes,
            files: encoded.iter().map(|(f, _)| f.clone()).collect(),
            plugins: self.plugins.clone(),
            committed_at: unix_micros(),
        };
        let committed = with_retry!(
            "writing the commit entry",
            confirmed,
            &mut shutdown,
            self.log.commit(&entry)
        );
        if let Err(e @ CommitError::Conflict { .. }) = committed {
            // Another instance took the sequence number: these files can never be committed.
            if let Err(cleanup) = self.log.abandon(sequence, &paths).await {
                tracing::warn!(sequence, error = %cleanup, "could not remove this flush's files after losing the pipeline; the instance that took over removes them at its next start");
            }
            return Err(e.into());
        }
        committed?;
        failpoint::reached("flush.after-commit").await;
        self.checkpoint.advance(&entry)?;
        // Durable: only now may the slot release this WAL.
        self.stream.confirm(self.checkpoint.confirmed());
        failpoint::reached("flush.after-confirm").await;
        if let Err(e) = self.log.clear_intent(sequence).await {
            tracing::warn!(sequence, error = %e, "could not remove a committed flush's intent; it is removed at the next start");
        }
        let stages = StageTimes {
            decode: Duration::ZERO,
            transform: transformed - started,
            encode: encoded_at - transformed,
            upload: uploaded - encoded_at,
            commit: uploaded.elapsed(),
        };

        let rows: u64 = entry.files.iter().map(|f| f.rows).sum();
        let bytes: u64 = entry.files.iter().map(|f| f.bytes).sum();
        tracing::info!(
            sequence,
            transactions,
            changes,
            files = entry.files.len(),
            bytes,
            confirmed = %entry.last_end_lsn,
            "committed"
        );
        self.progress.send_modify(|p| {
            p.flushes += 1;
            p.transactions += transactions;
            p.changes += changes;
            p.rows_written += rows;
            p.files_written += entry.files.len() as u64;
            p.bytes_written += bytes;
            p.last_entry = Some(entry);
            p.stages.transform += stages.transform;
            p.stages.encode += stages.encode;
            p.stages.upload += stages.upload;
            p.stages.commit += stages.commit;
        });
        Ok(())
    }
}

/// Encode every output of a flush and name its files.
fn encode_outputs(
    encoder: &Encoder,
    outputs: &[OutputBatch],
    sequence: u64,
    writer: &Writer,
) -> Result<Vec<(FileEntry, Bytes)>, EncodeError> {
    let mut files = Vec::new();
    let mut parts: BTreeMap<&str, usize> = BTreeMap::new();
    for output in outputs {
        let schema = crate::encode::fingerprint(&output.columns);
        let encoded = encoder.encode(output)?;
        let mut rows_left = output.rows.len() as u64;
        for bytes in encoded {
            let part = parts.entry(output.output.as_str()).or_default();
            let path = data_file_path(&output.output, sequence, writer, *part);
            *part += 1;
            let rows = parquet_rows(&bytes).unwrap_or(rows_left).min(rows_left);
            rows_left -= rows;
            let file = FileEntry {
                path,
                output: output.output.clone(),
                rows,
                bytes: bytes.len() as u64,
                schema: schema.clone(),
            };
            files.push((file, bytes));
        }
    }
    Ok(files)
}

/// Row count from a Parquet footer.
fn parquet_rows(bytes: &Bytes) -> Option<u64> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(bytes.clone()).ok()?;
    u64::try_from(reader.metadata().file_metadata().num_rows()).ok()
}

/// Create the data files of a flush. A file already there under its name (which only this
/// writer produces) is an earlier attempt of the same upload whose reply was lost; its size
/// must match.
async fn upload_all(sink: &Sink, files: &[(FileEntry, Bytes)]) -> Result<(), CommitError> {
    for chunk in files.chunks(UPLOAD_CONCURRENCY) {
        let mut uploads = Vec::with_capacity(chunk.len());
        for (file, bytes) in chunk {
            let path = object_store::path::Path::from(file.path.as_str());
            uploads.push(async move {
                if sink.create(&path, bytes.clone()).await? == Created::Existed {
                    let size = sink.size(&path).await?;
                    if size != Some(file.bytes) {
                        return Err(CommitError::Corrupt {
                            path: file.path.clone(),
                            reason: format!(
                                "this writer's own file name already holds {size:?} bytes, not the {} it uploads",
                                file.bytes
                            ),
                        });
                    }
                }
                failpoint::reached("flush.after-file").await;
                Ok(())
            });
        }
        futures::future::try_join_all(uploads).await?;
    }
    Ok(())
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
