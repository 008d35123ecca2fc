//! The Delta tables of a sink, read and appended to through the object store.
//!
//! Each output is a table at `<sink>/<output>/`, its log in `<output>/_delta_log/`. A commit
//! is created with put-if-absent, so two writers never both take a version; the loser reads
//! what won and, when that is not its own flush already, tries the next version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use object_store::path::Path;

use super::actions::{Action, Add, commit_file, parse_commit};
use super::checkpoint;
use super::compact;
use super::current::{self, Mirrors, Preceding, Rows};
use super::mirror::mirror_name;
use super::state::{Appender, TableError, TableFile, TableState, TypeChange};
use crate::lake::commit::{CommitError, Writer};
use crate::lake::sink::{Created, Sink};
use crate::lake::tables::audit;
use crate::lake::tables::file::{Later, by_output};
use crate::lake::tables::overtaken::Seen;
use crate::lake::tables::rewrite::{self, Small};
use crate::lake::tables::tend::{COMPACTED, CompactError, Compacted};

/// The object that holds version `version` of `output`'s log.
pub fn commit_path(output: &str, version: u64) -> Path {
    Path::from(format!("{output}/_delta_log/{version:020}.json"))
}

/// The sink's Delta tables as one writer appends to them; what it last read of each table is
/// kept, so an append reads nothing when no one else wrote.
#[derive(Clone)]
pub struct Tables {
    sink: Sink,
    appender: Appender,
    writer: Writer,
    /// What each table was last read or written as, by table name.
    states: Arc<Mutex<BTreeMap<String, TableState>>>,
    mirrors: Option<Arc<Mirrors>>,
    /// What the current-state tables' loads read of the change logs.
    seen: Arc<Seen>,
}

impl Tables {
    pub fn new(sink: Sink, app_id: String, writer: Writer) -> Tables {
        Tables {
            sink,
            appender: Appender {
                app_id,
                engine: format!("tributary {}", env!("CARGO_PKG_VERSION")),
                on_type_change: TypeChange::Stop,
            },
            writer,
            states: Arc::default(),
            mirrors: None,
            seen: Arc::default(),
        }
    }

    /// What a column whose type changed does to its table (stop, by default).
    pub fn on_type_change(mut self, policy: TypeChange) -> Tables {
        self.appender.on_type_change = policy;
        self
    }

    /// Also keep the current-state tables of `mirrors.outputs`.
    pub fn with_mirrors(mut self, mirrors: Mirrors) -> Tables {
        self.mirrors = (!mirrors.outputs.is_empty()).then(|| Arc::new(mirrors));
        self
    }

    fn cached(&self, table: &str) -> Option<TableState> {
        self.states
            .lock()
            .expect("not poisoned")
            .get(table)
            .cloned()
    }

    fn remember(&self, table: &str, state: TableState) {
        self.states
            .lock()
            .expect("not poisoned")
            .insert(table.to_owned(), state);
    }

    pub fn app_id(&self) -> &str {
        &self.appender.app_id
    }

    /// `output`'s table as its log is now, read on from `from` (a state read earlier).
    pub async fn read(&self, output: &str, from: TableState) -> Result<TableState, CommitError> {
        read_table(&self.sink, output, from).await
    }

    /// Append the files of flush `sequence` to their outputs' tables, each table in one commit
    /// whose `txn` version is `sequence`. A table that holds `sequence` already (an attempt
    /// whose reply was lost, or another instance's catch-up) is left as it is; one that holds
    /// a later flush of this pipeline means another instance took over.
    pub async fn publish(&self, sequence: u64, files: &[TableFile]) -> Result<(), CommitError> {
        self.publish_as(sequence, files, Later::TakenOver).await
    }

    pub async fn publish_as(
        &self,
        sequence: u64,
        files: &[TableFile],
        later: Later,
    ) -> Result<(), CommitError> {
        let appends = by_output(files)
            .into_iter()
            .map(|(output, files)| self.append(output, sequence, files, later));
        futures::future::try_join_all(appends).await?;
        Ok(())
    }

    async fn append(
        &self,
        output: &str,
        sequence: u64,
        files: Vec<&TableFile>,
        later: Later,
    ) -> Result<(), CommitError> {
        let mut state = match self.cached(output) {
            Some(state) => state,
            None => read_latest(&self.sink, output).await?,
        };
        // The flush the table held before this call appended to it (`None`: it held the flush).
        let mut before = None;
        loop {
            if self.holds(&state, output, sequence, later)? {
                break;
            }
            let now_ms = crate::clock::unix_micros() / 1000;
            let actions = self
                .appender
                .append(&state, sequence, &files, output, now_ms, new_table_id)
                .map_err(|source| CommitError::Table {
                    output: output.to_owned(),
                    sequence,
                    format: "Delta",
                    source: Box::new(source),
                })?;
            let version = state.next_version();
            let path = commit_path(output, version);
            let held = state.txn(self.app_id());
            if actions.iter().any(|a| matches!(a, Action::Remove(_))) {
                tracing::warn!(%output, version, sequence, "a column changed type (sink.on_type_change = \"new_version\"): this version of the table replaces its schema and holds the rows from this flush on; the earlier rows stay readable at version {} and before (time travel)", version.saturating_sub(1));
            }
            match self.sink.create_fence(&path, commit_file(&actions)).await? {
                Created::New => {
                    state
                        .apply(version, actions)
                        .map_err(|source| CommitError::Table {
                            output: output.to_owned(),
                            sequence,
                            format: "Delta",
                            source: Box::new(source),
                        })?;
                    before = Some(Preceding::Flush(held));
                    crate::failpoint::reached("tables.after-table").await;
                    if checkpoint::due(version) {
                        self.checkpoint(output, version, &state).await;
                    }
                    break;
                }
                // Someone else took the version (a compaction, another instance), or an
                // earlier attempt of ours did: read what is there and decide again.
                Created::Existed => state = self.read(output, state).await?,
            }
        }
        self.remember(output, state.clone());
        self.mirror(output, sequence, &files, &state, before, later)
            .await
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
            let state = match self.cached(&table) {
                Some(state) => state,
                None => {
                    let state = read_latest(&self.sink, &table).await?;
                    self.remember(&table, state.clone());
                    state
                }
            };
            if state.txn(self.app_id()).is_none_or(|held| held < sequence) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether `table` (as `state` has it) holds flush `sequence` already; a table that holds
    /// a later flush means another instance took over, unless `later` says a catch-up met it.
    fn holds(
        &self,
        state: &TableState,
        table: &str,
        sequence: u64,
        later: Later,
    ) -> Result<bool, CommitError> {
        match state.txn(self.app_id()) {
            Some(v) if v == sequence => Ok(true),
            Some(theirs) if theirs > sequence && later == Later::Holds => Ok(true),
            Some(theirs) if theirs > sequence => Err(CommitError::TableAhead {
                output: table.to_owned(),
                ours: sequence,
                theirs,
                writer: Box::new(self.writer.clone()),
            }),
            _ => Ok(false),
        }
    }

    /// Apply flush `sequence` (its `files` of `output`, now in the change-log table `log`)
    /// to the output's current-state table, when it keeps one. A current-state table behind
    /// the flush the change log held before this one missed flushes, and is built again from
    /// the whole change log. `before` is that flush when this writer appended this one to the
    /// change log; otherwise (the change log held it already: a start's catch-up, an attempt
    /// whose reply was lost) the change log's commits say, read when needed.
    async fn mirror(
        &self,
        output: &str,
        sequence: u64,
        files: &[&TableFile],
        log: &TableState,
        mut before: Option<Preceding>,
        later: Later,
    ) -> Result<(), CommitError> {
        let Some(mirrors) = self.mirrors.as_deref() else {
            return Ok(());
        };
        if !mirrors.outputs.contains(output) {
            return Ok(());
        }
        crate::failpoint::reached("delta.before-current").await;
        let name = mirror_name(output);
        let mut state = match self.cached(&name) {
            Some(state) => state,
            None => read_latest(&self.sink, &name).await?,
        };
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let failed = |source: TableError| match source {
            // An outage is the sink's, and retried; the rest name the table.
            TableError::Mirror(e) if e.outage().is_some() => {
                CommitError::Sink(e.outage().expect("an outage"))
            }
            source => CommitError::Table {
                output: name.clone(),
                sequence,
                format: "Delta",
                source: Box::new(source),
            },
        };
        let mut asked = false;
        loop {
            if self.holds(&state, &name, sequence, later)? {
                break;
            }
            let stale = self
                .rebuild_reason(output, sequence, log, &state, &mut before)
                .await?;
            let (rows, txn) = match stale {
                None => (
                    Rows::Flush {
                        paths: &paths,
                        log,
                        seen: &self.seen,
                    },
                    sequence,
                ),
                Some(reason) => {
                    let all = current::log_files(output, log);
                    tracing::info!(table = %name, files = all.len(), %reason, "building the current-state table from the whole change log");
                    (
                        Rows::Rebuild(all),
                        log.txn(self.app_id()).unwrap_or(sequence),
                    )
                }
            };
            let now_ms = crate::clock::unix_micros() / 1000;
            let applied = current::apply(
                &self.sink,
                mirrors,
                output,
                &state,
                rows,
                (self.app_id(), txn),
                now_ms,
            )
            .await
            .map_err(failed)?;
            if !asked && !applied.arriving.is_empty() {
                let asking = self.reload_for(output, sequence, &applied.arriving);
                if let Err(e) = asking.await {
                    current::delete_written(&self.sink, &applied.written).await;
                    return Err(e);
                }
                asked = true;
            }
            if current::commit(&self.sink, output, &mut state, applied).await? {
                let version = state.version.unwrap_or_default();
                if checkpoint::due(version) {
                    self.checkpoint(&name, version, &state).await;
                }
                break;
            }
            // Another writer took the version (a compaction, another instance): read it and
            // plan again.
            state = self.read(&name, state).await?;
        }
        self.remember(&name, state);
        Ok(())
    }
}

impl Tables {
    /// Ask for `output`'s rows again when flush `sequence` brings `columns` to its
    /// current-state table (see [`current::Reload`]).
    async fn reload_for(
        &self,
        output: &str,
        sequence: u64,
        columns: &[String],
    ) -> Result<(), CommitError> {
        let reload = self.mirrors.as_deref().and_then(|m| m.reload.as_deref());
        let failed = |reason| CommitError::Table {
            output: mirror_name(output),
            sequence,
            format: "Delta",
            source: Box::new(TableError::Data {
                path: mirror_name(output),
                reason,
            }),
        };
        crate::lake::tables::current::ask_reload(reload, output, columns, failed).await
    }

    /// Why `output`'s current-state table (`state`) is built again from the whole change log
    /// (`log`) rather than take flush `sequence` alone; `None`: it takes the flush. `before`
    /// is the flush the change log held before this one, once known: the first call that
    /// needs it reads it from the change log's commits.
    async fn rebuild_reason(
        &self,
        output: &str,
        sequence: u64,
        log: &TableState,
        state: &TableState,
        before: &mut Option<Preceding>,
    ) -> Result<Option<String>, CommitError> {
        if state.version.is_none() {
            return Ok(Some("it is new".to_owned()));
        }
        let preceding = match *before {
            Some(known) => known,
            None => *before.insert(
                current::preceding_flush(&self.sink, output, log, self.app_id(), sequence).await?,
            ),
        };
        Ok(preceding.missed_by(state.txn(self.app_id())))
    }

    async fn checkpoint(&self, output: &str, version: u64, state: &TableState) {
        write_checkpoint(&self.sink, output, version, state).await;
    }
}

/// Write the checkpoint of `output` at `version` (the state after it) and point
/// `_last_checkpoint` at it. A failure is told and otherwise ignored: readers replay the
/// commits instead, and the next checkpoint covers them.
async fn write_checkpoint(sink: &Sink, output: &str, version: u64, state: &TableState) {
    let (bytes, size) = checkpoint::checkpoint(state, crate::clock::unix_micros() / 1000);
    let path = checkpoint_path(output, version);
    let last = last_checkpoint_path(output);
    let written = match sink.create(&path, bytes).await {
        Ok(_) => {
            sink.replace(&last, checkpoint::last_checkpoint(version, size))
                .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = written {
        tracing::warn!(%output, version, error = %e, "could not write the Delta table's checkpoint; readers replay its commits instead");
    }
}

/// Rewrite `output`'s files smaller than `target` bytes into files of about `target` (see
/// [`compact::plan`]), as one commit with `dataChange = false` beside a running pipeline. The
/// new files go under `<output>/_compacted/`. The commit is put-if-absent like every other: a
/// pipeline's append that took the version first is read and the commit tried at the next
/// one, while a commit of another compaction that removed a file this one rewrote ends this
/// one, its new files deleted. Each group's files are held in memory while rewritten.
pub async fn compact_table(
    sink: &Sink,
    output: &str,
    target: u64,
    properties: &parquet::file::properties::WriterProperties,
) -> Result<Compacted, CompactError> {
    let rewritten = match output.ends_with(super::MIRROR_SUFFIX) {
        true => rewrite_current(sink, output, target, properties).await?,
        false => rewrite_table(sink, output, target, properties).await?,
    };
    commit_rewrite(sink, rewritten).await
}

/// A compaction's new files, written and not yet committed.
pub struct Rewritten {
    output: String,
    target: u64,
    /// The table as the rewrite read it.
    state: TableState,
    replaced: Vec<Add>,
    written: Vec<Add>,
    rows: u64,
    now_ms: i64,
}

impl Rewritten {
    fn new(output: &str, target: u64, state: TableState) -> Rewritten {
        Rewritten {
            output: output.to_owned(),
            target,
            state,
            replaced: Vec::new(),
            written: Vec::new(),
            rows: 0,
            now_ms: crate::clock::unix_micros() / 1000,
        }
    }

    /// Take in the rewrite of `group` (its new files and rows); on failure, delete every file
    /// this compaction wrote and pass the error on.
    async fn take(
        &mut self,
        sink: &Sink,
        group: Vec<Add>,
        result: Result<(Vec<Add>, u64), CompactError>,
    ) -> Result<(), CompactError> {
        match result {
            Ok((written, rows)) => {
                self.rows += rows;
                self.written.extend(written);
                self.replaced.extend(group);
                Ok(())
            }
            Err(e) => {
                remove_written(sink, &self.output, &self.written).await;
                Err(e)
            }
        }
    }
}

/// The first half of [`compact_table`]: read the table, plan, and write the new files.
async fn rewrite_table(
    sink: &Sink,
    output: &str,
    target: u64,
    properties: &parquet::file::properties::WriterProperties,
) -> Result<Rewritten, CompactError> {
    let state = read_latest(sink, output).await?;
    let groups = compact::plan(state.files.values(), target);
    let mut rewritten = Rewritten::new(output, target, state);
    let now_ms = rewritten.now_ms;
    for group in groups {
        let result = rewrite(sink, output, &group, properties, now_ms)
            .await
            .map(|(add, rows)| (vec![add], rows));
        rewritten.take(sink, group, result).await?;
    }
    Ok(rewritten)
}

/// The first half of [`compact_table`] for a current-state table: its small files, grouped by
/// key ([`super::mirror::plan_compaction`]), each group's rows sorted by key and written with
/// their key bounds, as the pipeline writes that table's files.
async fn rewrite_current(
    sink: &Sink,
    table: &str,
    target: u64,
    properties: &parquet::file::properties::WriterProperties,
) -> Result<Rewritten, CompactError> {
    use super::mirror::{Keys, key_columns, plan_compaction};
    let state = read_latest(sink, table).await?;
    let keys = state.schema.as_ref().map(key_columns).unwrap_or_default();
    let groups = match keys.is_empty() {
        true => Vec::new(),
        false => plan_compaction(state.files.values(), &keys, target),
    };
    let mut rewritten = Rewritten::new(table, target, state);
    let now_ms = rewritten.now_ms;
    let bad = |path: &str, reason: String| CompactError::File {
        output: table.to_owned(),
        path: path.to_owned(),
        reason,
    };
    for group in groups {
        let result = async {
            let mut batches = Vec::new();
            for add in &group {
                batches.extend(
                    crate::lake::tables::current::read_batches(
                        sink,
                        &format!("{table}/{}", add.path),
                    )
                    .await
                    .map_err(|e| bad(&add.path, e.to_string()))?,
                );
            }
            let schemas: Vec<_> = batches.iter().map(|b| b.schema()).collect();
            let schema = compact::merged_schema(&schemas).map_err(|e| bad(table, e.to_string()))?;
            let mut fitted = batches
                .iter()
                .map(|b| compact::fit(b, &schema))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(table, e.to_string()))?;
            let mut rows = Vec::new();
            for (source, batch) in fitted.iter().enumerate() {
                let arrays = crate::lake::tables::current::key_columns(batch, &keys, table)
                    .map_err(|e| bad(table, e.to_string()))?;
                let reader =
                    Keys::new(arrays.iter().collect()).map_err(|e| bad(table, e.to_string()))?;
                for row in 0..batch.num_rows() {
                    let cells = crate::lake::tables::current::whole_row(
                        (source, row),
                        schema.fields().len(),
                    );
                    rows.push((reader.key(row), cells));
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            let expected: u64 = group.iter().filter_map(compact::records).sum();
            if rows.len() as u64 != expected {
                return Err(bad(
                    table,
                    format!(
                        "the files held {} rows where their statistics say {expected}",
                        rows.len()
                    ),
                ));
            }
            let null_source = fitted.len();
            fitted.push(arrow_array::RecordBatch::new_empty(schema.clone()));
            let files = crate::lake::tables::current::write_rows(
                &fitted,
                &schema,
                &rows,
                null_source,
                (properties, target),
            )
            .map_err(|e| bad(table, e))?;
            let mut written = Vec::new();
            for (bytes, range) in files {
                let stats = super::mirror::stats(&keys, rows[range].iter().map(|(k, _)| k));
                let relative = format!("{COMPACTED}/{}.parquet", new_table_id());
                let size = bytes.len() as u64;
                sink.create(&Path::from(format!("{table}/{relative}")), bytes)
                    .await
                    .map_err(CommitError::from)?;
                written.push(Add {
                    path: relative,
                    partition_values: BTreeMap::new(),
                    size,
                    modification_time: now_ms,
                    data_change: false,
                    stats: Some(stats),
                });
            }
            Ok((written, rows.len() as u64))
        }
        .await;
        rewritten.take(sink, group, result).await?;
    }
    Ok(rewritten)
}

/// The second half of [`compact_table`]: commit the rewrite at the table's next version.
async fn commit_rewrite(sink: &Sink, rewritten: Rewritten) -> Result<Compacted, CompactError> {
    let Rewritten {
        output,
        target,
        mut state,
        replaced,
        written,
        rows,
        now_ms,
    } = rewritten;
    let mut done = Compacted {
        output: output.clone(),
        version: None,
        replaced: replaced.len(),
        replaced_bytes: replaced.iter().map(|a| a.size).sum(),
        written: written.len(),
        written_bytes: written.iter().map(|a| a.size).sum(),
        rows,
        left_alone: None,
    };
    if written.is_empty() {
        return Ok(done);
    }
    let actions = compact::commit(&replaced, &written, target, now_ms);
    loop {
        let version = state.next_version();
        match sink
            .create_fence(&commit_path(&output, version), commit_file(&actions))
            .await
        {
            Ok(Created::New) => {
                if state.apply(version, actions).is_ok() && checkpoint::due(version) {
                    write_checkpoint(sink, &output, version, &state).await;
                }
                done.version = Some(version);
                return Ok(done);
            }
            Ok(Created::Existed) => {}
            Err(e) => {
                remove_written(sink, &output, &written).await;
                return Err(CommitError::from(e).into());
            }
        }
        // A pipeline's append took the version (read it and try the next one), or another
        // compaction did: when it replaced a file this one rewrote, this one ends.
        state = read_table(sink, &output, state).await?;
        if let Some(gone) = replaced.iter().find(|a| !state.files.contains_key(&a.path)) {
            remove_written(sink, &output, &written).await;
            return Err(CompactError::Concurrent {
                output,
                version: state.version.unwrap_or_default(),
                path: gone.path.clone(),
            });
        }
    }
}

/// Rewrite one group of `output`'s files as one file: its `add` (path relative to the table)
/// and its rows, which must be the group's.
async fn rewrite(
    sink: &Sink,
    output: &str,
    group: &[Add],
    properties: &parquet::file::properties::WriterProperties,
    now_ms: i64,
) -> Result<(Add, u64), CompactError> {
    let smalls: Vec<Small> = group
        .iter()
        .map(|add| Small {
            path: format!("{output}/{}", add.path),
            rows: compact::records(add),
        })
        .collect();
    let new = rewrite::rewrite(sink, output, &smalls, properties).await?;
    let relative = new.path[output.len() + 1..].to_owned();
    let add = Add {
        path: relative,
        partition_values: group[0].partition_values.clone(),
        size: new.size,
        modification_time: now_ms,
        data_change: false,
        stats: Some(format!("{{\"numRecords\":{}}}", new.rows)),
    };
    Ok((add, new.rows))
}

/// Delete the files of a compaction that did not commit.
async fn remove_written(sink: &Sink, output: &str, written: &[Add]) {
    let paths: Vec<String> = written
        .iter()
        .map(|a| format!("{output}/{}", a.path))
        .collect();
    rewrite::remove_written(sink, paths.iter().map(String::as_str)).await;
}

/// The outputs of the sink that are Delta tables (a folder with a `_delta_log`), by name.
pub async fn table_names(sink: &Sink) -> Result<Vec<String>, CommitError> {
    let mut names = Vec::new();
    for folder in sink.list_dir(None).await?.folders {
        if folder.starts_with(crate::lake::commit::STATE_PREFIX) {
            continue;
        }
        let inside = sink.list_dir(Some(&Path::from(folder.as_str()))).await?;
        if inside.folders.iter().any(|f| f == "_delta_log") {
            names.push(folder);
        }
    }
    names.sort();
    Ok(names)
}

/// Hold `output`'s table against the commit log: `entries` are the entries with files of the
/// output, each with its files' paths relative to the table (see [`audit::audit`]).
pub async fn audit_table(
    sink: &Sink,
    output: &str,
    app_id: &str,
    entries: &BTreeMap<u64, BTreeSet<String>>,
) -> Result<audit::TableAudit, CommitError> {
    let history = History::read(sink, output, app_id).await?;
    let live = history.state.files.keys().cloned().collect();
    Ok(audit::audit(
        output,
        history.log(),
        &live,
        &history.present,
        entries,
    ))
}

/// Hold `output`'s current-state table against the commit log, whose entries with files of
/// the output are `entries` (see [`audit::audit_mirror`]); `None` when it has none.
pub async fn audit_mirror_table(
    sink: &Sink,
    output: &str,
    app_id: &str,
    entries: &BTreeSet<u64>,
) -> Result<Option<audit::TableAudit>, CommitError> {
    let name = mirror_name(output);
    let history = History::read(sink, &name, app_id).await?;
    if history.listed.is_empty() && history.base.is_none() {
        return Ok(None);
    }
    let live = history.state.files.keys().cloned().collect();
    Ok(Some(audit::audit_mirror(
        &name,
        history.log(),
        &live,
        &history.present,
        entries,
    )))
}

/// A table's log as an audit reads it.
struct History {
    /// The versions whose commit files exist.
    listed: Vec<u64>,
    /// What each contiguous version from 0 (or from after `base`) did.
    read: Vec<audit::Version>,
    /// The checkpoint the read started from, when the commits before it are gone.
    base: Option<audit::Base>,
    /// The table after them.
    state: TableState,
    /// The data files in the table's folder (and its `_compacted/`), relative to it.
    present: BTreeSet<String>,
}

impl History {
    fn log(&self) -> audit::Log<'_> {
        audit::Log {
            versions: audit::Versions::Files(&self.listed),
            read: &self.read,
            base: self.base,
        }
    }

    async fn read(sink: &Sink, output: &str, app_id: &str) -> Result<History, CommitError> {
        let log_dir = Path::from(format!("{output}/_delta_log"));
        let mut listed: Vec<u64> = sink
            .list_names(&log_dir)
            .await?
            .iter()
            .filter_map(|n| n.strip_suffix(".json")?.parse().ok())
            .collect();
        listed.sort_unstable();
        // Every commit from version 0, or from the checkpoint on when the ones before it are
        // gone.
        let mut state = TableState::default();
        let mut base = None;
        if !listed.contains(&0)
            && let Some(at) = checkpointed(sink, output).await?
        {
            base = at.version.map(|version| audit::Base {
                version,
                txn: at.txn(app_id),
            });
            state = at;
        }
        let mut read = Vec::new();
        loop {
            let version = state.next_version();
            let path = commit_path(output, version);
            let Some(bytes) = sink.get(&path).await? else {
                break;
            };
            let corrupt = |reason: String| CommitError::Corrupt {
                path: path.to_string(),
                reason,
            };
            let actions = parse_commit(&bytes).map_err(corrupt)?;
            let mut seen = audit::Version {
                version,
                txn: None,
                adds: BTreeSet::new(),
            };
            for action in &actions {
                match action {
                    Action::Txn(t) if t.app_id == app_id => seen.txn = Some(t.version),
                    Action::Add(a) if a.data_change => {
                        seen.adds.insert(a.path.clone());
                    }
                    _ => {}
                }
            }
            state
                .apply(version, actions)
                .map_err(|e: TableError| corrupt(e.to_string()))?;
            read.push(seen);
        }
        // The data files matter only to a table a reader reads; an output without a table
        // (one that keeps no current-state table, say) costs no listing.
        let mut present = BTreeSet::new();
        if !state.files.is_empty() {
            for (name, _) in sink.list_dir(Some(&Path::from(output))).await?.objects {
                present.insert(name);
            }
            let compacted = Path::from(format!("{output}/{COMPACTED}"));
            for (name, _) in sink.list_dir(Some(&compacted)).await?.objects {
                present.insert(format!("{COMPACTED}/{name}"));
            }
        }
        Ok(History {
            listed,
            read,
            base,
            state,
            present,
        })
    }
}

/// `table` as of the first version that holds flush `txn` of `app_id` (or a later one);
/// `None` while no version does.
pub async fn read_table_holding(
    sink: &Sink,
    table: &str,
    app_id: &str,
    txn: u64,
) -> Result<Option<TableState>, CommitError> {
    let mut state = TableState::default();
    loop {
        if state.txn(app_id).is_some_and(|t| t >= txn) {
            return Ok(Some(state));
        }
        let version = state.next_version();
        let path = commit_path(table, version);
        let Some(bytes) = sink.get(&path).await? else {
            return Ok(None);
        };
        let corrupt = |reason: String| CommitError::Corrupt {
            path: path.to_string(),
            reason,
        };
        let actions = parse_commit(&bytes).map_err(corrupt)?;
        state
            .apply(version, actions)
            .map_err(|e: TableError| corrupt(e.to_string()))?;
    }
}

/// `output`'s table as its log is now, read from its latest checkpoint on (from version 0 when
/// it has none): what the pipeline, `status` and `compact` read, so a table with a long history
/// costs one checkpoint and fewer than [`checkpoint::CHECKPOINT_EVERY`] commits to open, not
/// every commit it ever had. (An audit and `vacuum` read every commit: they need each version,
/// and every removal, which a checkpoint keeps only within the retention.)
pub async fn read_latest(sink: &Sink, output: &str) -> Result<TableState, CommitError> {
    let from = checkpointed(sink, output).await?.unwrap_or_default();
    read_table(sink, output, from).await
}

/// The table at the checkpoint `_last_checkpoint` names; `None` when it names none. One that
/// cannot be read is told and passed over (the commits are replayed from version 0), unless
/// the commits before it are gone too.
pub async fn checkpointed(sink: &Sink, output: &str) -> Result<Option<TableState>, CommitError> {
    let last = last_checkpoint_path(output);
    let Some(pointer) = sink.get(&last).await? else {
        return Ok(None);
    };
    let version = match checkpoint::parse_last_checkpoint(&pointer) {
        Ok(version) => version,
        Err(reason) => return unreadable(sink, output, &last, reason).await,
    };
    let path = checkpoint_path(output, version);
    let Some(file) = sink.get(&path).await? else {
        return unreadable(sink, output, &path, "it is missing".into()).await;
    };
    let state = checkpoint::read(file)
        .and_then(|actions| TableState::checkpointed(version, actions).map_err(|e| e.to_string()));
    match state {
        Ok(state) => Ok(Some(state)),
        Err(reason) => unreadable(sink, output, &path, reason).await,
    }
}

/// A checkpoint that cannot be read: passed over when the commits from version 0 are there to
/// replay, an error when they are gone.
async fn unreadable(
    sink: &Sink,
    output: &str,
    path: &Path,
    reason: String,
) -> Result<Option<TableState>, CommitError> {
    if sink.get(&commit_path(output, 0)).await?.is_none() {
        return Err(CommitError::Corrupt {
            path: path.to_string(),
            reason: format!(
                "{reason}; the table's commits before it are gone, so nothing else says what the table holds"
            ),
        });
    }
    tracing::warn!(%output, checkpoint = %path, %reason, "could not read the Delta table's checkpoint; replaying its commits from version 0");
    Ok(None)
}

fn checkpoint_path(output: &str, version: u64) -> Path {
    Path::from(format!(
        "{output}/_delta_log/{version:020}.checkpoint.parquet"
    ))
}

fn last_checkpoint_path(output: &str) -> Path {
    Path::from(format!("{output}/_delta_log/_last_checkpoint"))
}

/// Read `output`'s log on from `state`: each next version until one is missing.
pub async fn read_table(
    sink: &Sink,
    output: &str,
    mut state: TableState,
) -> Result<TableState, CommitError> {
    loop {
        let version = state.next_version();
        let path = commit_path(output, version);
        let Some(bytes) = sink.get(&path).await? else {
            return Ok(state);
        };
        let corrupt = |reason: String| CommitError::Corrupt {
            path: path.to_string(),
            reason,
        };
        let actions = parse_commit(&bytes).map_err(corrupt)?;
        state
            .apply(version, actions)
            .map_err(|e: TableError| corrupt(e.to_string()))?;
    }
}

pub use crate::lake::tables::file::table_columns;

/// A random (version 4) UUID, the id a new table's metadata takes.
pub(super) fn new_table_id() -> String {
    rewrite::random_uuid()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::lake::tables::app_id;

    use arrow_schema::{DataType, Field, Schema};
    use object_store::memory::InMemory;

    use super::*;
    use crate::lake::tables::current::fixtures::{Change, changes};

    fn file(sequence: u64) -> TableFile {
        TableFile {
            output: "public.t".into(),
            path: format!("public.t/part-{sequence}.parquet"),
            size: 10,
            rows: 1,
            schema: Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)])),
            partition: None,
            footer: None,
        }
    }

    #[tokio::test]
    async fn appends_are_idempotent_per_flush_and_a_writer_behind_another_is_stopped() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let app = app_id("db", "slot");
        let first = Tables::new(sink.clone(), app.clone(), Writer::named("aaaa"));
        first.publish(1, &[file(1)]).await.unwrap();
        first.publish(1, &[file(1)]).await.unwrap();
        first.publish(2, &[file(2)]).await.unwrap();
        let state = read_table(&sink, "public.t", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.version, Some(1), "one version per flush");
        assert_eq!(state.txn(&app), Some(2));

        // A second instance, starting without a cache, catches up a flush already there and
        // appends the next one after the first instance's versions.
        let second = Tables::new(sink.clone(), app.clone(), Writer::named("bbbb"));
        second.publish(2, &[file(2)]).await.unwrap();
        second.publish(3, &[file(3)]).await.unwrap();
        second.publish(4, &[file(4)]).await.unwrap();
        // The first instance, fenced, had committed flush 3 to the commit log: the table holds
        // a later flush than that, so it stops instead of adding a version after them.
        let err = first.publish(3, &[file(3)]).await.unwrap_err();
        assert!(
            matches!(
                err,
                CommitError::TableAhead {
                    ours: 3,
                    theirs: 4,
                    ..
                }
            ),
            "{err}"
        );
        let state = read_table(&sink, "public.t", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.version, Some(3));
        assert_eq!(state.files.len(), 4);
        assert!(new_table_id().chars().nth(14) == Some('4'));
    }

    /// A table read from its latest checkpoint on is the table replayed from version 0. An
    /// unreadable checkpoint is passed over while the commits before it are there, and is an
    /// error naming it once they are gone; with them gone and the checkpoint sound, the table
    /// opens, takes appends after it, and its audit starts from the checkpoint.
    #[tokio::test]
    async fn a_table_opens_from_its_latest_checkpoint() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let app = app_id("db", "slot");
        let first = Tables::new(sink.clone(), app.clone(), Writer::named("aaaa"));
        for sequence in 1..=23 {
            first.publish(sequence, &[file(sequence)]).await.unwrap();
        }
        let replayed = read_table(&sink, "public.t", TableState::default())
            .await
            .unwrap();
        assert_eq!(replayed.version, Some(22));
        assert_eq!(read_latest(&sink, "public.t").await.unwrap(), replayed);
        let at_20 = checkpointed(&sink, "public.t").await.unwrap().unwrap();
        assert_eq!((at_20.version, at_20.txn(&app)), (Some(20), Some(21)));
        assert_eq!(at_20.files.len(), 21);

        let path = checkpoint_path("public.t", 20);
        sink.replace(&path, bytes::Bytes::from_static(b"not parquet"))
            .await
            .unwrap();
        assert_eq!(read_latest(&sink, "public.t").await.unwrap(), replayed);
        for version in 0..20 {
            sink.delete(&commit_path("public.t", version))
                .await
                .unwrap();
        }
        let err = read_latest(&sink, "public.t")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("00000000000000000020.checkpoint.parquet")
                && err.contains("commits before it are gone"),
            "{err}"
        );

        let (sound, _) = checkpoint::checkpoint(&at_20, 0);
        sink.replace(&path, sound).await.unwrap();
        assert_eq!(read_latest(&sink, "public.t").await.unwrap(), replayed);
        let second = Tables::new(sink.clone(), app.clone(), Writer::named("bbbb"));
        second.publish(23, &[file(23)]).await.unwrap();
        second.publish(24, &[file(24)]).await.unwrap();
        let latest = read_latest(&sink, "public.t").await.unwrap();
        assert_eq!((latest.version, latest.txn(&app)), (Some(23), Some(24)));
        assert_eq!(latest.files.len(), 24);

        for s in 1..=24 {
            let data = Path::from(format!("public.t/part-{s}.parquet"));
            sink.create(&data, bytes::Bytes::from_static(b"data"))
                .await
                .unwrap();
        }
        let entries = (1..=24)
            .map(|s| (s, BTreeSet::from([format!("part-{s}.parquet")])))
            .collect();
        let audit = audit_table(&sink, "public.t", &app, &entries)
            .await
            .unwrap();
        assert_eq!(audit.problems, Vec::<String>::new());
        assert_eq!((audit.base, audit.holds), (Some(20), Some(24)));
    }

    async fn txn(sink: &Sink) -> Option<u64> {
        read_table(sink, "public.t", TableState::default())
            .await
            .unwrap()
            .txn(&app_id("db", "slot"))
    }

    /// The writer before went on publishing entries its last entry did not count as
    /// published: the next start's catch-up finds the table past them and leaves it as it
    /// is, where a live writer meeting a later flush stops.
    #[tokio::test]
    async fn a_catch_up_leaves_a_table_that_holds_later_flushes_and_a_live_writer_stops() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let before = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("a"));
        for sequence in [2, 3] {
            before.publish(sequence, &[file(sequence)]).await.unwrap();
        }
        let next = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("b"));
        next.publish_as(2, &[file(2)], Later::Holds).await.unwrap();
        assert_eq!(txn(&sink).await, Some(3));
        assert!(
            sink.get(&commit_path("public.t", 2))
                .await
                .unwrap()
                .is_none()
        );

        let err = next.publish(2, &[file(2)]).await.unwrap_err();
        assert!(
            matches!(
                err,
                CommitError::TableAhead {
                    ours: 2,
                    theirs: 3,
                    ..
                }
            ),
            "{err}"
        );
        next.publish(4, &[file(4)]).await.unwrap();
        assert_eq!(txn(&sink).await, Some(4));
    }

    /// A Parquet file of `ids` at `public.t/part-<sequence>.parquet`, put in the sink.
    async fn landed(sink: &Sink, sequence: u64, ids: &[i64]) -> TableFile {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let batch = arrow_array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow_array::Int64Array::from(ids.to_vec()))],
        )
        .unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        let bytes = writer.into_inner().unwrap();
        let mut file = file(sequence);
        file.size = bytes.len() as u64;
        file.rows = ids.len() as u64;
        sink.create(&Path::from(file.path.as_str()), bytes.into())
            .await
            .unwrap();
        file
    }

    /// Two compactions planned against the same version, a pipeline appending between: the
    /// first to commit takes the version after the append; the other finds its files replaced,
    /// commits nothing and deletes what it wrote.
    #[tokio::test]
    async fn a_compaction_steps_over_an_append_and_a_concurrent_one_commits_nothing() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let tables = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("a"));
        for sequence in 1..=3 {
            let ids: Vec<i64> = (sequence as i64 * 10..sequence as i64 * 10 + 3).collect();
            let file = landed(&sink, sequence, &ids).await;
            tables.publish(sequence, &[file]).await.unwrap();
        }
        let properties = parquet::file::properties::WriterProperties::default();
        let first = rewrite_table(&sink, "public.t", 1 << 20, &properties)
            .await
            .unwrap();
        let second = rewrite_table(&sink, "public.t", 1 << 20, &properties)
            .await
            .unwrap();
        assert_eq!((first.replaced.len(), first.written.len()), (3, 1));
        let fourth = landed(&sink, 4, &[40]).await;
        tables.publish(4, &[fourth]).await.unwrap();

        let done = commit_rewrite(&sink, second).await.unwrap();
        assert_eq!((done.version, done.replaced, done.rows), (Some(4), 3, 9));
        let lost = first.written[0].path.clone();
        let err = commit_rewrite(&sink, first).await.unwrap_err();
        assert!(
            matches!(&err, CompactError::Concurrent { version: 4, .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("nothing of this compaction was committed")
        );
        let lost = Path::from(format!("public.t/{lost}"));
        assert!(
            sink.get(&lost).await.unwrap().is_none(),
            "its file is deleted"
        );

        let state = read_table(&sink, "public.t", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.version, Some(4));
        assert_eq!(state.txn(&app_id("db", "slot")), Some(4));
        let live: Vec<&String> = state.files.keys().collect();
        assert_eq!(
            live.len(),
            2,
            "the compacted file and the later append: {live:?}"
        );
        let compacted = state.files.values().find(|a| !a.data_change).unwrap();
        let bytes = sink
            .get(&Path::from(format!("public.t/{}", compacted.path)))
            .await
            .unwrap()
            .unwrap();
        let ids: Vec<i64> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                .unwrap()
                .build()
                .unwrap()
                .flat_map(|b| {
                    let b = b.unwrap();
                    let a = b
                        .column(0)
                        .as_any()
                        .downcast_ref::<arrow_array::Int64Array>()
                        .unwrap();
                    a.values().to_vec()
                })
                .collect();
        assert_eq!(ids, [10, 11, 12, 20, 21, 22, 30, 31, 32]);

        // A compacted file below the target is packed again with the files after it; then
        // one file is left, and nothing to compact.
        let again = compact_table(&sink, "public.t", 1 << 20, &properties)
            .await
            .unwrap();
        assert_eq!(
            (again.version, again.replaced, again.rows),
            (Some(5), 2, 10)
        );
        let last = compact_table(&sink, "public.t", 1 << 20, &properties)
            .await
            .unwrap();
        assert_eq!(last.version, None);
    }

    /// Inserts of rows 1 (`a`) and 2 (`b`).
    const A_AND_B: [Change<'static>; 2] = [
        ("insert", 1, None, Some("a"), false),
        ("insert", 2, None, Some("b"), false),
    ];

    /// Keep the current-state table of `public.t`, in files of up to 1 MiB.
    fn mirror_t() -> Mirrors {
        Mirrors {
            outputs: ["public.t".to_owned()].into(),
            properties: parquet::file::properties::WriterProperties::default(),
            target: 1 << 20,
            reload: None,
        }
    }

    /// `public.t__current` as `id -> v`, and how many files it has.
    async fn current(sink: &Sink) -> (BTreeMap<i64, Option<String>>, usize) {
        use arrow_array::Array;
        use arrow_array::cast::AsArray;
        let state = read_table(sink, "public.t__current", TableState::default())
            .await
            .unwrap();
        let mut rows = BTreeMap::new();
        for add in state.files.values() {
            let bytes = sink
                .get(&Path::from(format!("public.t__current/{}", add.path)))
                .await
                .unwrap()
                .unwrap();
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .unwrap()
                    .build()
                    .unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                let ids = batch.column_by_name("id").unwrap();
                let ids = ids.as_primitive::<arrow_array::types::Int64Type>();
                let vs = batch.column_by_name("v").unwrap().as_string::<i32>();
                for i in 0..batch.num_rows() {
                    let v = vs.is_valid(i).then(|| vs.value(i).to_owned());
                    assert!(rows.insert(ids.value(i), v).is_none(), "one row per key");
                }
            }
        }
        (rows, state.files.len())
    }

    fn text(pairs: &[(i64, &str)]) -> BTreeMap<i64, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (*k, Some((*v).to_owned())))
            .collect()
    }

    /// Flushes applied to a current-state table: inserts, an update that left its TOAST value
    /// out, a key change, a delete; a file its keys do not touch is not rewritten; a table
    /// turned on later is built from the whole change log.
    #[tokio::test]
    async fn a_current_state_table_follows_the_flushes_by_key() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let mirrors = mirror_t();
        let tables = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("a"))
            .with_mirrors(mirrors.clone());
        let one = changes(&sink, 1, &A_AND_B).await;
        tables.publish(1, &[one]).await.unwrap();
        let two = changes(
            &sink,
            2,
            &[
                ("insert", 10, None, Some("x"), false),
                ("insert", 11, None, Some("y"), false),
            ],
        )
        .await;
        tables.publish(2, &[two]).await.unwrap();
        assert_eq!(
            current(&sink).await,
            (text(&[(1, "a"), (2, "b"), (10, "x"), (11, "y")]), 2)
        );

        // Row 1's value is left out (unchanged TOAST) and its key becomes 3; row 2 goes.
        let three = changes(
            &sink,
            3,
            &[
                ("update", 3, Some(1), None, true),
                ("delete", 0, Some(2), None, false),
            ],
        )
        .await;
        tables.publish(3, &[three]).await.unwrap();
        let (rows, files) = current(&sink).await;
        assert_eq!(rows, text(&[(3, "a"), (10, "x"), (11, "y")]));
        assert_eq!(
            files, 2,
            "the file of keys 1 and 2 rewritten, that of 10 and 11 left"
        );
        let state = read_table(&sink, "public.t__current", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.txn(&app_id("db", "slot")), Some(3));
        assert!(
            state.files.values().any(|a| a
                .stats
                .as_deref()
                .is_some_and(|s| s.contains(r#""minValues":{"id":10}"#))),
            "files carry their key bounds: {:?}",
            state.files.values().map(|a| &a.stats).collect::<Vec<_>>()
        );
        // A flush applied again is left as it is.
        let again = changes(
            &sink,
            3,
            &[
                ("update", 3, Some(1), None, true),
                ("delete", 0, Some(2), None, false),
            ],
        )
        .await;
        tables.publish(3, &[again]).await.unwrap();
        assert_eq!(
            read_table(&sink, "public.t__current", TableState::default())
                .await
                .unwrap()
                .version,
            Some(2)
        );

        // Mirroring turned off for a flush, then on again at another instance's start: the
        // table is built again from the change log.
        let plain = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("b"));
        let four = changes(&sink, 4, &[("update", 10, None, Some("z"), false)]).await;
        plain.publish(4, &[four]).await.unwrap();
        let back = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("c"))
            .with_mirrors(mirrors);
        let five = changes(&sink, 5, &[("insert", 20, None, Some("q"), false)]).await;
        back.publish(5, &[five]).await.unwrap();
        let (rows, _) = current(&sink).await;
        assert_eq!(rows, text(&[(3, "a"), (10, "z"), (11, "y"), (20, "q")]));
        for (sequence, id) in [(6, 30), (7, 40)] {
            let flush = changes(&sink, sequence, &[("insert", id, None, Some("n"), false)]).await;
            back.publish(sequence, &[flush]).await.unwrap();
        }
        let (rows, files) = current(&sink).await;
        assert_eq!((rows.len(), files), (6, 3), "a file per flush of new keys");

        // Compaction merges the small files by key and keeps their bounds.
        let properties = parquet::file::properties::WriterProperties::default();
        let done = compact_table(&sink, "public.t__current", 1 << 20, &properties)
            .await
            .unwrap();
        assert_eq!((done.replaced, done.written, done.rows), (files, 1, 6));
        assert_eq!(current(&sink).await, (rows, 1));
        let state = read_table(&sink, "public.t__current", TableState::default())
            .await
            .unwrap();
        let stats = state.files.values().next().unwrap().stats.clone().unwrap();
        assert!(
            stats.contains(r#""minValues":{"id":3}"#) && stats.contains(r#""maxValues":{"id":40}"#),
            "{stats}"
        );
    }

    /// A current-state table that missed flushes while mirroring was off is built again even
    /// when the flush that meets it is in the change log already (a start's catch-up, an
    /// attempt whose reply was lost), and a compaction merged the missed flushes' files; one
    /// that missed nothing takes such a flush as it is, past a compaction of the change log.
    #[tokio::test]
    async fn a_current_state_table_that_missed_flushes_is_built_again_when_the_log_holds_the_flush()
    {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let mirrors = mirror_t();
        let app = app_id("db", "slot");
        let kept = Tables::new(sink.clone(), app.clone(), Writer::named("a"))
            .with_mirrors(mirrors.clone());
        let one = changes(&sink, 1, &A_AND_B).await;
        kept.publish(1, &[one]).await.unwrap();

        // Mirroring off: three flushes land in the change log only, and a compaction merges
        // their files with the first's. Then mirroring is on again and the last of them is
        // published once more: the change log holds it already.
        let plain = Tables::new(sink.clone(), app.clone(), Writer::named("b"));
        let two = changes(&sink, 2, &[("update", 1, None, Some("c"), false)]).await;
        plain.publish(2, &[two]).await.unwrap();
        let three = changes(
            &sink,
            3,
            &[
                ("delete", 0, Some(2), None, false),
                ("insert", 3, None, Some("d"), false),
            ],
        )
        .await;
        plain.publish(3, &[three]).await.unwrap();
        let four = changes(&sink, 4, &[("insert", 4, None, Some("e"), false)]).await;
        plain.publish(4, std::slice::from_ref(&four)).await.unwrap();
        let properties = parquet::file::properties::WriterProperties::default();
        let done = compact_table(&sink, "public.t", 1 << 20, &properties)
            .await
            .unwrap();
        assert_eq!((done.replaced, done.written), (4, 1));
        let back = Tables::new(sink.clone(), app.clone(), Writer::named("c"))
            .with_mirrors(mirrors.clone());
        back.publish(4, &[four]).await.unwrap();
        let (rows, files) = current(&sink).await;
        assert_eq!(
            rows,
            text(&[(1, "c"), (3, "d"), (4, "e")]),
            "built again from the change log"
        );
        assert_eq!(files, 1);

        // Kept from here on, with a compaction of the change log between two flushes: flush 6
        // reaches the change log alone, and published again it is applied as it is, adding a
        // file for its far key rather than building the table again.
        let five = changes(&sink, 5, &[("update", 4, None, Some("f"), false)]).await;
        back.publish(5, &[five]).await.unwrap();
        let done = compact_table(&sink, "public.t", 1 << 20, &properties)
            .await
            .unwrap();
        assert!(done.version.is_some());
        let six = changes(&sink, 6, &[("insert", 100, None, Some("g"), false)]).await;
        plain.publish(6, std::slice::from_ref(&six)).await.unwrap();
        let again =
            Tables::new(sink.clone(), app.clone(), Writer::named("d")).with_mirrors(mirrors);
        again.publish(6, &[six]).await.unwrap();
        let (rows, files) = current(&sink).await;
        assert_eq!(rows, text(&[(1, "c"), (3, "d"), (4, "f"), (100, "g")]));
        assert_eq!(files, 2, "flush 6 applied on its own");
        let state = read_table(&sink, "public.t__current", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.txn(&app), Some(6));
    }
}
