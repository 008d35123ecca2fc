//! What the commands ask of an Iceberg table ([`crate::lake::tables::TableSet`]), answered
//! from its metadata and manifests. A table's version, for people, is its snapshot's sequence
//! number.

use object_store::path::Path;

use super::metadata::{Snapshot, TableMetadata};
use super::pointer::Catalog;
use super::table::{IcebergError, Table};
use super::tables::commit_error;
use crate::lake::commit::CommitError;
use crate::lake::sink::Sink;
use crate::lake::tables::tend::{LiveFile, TableView};

/// The tables in the sink: with a catalog, those it holds in its namespace at the sink;
/// without, folders with a `metadata/` folder that holds a metadata file.
pub async fn table_names(
    sink: &Sink,
    catalog: Option<&Catalog>,
) -> Result<Vec<String>, CommitError> {
    if let Some(catalog) = catalog {
        let names = catalog.table_names(sink).await;
        return names.map_err(|e| commit_error("", 0, e.into()));
    }
    let mut names = Vec::new();
    for folder in sink.list_dir(None).await?.folders {
        if folder.starts_with(crate::lake::commit::STATE_PREFIX) {
            continue;
        }
        let metadata = Path::from(format!("{folder}/metadata"));
        let files = sink.list_names(&metadata).await?;
        if files.iter().any(|f| f.ends_with(".metadata.json")) {
            names.push(folder);
        }
    }
    names.sort();
    Ok(names)
}

fn failed(name: &str) -> impl FnOnce(IcebergError) -> CommitError + '_ {
    move |e| commit_error(name, 0, e)
}

/// Whether table `name` has metadata.
pub async fn exists(
    sink: &Sink,
    catalog: Option<&Catalog>,
    name: &str,
) -> Result<bool, CommitError> {
    let table = Table::open(sink.clone(), name, catalog);
    Ok(table.load().await.map_err(failed(name))?.is_some())
}

/// Table `name`'s current snapshot.
pub async fn latest(
    sink: &Sink,
    catalog: Option<&Catalog>,
    name: &str,
    app: &str,
) -> Result<TableView, CommitError> {
    let table = Table::open(sink.clone(), name, catalog);
    let Some(current) = table.load().await.map_err(failed(name))? else {
        return Ok(TableView::default());
    };
    let holds = current.metadata.position(app);
    match current.metadata.current_snapshot() {
        None => Ok(TableView {
            holds,
            ..TableView::default()
        }),
        Some(snapshot) => view(&table, snapshot, holds).await.map_err(failed(name)),
    }
}

/// Table `name` as of its first snapshot (in the current one's ancestry) that holds `app`'s
/// entry `needed` or a later one; `None` while none does.
pub async fn holding(
    sink: &Sink,
    catalog: Option<&Catalog>,
    name: &str,
    app: &str,
    needed: u64,
) -> Result<Option<TableView>, CommitError> {
    let table = Table::open(sink.clone(), name, catalog);
    let Some(current) = table.load().await.map_err(failed(name))? else {
        return Ok(None);
    };
    let Some((snapshot, holds)) = first_holding(&current.metadata, app, needed) else {
        return Ok(None);
    };
    let view = view(&table, snapshot, Some(holds))
        .await
        .map_err(failed(name))?;
    Ok(Some(view))
}

/// The oldest snapshot of the current ancestry whose position for `app` (its own, or the
/// nearest older one's) is `needed` or later, and that position.
fn first_holding<'a>(
    metadata: &'a TableMetadata,
    app: &str,
    needed: u64,
) -> Option<(&'a Snapshot, u64)> {
    let mut ancestry: Vec<&Snapshot> = metadata.ancestry().collect();
    ancestry.reverse();
    let mut held = None;
    for snapshot in ancestry {
        if snapshot
            .summary
            .get(super::metadata::APP_KEY)
            .map(String::as_str)
            == Some(app)
        {
            held = snapshot
                .summary
                .get(super::metadata::SEQUENCE_KEY)
                .and_then(|s| s.parse::<u64>().ok())
                .or(held);
        }
        if let Some(h) = held.filter(|h| *h >= needed) {
            return Some((snapshot, h));
        }
    }
    None
}

async fn view(
    table: &Table,
    snapshot: &Snapshot,
    holds: Option<u64>,
) -> Result<TableView, IcebergError> {
    let files = table.live_files(snapshot).await?;
    Ok(TableView {
        version: u64::try_from(snapshot.sequence_number).ok(),
        holds,
        files: files
            .into_iter()
            .map(|f| {
                let file = LiveFile {
                    bytes: f.file_size_in_bytes as u64,
                    rows: u64::try_from(f.record_count).ok(),
                };
                (table.relative(&f.file_path), file)
            })
            .collect(),
    })
}

/// Whether table `name`'s current snapshot no longer reads `file` (relative to the table):
/// `Some(None)` when it does not (when it stopped is not recorded per file).
pub async fn removed(
    sink: &Sink,
    catalog: Option<&Catalog>,
    name: &str,
    file: &str,
) -> Result<Option<Option<i64>>, CommitError> {
    let view = latest(sink, catalog, name, "").await?;
    Ok((!view.files.contains_key(file)).then_some(None))
}
