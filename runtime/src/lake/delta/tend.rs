//! What the commands ask of a Delta table ([`crate::lake::tables::TableSet`]), answered from
//! its log.

use std::collections::BTreeMap;

use object_store::path::Path;

use super::state::TableState;
use super::table::{checkpointed, commit_path, read_latest, read_table, read_table_holding};
use super::vacuum::plan;
use crate::lake::commit::CommitError;
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::tend::{COMPACTED, LiveFile, Present, TableView, Vacuumable};

/// `state` as a reader of it finds it, holding `app`'s entries.
fn view(state: &TableState, app: &str) -> TableView {
    TableView {
        version: state.version,
        holds: state.txn(app),
        files: state
            .files
            .iter()
            .map(|(path, add)| {
                let file = LiveFile {
                    bytes: add.size,
                    rows: super::compact::records(add),
                };
                (path.clone(), file)
            })
            .collect(),
    }
}

/// Whether `name` is a Delta table: its log's first commit is there.
pub async fn exists(sink: &Sink, name: &str) -> Result<bool, SinkError> {
    Ok(sink.size(&commit_path(name, 0)).await?.is_some())
}

/// Table `name`'s latest version.
pub async fn latest(sink: &Sink, name: &str, app: &str) -> Result<TableView, CommitError> {
    Ok(view(&read_latest(sink, name).await?, app))
}

/// Table `name` as of its first version that holds `app`'s entry `needed` (or a later one).
pub async fn holding(
    sink: &Sink,
    name: &str,
    app: &str,
    needed: u64,
) -> Result<Option<TableView>, CommitError> {
    let state = read_table_holding(sink, name, app, needed).await?;
    Ok(state.map(|s| view(&s, app)))
}

/// Whether a version of table `name` removed `file` (and no later one added it again), and
/// when, in milliseconds since the epoch, if the removal says.
pub async fn removed(
    sink: &Sink,
    name: &str,
    file: &str,
) -> Result<Option<Option<i64>>, CommitError> {
    let state = read_table(sink, name, TableState::default()).await?;
    Ok(state.tombstones.get(file).map(|r| r.deletion_timestamp))
}

/// What a vacuum at `now_ms` with `retention_ms` deletes from table `name`: read from every
/// commit (a checkpoint keeps only the removals within the retention, and the files removed
/// before would never go), then the folder listed, so a file written meanwhile is never taken
/// for one the table removed.
pub async fn vacuumable(
    sink: &Sink,
    name: &str,
    app: &str,
    now_ms: i64,
    retention_ms: i64,
) -> Result<Vacuumable, CommitError> {
    let state = read_table(sink, name, TableState::default()).await?;
    if state.version.is_none()
        && let Some(at) = checkpointed(sink, name).await?
    {
        return Ok(Vacuumable::LeftAlone(format!(
            "its commits before the checkpoint at version {} are gone (a log clean-up), and with them which files they removed",
            at.version.unwrap_or_default()
        )));
    }
    let present = listing(sink, name).await?;
    Ok(Vacuumable::Plan {
        plan: plan(&state, &present, now_ms, retention_ms),
        holds: state.txn(app),
    })
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
