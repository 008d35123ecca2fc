//! A current-state table (`<output>__current`) compared with the source directly: its version
//! that holds the commit entries up to the snapshot, read as it is (no replay), digested as
//! the source is.

use std::time::{Duration, Instant};

use object_store::path::Path;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::digest::{BatchCells, Shape};
use super::lake::Survey;
use super::replay::SourceState;
use super::report::{MirrorOutcome, MirrorReport};
use super::{VerifyError, digest_error};
use crate::Lsn;
use crate::lake::commit::CommitLog;
use crate::lake::delta::{self, mirror_name};
use crate::source::snapshot::SourceTable;

/// How often the wait for the current-state table looks again.
const POLL_EVERY: Duration = Duration::from_millis(250);

/// Compare `table`'s current-state table, if it has one, with `source` (its rows in the
/// snapshot at `at`). The pipeline publishes to the table after committing an entry, so this
/// waits up to `timeout` for the table to hold the entries before the snapshot.
/// With trigger capture no position splits the lake at the snapshot, and a current-state
/// table holds every change landed: it is named as not compared (`None` when `table` has none).
pub(super) async fn not_at_a_position(
    log: &CommitLog,
    table: &SourceTable,
) -> Result<Option<MirrorReport>, VerifyError> {
    let name = mirror_name(&table.name);
    if log
        .sink()
        .get(&delta::table::commit_path(&name, 0))
        .await?
        .is_none()
    {
        return Ok(None);
    }
    Ok(Some(MirrorReport {
        table: name,
        outcome: MirrorOutcome::NotAtSnapshot {
            reason: "with trigger capture it holds every change landed, and no position splits those at the snapshot; its change-log table is compared".into(),
        },
    }))
}

pub(super) async fn compare(
    log: &CommitLog,
    survey: &Survey,
    table: &SourceTable,
    shape: &Shape,
    source: &SourceState,
    at: Lsn,
    timeout: Duration,
) -> Result<Option<MirrorReport>, VerifyError> {
    let sink = log.sink();
    let name = mirror_name(&table.name);
    if sink
        .get(&delta::table::commit_path(&name, 0))
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let report = |outcome| {
        Ok(Some(MirrorReport {
            table: name.clone(),
            outcome,
        }))
    };
    let entries: Vec<_> = survey
        .entries
        .iter()
        .filter(|e| e.files.iter().any(|f| f.output == table.name))
        .collect();
    if let Some(across) = entries
        .iter()
        .find(|e| e.first_commit_lsn < at && e.last_commit_lsn >= at)
    {
        return report(MirrorOutcome::NotAtSnapshot {
            reason: format!(
                "commit entry {} holds changes from before and after the snapshot at {at} (the source was busy); verify again when it is quieter",
                across.sequence
            ),
        });
    }
    let Some(needed) = entries
        .iter()
        .filter(|e| e.last_commit_lsn < at)
        .map(|e| e.sequence)
        .max()
    else {
        return Ok(None);
    };
    let Some(identity) = log.identity().await? else {
        return Ok(None);
    };
    let app = delta::app_id(&identity.database, &identity.slot);
    let started = Instant::now();
    let state = loop {
        if let Some(state) = delta::read_table_holding(sink, &name, &app, needed).await? {
            break state;
        }
        if started.elapsed() >= timeout {
            return report(MirrorOutcome::NotAtSnapshot {
                reason: format!(
                    "it did not take commit entry {needed} within {}s (is the pipeline running?)",
                    timeout.as_secs()
                ),
            });
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    let version = state.version.unwrap_or_default();
    if state.txn(&app) != Some(needed) {
        return report(MirrorOutcome::NotAtSnapshot {
            reason: format!(
                "its version {version} went from before commit entry {needed} to entry {} in one commit",
                state.txn(&app).unwrap_or_default()
            ),
        });
    }
    let mut current = SourceState::new(shape.key.is_some());
    for add in state.files.values() {
        let path = Path::from(format!("{name}/{}", add.path));
        let bytes = sink.get(&path).await?.ok_or_else(|| {
            VerifyError::Task(format!(
                "{path}, which version {version} reads, is not in the sink"
            ))
        })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(|e| VerifyError::Task(format!("{path}: {e}")))?;
        for batch in reader {
            let batch = batch.map_err(|e| VerifyError::Task(format!("{path}: {e}")))?;
            let mut cells = BatchCells::named(&batch, shape).map_err(digest_error(shape))?;
            for i in 0..batch.num_rows() {
                current.add(cells.key(i), cells.row(i, None));
            }
        }
    }
    let (missing, extra, changed) = source.differences(&current);
    report(MirrorOutcome::Compared {
        version,
        rows: current.rows(),
        missing,
        extra,
        changed,
    })
}
