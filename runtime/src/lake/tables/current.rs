//! A current-state table's files, rewritten for a flush through the object store, whatever
//! the table's format: the flush's change-log files read and reduced to one net change per key
//! ([`keyed`] plans it), the table's files whose key bounds may hold a changed key read and
//! written anew without the rows the flush replaces, and new keys written to new files. Each
//! format lists its live files with their bounds and commits the files removed and added
//! (Delta in one commit with the change log's `txn` version, Iceberg as one `overwrite`
//! snapshot carrying the pipeline's position).

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

pub use super::file::{Asked, Reload};
use super::keyed::{
    self, Bounds, Cell, Change, ChangeOp, Key, KeyStats, Keys, MirrorError, Net, Reduced, fit,
    merged_schema,
};
use crate::lake::sink::Sink;
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

/// A live file of a current-state table: its path relative to the table, its size, and the
/// bounds its format's statistics give its key columns.
#[derive(Debug, Clone)]
pub struct Live {
    pub path: String,
    pub size: u64,
    pub bounds: Bounds,
}

/// A file a rewrite wrote: its path relative to the table, its size, its keys' statistics
/// and its encoded Parquet footer.
#[derive(Debug, Clone)]
pub struct NewFile {
    pub path: String,
    pub size: u64,
    pub stats: KeyStats,
    pub footer: Option<Bytes>,
}

/// A flush's rows of an output (or every row of its change log), as its change-log files
/// hold them.
pub struct Flush {
    pub batches: Vec<RecordBatch>,
    /// The key columns, as the files mark them.
    pub keys: Vec<String>,
    /// The rows' columns as the current-state table holds them.
    pub schema: SchemaRef,
    logged: Vec<Logged>,
}

impl Flush {
    /// Read the change-log files at `paths` (relative to the sink), in the order given.
    pub async fn read(sink: &Sink, paths: &[String]) -> Result<Flush, MirrorError> {
        let mut batches = Vec::new();
        for path in paths {
            batches.extend(read_batches(sink, path).await?);
        }
        let keys = batches
            .iter()
            .map(|b| keyed::key_names(&b.schema()))
            .find(|k| !k.is_empty())
            .ok_or(MirrorError::NoKey)?;
        let schema = merged(batches.iter().map(|b| keyed::mirror_schema(&b.schema())))?;
        let logged = changes(&batches, &keys, &schema)?;
        Ok(Flush {
            batches,
            keys,
            schema,
            logged,
        })
    }

    /// The snapshot position of a load whose rows the flush holds, if it holds some.
    pub fn snapshot(&self) -> Option<u64> {
        self.logged.iter().find(|l| l.load).map(|l| l.lsn)
    }

    /// The number of the rows' columns.
    pub fn width(&self) -> usize {
        self.schema.fields().len()
    }

    /// The changes, in change order (taken: a second call has none).
    pub fn changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.logged)
            .into_iter()
            .map(|l| l.change)
            .collect()
    }

    /// The columns whose values some rows of the table written have from no change: the
    /// columns a table that holds rows with the columns `held` does not have yet, or (a
    /// build from the whole change log, `held` being `None`) the columns that came after rows
    /// were written without them, in the order the files are given.
    pub fn arriving(&self, held: Option<BTreeSet<String>>, rebuild: bool) -> Vec<String> {
        if held.is_none() && !rebuild {
            return Vec::new();
        }
        let mut held = held;
        let mut arriving = BTreeSet::new();
        for batch in self.batches.iter().filter(|b| b.num_rows() > 0) {
            let schema = keyed::mirror_schema(&batch.schema());
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
}

/// Where a rewrite writes: the table (`name`, its folder in the sink), the folder its new
/// files go in within it (`""`, or `"data/"`), how files are written, and the flush.
pub struct Target<'a> {
    pub sink: &'a Sink,
    pub name: &'a str,
    pub folder: &'a str,
    pub mirrors: &'a Mirrors,
    pub sequence: u64,
}

/// What applying a flush to a current-state table does to its files: the schema the written
/// files have, which of its live files it removes (by index), and the files written, which
/// the format commits (and deletes again, `written`, when the commit does not happen).
pub struct Rewrite {
    pub schema: SchemaRef,
    pub removed: Vec<usize>,
    pub added: Vec<NewFile>,
    pub written: Vec<Path>,
}

/// Rewrite the files of table `target.name` (whose live files are `live`) for `flush`,
/// reduced to `reduced`; `rebuild`: the flush is the whole change log, and every file goes.
/// Files written before a failure are deleted again.
pub async fn rewrite(
    target: &Target<'_>,
    live: &[Live],
    flush: Flush,
    reduced: Reduced,
    rebuild: bool,
) -> Result<Rewrite, MirrorError> {
    let name = target.name;
    let Flush {
        batches: log_batches,
        keys,
        schema: flush_schema,
        ..
    } = flush;
    // The files the flush replaces: all of them when it rebuilds or truncates (but for the
    // rows a truncate keeps), else those whose key bounds may hold an affected key.
    let affected = reduced.affected();
    let emptied = rebuild || reduced.truncate;
    let sought = match emptied {
        true => &reduced.keep,
        false => &affected,
    };
    let touched: Vec<usize> = match sought.is_empty() {
        true => Vec::new(),
        false => (0..live.len())
            .filter(|&i| live[i].bounds.may_hold_any(sought))
            .collect(),
    };
    let touched_files: Vec<&Live> = touched.iter().map(|&i| &live[i]).collect();
    let FirstPass {
        mut schemas,
        found_rows,
        found_at,
        changed,
        kept,
    } = first_pass(target, &touched_files, &keys, sought).await?;
    // The flush's columns first, so the positions the reduction used stay valid.
    schemas.insert(0, flush_schema);
    let schema = merged(schemas)?;
    let width = schema.fields().len();
    // What every file written reads from: the flush's rows, then each touched file's found
    // rows.
    let mut base = fit_all(&log_batches, &schema, name)?;
    let found_source = base.len();
    base.extend(fit_all(&found_rows, &schema, name)?);
    drop((log_batches, found_rows));
    let found: BTreeMap<Key, (usize, Cell)> = found_at
        .into_iter()
        .map(|(key, (file, row))| (key, (file, (found_source + file, row))))
        .collect();
    let (homed, fresh) = home(reduced, &found, touched.len(), width);
    let null = null_row(&schema).map_err(|e| data(name, e))?;
    let removed = match emptied {
        true => (0..live.len()).collect(),
        false => changed.iter().map(|&t| touched[t]).collect(),
    };
    let mut out = Written {
        target,
        keys: &keys,
        schema: &schema,
        written: Vec::new(),
        added: Vec::new(),
    };
    let pass = SecondPass {
        touched: &touched_files,
        changed: match emptied {
            true => BTreeSet::new(),
            false => changed,
        },
        kept,
        affected: &affected,
        base: &base,
        null: &null,
    };
    let result = pass.write(&mut out, homed, fresh).await;
    let Written { written, added, .. } = out;
    if let Err(e) = result {
        delete_written(target.sink, &written).await;
        return Err(e);
    }
    Ok(Rewrite {
        schema,
        removed,
        added,
        written,
    })
}

fn fit_all(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    name: &str,
) -> Result<Vec<RecordBatch>, MirrorError> {
    batches
        .iter()
        .map(|b| fit(b, schema))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| data(name, e.to_string()))
}

/// The second pass of a rewrite: each touched file that held a changed key, read again (or
/// kept from the first pass when small), is written anew with the rows it keeps and the
/// upserts it homes; then the rows of keys no file held.
struct SecondPass<'a> {
    touched: &'a [&'a Live],
    changed: BTreeSet<usize>,
    kept: KeptBytes,
    affected: &'a BTreeSet<Key>,
    base: &'a [RecordBatch],
    null: &'a RecordBatch,
}

impl SecondPass<'_> {
    async fn write(
        mut self,
        out: &mut Written<'_>,
        mut homed: Vec<Vec<Row>>,
        mut fresh: Vec<Row>,
    ) -> Result<(), MirrorError> {
        let (sink, name) = (out.target.sink, out.target.name);
        let width = out.schema.fields().len();
        for (file, live) in self.touched.iter().enumerate() {
            if !self.changed.contains(&file) {
                continue;
            }
            let path = format!("{name}/{}", live.path);
            let bytes = match self.kept.take(&path) {
                Some(bytes) => bytes,
                None => get_file(sink, &path).await?,
            };
            let (_, batches) = decode(&path, bytes)?;
            let mut sources = self.base.to_vec();
            let first = sources.len();
            sources.extend(fit_all(&batches, out.schema, name)?);
            drop(batches);
            let null_source = sources.len();
            sources.push(self.null.clone());
            let mut rows = std::mem::take(&mut homed[file]);
            for (source, batch) in sources.iter().enumerate().take(null_source).skip(first) {
                let arrays = key_columns(batch, out.keys, name)?;
                let reader =
                    Keys::new(arrays.iter().collect()).map_err(|e| data(name, e.to_string()))?;
                for row in 0..batch.num_rows() {
                    let key = reader.key(row);
                    if !self.affected.contains(&key) {
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
            let mut sources = self.base.to_vec();
            let null_source = sources.len();
            sources.push(self.null.clone());
            fresh.sort_by(|a, b| a.0.cmp(&b.0));
            let runs = keyed::runs(&fresh.iter().map(|(k, _)| k).collect::<Vec<_>>());
            out.write(&sources, null_source, &fresh, runs).await?;
        }
        Ok(())
    }
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
    target: &Target<'_>,
    touched: &[&Live],
    keys: &[String],
    sought: &BTreeSet<Key>,
) -> Result<FirstPass, MirrorError> {
    let name = target.name;
    let mut pass = FirstPass {
        schemas: Vec::new(),
        found_rows: Vec::new(),
        found_at: BTreeMap::new(),
        changed: BTreeSet::new(),
        kept: KeptBytes::within(target.mirrors.target),
    };
    for (index, live) in touched.iter().enumerate() {
        let path = format!("{name}/{}", live.path);
        let bytes = get_file(target.sink, &path).await?;
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
pub type Row = (Key, Vec<Option<Cell>>);

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

/// Where the files of one rewrite go, and what it wrote.
struct Written<'a> {
    target: &'a Target<'a>,
    keys: &'a [String],
    schema: &'a SchemaRef,
    /// The new files, deleted again when the commit does not happen.
    written: Vec<Path>,
    added: Vec<NewFile>,
}

impl Written<'_> {
    /// Write each run of `rows` (sorted by key, their cells in `sources`) as files of about
    /// the target size.
    async fn write(
        &mut self,
        sources: &[RecordBatch],
        null_source: usize,
        rows: &[Row],
        runs: impl IntoIterator<Item = std::ops::Range<usize>>,
    ) -> Result<(), MirrorError> {
        let target = self.target;
        for run in runs {
            let rows = &rows[run];
            let files = write_rows(
                sources,
                self.schema,
                rows,
                null_source,
                (&target.mirrors.properties, target.mirrors.target),
            )
            .map_err(|e| data(target.name, e))?;
            for (bytes, range) in files {
                let relative = format!(
                    "{}part-{:020}-{}.parquet",
                    target.folder,
                    target.sequence,
                    super::rewrite::random_uuid()
                );
                let path = Path::from(format!("{}/{relative}", target.name));
                let size = bytes.len() as u64;
                let footer = super::file::footer_of(&bytes);
                target
                    .sink
                    .create(&path, bytes)
                    .await
                    .map_err(|e| sink_failure(target.name, e))?;
                self.written.push(path);
                self.added.push(NewFile {
                    path: relative,
                    size,
                    stats: KeyStats::of(self.keys.len(), rows[range].iter().map(|(k, _)| k)),
                    footer,
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

pub fn whole_row(cell: Cell, width: usize) -> Vec<Option<Cell>> {
    vec![Some(cell); width]
}

pub fn data(path: &str, reason: String) -> MirrorError {
    MirrorError::Data {
        path: path.to_owned(),
        reason,
    }
}

fn merged(schemas: impl IntoIterator<Item = SchemaRef>) -> Result<SchemaRef, MirrorError> {
    let schemas: Vec<SchemaRef> = schemas.into_iter().collect();
    merged_schema(&schemas).map_err(|e| data("", e.to_string()))
}

/// The key columns of `batch`.
pub fn key_columns(
    batch: &RecordBatch,
    keys: &[String],
    table: &str,
) -> Result<Vec<ArrayRef>, MirrorError> {
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
pub struct Logged {
    pub change: Change,
    pub lsn: u64,
    pub load: bool,
}

/// The columns of one change-log batch that [`changes`] reads, cast to the types it reads
/// them as.
struct LogColumns {
    ops: ArrayRef,
    lsn: ArrayRef,
    seq: ArrayRef,
    sub: Option<ArrayRef>,
    xid: Option<ArrayRef>,
}

impl LogColumns {
    fn of(batch: &RecordBatch) -> Result<LogColumns, MirrorError> {
        let bad = |reason: String| data("a change-log file", reason);
        let column = |name: &str| -> Result<ArrayRef, MirrorError> {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| bad(format!("it has no {name} column")))
        };
        let long = |name: &str| -> Result<Option<ArrayRef>, MirrorError> {
            batch
                .column_by_name(name)
                .map(|c| arrow_cast::cast(c, &DataType::Int64).map_err(|e| bad(e.to_string())))
                .transpose()
        };
        Ok(LogColumns {
            ops: arrow_cast::cast(&column("_op")?, &DataType::Utf8)
                .map_err(|e| bad(e.to_string()))?,
            lsn: long("_commit_lsn")?.ok_or_else(|| bad("it has no _commit_lsn column".into()))?,
            seq: long("_seq")?.ok_or_else(|| bad("it has no _seq column".into()))?,
            sub: long("_sub")?,
            xid: long("_xid")?,
        })
    }
}

/// The changes of the change-log `batches`, in change order: `(_commit_lsn, _seq, _sub)`.
/// A load's marker (`_op = "load"`) empties the table, as it tells a reader of the log to.
pub fn changes(
    batches: &[RecordBatch],
    keys: &[String],
    schema: &SchemaRef,
) -> Result<Vec<Logged>, MirrorError> {
    let mut changes = Vec::new();
    let mut order = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let bad = |reason: String| data("a change-log file", reason);
        let columns = LogColumns::of(batch)?;
        let ops = columns.ops.as_string::<i32>();
        let (lsn, seq) = (
            columns.lsn.as_primitive::<Int64Type>(),
            columns.seq.as_primitive::<Int64Type>(),
        );
        let sub = columns.sub.as_ref().map(|s| s.as_primitive::<Int64Type>());
        let xid = columns.xid.as_ref().map(|x| x.as_primitive::<Int64Type>());
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
/// and which of `rows` it holds.
pub fn write_rows(
    sources: &[RecordBatch],
    schema: &SchemaRef,
    rows: &[Row],
    null_source: usize,
    (properties, target): (&WriterProperties, u64),
) -> Result<Vec<(Bytes, std::ops::Range<usize>)>, String> {
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
        files.push((Bytes::from(bytes), start..end));
        start = end;
    }
    Ok(files)
}

/// The record batches of the Parquet file at `path` (relative to the sink).
pub async fn read_batches(sink: &Sink, path: &str) -> Result<Vec<RecordBatch>, MirrorError> {
    let bytes = get_file(sink, path).await?;
    Ok(decode(path, bytes)?.1)
}

/// The bytes of the file at `path` (relative to the sink), which a table reads.
async fn get_file(sink: &Sink, path: &str) -> Result<Bytes, MirrorError> {
    sink.get(&Path::from(path))
        .await
        .map_err(|e| sink_failure(path, e))?
        .ok_or_else(|| data(path, "a file the table reads is not in the sink".into()))
}

/// The sink's failure to read or write `path`: an outage, tried again, when it may pass.
fn sink_failure(path: &str, e: crate::lake::sink::SinkError) -> MirrorError {
    match e.is_transient() {
        true => MirrorError::Outage(e.to_string()),
        false => data(path, e.to_string()),
    }
}

/// The schema and record batches of the Parquet file `bytes` (at `path`).
fn decode(path: &str, bytes: Bytes) -> Result<(SchemaRef, Vec<RecordBatch>), MirrorError> {
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

/// Delete the files of a rewrite whose commit did not happen.
pub async fn delete_written(sink: &Sink, written: &[Path]) {
    for path in written {
        if let Err(e) = sink.delete(path).await {
            tracing::warn!(%path, error = %e, "could not delete a file of a current-state commit that did not happen; no table reads it");
        }
    }
}

/// The flush of the pipeline a change-log table held before a given flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preceding {
    /// This flush (`None`: none; the given flush is the table's first).
    Flush(Option<u64>),
    /// The version (a Delta commit, an Iceberg snapshot) the walk back needed, numbered
    /// thus, is gone (another tool cleaned the table's history up).
    Gone(u64),
}

impl Preceding {
    /// Why a current-state table that holds flush `held` is built again rather than take
    /// the given flush alone: it missed flushes of the change log before it, or that cannot
    /// be told. `None`: it missed none.
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

/// Ask `reload` (if any) for `output`'s rows again, because flush `sequence` brings `columns`
/// to its current-state table; `failed` makes the format's error of a request that failed.
pub async fn ask_reload(
    reload: Option<&dyn Reload>,
    output: &str,
    columns: &[String],
    failed: impl FnOnce(String) -> crate::lake::commit::CommitError,
) -> Result<(), crate::lake::commit::CommitError> {
    let (Some(reload), false) = (reload, columns.is_empty()) else {
        return Ok(());
    };
    let asked = reload.request(output, columns).await.map_err(|reason| {
        failed(format!(
            "columns {} came in, so its rows must be loaded again, and asking for that failed: {reason}",
            columns.join(", ")
        ))
    })?;
    match asked {
        Asked::AtStart => Err(crate::lake::commit::CommitError::LoadDue {
            output: output.to_owned(),
            columns: columns.join(", "),
        }),
        Asked::Beside | Asked::Due => Ok(()),
    }
}

/// Change-log files for the tests of both formats' current-state tables.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};
    use object_store::path::Path;

    use crate::lake::sink::Sink;
    use crate::lake::tables::TableFile;

    /// `(op, id, old id, v, v left out as an unchanged TOAST value)`.
    pub type Change<'a> = (&'a str, i64, Option<i64>, Option<&'a str>, bool);

    /// A change-log file of `public.t` (key `id`, a value `v`) holding `changes`, at
    /// `_commit_lsn` `sequence`.
    pub async fn changes(sink: &Sink, sequence: u64, changes: &[Change<'_>]) -> TableFile {
        use arrow_array::builder::{ListBuilder, StringBuilder};
        use arrow_array::{ArrayRef, Int64Array, StringArray, StructArray};
        let key = Field::new("id", DataType::Int64, true).with_metadata(
            std::collections::HashMap::from([("tributary.key".to_owned(), "true".to_owned())]),
        );
        let v = Field::new("v", DataType::Utf8, true);
        let old_fields = vec![key.clone(), v.clone()];
        let toast_item = Field::new("item", DataType::Utf8, false);
        let schema = Arc::new(Schema::new(vec![
            Field::new("_op", DataType::Utf8, false),
            Field::new("_commit_lsn", DataType::Int64, false),
            Field::new("_seq", DataType::Int64, false),
            Field::new(
                "_unchanged_toast",
                DataType::List(Arc::new(toast_item.clone())),
                true,
            ),
            key,
            v,
            Field::new("_old", DataType::Struct(old_fields.clone().into()), true),
        ]));
        let mut toast = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(toast_item));
        for c in changes {
            if c.4 {
                toast.values().append_value("v");
                toast.append(true);
            } else {
                toast.append(false);
            }
        }
        let old_ids: ArrayRef = Arc::new(Int64Array::from(
            changes.iter().map(|c| c.2).collect::<Vec<_>>(),
        ));
        let old_v: ArrayRef = Arc::new(StringArray::from(vec![None::<&str>; changes.len()]));
        let old_valid: Vec<bool> = changes.iter().map(|c| c.2.is_some()).collect();
        let old = StructArray::try_new(
            old_fields.into(),
            vec![old_ids, old_v],
            Some(old_valid.into()),
        )
        .unwrap();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(
                changes.iter().map(|c| c.0).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(vec![sequence as i64; changes.len()])),
            Arc::new(Int64Array::from(
                (0..changes.len() as i64).collect::<Vec<_>>(),
            )),
            Arc::new(toast.finish()),
            Arc::new(Int64Array::from(
                changes.iter().map(|c| c.1).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                changes.iter().map(|c| c.3).collect::<Vec<_>>(),
            )),
            Arc::new(old),
        ];
        let batch = arrow_array::RecordBatch::try_new(schema.clone(), columns).unwrap();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(Vec::new(), schema.clone(), None).unwrap();
        writer.write(&batch).unwrap();
        let bytes = writer.into_inner().unwrap();
        let file = TableFile {
            output: "public.t".into(),
            path: format!("public.t/part-{sequence}.parquet"),
            size: bytes.len() as u64,
            rows: changes.len() as u64,
            schema,
            partition: None,
            footer: None,
        };
        sink.create(&Path::from(file.path.as_str()), bytes.into())
            .await
            .unwrap();
        file
    }
}

#[cfg(test)]
mod outage_tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;

    /// A file that cannot be read because the store is down is an outage, which the commit
    /// protocol retries, not a bad file, which stops the pipeline.
    #[tokio::test]
    async fn a_store_that_is_down_is_an_outage_and_a_missing_file_is_not() {
        let options: BTreeMap<String, String> = [
            ("aws_endpoint", "http://127.0.0.1:9"),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "k"),
            ("aws_secret_access_key", "s"),
            ("aws_region", "us-east-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let down = Sink::open("s3://lake", &options).unwrap();
        let err = get_file(&down, "t/part-1.parquet").await.unwrap_err();
        assert!(err.outage().is_some_and(|e| e.is_transient()), "{err:?}");
        let memory = Sink::from_store(
            Arc::new(object_store::memory::InMemory::new()),
            "memory://lake",
        );
        let err = get_file(&memory, "t/part-1.parquet").await.unwrap_err();
        assert!(err.outage().is_none(), "{err:?}");
        // Writing a rewrite's file: the chaos test's S3 outage stopped a current-state
        // commit here, the store's failure taken for a bad table.
        let err = down
            .create(
                &Path::from("t/part-2.parquet"),
                bytes::Bytes::from_static(b"x"),
            )
            .await
            .unwrap_err();
        let err = sink_failure("t", err);
        assert!(err.outage().is_some_and(|e| e.is_transient()), "{err:?}");
    }
}
