//! `tributary verify`: proof that the lake equals the source, or the keys where it does not.
//!
//! # What it does, in order
//!
//! 1. **A snapshot at a known position.** A temporary slot exports its snapshot, a
//!    `REPEATABLE READ` transaction imports it, and the slot is dropped
//!    ([`snapshot`](crate::source::snapshot)). The slot's consistent point `P` splits the WAL: a
//!    transaction is in the snapshot exactly when its commit record lies before `P`.
//! 2. **The source, digested.** Each tracked table is read inside the snapshot
//!    (`COPY ... (FORMAT binary)`, decoded as the pipeline decodes binary tuples), taken
//!    through the encoder to Arrow, and kept as one digest per key (per row, for a table
//!    without a key; [`digest`]).
//! 3. **A nudge, then a wait.** A transactional logical decoding message
//!    (`pg_logical_emit_message(true, 'tributary.verify', ...)`) commits after `P` in the
//!    source database. The running pipeline receives it as a transaction without changes and
//!    lands it as a flush with no files, so its log passes `P` even when no table is written.
//!    Verify waits until the latest entry's `last_end_lsn` reaches `P`: everything committed
//!    before `P` has landed (or never will: a pipeline that is not running fails the wait).
//! 4. **The lake, read as it was written.** Data files, intents and entries are read through
//!    the pipeline's own [`Sink`] and [`CommitLog`] ([`lake`]), every committed file with the
//!    Parquet reader ([`read`]). Files are checked against their entries (present, size, row
//!    count), files named by no entry are reported (those an intent names are in flight), and
//!    every identity `(_commit_lsn, _seq, _sub)` must be unique in its output. A Delta output
//!    is read through its table: the files its latest version reads, and the files of entries
//!    it does not hold yet (a compaction's files replace the ones they rewrote, which a
//!    vacuum may have deleted).
//! 5. **Replay and compare.** A table's changes committed before `P` are replayed in identity
//!    order ([`replay`]) and the result compared with the source's digests: missing, extra
//!    and changed keys, of which the first `show` of each kind are read again on both sides
//!    ([`show`]) and printed ([`report`]).
//!
//! **With trigger capture** (the lake names the journal where a slot's name goes) no WAL
//! position splits the lake, so steps 1, 3 and 5 differ: the snapshot is a `REPEATABLE READ`
//! transaction's own (`pg_current_snapshot()` read by its first statement), taken after the
//! lake's confirmed position was read; nothing needs a nudge, since the wait is for the journal
//! to hold no row of a transaction the snapshot sees (rows are deleted once they landed) and
//! for no full load to be under way; and the changes replayed are those landed by then whose
//! transaction (`_xid`) the snapshot sees, with every change at or below that confirmed
//! position and a full load's rows ([`replay::Cutoff`]).
//!
//! A pipeline with `[[transform]]` entries lands what its plugins make of the changes, which
//! may differ from the source by design: a content check would prove nothing, so verify
//! refuses it and offers `identities_only` (steps 4 without the content, no source needed).

mod digest;
mod lake;
mod mirror;
mod read;
mod replay;
mod report;
mod show;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::Lsn;
use crate::config::{CaptureMode, PipelineConfig, UnchangedToastPolicy};
use crate::lake::TableFormat;
use crate::lake::commit::{Checkpoint, CommitError, CommitLog, EntryKind, Writer};
use crate::lake::encode::{EncodeError, to_record_batch};
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::{self, TableSet, app_id, mirror_name};
use crate::source::catalog::Catalog;
use crate::source::provision::{self, ProvisionError};
use crate::source::snapshot::{Snapshot, SnapshotError, SourceTable};
use crate::source::trigger::visible::SnapshotXids;
use crate::stream::change::{Op, OutputBatch, OutputRow, Value};
use crate::wire::pgoutput::ReplicaIdentity;

pub use digest::{Digest, DigestError, Shape};
pub use read::ReadError;
pub use replay::{ChangeId, Cutoff, Difference, RowAt, TableDiff};
pub use report::{
    Committed, Duplicates, Files, MirrorOutcome, MirrorReport, Outcome, Report, RowText, Shown,
    TableReport,
};

use digest::BatchCells;
use lake::{Lake, Survey, audit_tables};
use replay::SourceState;

/// The prefix of the logical decoding message that moves a running pipeline past the
/// snapshot.
pub const MESSAGE_PREFIX: &str = "tributary.verify";
/// How often the wait for the lake says what it waits for.
const TELL_EVERY: Duration = Duration::from_secs(5);
const POLL_EVERY: Duration = Duration::from_millis(250);
/// How long the pipeline's slot may have no consumer before verify stops waiting for it.
const INACTIVE_GRACE: Duration = Duration::from_secs(15);
/// Source rows encoded to Arrow at once.
const CHUNK_ROWS: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error("taking the source's rows to Arrow: {0}")]
    Encode(#[from] EncodeError),
    #[error("table {table}: {source}")]
    Digest {
        table: String,
        #[source]
        source: DigestError,
    },
    #[error(
        "the pipeline transforms what lands ({plugins}), so the lake's content is not the source's by design and comparing it would prove nothing; run `tributary verify --identities-only` to check the lake's files and change identities"
    )]
    Transforms { plugins: String },
    #[error(
        "slot {slot:?} does not exist, so no pipeline is landing this source: start it with `tributary run` before verifying"
    )]
    NoSlot { slot: String },
    #[error(
        "the trigger journal in schema {schema:?} is not installed, so no pipeline is landing this source: start it with `tributary run` (source.capture = \"trigger\") before verifying"
    )]
    NoJournal { schema: String },
    #[error(
        "the pipeline is not running: nothing has held the trigger journal in schema {schema:?} for {}s, and {rows} of its rows, of transactions the snapshot sees, have not landed; start it with `tributary run` and verify again",
        INACTIVE_GRACE.as_secs()
    )]
    JournalNotRunning { schema: String, rows: i64 },
    #[error(
        "the lake did not reach the snapshot within {waited_secs}s: {rows} rows of the trigger journal, of transactions the snapshot sees, have not landed{}; the pipeline is behind or stuck (`tributary status` shows how far), verify again later or with a longer --timeout",
        if *.loading { ", and the full load is under way" } else { "" }
    )]
    JournalTimeout {
        waited_secs: u64,
        rows: i64,
        loading: bool,
    },
    #[error(
        "the pipeline is not running: slot {slot:?} has had no consumer for {}s, and the lake has committed up to {committed} but the snapshot is at {at}; start it with `tributary run` and verify again",
        INACTIVE_GRACE.as_secs()
    )]
    NotRunning {
        slot: String,
        committed: Lsn,
        at: Lsn,
    },
    #[error(
        "the lake did not reach the snapshot within {waited_secs}s: it has committed up to {committed}, the snapshot is at {at}; the pipeline is behind or stuck (`tributary status` shows how far), verify again later or with a longer --timeout"
    )]
    Timeout {
        waited_secs: u64,
        committed: Lsn,
        at: Lsn,
    },
    #[error(
        "current-state table {table}: {file}, which its version {version} reads (the version holding commit entry {needed}, the last before the snapshot), is not in the sink: {why}"
    )]
    MirrorFileGone {
        table: String,
        file: String,
        version: u64,
        needed: u64,
        why: String,
    },
    #[error("table {table} is not tracked by this pipeline; it tracks: {tracked}")]
    UnknownTable { table: String, tracked: String },
    #[error("a verify task failed: {0}")]
    Task(String),
}

/// How to verify.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Only this table (`schema.table`) and its files.
    pub table: Option<String>,
    /// Differing keys shown per kind of difference and table, and duplicates per output.
    pub show: usize,
    /// The longest to wait for the lake to reach the snapshot.
    pub timeout: Duration,
    /// Check files and change identities only: no snapshot, no content, no source needed.
    pub identities_only: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            table: None,
            show: 10,
            timeout: Duration::from_secs(300),
            identities_only: false,
        }
    }
}

/// Verify the lake of `config` against its source.
pub async fn run(config: &PipelineConfig, options: &VerifyOptions) -> Result<Report, VerifyError> {
    let sink = Sink::open(&config.sink.url, &config.sink.options)?;
    let log = CommitLog::new(sink, Writer::named("verify"));
    let app = log.identity().await?.map(|i| app_id(&i.database, &i.slot));
    let set = TableSet::open(config.sink.format, log.sink(), app, config.sink.catalog());
    if options.identities_only {
        return identities_only(&log, set.as_ref(), config, options).await;
    }
    if !config.transforms.is_empty() {
        let plugins: Vec<String> = config
            .transforms
            .iter()
            .map(|t| t.plugin.display().to_string())
            .collect();
        return Err(VerifyError::Transforms {
            plugins: plugins.join(", "),
        });
    }

    let pg = crate::source::connect::parse_url(&config.source.url)?;
    let client = crate::source::connect::sql(&pg).await?;
    let slot = &config.source.slot;
    let journal = capture_of(&log, config, &client).await?;
    let tables = tables(&client, config, options.table.as_deref()).await?;

    let (snapshot, at, cutoff) = snapshot_at(&pg, &log, journal.is_some()).await?;
    tracing::info!(%at, "snapshot taken");
    let mut catalog = Catalog::new(pg.clone(), false);
    // Trigger capture takes whole rows of every table it tracks; a slot what its publication
    // publishes.
    let publication = journal
        .is_none()
        .then_some(config.source.publication.as_str());
    let mut sources = Vec::new();
    for table in &tables {
        let table = snapshot.table(&mut catalog, table, publication).await?;
        let shape = Arc::new(shape_of(
            &table,
            config.source.unchanged_toast,
            config.sink.format,
        ));
        sources.push((table, shape));
    }
    if journal.is_none() {
        nudge(&client, snapshot.consistent_point()).await;
    }

    // The source is read while the pipeline catches up and the lake is read: both take CPU,
    // and the lake is read on blocking threads.
    let shapes: HashMap<String, Arc<Shape>> = sources
        .iter()
        .map(|(t, s)| (t.name.clone(), Arc::clone(s)))
        .collect();
    let source_side = async {
        let mut digested = Vec::new();
        for (table, shape) in &sources {
            let started = Instant::now();
            let state = digest_source(&snapshot, table, shape).await?;
            tracing::info!(table = %table.name, rows = state.rows(), took = ?started.elapsed(), "read the source");
            digested.push(state);
        }
        Ok::<_, VerifyError>(digested)
    };
    let lake_side = async {
        let (committed, upto) = match (&journal, &cutoff) {
            (Some(schema), Cutoff::Sees { xids, .. }) => {
                wait_for_journal(&log, &client, schema, xids, options.timeout).await?
            }
            _ => {
                let position = snapshot.consistent_point();
                wait_for_lake(&log, &client, slot, position, options.timeout).await?
            }
        };
        tracing::info!(%committed, %at, "the lake has reached the snapshot; reading it");
        let started = Instant::now();
        let survey = Survey::read(&log, options.table.as_deref(), Some(upto), set.as_ref()).await?;
        let lake = lake::read_lake(&log, &survey, &shapes).await?;
        tracing::info!(files = survey.committed.len(), took = ?started.elapsed(), "read the lake");
        Ok::<_, VerifyError>((survey, lake))
    };
    let (digested, (survey, mut lake)) = tokio::try_join!(source_side, lake_side)?;

    let mut tables_out = Vec::new();
    let mut mirrors = Vec::new();
    let mirrored = config.mirrored();
    for ((table, shape), source) in sources.iter().zip(digested) {
        let landed = lake.tables.remove(&table.name).unwrap_or_default();
        let (keyed, show_n) = (shape.key.is_some(), options.show);
        let cut = cutoff.clone();
        let (diff, duplicates, source) = tokio::task::spawn_blocking(move || {
            let (state, duplicates) = replay::replay(landed, &cut, keyed);
            (replay::compare(&source, &state, show_n), duplicates, source)
        })
        .await
        .map_err(|e| VerifyError::Task(e.to_string()))?;
        if let Some(set) = &set {
            let started = Instant::now();
            let mirror = match &cutoff {
                Cutoff::Before(at) => {
                    let at = mirror::At {
                        at: Lsn(*at),
                        timeout: options.timeout,
                        mirrored: &mirrored,
                        client: &client,
                        set,
                    };
                    mirror::compare(&log, &survey, table, shape, &source, &at).await?
                }
                Cutoff::Sees { .. } => mirror::not_at_a_position(set, table).await?,
            };
            if let Some(mirror) = mirror {
                tracing::info!(table = %mirror.table, took = ?started.elapsed(), "read the current-state table");
                mirrors.push(mirror);
            }
        }
        lake.duplicates.insert(table.name.clone(), duplicates);
        let shown = show::show(&snapshot, &log, &survey, table, shape, &diff.samples).await?;
        tables_out.push(TableReport {
            table: table.name.clone(),
            key: table.key_names().iter().map(|k| (*k).to_owned()).collect(),
            outcome: Outcome::Compared { diff, shown },
        });
    }
    snapshot.close().await?;
    let mut report = finish(
        &survey,
        lake,
        tables_out,
        Some(at),
        options.show,
        journal.is_some(),
    );
    if let Some(set) = &set {
        let not_kept: Vec<&str> = mirrors
            .iter()
            .filter(|m| matches!(m.outcome, MirrorOutcome::NotKept { .. }))
            .map(|m| m.table.as_str())
            .collect();
        let kept = |output: &str| {
            mirrored.contains(output) && !not_kept.contains(&mirror_name(output).as_str())
        };
        report.audits = audit_tables(set, &survey, options.table.as_deref(), kept).await?;
        report.format = set.format();
    }
    report.mirrors = mirrors;
    Ok(report)
}

/// `--identities-only`: the lake's files and change identities, without the source.
async fn identities_only(
    log: &CommitLog,
    set: Option<&TableSet>,
    config: &PipelineConfig,
    options: &VerifyOptions,
) -> Result<Report, VerifyError> {
    let survey = Survey::read(log, options.table.as_deref(), None, set).await?;
    let lake = lake::read_lake(log, &survey, &HashMap::new()).await?;
    let mut report = finish(&survey, lake, Vec::new(), None, options.show, false);
    if let Some(set) = set {
        let mirrored = config.mirrored();
        let kept = |output: &str| mirrored.contains(output);
        report.audits = audit_tables(set, &survey, options.table.as_deref(), kept).await?;
        report.format = set.format();
    }
    Ok(report)
}

/// The trigger journal's schema when the lake is captured through triggers (`None`: from a
/// slot), refusing a slot or a journal that is not there. A lake names the journal's schema
/// where a slot's name goes; before it has landed anything, the pipeline file says which
/// capture it is.
async fn capture_of(
    log: &CommitLog,
    config: &PipelineConfig,
    client: &Client,
) -> Result<Option<String>, VerifyError> {
    let journal = match log.identity().await? {
        Some(identity) => crate::lake::commit::journal_schema(&identity.slot).map(str::to_owned),
        None => (config.source.capture == CaptureMode::Trigger)
            .then(|| config.source.trigger_schema.clone()),
    };
    let slot = &config.source.slot;
    match &journal {
        None if provision::slot_state(client, slot).await?.is_none() => {
            return Err(VerifyError::NoSlot { slot: slot.clone() });
        }
        Some(schema)
            if crate::source::trigger::capture::size(client, schema)
                .await?
                .is_none() =>
        {
            return Err(VerifyError::NoJournal {
                schema: schema.clone(),
            });
        }
        _ => {}
    }
    Ok(journal)
}

/// The source's snapshot to compare at, what to call it, and how it splits the lake: at a
/// slot's exact position, or (`journal`, trigger capture) by the transactions it sees.
async fn snapshot_at(
    pg: &crate::source::connect::PgConfig,
    log: &CommitLog,
    journal: bool,
) -> Result<(Snapshot, String, Cutoff), VerifyError> {
    if !journal {
        tracing::info!(
            "taking a snapshot of the source (waits for transactions running now to end)"
        );
        let snapshot =
            Snapshot::take(pg, &crate::source::snapshot::temporary_slot_name("verify")).await?;
        let at = snapshot.consistent_point();
        return Ok((snapshot, at.to_string(), Cutoff::Before(at.0)));
    }
    // What landed before the snapshot is taken committed before it.
    let landed = Checkpoint::from_entry(log.latest().await?.as_ref()).confirmed();
    let (snapshot, text, _) = Snapshot::begin(pg, landed).await?;
    let xids = SnapshotXids::parse(&text).ok_or_else(|| {
        VerifyError::Task(format!(
            "the server gave snapshot {text:?}, which does not read as xmin:xmax:xip"
        ))
    })?;
    let cutoff = Cutoff::Sees {
        landed: landed.0,
        xids,
    };
    Ok((snapshot, format!("snapshot {text}"), cutoff))
}

/// The tracked tables, or the one asked for.
async fn tables(
    client: &Client,
    config: &PipelineConfig,
    only: Option<&str>,
) -> Result<Vec<String>, VerifyError> {
    let mut tracked = provision::tracked_tables(client, &config.source).await?;
    tracked.sort();
    match only {
        None => Ok(tracked),
        Some(table) if tracked.iter().any(|t| t == table) => Ok(vec![table.to_owned()]),
        Some(table) => Err(VerifyError::UnknownTable {
            table: table.to_owned(),
            tracked: tracked.join(", "),
        }),
    }
}

/// How a source table is compared.
fn shape_of(table: &SourceTable, policy: UnchangedToastPolicy, format: TableFormat) -> Shape {
    let unchanged_toast =
        policy == UnchangedToastPolicy::Null && table.identity != ReplicaIdentity::Full;
    Shape {
        table: table.name.clone(),
        columns: table.columns.iter().map(|c| c.name.clone()).collect(),
        key: (!table.key.is_empty()).then(|| table.key.clone()),
        toast: match unchanged_toast {
            true => table.toastable.clone(),
            false => Vec::new(),
        },
        format,
    }
}

/// Commit a transaction after the snapshot that the running pipeline lands as an entry.
async fn nudge(client: &Client, at: Lsn) {
    let content = format!("snapshot at {at}");
    if let Err(e) = client
        .execute(
            "SELECT pg_logical_emit_message(true, $1, $2)",
            &[&MESSAGE_PREFIX, &content],
        )
        .await
    {
        tracing::warn!(
            "could not write the logical decoding message that moves the pipeline past the snapshot ({}); waiting for other writes to do it",
            provision::server_text(&e)
        );
    }
}

/// The source rows of `rows` as an output batch the encoder takes.
fn source_batch(table: &SourceTable, rows: Vec<Vec<Value>>) -> OutputBatch {
    OutputBatch {
        output: table.name.clone(),
        columns: Arc::clone(&table.columns),
        rows: rows
            .into_iter()
            .map(|values| OutputRow {
                op: Op::Insert,
                commit_lsn: Lsn::ZERO,
                seq: 0,
                sub: 0,
                xid: 0,
                commit_time: 0,
                values,
                old: None,
            })
            .collect(),
        old_image: true,
    }
}

/// Read `table` in the snapshot and fold each chunk's Arrow batch into `acc` with `each`, on a
/// blocking thread while the next chunk is read.
pub(super) async fn scan_source<T: Send + 'static>(
    snapshot: &Snapshot,
    table: &SourceTable,
    format: TableFormat,
    mut acc: T,
    each: impl Fn(&mut T, &arrow_array::RecordBatch) -> Result<(), VerifyError> + Send + 'static,
) -> Result<T, VerifyError> {
    let (chunks, mut received) = tokio::sync::mpsc::channel::<Vec<Vec<Value>>>(2);
    let source = table.clone();
    let worker = tokio::task::spawn_blocking(move || {
        while let Some(chunk) = received.blocking_recv() {
            let batch = to_record_batch(&source_batch(&source, chunk))?;
            let schema = tables::conform_schema(format, &batch.schema());
            let batch = tables::conform_batch(format, &batch, &schema).map_err(|e| {
                VerifyError::Task(format!(
                    "taking the source's rows to the {} table's types: {e}",
                    format.name()
                ))
            })?;
            each(&mut acc, &batch)?;
        }
        Ok::<_, VerifyError>(acc)
    });
    let mut rows = snapshot.rows(table).await?;
    let read = async {
        while let Some(chunk) = rows.next_chunk(CHUNK_ROWS).await? {
            if chunks.send(chunk).await.is_err() {
                // The worker stopped; its error is the answer.
                break;
            }
        }
        Ok::<_, VerifyError>(())
    }
    .await;
    drop(chunks);
    let folded = worker.await.map_err(|e| VerifyError::Task(e.to_string()))?;
    read?;
    folded
}

pub(super) fn digest_error(shape: &Shape) -> impl FnOnce(DigestError) -> VerifyError + '_ {
    move |source| VerifyError::Digest {
        table: shape.table.clone(),
        source,
    }
}

/// The source's digests of `table`.
async fn digest_source(
    snapshot: &Snapshot,
    table: &SourceTable,
    shape: &Arc<Shape>,
) -> Result<SourceState, VerifyError> {
    let shape = Arc::clone(shape);
    let state = SourceState::new(shape.key.is_some());
    scan_source(snapshot, table, shape.format, state, move |state, batch| {
        let mut cells = BatchCells::new(batch, &shape).map_err(digest_error(&shape))?;
        for i in 0..batch.num_rows() {
            let (key, row) = (cells.key(i), cells.row(i, None));
            state.add(key, row);
        }
        Ok(())
    })
    .await
}

/// Wait until the lake's latest entry ends at or past `at`; returns where it ends.
async fn wait_for_lake(
    log: &CommitLog,
    client: &Client,
    slot: &str,
    at: Lsn,
    timeout: Duration,
) -> Result<(Lsn, u64), VerifyError> {
    let started = Instant::now();
    let mut told = Instant::now();
    let mut active_since = Instant::now();
    loop {
        let latest = log.latest().await?;
        let committed = latest.as_ref().map_or(Lsn::ZERO, |e| e.last_end_lsn);
        if let Some(latest) = latest.filter(|_| committed >= at) {
            return Ok((committed, latest.sequence));
        }
        let state = provision::slot_state(client, slot).await?;
        if state.as_ref().is_some_and(|s| s.holder.is_some()) {
            active_since = Instant::now();
        } else if active_since.elapsed() >= INACTIVE_GRACE {
            return Err(VerifyError::NotRunning {
                slot: slot.to_owned(),
                committed,
                at,
            });
        }
        if started.elapsed() >= timeout {
            return Err(VerifyError::Timeout {
                waited_secs: timeout.as_secs(),
                committed,
                at,
            });
        }
        if told.elapsed() >= TELL_EVERY {
            told = Instant::now();
            let consumer = match state.and_then(|s| s.active_pid()) {
                Some(pid) => format!("the pipeline (pid {pid}) is reading the slot"),
                None => "the slot has no consumer right now".to_owned(),
            };
            tracing::info!(
                "waiting for the lake: it has committed up to {committed}, the snapshot is at {at}; {consumer}"
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Wait until every transaction `xids` sees has landed, with trigger capture: the journal
/// holds no row of one (its rows are deleted once they landed) and no full load is under way
/// (the rows of the transactions before a load are deleted when it starts). Returns the lake's
/// position then and the sequence to read through.
async fn wait_for_journal(
    log: &CommitLog,
    client: &Client,
    schema: &str,
    xids: &SnapshotXids,
    timeout: Duration,
) -> Result<(Lsn, u64), VerifyError> {
    let running: Vec<String> = xids.running.iter().map(u64::to_string).collect();
    let snapshot = format!("{}:{}:{}", xids.xmin, xids.xmax, running.join(","));
    let journal = format!("{}.journal", crate::source::quote_ident(schema));
    let rows = |counted| journal_rows(client, &journal, &snapshot, counted);
    let started = Instant::now();
    let mut told = Instant::now();
    let mut active_since = Instant::now();
    loop {
        // The journal first: once it holds none of the snapshot's rows, every entry holding
        // them is in the log, so the latest entry read after covers them.
        let waiting = rows(false).await? > 0;
        let latest = log.latest().await?;
        let loading = latest
            .as_ref()
            .and_then(|e| e.load.as_ref())
            .is_some_and(|l| !l.finished());
        if !waiting
            && !loading
            && let Some(latest) = latest
        {
            return Ok((latest.last_end_lsn, latest.sequence));
        }
        if crate::source::trigger::capture::reader(client, schema)
            .await?
            .is_some()
        {
            active_since = Instant::now();
        } else if active_since.elapsed() >= INACTIVE_GRACE {
            return Err(VerifyError::JournalNotRunning {
                schema: schema.to_owned(),
                rows: rows(true).await?,
            });
        }
        if started.elapsed() >= timeout {
            return Err(VerifyError::JournalTimeout {
                waited_secs: timeout.as_secs(),
                rows: rows(true).await?,
                loading,
            });
        }
        if told.elapsed() >= TELL_EVERY {
            told = Instant::now();
            tracing::info!(
                rows = rows(true).await?,
                loading,
                "waiting for the lake: rows of the trigger journal that the snapshot sees have not landed yet"
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The rows of `journal` of transactions `snapshot` sees (`counted`), or whether there are any
/// (1 or 0).
async fn journal_rows(
    client: &Client,
    journal: &str,
    snapshot: &str,
    counted: bool,
) -> Result<i64, VerifyError> {
    let which = format!("FROM {journal} WHERE pg_visible_in_snapshot(xid, $1::text::pg_snapshot)");
    let sql = match counted {
        true => format!("SELECT count(*) {which}"),
        false => format!("SELECT (EXISTS (SELECT 1 {which}))::int::int8"),
    };
    Ok(client
        .query_one(&sql, &[&snapshot])
        .await
        .map(|r| r.get::<_, i64>(0))
        .map_err(provision::query_error(format!(
            "reading the journal {journal}"
        )))?)
}

/// The report, once the tables are compared (or, identities only, without them).
fn finish(
    survey: &Survey,
    lake: Lake,
    mut tables: Vec<TableReport>,
    at: Option<String>,
    show: usize,
    journal: bool,
) -> Report {
    if at.is_none() {
        tables = lake
            .rows
            .iter()
            .map(|(output, &rows)| TableReport {
                table: output.clone(),
                key: Vec::new(),
                outcome: Outcome::Landed { rows },
            })
            .collect();
    }
    let mut duplicates: Vec<Duplicates> = lake
        .duplicates
        .into_iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(output, d)| Duplicates {
            output,
            count: d.len() as u64,
            shown: d
                .iter()
                .take(show)
                .map(|d| (d.id, survey.location(d.first), survey.location(d.again)))
                .collect(),
        })
        .collect();
    duplicates.sort_by(|a, b| a.output.cmp(&b.output));
    let mut notes = Vec::new();
    for entry in &survey.entries {
        if let (EntryKind::Open, Some(gap)) = (entry.kind, entry.accepted_gap) {
            notes.push(format!(
                "entry {} accepted a gap: changes committed between {} and {} never reached the lake",
                entry.sequence, gap.from, gap.to
            ));
        }
    }
    let missing_rows = tables
        .iter()
        .any(|t| matches!(&t.outcome, Outcome::Compared { diff, .. } if diff.missing > 0));
    if let (true, Some(first)) = (missing_rows, survey.entries.first()) {
        notes.push(match journal {
            false => format!(
                "the lake starts at {} (where the slot stood when the pipeline first started): rows written before it never reached the lake and show as missing",
                first.last_end_lsn
            ),
            true => "the lake starts where the pipeline first installed its trigger journal: rows written before that never reached the lake and show as missing".to_owned(),
        });
    }
    Report {
        at,
        tables,
        files: lake.files,
        duplicates,
        notes,
        audits: Vec::new(),
        format: TableFormat::Parquet,
        mirrors: Vec::new(),
    }
}

/// Output batches for the unit tests of the pure parts.
#[cfg(test)]
mod testing {
    use std::sync::Arc;

    use crate::Lsn;
    use crate::stream::change::{Op, OutputBatch, OutputColumn, OutputRow, Value};

    /// A change: its operation, commit LSN, values and old image.
    pub type Row = (Op, u64, Vec<Value>, Option<Vec<Value>>);

    /// Rows of table `public.t` with `columns`, numbered by `seq` in order.
    pub fn batch(columns: Arc<[OutputColumn]>, rows: Vec<Row>) -> OutputBatch {
        OutputBatch {
            output: "public.t".into(),
            columns,
            rows: rows
                .into_iter()
                .enumerate()
                .map(|(seq, (op, lsn, values, old))| OutputRow {
                    op,
                    commit_lsn: Lsn(lsn),
                    seq: seq as u32,
                    sub: 0,
                    xid: 1,
                    commit_time: 0,
                    values,
                    old,
                })
                .collect(),
            old_image: true,
        }
    }
}
