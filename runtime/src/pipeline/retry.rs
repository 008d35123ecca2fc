//! Start-up's sink steps (the open entry) are retried with capped exponential backoff for as
//! long as the sink fails, with the flush machine's delays; errors that retrying cannot fix (a
//! conflicting writer, a corrupt entry) stop at once.

use std::time::{Duration, Instant};

use super::error::PipelineError;
use super::messages::Shutdown;
use crate::Lsn;
use crate::lake::commit::CommitError;

use crate::lake::flush::{RETRY_MAX, RETRY_MIN};

/// Run a sink step until it succeeds or fails for good; yields the step's last result. A stop
/// request while waiting returns [`PipelineError::Interrupted`] from the enclosing function.
macro_rules! with_retry {
    ($what:expr, $confirmed:expr, $limit:expr, $shutdown:expr, $step:expr) => {{
        let mut backoff = $crate::pipeline::retry::Backoff::new($what, $limit);
        loop {
            let result = $step.await;
            if !backoff.after(&result, $confirmed, $shutdown).await? {
                break result;
            }
        }
    }};
}

pub(crate) use with_retry;

/// Sink failures are retried with capped exponential backoff for as long as they last;
/// errors that retrying cannot fix (a conflicting writer, a corrupt entry) stop at once.
pub(crate) struct Backoff {
    what: &'static str,
    delay: Duration,
    attempts: u32,
    /// When the step began failing, and when the log last said so: once at first, then every
    /// [`TELL_EVERY`], not at every attempt.
    since: Option<Instant>,
    told: Option<Instant>,
    /// `retry.limit_secs`: how long the step may keep failing.
    limit: Option<Duration>,
}

/// How often a step that keeps failing says so again (start-up, landing, reconnecting).
pub(super) const TELL_EVERY: Duration = Duration::from_secs(30);

/// [`PipelineError::GaveUp`] once a step failing since `since` has failed for `limit`.
#[must_use]
pub(super) fn gave_up(
    what: &'static str,
    since: Instant,
    attempts: u32,
    limit: Option<Duration>,
    error: &dyn std::fmt::Display,
    confirmed: Lsn,
) -> Option<PipelineError> {
    match limit {
        Some(limit) if since.elapsed() >= limit => Some(PipelineError::GaveUp {
            what,
            failing_for_secs: since.elapsed().as_secs(),
            attempts,
            limit_secs: limit.as_secs(),
            error: error.to_string(),
            confirmed,
        }),
        _ => None,
    }
}

/// The next delay of a capped exponential backoff.
pub(super) fn doubled(delay: Duration) -> Duration {
    (delay * 2).min(RETRY_MAX)
}

/// `delay` give or take a quarter, so that many pipelines cut off by one outage do not all
/// knock at once when it ends.
pub(super) fn jittered(delay: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let spread = if getrandom::fill(&mut byte).is_ok() {
        f64::from(byte[0]) / 255.0
    } else {
        0.5
    };
    delay.mul_f64(0.75 + spread / 2.0)
}

impl Backoff {
    pub(crate) fn new(what: &'static str, limit: Option<Duration>) -> Self {
        Backoff {
            what,
            delay: RETRY_MIN,
            attempts: 0,
            since: None,
            told: None,
            limit,
        }
    }

    /// `Ok(true)` to try again after the wait, `Ok(false)` when the step succeeded or failed
    /// for good. A stop request during the wait ends the retries: the flush stays uncommitted
    /// and is replayed at the next start.
    pub(crate) async fn after<T>(
        &mut self,
        result: &Result<T, CommitError>,
        confirmed: Lsn,
        shutdown: &mut Shutdown,
    ) -> Result<bool, PipelineError> {
        match result {
            Ok(_) => {
                if let Some(since) = self.since {
                    tracing::info!(
                        attempts = self.attempts,
                        failed_for = ?since.elapsed(),
                        "{}: the sink is reachable again",
                        self.what
                    );
                }
                Ok(false)
            }
            Err(CommitError::Sink(e)) if e.is_transient() => {
                self.attempts += 1;
                let since = *self.since.get_or_insert_with(Instant::now);
                if let Some(gave_up) =
                    gave_up(self.what, since, self.attempts, self.limit, e, confirmed)
                {
                    return Err(gave_up);
                }
                let tell = self.told.is_none_or(|t| t.elapsed() >= TELL_EVERY);
                if tell {
                    self.told = Some(Instant::now());
                }
                if tell {
                    // Before the first commit of a run nothing is confirmed yet to speak of.
                    let held = if confirmed == Lsn::ZERO {
                        String::new()
                    } else {
                        format!(", nothing past {confirmed} is confirmed")
                    };
                    tracing::warn!(
                        attempts = self.attempts,
                        retry_in = ?self.delay,
                        failing_for = ?since.elapsed(),
                        error = %e,
                        "{} failed; trying again with backoff for as long as it fails{held}",
                        self.what
                    );
                }
                let stop = async {
                    while !*shutdown.borrow_and_update() {
                        if shutdown.changed().await.is_err() {
                            break;
                        }
                    }
                };
                tokio::select! {
                    _ = tokio::time::sleep(jittered(self.delay)) => {}
                    _ = stop => {
                        return Err(PipelineError::Interrupted { what: self.what, confirmed });
                    }
                }
                self.delay = doubled(self.delay);
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let d = jittered(Duration::from_secs(4));
            assert!(
                d >= Duration::from_secs(3) && d <= Duration::from_secs(5),
                "{d:?}"
            );
        }
    }
}
