//! The slot's WAL figures (`tributary_slot_*`), sampled from the source every
//! `source.status_interval_secs` over an SQL session of their own while the metrics endpoint is
//! on.
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

/// Sample `slot` every `every` into `progress`, until dropped.
pub(super) async fn watch(
    pg: PgConfig,
    slot: String,
    every: Duration,
    progress: watch::Sender<Progress>,
) {
    let mut session: Option<Client> = None;
    let mut failing_since: Option<Instant> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let sampled = tokio::time::timeout(SAMPLE_PATIENCE, sample(&mut session, &pg, &slot))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {SAMPLE_PATIENCE:?}")));
        match sampled {
            Ok(figures) => {
                if let Some(since) = failing_since.take() {
                    tracing::info!(slot, after = ?since.elapsed(), "sampling the slot's WAL figures works again");
                }
                progress.send_if_modified(|p| {
                    p.slot = figures;
                    p.faults.slot_sample = None;
                    false
                });
            }
            Err(error) => {
                // A session that failed once is opened afresh next time.
                session = None;
                let since = *failing_since.get_or_insert_with(|| {
                    tracing::warn!(
                        slot,
                        %error,
                        "cannot sample the slot's WAL figures from the source; the tributary_slot_* \
                         gauges keep their last values, and readiness turns false if this lasts"
                    );
                    Instant::now()
                });
                let error = format!("sampling the WAL figures of slot {slot:?}: {error}");
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
    slot: &str,
) -> Result<Option<slot_wal::SlotWal>, String> {
    let client = match session {
        Some(client) if !client.is_closed() => client,
        _ => session.insert(connect::sql(pg).await.map_err(|e| crate::error_chain(&e))?),
    };
    slot_wal::sample(client, slot)
        .await
        .map_err(|e| crate::error_chain(&e))
}
