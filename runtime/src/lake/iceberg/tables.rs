//! The pipeline's Iceberg tables, as the seam ([`crate::lake::tables::Tables`]) asks for them:
//! each flush published to its outputs' tables as one snapshot per table, carrying the
//! pipeline's position; a table that holds the flush already is left alone, one that holds a
//! later flush of the pipeline means another instance took over (or, in a catch-up, that the
//! writer before went on publishing). A mirrored output's current-state table then takes the
//! flush too ([`super::current`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::catalog::CatalogError;
use super::pointer::Catalog;
use super::table::{IcebergError, Published, Table};
use crate::lake::commit::{CommitError, Writer};
use crate::lake::sink::Sink;
use crate::lake::tables::current::Mirrors;
use crate::lake::tables::file::by_output;
use crate::lake::tables::overtaken::Seen;
use crate::lake::tables::{Later, TableFile, mirror_name};

/// The sink's Iceberg tables as one writer publishes to them.
#[derive(Clone)]
pub struct Tables {
    pub(super) sink: Sink,
    pub(super) app: String,
    pub(super) writer: Writer,
    catalog: Option<Catalog>,
    pub(super) mirrors: Option<Arc<Mirrors>>,
    /// What the current-state tables' loads read of the change logs.
    pub(super) seen: Arc<Seen>,
    /// Each table as first opened: a table keeps the manifests it read, which never change,
    /// so a flush reads only those the flushes since added.
    opened: Arc<Mutex<BTreeMap<String, Table>>>,
}

impl Tables {
    pub fn new(sink: Sink, app: String, writer: Writer) -> Tables {
        Tables {
            sink,
            app,
            writer,
            catalog: None,
            mirrors: None,
            seen: Arc::default(),
            opened: Arc::default(),
        }
    }

    /// Also keep the current-state tables of `mirrors.outputs`.
    pub fn with_mirrors(self, mirrors: Mirrors) -> Tables {
        let mirrors = (!mirrors.outputs.is_empty()).then(|| Arc::new(mirrors));
        Tables { mirrors, ..self }
    }

    /// The tables through `catalog` (`sink.catalog`) instead of storage alone.
    pub fn with_catalog(self, catalog: Option<Catalog>) -> Tables {
        Tables {
            catalog,
            opened: Arc::default(),
            ..self
        }
    }

    pub(super) fn table(&self, output: &str) -> Table {
        let mut opened = self.opened.lock().expect("not poisoned");
        opened
            .entry(output.to_owned())
            .or_insert_with(|| Table::open(self.sink.clone(), output, self.catalog.as_ref()))
            .clone()
    }

    /// Whether `output`'s tables (its change log, and its current-state table when it keeps
    /// one) hold flush `sequence` of this pipeline, or a later one.
    pub async fn hold(&self, output: &str, sequence: u64) -> Result<bool, CommitError> {
        let mut tables = vec![output.to_owned()];
        if self
            .mirrors
            .as_deref()
            .is_some_and(|m| m.outputs.contains(output))
        {
            tables.push(mirror_name(output));
        }
        for table in tables {
            let position = self
                .table(&table)
                .position(&self.app)
                .await
                .map_err(|e| commit_error(&table, sequence, e))?;
            if position.is_none_or(|p| p < sequence) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Publish the files of flush `sequence` to their outputs' tables, one snapshot each.
    pub async fn publish_as(
        &self,
        sequence: u64,
        files: &[TableFile],
        later: Later,
    ) -> Result<(), CommitError> {
        let appends = by_output(files).into_iter().map(|(output, files)| {
            let files = files.into_iter().cloned().collect();
            self.append(output, sequence, files, later)
        });
        futures::future::try_join_all(appends).await?;
        Ok(())
    }

    async fn append(
        &self,
        output: &str,
        sequence: u64,
        files: Vec<TableFile>,
        later: Later,
    ) -> Result<(), CommitError> {
        let published = self
            .table(output)
            .publish(&self.app, sequence, &files)
            .await
            .map_err(|e| commit_error(output, sequence, e))?;
        match published {
            Published::Appended { snapshot_id } => {
                tracing::debug!(%output, sequence, snapshot_id, "published to the Iceberg table");
                crate::failpoint::reached("tables.after-table").await;
            }
            Published::Held { position } if position == sequence || later == Later::Holds => {}
            Published::Held { position } => {
                return Err(CommitError::TableAhead {
                    output: output.to_owned(),
                    ours: sequence,
                    theirs: position,
                    writer: Box::new(self.writer.clone()),
                });
            }
        }
        self.mirror(output, sequence, &files, later).await
    }
}

/// An Iceberg table's error as the commit protocol has it: the sink's own errors stay the
/// sink's (an outage is retried like any other write), and so does a catalog's outage or a
/// commit to it of unknown outcome (the retry reloads the table and finds the flush there or
/// not); the rest name the table.
pub fn commit_error(output: &str, sequence: u64, error: IcebergError) -> CommitError {
    match error {
        IcebergError::Sink(e) => CommitError::Sink(e),
        IcebergError::Commit(e) => e,
        IcebergError::Catalog(
            e @ (CatalogError::Failed { .. } | CatalogError::CommitStateUnknown { .. }),
        ) => CommitError::Sink(crate::lake::sink::SinkError::Catalog {
            message: e.to_string(),
        }),
        other => CommitError::Table {
            output: output.to_owned(),
            sequence,
            format: "Iceberg",
            source: Box::new(other),
        },
    }
}
