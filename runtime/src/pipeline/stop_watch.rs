//! A fast stop of the source server, noticed while the read stage is paused.
//!
//! A server shutting down waits for each walsender to send everything it has and for its
//! client to say it received it (the stream answers that on its own, see
//! `source::replication::stream`). While the in-flight budget is full the read stage takes
//! nothing, the stream stops reading its socket, and the walsender cannot send: `pg_ctl stop
//! -m fast` would wait until the pipeline had landed enough to read on, or until its own
//! timeout; a pipeline that is behind reads on only a batch at a time as its flushes land, so
//! the stop waits for it to read everything the server has. So once the stream has been
//! paused for [`PAUSED_FOR`], an SQL session of its own waits on the server. A fast stop ends
//! such sessions at once, with `admin_shutdown` (SQLSTATE 57P01), well before the walsenders
//! finish; the stream then closes its connection, the server stops, and what was not landed
//! comes again from the slot once the server is back (the read stage reconnects as after any
//! lost connection). The session is closed once the stream has read unpaused for
//! [`READING_FOR`], so a pipeline that keeps up holds no second session.

use std::time::Duration;

use crate::source::connect::{self, PgConfig};
use crate::source::replication::Confirmer;

/// How long the stream is paused before the session is opened...
const PAUSED_FOR: Duration = Duration::from_secs(1);
/// ...and how long it reads unpaused before the session is closed.
const READING_FOR: Duration = Duration::from_secs(10);
/// How often the pause is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// After the server refused the session or said it stops: the wait before the next.
const AFTER: Duration = Duration::from_secs(5);

/// The SQLSTATE of a session ended by a server shutting down (or by `pg_terminate_backend`,
/// which costs only a reconnect of the stream).
const ADMIN_SHUTDOWN: &str = "57P01";

/// Watches for a server stop while the stream of `confirmer` is paused. Runs until aborted.
pub(super) async fn watch(pg: PgConfig, confirmer: Confirmer) {
    loop {
        while confirmer
            .paused_for()
            .is_none_or(|paused| paused < PAUSED_FOR)
        {
            tokio::time::sleep(LOOK_EVERY).await;
        }
        let (client, mut closed) = match connect::sql_watched(&pg).await {
            Ok(session) => session,
            Err(error) => {
                // The server is down or refuses sessions: the stream finds out on its own.
                tracing::debug!(error = %crate::error_chain(&error), "no session to watch the source server from while paused");
                tokio::time::sleep(AFTER).await;
                continue;
            }
        };
        tracing::debug!(
            "paused behind the in-flight budget: watching the source server for a stop"
        );
        let ended = loop {
            tokio::select! {
                code = &mut closed => break Some(code.ok().flatten()),
                () = tokio::time::sleep(LOOK_EVERY) => {
                    if confirmer.reading_for().is_some_and(|reading| reading >= READING_FOR) {
                        break None;
                    }
                }
            }
        };
        drop(client);
        match ended {
            None => {}
            Some(Some(code)) if code == ADMIN_SHUTDOWN => {
                tracing::info!(
                    "the source server is shutting down while the pipeline is paused behind its in-flight budget: closing the replication stream so that the server need not wait; what was not landed comes again from the slot"
                );
                confirmer.server_stopping();
                tokio::time::sleep(AFTER).await;
            }
            Some(_) => tokio::time::sleep(AFTER).await,
        }
    }
}
