//! `tributary vacuum`: delete the data files the pipeline's Delta tables no longer read, once
//! the commits that removed them are older than the retention (seven days unless told), beside
//! the running pipeline. Which files go is [`delta::vacuum::plan`]'s answer.
//!
//! Each table is read before its folder is listed, so a file written meanwhile is never taken
//! for one the table removed. A change-log table whose current-state table (kept, `mirror =
//! true`) is behind it is left alone: the pipeline applies the flushes the current-state table
//! misses from their files (right after the change-log table while it runs, at its next start
//! when it stopped between the two), and those may be among the files removed. One that missed
//! flushes while mirror was off is built again from the whole change-log table at the next
//! flush of its output, and is left alone until then too. A current-state table the pipeline
//! file does not keep holds nothing back: nothing will read removed files for it.

use std::collections::BTreeMap;
use std::fmt;

use futures::StreamExt;
use object_store::path::Path;

use super::compact::{TablesError, tables};
use crate::config::PipelineConfig;
use crate::lake::TableFormat;
use crate::lake::commit::{CommitError, CommitLog, Writer};
use crate::lake::delta::vacuum::{COMPACTED, Plan, Present, plan};
use crate::lake::delta::{self, MIRROR_SUFFIX, TableState, mirror_name};
use crate::lake::sink::{Sink, SinkError};
use crate::units::human_bytes;

/// Deletes in flight at once.
const DELETE_AHEAD: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum VacuumError {
    #[error(
        "tributary vacuum deletes the files Delta tables no longer read, and this pipeline lands Parquet files with a commit log (sink.format = \"parquet\"), whose entries name every file it keeps"
    )]
    NotDelta,
    #[error(transparent)]
    Tables(#[from] TablesError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// How to vacuum.
#[derive(Debug, Clone)]
pub struct VacuumOptions {
    /// Only this table (an output, or an output's `__current` table).
    pub output: Option<String>,
    /// Files whose removal is younger than this stay.
    pub retention_ms: i64,
    /// Say what would be deleted, and delete nothing.
    pub dry_run: bool,
}

/// What a vacuum did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vacuumed {
    pub table: String,
    pub plan: Plan,
    pub bytes: u64,
    /// Why the table was left alone.
    pub skipped: Option<String>,
}

/// What a vacuum did, one line per table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vacuum {
    pub tables: Vec<Vacuumed>,
    pub retention_ms: i64,
    pub dry_run: bool,
}

/// Vacuum every Delta table of the pipeline's sink, or only `options.output`.
pub async fn run(config: &PipelineConfig, options: &VacuumOptions) -> Result<Vacuum, VacuumError> {
    if config.sink.format != TableFormat::Delta {
        return Err(VacuumError::NotDelta);
    }
    let sink = Sink::open(&config.sink.url, &config.sink.options)?;
    let names = tables(&sink, options.output.as_deref()).await?;
    let log = CommitLog::new(sink.clone(), Writer::named("vacuum"));
    let app = log
        .identity()
        .await?
        .map(|i| delta::app_id(&i.database, &i.slot));
    let retention = retention_text(options.retention_ms);
    if options.retention_ms < delta::vacuum::DEFAULT_RETENTION_MS {
        tracing::warn!(
            "vacuuming with a retention of {retention}: a reader of a version older than that may find its files gone"
        );
    }
    let now_ms = crate::clock::unix_micros() / 1000;
    // Every entry through this one is in the tables the pipeline keeps.
    let through = log.latest().await?.and_then(|e| e.tables_through);
    let mirrored = config.mirrored();
    let mut tables = Vec::new();
    for name in names {
        // Every commit, not the latest checkpoint: a checkpoint keeps the removals of the
        // retention only, and the files removed before would never go.
        let state = delta::read_table(&sink, &name, TableState::default()).await?;
        let skip = match (cleaned_up(&sink, &name, &state).await?, &app) {
            (Some(reason), _) => Some(reason),
            (None, Some(app)) if mirrored.contains(&name) => {
                behind_mirror(&sink, &name, &state, app, through).await?
            }
            (None, _) => None,
        };
        if let Some(reason) = skip {
            tracing::warn!(table = %name, "not vacuumed: {reason}");
            tables.push(Vacuumed {
                table: name,
                plan: Plan::default(),
                bytes: 0,
                skipped: Some(reason),
            });
            continue;
        }
        let present = listing(&sink, &name).await?;
        let plan = plan(&state, &present, now_ms, options.retention_ms);
        let bytes = plan.delete.iter().map(|(_, size)| size).sum();
        if !plan.delete.is_empty() && !options.dry_run {
            tracing::info!(
                table = %name,
                files = plan.delete.len(),
                bytes = %human_bytes(bytes),
                "vacuuming: deleting the files the table's commits removed more than {retention} ago"
            );
            let deletes = futures::stream::iter(&plan.delete)
                .map(|(path, _)| {
                    let path = Path::from(format!("{name}/{path}"));
                    let sink = &sink;
                    async move { sink.delete(&path).await }
                })
                .buffer_unordered(DELETE_AHEAD);
            futures::pin_mut!(deletes);
            while let Some(deleted) = deletes.next().await {
                deleted?;
            }
        }
        tracing::info!(table = %name, deleted = plan.delete.len(), waiting = plan.waiting, dry_run = options.dry_run, "vacuumed");
        tables.push(Vacuumed {
            table: name,
            plan,
            bytes,
            skipped: None,
        });
    }
    Ok(Vacuum {
        tables,
        retention_ms: options.retention_ms,
        dry_run: options.dry_run,
    })
}

/// Why table `name`, whose commits from version 0 read as `state`, cannot be vacuumed: its
/// commits before a checkpoint were deleted (another writer's log clean-up), so which files
/// they removed is no longer known.
async fn cleaned_up(
    sink: &Sink,
    name: &str,
    state: &TableState,
) -> Result<Option<String>, CommitError> {
    if state.version.is_some() {
        return Ok(None);
    }
    Ok(delta::table::checkpointed(sink, name).await?.map(|at| {
        format!(
            "its commits before the checkpoint at version {} are gone (a log clean-up), and with them which files they removed",
            at.version.unwrap_or_default()
        )
    }))
}

/// Why change-log table `name` must wait: its current-state table, which the pipeline keeps,
/// holds an earlier flush of the pipeline than it does. `through` is the latest commit entry's
/// `tables_through`: the pipeline's tables held every entry up to it.
async fn behind_mirror(
    sink: &Sink,
    name: &str,
    state: &TableState,
    app: &str,
    through: Option<u64>,
) -> Result<Option<String>, CommitError> {
    if name.ends_with(MIRROR_SUFFIX) {
        return Ok(None);
    }
    let mirror = mirror_name(name);
    let current = delta::read_latest(sink, &mirror).await?;
    if current.version.is_none() {
        return Ok(None);
    }
    let (log, held) = (state.txn(app), current.txn(app));
    if held >= log {
        return Ok(None);
    }
    let holds = format!(
        "its current-state table {mirror} holds commit entry {} and the table {}",
        held.map_or("none".to_owned(), |h| h.to_string()),
        log.unwrap_or_default()
    );
    Ok(Some(match through {
        // The tables were counted as holding entries this one does not hold: it was not kept
        // while they landed.
        Some(through) if held < Some(through) => format!(
            "{holds}, though the pipeline counted entries up to {through} as in its tables: it missed flushes while mirror was off, and the pipeline builds it again from the whole change-log table at its next flush of this output; vacuum after that"
        ),
        _ => format!(
            "{holds}: the pipeline applies the flushes it misses from their files (right after the change-log table while it runs, at its next start if it stopped between the two), and this vacuum could delete some of them; vacuum again after that"
        ),
    }))
}

/// The data files in table `name`'s folder and its `_compacted/`, relative to the table.
async fn listing(sink: &Sink, name: &str) -> Result<BTreeMap<String, Present>, SinkError> {
    let mut present = BTreeMap::new();
    for (folder, prefix) in [
        (name.to_owned(), String::new()),
        (format!("{name}/{COMPACTED}"), format!("{COMPACTED}/")),
    ] {
        for (file, size, modified_ms) in sink.list_dated(&Path::from(folder)).await? {
            if file.ends_with(".parquet") {
                present.insert(format!("{prefix}{file}"), Present { size, modified_ms });
            }
        }
    }
    Ok(present)
}

/// A retention as people write it: the largest unit that divides it.
fn retention_text(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    for (size, unit) in UNITS {
        if ms % size == 0 && ms >= size {
            return format!("{}{unit}", ms / size);
        }
    }
    match ms {
        0 => "0s".to_owned(),
        _ => format!("{ms}ms"),
    }
}

impl fmt::Display for Vacuum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let retention = retention_text(self.retention_ms);
        let verb = match self.dry_run {
            true => "would delete",
            false => "deleted",
        };
        for t in &self.tables {
            if let Some(reason) = &t.skipped {
                writeln!(f, "vacuum: {}: left alone: {reason}", t.table)?;
                continue;
            }
            let p = &t.plan;
            write!(
                f,
                "vacuum: {}: {verb} {} files ({})",
                t.table,
                p.delete.len(),
                human_bytes(t.bytes)
            )?;
            if p.orphans > 0 {
                write!(
                    f,
                    ", {} of them left by compactions that did not commit",
                    p.orphans
                )?;
            }
            match p.waiting {
                0 => writeln!(f)?,
                n => writeln!(
                    f,
                    "; {n} removed files ({}) stay until their removal is {retention} old",
                    human_bytes(p.waiting_bytes)
                )?,
            }
        }
        if self.tables.is_empty() {
            writeln!(f, "vacuum: the sink holds no Delta table yet")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_are_told_in_their_largest_whole_unit() {
        assert_eq!(retention_text(7 * 86_400_000), "7d");
        assert_eq!(retention_text(36 * 3_600_000), "36h");
        assert_eq!(retention_text(90_000), "90s");
        assert_eq!(retention_text(0), "0s");
    }
}
