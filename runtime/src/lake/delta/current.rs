//! The current-state tables (`<output>__current`) of a sink, kept through the object store:
//! after a flush's files are in an output's change-log table, the same flush is applied to
//! its current-state table by copy-on-write ([`mirror`] plans it) in one Delta commit with the
//! same `txn` version. A table that does not exist yet, or that missed flushes (mirroring was
//! off meanwhile), is built from the whole change-log table instead.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
use object_store::path::Path;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;

use super::actions::{Action, Add, Remove, Txn, commit_file, parse_commit};
use super::mirror::{
    self, Bounds, Cell, Change, ChangeOp, Key, Keys, MirrorError, Net, Reduced, mirror_name,
};
use super::overtaken::{Seen, overtaken};
use super::state::{TableError, TableState, schema_actions};
use crate::lake::commit::CommitError;
use crate::lake::sink::{Created, Sink};
use crate::lake::tables::rewrite::{fit, merged_schema};
use crate::stream::load::LOAD_XID;

/// Most rows put into one Arrow batch while a file is written.
const CHUNK_ROWS: usize = 8192;

/// How the current-state tables are written.
#[derive(Clone)]
pub struct Mirrors {
    pub outputs: BTreeSet<String>,
    pub properties: WriterProperties,
    /// A file is cut once it reaches about this size.
    pub target: u64,
    /// Who to ask for an output's rows again when its table gains a column.
    pub reload: Option<Arc<dyn Reload>>,
}

pub use crate::lake::tables::file::{Asked, Reload};

/// The columns whose values some rows of the table being written have from no change: a
/// flush's columns the table held rows without, or (a build from the whole change log, in the
/// order it landed) the columns that came after rows were written without them.
fn arriving(rows: &Rows<'_>, state: &TableState, log_batches: &[RecordBatch]) -> Vec<String> {
    let mut held: Option<BTreeSet<String>> = match rows {
        Rows::Flush { .. } => match (&state.schema, state.files.is_empty()) {
            (Some(schema), false) => Some(schema.fields.iter().map(|f| f.name.clone()).collect()),
            _ => return Vec::new(),
        },
        Rows::Rebuild(_) => None,
    };
    let mut arriving = BTreeSet::new();
    for batch in log_batches.iter().filter(|b| b.num_rows() > 0) {
        let schema = mirror::mirror_schema(&batch.schema());
        let columns = schema.fields().iter().map(|f| f.name().clone());
        match &mut held {
            None => held = Some(columns.collect()),
            Some(held) => {
                for column in columns {
                    if !held.contains(&column) {
                        arriving.insert(column.clone());
                        held.insert(column);
                    }
                }
            }
        }
    }
    arriving.into_iter().collect()
}

/// What applying a flush to a current-state table writes: its commit's actions, and the new
/// files (deleted again when the commit loses its version); and the columns some of its rows
/// have no value of ([`Reload`]).
pub(super) struct Applied {
    pub actions: Vec<Action>,
    pub written: Vec<Path>,
    pub arriving: Vec<String>,
}

/// The rows to apply: one flush's files of the output, or (a new or stale current-state
/// table) every file of its change-log table.
pub(super) enum Rows<'a> {
    /// A flush's files; the change-log table holding them, which a load's chunk reads for
    /// the changes after its snapshot ([`overtaken`]).
    Flush {
        paths: &'a [&'a str],
        log: &'a TableState,
        seen: &'a Seen,
    },
    Rebuild(Vec<String>),
}

/// Plan and write the commit that applies `rows` (change-log files, paths relative to the
/// sink) to `output`'s current-state table in `state`, as transaction `txn` of `app_id`.
pub(super) async fn apply(
    sink: &Sink,
    mirrors: &Mirrors,
    output: &str,
    state: &TableState,
    rows: Rows<'_>,
    (app_id, txn): (&str, u64),
    now_ms: i64,
) -> Result<Applied, TableError> {
    let name = mirror_name(output);
    let Read {
        log_batches,
        keys,
        flush_schema,
        reduced,
        arriving,
    } = read(sink, output, state, &rows).await?;

    // The files the flush replaces: all of them when it rebuilds or truncates (but for the
    // rows a truncate keeps), else those whose key bounds may hold an affected key.
    let affected = reduced.affected();
    let emptied = matches!(rows, Rows::Rebuild(_)) || reduced.truncate;
    let sought = match emptied {
        true => &reduced.keep,
        false => &affected,
    };
    let touched: Vec<&Add> = match sought.is_empty() {
        true => Vec::new(),
        false => state
            .files
            .values()
            .filter(|a| Bounds::of(a, &keys).may_hold_any(sought))
            .collect(),
    };
    let FirstPass {
        mut schemas,
        found_rows,
        found_at,
        changed,
        mut kept,
    } = first_pass(sink, &name, &touched, &keys, sought, mirrors.target).await?;
    // The flush's columns first, so the positions the reduction used stay valid.
    schemas.insert(0, flush_schema);
    let schema = merged(schemas)?;
    let width = schema.fields().len();
    let fit_all = |batches: &[RecordBatch]| {
        batches
            .iter()
            .map(|b| fit(b, &schema))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| data(&name, e.to_string()))
    };
    // What every file written reads from: the flush's rows, then each touched file's found
    // rows.
    let mut base = fit_all(&log_batches)?;
    let found_source = base.len();
    base.extend(fit_all(&found_rows)?);
    drop((log_batches, found_rows));
    let found: BTreeMap<Key, (usize, Cell)> = found_at
        .into_iter()
        .map(|(key, (file, row))| (key, (file, (found_source + file, row))))
        .collect();

    let (mut homed, mut fresh) = home(reduced, &found, touched.len(), width);
    let null = null_row(&schema).map_err(|e| data(&name, e))?;

    let mut actions = vec![merge_info(output, txn, now_ms)];
    actions.extend(schema_actions(
        state,
        [&schema],
        now_ms,
        super::table::new_table_id,
    )?);
    let mut removed: Vec<&Add> = match emptied {
        true => state.files.values().collect(),
        false => Vec::new(),
    };
    let mut out = Written {
        sink,
        name: &name,
        mirrors,
        keys: &keys,
        schema: &schema,
        txn,
        now_ms,
        written: Vec::new(),
        adds: Vec::new(),
    };
    let result = async {
        // Second pass: each file that held a changed key, read again (or kept from the first
        // pass when small), is written anew with the rows it keeps and the upserts it homes.
        for (file, add) in touched.iter().enumerate() {
            if emptied || !changed.contains(&file) {
                continue;
            }
            removed.push(state.files.get(&add.path).expect("a touched file is live"));
            let path = format!("{name}/{}", add.path);
            let bytes = match kept.take(&path) {
                Some(bytes) => bytes,
                None => get_file(sink, &path).await?,
            };
            let (_, batches) = decode(&path, bytes)?;
            let mut sources = base.clone();
            let first = sources.len();
            sources.extend(fit_all(&batches)?);
            drop(batches);
            let null_source = sources.len();
            sources.push(null.clone());
            let mut rows = std::mem::take(&mut homed[file]);
            for (source, batch) in sources.iter().enumerate().take(null_source).skip(first) {
                let arrays = key_columns(batch, &keys, &name)?;
                let reader =
                    Keys::new(arrays.iter().collect()).map_err(|e| data(&name, e.to_string()))?;
                for row in 0..batch.num_rows() {
                    let key = reader.key(row);
                    if !affected.contains(&key) {
                        rows.push((key, whole_row((source, row), width)));
                    }
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            // A file that is rewritten keeps its rows together.
            out.write(&sources, null_source, &rows, std::iter::once(0..rows.len()))
                .await?;
        }
        // Rows of keys no file held: new files, split where keys lie far apart, so each
        // file's bounds stay narrow.
        if !fresh.is_empty() {
            let mut sources = base.clone();
            let null_source = sources.len();
            sources.push(null.clone());
            fresh.sort_by(|a, b| a.0.cmp(&b.0));
            let runs = mirror::runs(&fresh.iter().map(|(k, _)| k).collect::<Vec<_>>());
            out.write(&sources, null_source, &fresh, runs).await?;
        }
        Ok::<(), TableError>(())
    }
    .await;
    let Written { written, adds, .. } = out;
    if let Err(e) = result {
        delete_written(sink, &written).await;
        return Err(e);
    }
    actions.extend(closing(&removed, adds, (app_id, txn), now_ms));
    Ok(Applied {
        actions,
        written,
        arriving,
    })
}

/// One row of nulls in `schema`: where a cell with no value is taken from.
fn null_row(schema: &SchemaRef) -> Result<RecordBatch, String> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), 1))
        .collect();
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

/// The commit's `commitInfo`: a merge of `output`'s flush `txn`.
fn merge_info(output: &str, txn: u64, now_ms: i64) -> Action {
    Action::CommitInfo(serde_json::json!({
        "timestamp": now_ms,
        "operation": "MERGE",
        "operationParameters": { "source": output, "epochId": txn.to_string() },
        "isBlindAppend": false,
        "engineInfo": format!("tributary {}", env!("CARGO_PKG_VERSION")),
    }))
}

/// The commit's last actions: the files it replaces removed, the new ones added, and the
/// application's transaction version.
fn closing(
    removed: &[&Add],
    adds: Vec<Add>,
    (app_id, txn): (&str, u64),
    now_ms: i64,
) -> Vec<Action> {
    let mut actions: Vec<Action> = removed
        .iter()
        .map(|add| {
            Action::Remove(Remove {
                path: add.path.clone(),
                deletion_timestamp: Some(now_ms),
                data_change: true,
                size: Some(add.size),
            })
        })
        .collect();
    actions.extend(adds.into_iter().map(Action::Add));
    actions.push(Action::Txn(Txn {
        app_id: app_id.to_owned(),
        version: txn,
        last_updated: Some(now_ms),
    }));
    actions
}

/// The rows a commit applies, read from the change log and reduced to one net change per key.
struct Read {
    log_batches: Vec<RecordBatch>,
    keys: Vec<String>,
    /// Their columns, as the current-state table holds them.
    flush_schema: SchemaRef,
    reduced: Reduced,
    /// Columns some rows have no value of ([`Reload`]).
    arriving: Vec<String>,
}

async fn read(
    sink: &Sink,
    output: &str,
    state: &TableState,
    rows: &Rows<'_>,
) -> Result<Read, TableError> {
    let paths: Vec<String> = match rows {
        Rows::Flush { paths, .. } => paths.iter().map(|p| (*p).to_owned()).collect(),
        Rows::Rebuild(paths) => paths.clone(),
    };
    let mut log_batches = Vec::new();
    for path in &paths {
        log_batches.extend(read_batches(sink, path).await?);
    }
    let keys = log_batches
        .iter()
        .map(|b| mirror::key_names(&b.schema()))
        .find(|k| !k.is_empty())
        .ok_or(MirrorError::NoKey)?;
    let flush_schema = merged(
        log_batches
            .iter()
            .map(|b| mirror::mirror_schema(&b.schema())),
    )?;
    let width = flush_schema.fields().len();
    let arriving = arriving(rows, state, &log_batches);
    let logged = changes(&log_batches, &keys, &flush_schema)?;
    let snapshot = logged.iter().find(|l| l.load).map(|l| l.lsn);
    let changes = logged.into_iter().map(|l| l.change).collect();
    let reduced = match (rows, snapshot) {
        (Rows::Flush { log, seen, .. }, Some(snapshot)) => {
            overtaken(sink, output, log, snapshot, &keys, seen)
                .await?
                .reduce(changes, width)?
        }
        _ => mirror::reduce(changes, width)?,
    };
    Ok(Read {
        log_batches,
        keys,
        flush_schema,
        reduced,
        arriving,
    })
}

/// What the first pass found in the touched files: each one's columns and its rows of the
/// keys sought (where each key's row is: file, row among them), the files that held one, and
/// their bytes when small.
struct FirstPass {
    schemas: Vec<SchemaRef>,
    found_rows: Vec<RecordBatch>,
    found_at: BTreeMap<Key, (usize, usize)>,
    changed: BTreeSet<usize>,
    kept: KeptBytes,
}

/// First pass, one touched file at a time: its columns, and its rows of the keys `sought`,
/// the only rows of it kept (each a row to drop, the prior row whose unchanged TOAST values a
/// key change carries over, or a row a truncate keeps). The files that held such a row are
/// written anew in the second pass, so a flush holds its own rows, those rows, and one file.
async fn first_pass(
    sink: &Sink,
    name: &str,
    touched: &[&Add],
    keys: &[String],
    sought: &BTreeSet<Key>,
    target: u64,
) -> Result<FirstPass, TableError> {
    let mut pass = FirstPass {
        schemas: Vec::new(),
        found_rows: Vec::new(),
        found_at: BTreeMap::new(),
        changed: BTreeSet::new(),
        kept: KeptBytes::within(target),
    };
    for (index, add) in touched.iter().enumerate() {
        let path = format!("{name}/{}", add.path);
        let bytes = get_file(sink, &path).await?;
        let (file_schema, batches) = decode(&path, bytes.clone())?;
        let mut picks = Vec::new();
        for (b, batch) in batches.iter().enumerate() {
            let arrays = key_columns(batch, keys, name)?;
            let reader =
                Keys::new(arrays.iter().collect()).map_err(|e| data(name, e.to_string()))?;
            for row in 0..batch.num_rows() {
                let key = reader.key(row);
                if sought.contains(&key) {
                    pass.found_at.insert(key, (index, picks.len()));
                    picks.push((b, row));
                }
            }
        }
        let batches: Vec<&RecordBatch> = batches.iter().collect();
        let rows = match picks.is_empty() {
            true => RecordBatch::new_empty(file_schema.clone()),
            false => arrow_select::interleave::interleave_record_batch(&batches, &picks)
                .map_err(|e| data(&path, e.to_string()))?,
        };
        if !picks.is_empty() {
            pass.changed.insert(index);
            pass.kept.keep(path, bytes);
        }
        pass.found_rows.push(rows);
        pass.schemas.push(file_schema);
    }
    Ok(pass)
}

/// A row to write: its key, and where each of its `width` cells comes from.
type Row = (Key, Vec<Option<Cell>>);

/// Where each upsert of `reduced` goes: to the touched file that held its key (or its prior
/// key, `found`), or to a new file; a row a truncate keeps (every file goes) to a new file.
fn home(
    reduced: Reduced,
    found: &BTreeMap<Key, (usize, Cell)>,
    touched: usize,
    width: usize,
) -> (Vec<Vec<Row>>, Vec<Row>) {
    let mut homed: Vec<Vec<Row>> = vec![Vec::new(); touched];
    let mut fresh = Vec::new();
    let Reduced { net, keep, .. } = reduced;
    for key in keep {
        if let Some(&(_, cell)) = found.get(&key) {
            fresh.push((key, whole_row(cell, width)));
        }
    }
    for (key, net) in net {
        let Net::Upsert(upsert) = net else { continue };
        let mut cells = upsert.cells;
        cells.resize(width, None);
        let mut home = found.get(&key).map(|(file, _)| *file);
        if let Some((prior, columns)) = &upsert.prior {
            let before = found.get(prior);
            for &c in columns {
                cells[c] = before.map(|(_, cell)| *cell);
            }
            home = home.or(before.map(|(file, _)| *file));
        }
        match home {
            Some(file) => homed[file].push((key, cells)),
            None => fresh.push((key, cells)),
        }
    }
    (homed, fresh)
}

/// Where the files of one current-state commit go, and what it wrote.
struct Written<'a> {
    sink: &'a Sink,
    name: &'a str,
    mirrors: &'a Mirrors,
    keys: &'a [String],
    schema: &'a SchemaRef,
    txn: u64,
    now_ms: i64,
    /// The new files, deleted again when the commit does not happen.
    written: Vec<Path>,
    adds: Vec<Add>,
}

impl Written<'_> {
    /// Write each run of `rows` (sorted by key, their cells in `sources`) as files of about
    /// the target size.
    async fn write(
        &mut self,
        sources: &[RecordBatch],
        null_source: usize,
        rows: &[(Key, Vec<Option<Cell>>)],
        runs: impl IntoIterator<Item = std::ops::Range<usize>>,
    ) -> Result<(), TableError> {
        for run in runs {
            let files = write_rows(
                sources,
                self.schema,
                &rows[run],
                self.keys,
                null_source,
                (&self.mirrors.properties, self.mirrors.target),
            )
            .map_err(|e| data(self.name, e))?;
            for (bytes, stats) in files {
                let relative = format!(
                    "part-{:020}-{}.parquet",
                    self.txn,
                    super::table::new_table_id()
                );
                let path = Path::from(format!("{}/{relative}", self.name));
                let size = bytes.len() as u64;
                self.sink
                    .create(&path, bytes)
                    .await
                    .map_err(|e| data(self.name, e.to_string()))?;
                self.written.push(path);
                self.adds.push(Add {
                    path: relative,
                    partition_values: BTreeMap::new(),
                    size,
                    modification_time: self.now_ms,
                    data_change: true,
                    stats: Some(stats),
                });
            }
        }
        Ok(())
    }
}

/// The bytes of touched files the first pass keeps for the second, within a budget (the
/// target file size): a flush that rewrites a few small files gets each once, one that
/// rewrites many gets them again rather than hold them all.
struct KeptBytes {
    budget: u64,
    files: BTreeMap<String, Bytes>,
}

impl KeptBytes {
    fn within(budget: u64) -> KeptBytes {
        KeptBytes {
            budget,
            files: BTreeMap::new(),
        }
    }

    fn keep(&mut self, path: String, bytes: Bytes) {
        let size = bytes.len() as u64;
        if size <= self.budget {
            self.budget -= size;
            self.files.insert(path, bytes);
        }
    }

    fn take(&mut self, path: &str) -> Option<Bytes> {
        self.files.remove(path)
    }
}

pub(super) fn whole_row(cell: Cell, width: usize) -> Vec<Option<Cell>> {
    vec![Some(cell); width]
}

pub(super) fn data(path: &str, reason: String) -> TableError {
    TableError::Data {
        path: path.to_owned(),
        reason,
    }
}

fn merged(schemas: impl IntoIterator<Item = SchemaRef>) -> Result<SchemaRef, TableError> {
    let schemas: Vec<SchemaRef> = schemas.into_iter().collect();
    merged_schema(&schemas).map_err(|e| data("", e.to_string()))
}

/// The key columns of `batch`.
pub(super) fn key_columns(
    batch: &RecordBatch,
    keys: &[String],
    table: &str,
) -> Result<Vec<ArrayRef>, TableError> {
    keys.iter()
        .map(|k| {
            batch
                .column_by_name(k)
                .cloned()
                .ok_or_else(|| data(table, format!("a file lacks the key column {k}")))
        })
        .collect()
}

/// A change as the change log holds it: where it was committed, and whether a load read it
/// (a load's rows and its marker have `_xid` 0 and the snapshot's position).
pub(super) struct Logged {
    pub change: Change,
    pub lsn: u64,
    pub load: bool,
}

/// The changes of the change-log `batches`, in change order: `(_commit_lsn, _seq, _sub)`.
/// A load's marker (`_op = "load"`) empties the table, as it tells a reader of the log to.
pub(super) fn changes(
    batches: &[RecordBatch],
    keys: &[String],
    schema: &SchemaRef,
) -> Result<Vec<Logged>, TableError> {
    let mut changes = Vec::new();
    let mut order = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let bad = |reason: String| data("a change-log file", reason);
        let column = |name: &str| -> Result<ArrayRef, TableError> {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| bad(format!("it has no {name} column")))
        };
        let ops =
            arrow_cast::cast(&column("_op")?, &DataType::Utf8).map_err(|e| bad(e.to_string()))?;
        let ops = ops.as_string::<i32>();
        let long = |name: &str| -> Result<Option<ArrayRef>, TableError> {
            batch
                .column_by_name(name)
                .map(|c| arrow_cast::cast(c, &DataType::Int64).map_err(|e| bad(e.to_string())))
                .transpose()
        };
        let lsn = long("_commit_lsn")?.ok_or_else(|| bad("it has no _commit_lsn column".into()))?;
        let seq = long("_seq")?.ok_or_else(|| bad("it has no _seq column".into()))?;
        let sub = long("_sub")?;
        let xid = long("_xid")?;
        let xid = xid.as_ref().map(|x| x.as_primitive::<Int64Type>());
        let (lsn, seq) = (
            lsn.as_primitive::<Int64Type>(),
            seq.as_primitive::<Int64Type>(),
        );
        let sub = sub.as_ref().map(|s| s.as_primitive::<Int64Type>());
        let new_keys = key_columns(batch, keys, "a change-log file")?;
        let new_keys = Keys::new(new_keys.iter().collect()).map_err(|e| bad(e.to_string()))?;
        let old = batch.column_by_name("_old").map(|o| o.as_struct());
        let old_arrays: Option<Vec<ArrayRef>> =
            old.and_then(|o| keys.iter().map(|k| o.column_by_name(k).cloned()).collect());
        let old_keys = match &old_arrays {
            Some(a) => Some(Keys::new(a.iter().collect()).map_err(|e| bad(e.to_string()))?),
            None => None,
        };
        let toast = batch
            .column_by_name("_unchanged_toast")
            .map(|t| t.as_list::<i32>());
        for row in 0..batch.num_rows() {
            let op = match ops.value(row) {
                "insert" => ChangeOp::Insert,
                "update" => ChangeOp::Update,
                "delete" => ChangeOp::Delete,
                "truncate" | "load" => ChangeOp::Truncate,
                other => return Err(bad(format!("a change of kind {other:?}"))),
            };
            let old_key = match (old, &old_keys) {
                (Some(o), Some(k)) if o.is_valid(row) => Some(k.key(row)),
                _ => None,
            };
            let unchanged = match toast {
                Some(t) if t.is_valid(row) => {
                    let names = t.value(row);
                    let names = names.as_string::<i32>();
                    (0..names.len())
                        .filter_map(|i| schema.index_of(names.value(i)).ok())
                        .collect()
                }
                _ => Vec::new(),
            };
            let key = matches!(op, ChangeOp::Insert | ChangeOp::Update).then(|| new_keys.key(row));
            order.push((
                lsn.value(row),
                seq.value(row),
                sub.map_or(0, |s| s.value(row)),
                changes.len(),
            ));
            changes.push(Logged {
                change: Change {
                    op,
                    key,
                    old_key,
                    unchanged,
                    at: (b, row),
                },
                lsn: lsn.value(row) as u64,
                load: xid.is_some_and(|x| x.value(row) == i64::from(LOAD_XID)),
            });
        }
    }
    order.sort_unstable();
    let mut slots: Vec<Option<Logged>> = changes.into_iter().map(Some).collect();
    Ok(order
        .into_iter()
        .map(|(.., i)| slots[i].take().expect("each change once"))
        .collect())
}

/// Write `rows` (sorted by key) as Parquet files of about the target size: each file's bytes
/// and statistics.
pub(super) fn write_rows(
    sources: &[RecordBatch],
    schema: &SchemaRef,
    rows: &[(Key, Vec<Option<Cell>>)],
    keys: &[String],
    null_source: usize,
    (properties, target): (&WriterProperties, u64),
) -> Result<Vec<(Bytes, String)>, String> {
    let mut files = Vec::new();
    let arrays: Vec<Vec<&dyn Array>> = (0..schema.fields().len())
        .map(|c| sources.iter().map(|b| b.column(c).as_ref()).collect())
        .collect();
    let mut start = 0;
    while start < rows.len() {
        let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties.clone()))
            .map_err(|e| e.to_string())?;
        let mut end = start;
        while end < rows.len() {
            let chunk = &rows[end..rows.len().min(end + CHUNK_ROWS)];
            let columns = (0..schema.fields().len())
                .map(|c| {
                    let picks: Vec<(usize, usize)> = chunk
                        .iter()
                        .map(|(_, cells)| cells[c].unwrap_or((null_source, 0)))
                        .collect();
                    arrow_select::interleave::interleave(&arrays[c], &picks)
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())?;
            writer.write(&batch).map_err(|e| e.to_string())?;
            end += chunk.len();
            if writer.bytes_written() as u64 + writer.in_progress_size() as u64 >= target {
                break;
            }
        }
        let bytes = writer.into_inner().map_err(|e| e.to_string())?;
        let stats = mirror::stats(keys, rows[start..end].iter().map(|(k, _)| k));
        files.push((Bytes::from(bytes), stats));
        start = end;
    }
    Ok(files)
}

/// The record batches of the Parquet file at `path` (relative to the sink).
pub(super) async fn read_batches(sink: &Sink, path: &str) -> Result<Vec<RecordBatch>, TableError> {
    let bytes = get_file(sink, path).await?;
    Ok(decode(path, bytes)?.1)
}

/// The bytes of the file at `path` (relative to the sink), which a table reads.
async fn get_file(sink: &Sink, path: &str) -> Result<Bytes, TableError> {
    sink.get(&Path::from(path))
        .await
        .map_err(|e| data(path, e.to_string()))?
        .ok_or_else(|| data(path, "a file the table reads is not in the sink".into()))
}

/// The schema and record batches of the Parquet file `bytes` (at `path`).
fn decode(path: &str, bytes: Bytes) -> Result<(SchemaRef, Vec<RecordBatch>), TableError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| data(path, format!("not readable as Parquet: {e}")))?;
    let schema = builder.schema().clone();
    let batches = builder
        .build()
        .map_err(|e| data(path, format!("not readable as Parquet: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| data(path, e.to_string()))?;
    Ok((schema, batches))
}

pub(super) async fn delete_written(sink: &Sink, written: &[Path]) {
    for path in written {
        if let Err(e) = sink.delete(path).await {
            tracing::warn!(%path, error = %e, "could not delete a file of a current-state commit that did not happen; no table reads it");
        }
    }
}

/// Commit `applied` at `state`'s next version of `output`'s current-state table: whether it
/// took the version.
pub(super) async fn commit(
    sink: &Sink,
    output: &str,
    state: &mut TableState,
    applied: Applied,
) -> Result<bool, CommitError> {
    let name = mirror_name(output);
    let version = state.next_version();
    let path = super::table::commit_path(&name, version);
    match sink.create(&path, commit_file(&applied.actions)).await {
        Ok(Created::New) => {
            state
                .apply(version, applied.actions)
                .map_err(|e| CommitError::Corrupt {
                    path: path.to_string(),
                    reason: e.to_string(),
                })?;
            Ok(true)
        }
        Ok(Created::Existed) => {
            delete_written(sink, &applied.written).await;
            Ok(false)
        }
        Err(e) => {
            delete_written(sink, &applied.written).await;
            Err(e.into())
        }
    }
}

/// The flush of the pipeline a change-log table held before a given flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Preceding {
    /// This flush (`None`: none; the given flush is the table's first).
    Flush(Option<u64>),
    /// The commit at this version, which the walk back needed, is gone (another tool cleaned
    /// the log up).
    Gone(u64),
}

impl Preceding {
    /// Why a current-state table whose `txn` is `held` is built again rather than take the
    /// given flush alone: it missed flushes of the change log before it, or that cannot be
    /// told. `None`: it missed none.
    pub fn missed_by(self, held: Option<u64>) -> Option<String> {
        match self {
            Preceding::Flush(Some(before)) if held < Some(before) => Some(format!(
                "it holds flush {} and the change log held flush {before} before this one: it missed flushes while mirroring was off",
                held.map_or("none".to_owned(), |h| h.to_string())
            )),
            Preceding::Flush(_) => None,
            Preceding::Gone(version) => Some(format!(
                "whether it missed flushes cannot be told: version {version} of the change log, which would say, is gone"
            )),
        }
    }
}

/// The flush of app `app_id` that `output`'s change-log table (`log`, as read after it held
/// flush `sequence`) held before `sequence`: the `txn` of the latest commit with one below
/// `sequence`. Each flush of the output is one commit of the change log whose `txn` version
/// is the flush, appended in flush order; a compaction's commit carries no `txn` and changes
/// no rows, so it is passed over, whichever files it merged. The commits are read from the
/// latest back, one read each: the flushes after `sequence` (a catch-up meets those), the flush
/// itself, the compactions since the flush before, and that one.
pub(super) async fn preceding_flush(
    sink: &Sink,
    output: &str,
    log: &TableState,
    app_id: &str,
    sequence: u64,
) -> Result<Preceding, CommitError> {
    let Some(latest) = log.version else {
        return Ok(Preceding::Flush(None));
    };
    for version in (0..=latest).rev() {
        let path = super::table::commit_path(output, version);
        let Some(bytes) = sink.get(&path).await? else {
            return Ok(Preceding::Gone(version));
        };
        let actions = parse_commit(&bytes).map_err(|reason| CommitError::Corrupt {
            path: path.to_string(),
            reason,
        })?;
        let flush = actions.iter().find_map(|a| match a {
            Action::Txn(t) if t.app_id == app_id => Some(t.version),
            _ => None,
        });
        if let Some(flush) = flush.filter(|&f| f < sequence) {
            return Ok(Preceding::Flush(Some(flush)));
        }
    }
    Ok(Preceding::Flush(None))
}

/// The sink paths of every file a change-log table's reader reads, oldest first.
pub(super) fn log_files(output: &str, log: &TableState) -> Vec<String> {
    let mut files: Vec<&Add> = log.files.values().collect();
    files.sort_by(|a, b| (a.modification_time, &a.path).cmp(&(b.modification_time, &b.path)));
    files
        .into_iter()
        .map(|a| format!("{output}/{}", a.path))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::lake::delta::table::commit_path;

    /// A change log whose commits carry these `txn` versions of app `a` (`None`: a
    /// compaction's commit), and its state.
    async fn log_of(sink: &Sink, txns: &[Option<u64>]) -> TableState {
        let mut state = TableState::default();
        for (version, txn) in txns.iter().enumerate() {
            let actions: Vec<Action> = match txn {
                Some(txn) => vec![Action::Txn(Txn {
                    app_id: "a".into(),
                    version: *txn,
                    last_updated: None,
                })],
                None => vec![Action::CommitInfo(
                    serde_json::json!({"operation": "OPTIMIZE"}),
                )],
            };
            let path = commit_path("public.t", version as u64);
            sink.create(&path, commit_file(&actions)).await.unwrap();
            state.apply(version as u64, actions).unwrap();
        }
        state
    }

    /// The flush before a given one is the latest `txn` below it, compactions passed over;
    /// a commit the walk needs that is gone leaves it untold, and the table is built again.
    #[tokio::test]
    async fn the_flush_before_is_read_back_from_the_change_logs_commits() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let log = log_of(&sink, &[Some(1), Some(4), None, None, Some(6), Some(9)]).await;
        let before = |sequence| preceding_flush(&sink, "public.t", &log, "a", sequence);
        assert_eq!(before(9).await.unwrap(), Preceding::Flush(Some(6)));
        assert_eq!(
            before(6).await.unwrap(),
            Preceding::Flush(Some(4)),
            "past two compactions, and a later flush (a catch-up's)"
        );
        assert_eq!(before(1).await.unwrap(), Preceding::Flush(None));
        assert_eq!(
            preceding_flush(&sink, "public.t", &log, "b", 9)
                .await
                .unwrap(),
            Preceding::Flush(None),
            "another app's flushes are not this one's"
        );

        sink.delete(&commit_path("public.t", 1)).await.unwrap();
        assert_eq!(before(9).await.unwrap(), Preceding::Flush(Some(6)));
        assert_eq!(before(6).await.unwrap(), Preceding::Gone(1));

        assert_eq!(Preceding::Flush(Some(6)).missed_by(Some(6)), None);
        assert_eq!(Preceding::Flush(None).missed_by(None), None);
        let missed = Preceding::Flush(Some(6)).missed_by(Some(1)).unwrap();
        assert!(
            missed.contains("it holds flush 1 and the change log held flush 6 before this one"),
            "{missed}"
        );
        assert!(Preceding::Flush(Some(6)).missed_by(None).is_some());
        let untold = Preceding::Gone(1).missed_by(Some(6)).unwrap();
        assert!(
            untold.contains("version 1 of the change log, which would say, is gone"),
            "{untold}"
        );
    }
}
