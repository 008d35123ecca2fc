//! Digests of cells, rows and keys, and the text of rows, from Arrow arrays. No IO.
//!
//! Both sides of a comparison reach this module as Arrow: the lake's rows as the Parquet
//! reader returns them, the source's as the encoder builds them from the values it read
//! ([`encode::to_record_batch`](crate::lake::encode::to_record_batch)), so one column has one Arrow
//! type on both sides and one function digests it. A cell's digest is a 128-bit hash of a
//! canonical, self-delimiting encoding of its value (nulls, list lengths and struct fields
//! included, integers widened so a column widened by `ALTER TABLE` still compares by
//! value); a row's digest is the wrapping sum of its cells' digests, each keyed by the
//! column's position, so one cell's contribution can be swapped for another's (an unchanged
//! TOAST value filled in from the row's earlier version); a key's digest hashes its columns'
//! encodings in order. Only digests are kept per row, never the values.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, BinaryArray, BooleanArray, FixedSizeBinaryArray, GenericListArray, LargeStringArray,
    PrimitiveArray, RecordBatch, StringArray, StringViewArray, StructArray,
};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, TimeUnit};
use twox_hash::XxHash3_128;

use crate::lake::encode::{METADATA_COLUMNS, OLD_COLUMN, SUB_COLUMN};

/// A 128-bit digest.
pub type Digest = u128;

/// A row as text: `(column, value)` in the table's column order.
pub type RowText = Vec<(String, String)>;

const CELL_SEED: u64 = 0x7472_6962_6365_6c6c;
const KEY_SEED: u64 = 0x7472_6962_6b65_7973;
/// What a cell whose value the lake never had adds to its row: no real cell digests to it.
pub const UNKNOWN_CELL: Digest = 0x7472_6962_7574_6172_795f_756e_6b6e_6f77;

/// Longest text of one value in a printed row.
const MAX_VALUE_CHARS: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column:?} has Arrow type {data_type}, which verify does not compare")]
pub struct DigestError {
    pub column: String,
    pub data_type: String,
}

/// How a table's rows are compared: its columns by name, its key, and which columns an
/// update may land as an unchanged TOAST value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// `schema.table`.
    pub table: String,
    pub columns: Vec<String>,
    /// Positions of the key columns in `columns`; `None`: the table has no key, and its rows
    /// are compared as a multiset.
    pub key: Option<Vec<usize>>,
    /// Positions of the columns whose untouched TOASTed values land as null, named in
    /// `_unchanged_toast` (`source.unchanged_toast = "null"` on a table that is not
    /// `REPLICA IDENTITY FULL`).
    pub toast: Vec<usize>,
    /// The lake's table format: the source's rows are compared in the format's types
    /// ([`conform_batch`](crate::lake::tables::conform_batch)).
    pub format: crate::lake::TableFormat,
}

/// One column's cells, read for digesting.
enum Cells<'a> {
    /// The batch has no such column (a file written before it was added): all null.
    Absent,
    Bool(&'a BooleanArray),
    I16(&'a PrimitiveArray<Int16Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I64(&'a PrimitiveArray<Int64Type>),
    U32(&'a PrimitiveArray<UInt32Type>),
    U64(&'a PrimitiveArray<UInt64Type>),
    F32(&'a PrimitiveArray<Float32Type>),
    F64(&'a PrimitiveArray<Float64Type>),
    Decimal(&'a PrimitiveArray<Decimal128Type>, i8),
    Date(&'a PrimitiveArray<Date32Type>),
    Time(&'a PrimitiveArray<Time64MicrosecondType>),
    Timestamp(&'a PrimitiveArray<TimestampMicrosecondType>),
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
    Utf8View(&'a StringViewArray),
    Binary(&'a BinaryArray),
    Fixed(&'a FixedSizeBinaryArray),
    List(&'a GenericListArray<i32>, Box<Cells<'a>>),
    Struct(&'a StructArray, Vec<Cells<'a>>),
}

/// Value kinds in the canonical encoding, after the non-null marker.
mod tag {
    pub const NULL: u8 = 0;
    pub const BOOL: u8 = 1;
    pub const INT: u8 = 2;
    pub const F32: u8 = 3;
    pub const F64: u8 = 4;
    pub const DECIMAL: u8 = 5;
    pub const DATE: u8 = 6;
    pub const TIME: u8 = 7;
    pub const TIMESTAMP: u8 = 8;
    pub const TEXT: u8 = 9;
    pub const BYTES: u8 = 10;
    pub const LIST: u8 = 11;
    pub const STRUCT: u8 = 12;
}

impl<'a> Cells<'a> {
    fn new(name: &str, array: &'a dyn Array) -> Result<Cells<'a>, DigestError> {
        Ok(match array.data_type() {
            DataType::Boolean => Cells::Bool(array.as_boolean()),
            DataType::Int16 => Cells::I16(array.as_primitive()),
            DataType::Int32 => Cells::I32(array.as_primitive()),
            DataType::Int64 => Cells::I64(array.as_primitive()),
            DataType::UInt32 => Cells::U32(array.as_primitive()),
            DataType::UInt64 => Cells::U64(array.as_primitive()),
            DataType::Float32 => Cells::F32(array.as_primitive()),
            DataType::Float64 => Cells::F64(array.as_primitive()),
            DataType::Decimal128(_, scale) => Cells::Decimal(array.as_primitive(), *scale),
            DataType::Date32 => Cells::Date(array.as_primitive()),
            DataType::Time64(TimeUnit::Microsecond) => Cells::Time(array.as_primitive()),
            DataType::Timestamp(TimeUnit::Microsecond, _) => Cells::Timestamp(array.as_primitive()),
            DataType::Utf8 => Cells::Utf8(array.as_string()),
            DataType::LargeUtf8 => Cells::LargeUtf8(array.as_string()),
            DataType::Utf8View => Cells::Utf8View(array.as_string_view()),
            DataType::Binary => Cells::Binary(array.as_binary()),
            DataType::FixedSizeBinary(_) => Cells::Fixed(array.as_fixed_size_binary()),
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                Cells::List(list, Box::new(Cells::new(name, list.values().as_ref())?))
            }
            DataType::Struct(_) => {
                let s = array.as_struct();
                let children = s
                    .columns()
                    .iter()
                    .map(|c| Cells::new(name, c.as_ref()))
                    .collect::<Result<_, _>>()?;
                Cells::Struct(s, children)
            }
            other => {
                return Err(DigestError {
                    column: name.to_owned(),
                    data_type: other.to_string(),
                });
            }
        })
    }

    fn is_null(&self, i: usize) -> bool {
        match self {
            Cells::Absent => true,
            Cells::Bool(a) => a.is_null(i),
            Cells::I16(a) => a.is_null(i),
            Cells::I32(a) => a.is_null(i),
            Cells::I64(a) => a.is_null(i),
            Cells::U32(a) => a.is_null(i),
            Cells::U64(a) => a.is_null(i),
            Cells::F32(a) => a.is_null(i),
            Cells::F64(a) => a.is_null(i),
            Cells::Decimal(a, _) => a.is_null(i),
            Cells::Date(a) => a.is_null(i),
            Cells::Time(a) => a.is_null(i),
            Cells::Timestamp(a) => a.is_null(i),
            Cells::Utf8(a) => a.is_null(i),
            Cells::LargeUtf8(a) => a.is_null(i),
            Cells::Utf8View(a) => a.is_null(i),
            Cells::Binary(a) => a.is_null(i),
            Cells::Fixed(a) => a.is_null(i),
            Cells::List(a, _) => a.is_null(i),
            Cells::Struct(a, _) => a.is_null(i),
        }
    }

    /// Append the canonical encoding of cell `i` to `out`.
    fn write(&self, i: usize, out: &mut Vec<u8>) {
        if self.is_null(i) {
            out.push(tag::NULL);
            return;
        }
        let int = |out: &mut Vec<u8>, v: i128| {
            out.push(tag::INT);
            out.extend(v.to_le_bytes());
        };
        let bytes = |out: &mut Vec<u8>, kind: u8, b: &[u8]| {
            out.push(kind);
            out.extend((b.len() as u64).to_le_bytes());
            out.extend(b);
        };
        match self {
            Cells::Absent => unreachable!("absent cells are null"),
            Cells::Bool(a) => out.extend([tag::BOOL, u8::from(a.value(i))]),
            Cells::I16(a) => int(out, a.value(i).into()),
            Cells::I32(a) => int(out, a.value(i).into()),
            Cells::I64(a) => int(out, a.value(i).into()),
            Cells::U32(a) => int(out, a.value(i).into()),
            Cells::U64(a) => int(out, a.value(i).into()),
            // One NaN, whatever its payload bits.
            Cells::F32(a) => {
                let v = a.value(i);
                let v = if v.is_nan() { f32::NAN } else { v };
                out.push(tag::F32);
                out.extend(v.to_bits().to_le_bytes());
            }
            Cells::F64(a) => {
                let v = a.value(i);
                let v = if v.is_nan() { f64::NAN } else { v };
                out.push(tag::F64);
                out.extend(v.to_bits().to_le_bytes());
            }
            Cells::Decimal(a, scale) => {
                out.extend([tag::DECIMAL, *scale as u8]);
                out.extend(a.value(i).to_le_bytes());
            }
            Cells::Date(a) => {
                out.push(tag::DATE);
                out.extend(a.value(i).to_le_bytes());
            }
            Cells::Time(a) => {
                out.push(tag::TIME);
                out.extend(a.value(i).to_le_bytes());
            }
            Cells::Timestamp(a) => {
                out.push(tag::TIMESTAMP);
                out.extend(a.value(i).to_le_bytes());
            }
            Cells::Utf8(a) => bytes(out, tag::TEXT, a.value(i).as_bytes()),
            Cells::LargeUtf8(a) => bytes(out, tag::TEXT, a.value(i).as_bytes()),
            Cells::Utf8View(a) => bytes(out, tag::TEXT, a.value(i).as_bytes()),
            Cells::Binary(a) => bytes(out, tag::BYTES, a.value(i)),
            Cells::Fixed(a) => bytes(out, tag::BYTES, a.value(i)),
            Cells::List(a, items) => {
                let offsets = a.value_offsets();
                let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
                out.push(tag::LIST);
                out.extend(((end - start) as u64).to_le_bytes());
                for j in start..end {
                    items.write(j, out);
                }
            }
            Cells::Struct(_, children) => {
                out.push(tag::STRUCT);
                out.extend((children.len() as u32).to_le_bytes());
                for child in children {
                    child.write(i, out);
                }
            }
        }
    }
}

/// The cells of a table's columns in one batch, found by name: a lake file (whatever columns
/// it was written with) or a batch the encoder built from source rows.
pub struct BatchCells<'a> {
    values: Vec<Cells<'a>>,
    /// `_old`'s fields, by the same columns; `None` when the batch has no `_old`.
    old: Option<(&'a StructArray, Vec<Cells<'a>>)>,
    key: Option<&'a [usize]>,
    buf: Vec<u8>,
}

/// The positions of an encoder-made batch's own columns: after the metadata, before `_old` or
/// `_sub`.
fn data_columns(batch: &RecordBatch) -> std::ops::Range<usize> {
    let fields = batch.schema_ref().fields();
    let end = match fields.last() {
        Some(f) if f.name() == OLD_COLUMN || f.name() == SUB_COLUMN => fields.len() - 1,
        _ => fields.len(),
    };
    METADATA_COLUMNS.len().min(end)..end
}

fn find<'a>(
    names: impl Iterator<Item = &'a str>,
    arrays: &'a [arrow_array::ArrayRef],
    shape: &Shape,
) -> Result<Vec<Cells<'a>>, DigestError> {
    let by_name: std::collections::HashMap<&str, &dyn Array> =
        names.zip(arrays.iter().map(|a| a.as_ref())).collect();
    shape
        .columns
        .iter()
        .map(|name| match by_name.get(name.as_str()) {
            Some(array) => Cells::new(name, *array),
            None => Ok(Cells::Absent),
        })
        .collect()
}

impl<'a> BatchCells<'a> {
    pub fn new(batch: &'a RecordBatch, shape: &'a Shape) -> Result<BatchCells<'a>, DigestError> {
        let range = data_columns(batch);
        let schema = batch.schema_ref();
        let names = schema.fields()[range.clone()]
            .iter()
            .map(|f| f.name().as_str());
        let values = find(names, &batch.columns()[range], shape)?;
        let old = match batch.column_by_name(OLD_COLUMN) {
            Some(array) if matches!(array.data_type(), DataType::Struct(_)) => {
                let s = array.as_struct();
                let names = s.fields().iter().map(|f| f.name().as_str());
                Some((s, find(names, s.columns(), shape)?))
            }
            _ => None,
        };
        Ok(BatchCells {
            values,
            old,
            key: shape.key.as_deref(),
            buf: Vec::with_capacity(256),
        })
    }

    /// The cells of a batch whose columns are found by name wherever they are (a
    /// current-state table's file: some change metadata, the columns, no `_old`).
    pub fn named(batch: &'a RecordBatch, shape: &'a Shape) -> Result<BatchCells<'a>, DigestError> {
        let schema = batch.schema_ref();
        let names = schema.fields().iter().map(|f| f.name().as_str());
        Ok(BatchCells {
            values: find(names, batch.columns(), shape)?,
            old: None,
            key: shape.key.as_deref(),
            buf: Vec::with_capacity(256),
        })
    }

    /// The digest of column `col`'s cell in row `i`, as it adds to the row's digest.
    pub fn cell(&mut self, col: usize, i: usize) -> Digest {
        cell_digest(&self.values[col], col, i, &mut self.buf)
    }

    /// The digest of row `i`: the sum of its cells' digests, leaving out the columns
    /// `skip` marks.
    pub fn row(&mut self, i: usize, skip: Option<&[bool]>) -> Digest {
        let mut sum: Digest = 0;
        for col in 0..self.values.len() {
            if skip.is_some_and(|s| s[col]) {
                continue;
            }
            sum = sum.wrapping_add(self.cell(col, i));
        }
        sum
    }

    /// The digest of row `i`'s key; for a table without a key, of the whole row.
    pub fn key(&mut self, i: usize) -> Digest {
        match self.key {
            Some(key) => key_digest(&self.values, key, i, &mut self.buf),
            None => self.row(i, None),
        }
    }

    /// Whether row `i` has an old image (`_old` is not null).
    pub fn has_old(&self, i: usize) -> bool {
        self.old.as_ref().is_some_and(|(s, _)| s.is_valid(i))
    }

    /// The digest of the key of row `i`'s old image (the whole old row for a table without a
    /// key), or `None` when it has none.
    pub fn old_key(&mut self, i: usize) -> Option<Digest> {
        if !self.has_old(i) {
            return None;
        }
        let (_, cells) = self.old.as_ref().expect("checked");
        Some(match self.key {
            Some(key) => key_digest(cells, key, i, &mut self.buf),
            None => (0..cells.len())
                .map(|col| cell_digest(&cells[col], col, i, &mut self.buf))
                .fold(0, Digest::wrapping_add),
        })
    }
}

fn cell_digest(cells: &Cells<'_>, col: usize, i: usize, buf: &mut Vec<u8>) -> Digest {
    buf.clear();
    buf.extend((col as u32).to_le_bytes());
    cells.write(i, buf);
    XxHash3_128::oneshot_with_seed(CELL_SEED, buf)
}

fn key_digest(cells: &[Cells<'_>], key: &[usize], i: usize, buf: &mut Vec<u8>) -> Digest {
    buf.clear();
    for &col in key {
        cells[col].write(i, buf);
    }
    XxHash3_128::oneshot_with_seed(KEY_SEED, buf)
}

/// Row `i` of `batch` as text, one `(column, value)` per column of `shape`: strings quoted,
/// nulls as `null`, columns the batch lacks as `(absent)`, long values cut.
pub fn render_row(batch: &RecordBatch, shape: &Shape, i: usize) -> RowText {
    let range = data_columns(batch);
    let schema = batch.schema_ref();
    let options = FormatOptions::new()
        .with_null("null")
        .with_quoted_strings(true);
    shape
        .columns
        .iter()
        .map(|name| {
            let found = schema.fields()[range.clone()]
                .iter()
                .position(|f| f.name() == name)
                .map(|p| batch.column(range.start + p));
            let text = match found {
                None => "(absent)".to_owned(),
                Some(array) => match ArrayFormatter::try_new(array.as_ref(), &options) {
                    Ok(formatter) => cut(formatter.value(i).to_string()),
                    Err(e) => format!("(cannot print: {e})"),
                },
            };
            (name.clone(), text)
        })
        .collect()
}

fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_VALUE_CHARS) {
        Some((at, _)) => format!("{}... ({} bytes)", &text[..at], text.len()),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lake::encode::to_record_batch;
    use crate::stream::change::{Op, OutputColumn, Value};
    use crate::wire::pgtype::oid;

    fn columns() -> Arc<[OutputColumn]> {
        vec![
            OutputColumn::builtin("id", oid::INT4, -1),
            OutputColumn::builtin("tags", oid::TEXT_ARRAY, -1),
            OutputColumn::builtin("body", oid::TEXT, -1),
        ]
        .into()
    }

    fn shape() -> Shape {
        Shape {
            table: "public.t".into(),
            columns: vec!["id".into(), "tags".into(), "body".into()],
            key: Some(vec![0]),
            toast: vec![],
            format: crate::lake::TableFormat::Parquet,
        }
    }

    fn batch(rows: Vec<(Vec<Value>, Option<Vec<Value>>)>) -> RecordBatch {
        let rows = rows
            .into_iter()
            .map(|(values, old)| (Op::Insert, 0x10, values, old))
            .collect();
        to_record_batch(&super::super::testing::batch(columns(), rows)).unwrap()
    }

    fn text(s: &str) -> Value {
        Value::Text(s.into())
    }

    fn tags(items: &[&str]) -> Value {
        Value::Array(Box::new(crate::stream::change::Array::from_elements(
            items.iter().map(|t| text(t)).collect(),
        )))
    }

    #[test]
    fn equal_values_digest_alike_and_list_boundaries_count() {
        let b = batch(vec![
            (vec![Value::Int4(1), tags(&["a, b"]), text("x")], None),
            (vec![Value::Int4(1), tags(&["a", "b"]), text("x")], None),
            (vec![Value::Int4(1), tags(&["a, b"]), text("x")], None),
            (vec![Value::Int4(1), tags(&["a, b"]), Value::Null], None),
            (vec![Value::Int4(1), tags(&["a, b"]), text("")], None),
        ]);
        let shape = shape();
        let mut cells = BatchCells::new(&b, &shape).unwrap();
        let rows: Vec<Digest> = (0..5).map(|i| cells.row(i, None)).collect();
        assert_eq!(rows[0], rows[2]);
        assert_ne!(rows[0], rows[1], "one element with a comma is not two");
        assert_ne!(rows[3], rows[4], "null is not the empty string");
        assert_eq!(cells.key(0), cells.key(1), "the key is the id alone");
        // A row's digest is its cells' sum, so one cell can be swapped out.
        let skip = [false, false, true];
        assert_eq!(
            cells.row(0, Some(&skip)).wrapping_add(cells.cell(2, 0)),
            rows[0]
        );
    }

    #[test]
    fn old_images_key_like_rows_and_absent_columns_read_as_null() {
        let b = batch(vec![
            (
                vec![Value::Int4(2), Value::Null, text("new")],
                Some(vec![Value::Int4(1), Value::Null, Value::Null]),
            ),
            (vec![Value::Int4(1), Value::Null, Value::Null], None),
        ]);
        let shape = shape();
        let mut cells = BatchCells::new(&b, &shape).unwrap();
        assert_eq!(cells.old_key(0), Some(cells.key(1)));
        assert_eq!(cells.old_key(1), None);

        // A file written before `extra` was added: its cells are null.
        let mut wider = shape.clone();
        wider.columns.push("extra".into());
        let mut cells = BatchCells::new(&b, &wider).unwrap();
        assert_eq!(cells.cell(3, 0), {
            let mut buf = Vec::new();
            cell_digest(&Cells::Absent, 3, 0, &mut buf)
        });
        assert_eq!(render_row(&b, &wider, 0)[3].1, "(absent)");
    }

    #[test]
    fn rows_render_with_quoted_strings_and_nulls() {
        let b = batch(vec![(
            vec![Value::Int4(7), tags(&["a, b"]), Value::Null],
            None,
        )]);
        let text: Vec<String> = render_row(&b, &shape(), 0)
            .into_iter()
            .map(|(c, v)| format!("{c}={v}"))
            .collect();
        assert_eq!(text, ["id=7", "tags=[\"a, b\"]", "body=null"]);
        assert_eq!(
            cut("é".repeat(300)).chars().count(),
            200 + " (600 bytes)".len() + 3
        );
    }
}
