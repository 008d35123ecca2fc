//! The slot's WAL figures (`tributary_slot_*`), or with trigger capture the journal's rows and
//! size (`tributary_journal_*`), sampled from the source every `source.status_interval_secs`
//! over an SQL session of their own while the metrics endpoint is on.
//!
//! Sampling only watches: a sample that fails is logged once (and once when sampling works
//! again), keeps the last figures, and counts against readiness only when it keeps failing for
//! longer than `metrics.ready_after_failing_secs` (see [`super::health`]). It never stops the
//! pipeline; the replication stream has its own retries.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_postgres::Client;

use super::health::Failure;
use super::messages::Progress;
use crate::source::connect::{self, PgConfig};
use crate::source::slot_wal;

/// The longest one sample may take before it counts as failed: a source behind a network
/// partition does not answer at all.
const SAMPLE_PATIENCE: Duration = Duration::from_secs(10);

/// What is sampled.
pub(super) enum Watched {
    /// The slot of this name.
    Slot(String),
    /// Trigger capture's journal in this schema.
    Journal(String),
}

/// A sample.
enum Figures {
    Slot(Option<slot_wal::SlotWal>),
    Journal(Option<crate::source::trigger::capture::JournalSize>),
}

impl std::fmt::Display for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Watched::Slot(slot) => write!(f, "the WAL figures of slot {slot:?}"),
            Watched::Journal(schema) => {
                write!(f, "the size of the trigger journal in schema {schema:?}")
            }
        }
    }
}

/// Sample `watched` every `every` into `progress`, until dropped.
pub(super) async fn watch(
    pg: PgConfig,
    watched: Watched,
    every: Duration,
    progress: watch::Sender<Progress>,
) {
    let mut session: Option<Client> = None;
    let mut failing_since: Option<Instant> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let sampled = tokio::time::timeout(SAMPLE_PATIENCE, sample(&mut session, &pg, &watched))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {SAMPLE_PATIENCE:?}")));
        match sampled {
            Ok(figures) => {
                if let Some(since) = failing_since.take() {
                    tracing::info!(after = ?since.elapsed(), "sampling {watched} works again");
                }
                progress.send_if_modified(|p| {
                    match figures {
                        Figures::Slot(slot) => p.slot = slot,
                        Figures::Journal(journal) => p.journal = journal,
                    }
                    p.faults.slot_sample = None;
                    false
                });
            }
            Err(error) => {
                // A session that failed once is opened afresh next time.
                session = None;
                let since = *failing_since.get_or_insert_with(|| {
                    tracing::warn!(
                        %error,
                        "cannot sample {watched} from the source; the gauges keep their last \
                         values, and readiness turns false if this lasts"
                    );
                    Instant::now()
                });
                let error = format!("sampling {watched}: {error}");
                progress.send_if_modified(|p| {
                    p.faults.slot_sample = Some(Failure { since, error });
                    false
                });
            }
        }
    }
}

/// One sample over `session`, opened first when there is none.
async fn sample(
    session: &mut Option<Client>,
    pg: &PgConfig,
    watched: &Watched,
) -> Result<Figures, String> {
    let client = match session {
        Some(client) if !client.is_closed() => client,
        _ => session.insert(connect::sql(pg).await.map_err(|e| crate::error_chain(&e))?),
    };
    match watched {
        Watched::Slot(slot) => slot_wal::sample(client, slot).await.map(Figures::Slot),
        Watched::Journal(schema) => crate::source::trigger::capture::size(client, schema)
            .await
            .map(Figures::Journal),
    }
    .map_err(|e| crate::error_chain(&e))
}
