//! Failover readiness while the pipeline runs (`source.failover`): whether the standby of
//! `source.standby_url` holds a copy of the slot that a promotion keeps
//! ([`Progress::failover_ready`], for a `tributary_failover_ready` gauge), and shortening the
//! time until it does.
//!
//! A PostgreSQL 17 standby makes its copy of a failover slot temporary, with its own catalog
//! horizon, and drops a temporary copy at a promotion. The copy persists once the primary's slot
//! has moved past that horizon, and the primary's slot moves only at a running-xacts record
//! that the consumer then confirms past. The server writes one every 15 s while other WAL is
//! written, but the pipeline confirms only what lands (or, idle, once a segment of WAL has gone
//! by), so a source that is busy only outside the publication kept the copy temporary for as
//! long as that took. So this task asks the primary for a record
//! (`pg_log_standby_snapshot()`) and hands its position to the read stage, which confirms past
//! it as soon as the stream is idle there ([`crate::stream::read::ReadMachine::advance_past`]):
//! at the start, and again whenever the standby still shows a temporary copy (the record must
//! come after the copy was made). Without `source.standby_url` nothing can be seen, so it asks
//! at the start and once more after the standby's slot sync has surely looked.
//!
//! [`Hastening`] makes those decisions without IO. Like the slot's sampler, this task only
//! watches: a failure is logged once and never stops the pipeline, nor counts against its
//! readiness probe (the standby is not the pipeline's).

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_postgres::Client;

use super::messages::Progress;
use crate::Lsn;
use crate::source::connect::{self, PgConfig};
use crate::source::failover::{self, StandbyCopy};

/// The longest one question to a server may take: a server behind a network partition does
/// not answer at all.
const PATIENCE: Duration = Duration::from_secs(10);
/// The standby is looked at this often at first, so that a temporary copy is seen, and
/// hastened, within a second or two of the start...
const FIRST_LOOKS: Duration = Duration::from_secs(1);
/// ...for this long; then every `source.status_interval_secs`.
const FIRST_LOOKS_FOR: Duration = Duration::from_secs(60);
/// A PostgreSQL 17 slot sync worker that finds nothing to do sleeps longer each time, up to
/// 30 s: within this long of the start it has made its copy of a new slot.
const SYNC_LOOKS_WITHIN: Duration = Duration::from_secs(35);
/// After a record was asked for and the copy is still temporary, the next is asked for after
/// this long (the standby's next look may be up to 30 s away), doubling...
const ASK_AGAIN_FIRST: Duration = Duration::from_secs(15);
/// ...up to this.
const ASK_AGAIN_MAX: Duration = Duration::from_secs(300);

/// When to ask the primary for a running-xacts record: the decisions of this task, with time
/// passed in.
#[derive(Debug)]
pub(super) struct Hastening {
    started: Instant,
    asked: Option<Instant>,
    /// How long after the last question the next may be asked while the copy stays temporary.
    again_after: Duration,
    /// Without a standby to look at: whether the second (and last) question was asked.
    blind_again: bool,
    /// The role may not call `pg_log_standby_snapshot()`: nothing more is asked.
    refused: bool,
}

impl Hastening {
    pub(super) fn new(started: Instant) -> Self {
        Hastening {
            started,
            asked: None,
            again_after: ASK_AGAIN_FIRST,
            blind_again: false,
            refused: false,
        }
    }

    /// Whether to ask now, given what the standby holds (`None`: no standby to look at).
    /// Asking is recorded: a `true` is acted on.
    pub(super) fn ask_now(&mut self, copy: Option<&StandbyCopy>, now: Instant) -> bool {
        if self.refused {
            return false;
        }
        let due = match (copy, self.asked) {
            // Blind: at the start, and once after the standby has surely made its copy.
            (None, None) => true,
            (None, Some(_)) => {
                let due = !self.blind_again
                    && now.saturating_duration_since(self.started) >= SYNC_LOOKS_WITHIN;
                self.blind_again |= due;
                due
            }
            (Some(StandbyCopy::Temporary), None) => true,
            (Some(StandbyCopy::Temporary), Some(at)) => {
                let due = now.saturating_duration_since(at) >= self.again_after;
                if due {
                    self.again_after = (self.again_after * 2).min(ASK_AGAIN_MAX);
                }
                due
            }
            (Some(StandbyCopy::Persistent), _) => {
                // A copy that turns temporary again (another standby) starts afresh.
                self.asked = None;
                self.again_after = ASK_AGAIN_FIRST;
                return false;
            }
            // No copy yet, or one that a record would not help: nothing to hasten.
            (Some(_), _) => false,
        };
        if due {
            self.asked = Some(now);
        }
        due
    }

    /// The role may not ask: stop asking.
    pub(super) fn refused(&mut self) {
        self.refused = true;
    }

    /// How long until the standby is looked at again (`every` once the first minute is over).
    pub(super) fn next_look(&self, every: Duration, now: Instant) -> Duration {
        match now.saturating_duration_since(self.started) < FIRST_LOOKS_FOR {
            true => FIRST_LOOKS.min(every),
            false => every,
        }
    }
}

/// What the task needs.
pub(super) struct StandbyWatch {
    /// The source (the primary), where the records are asked for.
    pub primary: PgConfig,
    /// `source.standby_url`.
    pub standby_url: Option<String>,
    pub slot: String,
    /// `source.status_interval_secs`.
    pub every: Duration,
    /// Tells the read stage a position to confirm past.
    pub records: watch::Sender<Option<Lsn>>,
    pub progress: watch::Sender<Progress>,
}

/// Watch the standby and hasten its copy of the slot, until dropped.
pub(super) async fn watch(task: StandbyWatch) {
    let standby = match task.standby_url.as_deref().map(connect::parse_url) {
        None => None,
        Some(Ok(pg)) => Some(pg),
        Some(Err(error)) => {
            // The configuration was checked at load; this cannot happen, and costs only the
            // readiness figure if it does.
            tracing::warn!(error = %crate::error_chain(&error), "source.standby_url cannot be read: failover readiness is not watched");
            None
        }
    };
    let mut hastening = Hastening::new(Instant::now());
    let mut primary: Option<Client> = None;
    let mut session: Option<Client> = None;
    let mut last: Option<StandbyCopy> = None;
    loop {
        let copy = match &standby {
            Some(pg) => {
                let copy = look(&mut session, pg, &task.slot).await;
                tell(last.as_ref(), &copy, &task.slot);
                let ready = copy.ready();
                task.progress.send_if_modified(|p| {
                    p.failover_ready = Some(ready);
                    false
                });
                Some(copy)
            }
            None => None,
        };
        if hastening.ask_now(copy.as_ref(), Instant::now()) {
            match ask(&mut primary, &task.primary).await {
                Ok(Some(lsn)) => {
                    tracing::debug!(%lsn, "asked the primary for a running-xacts record: confirming past it once the stream is idle there, so that the standby's copy of the failover slot persists");
                    let _ = task.records.send(Some(lsn));
                }
                Ok(None) => {
                    hastening.refused();
                    tracing::info!(
                        "the primary refused pg_log_standby_snapshot() to this role (it is the \
                         superuser's unless granted: GRANT EXECUTE ON FUNCTION \
                         pg_log_standby_snapshot() TO <role>); the standby's copy of the \
                         failover slot then persists only after the server's own next \
                         running-xacts record (every 15 s while WAL is written) and a position \
                         confirmed after it, and until then a failover loses the slot"
                    );
                }
                Err(error) => tracing::warn!(
                    %error,
                    "could not ask the primary for a running-xacts record (asked again later); until the standby's copy of the failover slot persists, a failover loses the slot"
                ),
            }
        }
        last = copy;
        tokio::time::sleep(hastening.next_look(task.every, Instant::now())).await;
    }
}

/// What the standby holds of `slot`, over `session` (opened first when there is none).
async fn look(session: &mut Option<Client>, pg: &PgConfig, slot: &str) -> StandbyCopy {
    let asked = tokio::time::timeout(PATIENCE, async {
        let client = match session {
            Some(client) if !client.is_closed() => client,
            _ => session.insert(connect::sql(pg).await?),
        };
        failover::server_facts(client, slot).await
    })
    .await;
    let facts = match asked {
        Ok(Ok(facts)) => Ok(facts),
        Ok(Err(error)) => Err(crate::error_chain(&error)),
        Err(_) => Err(format!("no answer within {PATIENCE:?}")),
    };
    if facts.is_err() {
        // A session that failed once is opened afresh next time.
        *session = None;
    }
    StandbyCopy::judge(Some(&facts))
}

/// Log what the standby holds of `slot` when that changed since `last`: once ready, once not
/// ready (a warning after it was ready), and once when it cannot be asked.
fn tell(last: Option<&StandbyCopy>, copy: &StandbyCopy, slot: &str) {
    if last.map(std::mem::discriminant) == Some(std::mem::discriminant(copy)) {
        return;
    }
    let said = copy.describe(slot);
    match (last.is_some_and(StandbyCopy::ready), copy.ready()) {
        (true, false) => tracing::warn!("{said}"),
        _ => tracing::info!("{said}"),
    }
}

/// Ask the primary for a running-xacts record over `session` (opened first when there is
/// none): where it ends, or `None` when the role may not.
async fn ask(session: &mut Option<Client>, pg: &PgConfig) -> Result<Option<Lsn>, String> {
    let asked = tokio::time::timeout(PATIENCE, async {
        let client = match session {
            Some(client) if !client.is_closed() => client,
            _ => session.insert(connect::sql(pg).await?),
        };
        failover::log_standby_snapshot(client).await
    })
    .await;
    let asked = match asked {
        Ok(asked) => asked.map_err(|e| crate::error_chain(&e)),
        Err(_) => Err(format!("no answer within {PATIENCE:?}")),
    };
    if asked.is_err() {
        *session = None;
    }
    asked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blind_it_asks_at_the_start_and_once_after_the_standby_has_looked() {
        let t0 = Instant::now();
        let mut h = Hastening::new(t0);
        assert!(h.ask_now(None, t0));
        assert!(!h.ask_now(None, t0 + Duration::from_secs(1)));
        assert!(!h.ask_now(None, t0 + SYNC_LOOKS_WITHIN - Duration::from_millis(1)));
        assert!(h.ask_now(None, t0 + SYNC_LOOKS_WITHIN));
        for minutes in 1..60 {
            assert!(!h.ask_now(None, t0 + Duration::from_secs(60 * minutes)));
        }
    }

    #[test]
    fn a_temporary_copy_is_hastened_at_once_then_less_and_less_often() {
        let t0 = Instant::now();
        let mut h = Hastening::new(t0);
        // Before the standby has a copy, a record would not help.
        assert!(!h.ask_now(Some(&StandbyCopy::Missing), t0));
        let t1 = t0 + Duration::from_secs(1);
        assert!(h.ask_now(Some(&StandbyCopy::Temporary), t1));
        assert!(!h.ask_now(Some(&StandbyCopy::Temporary), t1 + Duration::from_secs(1)));
        let t2 = t1 + ASK_AGAIN_FIRST;
        assert!(h.ask_now(Some(&StandbyCopy::Temporary), t2));
        assert!(!h.ask_now(Some(&StandbyCopy::Temporary), t2 + ASK_AGAIN_FIRST));
        let t3 = t2 + ASK_AGAIN_FIRST * 2;
        assert!(h.ask_now(Some(&StandbyCopy::Temporary), t3));
        // Persistent: nothing asked, and a copy that turns temporary again (a new standby) is
        // hastened at once, then after the first wait again.
        let t4 = t3 + Duration::from_secs(3600);
        assert!(!h.ask_now(Some(&StandbyCopy::Persistent), t4));
        assert!(h.ask_now(Some(&StandbyCopy::Temporary), t4));
        assert!(h.ask_now(Some(&StandbyCopy::Temporary), t4 + ASK_AGAIN_FIRST));
        // The doubling stops at ASK_AGAIN_MAX.
        let mut at = t4 + ASK_AGAIN_FIRST;
        for _ in 0..10 {
            at += ASK_AGAIN_MAX;
            assert!(h.ask_now(Some(&StandbyCopy::Temporary), at));
        }
        // A standby that does not synchronise, or cannot be asked: nothing to hasten.
        let mut h = Hastening::new(t0);
        assert!(!h.ask_now(Some(&StandbyCopy::NotSynchronising), t0));
        assert!(!h.ask_now(Some(&StandbyCopy::Unreachable("refused".into())), t0));
    }

    #[test]
    fn a_refusal_stops_the_asking() {
        let t0 = Instant::now();
        let mut h = Hastening::new(t0);
        assert!(h.ask_now(Some(&StandbyCopy::Temporary), t0));
        h.refused();
        assert!(!h.ask_now(Some(&StandbyCopy::Temporary), t0 + ASK_AGAIN_MAX));
        assert!(!h.ask_now(None, t0 + ASK_AGAIN_MAX));
    }

    #[test]
    fn the_standby_is_looked_at_every_second_at_first() {
        let t0 = Instant::now();
        let h = Hastening::new(t0);
        let every = Duration::from_secs(10);
        assert_eq!(h.next_look(every, t0), FIRST_LOOKS);
        assert_eq!(h.next_look(every, t0 + FIRST_LOOKS_FOR), every);
        assert_eq!(
            h.next_look(Duration::from_millis(500), t0),
            Duration::from_millis(500)
        );
    }
}
