//! `tributary vacuum`: delete the files the pipeline's tables no longer read, once the
//! versions that stopped reading them are older than the retention (seven days unless told),
//! beside the running pipeline. Which files go is each format's answer
//! ([`TableSet::vacuumable`]): a table is read before its folder is listed, so a file written
//! meanwhile is never taken for one the table removed. Where the format's old versions go by
//! a commit (Iceberg's snapshots expire), that commit is made once the table is known not to
//! be left alone, and the files it left unreferenced are deleted.
//!
//! A change-log table whose current-state table (kept, `mirror = true`) is behind it is left
//! alone: the pipeline applies the flushes the current-state table misses from their files
//! (right after the change-log table while it runs, at its next start when it stopped between
//! the two), and those may be among the files removed. One that missed flushes while mirror
//! was off is built again from the whole change-log table at the next flush of its output, and
//! is left alone until then too. A current-state table the pipeline file does not keep holds
//! nothing back: nothing will read removed files for it.

use std::fmt;

use futures::StreamExt;
use object_store::path::Path;

use super::compact::{TablesError, table_set, tables};
use crate::config::PipelineConfig;
use crate::lake::commit::{CommitError, CommitLog, Writer};
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::{
    DEFAULT_RETENTION_MS, MIRROR_SUFFIX, Plan, TableSet, Vacuumable, mirror_name,
};
use crate::units::human_bytes;

/// Deletes in flight at once.
const DELETE_AHEAD: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum VacuumError {
    #[error(
        "tributary vacuum deletes the files a sink's tables no longer read, and this pipeline lands Parquet files with a commit log (sink.format = \"parquet\"), whose entries name every file it keeps"
    )]
    NotTables,
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

/// Vacuum every table of the pipeline's sink, or only `options.output`.
pub async fn run(config: &PipelineConfig, options: &VacuumOptions) -> Result<Vacuum, VacuumError> {
    let sink = Sink::open(&config.sink.url, &config.sink.options)?;
    let set = table_set(config, &sink, "vacuum")
        .await?
        .ok_or(VacuumError::NotTables)?;
    let names = tables(&set, options.output.as_deref()).await?;
    let log = CommitLog::new(sink.clone(), Writer::named("vacuum"));
    let retention = retention_text(options.retention_ms);
    if options.retention_ms < DEFAULT_RETENTION_MS {
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
        // A format whose old versions go by a commit makes it here, unless this is a dry run
        // or the table may have to be left alone (a current-state table behind it): that is
        // read first, without changing anything.
        let committing = !options.dry_run && set.expires_by_commit();
        let read_first = !committing || mirrored.contains(&name);
        let reason = match set
            .vacuumable(&name, now_ms, options.retention_ms, read_first)
            .await?
        {
            Vacuumable::LeftAlone(reason) => reason,
            Vacuumable::Plan { plan, holds } => {
                let behind = match mirrored.contains(&name) {
                    true => behind_mirror(&set, &name, holds, through).await?,
                    false => None,
                };
                match behind {
                    Some(reason) => reason,
                    None => {
                        let plan = match committing && read_first {
                            true => expire(&set, &name, now_ms, options.retention_ms).await?,
                            false => plan,
                        };
                        tables.push(delete(&sink, name, plan, options, &retention).await?);
                        continue;
                    }
                }
            }
        };
        tracing::warn!(table = %name, "not vacuumed: {reason}");
        tables.push(Vacuumed {
            table: name,
            plan: Plan::default(),
            bytes: 0,
            skipped: Some(reason),
        });
    }
    Ok(Vacuum {
        tables,
        retention_ms: options.retention_ms,
        dry_run: options.dry_run,
    })
}

/// Commit the expiry of table `name`'s old versions; what it left unreferenced.
async fn expire(
    set: &TableSet,
    name: &str,
    now_ms: i64,
    retention_ms: i64,
) -> Result<Plan, CommitError> {
    Ok(
        match set.vacuumable(name, now_ms, retention_ms, false).await? {
            Vacuumable::Plan { plan, .. } => plan,
            Vacuumable::LeftAlone(_) => Plan::default(),
        },
    )
}

/// Delete the files `plan` names of table `name` (unless this is a dry run).
async fn delete(
    sink: &Sink,
    name: String,
    plan: Plan,
    options: &VacuumOptions,
    retention: &str,
) -> Result<Vacuumed, SinkError> {
    let bytes = plan.delete.iter().map(|(_, size)| size).sum();
    if !plan.delete.is_empty() && !options.dry_run {
        tracing::info!(
            table = %name,
            files = plan.delete.len(),
            bytes = %human_bytes(bytes),
            "vacuuming: deleting the files the table's versions stopped reading more than {retention} ago"
        );
        let deletes = futures::stream::iter(&plan.delete)
            .map(|(path, _)| {
                let path = Path::from(format!("{name}/{path}"));
                async move { sink.delete(&path).await }
            })
            .buffer_unordered(DELETE_AHEAD);
        futures::pin_mut!(deletes);
        while let Some(deleted) = deletes.next().await {
            deleted?;
        }
    }
    tracing::info!(table = %name, deleted = plan.delete.len(), waiting = plan.waiting, dry_run = options.dry_run, "vacuumed");
    Ok(Vacuumed {
        table: name,
        plan,
        bytes,
        skipped: None,
    })
}

/// Why change-log table `name`, holding commit entry `holds`, must wait: its current-state
/// table, which the pipeline keeps, holds an earlier flush of the pipeline than it does.
/// `through` is the latest commit entry's `tables_through`: the pipeline's tables held every
/// entry up to it.
async fn behind_mirror(
    set: &TableSet,
    name: &str,
    holds: Option<u64>,
    through: Option<u64>,
) -> Result<Option<String>, CommitError> {
    if name.ends_with(MIRROR_SUFFIX) {
        return Ok(None);
    }
    let mirror = mirror_name(name);
    let current = set.latest(&mirror).await?;
    if current.version.is_none() {
        return Ok(None);
    }
    let (log, held) = (holds, current.holds);
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
            writeln!(f, "vacuum: the sink holds no table yet")?;
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
