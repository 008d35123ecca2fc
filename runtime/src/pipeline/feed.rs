//! Where the read stage's frames come from: a replication slot's stream, or the journal that
//! trigger capture writes ([`crate::source::trigger`]), polled by a task of its own.
//!
//! The journal's task owns the reading: a poll records its tick before it reads the batch, so
//! it must not be cut short halfway, and the read stage's `select!` would cut it. The task
//! hands a batch's frames on as its rows stream in, in parts over a channel of one (the read
//! stage's pace is its pace, and a batch of any size takes bounded memory), deletes the journal
//! rows of what the lake confirmed, and after a lost connection tells the read stage to drop
//! the transaction it was sent halfway, then opens the journal again at the confirmed
//! position: what it hands again the read machine drops as replays, as it drops a slot's.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::error::PipelineError;
use super::reconnect::Reconnect;
use super::retry::{TELL_EVERY, doubled, gave_up, jittered};
use crate::Lsn;
use crate::lake::flush::RETRY_MIN;
use crate::source::connect::PgConfig;
use crate::source::provision::ProvisionError;
use crate::source::replication::{Confirmer, ReplicationError, ReplicationStream, XLogData};
use crate::source::trigger::capture::{Polled, TriggerCapture};
use crate::stream::read::Frame;

/// Frames taken from the replication driver per wake-up.
const RECV_BATCH: usize = 1024;
/// How long a journal poll that found nothing waits before the next.
pub(super) const JOURNAL_POLL: Duration = Duration::from_millis(200);
/// The longest wait between attempts to reach a source that went away.
const RECONNECT_MAX: Duration = Duration::from_secs(10);

/// The read stage's source of frames.
pub(super) enum Feed {
    Slot {
        stream: ReplicationStream,
        /// Opens the stream again when the connection is lost.
        reconnect: Box<Reconnect>,
        received: Vec<XLogData>,
    },
    Journal(JournalFeed),
}

impl Feed {
    pub(super) fn slot(stream: ReplicationStream, reconnect: Reconnect) -> Feed {
        Feed::Slot {
            stream,
            reconnect: Box::new(reconnect),
            received: Vec::with_capacity(RECV_BATCH),
        }
    }

    /// Where the landing stage confirms positions.
    pub(super) fn confirmer(&self) -> Confirmer {
        match self {
            Feed::Slot { reconnect, .. } => reconnect.confirmer.clone(),
            Feed::Journal(journal) => journal.confirmer.clone(),
        }
    }

    /// The next frames into `out`, or the connection lost (slots only: the journal's task
    /// reconnects by itself). Cancel-safe.
    pub(super) async fn recv(&mut self, out: &mut Vec<Frame>) -> Result<Received, PipelineError> {
        match self {
            Feed::Slot {
                stream, received, ..
            } => match stream.recv_many(received, RECV_BATCH).await {
                // The server finished the stream: it is going away.
                Ok(0) => Ok(Received::Lost(ReplicationError::ServerEnded)),
                Ok(_) => {
                    out.extend(received.drain(..).map(|f| Frame {
                        wal_start: f.wal_start,
                        data: f.data,
                    }));
                    Ok(Received::Frames)
                }
                Err(error) if error.is_transient() => Ok(Received::Lost(error)),
                Err(error) => Err(error.into()),
            },
            Feed::Journal(journal) => journal.recv(out).await,
        }
    }

    /// The server's position when every frame was taken (slots only; a journal has no
    /// position of its own to advance to).
    pub(super) fn idle_position(&self) -> Option<Lsn> {
        match self {
            Feed::Slot { stream, .. } => stream.idle_position(),
            Feed::Journal(_) => None,
        }
    }

    /// The position a server shutting down waits to hear confirmed (slots only).
    pub(super) fn reply_wanted(&self) -> Lsn {
        match self {
            Feed::Slot { stream, .. } => stream.reply_wanted(),
            Feed::Journal(_) => Lsn::ZERO,
        }
    }

    /// End the feed: a slot's stream sends its last confirmed position; the journal's task
    /// deletes the rows of what landed and closes its connection.
    pub(super) async fn shutdown(self) -> Result<(), PipelineError> {
        match self {
            Feed::Slot { stream, .. } => Ok(stream.shutdown().await?),
            Feed::Journal(journal) => journal.shutdown().await,
        }
    }
}

/// What the journal task hands the read stage.
enum Fed {
    /// The next frames of a batch.
    Frames(Vec<Frame>),
    /// The connection was lost, perhaps halfway through a batch: the journal is read again
    /// from the confirmed position, its relations sent again.
    Reread,
    /// The journal cannot be read.
    Failed(Box<PipelineError>),
}

/// What a [`Feed::recv`] gave.
pub(super) enum Received {
    Frames,
    /// The connection was lost; the stream can be opened again.
    Lost(ReplicationError),
    /// The journal's reader lost its connection and reads again from the confirmed position
    /// (it reconnects by itself): a transaction in progress is sent again whole.
    Reread,
}

/// The journal read by a task of its own.
pub(super) struct JournalFeed {
    frames: mpsc::Receiver<Fed>,
    confirmer: Confirmer,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), PipelineError>>,
    /// Ends the task when the feed is dropped without a shutdown (a run that failed), so that
    /// its session lets go of the journal's reader lock for the next start.
    _ends: EndsOnDrop,
}

struct EndsOnDrop(tokio::task::AbortHandle);

impl Drop for EndsOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How the journal task reaches the source again.
pub(super) struct JournalSource {
    pub pg: PgConfig,
    pub schema: String,
    /// `retry.limit_secs`: how long reaching the source may keep failing.
    pub retry_limit: Option<Duration>,
}

impl JournalFeed {
    /// Start reading `capture`, opened at the position the lake confirmed.
    pub(super) fn start(capture: TriggerCapture, source: JournalSource, confirmed: Lsn) -> Self {
        let confirmer = Confirmer::default();
        confirmer.confirm(confirmed);
        let (tx, frames) = mpsc::channel(1);
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(poll_journal(
            capture,
            source,
            confirmer.clone(),
            tx,
            stopping,
        ));
        JournalFeed {
            frames,
            confirmer,
            stop,
            _ends: EndsOnDrop(task.abort_handle()),
            task,
        }
    }

    async fn recv(&mut self, out: &mut Vec<Frame>) -> Result<Received, PipelineError> {
        match self.frames.recv().await {
            Some(Fed::Frames(frames)) => {
                out.extend(frames);
                Ok(Received::Frames)
            }
            Some(Fed::Reread) => Ok(Received::Reread),
            Some(Fed::Failed(error)) => Err(*error),
            None => Err(PipelineError::Task(
                "the trigger capture's journal reader ended".into(),
            )),
        }
    }

    async fn shutdown(self) -> Result<(), PipelineError> {
        let JournalFeed {
            frames,
            stop,
            task,
            _ends,
            ..
        } = self;
        drop(frames);
        let _ = stop.send(true);
        match task.await {
            Ok(result) => result,
            Err(e) => Err(PipelineError::Task(e.to_string())),
        }
    }
}

/// Whether `error` is the source going away (a connection lost or refused), which passes,
/// rather than a statement the server refused.
fn is_lost(error: &ProvisionError) -> bool {
    match error {
        // No SQLSTATE: the connection broke. Class 08 (connection exception) and 57
        // (operator intervention: a shutdown, a restart, a terminated backend) pass too.
        ProvisionError::Query { error, .. } => {
            error.is_closed()
                || error
                    .code()
                    .is_none_or(|c| c.code().starts_with("08") || c.code().starts_with("57"))
        }
        ProvisionError::Connect(_) => true,
        // After a lost connection, the lock may still be held by the lost session until the
        // server notices it is gone; another instance that took over fences this one at its
        // next commit.
        ProvisionError::JournalHeld { .. } => true,
        _ => false,
    }
}

/// The journal task: poll, hand on what a poll found, delete what the lake confirmed, until a
/// stop is asked for or the read stage is gone; after a lost connection, open the journal
/// again at the confirmed position.
async fn poll_journal(
    mut capture: TriggerCapture,
    source: JournalSource,
    confirmer: Confirmer,
    frames: mpsc::Sender<Fed>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), PipelineError> {
    let mut cleared = Lsn::ZERO;
    loop {
        let step = async {
            let confirmed = confirmer.confirmed();
            if confirmed > cleared {
                crate::failpoint::reached("journal.before-delete").await;
                let deleted = capture.confirm(confirmed.0).await?;
                if deleted > 0 {
                    tracing::debug!(
                        rows = deleted,
                        through = confirmed.0,
                        "deleted the journal rows that landed"
                    );
                }
                cleared = confirmed;
            }
            if *stop.borrow() {
                return Ok(None);
            }
            capture.poll(&frames, Fed::Frames).await.map(Some)
        };
        match step.await {
            Ok(None) => return Ok(()),
            Ok(Some(Polled::Nothing)) => {
                tokio::select! {
                    _ = tokio::time::sleep(JOURNAL_POLL) => {}
                    _ = stop.changed() => {}
                }
            }
            Ok(Some(Polled::Read { .. })) => {}
            // The read stage is gone: only the last confirmation is left to do.
            Ok(Some(Polled::Gone)) => {
                stop_after_confirming(&mut capture, &confirmer, cleared).await?;
                return Ok(());
            }
            Err(error) if is_lost(&error) => {
                // What was handed of a batch cut short is read again whole.
                if frames.send(Fed::Reread).await.is_err() {
                    return Ok(());
                }
                match reopen(&source, &confirmer, &error, &mut stop).await? {
                    Some(reopened) => {
                        capture = reopened;
                        cleared = confirmer.confirmed();
                    }
                    None => return Ok(()),
                }
            }
            Err(error) => {
                let _ = frames.send(Fed::Failed(Box::new(error.into()))).await;
                return Ok(());
            }
        }
    }
}

/// The read stage is gone: delete the rows of what landed last, if that is more than before.
async fn stop_after_confirming(
    capture: &mut TriggerCapture,
    confirmer: &Confirmer,
    cleared: Lsn,
) -> Result<(), PipelineError> {
    let confirmed = confirmer.confirmed();
    if confirmed > cleared {
        capture.confirm(confirmed.0).await?;
    }
    Ok(())
}

/// Open the journal again once the source takes a connection, retrying with capped
/// exponential backoff; `None` when a stop was asked for first.
async fn reopen(
    source: &JournalSource,
    confirmer: &Confirmer,
    lost: &ProvisionError,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<TriggerCapture>, PipelineError> {
    tracing::warn!(error = %lost, confirmed = %confirmer.confirmed(), "lost the connection to the source; reading the journal again from the confirmed position once it is back");
    let since = Instant::now();
    let mut delay = RETRY_MIN;
    let mut told = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let opened = async {
            let client = crate::source::connect::sql(&source.pg).await?;
            // The lock went with the lost session: another instance may hold the journal now.
            if !crate::source::trigger::capture::hold(&client, &source.schema).await? {
                return Err(ProvisionError::JournalHeld {
                    schema: source.schema.clone(),
                });
            }
            TriggerCapture::open(client, &source.schema, confirmer.confirmed().0).await
        };
        match opened.await {
            Ok(capture) => {
                tracing::info!(
                    attempts,
                    waited_ms = since.elapsed().as_millis() as u64,
                    "reading the journal again"
                );
                return Ok(Some(capture));
            }
            Err(error) if is_lost(&error) => {
                if let Some(gave_up) = gave_up(
                    "reaching the source",
                    since,
                    attempts,
                    source.retry_limit,
                    &error,
                    confirmer.confirmed(),
                ) {
                    return Err(gave_up);
                }
                if told.elapsed() >= TELL_EVERY {
                    told = Instant::now();
                    tracing::warn!(%error, attempts, failing_secs = since.elapsed().as_secs(), "the source is still unreachable; retrying");
                }
            }
            Err(error) => return Err(error.into()),
        }
        tokio::select! {
            _ = tokio::time::sleep(jittered(delay)) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return Ok(None);
        }
        delay = doubled(delay).min(RECONNECT_MAX);
    }
}
