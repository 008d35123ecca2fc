//! The rows of a current-state table (`[outputs."<output>"] mirror = true`), whatever its
//! format: `<output>__current`, one row per key as of the last flush, kept by copy-on-write.
//! No IO ([`super::current`] reads and writes the files; each format commits them).
//!
//! A flush's rows of the output, in change order, are reduced to one net change per key
//! ([`reduce`]): the row as it now is, or its deletion. The table's files whose key bounds
//! may hold one of those keys ([`Bounds`]) are read, their rows of those keys dropped, and
//! the new rows written with them: an updated row goes into the file that held its key, rows
//! of new keys into a new file. Each file's rows are sorted by key and its statistics carry
//! the key columns' bounds ([`KeyStats`]; a Delta file's `stats`, an Iceberg manifest's
//! lower and upper bounds), so a flush reads only the files its keys fall in.
//!
//! The key is the columns the output's files mark `tributary.key`: the replica identity's
//! key of a source table (every column under `REPLICA IDENTITY FULL`), or a plugin's declared
//! key. A column PostgreSQL did not send because its TOASTed value was unchanged
//! (`_unchanged_toast`) keeps the value the row had.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Decimal128Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, new_null_array};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

pub use super::file::{MIRROR_SUFFIX, mirror_name};

/// The change log's columns the current-state table leaves out: it holds rows, not changes.
const LOG_ONLY: &[&str] = &["_op", "_xid", "_schema", "_unchanged_toast", "_old"];

/// Field metadata that marks a key column.
pub const KEY_FIELD: &str = "tributary.key";

/// How key values of types without a native order here are printed.
static PRINTED: FormatOptions<'static> = FormatOptions::new();

/// Longest text whose bounds go into a file's statistics.
pub const MAX_BOUND_BYTES: usize = 64;

/// The columns of the current-state table of a log file with `log`'s columns.
pub fn mirror_schema(log: &Schema) -> SchemaRef {
    let fields: Vec<_> = log
        .fields()
        .iter()
        .filter(|f| !LOG_ONLY.contains(&f.name().as_str()))
        .cloned()
        .collect();
    Arc::new(Schema::new(fields))
}

/// The key columns of a file with `schema`'s columns, in order.
pub fn key_names(schema: &Schema) -> Vec<String> {
    schema
        .fields()
        .iter()
        .filter(|f| f.metadata().get(KEY_FIELD).map(String::as_str) == Some("true"))
        .map(|f| f.name().clone())
        .collect()
}

/// One column's value in a key, compared as the column's type orders it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Null,
    /// Integers, dates, timestamps, decimals (unscaled), booleans.
    Int(i128),
    Text(String),
    Bytes(Vec<u8>),
}

pub type Key = Vec<Part>;

/// Reads keys out of one batch's key columns.
pub struct Keys<'a> {
    columns: Vec<KeyColumn<'a>>,
}

enum KeyColumn<'a> {
    Native(&'a dyn Array),
    /// A type without a native order here: its printed form tells keys apart.
    Printed(&'a dyn Array, ArrayFormatter<'a>),
}

impl<'a> Keys<'a> {
    /// Keys made of `arrays`' values, one array per key column.
    pub fn new(arrays: Vec<&'a ArrayRef>) -> Result<Keys<'a>, ArrowError> {
        let columns = arrays
            .into_iter()
            .map(|a| match native(a.data_type()) {
                true => Ok(KeyColumn::Native(a.as_ref())),
                false => Ok(KeyColumn::Printed(
                    a.as_ref(),
                    ArrayFormatter::try_new(a.as_ref(), &PRINTED)?,
                )),
            })
            .collect::<Result<_, ArrowError>>()?;
        Ok(Keys { columns })
    }

    /// The key of row `i`.
    pub fn key(&self, i: usize) -> Key {
        self.columns
            .iter()
            .map(|c| match c {
                KeyColumn::Native(a) => part(*a, i),
                KeyColumn::Printed(a, _) if a.is_null(i) => Part::Null,
                KeyColumn::Printed(_, f) => Part::Text(f.value(i).to_string()),
            })
            .collect()
    }
}

fn native(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(..)
            | DataType::Decimal128(..)
            | DataType::Boolean
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::FixedSizeBinary(_)
    )
}

fn part(a: &dyn Array, i: usize) -> Part {
    if a.is_null(i) {
        return Part::Null;
    }
    let int = |v: i128| Part::Int(v);
    match a.data_type() {
        DataType::Int8 => int(a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => int(a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => int(a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => int(a.as_primitive::<Int64Type>().value(i).into()),
        DataType::UInt8 => int(a.as_primitive::<UInt8Type>().value(i).into()),
        DataType::UInt16 => int(a.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt32 => int(a.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt64 => int(a.as_primitive::<UInt64Type>().value(i).into()),
        DataType::Date32 => int(a.as_primitive::<Date32Type>().value(i).into()),
        DataType::Date64 => int(a.as_primitive::<Date64Type>().value(i).into()),
        DataType::Decimal128(..) => int(a.as_primitive::<Decimal128Type>().value(i)),
        DataType::Timestamp(unit, _) => int(match unit {
            TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(i),
            TimeUnit::Millisecond => a.as_primitive::<TimestampMillisecondType>().value(i),
            TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(i),
            TimeUnit::Nanosecond => a.as_primitive::<TimestampNanosecondType>().value(i),
        }
        .into()),
        DataType::Boolean => int(a.as_boolean().value(i).into()),
        DataType::Utf8 => Part::Text(a.as_string::<i32>().value(i).to_owned()),
        DataType::LargeUtf8 => Part::Text(a.as_string::<i64>().value(i).to_owned()),
        DataType::Utf8View => Part::Text(a.as_string_view().value(i).to_owned()),
        DataType::Binary => Part::Bytes(a.as_binary::<i32>().value(i).to_vec()),
        DataType::LargeBinary => Part::Bytes(a.as_binary::<i64>().value(i).to_vec()),
        DataType::FixedSizeBinary(_) => Part::Bytes(a.as_fixed_size_binary().value(i).to_vec()),
        other => unreachable!("{other} is not a native key type"),
    }
}

/// A row of a source batch: `(batch, row)`.
pub type Cell = (usize, usize);

/// What a change did, as the reduction needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    Insert,
    Update,
    Delete,
    Truncate,
}

/// One change of a flush, in change order.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub op: ChangeOp,
    /// The new row's key (inserts and updates).
    pub key: Option<Key>,
    /// The old row's key, when the change sent the old row (deletes; updates of the key).
    pub old_key: Option<Key>,
    /// Columns (positions in the table's columns) whose value the change did not send.
    pub unchanged: Vec<usize>,
    pub at: Cell,
}

/// A key's row as the flush leaves it: where each column's value comes from (`None`: null),
/// and which columns still take the value of the table's row of `prior`.
#[derive(Debug, Clone, PartialEq)]
pub struct Upsert {
    pub cells: Vec<Option<Cell>>,
    pub prior: Option<(Key, BTreeSet<usize>)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Net {
    Upsert(Upsert),
    Delete,
}

/// A flush's net effect on the table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reduced {
    /// The table was emptied first (a `TRUNCATE`, or a load's marker).
    pub truncate: bool,
    /// Keys whose rows in the table the truncate leaves: a load's marker empties the table as
    /// the snapshot saw it, and these rows came from changes after the snapshot
    /// ([`Overtaken`]).
    pub keep: BTreeSet<Key>,
    pub net: BTreeMap<Key, Net>,
}

impl Reduced {
    /// The keys whose rows in the table this flush replaces or reads.
    pub fn affected(&self) -> BTreeSet<Key> {
        let mut keys: BTreeSet<Key> = self.net.keys().cloned().collect();
        for net in self.net.values() {
            if let Net::Upsert(Upsert {
                prior: Some((key, _)),
                ..
            }) = net
            {
                keys.insert(key.clone());
            }
        }
        keys
    }
}

/// What the changes committed after a load's snapshot did to an output, as far as its change
/// log holds them when a chunk of the load is applied: the keys they wrote or deleted, and
/// whether one emptied the table.
///
/// A first load lands before the stream, so nothing overtakes it; a resync's chunks land
/// between the stream's flushes, and a flush landed before a chunk may hold changes committed
/// after the chunk's snapshot. The current-state table holds those changes already, and they
/// are newer than the load's rows, so they win: a row the stream wrote or deleted since the
/// snapshot keeps its state through the marker and the load's row of its key is dropped,
/// and after a truncate since the snapshot the load has nothing left to say. Changes
/// committed before the snapshot that land after a chunk replay what the snapshot holds and
/// change nothing, so the table ends where a reader replaying the change log in order does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overtaken {
    pub keys: BTreeSet<Key>,
    pub truncated: bool,
}

impl Overtaken {
    /// Note a change committed after the snapshot.
    pub fn note(&mut self, change: &Change) {
        match change.op {
            ChangeOp::Truncate => self.truncated = true,
            _ => self
                .keys
                .extend(change.key.iter().chain(&change.old_key).cloned()),
        }
    }

    /// A load chunk's `changes` (its marker a truncate) as they apply to a table that holds
    /// the overtaking changes already.
    pub fn screen(&self, changes: Vec<Change>) -> Vec<Change> {
        if self.truncated {
            return Vec::new();
        }
        changes
            .into_iter()
            .filter(|c| !c.key.as_ref().is_some_and(|k| self.keys.contains(k)))
            .collect()
    }

    /// What a load chunk's changes, screened, reduce to: its marker leaves the overtaken
    /// keys' rows.
    pub fn reduce(&self, changes: Vec<Change>, width: usize) -> Result<Reduced, MirrorError> {
        let mut reduced = reduce(self.screen(changes), width)?;
        if reduced.truncate {
            reduced.keep = self.keys.clone();
        }
        Ok(reduced)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    #[error(
        "it has no key: a current-state table needs the rows' key, which the files mark from the \
         table's primary key or replica identity index (or a plugin's declared key); give the \
         table a primary key, or leave mirror out for it"
    )]
    NoKey,
    #[error("a {0} without the key of its row")]
    Keyless(&'static str),
    /// A file the table reads or writes, and what is wrong with it.
    #[error("{path}: {reason}")]
    Data { path: String, reason: String },
    /// The sink failed in a way that may pass (an outage): the step is tried again.
    #[error("{0}")]
    Outage(String),
}

impl MirrorError {
    /// The error as the commit protocol has it, when it is the sink's outage.
    pub fn outage(&self) -> Option<crate::lake::sink::SinkError> {
        match self {
            MirrorError::Outage(message) => Some(crate::lake::sink::SinkError::Outage {
                message: message.clone(),
            }),
            _ => None,
        }
    }
}

/// Reduce a flush's changes of one output, in change order, to one net change per key;
/// `width` is the number of the table's columns.
pub fn reduce(
    changes: impl IntoIterator<Item = Change>,
    width: usize,
) -> Result<Reduced, MirrorError> {
    let mut reduced = Reduced::default();
    for change in changes {
        match change.op {
            ChangeOp::Truncate => {
                reduced.net.clear();
                reduced.truncate = true;
            }
            ChangeOp::Delete => {
                let key = change
                    .old_key
                    .or(change.key)
                    .ok_or(MirrorError::Keyless("delete"))?;
                reduced.net.insert(key, Net::Delete);
            }
            ChangeOp::Insert => {
                let key = change.key.ok_or(MirrorError::Keyless("insert"))?;
                let cells = vec![Some(change.at); width];
                reduced
                    .net
                    .insert(key, Net::Upsert(Upsert { cells, prior: None }));
            }
            ChangeOp::Update => {
                let key = change.key.ok_or(MirrorError::Keyless("update"))?;
                let before = change.old_key.unwrap_or_else(|| key.clone());
                // The row as it was before this change: earlier in the flush, or in the table.
                let earlier = match before == key {
                    true => reduced.net.remove(&key),
                    false => reduced.net.insert(before.clone(), Net::Delete),
                };
                let mut cells = vec![Some(change.at); width];
                let mut prior = None;
                if !change.unchanged.is_empty() {
                    let unchanged: BTreeSet<usize> = change.unchanged.into_iter().collect();
                    match earlier {
                        Some(Net::Upsert(earlier)) => {
                            for &c in &unchanged {
                                cells[c] = earlier.cells[c];
                            }
                            if let Some((key, columns)) = earlier.prior {
                                let still: BTreeSet<usize> =
                                    columns.intersection(&unchanged).copied().collect();
                                prior = (!still.is_empty()).then_some((key, still));
                            }
                        }
                        // Deleted, or emptied by a truncate, earlier in the flush: no value
                        // to keep.
                        Some(Net::Delete) => unchanged.iter().for_each(|&c| cells[c] = None),
                        None if reduced.truncate => unchanged.iter().for_each(|&c| cells[c] = None),
                        None => prior = Some((before, unchanged)),
                    }
                }
                reduced
                    .net
                    .insert(key, Net::Upsert(Upsert { cells, prior }));
            }
        }
    }
    Ok(reduced)
}

/// A file's bounds on each key column, from its statistics: `None` where they give none.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds(Vec<Option<(Part, Part)>>);

impl Bounds {
    /// Bounds from each key column's least and greatest value, `None` where a file's
    /// statistics give none (such a file may hold any value of that column).
    pub fn new(columns: Vec<Option<(Part, Part)>>) -> Bounds {
        Bounds(columns)
    }

    /// Whether a file with these bounds may hold a row of `key`.
    pub fn may_hold(&self, key: &Key) -> bool {
        self.0
            .iter()
            .zip(key)
            .all(|(bound, part)| match (bound, part) {
                (Some((Part::Int(lo), Part::Int(hi))), Part::Int(v)) => lo <= v && v <= hi,
                (Some((Part::Text(lo), Part::Text(hi))), Part::Text(v)) => lo <= v && v <= hi,
                _ => true,
            })
    }

    /// The least value of the first key column, if the statistics give one.
    pub fn lower(&self) -> Option<Part> {
        self.0.first()?.as_ref().map(|(lo, _)| lo.clone())
    }

    /// Whether a file with these bounds may hold a row of one of `keys`.
    pub fn may_hold_any(&self, keys: &BTreeSet<Key>) -> bool {
        // Keys are sorted by their first column: only those within its bounds can match.
        match (self.0.first(), keys.first().and_then(|k| k.first())) {
            (Some(Some((lo, hi))), Some(_)) if same_kind(lo, hi) => {
                let from: Key = vec![lo.clone()];
                keys.range(from..)
                    .take_while(|k| k.first().is_none_or(|p| !same_kind(p, hi) || p <= hi))
                    .any(|k| self.may_hold(k))
            }
            _ => keys.iter().any(|k| self.may_hold(k)),
        }
    }
}

pub fn same_kind(a: &Part, b: &Part) -> bool {
    matches!(
        (a, b),
        (Part::Int(_), Part::Int(_)) | (Part::Text(_), Part::Text(_))
    )
}
/// How far apart (in multiples of the median step between neighbours) two new keys must be
/// to go into separate files.
const RUN_GAP: i128 = 1000;

/// Split sorted new `keys` into runs that each become their own file: a run ends where the
/// next key's first column (an integer) is far from it, so rows of new keys at both ends of
/// a table (inserts of rising ids beside the first updates of rows the table never had) do
/// not make one file whose bounds span everything between them, which every later flush would
/// have to read.
pub fn runs(keys: &[&Key]) -> Vec<std::ops::Range<usize>> {
    let first: Option<Vec<i128>> = keys
        .iter()
        .map(|k| match k.first() {
            Some(Part::Int(v)) => Some(*v),
            _ => None,
        })
        .collect();
    let whole: Vec<_> = std::iter::once(0..keys.len()).collect();
    let Some(first) = first.filter(|f| f.len() > 2) else {
        return whole;
    };
    let mut steps: Vec<i128> = first.windows(2).map(|w| w[1] - w[0]).collect();
    steps.sort_unstable();
    let far = steps[steps.len() / 2].max(1).saturating_mul(RUN_GAP);
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..first.len() {
        if first[i] - first[i - 1] > far {
            runs.push(start..i);
            start = i;
        }
    }
    runs.push(start..first.len());
    runs
}

/// What a written file's statistics say of its key columns: its rows and, for each key column
/// of an integer or text type, the least and greatest value (text longer than
/// [`MAX_BOUND_BYTES`], and a column of mixed kinds, is given none) and how many are null.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyStats {
    pub rows: u64,
    pub bounds: Vec<Option<(Part, Part)>>,
    pub nulls: Vec<u64>,
}

impl KeyStats {
    /// The statistics of the rows of `keys`, each of `width` key columns.
    pub fn of<'k>(width: usize, keys: impl IntoIterator<Item = &'k Key>) -> KeyStats {
        let mut rows = 0u64;
        let mut bounds: Vec<Option<(Part, Part)>> = vec![None; width];
        let mut open = vec![true; width];
        let mut nulls = vec![0u64; width];
        for key in keys {
            rows += 1;
            for (c, part) in key.iter().enumerate() {
                let fits = match part {
                    Part::Int(v) => i64::try_from(*v).is_ok(),
                    Part::Text(t) => t.len() <= MAX_BOUND_BYTES,
                    Part::Null => {
                        nulls[c] += 1;
                        continue;
                    }
                    Part::Bytes(_) => false,
                };
                if !fits {
                    open[c] = false;
                    continue;
                }
                bounds[c] = match bounds[c].take() {
                    None => Some((part.clone(), part.clone())),
                    Some((lo, hi)) if same_kind(&lo, part) => {
                        Some((lo.min(part.clone()), hi.max(part.clone())))
                    }
                    Some(_) => {
                        open[c] = false;
                        None
                    }
                };
            }
        }
        for (bound, open) in bounds.iter_mut().zip(open) {
            if !open {
                *bound = None;
            }
        }
        KeyStats {
            rows,
            bounds,
            nulls,
        }
    }
}

/// The schema of a file that holds all of `schemas`' rows: every column of any of them, in
/// the order they first appear (older files first, so added columns come last, as in the
/// table), nested columns merged the same way, every column nullable. A column keeps the
/// metadata of the last file that has it (its PostgreSQL type, whether it is a key column):
/// what the column is as of the newest rows. A current-state table built from a compacted
/// change log finds its key there.
pub fn merged_schema(schemas: &[SchemaRef]) -> Result<SchemaRef, ArrowError> {
    let mut fields: Vec<FieldRef> = Vec::new();
    for schema in schemas {
        fields = merge_fields(&fields, schema.fields())?;
    }
    Ok(Arc::new(Schema::new(fields)))
}

fn merge_fields(into: &[FieldRef], from: &Fields) -> Result<Vec<FieldRef>, ArrowError> {
    let mut merged: Vec<FieldRef> = into.to_vec();
    for field in from {
        match merged.iter().position(|f| f.name() == field.name()) {
            None => merged.push(Arc::new(field.as_ref().clone().with_nullable(true))),
            Some(at) => {
                let have = &merged[at];
                let data_type = match (have.data_type(), field.data_type()) {
                    (DataType::Struct(a), DataType::Struct(b)) => DataType::Struct(
                        merge_fields(&a.iter().cloned().collect::<Vec<_>>(), b)?.into(),
                    ),
                    (a, b) if a == b => a.clone(),
                    (a, b) => {
                        return Err(ArrowError::SchemaError(format!(
                            "column {} is {a} in one file and {b} in another",
                            field.name()
                        )));
                    }
                };
                merged[at] = Arc::new(
                    Field::new(have.name(), data_type, true)
                        .with_metadata(field.metadata().clone()),
                );
            }
        }
    }
    Ok(merged)
}

/// `batch` with the columns of `schema` (a [`merged_schema`] that includes its own): the ones
/// it lacks are null, nested ones alike.
pub fn fit(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let columns = fit_columns(
        batch.schema().fields(),
        batch.columns(),
        schema.fields(),
        batch.num_rows(),
    )?;
    RecordBatch::try_new(schema.clone(), columns)
}

fn fit_columns(
    have: &Fields,
    columns: &[ArrayRef],
    want: &Fields,
    rows: usize,
) -> Result<Vec<ArrayRef>, ArrowError> {
    want.iter()
        .map(|field| {
            let Some(at) = have.iter().position(|f| f.name() == field.name()) else {
                return Ok(new_null_array(field.data_type(), rows));
            };
            let column = &columns[at];
            match (column.data_type(), field.data_type()) {
                (DataType::Struct(inner), DataType::Struct(wanted)) if inner != wanted => {
                    let array = column
                        .as_any()
                        .downcast_ref::<StructArray>()
                        .expect("a struct column is a StructArray");
                    let children = fit_columns(inner, array.columns(), wanted, rows)?;
                    Ok(Arc::new(StructArray::try_new(
                        wanted.clone(),
                        children,
                        array.nulls().cloned(),
                    )?) as ArrayRef)
                }
                _ => Ok(column.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::Field;

    use super::*;

    fn k(v: i128) -> Key {
        vec![Part::Int(v)]
    }

    fn change(op: ChangeOp, key: Option<i128>, old: Option<i128>, row: usize) -> Change {
        Change {
            op,
            key: key.map(k),
            old_key: old.map(k),
            unchanged: Vec::new(),
            at: (0, row),
        }
    }

    #[test]
    fn a_load_chunk_leaves_the_rows_changes_after_its_snapshot_wrote() {
        use ChangeOp::*;
        let chunk = || {
            vec![
                change(Truncate, None, None, 0),
                change(Insert, Some(1), None, 1),
                change(Insert, Some(2), None, 2),
                change(Insert, Some(3), None, 3),
            ]
        };
        // Nothing overtook it: the marker empties the table, the rows fill it.
        let plain = Overtaken::default().reduce(chunk(), 1).unwrap();
        assert!(plain.truncate && plain.keep.is_empty());
        assert_eq!(plain.net.len(), 3);

        // Key 2 updated and key 3 deleted after the snapshot (and key 9 moved to key 8):
        // their rows stay, the load's rows of them are dropped.
        let mut later = Overtaken::default();
        later.note(&change(Update, Some(2), None, 0));
        later.note(&change(Delete, None, Some(3), 0));
        later.note(&change(Update, Some(8), Some(9), 0));
        let screened = later.reduce(chunk(), 1).unwrap();
        assert!(screened.truncate);
        assert_eq!(screened.keep, [k(2), k(3), k(8), k(9)].into());
        assert_eq!(screened.net.keys().collect::<Vec<_>>(), [&k(1)]);

        // A truncate after the snapshot: the chunk has nothing to add.
        later.note(&change(Truncate, None, None, 0));
        let emptied = later.reduce(chunk(), 1).unwrap();
        assert_eq!(emptied, Reduced::default());
    }

    #[test]
    fn a_flush_reduces_to_one_net_change_per_key() {
        use ChangeOp::*;
        let changes = [
            change(Insert, Some(1), None, 0),
            change(Insert, Some(2), None, 1),
            change(Update, Some(1), None, 2),
            change(Delete, None, Some(2), 3),
            // The key of 3 changes to 4.
            change(Update, Some(4), Some(3), 4),
        ];
        let reduced = reduce(changes, 2).unwrap();
        assert_eq!(
            reduced.net.get(&k(1)),
            Some(&Net::Upsert(Upsert {
                cells: vec![Some((0, 2)); 2],
                prior: None
            }))
        );
        assert_eq!(reduced.net.get(&k(2)), Some(&Net::Delete));
        assert_eq!(reduced.net.get(&k(3)), Some(&Net::Delete));
        assert!(matches!(reduced.net.get(&k(4)), Some(Net::Upsert(_))));
        assert_eq!(reduced.affected(), [k(1), k(2), k(3), k(4)].into());

        let truncated = reduce(
            [
                change(Insert, Some(1), None, 0),
                change(Truncate, None, None, 1),
                change(Insert, Some(5), None, 2),
            ],
            1,
        )
        .unwrap();
        assert!(truncated.truncate);
        assert_eq!(truncated.net.keys().collect::<Vec<_>>(), [&k(5)]);
        let err = reduce([change(Delete, None, None, 0)], 1).unwrap_err();
        assert_eq!(err, MirrorError::Keyless("delete"));
    }

    #[test]
    fn an_unchanged_toast_value_is_taken_from_the_row_before() {
        use ChangeOp::*;
        let mut first = change(Update, Some(1), None, 0);
        first.unchanged = vec![1];
        // Within the table: column 1 comes from the table's row of key 1.
        let reduced = reduce([first.clone()], 2).unwrap();
        let Some(Net::Upsert(up)) = reduced.net.get(&k(1)) else {
            panic!()
        };
        assert_eq!(up.prior, Some((k(1), [1].into())));
        // After an insert in the same flush: from that row; a later change of the key carries
        // the need along.
        let reduced = reduce([change(Insert, Some(1), None, 0), first.clone()], 2).unwrap();
        let Some(Net::Upsert(up)) = reduced.net.get(&k(1)) else {
            panic!()
        };
        assert_eq!(
            (up.cells[0], up.cells[1], &up.prior),
            (Some((0, 0)), Some((0, 0)), &None)
        );
        let mut moved = change(Update, Some(2), Some(1), 1);
        moved.unchanged = vec![1];
        let reduced = reduce([first, moved], 2).unwrap();
        let Some(Net::Upsert(up)) = reduced.net.get(&k(2)) else {
            panic!()
        };
        assert_eq!(up.cells, [Some((0, 1)), Some((0, 0))]);
        assert_eq!(up.prior, Some((k(1), [1].into())));
        assert_eq!(reduced.net.get(&k(1)), Some(&Net::Delete));
    }

    #[test]
    fn bounds_prune_the_files_a_key_cannot_be_in() {
        let keys = [
            vec![Part::Int(10), Part::Text("b".into())],
            vec![Part::Int(20), Part::Text("a".into())],
            vec![Part::Int(15), Part::Null],
        ];
        let stats = KeyStats::of(2, keys.iter());
        assert_eq!(stats.rows, 3);
        assert_eq!(stats.nulls, [0, 1]);
        let bounds = Bounds::new(stats.bounds.clone());
        assert!(bounds.may_hold(&vec![Part::Int(12), Part::Text("a".into())]));
        assert!(!bounds.may_hold(&vec![Part::Int(21), Part::Text("a".into())]));
        assert!(!bounds.may_hold(&vec![Part::Int(12), Part::Text("c".into())]));
        assert!(bounds.may_hold(&vec![Part::Int(12), Part::Null]));
        assert_eq!(bounds.lower(), Some(Part::Int(10)));
        let far: BTreeSet<Key> = [
            vec![Part::Int(1), Part::Text("a".into())],
            vec![Part::Int(30), Part::Text("a".into())],
        ]
        .into();
        assert!(!bounds.may_hold_any(&far));
        let near: BTreeSet<Key> = [
            vec![Part::Int(1), Part::Text("a".into())],
            vec![Part::Int(11), Part::Text("a".into())],
        ]
        .into();
        assert!(bounds.may_hold_any(&near));
        // A file without bounds may hold anything; text too long for a bound gives none.
        assert!(Bounds::new(vec![None, None]).may_hold_any(&far));
        let long = [vec![Part::Text("x".repeat(MAX_BOUND_BYTES + 1))]];
        assert_eq!(KeyStats::of(1, long.iter()).bounds, [None]);
    }

    #[test]
    fn new_keys_far_apart_go_into_separate_runs() {
        let keys: Vec<Key> = (100..110)
            .chain(5000..5005)
            .chain(9_000_000..9_000_002)
            .map(k)
            .collect();
        let refs: Vec<&Key> = keys.iter().collect();
        assert_eq!(runs(&refs), [0..10, 10..15, 15..17]);
        let close: Vec<Key> = (0..50).map(|i| k(i * 7)).collect();
        let refs: Vec<&Key> = close.iter().collect();
        assert_eq!(runs(&refs).len(), 1, "one run of close keys");
        let text: Vec<Key> = ["a", "b", "zzz"]
            .iter()
            .map(|t| vec![Part::Text((*t).into())])
            .collect();
        let refs: Vec<&Key> = text.iter().collect();
        assert_eq!(runs(&refs).len(), 1, "only integer keys are split");
    }

    #[test]
    fn keys_read_native_and_printed_types_and_the_schema_drops_the_log_columns() {
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![Some(3), None]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["x", "y"]));
        let floats: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![1.5, 2.0]));
        let keys = Keys::new(vec![&ids, &names, &floats]).unwrap();
        assert_eq!(
            keys.key(0),
            [
                Part::Int(3),
                Part::Text("x".into()),
                Part::Text("1.5".into())
            ]
        );
        assert_eq!(keys.key(1)[0], Part::Null);

        let key = |f: Field| {
            f.with_metadata(std::collections::HashMap::from([(
                KEY_FIELD.to_owned(),
                "true".to_owned(),
            )]))
        };
        let log = Schema::new(vec![
            Field::new("_op", DataType::Utf8, false),
            Field::new("_commit_lsn", DataType::Int64, false),
            key(Field::new("id", DataType::Int64, true)),
            Field::new("v", DataType::Utf8, true),
            Field::new("_old", DataType::Utf8, true),
        ]);
        let names: Vec<String> = mirror_schema(&log)
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["_commit_lsn", "id", "v"]);
        assert_eq!(key_names(&log), ["id"]);
        assert_eq!(mirror_name("public.t"), "public.t__current");
    }
}
