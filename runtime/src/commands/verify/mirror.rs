//! A current-state table (`<output>__current`) compared with the source directly: its version
//! that holds the commit entries up to the snapshot, read as it is (no replay), digested as
//! the source is.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use object_store::path::Path;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tokio_postgres::Client;

use super::digest::{BatchCells, Shape};
use super::lake::Survey;
use super::replay::SourceState;
use super::report::{MirrorOutcome, MirrorReport};
use super::{VerifyError, digest_error};
use crate::Lsn;
use crate::lake::commit::CommitLog;
use crate::lake::tables::{MIRROR_SUFFIX, TableSet, TableView, mirror_name};
use crate::source::snapshot::SourceTable;

/// How often the wait for the current-state table looks again.
const POLL_EVERY: Duration = Duration::from_millis(250);
/// How often that wait asks the pipeline for a commit entry that says what its tables hold.
const NUDGE_EVERY: Duration = Duration::from_secs(2);

/// Where and how long to look for `table`'s current-state table at the snapshot.
pub(super) struct At<'a> {
    /// The snapshot's position.
    pub at: Lsn,
    pub timeout: Duration,
    /// The outputs whose current-state tables the pipeline file keeps.
    pub mirrored: &'a BTreeSet<String>,
    /// The source, where a logical decoding message moves the pipeline on.
    pub client: &'a Client,
    /// The sink's tables.
    pub set: &'a TableSet,
}

/// With trigger capture no position splits the lake at the snapshot, and a current-state
/// table holds every change landed: it is named as not compared (`None` when `table` has none).
pub(super) async fn not_at_a_position(
    set: &TableSet,
    table: &SourceTable,
) -> Result<Option<MirrorReport>, VerifyError> {
    let name = mirror_name(&table.name);
    if !set.exists(&name).await? {
        return Ok(None);
    }
    Ok(Some(MirrorReport {
        table: name,
        outcome: MirrorOutcome::NotAtSnapshot {
            reason: "with trigger capture it holds every change landed, and no position splits those at the snapshot; its change-log table is compared".into(),
        },
    }))
}

/// Compare `table`'s current-state table, if it has one, with `source` (its rows in the
/// snapshot at `at.at`). The pipeline publishes to the table after committing an entry, so this
/// waits up to `at.timeout` for the table to hold the entries before the snapshot; a table the
/// pipeline file does not keep, or that the running pipeline passes over, is named as not
/// compared at once.
pub(super) async fn compare(
    log: &CommitLog,
    survey: &Survey,
    table: &SourceTable,
    shape: &Shape,
    source: &SourceState,
    at: &At<'_>,
) -> Result<Option<MirrorReport>, VerifyError> {
    let sink = log.sink();
    let name = mirror_name(&table.name);
    if !at.set.exists(&name).await? {
        return Ok(None);
    }
    let report = |outcome| {
        Ok(Some(MirrorReport {
            table: name.clone(),
            outcome,
        }))
    };
    if !at.mirrored.contains(&table.name) {
        return report(MirrorOutcome::NotKept {
            reason: format!(
                "outputs.{:?}.mirror is off in the pipeline file, so the pipeline no longer keeps it up to date; its change-log table is compared (turn mirror on again to have it rebuilt and compared, or delete its folder to drop it)",
                table.name
            ),
        });
    }
    let entries: Vec<_> = survey
        .entries
        .iter()
        .filter(|e| e.files.iter().any(|f| f.output == table.name))
        .collect();
    let snapshot = at.at;
    if let Some(across) = entries
        .iter()
        .find(|e| e.first_commit_lsn < snapshot && e.last_commit_lsn >= snapshot)
    {
        return report(MirrorOutcome::NotAtSnapshot {
            reason: format!(
                "commit entry {} holds changes from before and after the snapshot at {snapshot} (the source was busy); verify again when it is quieter",
                across.sequence
            ),
        });
    }
    let Some(needed) = entries
        .iter()
        .filter(|e| e.last_commit_lsn < snapshot)
        .map(|e| e.sequence)
        .max()
    else {
        return Ok(None);
    };
    let state = match wait_for_entry(log, &name, needed, at).await? {
        Ok(state) => state,
        Err(outcome) => return report(outcome),
    };
    let version = state.version.unwrap_or_default();
    if state.holds != Some(needed) {
        return report(MirrorOutcome::NotAtSnapshot {
            reason: format!(
                "its version {version} went from before commit entry {needed} to entry {} in one commit",
                state.holds.unwrap_or_default()
            ),
        });
    }
    let mut current = SourceState::new(shape.key.is_some());
    for file in state.files.keys() {
        let path = Path::from(format!("{name}/{file}"));
        let Some(bytes) = sink.get(&path).await? else {
            return Err(gone(at.set, &name, version, file, needed).await?);
        };
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

/// Current-state table `name` as of its first version that holds commit entry `needed`, once
/// the pipeline has published it; the outcome to report instead when it never will.
///
/// The pipeline applies a flush to its current-state tables before it counts the flush as in
/// its tables, and a commit entry records how far that count was (`tables_through`). So a
/// latest entry read *before* the table, that counts `needed` in, while the table still does
/// not hold it, proves that the running pipeline does not keep the table. The wait writes a
/// logical decoding message now and then, so that an idle pipeline writes such an entry.
async fn wait_for_entry(
    log: &CommitLog,
    name: &str,
    needed: u64,
    at: &At<'_>,
) -> Result<Result<TableView, MirrorOutcome>, VerifyError> {
    let started = Instant::now();
    let mut nudged = Instant::now();
    loop {
        let latest = log.latest().await?;
        let through = latest.as_ref().and_then(|e| e.tables_through);
        if let Some(state) = at.set.holding(name, needed).await? {
            return Ok(Ok(state));
        }
        if let (Some(through), Some(latest)) = (through, &latest)
            && through >= needed
        {
            return Ok(Err(MirrorOutcome::NotKept {
                reason: format!(
                    "the pipeline's commit entry {} says its tables hold entry {needed}, and this one does not: the running pipeline does not keep it up to date (is outputs.{:?}.mirror off where it runs?); its change-log table is compared",
                    latest.sequence,
                    name.strip_suffix(MIRROR_SUFFIX).unwrap_or(name)
                ),
            }));
        }
        if started.elapsed() >= at.timeout {
            return Ok(Err(MirrorOutcome::NotAtSnapshot {
                reason: format!(
                    "it did not take commit entry {needed} within {}s (is the pipeline running?)",
                    at.timeout.as_secs()
                ),
            }));
        }
        if nudged.elapsed() >= NUDGE_EVERY {
            nudged = Instant::now();
            super::nudge(at.client, at.at).await;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The error for `file` of current-state table `name`, which its version `version` (the one
/// holding commit entry `needed`) reads and the sink no longer holds: a later version removed
/// it and a vacuum deleted it, or something else did.
async fn gone(
    set: &TableSet,
    name: &str,
    version: u64,
    file: &str,
    needed: u64,
) -> Result<VerifyError, VerifyError> {
    let why = match set.removed(name, file).await? {
        Some(removed_at) => {
            let when = removed_at
                .map(|ms| format!(" at {}", crate::lake::commit::utc_text(ms * 1000)))
                .unwrap_or_default();
            format!(
                "a later version of the table removed it{when} (a flush rewrote its rows, or a compaction merged it) and `tributary vacuum` has deleted it since, its --retain being shorter than the time from this verify's snapshot to now; run verify again, and keep vacuum's --retain (seven days by default) longer than a verify run takes"
            )
        }
        None => "no later version removed it, so something other than Tributary deleted it, and readers of that version fail too; restore it, or delete the table's folder so that the pipeline builds it again from the change-log table at its next flush of the output".to_owned(),
    };
    Ok(VerifyError::MirrorFileGone {
        table: name.to_owned(),
        file: file.to_owned(),
        version,
        needed,
        why,
    })
}
