//! Rows to Arrow arrays, one column at a time.
//!
//! Each column is filled by a loop specialised to its kind, so the per-value work is one
//! match on the value and a push into a buffer sized for the chunk up front. Null and
//! unchanged-TOAST values become nulls; any other variant than the column's own is refused
//! with the row's index, which the caller turns into an error naming the change.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, BooleanBuilder, ListBuilder, StringBuilder};
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, FixedSizeBinaryArray, ListArray, PrimitiveArray, StringArray,
    StructArray,
};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::DataType;

use super::decimal;
use super::schema::{Kind, interval_fields, timetz_fields, unchanged_toast_item};
use crate::stream::change::{OutputColumn, OutputRow, Value};

/// `-infinity` dates and timestamps are written one above the type's minimum: the values
/// DuckDB (and Arrow's own convention for it) read as `-infinity`, where the minimum itself is
/// out of DuckDB's range and fails the whole column. `infinity` is the maximum, which they
/// already read as `infinity`.
pub(super) const NEG_INFINITY_DATE: i32 = i32::MIN + 1;
pub(super) const NEG_INFINITY_TIMESTAMP: i64 = i64::MIN + 1;

fn timestamp(micros: i64) -> i64 {
    if micros == i64::MIN {
        NEG_INFINITY_TIMESTAMP
    } else {
        micros
    }
}

/// Why a row's value could not go into its column: the row's index in the chunk and a reason.
pub(super) type Refusal = (usize, String);

fn is_null(value: &Value) -> bool {
    // An unchanged TOAST value was not sent, so there is nothing to write; a later policy
    // may fill it from the previous image instead.
    matches!(value, Value::Null | Value::UnchangedToast)
}

fn mismatch(kind: Kind, value: &Value) -> String {
    format!("expected a {} value, got {}", kind.expected(), value.kind())
}

/// The payload length a value adds to a chunk; used to bound chunks by bytes.
pub(super) fn value_bytes(value: &Value) -> usize {
    match value {
        Value::Numeric(s) | Value::Text(s) | Value::Json(s) | Value::Other(s) => s.len(),
        Value::Array(a) => a.elements.iter().map(value_bytes).sum::<usize>() + 8,
        Value::Bytea(b) => b.len(),
        Value::Uuid(_) | Value::Interval { .. } => 16,
        _ => 8,
    }
}

/// Fills a primitive array; `pick` maps a non-null value to its native form.
fn primitive<T: ArrowPrimitiveType>(
    values: &[&Value],
    data_type: &DataType,
    mut pick: impl FnMut(&Value) -> Result<T::Native, String>,
) -> Result<ArrayRef, Refusal> {
    let mut natives = Vec::with_capacity(values.len());
    let mut nulls = NullBufferBuilder::new(values.len());
    for (i, &value) in values.iter().enumerate() {
        if is_null(value) {
            natives.push(T::Native::default());
            nulls.append_null();
        } else {
            natives.push(pick(value).map_err(|reason| (i, reason))?);
            nulls.append_non_null();
        }
    }
    let array = PrimitiveArray::<T>::new(ScalarBuffer::from(natives), nulls.finish())
        .with_data_type(data_type.clone());
    Ok(Arc::new(array))
}

/// Fills a string array; `pick` returns the text of a value of the column's variant.
fn utf8(
    values: &[&Value],
    kind: Kind,
    pick: impl Fn(&Value) -> Option<&str>,
) -> Result<ArrayRef, Refusal> {
    let bytes = values.iter().map(|v| pick(v).map_or(0, str::len)).sum();
    let mut builder = StringBuilder::with_capacity(values.len(), bytes);
    for (i, &value) in values.iter().enumerate() {
        match pick(value) {
            Some(text) => builder.append_value(text),
            None if is_null(value) => builder.append_null(),
            None => return Err((i, mismatch(kind, value))),
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn boolean(values: &[&Value], kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut builder = BooleanBuilder::with_capacity(values.len());
    for (i, &value) in values.iter().enumerate() {
        match value {
            Value::Bool(b) => builder.append_value(*b),
            v if is_null(v) => builder.append_null(),
            v => return Err((i, mismatch(kind, v))),
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn binary(values: &[&Value], kind: Kind) -> Result<ArrayRef, Refusal> {
    let bytes = values
        .iter()
        .map(|v| match v {
            Value::Bytea(b) => b.len(),
            _ => 0,
        })
        .sum();
    let mut builder = BinaryBuilder::with_capacity(values.len(), bytes);
    for (i, &value) in values.iter().enumerate() {
        match value {
            Value::Bytea(b) => builder.append_value(b),
            v if is_null(v) => builder.append_null(),
            v => return Err((i, mismatch(kind, v))),
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn uuid(values: &[&Value], kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut bytes = Vec::with_capacity(values.len() * 16);
    let mut nulls = NullBufferBuilder::new(values.len());
    for (i, &value) in values.iter().enumerate() {
        match value {
            Value::Uuid(u) => {
                bytes.extend_from_slice(u);
                nulls.append_non_null();
            }
            v if is_null(v) => {
                bytes.extend_from_slice(&[0; 16]);
                nulls.append_null();
            }
            v => return Err((i, mismatch(kind, v))),
        }
    }
    Ok(Arc::new(FixedSizeBinaryArray::new(
        16,
        Buffer::from_vec(bytes),
        nulls.finish(),
    )))
}

fn interval(values: &[&Value], kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut months = Vec::with_capacity(values.len());
    let mut days = Vec::with_capacity(values.len());
    let mut micros = Vec::with_capacity(values.len());
    let mut nulls = NullBufferBuilder::new(values.len());
    for (i, &value) in values.iter().enumerate() {
        match value {
            Value::Interval {
                months: m,
                days: d,
                micros: u,
            } => {
                months.push(*m);
                days.push(*d);
                micros.push(*u);
                nulls.append_non_null();
            }
            v if is_null(v) => {
                months.push(0);
                days.push(0);
                micros.push(0);
                nulls.append_null();
            }
            v => return Err((i, mismatch(kind, v))),
        }
    }
    let children: Vec<ArrayRef> = vec![
        Arc::new(PrimitiveArray::<Int32Type>::new(months.into(), None)),
        Arc::new(PrimitiveArray::<Int32Type>::new(days.into(), None)),
        Arc::new(PrimitiveArray::<Int64Type>::new(micros.into(), None)),
    ];
    Ok(Arc::new(StructArray::new(
        interval_fields(),
        children,
        nulls.finish(),
    )))
}

fn timetz(values: &[&Value], kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut times = Vec::with_capacity(values.len());
    let mut offsets = Vec::with_capacity(values.len());
    let mut nulls = NullBufferBuilder::new(values.len());
    for (i, &value) in values.iter().enumerate() {
        match value {
            Value::TimeTz { micros, offset } => {
                times.push(*micros);
                offsets.push(*offset);
                nulls.append_non_null();
            }
            v if is_null(v) => {
                times.push(0);
                offsets.push(0);
                nulls.append_null();
            }
            v => return Err((i, mismatch(kind, v))),
        }
    }
    let children: Vec<ArrayRef> = vec![
        Arc::new(PrimitiveArray::<Time64MicrosecondType>::new(
            times.into(),
            None,
        )),
        Arc::new(PrimitiveArray::<Int32Type>::new(offsets.into(), None)),
    ];
    Ok(Arc::new(StructArray::new(
        timetz_fields(),
        children,
        nulls.finish(),
    )))
}

/// Builds column `col` of `rows` as an array of the column's Arrow type: `kind`'s, wrapped in
/// `dims` levels of lists for an array column.
pub(super) fn build_column(
    rows: &[OutputRow],
    col: usize,
    kind: Kind,
    dims: u8,
    data_type: &DataType,
) -> Result<ArrayRef, Refusal> {
    let values: Vec<&Value> = rows.iter().map(|r| &r.values[col]).collect();
    build_values(&values, kind, dims, data_type)
}

pub(super) fn build_values(
    values: &[&Value],
    kind: Kind,
    dims: u8,
    data_type: &DataType,
) -> Result<ArrayRef, Refusal> {
    if dims == 0 {
        build(values, kind, data_type)
    } else {
        list(values, kind, dims, data_type)
    }
}

/// The `_old` struct: each column of the old images, null where a row has none. Refusals
/// name the row and the column.
pub(super) fn old_images(
    rows: &[OutputRow],
    columns: &[OutputColumn],
    kinds: &[Kind],
    data_type: &DataType,
) -> Result<ArrayRef, (usize, usize, String)> {
    static NULL: Value = Value::Null;
    let DataType::Struct(fields) = data_type else {
        unreachable!("_old is a struct");
    };
    let mut children = Vec::with_capacity(columns.len());
    for (col, (column, &kind)) in columns.iter().zip(kinds).enumerate() {
        let values: Vec<&Value> = rows
            .iter()
            .map(|r| r.old.as_ref().and_then(|old| old.get(col)).unwrap_or(&NULL))
            .collect();
        let child = build_values(&values, kind, column.ty.dims, fields[col].data_type())
            .map_err(|(row, reason)| (row, col, format!("in the old image: {reason}")))?;
        children.push(child);
    }
    let mut nulls = NullBufferBuilder::new(rows.len());
    for row in rows {
        nulls.append(row.old.is_some());
    }
    Ok(Arc::new(StructArray::new(
        fields.clone(),
        children,
        nulls.finish(),
    )))
}

/// Array values as nested lists: one offsets buffer per dimension, the elements flattened
/// underneath. Only the outermost level is nullable; a null or missing value is a null list,
/// an empty array an empty one.
fn list(
    values: &[&Value],
    kind: Kind,
    dims: u8,
    data_type: &DataType,
) -> Result<ArrayRef, Refusal> {
    let depth = usize::from(dims);
    let mut offsets: Vec<Vec<i32>> = vec![vec![0]; depth];
    let mut nulls = NullBufferBuilder::new(values.len());
    let mut elements: Vec<&Value> = Vec::new();
    // The row each element came from, to name it in an error.
    let mut element_rows: Vec<usize> = Vec::new();
    let too_many = |i: usize| {
        (
            i,
            "an array column holds more elements than Arrow addresses".to_owned(),
        )
    };
    for (i, &value) in values.iter().enumerate() {
        let array = match value {
            Value::Array(array) => array,
            v if is_null(v) => {
                let end = *offsets[0].last().expect("offsets start at 0");
                offsets[0].push(end);
                nulls.append_null();
                continue;
            }
            v => return Err((i, mismatch(kind, v))),
        };
        nulls.append_non_null();
        if array.dims.is_empty() {
            let end = *offsets[0].last().expect("offsets start at 0");
            offsets[0].push(end);
            continue;
        }
        if array.dims.len() != depth {
            return Err((
                i,
                format!(
                    "a {}-dimensional array in a column declared with {depth} (declare the column \
                     with as many [] as its values have dimensions)",
                    array.dims.len()
                ),
            ));
        }
        if !array.is_consistent() {
            return Err((
                i,
                "an array whose shape does not match its elements".to_owned(),
            ));
        }
        let mut lists_at_level = 1usize;
        for (level, &len) in array.dims.iter().enumerate() {
            let level_offsets = &mut offsets[level];
            for _ in 0..lists_at_level {
                let end = *level_offsets.last().expect("offsets start at 0");
                let next = i32::try_from(len)
                    .ok()
                    .and_then(|len| end.checked_add(len))
                    .ok_or_else(|| too_many(i))?;
                level_offsets.push(next);
            }
            lists_at_level *= len as usize;
        }
        for element in &array.elements {
            if matches!(element, Value::Array(_)) {
                return Err((i, "an array element that is itself an array".to_owned()));
            }
            elements.push(element);
            element_rows.push(i);
        }
    }
    let mut item_types = Vec::with_capacity(depth);
    let mut dt = data_type;
    for _ in 0..depth {
        let DataType::List(item) = dt else {
            unreachable!("array columns have list types as deep as their dimensions");
        };
        item_types.push(Arc::clone(item));
        dt = item.data_type();
    }
    let mut array = build(&elements, kind, dt).map_err(|(e, reason)| (element_rows[e], reason))?;
    for level in (0..depth).rev() {
        let level_nulls = if level == 0 { nulls.finish() } else { None };
        let list = ListArray::try_new(
            Arc::clone(&item_types[level]),
            OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut offsets[level]))),
            array,
            level_nulls,
        )
        .map_err(|e| (0, format!("building a list column: {e}")))?;
        array = Arc::new(list);
    }
    Ok(array)
}

/// Builds `values` as an array of `kind`'s Arrow type.
fn build(values: &[&Value], kind: Kind, data_type: &DataType) -> Result<ArrayRef, Refusal> {
    let dt = data_type;
    let rows = values;
    match kind {
        Kind::Bool => boolean(rows, kind),
        Kind::Int2 => primitive::<Int16Type>(rows, dt, |v| match v {
            Value::Int2(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Int4 => primitive::<Int32Type>(rows, dt, |v| match v {
            Value::Int4(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Int8 => primitive::<Int64Type>(rows, dt, |v| match v {
            Value::Int8(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Oid => primitive::<UInt32Type>(rows, dt, |v| match v {
            Value::Int8(n) => u32::try_from(*n).map_err(|_| format!("oid {n} out of range")),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Float4 => primitive::<Float32Type>(rows, dt, |v| match v {
            Value::Float4(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Float8 => primitive::<Float64Type>(rows, dt, |v| match v {
            Value::Float8(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Decimal128 { precision, scale } => {
            primitive::<Decimal128Type>(rows, dt, |v| match v {
                Value::Numeric(text) => decimal::parse_i128(text, precision, scale),
                v => Err(mismatch(kind, v)),
            })
        }
        Kind::Date => primitive::<Date32Type>(rows, dt, |v| match v {
            Value::Date(d) => Ok(if *d == i32::MIN {
                NEG_INFINITY_DATE
            } else {
                *d
            }),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Time => primitive::<Time64MicrosecondType>(rows, dt, |v| match v {
            Value::Time(t) => Ok(*t),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Timestamp => primitive::<TimestampMicrosecondType>(rows, dt, |v| match v {
            Value::Timestamp(t) => Ok(timestamp(*t)),
            v => Err(mismatch(kind, v)),
        }),
        Kind::TimestampTz => primitive::<TimestampMicrosecondType>(rows, dt, |v| match v {
            Value::TimestampTz(t) => Ok(timestamp(*t)),
            v => Err(mismatch(kind, v)),
        }),
        Kind::NumericText => utf8(rows, kind, |v| match v {
            Value::Numeric(s) => Some(s),
            _ => None,
        }),
        Kind::Text => utf8(rows, kind, |v| match v {
            Value::Text(s) => Some(s),
            _ => None,
        }),
        Kind::Json => utf8(rows, kind, |v| match v {
            Value::Json(s) => Some(s),
            _ => None,
        }),
        Kind::Other => utf8(rows, kind, |v| match v {
            Value::Other(s) => Some(s),
            _ => None,
        }),
        Kind::Bytea => binary(rows, kind),
        Kind::Uuid => uuid(rows, kind),
        Kind::Interval => interval(rows, kind),
        Kind::TimeTz => timetz(rows, kind),
    }
}

/// The change metadata columns of `rows`, in schema order.
pub(super) fn metadata(
    rows: &[OutputRow],
    columns: &[OutputColumn],
    commit_time_type: &DataType,
    fingerprint: &str,
) -> [ArrayRef; 7] {
    let ops = StringArray::from_iter_values(rows.iter().map(|r| r.op.as_str()));
    let lsns = PrimitiveArray::<UInt64Type>::from_iter_values(rows.iter().map(|r| r.commit_lsn.0));
    let seqs = PrimitiveArray::<UInt32Type>::from_iter_values(rows.iter().map(|r| r.seq));
    let xids = PrimitiveArray::<UInt32Type>::from_iter_values(rows.iter().map(|r| r.xid));
    let times = PrimitiveArray::<TimestampMicrosecondType>::from_iter_values(
        rows.iter().map(|r| r.commit_time),
    )
    .with_data_type(commit_time_type.clone());
    [
        Arc::new(ops),
        Arc::new(lsns),
        Arc::new(seqs),
        Arc::new(xids),
        Arc::new(times),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            fingerprint,
            rows.len(),
        ))),
        unchanged_toast(rows, columns),
    ]
}

/// Per row, the names of the columns that hold an unchanged TOAST value (written as null),
/// or null when there are none.
fn unchanged_toast(rows: &[OutputRow], columns: &[OutputColumn]) -> ArrayRef {
    let mut builder =
        ListBuilder::new(StringBuilder::new()).with_field(Arc::new(unchanged_toast_item()));
    for row in rows {
        let mut any = false;
        for (value, column) in row.values.iter().zip(columns) {
            if matches!(value, Value::UnchangedToast) {
                builder.values().append_value(&column.name);
                any = true;
            }
        }
        builder.append(any);
    }
    Arc::new(builder.finish())
}
