//! How much WAL the server keeps for a slot, and how safe that is: the figures an operator
//! alerts on before the server invalidates the slot (`max_slot_wal_keep_size`) or fills its
//! disk. Read in one query, so the current position and the slot's are of the same moment.

use tokio_postgres::Client;

use super::provision::{ProvisionError, query_error};

/// The values `pg_replication_slots.wal_status` takes, from safe to gone.
pub const WAL_STATUSES: [&str; 4] = ["reserved", "extended", "unreserved", "lost"];

/// A slot's WAL figures at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotWal {
    /// The server's WAL position minus the slot's `restart_lsn`: what the slot holds back.
    /// `None` while the slot has no `restart_lsn` (it is being created, or was invalidated).
    pub retained_bytes: Option<u64>,
    /// `safe_wal_size`: WAL that may still be written before the slot is in danger of being
    /// lost; `None` when `max_slot_wal_keep_size` is unlimited (or the slot is lost). Negative
    /// once the slot is past that limit.
    pub safe_bytes: Option<i64>,
    /// `wal_status`: one of [`WAL_STATUSES`].
    pub wal_status: Option<String>,
}

/// The figures of `slot`, `None` when the server has no such slot.
pub async fn sample(client: &Client, slot: &str) -> Result<Option<SlotWal>, ProvisionError> {
    let row = client
        .query_opt(
            // On a standby (decoding there, PostgreSQL 16) the position is what was replayed.
            "SELECT ((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                           ELSE pg_current_wal_lsn() END) - restart_lsn)::int8,
                    safe_wal_size, wal_status
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query_error(format!(
            "reading the WAL figures of slot {slot:?}"
        )))?;
    Ok(row.map(|r| SlotWal {
        retained_bytes: r
            .get::<_, Option<i64>>(0)
            .map(|b| u64::try_from(b).unwrap_or(0)),
        safe_bytes: r.get(1),
        wal_status: r.get(2),
    }))
}
