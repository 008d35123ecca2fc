//! Reopening the replication stream after the connection is lost: the server restarted, shut
//! down, or the network dropped. The process keeps running; the new stream resumes at the slot's
//! confirmed position, so what was received but not landed is received again (and what was
//! already handed on is recognised as a replay).
//!
//! A connection that comes back from a promoted standby (the same system, the next timeline)
//! is followed when the slot is a failover slot synchronised there and the lake, with what is
//! on its way there, ends at or before where the old timeline ended in the new primary's
//! history ([`switch_point`]); the landing stage records the move in the next commit entry.

use std::time::{Duration, Instant};

use super::error::PipelineError;
use super::health::Failure;
use super::messages::{Progress, Shutdown};
use super::retry::{TELL_EVERY, doubled, gave_up, jittered};
use tokio::sync::watch;

use crate::Lsn;
use crate::lake::commit::{Failover, NotFollowed, follow_promotion};
use crate::lake::flush::RETRY_MIN;
use crate::source::replication::{
    Confirmer, ReplicationConnection, ReplicationError, ReplicationStream,
};

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
    /// `source.failover`: a promotion of a standby that synchronised the slot is followed.
    pub failover: bool,
    /// Tells the landing stage about a promotion followed.
    pub followed: watch::Sender<Option<Failover>>,
}

/// Why opening the stream again did not give one.
enum OpenError {
    Replication(ReplicationError),
    /// The connection reached another server or timeline.
    Moved(PipelineError),
    /// Asking a promoted server about the move failed; asked again at the next attempt.
    Asking(String),
}

impl Reconnect {
    /// Open a new stream once the server takes it, retrying with capped exponential backoff
    /// (and jitter) for as long as the failure is one that passes. `None` when a stop was
    /// requested meanwhile.
    ///
    /// `handed_end` is the end of what the reader handed on: the lake ends there once it has
    /// landed, so a promotion is followed only if the old timeline reached it. While it fails,
    /// `progress` says so, for the readiness probe.
    pub async fn reopen(
        &mut self,
        lost: &ReplicationError,
        handed_end: Lsn,
        shutdown: &Shutdown,
        progress: &watch::Sender<Progress>,
    ) -> Result<Option<ReplicationStream>, PipelineError> {
        let since = Instant::now();
        let failing = |error: String| {
            progress.send_if_modified(|p| {
                p.faults.source = Some(Failure { since, error });
                false
            });
        };
        failing(format!("lost the replication connection: {lost}"));
        let opened = self
            .reopen_from(since, lost, handed_end, shutdown, failing)
            .await;
        progress.send_if_modified(|p| {
            p.faults.source = None;
            false
        });
        opened
    }

    async fn reopen_from(
        &mut self,
        since: Instant,
        lost: &ReplicationError,
        handed_end: Lsn,
        shutdown: &Shutdown,
        failing: impl Fn(String),
    ) -> Result<Option<ReplicationStream>, PipelineError> {
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
            match self.open(handed_end).await {
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
                Err(OpenError::Asking(error)) => {
                    failing(format!(
                        "asking the promoted source whether its move can be followed: {error}"
                    ));
                    if let Some(gave_up) = gave_up(
                        "asking the promoted source whether its move can be followed",
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
                            retry_in = ?delay,
                            %error,
                            "the source moved to another timeline, and asking it whether the move can be followed failed; trying again"
                        );
                    }
                }
                Err(OpenError::Replication(error))
                    if error.is_transient() || error.code() == Some(SLOT_IN_USE) =>
                {
                    failing(format!("reopening the replication connection: {error}"));
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

    async fn open(&mut self, handed_end: Lsn) -> Result<ReplicationStream, OpenError> {
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
        if system.system_id == self.system_id && system.timeline != self.timeline {
            self.follow(&mut connection, system.timeline, handed_end)
                .await?;
        }
        if let Some(moved) = self.moved(&system.system_id, system.timeline, "") {
            return Err(OpenError::Moved(moved));
        }
        let options: Vec<(&str, &str)> =
            self.options.iter().map(|(k, v)| (*k, v.as_str())).collect();
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

    /// The same server came back on another timeline: follow it if it is a promoted standby
    /// that synchronised the failover slot and the lake ends at or before the switch point.
    async fn follow(
        &mut self,
        connection: &mut ReplicationConnection,
        timeline: u32,
        handed_end: Lsn,
    ) -> Result<(), OpenError> {
        let client = match self.failover {
            true => Some(
                crate::source::connect::sql(&self.pg)
                    .await
                    .map_err(|e| OpenError::Asking(e.to_string()))?,
            ),
            false => None,
        };
        let switch = switch_point(
            client.as_ref(),
            connection,
            &self.slot,
            self.timeline,
            timeline,
        )
        .await
        .map_err(|e| OpenError::Asking(e.to_string()))?;
        let lake_end = self.confirmer.confirmed().max(handed_end);
        match follow_promotion(self.timeline, timeline, lake_end, &switch) {
            Ok(failover) => {
                tracing::warn!(
                    from = failover.from,
                    to = failover.to,
                    switch_point = %failover.switch_point,
                    lake_end = %failover.lake_end,
                    "the source is a promoted standby that synchronised the failover slot, and the lake ends at or before where the old timeline ended: going on from it (the next commit entry records the move)"
                );
                self.timeline = timeline;
                let _ = self.followed.send(Some(failover));
                Ok(())
            }
            Err(NotFollowed::Ahead { switch_point }) => {
                Err(OpenError::Moved(PipelineError::FailoverAhead {
                    from: self.timeline,
                    to: timeline,
                    switch_point,
                    lake_end,
                }))
            }
            Err(NotFollowed::Unfollowable(why)) => Err(OpenError::Moved(
                self.moved(&self.system_id, timeline, &why)
                    .expect("another timeline"),
            )),
        }
    }

    /// The refusal when the server is not the one (or not on the timeline) the pipeline
    /// started on; `why` it was not followed, when that is known.
    fn moved(&self, system_id: &str, timeline: u32, why: &str) -> Option<PipelineError> {
        let describe = |id: &str, timeline: u32| format!("server {id} on timeline {timeline}");
        (system_id != self.system_id || timeline != self.timeline).then(|| {
            PipelineError::ServerMoved {
                was: describe(&self.system_id, self.timeline),
                now: describe(system_id, timeline),
                confirmed: self.confirmer.confirmed(),
                why: match (why.is_empty(), system_id == self.system_id) {
                    (false, _) => why.to_owned(),
                    (true, false) => {
                        "another server's WAL positions mean nothing for this lake".to_owned()
                    }
                    (true, true) => "source.failover is false".to_owned(),
                },
            }
        })
    }
}

/// Where timeline `from` ended in the history of the server behind `replication`, now on
/// timeline `to`, when the pipeline can follow that move by itself: `source.failover` is on
/// (`client` given, on the same server), the slot there is a failover slot synchronised from
/// the old primary, and `from` is in the server's history. Otherwise why not.
pub(super) async fn switch_point(
    client: Option<&tokio_postgres::Client>,
    replication: &mut ReplicationConnection,
    slot: &str,
    from: u32,
    to: u32,
) -> Result<Result<Lsn, String>, PipelineError> {
    let Some(client) = client else {
        return Ok(Err("source.failover is false".into()));
    };
    let state = crate::source::failover::slot_failover(client, slot).await?;
    let why = match state {
        None => Some(format!("slot {slot:?} does not exist on this server")),
        Some(s) if !s.failover => Some(format!("slot {slot:?} is not a failover slot")),
        Some(s) if !s.synced => Some(format!(
            "slot {slot:?} on this server was not synchronised from the old primary \
             (pg_replication_slots.synced is false)"
        )),
        Some(s) if s.temporary => Some(format!(
            "slot {slot:?} on this server is only a temporary synchronised copy"
        )),
        Some(_) => None,
    };
    if let Some(why) = why {
        return Ok(Err(why));
    }
    let history = replication.timeline_history(to).await?;
    Ok(history.end_of(from).ok_or_else(|| {
        format!("timeline {from} is not in the history of timeline {to} on this server")
    }))
}
