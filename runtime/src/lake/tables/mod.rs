//! The seam between Tributary and the table formats its outputs are published as
//! (`sink.format`). After a flush's commit entry, each output it touched gets a commit of the
//! format that adds its files (and applies the flush to its current-state table), and a start
//! brings every table up to the commit log: the pipeline holds a [`Tables`] for that. The
//! commands read the tables back, audit, compact and vacuum them through a [`TableSet`].
//! Neither names a format: [`file`] is what every format is given, [`tend`] what each answers
//! the commands in, [`audit`] how `verify` holds each format's versions against the commit log. The formats are Delta ([`crate::lake::delta`]) and Iceberg
//! ([`crate::lake::iceberg`]). An output's current-state table is kept by the same code in
//! both: [`keyed`] reduces a flush to one change per key, [`current`] rewrites the files its
//! keys fall in, [`overtaken`] finds what a load's chunk must leave; each format lists its
//! files with their key bounds and commits the rewrite.

pub mod audit;
pub mod current;
pub mod file;
pub mod keyed;
pub mod overtaken;
pub mod rewrite;
pub mod tend;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use parquet::file::properties::WriterProperties;

pub use file::{
    Asked, Later, MIRROR_SUFFIX, Reload, TableFile, TypeChange, file_from_footer, mirror_name,
    table_columns,
};
pub use tend::{
    COMPACTED, CompactError, Compacted, DEFAULT_RETENTION_MS, Plan, TableAudit, TableView,
    Vacuumable, app_id,
};

pub use super::iceberg::catalog::Secret;
pub use super::iceberg::pointer::Catalog;

use super::TableFormat;
use super::commit::{CommitError, CommitLog, Writer};
use super::sink::Sink;
use super::{delta, iceberg};

/// How a pipeline's tables are kept.
pub struct Keeping {
    /// Whose tables: the database and slot (or journal schema) that name the pipeline.
    pub database: String,
    pub slot: String,
    pub on_type_change: TypeChange,
    /// Outputs that keep a current-state table.
    pub mirrored: BTreeSet<String>,
    /// How a current-state table's files are written, and the size a file is cut at.
    pub properties: WriterProperties,
    pub target: u64,
    pub reload: Option<Arc<dyn Reload>>,
    /// The Iceberg catalog that holds the tables' pointers (`sink.catalog`), if any.
    pub catalog: Option<iceberg::pointer::Catalog>,
}

/// The tables a pipeline publishes its flushes to, in the sink's format.
#[derive(Clone)]
pub enum Tables {
    Delta(delta::Tables),
    Iceberg(iceberg::tables::Tables),
}

impl Tables {
    /// The tables of a sink in `format` (`None`: Parquet files alone, no tables).
    pub fn open(
        format: TableFormat,
        sink: &Sink,
        writer: Writer,
        keeping: Keeping,
    ) -> Option<Tables> {
        match format {
            TableFormat::Parquet => None,
            TableFormat::Delta => Some(Tables::Delta(
                delta::Tables::new(
                    sink.clone(),
                    app_id(&keeping.database, &keeping.slot),
                    writer,
                )
                .on_type_change(keeping.on_type_change)
                .with_mirrors(current::Mirrors {
                    outputs: keeping.mirrored,
                    properties: keeping.properties,
                    target: keeping.target,
                    reload: keeping.reload,
                }),
            )),
            TableFormat::Iceberg => Some(Tables::Iceberg(
                iceberg::tables::Tables::new(
                    sink.clone(),
                    app_id(&keeping.database, &keeping.slot),
                    writer,
                )
                .with_catalog(keeping.catalog)
                .with_mirrors(current::Mirrors {
                    outputs: keeping.mirrored,
                    properties: keeping.properties,
                    target: keeping.target,
                    reload: keeping.reload,
                }),
            )),
        }
    }

    /// Publish flush `sequence`'s `files` to their outputs' tables, idempotently and fenced:
    /// a table that holds the flush is left alone, one that holds a later flush of this
    /// pipeline means another instance took over.
    pub async fn publish(&self, sequence: u64, files: &[TableFile]) -> Result<(), CommitError> {
        self.publish_as(sequence, files, Later::TakenOver).await
    }

    /// Bring every table up to the commit `log` through entry `upto`, from the entry after
    /// `through` (what the log says the tables held); returns how many entries it published.
    ///
    /// The files of each entry are published as the writer that wrote them would have, their
    /// schemas read from their footers; only those of outputs whose tables miss the entry are
    /// read (a table that holds it may have compacted them away, and vacuumed them).
    pub async fn catch_up(
        &self,
        log: &CommitLog,
        through: Option<u64>,
        upto: u64,
    ) -> Result<u64, CommitError> {
        let from = through.map_or(1, |t| t + 1);
        let mut published = 0;
        for sequence in from..=upto {
            let Some(entry) = log.read_entry(sequence).await? else {
                continue;
            };
            if entry.files.is_empty() {
                continue;
            }
            if through.is_none() {
                return Err(CommitError::NotTables {
                    sequence,
                    format: self.format().key(),
                });
            }
            if published == 0 {
                tracing::info!(
                    from = sequence,
                    to = upto,
                    format = self.format().name(),
                    "bringing the tables up to the commit log: the last run stopped between a commit entry and its tables"
                );
            }
            let mut missing = BTreeMap::new();
            for file in &entry.files {
                if !missing.contains_key(file.output.as_str()) {
                    let held = self.hold(&file.output, sequence).await?;
                    missing.insert(file.output.as_str(), !held);
                }
            }
            let sink = log.sink();
            let files = entry
                .files
                .iter()
                .filter(|f| missing[f.output.as_str()])
                .map(|f| file_from_footer(sink, f));
            let files = futures::future::try_join_all(files).await?;
            self.publish_as(sequence, &files, Later::Holds).await?;
            published += 1;
        }
        Ok(published)
    }

    /// The format, for people and errors.
    pub fn format(&self) -> TableFormat {
        match self {
            Tables::Delta(_) => TableFormat::Delta,
            Tables::Iceberg(_) => TableFormat::Iceberg,
        }
    }

    /// Whether `output`'s tables hold flush `sequence` of this pipeline, or a later one.
    async fn hold(&self, output: &str, sequence: u64) -> Result<bool, CommitError> {
        match self {
            Tables::Delta(tables) => tables.hold(output, sequence).await,
            Tables::Iceberg(tables) => tables.hold(output, sequence).await,
        }
    }

    async fn publish_as(
        &self,
        sequence: u64,
        files: &[TableFile],
        later: Later,
    ) -> Result<(), CommitError> {
        match self {
            Tables::Delta(tables) => tables.publish_as(sequence, files, later).await,
            Tables::Iceberg(tables) => tables.publish_as(sequence, files, later).await,
        }
    }
}

/// The columns of `schema` as a table of `format` has them: the types the format lacks taken to
/// ones it has (see [`delta::schema`]).
pub fn conform_schema(format: TableFormat, schema: &SchemaRef) -> SchemaRef {
    match format {
        TableFormat::Parquet => Arc::clone(schema),
        TableFormat::Iceberg => iceberg::schema::conform_schema(schema),
        TableFormat::Delta => delta::schema::conform_schema(schema),
    }
}

/// `batch` with the columns of `schema`, its [`conform_schema`].
pub fn conform_batch(
    format: TableFormat,
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, ArrowError> {
    match format {
        TableFormat::Parquet => Ok(batch.clone()),
        TableFormat::Iceberg => iceberg::schema::conform_batch(batch, schema),
        TableFormat::Delta => delta::schema::conform_batch(batch, schema),
    }
}

/// A sink's tables as the commands read and tend them, in the sink's format.
pub struct TableSet {
    kind: Kind,
    sink: Sink,
    /// The pipeline's application id in the tables' commits; `None` before its first flush.
    app: Option<String>,
}

/// The format of a [`TableSet`], and what it needs to reach its tables.
enum Kind {
    Delta,
    /// Through the catalog, when the sink names one.
    Iceberg(Option<iceberg::pointer::Catalog>),
}

impl TableSet {
    /// The tables of `sink` in `format` (`None` for Parquet files alone), whose commits name
    /// the pipeline `app` ([`app_id`]).
    pub fn open(
        format: TableFormat,
        sink: &Sink,
        app: Option<String>,
        catalog: Option<iceberg::pointer::Catalog>,
    ) -> Option<TableSet> {
        let kind = match format {
            TableFormat::Parquet => return None,
            TableFormat::Delta => Kind::Delta,
            TableFormat::Iceberg => Kind::Iceberg(catalog),
        };
        Some(TableSet {
            kind,
            sink: sink.clone(),
            app,
        })
    }

    pub fn format(&self) -> TableFormat {
        match self.kind {
            Kind::Delta => TableFormat::Delta,
            Kind::Iceberg(_) => TableFormat::Iceberg,
        }
    }

    fn app(&self) -> &str {
        self.app.as_deref().unwrap_or_default()
    }

    /// The tables in the sink, outputs' and current-state tables', by name.
    pub async fn names(&self) -> Result<Vec<String>, CommitError> {
        match self.kind {
            Kind::Delta => delta::table_names(&self.sink).await,
            Kind::Iceberg(ref c) => iceberg::tend::table_names(&self.sink, c.as_ref()).await,
        }
    }

    /// Whether table `name` exists (has a first commit).
    pub async fn exists(&self, name: &str) -> Result<bool, CommitError> {
        match self.kind {
            Kind::Delta => Ok(delta::tend::exists(&self.sink, name).await?),
            Kind::Iceberg(ref c) => iceberg::tend::exists(&self.sink, c.as_ref(), name).await,
        }
    }

    /// Table `name`'s latest version.
    pub async fn latest(&self, name: &str) -> Result<TableView, CommitError> {
        match self.kind {
            Kind::Delta => delta::tend::latest(&self.sink, name, self.app()).await,
            Kind::Iceberg(ref c) => {
                iceberg::tend::latest(&self.sink, c.as_ref(), name, self.app()).await
            }
        }
    }

    /// Table `name` as of its first version that holds commit entry `needed` (or a later
    /// one); `None` while none does.
    pub async fn holding(&self, name: &str, needed: u64) -> Result<Option<TableView>, CommitError> {
        match self.kind {
            Kind::Delta => delta::tend::holding(&self.sink, name, self.app(), needed).await,
            Kind::Iceberg(ref c) => {
                iceberg::tend::holding(&self.sink, c.as_ref(), name, self.app(), needed).await
            }
        }
    }

    /// Whether a version of table `name` removed data `file` (relative to the table), and
    /// when (milliseconds since the epoch) if it says.
    pub async fn removed(
        &self,
        name: &str,
        file: &str,
    ) -> Result<Option<Option<i64>>, CommitError> {
        match self.kind {
            Kind::Delta => delta::tend::removed(&self.sink, name, file).await,
            Kind::Iceberg(ref c) => {
                iceberg::tend::removed(&self.sink, c.as_ref(), name, file).await
            }
        }
    }

    /// Rewrite table `name`'s files smaller than `target` bytes into files of about `target`,
    /// beside a running pipeline.
    pub async fn compact(
        &self,
        name: &str,
        target: u64,
        properties: &WriterProperties,
    ) -> Result<Compacted, CompactError> {
        match self.kind {
            Kind::Delta => delta::compact_table(&self.sink, name, target, properties).await,
            Kind::Iceberg(ref c) => {
                iceberg::compact::compact_table(&self.sink, c.as_ref(), name, target, properties)
                    .await
            }
        }
    }

    /// Whether the format's old versions go by a commit of their own (Iceberg's snapshots
    /// expire), which a vacuum makes before it deletes anything.
    pub fn expires_by_commit(&self) -> bool {
        matches!(self.kind, Kind::Iceberg(_))
    }

    /// What a vacuum at `now_ms` deletes from table `name`, keeping what its versions stopped
    /// reading less than `retention_ms` ago. A format whose old versions go by a commit
    /// (Iceberg's snapshots expire) commits it first unless this is a `dry_run`, and answers
    /// what that commit left unreferenced.
    pub async fn vacuumable(
        &self,
        name: &str,
        now_ms: i64,
        retention_ms: i64,
        dry_run: bool,
    ) -> Result<Vacuumable, CommitError> {
        match self.kind {
            Kind::Delta => {
                delta::tend::vacuumable(&self.sink, name, self.app(), now_ms, retention_ms).await
            }
            Kind::Iceberg(ref c) => {
                let (app, commit) = (self.app(), !dry_run);
                iceberg::vacuum::vacuumable(
                    &self.sink,
                    c.as_ref(),
                    name,
                    app,
                    now_ms,
                    retention_ms,
                    commit,
                )
                .await
            }
        }
    }

    /// Hold `output`'s table against the commit log: `entries` are the entries with files of
    /// the output, each with those files' paths relative to the table.
    pub async fn audit(
        &self,
        output: &str,
        entries: &BTreeMap<u64, BTreeSet<String>>,
    ) -> Result<Option<TableAudit>, CommitError> {
        match self.kind {
            Kind::Delta => delta::audit_table(&self.sink, output, self.app(), entries)
                .await
                .map(Some),
            Kind::Iceberg(ref c) => {
                let (sink, app) = (&self.sink, self.app());
                iceberg::audit::audit_table(sink, c.as_ref(), output, app, entries)
                    .await
                    .map(Some)
            }
        }
    }

    /// Hold `output`'s current-state table against the commit log's entries with files of the
    /// output; `None` when it has none.
    pub async fn audit_current(
        &self,
        output: &str,
        entries: &BTreeSet<u64>,
    ) -> Result<Option<TableAudit>, CommitError> {
        match self.kind {
            Kind::Delta => delta::audit_mirror_table(&self.sink, output, self.app(), entries).await,
            Kind::Iceberg(ref c) => {
                let (sink, app) = (&self.sink, self.app());
                iceberg::audit::audit_mirror_table(sink, c.as_ref(), output, app, entries).await
            }
        }
    }
}
