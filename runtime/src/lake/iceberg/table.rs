//! An output's Iceberg table, read and committed to through the sink.
//!
//! The table lives at `<sink url>/<output>`: its metadata under `metadata/`, its data files
//! wherever the commit log put them (`<output>/<file>.parquet`), named in the manifests by
//! absolute URI (`file:///...`, `s3://...`), which is what readers open. A commit writes its
//! manifests and manifest list under new names, then asks the [`Pointer`] to swap the
//! table's metadata from the one it planned on to the new one; a lost swap means another
//! writer committed first, and the commit is planned again on what it wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path;
use parquet::file::metadata::ParquetMetaData;

use super::catalog::TableIdent;
use super::manifest::{self, DataFile, ManifestEntry, ManifestFile};
use super::metadata::{Operation, TableMetadata, new_table};
use super::partition;
use super::plan::{self, Attempts, Change, Parent, PlanError, SnapshotFiles, Unreferenced};
use super::pointer::{self, Catalog};
use super::schema::{self, SchemaError};
use super::stats;
use crate::lake::sink::{Created, Sink, SinkError};
use crate::lake::tables::TableFile;
use crate::lake::tables::file::footer;

/// How many times a commit is planned again after losing the swap to another writer.
const ATTEMPTS: usize = 20;

/// How long a replace (a compaction) keeps planning again after losing its swap: a running
/// pipeline commits every flush, and the replace, which waits for nobody, takes a window
/// between two of them. Each attempt after the first writes only a manifest list.
const REPLACE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] crate::lake::commit::CommitError),
    #[error(transparent)]
    Catalog(#[from] super::catalog::CatalogError),
    #[error("{path}: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("output {output:?}: {source}")]
    Schema {
        output: String,
        #[source]
        source: SchemaError,
    },
    #[error(
        "output {output:?}: {reason} (the table's partitioning is fixed when it is created; \
         partition_by in [outputs.{output:?}] must stay as it was)"
    )]
    Partition { output: String, reason: String },
    #[error("output {output:?}: {source}")]
    Plan {
        output: String,
        #[source]
        source: PlanError,
    },
    #[error(
        "{uri} is outside the sink {sink}: this table names files this writer cannot reach \
         (was it written through another URL, s3a:// for s3://?)"
    )]
    Foreign { uri: String, sink: String },
    #[error(
        "output {output:?}: {attempts} commits in a row lost to other writers; another \
         process is committing to this table continually (stop it, or try again)"
    )]
    Contended { output: String, attempts: usize },
}

/// The table's metadata as last committed, and where it is.
#[derive(Debug, Clone)]
pub struct Current {
    /// The metadata file's absolute URI.
    pub location: String,
    pub metadata: TableMetadata,
}

/// What a swap of the table's metadata found.
#[derive(Debug, Clone)]
pub enum Swap {
    /// The new metadata is the table's: as the swap wrote it, or as the catalog that wrote it
    /// answered.
    Done(Box<Current>),
    /// Another writer swapped first: the table's metadata is no longer the one planned on.
    Lost,
}

/// Where a table's latest metadata is, and how it is swapped for the next: the one part of
/// a commit a catalog (SQL, REST) does instead of storage ([`super::pointer`]).
#[derive(Debug, Clone)]
pub enum Pointer {
    /// No catalog: `metadata/v<N>.metadata.json`, the next created put-if-absent, and
    /// `metadata/version-hint.text` naming the latest `N`.
    Storage { sink: Sink, table: String },
    /// A SQL catalog's row points at the metadata file, which the commit writes.
    Sql {
        sink: Sink,
        table: String,
        catalog: Catalog,
        ident: TableIdent,
    },
    /// A REST catalog holds the metadata and writes its files; a commit tells it what changed
    /// from the metadata planned on.
    Rest {
        sink: Sink,
        table: String,
        catalog: Catalog,
        ident: TableIdent,
    },
}

const HINT: &str = "version-hint.text";

/// `N` of `v<N>.metadata.json` (also with a writer's suffix: `v3-<uuid>.metadata.json`).
fn version_of(name: &str) -> Option<u64> {
    let stem = name.rsplit('/').next()?.strip_suffix(".metadata.json")?;
    let digits = stem.strip_prefix('v')?;
    digits.split('-').next()?.parse().ok()
}

impl Pointer {
    /// The pointer of `output`'s table: in `catalog`, or in storage without one.
    pub fn of(sink: &Sink, output: &str, catalog: Option<&Catalog>) -> Pointer {
        let (sink, table) = (sink.clone(), output.to_owned());
        match catalog {
            None => Pointer::Storage { sink, table },
            Some(c) if c.is_rest() => Pointer::Rest {
                sink,
                ident: c.ident(output),
                table,
                catalog: c.clone(),
            },
            Some(c) => Pointer::Sql {
                sink,
                ident: c.ident(output),
                table,
                catalog: c.clone(),
            },
        }
    }

    fn storage(&self) -> (&Sink, &str) {
        match self {
            Pointer::Storage { sink, table }
            | Pointer::Sql { sink, table, .. }
            | Pointer::Rest { sink, table, .. } => (sink, table),
        }
    }

    fn metadata_path(&self, name: &str) -> Path {
        let (_, table) = self.storage();
        Path::from(format!("{table}/metadata/{name}"))
    }

    /// The table's latest metadata, or `None` when there is no table. The hint is where the
    /// search starts: a writer that stopped between its commit and the hint leaves it one
    /// behind, so later versions are probed for until one is missing.
    pub async fn latest(&self) -> Result<Option<Current>, IcebergError> {
        match self {
            Pointer::Storage { .. } => self.stored_latest().await,
            Pointer::Sql {
                sink,
                catalog,
                ident,
                ..
            } => pointer::sql_latest(catalog, sink, ident).await,
            Pointer::Rest { catalog, ident, .. } => pointer::rest_latest(catalog, ident).await,
        }
    }

    async fn stored_latest(&self) -> Result<Option<Current>, IcebergError> {
        let (sink, _) = self.storage();
        let hint = sink.get(&self.metadata_path(HINT)).await?;
        let hinted = hint.and_then(|h| std::str::from_utf8(&h).ok()?.trim().parse::<u64>().ok());
        let mut version = match hinted {
            Some(v) if sink.size(&self.version_path(v)).await?.is_some() => v,
            _ => {
                let names = sink.list_names(&self.metadata_path("")).await?;
                match names.iter().filter_map(|n| version_of(n)).max() {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
        };
        while sink.size(&self.version_path(version + 1)).await?.is_some() {
            version += 1;
        }
        let path = self.version_path(version);
        let Some(bytes) = sink.get(&path).await? else {
            return Ok(None);
        };
        let metadata =
            TableMetadata::from_json(&bytes).map_err(|reason| IcebergError::Corrupt {
                path: path.to_string(),
                reason,
            })?;
        Ok(Some(Current {
            location: uri(sink, path.as_ref()),
            metadata,
        }))
    }

    fn version_path(&self, version: u64) -> Path {
        self.metadata_path(&format!("v{version}.metadata.json"))
    }

    /// Make `next` the table's metadata if `current` (the metadata planned on, `None` for a
    /// new table) still is. Storage: create `v<N+1>` put-if-absent, the commit itself, then
    /// point the hint at it (a failure there is only logged: loading probes past it).
    pub async fn swap(
        &self,
        current: Option<&Current>,
        next: &TableMetadata,
    ) -> Result<Swap, IcebergError> {
        let location = current.map(|c| c.location.as_str());
        match self {
            Pointer::Storage { .. } => self.stored_swap(location, next).await,
            Pointer::Sql {
                sink,
                table,
                catalog,
                ident,
            } => pointer::sql_swap(catalog, sink, table, ident, location, next).await,
            Pointer::Rest {
                sink,
                table,
                catalog,
                ident,
            } => {
                let base = current.map(|c| &c.metadata);
                pointer::rest_swap(catalog, ident, &uri(sink, table), base, next).await
            }
        }
    }

    async fn stored_swap(
        &self,
        current: Option<&str>,
        next: &TableMetadata,
    ) -> Result<Swap, IcebergError> {
        let (sink, _) = self.storage();
        let version = match current {
            None => 1,
            Some(location) => match version_of(location) {
                Some(v) => v + 1,
                None => {
                    return Err(IcebergError::Corrupt {
                        path: location.to_owned(),
                        reason: "not named v<N>.metadata.json, so the next version is unknown"
                            .into(),
                    });
                }
            },
        };
        let path = self.version_path(version);
        if sink
            .create_fence(&path, Bytes::from(next.to_json()))
            .await?
            == Created::Existed
        {
            return Ok(Swap::Lost);
        }
        let hint = Bytes::from(version.to_string());
        if let Err(e) = sink.replace(&self.metadata_path(HINT), hint).await {
            tracing::warn!(table = %path, error = %e, "could not update the version hint; readers that follow it see the version before");
        }
        Ok(Swap::Done(Box::new(Current {
            location: uri(sink, path.as_ref()),
            metadata: next.clone(),
        })))
    }
}

/// The absolute URI of `path` in the sink.
pub(super) fn uri(sink: &Sink, path: &str) -> String {
    format!("{}/{path}", sink.url().trim_end_matches('/'))
}

/// The sink path of an absolute URI the table names.
pub(super) fn sink_path(sink: &Sink, uri: &str) -> Result<Path, IcebergError> {
    let root = format!("{}/", sink.url().trim_end_matches('/'));
    match uri.strip_prefix(&root) {
        Some(rest) => Ok(Path::from(rest)),
        None => Err(IcebergError::Foreign {
            uri: uri.to_owned(),
            sink: sink.url().to_owned(),
        }),
    }
}

/// The pause before attempt `attempt` of a commit that lost its swap: 20 ms doubling to at
/// most 640 ms, each drawn at random between half and all of it.
fn backoff(attempt: usize) -> std::time::Duration {
    let ceiling = 20u64 << attempt.min(5);
    let mut draw = [0u8; 8];
    let _ = getrandom::fill(&mut draw);
    let half = ceiling / 2;
    std::time::Duration::from_millis(half + u64::from_le_bytes(draw) % (half + 1))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What a publish found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The flush is the table's new snapshot.
    Appended { snapshot_id: i64 },
    /// The table's position for the app was already this flush or later: nothing written.
    /// Equal: the flush is there (a retried publish). Later: see the Delta tables' `txn`.
    Held { position: u64 },
}

/// An output's Iceberg table in a sink.
#[derive(Debug, Clone)]
pub struct Table {
    sink: Sink,
    output: String,
    pointer: Pointer,
    /// Manifests read, by path: they never change, and a commit planned again after a lost
    /// swap reads only the ones the winner added.
    read: Arc<Mutex<BTreeMap<String, Vec<ManifestEntry>>>>,
    /// Whether the table's history was told to be long ([`LONG_HISTORY`]).
    told_long: Arc<std::sync::atomic::AtomicBool>,
    /// The table as this writer last loaded or committed it, what its next commit is planned
    /// on first: a lost swap says when another writer committed since, and the commit is
    /// planned again on the table loaded. Cleared by any failed swap (its outcome unknown).
    committed: Arc<Mutex<Option<Current>>>,
    /// The manifest list read or written last, by path: a commit planned on the table as this
    /// writer committed it reads none.
    list: Arc<Mutex<Option<Listed>>>,
}

/// A manifest list's path and the manifests it names.
type Listed = (String, Vec<ManifestFile>);

/// How many manifests a commit reads at once.
const READ_AT_ONCE: usize = 16;

/// The most manifests a [`Table`] keeps read; past it, it starts again.
const READ_MAX: usize = 4096;

/// The snapshots past which a commit says the table's history wants expiring: every commit
/// writes the whole metadata again, each snapshot in it (about 0.6 KiB), so a commit's cost
/// grows with the history until `tributary vacuum` (or an engine's `expire_snapshots`) trims
/// it. At one flush a second this is about fourteen hours, and some 32 MiB of metadata.
const LONG_HISTORY: usize = 50_000;

impl Table {
    /// The table of `output`, committed to without a catalog.
    pub fn new(sink: Sink, output: &str) -> Table {
        let pointer = Pointer::Storage {
            sink: sink.clone(),
            table: output.to_owned(),
        };
        Table {
            sink,
            output: output.to_owned(),
            pointer,
            read: Arc::default(),
            told_long: Arc::default(),
            committed: Arc::default(),
            list: Arc::default(),
        }
    }

    /// The table of `output`, committed to through `catalog` when there is one.
    pub fn open(sink: Sink, output: &str, catalog: Option<&Catalog>) -> Table {
        Table {
            pointer: Pointer::of(&sink, output, catalog),
            sink,
            output: output.to_owned(),
            read: Arc::default(),
            told_long: Arc::default(),
            committed: Arc::default(),
            list: Arc::default(),
        }
    }

    /// The table's location: `<sink url>/<output>`.
    pub fn location(&self) -> String {
        uri(&self.sink, &self.output)
    }

    /// The table's latest metadata, loaded; `None` when there is no table.
    pub async fn load(&self) -> Result<Option<Current>, IcebergError> {
        let loaded = self.pointer.latest().await?;
        *self.committed.lock().expect("not poisoned") = loaded.clone();
        Ok(loaded)
    }

    /// The table to plan a commit on: as this writer last loaded or committed it, unless
    /// `fresh` asks for it loaded (after a lost swap), or nothing is known.
    pub async fn base(&self, fresh: bool) -> Result<Option<Current>, IcebergError> {
        let known = self.committed.lock().expect("not poisoned").clone();
        match known {
            Some(known) if !fresh => Ok(Some(known)),
            _ => self.load().await,
        }
    }

    /// Swap the table's metadata for `next`, planned on `current`, keeping what the swap
    /// found: the new metadata, or nothing known (lost, or failed).
    async fn swap(
        &self,
        current: Option<&Current>,
        next: &TableMetadata,
    ) -> Result<Swap, IcebergError> {
        *self.committed.lock().expect("not poisoned") = None;
        let swapped = self.pointer.swap(current, next).await?;
        if let Swap::Done(c) = &swapped {
            *self.committed.lock().expect("not poisoned") = Some((**c).clone());
        }
        Ok(swapped)
    }

    /// The commit position the table holds for `app` ([`TableMetadata::position`]).
    pub async fn position(&self, app: &str) -> Result<Option<u64>, IcebergError> {
        Ok(self.load().await?.and_then(|c| c.metadata.position(app)))
    }

    /// Publish flush `sequence`'s `files` as one append snapshot carrying `app`'s position,
    /// unless the table holds that flush or a later one of `app` already.
    pub async fn publish(
        &self,
        app: &str,
        sequence: u64,
        files: &[TableFile],
    ) -> Result<Published, IcebergError> {
        let footers = self.footers(files).await?;
        let mut attempts = Attempts::new();
        for attempt in 0..ATTEMPTS {
            let current = self.base(attempt > 0).await?;
            if let Some(position) = current.as_ref().and_then(|c| c.metadata.position(app))
                && position >= sequence
            {
                self.discard(attempts.unused(None)).await;
                return Ok(Published::Held { position });
            }
            let change = Change {
                operation: Operation::Append,
                added: Vec::new(),
                removed: BTreeSet::new(),
                position: Some((app.to_owned(), sequence)),
                schema: None,
            };
            let committed = self.commit(current, change, files, &footers, None, &mut attempts);
            if let Some(id) = committed.await? {
                return Ok(Published::Appended { snapshot_id: id });
            }
        }
        self.discard(attempts.unused(None)).await;
        Err(self.contended())
    }

    /// Replace live data files `removed` (sink paths, as the commit log names them) by
    /// `added`: operation `replace` for a compaction (the rows unchanged), `overwrite` for a
    /// copy-on-write rewrite. Returns the new snapshot's id.
    pub async fn replace(
        &self,
        operation: Operation,
        removed: &[String],
        added: &[TableFile],
    ) -> Result<i64, IcebergError> {
        let footers = self.footers(added).await?;
        let removed: BTreeSet<String> = removed.iter().map(|p| uri(&self.sink, p)).collect();
        let mut attempts = Attempts::new();
        let patience = std::time::Instant::now() + REPLACE_PATIENCE;
        let mut attempt = 0;
        loop {
            let current = self.load().await?;
            let change = Change {
                operation,
                added: Vec::new(),
                removed: removed.clone(),
                position: None,
                schema: None,
            };
            let committed = self.commit(current, change, added, &footers, None, &mut attempts);
            if let Some(id) = committed.await? {
                return Ok(id);
            }
            attempt += 1;
            if std::time::Instant::now() > patience {
                break;
            }
            if attempt % 10 == 1 {
                tracing::info!(output = %self.output, attempts = attempt, "another writer committed first; planning again on the table as it is now, for up to {} s", REPLACE_PATIENCE.as_secs());
            }
            // Step aside a moment, a little differently each time: a pipeline committing
            // continually leaves a window between its commits.
            tokio::time::sleep(backoff(attempt)).await;
        }
        self.discard(attempts.unused(None)).await;
        Err(IcebergError::Contended {
            output: self.output.clone(),
            attempts: attempt,
        })
    }

    /// One attempt at an `overwrite` snapshot on `current` (the table as loaded; `None`: a
    /// new table) that removes the live data files `removed` (absolute URIs) and adds `added`,
    /// its schema evolved to hold `columns` too, carrying `app`'s position `sequence`: the
    /// new snapshot's id, or `None` when another writer committed first. A current-state
    /// table's copy-on-write rewrite, planned on `current` and planned again when it lost.
    pub async fn overwrite_on(
        &self,
        current: Option<Current>,
        (app, sequence): (&str, u64),
        removed: BTreeSet<String>,
        added: &[TableFile],
        columns: &arrow_schema::Schema,
    ) -> Result<Option<i64>, IcebergError> {
        let footers = self.footers(added).await?;
        let change = Change {
            operation: Operation::Overwrite,
            added: Vec::new(),
            removed,
            position: Some((app.to_owned(), sequence)),
            schema: None,
        };
        let mut attempts = Attempts::new();
        let committed = self
            .commit(
                current,
                change,
                added,
                &footers,
                Some(columns),
                &mut attempts,
            )
            .await?;
        if committed.is_none() {
            self.discard(attempts.unused(None)).await;
        }
        Ok(committed)
    }

    /// Delete files (URIs) a lost commit wrote: nothing reads them.
    async fn discard(&self, uris: Vec<String>) {
        for uri in uris {
            let Ok(path) = sink_path(&self.sink, &uri) else {
                continue;
            };
            if let Err(e) = self.sink.delete(&path).await {
                tracing::warn!(path = %path, error = %e, "could not delete a file of a lost commit; nothing reads it");
            }
        }
    }

    /// Say once that the table's history is long enough to slow its commits.
    fn tell_long(&self, metadata: &TableMetadata) {
        use std::sync::atomic::Ordering;
        let snapshots = metadata.snapshots.len();
        if snapshots > LONG_HISTORY && !self.told_long.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                table = %self.output,
                snapshots,
                "the Iceberg table keeps {snapshots} snapshots, and every commit writes them all again in its metadata; run `tributary vacuum` (daily, say) to expire the old ones"
            );
        }
    }

    fn contended(&self) -> IcebergError {
        IcebergError::Contended {
            output: self.output.clone(),
            attempts: ATTEMPTS,
        }
    }

    /// The Parquet footers of `files`, read once for every attempt of a commit.
    async fn footers(&self, files: &[TableFile]) -> Result<Vec<ParquetMetaData>, IcebergError> {
        let mut out = Vec::with_capacity(files.len());
        for f in files {
            let path = Path::from(f.path.as_str());
            out.push(footer(&self.sink, &path, f.size, f.footer.as_ref()).await?);
        }
        Ok(out)
    }

    /// One of `attempts` at committing `change` with `files` on `current` (the schema evolved
    /// to hold `columns` too, when given): `None` when another writer swapped first. The
    /// manifests it wrote are then kept for the next attempt; the caller discards those no
    /// commit used.
    async fn commit(
        &self,
        current: Option<Current>,
        mut change: Change,
        files: &[TableFile],
        footers: &[ParquetMetaData],
        columns: Option<&arrow_schema::Schema>,
        attempts: &mut Attempts,
    ) -> Result<Option<i64>, IcebergError> {
        let (base, evolved) = self.evolved(current.as_ref(), files, columns)?;
        change.schema = evolved;
        let schema = match &change.schema {
            Some((schema, _)) => schema,
            None => base.current_schema().expect("checked by evolved"),
        };
        let spec = base
            .default_spec()
            .cloned()
            .unwrap_or_else(partition::unpartitioned);
        for (file, footer) in files.iter().zip(footers) {
            if spec.fields.is_empty()
                && let Some(p) = &file.partition
            {
                return Err(self.partition_error(format!(
                    "the table is not partitioned, and the file is partitioned by {:?}",
                    p.column
                )));
            }
            let partition = partition::tuple(&spec, schema, file.partition.as_ref())
                .map_err(|reason| self.partition_error(reason))?;
            let mut data = DataFile {
                file_path: uri(&self.sink, &file.path),
                partition,
                record_count: file.rows as i64,
                file_size_in_bytes: file.size as i64,
                ..Default::default()
            };
            stats::fill(&mut data, footer, schema);
            change.added.push(data);
        }
        let manifests = self.manifests(&base).await?;
        let mut entries = BTreeMap::new();
        let merging = plan::merging(&manifests, spec.spec_id, !files.is_empty());
        if !merging.is_empty() {
            tracing::debug!(output = %self.output, manifests = merging.len(), "merging the table's small manifests");
        }
        let read = match change.removed.is_empty() {
            true => merging,
            false => manifests.iter().collect(),
        };
        // Read side by side: those of the first attempt are many, those after a lost swap the
        // winner's few.
        for chunk in read.chunks(READ_AT_ONCE) {
            let got = futures::future::try_join_all(chunk.iter().map(|m| self.entries(m))).await?;
            for (m, got) in chunk.iter().zip(got) {
                entries.insert(m.manifest_path.clone(), got);
            }
        }
        let parent = Parent {
            metadata: &base,
            location: current.as_ref().map(|c| c.location.as_str()),
            manifests: &manifests,
            entries: &entries,
        };
        let planned = plan::plan(&parent, change, now_ms(), attempts).map_err(|source| {
            IcebergError::Plan {
                output: self.output.clone(),
                source,
            }
        })?;
        let mut written = Vec::with_capacity(planned.objects.len());
        for (object, bytes) in planned.objects {
            let path = sink_path(&self.sink, &object)?;
            let bytes = Bytes::from(bytes);
            self.sink.create(&path, bytes.clone()).await?;
            written.push((path, object, bytes));
        }
        let snapshot = planned.metadata.current_snapshot();
        let list = snapshot
            .map(|s| s.manifest_list.clone())
            .unwrap_or_default();
        match self.swap(current.as_ref(), &planned.metadata).await? {
            Swap::Done(_) => {
                self.tell_long(&planned.metadata);
                if let Some(snapshot) = snapshot {
                    self.keep_written(snapshot, written);
                }
                self.discard(attempts.unused(Some(&planned.manifests)))
                    .await;
                Ok(planned.metadata.current_snapshot_id)
            }
            Swap::Lost => {
                // The manifest list is this attempt's alone; the manifests may serve the next.
                self.discard(vec![list]).await;
                Ok(None)
            }
        }
    }

    /// The metadata to plan on (a new table's, partitioned as the first file says, when there
    /// is none) and its schema evolved to hold `columns` (when given) and every one of
    /// `files`.
    #[allow(clippy::type_complexity)]
    fn evolved(
        &self,
        current: Option<&Current>,
        files: &[TableFile],
        columns: Option<&arrow_schema::Schema>,
    ) -> Result<(TableMetadata, Option<(schema::Schema, i32)>), IcebergError> {
        let schema_error = |source| IcebergError::Schema {
            output: self.output.clone(),
            source,
        };
        let base = match current {
            Some(c) => c.metadata.clone(),
            None => {
                let first = files.first();
                let fresh = match (columns, first) {
                    (Some(columns), _) => columns.clone(),
                    (None, Some(first)) => file_columns(first),
                    (None, None) => {
                        return Err(self.partition_error("a new table needs a first file".into()));
                    }
                };
                let (schema, last) = schema::fresh(&fresh).map_err(schema_error)?;
                let spec = match first.and_then(|f| f.partition.as_ref()) {
                    None => partition::unpartitioned(),
                    Some(p) => partition::spec(&partition::of_file(p), &schema)
                        .map_err(|reason| self.partition_error(reason))?,
                };
                new_table(&self.location(), schema, last, spec, now_ms())
            }
        };
        let Some(mut schema) = base.current_schema().cloned() else {
            return Err(IcebergError::Corrupt {
                path: self.location(),
                reason: "the metadata has no current schema".into(),
            });
        };
        let mut last = base.last_column_id;
        let mut changed = false;
        let wanted = columns
            .cloned()
            .into_iter()
            .chain(files.iter().map(file_columns));
        for columns in wanted {
            if let Some((next, next_last)) =
                schema::evolve(&schema, last, &columns).map_err(schema_error)?
            {
                (schema, last, changed) = (next, next_last, true);
            }
        }
        Ok((base, changed.then_some((schema, last))))
    }

    fn partition_error(&self, reason: String) -> IcebergError {
        IcebergError::Partition {
            output: self.output.clone(),
            reason,
        }
    }

    /// Keep what a commit of `snapshot` wrote as if read back: its manifest list, and its
    /// manifests' entries (as they read: an added entry inherits the snapshot's sequence
    /// number), for the next commit to plan on without reading them.
    fn keep_written(
        &self,
        snapshot: &super::metadata::Snapshot,
        written: Vec<(Path, String, Bytes)>,
    ) {
        for (_, uri, bytes) in written {
            if uri == snapshot.manifest_list {
                if let Ok(list) = manifest::read_manifest_list(&bytes) {
                    *self.list.lock().expect("not poisoned") = Some((uri, list));
                }
            } else if let Ok(entries) = manifest::read_manifest(&bytes, snapshot.sequence_number) {
                let _ = self.keep_entries(uri, entries, snapshot.snapshot_id);
            }
        }
    }

    /// Keep the entries of the manifest `path` (added by snapshot `added_by`), and return
    /// them.
    fn keep_entries(
        &self,
        path: String,
        mut entries: Vec<ManifestEntry>,
        added_by: i64,
    ) -> Vec<ManifestEntry> {
        // An added entry without a snapshot id inherits the manifest's, as its sequence
        // number does: a merge writes it again as existing, where it must be explicit.
        for e in &mut entries {
            e.snapshot_id.get_or_insert(added_by);
        }
        let mut read = self.read.lock().expect("not poisoned");
        if read.len() >= READ_MAX {
            read.clear();
        }
        read.insert(path, entries.clone());
        entries
    }

    /// The manifests of the current snapshot.
    async fn manifests(&self, metadata: &TableMetadata) -> Result<Vec<ManifestFile>, IcebergError> {
        match metadata.current_snapshot() {
            Some(snapshot) => self.manifest_list(snapshot).await,
            None => Ok(Vec::new()),
        }
    }

    /// The manifests `snapshot`'s manifest list names.
    async fn manifest_list(
        &self,
        snapshot: &super::metadata::Snapshot,
    ) -> Result<Vec<ManifestFile>, IcebergError> {
        if let Some((path, list)) = &*self.list.lock().expect("not poisoned")
            && *path == snapshot.manifest_list
        {
            return Ok(list.clone());
        }
        let bytes = self.read(&snapshot.manifest_list).await?;
        let list =
            manifest::read_manifest_list(&bytes).map_err(|reason| IcebergError::Corrupt {
                path: snapshot.manifest_list.clone(),
                reason,
            })?;
        *self.list.lock().expect("not poisoned") =
            Some((snapshot.manifest_list.clone(), list.clone()));
        Ok(list)
    }

    async fn entries(&self, m: &ManifestFile) -> Result<Vec<ManifestEntry>, IcebergError> {
        if let Some(entries) = self
            .read
            .lock()
            .expect("not poisoned")
            .get(&m.manifest_path)
        {
            return Ok(entries.clone());
        }
        let bytes = self.read(&m.manifest_path).await?;
        let entries = manifest::read_manifest(&bytes, m.sequence_number).map_err(|reason| {
            IcebergError::Corrupt {
                path: m.manifest_path.clone(),
                reason,
            }
        })?;
        Ok(self.keep_entries(m.manifest_path.clone(), entries, m.added_snapshot_id))
    }

    async fn read(&self, uri: &str) -> Result<Bytes, IcebergError> {
        let path = sink_path(&self.sink, uri)?;
        self.sink
            .get(&path)
            .await?
            .ok_or_else(|| IcebergError::Corrupt {
                path: uri.to_owned(),
                reason: "the table names it, and it is not there".into(),
            })
    }

    /// The data files `snapshot` reads: its manifests' entries that
    /// are not deleted, by absolute URI.
    pub async fn live_files(
        &self,
        snapshot: &super::metadata::Snapshot,
    ) -> Result<Vec<DataFile>, IcebergError> {
        let entries = self.live_entries(snapshot).await?;
        Ok(entries.into_iter().map(|e| e.data_file).collect())
    }

    /// The manifest entries of the data files `snapshot` reads, with their data sequence
    /// numbers.
    pub async fn live_entries(
        &self,
        snapshot: &super::metadata::Snapshot,
    ) -> Result<Vec<ManifestEntry>, IcebergError> {
        let list = self.manifest_list(snapshot).await?;
        let mut live = Vec::new();
        for m in &list {
            for entry in self.entries(m).await? {
                if entry.status != manifest::Status::Deleted {
                    live.push(entry);
                }
            }
        }
        Ok(live)
    }

    /// The data files `snapshot` itself added, by absolute URI: the `Added` entries of the
    /// manifests it wrote (a merged manifest holds older files too, as `Existing`).
    pub(super) async fn added_files(
        &self,
        snapshot: &super::metadata::Snapshot,
    ) -> Result<Vec<String>, IcebergError> {
        let list = self.manifest_list(snapshot).await?;
        let mut added = Vec::new();
        let own = |m: &&ManifestFile| m.added_snapshot_id == snapshot.snapshot_id && m.content == 0;
        for m in list.iter().filter(own) {
            for entry in self.entries(m).await? {
                if entry.status == manifest::Status::Added {
                    added.push(entry.data_file.file_path);
                }
            }
        }
        Ok(added)
    }

    /// The sink path of a URI the table names, relative to the table's folder when it is in
    /// it.
    pub fn relative(&self, uri: &str) -> String {
        let root = format!("{}/", self.location());
        uri.strip_prefix(&root).unwrap_or(uri).to_owned()
    }

    /// What expiring the snapshots older than `older_than_ms` ([`plan::expire`]) would do,
    /// read without committing; `None` for no table.
    pub async fn expiry(&self, older_than_ms: i64) -> Result<Option<Expiry>, IcebergError> {
        let Some(current) = self.load().await? else {
            return Ok(None);
        };
        let (next, expired) = match plan::expire(&current.metadata, older_than_ms) {
            None => (None, Vec::new()),
            Some(expiry) => {
                let mut next = expiry.metadata;
                let dropped = next.log_metadata(&current.location, next.last_updated_ms);
                next.last_updated_ms = now_ms().max(next.last_updated_ms);
                (Some((next, dropped)), expiry.expired)
            }
        };
        let kept = match &next {
            Some((next, _)) => &next.snapshots,
            None => &current.metadata.snapshots,
        };
        let mut read = BTreeMap::new();
        let expired = self.snapshot_files(&expired, &mut read).await?;
        let kept = self.snapshot_files(kept, &mut read).await?;
        let mut gone = plan::unreferenced(&expired, &kept);
        let mut referenced = BTreeSet::new();
        let mut sizes = BTreeMap::new();
        for s in expired.iter().chain(&kept) {
            referenced.insert(s.manifest_list.clone());
            for (m, entries) in &s.manifests {
                referenced.insert(m.manifest_path.clone());
                sizes.insert(m.manifest_path.clone(), m.manifest_length.max(0) as u64);
                for e in entries {
                    let file = &e.data_file;
                    referenced.insert(file.file_path.clone());
                    sizes.insert(
                        file.file_path.clone(),
                        file.file_size_in_bytes.max(0) as u64,
                    );
                }
            }
        }
        let live: BTreeSet<String> = match current.metadata.current_snapshot() {
            Some(s) => self
                .live_files(s)
                .await?
                .into_iter()
                .map(|f| f.file_path)
                .collect(),
            None => BTreeSet::new(),
        };
        let waiting = kept
            .iter()
            .flat_map(|s| s.manifests.iter().flat_map(|(_, entries)| entries))
            .filter(|e| e.status != manifest::Status::Deleted)
            .map(|e| &e.data_file.file_path)
            .filter(|f| !live.contains(*f))
            .cloned()
            .collect();
        let next = next.map(|(next, dropped)| {
            gone.metadata_files
                .extend(dropped.into_iter().map(|e| e.metadata_file));
            next
        });
        Ok(Some(Expiry {
            current,
            next,
            gone,
            referenced,
            sizes,
            waiting,
        }))
    }

    /// Expire the snapshots older than `older_than_ms` in one commit ([`Table::expiry`]), and
    /// return what it left: the files only expired snapshots referenced are for the caller to
    /// delete (data files are the commit log's too, so that is its decision).
    pub async fn expire(&self, older_than_ms: i64) -> Result<Option<Expiry>, IcebergError> {
        for _ in 0..ATTEMPTS {
            let Some(expiry) = self.expiry(older_than_ms).await? else {
                return Ok(None);
            };
            let Some(next) = &expiry.next else {
                return Ok(Some(expiry));
            };
            if let Swap::Done(_) = self.swap(Some(&expiry.current), next).await? {
                return Ok(Some(expiry));
            }
        }
        Err(self.contended())
    }

    /// The manifest lists and manifests of `snapshots`, each manifest read once (`read`
    /// holds those read already: snapshots share most of theirs).
    async fn snapshot_files(
        &self,
        snapshots: &[super::metadata::Snapshot],
        read: &mut BTreeMap<String, Vec<ManifestEntry>>,
    ) -> Result<Vec<SnapshotFiles>, IcebergError> {
        let mut out = Vec::with_capacity(snapshots.len());
        for s in snapshots {
            let list = self.manifest_list(s).await?;
            let mut manifests = Vec::with_capacity(list.len());
            for m in list {
                let entries = match read.get(&m.manifest_path) {
                    Some(entries) => entries.clone(),
                    None => {
                        let entries = self.entries(&m).await?;
                        read.insert(m.manifest_path.clone(), entries.clone());
                        entries
                    }
                };
                manifests.push((m, entries));
            }
            out.push(SnapshotFiles {
                manifest_list: s.manifest_list.clone(),
                manifests,
            });
        }
        Ok(out)
    }
}

/// What expiring a table's old snapshots does ([`Table::expiry`]).
#[derive(Debug)]
pub struct Expiry {
    /// The table as read.
    pub current: Current,
    /// Its metadata after the expiry; `None` when no snapshot expires.
    pub next: Option<TableMetadata>,
    /// The files only expired snapshots reference, and the metadata files the log lets go.
    pub gone: Unreferenced,
    /// Every file (URI) a snapshot of the table references, kept or expired: manifest
    /// lists, manifests and data files.
    pub referenced: BTreeSet<String>,
    /// The sizes of those manifests and data files, as the table records them.
    pub sizes: BTreeMap<String, u64>,
    /// Data files a kept snapshot reads and the current one does not: removed within the
    /// retention.
    pub waiting: BTreeSet<String>,
}

/// A file's own columns: the table's columns less a derived partition column (`<col>_day`),
/// which Iceberg computes from the source column rather than storing.
fn file_columns(file: &TableFile) -> arrow_schema::Schema {
    let derived = file
        .partition
        .as_ref()
        .filter(|p| p.derived.is_some())
        .map(|p| p.column.as_str());
    let fields: Vec<_> = file
        .schema
        .fields()
        .iter()
        .filter(|f| Some(f.name().as_str()) != derived)
        .cloned()
        .collect();
    arrow_schema::Schema::new_with_metadata(fields, file.schema.metadata().clone())
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::Lsn;
    use crate::lake::encode::{EncodeOptions, Encoder};
    use crate::lake::tables::table_columns;
    use crate::stream::change::{Op, OutputBatch, OutputColumn, OutputRow, Value};
    use crate::wire::pgtype::oid;

    /// Land one file of `rows` ids from `first` in `output`, as the flush machine would.
    pub(crate) async fn land(
        sink: &Sink,
        output: &str,
        name: &str,
        first: i32,
        rows: i32,
    ) -> TableFile {
        let batch = OutputBatch {
            output: output.into(),
            columns: vec![OutputColumn::builtin("id", oid::INT4, -1)].into(),
            rows: (first..first + rows)
                .map(|i| OutputRow {
                    op: Op::Insert,
                    commit_lsn: Lsn(i as u64),
                    seq: 0,
                    sub: 0,
                    xid: 1,
                    commit_time: 0,
                    values: vec![Value::Int4(i)],
                    old: None,
                })
                .collect(),
            old_image: false,
        };
        let encoder = Encoder::new(&EncodeOptions::default()).unwrap();
        let file = encoder.encode(&batch).unwrap().remove(0);
        let path = format!("{output}/{name}.parquet");
        let size = file.bytes.len() as u64;
        sink.create(&Path::from(path.as_str()), file.bytes.clone())
            .await
            .unwrap();
        TableFile {
            output: output.into(),
            path,
            size,
            rows: file.rows,
            schema: table_columns(file.columns, None),
            partition: None,
            footer: None,
        }
    }

    /// Table `output` of two flushes of `app` (files `f1` and `f2`, two rows each, positions
    /// 1 and 2) that a compaction replaced by one file, `merged`.
    pub(crate) async fn compacted(sink: &Sink, output: &str) -> Table {
        let table = Table::new(sink.clone(), output);
        let f1 = land(sink, output, "f1", 0, 2).await;
        let f2 = land(sink, output, "f2", 2, 2).await;
        for (sequence, file) in [(1, &f1), (2, &f2)] {
            let published = table.publish("app", sequence, std::slice::from_ref(file));
            published.await.unwrap();
        }
        let merged = land(sink, output, "merged", 0, 4).await;
        table
            .replace(Operation::Replace, &[f1.path, f2.path], &[merged])
            .await
            .unwrap();
        table
    }

    /// A store that counts the requests it is sent: reads (gets, heads, lists) and writes.
    #[derive(Debug)]
    struct Counting {
        inner: InMemory,
        reads: std::sync::atomic::AtomicUsize,
        writes: std::sync::atomic::AtomicUsize,
    }

    impl Counting {
        fn read(&self) {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn wrote(&self) {
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        /// The reads and writes since the last call.
        fn take(&self) -> (usize, usize) {
            use std::sync::atomic::Ordering::Relaxed;
            (self.reads.swap(0, Relaxed), self.writes.swap(0, Relaxed))
        }
    }

    impl std::fmt::Display for Counting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Counting({})", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl object_store::ObjectStore for Counting {
        async fn put_opts(
            &self,
            location: &Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.wrote();
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.wrote();
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.read();
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.wrote();
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.read();
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.read();
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.wrote();
            self.inner.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn a_writer_plans_on_what_it_committed_and_reads_nothing_back() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            reads: Default::default(),
            writes: Default::default(),
        });
        let sink = Sink::from_store(store.clone(), "memory://lake");
        let table = Table::new(sink.clone(), "t");
        let footed = |file: TableFile, bytes: &[u8]| TableFile {
            footer: crate::lake::tables::file::footer_of(bytes),
            ..file
        };
        let mut files = Vec::new();
        for (i, name) in ["f1", "f2", "f3"].into_iter().enumerate() {
            let file = land(&sink, "t", name, 3 * i as i32, 3).await;
            let bytes = sink.get(&Path::from(file.path.as_str())).await.unwrap();
            files.push(footed(file, &bytes.unwrap()));
        }
        store.take();
        table.publish("app", 1, &files[..1]).await.unwrap();
        let (reads, _) = store.take();
        assert!(reads > 0, "the first commit loads the table");

        table.publish("app", 2, &files[1..2]).await.unwrap();
        assert_eq!(
            store.take(),
            (0, 4),
            "planned on the commit before, with the footer given: no read; a manifest, its \
             list, the metadata and the hint written"
        );

        // Another writer commits between: the swap on what this one committed is lost, and
        // the commit is planned again on the table loaded.
        let other = Table::new(sink.clone(), "t");
        other.publish("other", 1, &files[2..]).await.unwrap();
        table.publish("app", 3, &files[2..]).await.unwrap();
        let current = Table::new(sink.clone(), "t").load().await.unwrap().unwrap();
        assert!(
            current.location.ends_with("v4.metadata.json"),
            "{}",
            current.location
        );
        assert_eq!(current.metadata.position("app"), Some(3));
        assert_eq!(current.metadata.position("other"), Some(1));
        let live = table
            .live_files(current.metadata.current_snapshot().unwrap())
            .await
            .unwrap();
        assert_eq!(live.len(), 4, "f1, f2, and f3 twice: {live:?}");
    }

    #[tokio::test]
    async fn publishes_are_idempotent_and_a_writer_behind_sees_the_later_position() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        let (a, b) = (Table::new(sink.clone(), "t"), Table::new(sink.clone(), "t"));
        let f1 = land(&sink, "t", "f1", 0, 3).await;
        let f2 = land(&sink, "t", "f2", 3, 3).await;
        let f3 = land(&sink, "t", "f3", 6, 3).await;
        assert!(matches!(
            a.publish("app", 1, std::slice::from_ref(&f1))
                .await
                .unwrap(),
            Published::Appended { .. }
        ));
        assert_eq!(
            b.publish("app", 1, &[f1]).await.unwrap(),
            Published::Held { position: 1 }
        );
        assert!(matches!(
            b.publish("app", 3, &[f3]).await.unwrap(),
            Published::Appended { .. }
        ));
        assert_eq!(
            a.publish("app", 2, std::slice::from_ref(&f2))
                .await
                .unwrap(),
            Published::Held { position: 3 }
        );
        // Another application's position is its own.
        assert!(matches!(
            a.publish("other", 1, &[f2]).await.unwrap(),
            Published::Appended { .. }
        ));
        let current = a.load().await.unwrap().unwrap();
        assert!(
            current.location.ends_with("t/metadata/v3.metadata.json"),
            "{}",
            current.location
        );
        assert_eq!(
            current.metadata.current_snapshot().unwrap().summary["total-records"],
            "9"
        );
        assert_eq!(current.metadata.metadata_log.len(), 2);
    }

    #[tokio::test]
    async fn a_stale_swap_is_lost_and_loading_probes_past_a_stale_hint() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        let table = Table::new(sink.clone(), "t");
        for (i, name) in ["f1", "f2"].into_iter().enumerate() {
            let file = land(&sink, "t", name, 0, 1).await;
            table.publish("app", i as u64 + 1, &[file]).await.unwrap();
        }
        let current = table.load().await.unwrap().unwrap();
        let v1 = Current {
            location: "memory://lake/t/metadata/v1.metadata.json".into(),
            metadata: current.metadata.clone(),
        };
        assert!(
            matches!(
                table.pointer.swap(Some(&v1), &current.metadata).await,
                Ok(Swap::Lost)
            ),
            "v2 exists: the writer that planned on v1 lost"
        );
        // A writer that stopped before moving the hint: the next load still finds v2.
        sink.replace(
            &Path::from("t/metadata/version-hint.text"),
            Bytes::from("1"),
        )
        .await
        .unwrap();
        let again = table.load().await.unwrap().unwrap();
        assert!(again.location.ends_with("/v2.metadata.json"));
        // No hint at all: the folder is listed.
        sink.delete(&Path::from("t/metadata/version-hint.text"))
            .await
            .unwrap();
        assert_eq!(table.position("app").await.unwrap(), Some(2));
        assert!(Table::new(sink, "none").load().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_expiry_commits_and_names_what_only_expired_snapshots_held() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://lake");
        let table = compacted(&sink, "t").await;
        let later = land(&sink, "t", "f3", 4, 1).await;
        table.publish("app", 3, &[later]).await.unwrap();
        let gone = table.expire(i64::MAX).await.unwrap().unwrap().gone;
        let names: Vec<&str> = gone
            .data_files
            .iter()
            .map(|p| p.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(names, ["f1.parquet", "f2.parquet"]);
        assert_eq!(gone.manifest_lists.len(), 3);
        let current = table.load().await.unwrap().unwrap().metadata;
        assert_eq!(current.snapshots.len(), 1);
        assert_eq!(current.position("app"), Some(3));
        assert_eq!(
            current.current_snapshot().unwrap().summary["total-records"],
            "5"
        );
    }
}
