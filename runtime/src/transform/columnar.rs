//! The `columnar` interface: a batch as one Arrow IPC stream per relation, and what a plugin
//! returns by column turned into the emits the typed interface would have made.
//!
//! Going out, each relation's changes become one record batch: the metadata columns (`_txn`,
//! `_change`, `_seq`, `_op`) and the columns the plugin reads, built by the encoder's own array
//! builders, so a plugin sees each column typed exactly as it lands. Coming back, `land: all`
//! with nothing replaced is one `keep` per change (what a typed passthrough returns, without a
//! record per change crossing); replaced columns become `edit`s whose values the encoder's
//! inverse read from the returned arrays, checked against the output column's type and
//! nullability once per column rather than once per value.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use super::TransformError;
use super::convert::{self, Relations, View};
use super::host::wit;
use super::host::wit::columnar as cw;
use super::shape::{Edit, Emit, Replacements, Shape};
use crate::lake::encode;
use crate::stream::change::{Batch, Change, Op, OutputColumn, Value};

/// The metadata columns that open each table's stream, in order.
pub(super) const METADATA: [&str; 4] = ["_txn", "_change", "_seq", "_op"];

/// Where one change of the batch is: its transaction, its index there, and its relation.
struct Place {
    tx: u32,
    change: u32,
    handle: u32,
}

/// The changes of the batch in commit order, each with its place.
fn places(batch: &Batch, handles: &[u32]) -> Vec<Place> {
    let mut handles = handles.iter();
    let mut places = Vec::with_capacity(handles.len());
    for (tx, t) in batch.transactions.iter().enumerate() {
        for change in 0..t.changes.len() {
            places.push(Place {
                tx: tx as u32,
                change: change as u32,
                handle: handles.next().copied().unwrap_or_default(),
            });
        }
    }
    places
}

static NULL: Value = Value::Null;

/// The value at column `c` of a row, null when there is no row.
fn value_at(row: Option<&[Value]>, c: usize) -> &Value {
    row.and_then(|r| r.get(c)).unwrap_or(&NULL)
}

/// The row a change lands: the new row of an insert or update, the old row of a delete, none
/// for a truncate.
fn own_row(change: &Change) -> Option<&[Value]> {
    match change.op {
        Op::Delete => change.old.as_deref(),
        _ => change.new.as_deref(),
    }
}

/// The batch as the plugin sees it by column.
pub(super) fn batch_to_columns(
    plugin: &str,
    batch: &Batch,
    relations: &Relations,
    handles: &[u32],
    view: &View,
) -> Result<cw::ColumnBatch, TransformError> {
    let places = places(batch, handles);
    let changes: Vec<&Change> = batch.transactions.iter().flat_map(|t| &t.changes).collect();
    // Each relation's changes, by their index in the batch.
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); relations.relations.len()];
    for (i, place) in places.iter().enumerate() {
        rows_of[place.handle as usize].push(i);
    }
    let mut tables = Vec::with_capacity(relations.relations.len());
    for ((handle, relation), rows) in relations.relations.iter().enumerate().zip(rows_of) {
        let columns = &relations.outputs[handle].1;
        let read: Vec<usize> = (0..columns.len())
            .filter(|&c| view.read[handle].as_ref().is_none_or(|read| read[c]))
            .collect();
        let failed = |column: &str, message: String| TransformError::Plugin {
            plugin: plugin.to_owned(),
            message: format!(
                "cannot hand table {} to the plugin by column: column {column:?}: {message}",
                relation.qualified_name()
            ),
        };
        let stream = |fields: Vec<Field>, arrays: Vec<ArrayRef>| {
            let schema = Arc::new(Schema::new(fields));
            RecordBatch::try_new(schema, arrays)
                .and_then(|record| ipc_bytes(&record))
                .map_err(|e| failed("(stream)", e.to_string()))
        };
        let mut fields: Vec<Field> = METADATA
            .iter()
            .map(|name| {
                let ty = if *name == "_op" {
                    DataType::Utf8
                } else {
                    DataType::UInt32
                };
                Field::new(*name, ty, false)
            })
            .collect();
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|&i| places[i].tx),
            )),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|&i| places[i].change),
            )),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|&i| changes[i].seq),
            )),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|&i| {
                // A load marker is a truncate to plugins, as on the typed path.
                match changes[i].op {
                    Op::Load => Op::Truncate.as_str(),
                    op => op.as_str(),
                }
            }))),
        ];
        let mut old_fields = Vec::new();
        let mut old_arrays = Vec::new();
        for &c in &read {
            let column = &columns[c];
            let values: Vec<&Value> = rows
                .iter()
                .map(|&i| value_at(own_row(changes[i]), c))
                .collect();
            let array =
                encode::column_array(column, &values).map_err(|(_, m)| failed(&column.name, m))?;
            fields.push(encode::column_field(column));
            arrays.push(array);
            if view.old_images {
                let old: Vec<&Value> = rows
                    .iter()
                    .map(|&i| match changes[i].op {
                        Op::Update => value_at(changes[i].old.as_deref(), c),
                        _ => &NULL,
                    })
                    .collect();
                let array =
                    encode::column_array(column, &old).map_err(|(_, m)| failed(&column.name, m))?;
                old_fields.push(encode::column_field(column));
                old_arrays.push(array);
            }
        }
        let old = match view.old_images {
            true if old_arrays.is_empty() => {
                Some(empty_stream(rows.len()).map_err(|e| failed("(stream)", e))?)
            }
            true => Some(stream(old_fields, old_arrays)?),
            false => None,
        };
        tables.push(cw::Table {
            rows: stream(fields, arrays)?,
            old,
        });
    }
    Ok(cw::ColumnBatch {
        relations: relations
            .relations
            .iter()
            .map(|r| convert::relation_to_wit(r))
            .collect(),
        transactions: batch
            .transactions
            .iter()
            .map(|t| convert::transaction_header(t, view))
            .collect(),
        tables,
        messages: view.messages(&batch.messages),
    })
}

/// A stream of `rows` rows and no columns.
fn empty_stream(rows: usize) -> Result<Vec<u8>, String> {
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::new(Schema::empty()), vec![], &options)
        .and_then(|record| ipc_bytes(&record))
        .map_err(|e| e.to_string())
}

/// One record batch as an Arrow IPC stream: schema, the batch, end of stream.
pub(super) fn ipc_bytes(record: &RecordBatch) -> Result<Vec<u8>, arrow_schema::ArrowError> {
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &record.schema())?;
    writer.write(record)?;
    writer.finish()?;
    writer.into_inner()
}

/// The one record batch of an Arrow IPC stream, or why the bytes are not one.
pub(super) fn read_ipc(bytes: &[u8]) -> Result<RecordBatch, String> {
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| format!("not an Arrow IPC stream ({e})"))?;
    let mut batches = Vec::with_capacity(1);
    for batch in reader {
        batches.push(batch.map_err(|e| format!("not a readable Arrow IPC stream ({e})"))?);
    }
    match batches.len() {
        1 => Ok(batches.pop().unwrap_or_else(|| unreachable!())),
        n => Err(format!(
            "the stream holds {n} record batches; put every column in one record batch"
        )),
    }
}

/// What a plugin returned by column, as emits and rejections of the typed interface: for each
/// change of the batch in commit order, a `keep` or an `edit` when its row lands, a rejection
/// when the plugin rejected it; then the rows the plugin spelled out.
pub(super) fn output_to_emits(
    plugin: &str,
    batch: &Batch,
    relations: &Relations,
    shapes: &[Shape],
    handles: &[u32],
    output: cw::ColumnOutput,
) -> Result<(Vec<Emit>, Vec<wit::Rejection>), TransformError> {
    let places = places(batch, handles);
    let count = relations.relations.len();
    let refused =
        |table: Option<&str>, column: Option<&str>, message: String| TransformError::Columnar {
            plugin: plugin.to_owned(),
            table: table.map(str::to_owned),
            column: column.map(str::to_owned),
            message,
        };
    if output.tables.len() != count {
        return Err(refused(
            None,
            None,
            format!(
                "it returned {} table outputs for a batch of {count} tables; return one per \
                 table, in the order of column-batch.tables (land: all keeps a table as it came)",
                output.tables.len()
            ),
        ));
    }
    let mut rows_of = vec![0usize; count];
    for place in &places {
        rows_of[place.handle as usize] += 1;
    }
    let mut tables = Vec::with_capacity(count);
    for (handle, table) in output.tables.into_iter().enumerate() {
        let name = &relations.outputs[handle].0;
        let rows = rows_of[handle];
        let refused = |column: Option<&str>, message: String| refused(Some(name), column, message);
        tables.push(TableDecision::new(table, &shapes[handle], rows, &refused)?);
    }
    let mut emits = Vec::with_capacity(places.len() + output.rows.len());
    let mut rejections = Vec::new();
    let mut next_row = vec![0usize; count];
    for place in &places {
        let h = place.handle as usize;
        let row = next_row[h];
        next_row[h] += 1;
        let table = &mut tables[h];
        let at = wit::ChangeRef {
            transaction: place.tx,
            change: place.change,
        };
        if let Some(rejection) = table.rejected.get_mut(row).and_then(Option::take) {
            rejections.push(wit::Rejection {
                change: at,
                class: rejection.0,
                message: rejection.1,
            });
            continue;
        }
        if !table.lands(row) {
            continue;
        }
        let change = &batch.transactions[place.tx as usize].changes[place.change as usize];
        // A null where the row holds an unchanged TOAST value (which the plugin saw as null)
        // leaves the value unchanged.
        let take = |replaced: &mut [(u32, Vec<Value>)], own: Option<&[Value]>| {
            let Some(own) = own else {
                return Vec::new();
            };
            let mut pairs = Vec::with_capacity(replaced.len());
            for (p, values) in replaced.iter_mut() {
                let value = std::mem::replace(&mut values[row], Value::Null);
                let toast = matches!(own.get(*p as usize), Some(Value::UnchangedToast));
                if !(toast && value == Value::Null) {
                    pairs.push((*p, value));
                }
            }
            pairs
        };
        let values = take(&mut table.columns, own_row(change));
        let old = match change.op {
            Op::Update => take(&mut table.old, change.old.as_deref()),
            _ => Vec::new(),
        };
        emits.push(match values.is_empty() && old.is_empty() {
            true => Emit::Keep(at),
            false => Emit::Edit(Edit {
                change: at,
                values: Replacements::Native(values),
                old: Replacements::Native(old),
            }),
        });
    }
    emits.extend(output.rows.into_iter().map(|row| Emit::Row(Box::new(row))));
    Ok((emits, rejections))
}

/// What a plugin decided for one table.
struct TableDecision {
    /// Per row whether it lands; `None` for every row.
    land: Option<Vec<bool>>,
    /// `(wide position, one value per row)` of each replaced column, and of each replaced
    /// column of the old images.
    columns: Vec<(u32, Vec<Value>)>,
    old: Vec<(u32, Vec<Value>)>,
    /// Per row, the plugin's rejection of it: `(class, message)`.
    rejected: Vec<Option<(String, String)>>,
}

impl TableDecision {
    fn new(
        table: cw::TableOutput,
        shape: &Shape,
        rows: usize,
        refused: &dyn Fn(Option<&str>, String) -> TransformError,
    ) -> Result<TableDecision, TransformError> {
        let land = match table.land {
            cw::Selection::All => None,
            cw::Selection::Only(indices) => {
                let mut land = vec![false; rows];
                let mut last: Option<u32> = None;
                for i in indices {
                    if i as usize >= rows || last.is_some_and(|l| l >= i) {
                        return Err(refused(
                            None,
                            format!(
                                "its selection names row {i}{}; name rows of the table (it has \
                                 {rows}), each once, in ascending order",
                                match last {
                                    Some(l) if l >= i => format!(" after row {l}"),
                                    _ => String::new(),
                                }
                            ),
                        ));
                    }
                    land[i as usize] = true;
                    last = Some(i);
                }
                Some(land)
            }
        };
        let mut rejected = vec![None; rows];
        for rejection in table.rejections {
            let Some(slot) = rejected.get_mut(rejection.row as usize) else {
                return Err(refused(
                    None,
                    format!(
                        "it rejects row {}, but the table has {rows} rows",
                        rejection.row
                    ),
                ));
            };
            slot.get_or_insert((rejection.class, rejection.message));
        }
        let columns = match table.columns {
            Some(bytes) => replaced(&bytes, shape, rows, "columns", refused)?,
            None => Vec::new(),
        };
        let old = match table.old {
            Some(bytes) => replaced(&bytes, shape, rows, "old", refused)?,
            None => Vec::new(),
        };
        Ok(TableDecision {
            land,
            columns,
            old,
            rejected,
        })
    }

    fn lands(&self, row: usize) -> bool {
        self.land.as_ref().is_none_or(|land| land[row])
    }
}

/// The columns of a returned stream as `(wide position, values)`, each checked against the
/// output column it names.
fn replaced(
    bytes: &[u8],
    shape: &Shape,
    rows: usize,
    what: &str,
    refused: &dyn Fn(Option<&str>, String) -> TransformError,
) -> Result<Vec<(u32, Vec<Value>)>, TransformError> {
    let record = read_ipc(bytes).map_err(|m| {
        refused(
            None,
            format!("its {what} are {m}; return an Arrow IPC stream with one record batch"),
        )
    })?;
    if record.num_rows() != rows {
        return Err(refused(
            None,
            format!(
                "its {what} hold {} rows for a table of {rows}; return one row per row of the \
                 table (the values of rows that do not land are ignored)",
                record.num_rows()
            ),
        ));
    }
    let outputs = OutputColumn::from_relation(&shape.relation);
    let schema = record.schema();
    let mut replaced = Vec::with_capacity(record.num_columns());
    for (field, array) in schema.fields().iter().zip(record.columns()) {
        let name = field.name().as_str();
        let Some(i) = shape.relation.columns.iter().position(|c| c.name == name) else {
            let names: Vec<&str> = shape
                .relation
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(refused(
                Some(name),
                format!(
                    "its {what} name a column the table's output does not have (it has {}); \
                     name columns as this plugin's reshape leaves them",
                    names.join(", ")
                ),
            ));
        };
        let position = shape.wide_position(i) as u32;
        if replaced.iter().any(|(p, _)| *p == position) {
            return Err(refused(
                Some(name),
                format!("its {what} hold the column twice; return it once"),
            ));
        }
        let mut column = outputs[i].clone();
        column.nullable = shape.nullable(position as usize);
        let values = encode::column_values(&column, array.as_ref())
            .map_err(|m| refused(Some(name), format!("in its {what}: {m}")))?;
        replaced.push((position, values));
    }
    Ok(replaced)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{change, every_kind_batch, relation, tx};
    use super::*;

    fn interest(columns: Option<&[&str]>, old_images: bool) -> wit::Interest {
        wit::Interest {
            columns: columns.map(|c| c.iter().map(|s| s.to_string()).collect()),
            old_images,
            messages: false,
            whole_transactions: false,
        }
    }

    fn columns_of(batch: &Batch, interest: &wit::Interest) -> cw::ColumnBatch {
        let (relations, handles) = Relations::of(batch);
        let view = View::new(interest, &relations, None);
        batch_to_columns("test", batch, &relations, &handles, &view).unwrap()
    }

    fn names(record: &RecordBatch) -> Vec<String> {
        let schema = record.schema();
        schema.fields().iter().map(|f| f.name().clone()).collect()
    }

    /// Every column goes out typed as it lands and reads back into the values it came from:
    /// the row (a delete's old row), nulls for a truncate and for unchanged TOAST values, and
    /// the old images of updates in a stream of their own.
    #[test]
    fn a_batch_goes_out_by_column_as_the_lake_types_it_and_reads_back() {
        let mut batch = every_kind_batch();
        // Its array is two-dimensional in a column declared with one, which the lake refuses
        // (and so does this); make it fit.
        for change in batch.transactions.iter_mut().flat_map(|t| &mut t.changes) {
            for row in [&mut change.new, &mut change.old].into_iter().flatten() {
                for value in row.iter_mut() {
                    if let Value::Array(array) = value {
                        array.dims = vec![array.elements.len() as u32];
                    }
                }
            }
        }
        let (relations, handles) = Relations::of(&batch);
        let out = columns_of(&batch, &interest(None, true));
        assert_eq!(out.tables.len(), relations.relations.len());
        let places = places(&batch, &handles);
        let changes: Vec<&Change> = batch.transactions.iter().flat_map(|t| &t.changes).collect();
        for (handle, table) in out.tables.iter().enumerate() {
            let record = read_ipc(&table.rows).unwrap();
            let old = read_ipc(table.old.as_ref().expect("old images asked for")).unwrap();
            let columns = &relations.outputs[handle].1;
            let mine: Vec<usize> = (0..places.len())
                .filter(|&i| places[i].handle == handle as u32)
                .collect();
            assert_eq!(record.num_rows(), mine.len());
            assert_eq!(old.num_rows(), mine.len());
            assert_eq!(&names(&record)[..4], METADATA);
            let txn = record
                .column(0)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .unwrap();
            let at = record
                .column(1)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .unwrap();
            let seq = record
                .column(2)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .unwrap();
            let op = record
                .column(3)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            for (row, &i) in mine.iter().enumerate() {
                assert_eq!(txn.value(row), places[i].tx);
                assert_eq!(at.value(row), places[i].change);
                assert_eq!(seq.value(row), changes[i].seq);
                assert_eq!(op.value(row), changes[i].op.as_str());
            }
            for (c, column) in columns.iter().enumerate() {
                let array = record.column(4 + c);
                let field = encode::column_field(column);
                assert_eq!(array.data_type(), field.data_type(), "{}", column.name);
                if column.ty.dims > 0 {
                    let error = encode::column_values(column, array.as_ref()).unwrap_err();
                    assert!(error.contains("array column"), "{error}");
                    continue;
                }
                let back = encode::column_values(column, array.as_ref()).unwrap();
                let old_back = encode::column_values(column, old.column(c).as_ref()).unwrap();
                for (row, &i) in mine.iter().enumerate() {
                    let expected = match value_at(own_row(changes[i]), c) {
                        Value::UnchangedToast => &Value::Null,
                        v => v,
                    };
                    // money lands in minor units of the server's fraction digits.
                    if column.type_oid != crate::wire::pgtype::oid::MONEY {
                        assert_eq!(&back[row], expected, "{} row {row}", column.name);
                    }
                    let expected_old = match changes[i].op {
                        Op::Update => value_at(changes[i].old.as_deref(), c),
                        _ => &Value::Null,
                    };
                    if column.type_oid != crate::wire::pgtype::oid::MONEY {
                        assert_eq!(
                            &old_back[row], expected_old,
                            "old {} row {row}",
                            column.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn only_the_columns_a_plugin_reads_go_out() {
        let batch = every_kind_batch();
        let out = columns_of(&batch, &interest(Some(&["note", "email"]), false));
        let record = read_ipc(&out.tables[0].rows).unwrap();
        assert_eq!(names(&record), ["_txn", "_change", "_seq", "_op", "note"]);
        assert!(out.tables.iter().all(|t| t.old.is_none()));
        let out = columns_of(&batch, &interest(Some(&[]), true));
        for table in &out.tables {
            assert_eq!(names(&read_ipc(&table.rows).unwrap()), METADATA);
            let old = read_ipc(table.old.as_ref().unwrap()).unwrap();
            assert_eq!(old.num_columns(), 0);
        }
    }

    /// `users (id int8, email text)`: an insert, an update with an old image, a delete, then a
    /// second transaction's insert.
    fn users_batch() -> Batch {
        let users = relation(
            16400,
            "app",
            "users",
            &[("id", 20, true), ("email", 25, false)],
        );
        let row = |id: i64, email: &str| vec![Value::Int8(id), Value::Text(email.into())];
        Batch {
            transactions: vec![
                tx(
                    1,
                    100,
                    vec![
                        change(Op::Insert, &users, 0, Some(row(1, "a@x")), None),
                        change(
                            Op::Update,
                            &users,
                            1,
                            Some(row(1, "b@x")),
                            Some(row(1, "a@x")),
                        ),
                        change(Op::Delete, &users, 2, None, Some(row(2, "c@x"))),
                    ],
                ),
                tx(
                    2,
                    200,
                    vec![change(Op::Insert, &users, 0, Some(row(3, "d@x")), None)],
                ),
            ],
            messages: Vec::new(),
        }
    }

    fn stream(fields: Vec<Field>, arrays: Vec<ArrayRef>) -> Vec<u8> {
        let record = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap();
        ipc_bytes(&record).unwrap()
    }

    fn emails(values: &[Option<&str>]) -> Vec<u8> {
        let array: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
        stream(vec![Field::new("email", DataType::Utf8, true)], vec![array])
    }

    fn decide(
        batch: &Batch,
        output: cw::ColumnOutput,
    ) -> Result<(Vec<Emit>, Vec<wit::Rejection>), TransformError> {
        let (relations, handles) = Relations::of(batch);
        let shapes: Vec<Shape> = relations.relations.iter().map(Shape::unchanged).collect();
        output_to_emits("mask", batch, &relations, &shapes, &handles, output)
    }

    fn table(land: cw::Selection) -> cw::TableOutput {
        cw::TableOutput {
            land,
            columns: None,
            old: None,
            rejections: Vec::new(),
        }
    }

    fn text(value: &Value) -> &str {
        match value {
            Value::Text(s) => s,
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn everything_landing_unchanged_is_a_keep_per_change() {
        let batch = users_batch();
        let output = cw::ColumnOutput {
            tables: vec![table(cw::Selection::All)],
            rows: Vec::new(),
        };
        let (emits, rejections) = decide(&batch, output).unwrap();
        assert!(rejections.is_empty());
        let kept: Vec<(u32, u32)> = emits
            .iter()
            .map(|e| match e {
                Emit::Keep(at) => (at.transaction, at.change),
                _ => panic!("not a keep"),
            })
            .collect();
        assert_eq!(kept, [(0, 0), (0, 1), (0, 2), (1, 0)]);
        let none = cw::ColumnOutput {
            tables: vec![table(cw::Selection::Only(Vec::new()))],
            rows: Vec::new(),
        };
        assert!(decide(&batch, none).unwrap().0.is_empty());
    }

    /// Replaced columns become edits of the row and of the update's old image; a rejected row
    /// becomes a rejection of its change and does not land; unselected rows do not land.
    #[test]
    fn replaced_columns_become_edits_and_rejected_rows_rejections() {
        let batch = users_batch();
        let mut out = table(cw::Selection::Only(vec![0, 1, 2]));
        out.columns = Some(emails(&[Some("m0"), Some("m1"), Some("m2"), Some("m3")]));
        out.old = Some(emails(&[None, Some("o1"), None, None]));
        out.rejections = vec![cw::RowRejection {
            row: 2,
            class: "parse".into(),
            message: "no".into(),
        }];
        let output = cw::ColumnOutput {
            tables: vec![out],
            rows: Vec::new(),
        };
        let (emits, rejections) = decide(&batch, output).unwrap();
        assert_eq!(rejections.len(), 1);
        assert_eq!(
            (
                rejections[0].change.transaction,
                rejections[0].change.change
            ),
            (0, 2)
        );
        assert_eq!(rejections[0].class, "parse");
        assert_eq!(emits.len(), 2, "row 2 rejected, row 3 not selected");
        type Pairs = Vec<(u32, Value)>;
        let edits: Vec<(Pairs, Pairs)> = emits
            .into_iter()
            .map(|e| match e {
                Emit::Edit(Edit {
                    values: Replacements::Native(values),
                    old: Replacements::Native(old),
                    ..
                }) => (values, old),
                _ => panic!("not an edit"),
            })
            .collect();
        assert_eq!(edits[0].0.len(), 1);
        assert_eq!((edits[0].0[0].0, text(&edits[0].0[0].1)), (1, "m0"));
        assert!(edits[0].1.is_empty(), "an insert has no old image");
        assert_eq!(text(&edits[1].0[0].1), "m1");
        assert_eq!((edits[1].1[0].0, text(&edits[1].1[0].1)), (1, "o1"));
    }

    /// The plugin saw an unchanged TOAST value as null; its null leaves the value unchanged,
    /// and a row whose replacements all do so is a `keep`.
    #[test]
    fn a_null_over_an_unchanged_toast_value_leaves_it_unchanged() {
        let mut batch = users_batch();
        batch.transactions[0].changes[1].new = Some(vec![Value::Int8(1), Value::UnchangedToast]);
        let mut out = table(cw::Selection::All);
        out.columns = Some(emails(&[Some("m0"), None, Some("m2"), Some("m3")]));
        let output = cw::ColumnOutput {
            tables: vec![out],
            rows: Vec::new(),
        };
        let (emits, _) = decide(&batch, output).unwrap();
        assert!(matches!(emits[0], Emit::Edit(_)));
        assert!(
            matches!(&emits[1], Emit::Keep(at) if at.change == 1),
            "the update keeps its unchanged value"
        );
    }

    fn refusal(batch: &Batch, out: cw::TableOutput, tables: usize) -> String {
        let output = cw::ColumnOutput {
            tables: (0..tables)
                .map(|_| cw::TableOutput {
                    land: out.land.clone(),
                    columns: out.columns.clone(),
                    old: out.old.clone(),
                    rejections: Vec::new(),
                })
                .collect(),
            rows: Vec::new(),
        };
        match decide(batch, output) {
            Err(error @ TransformError::Columnar { .. }) => error.to_string(),
            Err(other) => panic!("another error: {other}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn output_that_does_not_fit_is_refused_naming_plugin_table_column_and_fix() {
        let batch = users_batch();
        let with = |columns: Vec<u8>| {
            let mut out = table(cw::Selection::All);
            out.columns = Some(columns);
            out
        };
        let error = refusal(&batch, table(cw::Selection::All), 2);
        assert!(error.contains("plugin \"mask\""), "{error}");
        assert!(
            error.contains("2 table outputs for a batch of 1"),
            "{error}"
        );

        let error = refusal(&batch, with(b"not arrow".to_vec()), 1);
        assert!(error.contains("for table app.users"), "{error}");
        assert!(error.contains("not an Arrow IPC stream"), "{error}");

        let error = refusal(&batch, with(emails(&[Some("x")])), 1);
        assert!(error.contains("hold 1 rows for a table of 4"), "{error}");
        assert!(error.contains("one row per row"), "{error}");

        let phone: ArrayRef = Arc::new(StringArray::from(vec!["1"; 4]));
        let bytes = stream(vec![Field::new("phone", DataType::Utf8, true)], vec![phone]);
        let error = refusal(&batch, with(bytes), 1);
        assert!(error.contains("(column \"phone\")"), "{error}");
        assert!(error.contains("it has id, email"), "{error}");

        let ints: ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![1; 4]));
        let bytes = stream(vec![Field::new("email", DataType::Int32, true)], vec![ints]);
        let error = refusal(&batch, with(bytes), 1);
        assert!(error.contains("(column \"email\")"), "{error}");
        assert!(
            error.contains("it is Int32, but a text column is Utf8"),
            "{error}"
        );

        let error = refusal(&batch, table(cw::Selection::Only(vec![1, 0])), 1);
        assert!(error.contains("names row 0 after row 1"), "{error}");
        let error = refusal(&batch, table(cw::Selection::Only(vec![4])), 1);
        assert!(error.contains("names row 4"), "{error}");
    }
}
