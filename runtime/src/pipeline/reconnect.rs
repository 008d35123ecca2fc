//! Reopening the replication stream after the connection is lost: the server restarted, shut
//! down, or the network dropped. The process keeps running; the new stream resumes at the slot's
//! confirmed position, so what was received but not landed is received again (and what was
//! already handed on is recognised as a replay).

use std::time::{Duration, Instant};

use super::error::PipelineError;
use super::messages::Shutdown;
use super::retry::{TELL_EVERY, doubled, gave_up, jittered};
use crate::Lsn;
use crate::lake::flush::RETRY_MIN;
use crate::source::replication::{Confirmer, ReplicationError, ReplicationStream};

/// `55006`: the slot is still held, by the walsender of the connection that was lost (it
/// notices only at its next write or after `wal_sender_timeout`).
const SLOT_IN_USE: &str = "55006";

/// Everything needed to open the stream again.
pub(super) struct Reconnect {
    pub pg: crate::source::connect::PgConfig,
    pub slot: String,
    pub options: Vec<(&'static str, String)>,
    pub status_interval: Duration,
    pub confirmer: Confirmer,
    /// `retry.limit_secs`: how long reopening may keep failing.
    pub retry_limit: Option<Duration>,
    /// The server the pipeline started on (`IDENTIFY_SYSTEM`): a connection that comes back
    /// elsewhere is refused.
    pub system_id: String,
    pub timeline: u32,
}

/// Why opening the stream again did not give one.
enum OpenError {
    Replication(ReplicationError),
    /// The connection reached another server or timeline.
    Moved(PipelineError),
}

impl Reconnect {
    /// Open a new stream once the server takes it, retrying with capped exponential backoff
    /// (and jitter) for as long as the failure is one that passes. `None` when a stop was
    /// requested meanwhile.
    pub async fn reopen(
        &self,
        lost: &ReplicationError,
        shutdown: &Shutdown,
    ) -> Result<Option<ReplicationStream>, PipelineError> {
        let since = Instant::now();
        tracing::warn!(
            error = %lost,
            confirmed = %self.confirmer.confirmed(),
            "lost the replication connection; reconnecting (nothing past the confirmed position is confirmed meanwhile; what was not landed is received again and landed once)"
        );
        let mut delay = RETRY_MIN;
        let mut attempts = 0u32;
        let mut told = Instant::now();
        loop {
            let mut stop = shutdown.clone();
            if *stop.borrow() {
                return Ok(None);
            }
            attempts += 1;
            match self.open().await {
                Ok(stream) => {
                    tracing::info!(
                        attempts,
                        after = ?since.elapsed(),
                        resume = %self.confirmer.confirmed(),
                        "replication connection restored"
                    );
                    return Ok(Some(stream));
                }
                Err(OpenError::Moved(error)) => return Err(error),
                Err(OpenError::Replication(error))
                    if error.is_transient() || error.code() == Some(SLOT_IN_USE) =>
                {
                    if let Some(gave_up) = gave_up(
                        "reopening the replication connection",
                        since,
                        attempts,
                        self.retry_limit,
                        &error,
                        self.confirmer.confirmed(),
                    ) {
                        return Err(gave_up);
                    }
                    if attempts == 1 || told.elapsed() >= TELL_EVERY {
                        told = Instant::now();
                        tracing::warn!(
                            attempts,
                            since = ?since.elapsed(),
                            retry_in = ?delay,
                            %error,
                            "the replication connection cannot be reopened yet; trying again"
                        );
                    }
                }
                Err(OpenError::Replication(error)) => return Err(error.into()),
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(delay)) => {}
                _ = stop.wait_for(|s| *s) => return Ok(None),
            }
            delay = doubled(delay);
        }
    }

    async fn open(&self) -> Result<ReplicationStream, OpenError> {
        let options: Vec<(&str, &str)> =
            self.options.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // The server resumes at the slot's confirmed position whatever is asked; asking for
        // ours names the intent.
        let start: Lsn = self.confirmer.confirmed();
        let mut connection = crate::source::connect::replication(&self.pg)
            .await
            .map_err(OpenError::Replication)?;
        let system = connection
            .identify_system()
            .await
            .map_err(OpenError::Replication)?;
        if let Some(moved) = self.moved(&system.system_id, system.timeline) {
            return Err(OpenError::Moved(moved));
        }
        connection
            .resume_logical(
                &self.slot,
                start,
                &options,
                self.status_interval,
                self.confirmer.clone(),
            )
            .await
            .map_err(OpenError::Replication)
    }

    /// The refusal when the server is not the one (or not on the timeline) the pipeline
    /// started on.
    fn moved(&self, system_id: &str, timeline: u32) -> Option<PipelineError> {
        let describe = |id: &str, timeline: u32| format!("server {id} on timeline {timeline}");
        (system_id != self.system_id || timeline != self.timeline).then(|| {
            PipelineError::ServerMoved {
                was: describe(&self.system_id, self.timeline),
                now: describe(system_id, timeline),
                confirmed: self.confirmer.confirmed(),
            }
        })
    }
}
