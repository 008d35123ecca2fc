//! A landed Parquet file's rows as digests, identities or text. No IO: the bytes are given.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::digest::{BatchCells, DigestError, RowText, Shape, UNKNOWN_CELL, render_row};
use super::replay::{ChangeId, Landed, RowAt};
use crate::lake::encode::SUB_COLUMN;
use crate::stream::change::Op;

const BATCH_ROWS: usize = 8192;
const IDENTITY: [&str; 3] = ["_commit_lsn", "_seq", SUB_COLUMN];

/// Why a landed file cannot be read: a defect of the lake, reported, not a failure of verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("not readable as Parquet: {0}")]
    Parquet(String),
    #[error("has no column {0}")]
    NoColumn(&'static str),
    #[error("column {column} is {found}, not {expected}")]
    ColumnType {
        column: &'static str,
        found: String,
        expected: &'static str,
    },
    #[error("row {row} has _op {op:?}")]
    Op { row: usize, op: String },
    #[error(transparent)]
    Digest(#[from] DigestError),
}

fn parquet(error: impl std::fmt::Display) -> ReadError {
    ReadError::Parquet(error.to_string())
}

/// A committed file's rows, as the table comparison needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFile {
    pub rows: u64,
    pub landed: Vec<Landed>,
    /// Some row holds an unchanged TOAST value in a column of the shape's `toast`: the
    /// table's files must be read again with `toast` on.
    pub unchanged: bool,
}

/// A committed file's rows as identities only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFile {
    pub rows: u64,
    pub ids: Vec<(ChangeId, RowAt)>,
}

/// Read every batch of a Parquet file, with only the named root columns when `columns` is
/// given; returns the row count its footer declares.
fn batches(
    bytes: Bytes,
    columns: Option<&[&str]>,
    mut each: impl FnMut(&RecordBatch, usize) -> Result<(), ReadError>,
) -> Result<u64, ReadError> {
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(parquet)?
        .with_batch_size(BATCH_ROWS);
    let declared = builder.metadata().file_metadata().num_rows().max(0) as u64;
    if let Some(names) = columns {
        let roots: Vec<usize> = builder
            .schema()
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| names.contains(&f.name().as_str()))
            .map(|(i, _)| i)
            .collect();
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        builder = builder.with_projection(mask);
    }
    let mut offset = 0;
    for batch in builder.build().map_err(parquet)? {
        let batch = batch.map_err(parquet)?;
        each(&batch, offset)?;
        offset += batch.num_rows();
    }
    if offset as u64 != declared {
        return Err(ReadError::Parquet(format!(
            "its footer declares {declared} rows but it holds {offset}"
        )));
    }
    Ok(declared)
}

fn column<'a>(batch: &'a RecordBatch, name: &'static str) -> Result<&'a ArrayRef, ReadError> {
    batch.column_by_name(name).ok_or(ReadError::NoColumn(name))
}

/// An identity column as unsigned numbers: a Delta table's files hold them as `Int64` (Delta
/// has no unsigned types), never negative.
fn unsigned<T: arrow_array::ArrowPrimitiveType>(
    batch: &RecordBatch,
    name: &'static str,
    expected: &'static str,
) -> Result<arrow_array::PrimitiveArray<T>, ReadError> {
    let array = column(batch, name)?;
    let wrong = || ReadError::ColumnType {
        column: name,
        found: array.data_type().to_string(),
        expected,
    };
    let array = match array.data_type() {
        arrow_schema::DataType::Int64 => {
            arrow_cast::cast(array, &T::DATA_TYPE).map_err(|_| wrong())?
        }
        _ => array.clone(),
    };
    array.as_primitive_opt::<T>().cloned().ok_or_else(wrong)
}

/// The identities of a batch's rows; `_sub` is 0 where an output has none (tables').
fn identities(batch: &RecordBatch) -> Result<Vec<ChangeId>, ReadError> {
    let lsn = unsigned::<UInt64Type>(batch, "_commit_lsn", "UInt64")?;
    let seq = unsigned::<UInt32Type>(batch, "_seq", "UInt32")?;
    let sub = match batch.column_by_name(SUB_COLUMN) {
        Some(_) => Some(unsigned::<UInt32Type>(batch, SUB_COLUMN, "UInt32")?),
        None => None,
    };
    Ok((0..batch.num_rows())
        .map(|i| ChangeId {
            commit_lsn: lsn.value(i),
            seq: seq.value(i),
            sub: sub.as_ref().map_or(0, |s| s.value(i)),
        })
        .collect())
}

/// The identities of every row of a file of `file`'s position.
pub fn identity_file(bytes: Bytes, file: u32) -> Result<IdentityFile, ReadError> {
    let mut ids = Vec::new();
    let rows = batches(bytes, Some(&IDENTITY), |batch, offset| {
        for (i, id) in identities(batch)?.into_iter().enumerate() {
            let at = RowAt {
                file,
                row: (offset + i) as u32,
            };
            ids.push((id, at));
        }
        Ok(())
    })?;
    Ok(IdentityFile { rows, ids })
}

fn ops(batch: &RecordBatch) -> Result<Vec<Op>, ReadError> {
    let array = column(batch, "_op")?;
    // Written dictionary-encoded; read back as the schema says, cast whatever it is.
    let text = arrow_cast::cast(array.as_ref(), &DataType::Utf8).map_err(parquet)?;
    let text = text.as_string::<i32>();
    (0..text.len())
        .map(|i| match text.value(i) {
            "insert" => Ok(Op::Insert),
            "update" => Ok(Op::Update),
            "delete" => Ok(Op::Delete),
            "truncate" => Ok(Op::Truncate),
            "load" => Ok(Op::Load),
            other => Err(ReadError::Op {
                row: i,
                op: other.to_owned(),
            }),
        })
        .collect()
}

/// The columns of `shape` each row names in `_unchanged_toast`, as flags by column.
fn unchanged(batch: &RecordBatch, shape: &Shape) -> Vec<Option<Vec<bool>>> {
    let rows = batch.num_rows();
    let Some(list) = batch
        .column_by_name("_unchanged_toast")
        .and_then(|a| a.as_list_opt::<i32>())
    else {
        return vec![None; rows];
    };
    (0..rows)
        .map(|i| {
            if list.is_null(i) {
                return None;
            }
            let names = list.value(i);
            let names = names.as_string_opt::<i32>()?;
            let mut flags = vec![false; shape.columns.len()];
            for name in names.iter().flatten() {
                if let Some(col) = shape.columns.iter().position(|c| c == name) {
                    flags[col] = true;
                }
            }
            flags.contains(&true).then_some(flags)
        })
        .collect()
}

/// Every row of a table's file of `file`'s position, as landed changes; with `toast`, each
/// with the digests of its cells that may be unchanged TOAST values.
pub fn table_file(
    bytes: Bytes,
    shape: &Shape,
    file: u32,
    toast: bool,
) -> Result<TableFile, ReadError> {
    let mut landed = Vec::new();
    let mut any_unchanged = false;
    let rows = batches(bytes, None, |batch, offset| {
        let ids = identities(batch)?;
        let xids = unsigned::<UInt32Type>(batch, "_xid", "UInt32")?;
        let ops = ops(batch)?;
        let unchanged = unchanged(batch, shape);
        let mut cells = BatchCells::new(batch, shape)?;
        for i in 0..batch.num_rows() {
            let skip = unchanged[i].as_deref();
            let mut row = cells.row(i, skip);
            any_unchanged |= skip.is_some_and(|s| shape.toast.iter().any(|&col| s[col]));
            let toast = (toast && !shape.toast.is_empty()).then(|| {
                shape
                    .toast
                    .iter()
                    .map(|&col| match skip.is_some_and(|s| s[col]) {
                        true => None,
                        false => Some(cells.cell(col, i)),
                    })
                    .collect::<Box<[_]>>()
            });
            // An unchanged value in a column the table was not expected to land so: unknown.
            for (col, _) in skip
                .unwrap_or_default()
                .iter()
                .enumerate()
                .filter(|(_, s)| **s)
            {
                if !shape.toast.contains(&col) {
                    row = row.wrapping_add(UNKNOWN_CELL);
                }
            }
            let op = ops[i];
            let (key, old_key) = match (op, shape.key.is_some()) {
                (Op::Truncate | Op::Load, _) => (0, None),
                (Op::Insert, _) => (cells.key(i), None),
                (Op::Update, _) => (cells.key(i), cells.old_key(i)),
                (Op::Delete, true) => (cells.key(i), None),
                // Without a key the old image (under FULL, the whole row) is what goes.
                (Op::Delete, false) => (cells.old_key(i).unwrap_or_else(|| cells.key(i)), None),
            };
            landed.push(Landed {
                id: ids[i],
                op,
                xid: xids.value(i),
                key,
                old_key: old_key.unwrap_or_default(),
                has_old: old_key.is_some(),
                row,
                at: RowAt {
                    file,
                    row: (offset + i) as u32,
                },
                toast,
            });
        }
        Ok(())
    })?;
    Ok(TableFile {
        rows,
        landed,
        unchanged: any_unchanged,
    })
}

/// Rows `wanted` of a table's file as text, with the change each comes from, by row.
pub fn render_rows(
    bytes: Bytes,
    shape: &Shape,
    wanted: &[u32],
) -> Result<HashMap<u32, (ChangeId, RowText)>, ReadError> {
    let mut out = HashMap::new();
    batches(bytes, None, |batch, offset| {
        let rows = offset..offset + batch.num_rows();
        if !wanted.iter().any(|&row| rows.contains(&(row as usize))) {
            return Ok(());
        }
        let ids = identities(batch)?;
        for &row in wanted {
            if rows.contains(&(row as usize)) {
                let i = row as usize - offset;
                out.insert(row, (ids[i], render_row(batch, shape, i)));
            }
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::testing::{Row, batch};
    use super::*;
    use crate::lake::encode::{EncodeOptions, encode};
    use crate::stream::change::{OutputColumn, Value};
    use crate::wire::pgtype::oid;

    fn file(rows: Vec<Row>) -> Bytes {
        let columns = Arc::from(vec![
            OutputColumn::builtin("id", oid::INT4, -1),
            OutputColumn::builtin("body", oid::TEXT, -1),
        ]);
        let mut files = encode(&batch(columns, rows), &EncodeOptions::default()).unwrap();
        files.remove(0).bytes
    }

    fn shape(toast: Vec<usize>) -> Shape {
        Shape {
            table: "public.t".into(),
            columns: vec!["id".into(), "body".into()],
            key: Some(vec![0]),
            toast,
            format: crate::lake::TableFormat::Parquet,
        }
    }

    #[test]
    fn a_landed_file_reads_back_as_changes_keyed_like_the_source() {
        let (one, two) = (Value::Int4(1), Value::Int4(2));
        let text = |s: &str| Value::Text(s.into());
        let bytes = file(vec![
            (Op::Insert, 0x10, vec![one.clone(), text("a")], None),
            (
                Op::Update,
                0x20,
                vec![two.clone(), text("b")],
                Some(vec![one.clone(), Value::Null]),
            ),
            (Op::Delete, 0x30, vec![two.clone(), Value::Null], None),
            (Op::Truncate, 0x40, vec![Value::Null, Value::Null], None),
        ]);
        let shape = shape(vec![]);
        let read = table_file(bytes.clone(), &shape, 3, false).unwrap();
        assert_eq!(read.rows, 4);
        let l = &read.landed;
        assert_eq!(
            l.iter().map(|c| c.op).collect::<Vec<_>>(),
            [Op::Insert, Op::Update, Op::Delete, Op::Truncate]
        );
        assert_eq!(
            (l[1].has_old, l[1].old_key),
            (true, l[0].key),
            "the update moved key 1"
        );
        assert_eq!(l[2].key, l[1].key, "the delete removes key 2");
        assert_eq!(
            (l[1].id, l[1].at),
            (
                ChangeId {
                    commit_lsn: 0x20,
                    seq: 1,
                    sub: 0
                },
                RowAt { file: 3, row: 1 }
            )
        );
        let ids = identity_file(bytes.clone(), 3).unwrap();
        assert_eq!(ids.ids.len(), 4);
        assert_eq!(ids.ids[3].0.commit_lsn, 0x40);

        let text = render_rows(bytes, &shape, &[1]).unwrap();
        assert_eq!(text[&1].0, l[1].id);
        assert_eq!(
            text[&1].1,
            [
                ("id".to_owned(), "2".to_owned()),
                ("body".to_owned(), "\"b\"".to_owned())
            ]
        );
    }

    #[test]
    fn unchanged_toast_cells_are_left_out_of_the_row() {
        let bytes = file(vec![(
            Op::Update,
            0x10,
            vec![Value::Int4(1), Value::UnchangedToast],
            None,
        )]);
        let first = table_file(bytes.clone(), &shape(vec![1]), 0, false).unwrap();
        assert!(first.unchanged && first.landed[0].toast.is_none());
        let read = table_file(bytes.clone(), &shape(vec![1]), 0, true).unwrap();
        let change = &read.landed[0];
        assert_eq!(change.toast.as_deref(), Some(&[None][..]));
        let whole = table_file(bytes, &shape(vec![]), 0, true).unwrap();
        assert!(
            !whole.unchanged,
            "nothing to read again where TOAST is not expected"
        );
        assert_eq!(
            whole.landed[0].row,
            change.row.wrapping_add(UNKNOWN_CELL),
            "where unchanged TOAST is not expected, the value is unknown"
        );
    }

    #[test]
    fn bytes_that_are_not_parquet_are_a_defect_with_a_reason() {
        let err =
            table_file(Bytes::from_static(b"not parquet"), &shape(vec![]), 0, false).unwrap_err();
        assert!(matches!(err, ReadError::Parquet(_)), "{err}");
    }
}
