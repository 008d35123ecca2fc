//! `tributary check`'s judgement of where a run would start: a first run (an empty commit log)
//! has `source.start_from` judged as the start judges it; a later run resumes from the log.
//! The source's prerequisites themselves are [`crate::source::prerequisites`].

use tokio_postgres::Client;

use crate::Lsn;
use crate::config::SourceConfig;
use crate::lake::commit::{Checkpoint, CommitEntry, StartedFrom};
use crate::source::connect::{self, PgConfig, SslMode};
use crate::source::position;
use crate::source::prerequisites::Report;
use crate::source::provision::{self, ProvisionError, SlotState};

/// What a run would make of `source.start_from`: a first run (an empty commit log) has its
/// position judged as the start judges it; a later run resumes from the log and ignores
/// `start_from` (a warning when it differs from what the first run started from).
pub fn judge_start(
    report: &mut Report,
    source: &SourceConfig,
    latest: Option<&CommitEntry>,
    first: Option<&StartedFrom>,
    slot: Option<&SlotState>,
    current: Lsn,
) {
    match latest {
        None => match position::first_start(source.start_from, &source.slot, slot, current) {
            Ok(_) => report.ok(format!(
                "start: a first run (the sink's commit log is empty), from {}",
                source.start_from
            )),
            Err(e) => report.fail(e),
        },
        Some(entry) => {
            let resume = Checkpoint::from_entry(Some(entry)).confirmed();
            report.ok(format!(
                "start: resumes from the sink's commit log at {resume} (entry {})",
                entry.sequence
            ));
            if let Some(ignored) = position::ignored(source.start_from, first, resume) {
                report.warn(ignored);
            }
        }
    }
}

/// [`judge_start`] with the slot as it is now; `latest` and `first` are the commit log's latest
/// and first entries.
pub async fn check_start(
    report: &mut Report,
    client: &Client,
    source: &SourceConfig,
    latest: Option<&CommitEntry>,
    first: Option<&CommitEntry>,
) -> Result<(), ProvisionError> {
    let slot = provision::slot_state(client, &source.slot).await?;
    let current = provision::current_wal_lsn(client).await?;
    let first = first.and_then(|e| e.started_from.as_ref());
    judge_start(report, source, latest, first, slot.as_ref(), current);
    Ok(())
}

/// How each kind of connection to the source is protected ("TLS 1.3 (...), verify-full against
/// ca.pem, channel binding", or "unencrypted"), with a warning when `sslmode` lets a
/// connection that crosses a network go unencrypted or unchecked.
pub async fn check_connections(
    report: &mut Report,
    client: &Client,
    pg: &PgConfig,
) -> Result<(), ProvisionError> {
    report.ok(format!(
        "connection (SQL): {}",
        connect::describe_sql(client, pg).await?
    ));
    // A role the checks above refused (no REPLICATION, say) would only be refused again.
    if report.is_ready() {
        match connect::replication(pg).await {
            Ok(replication) => report.ok(format!(
                "connection (replication): {}",
                replication.protection()
            )),
            Err(e) => report.fail(ProvisionError::ReplicationConnection(Box::new(e))),
        }
    }
    if pg.ssl_mode() <= SslMode::Prefer && !pg.is_local() {
        report.warn(ProvisionError::WeakSslMode {
            mode: pg.ssl_mode(),
            hosts: pg.hosts(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StartFrom;
    use crate::source::prerequisites::tests::{failures, source};

    #[test]
    fn a_first_runs_position_is_judged_and_a_later_run_resumes() {
        let mut cfg = source();
        cfg.start_from = StartFrom::Lsn(Lsn(0x10));
        let held = SlotState {
            plugin: "pgoutput".into(),
            database: "shop".into(),
            active_pid: None,
            confirmed_flush_lsn: Some(Lsn(0x20)),
            restart_lsn: None,
            wal_status: None,
            safe_wal_size: None,
            two_phase: false,
        };
        let mut report = Report::default();
        judge_start(&mut report, &cfg, None, None, Some(&held), Lsn(0x30));
        assert!(
            failures(&report)[0].contains("is behind slot \"shop\"'s confirmed position 0/20"),
            "{report}"
        );

        let mut entry = crate::lake::commit::Checkpoint::default().open_entry(
            &crate::lake::commit::Writer::named("w"),
            "shop",
            Lsn(0x20),
            false,
            1,
        );
        entry.started_from = Some(StartedFrom {
            start_from: "tail".into(),
            lsn: Lsn(0x20),
        });
        let mut report = Report::default();
        judge_start(
            &mut report,
            &cfg,
            Some(&entry),
            entry.started_from.as_ref(),
            Some(&held),
            Lsn(0x30),
        );
        assert!(report.is_ready(), "{report}");
        let text = report.to_string();
        assert!(
            text.contains("ok    start: resumes from the sink's commit log at 0/20 (entry 1)")
                && text.contains("warn  source.start_from = \"lsn:0/10\" is ignored"),
            "{text}"
        );
    }
}
