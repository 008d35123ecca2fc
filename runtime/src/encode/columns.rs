//! Rows to Arrow arrays, one column at a time.
//!
//! Each column is filled by a loop specialised to its kind, so the per-value work is one
//! match on the value and a push into a buffer sized for the chunk up front. Null and
//! unchanged-TOAST values become nulls; any other variant than the column's own is refused
//! with the row's index, which the caller turns into an error naming the change.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, BooleanBuilder, StringBuilder};
use arrow_array::types::{
    Date32Type, Decimal128Type, Decimal256Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Time64MicrosecondType, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, FixedSizeBinaryArray, PrimitiveArray, StringArray, StructArray,
};
use arrow_buffer::{Buffer, NullBufferBuilder, ScalarBuffer};
use arrow_schema::DataType;

use super::decimal;
use super::schema::{Kind, interval_fields};
use crate::change::{OutputRow, Value};

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
        Value::Numeric(s) | Value::Text(s) | Value::Json(s) | Value::Array(s) | Value::Other(s) => {
            s.len()
        }
        Value::Bytea(b) => b.len(),
        Value::Uuid(_) | Value::Interval { .. } => 16,
        _ => 8,
    }
}

/// Fills a primitive array; `pick` maps a non-null value to its native form.
fn primitive<T: ArrowPrimitiveType>(
    rows: &[OutputRow],
    col: usize,
    data_type: &DataType,
    mut pick: impl FnMut(&Value) -> Result<T::Native, String>,
) -> Result<ArrayRef, Refusal> {
    let mut values = Vec::with_capacity(rows.len());
    let mut nulls = NullBufferBuilder::new(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let value = &row.values[col];
        if is_null(value) {
            values.push(T::Native::default());
            nulls.append_null();
        } else {
            values.push(pick(value).map_err(|reason| (i, reason))?);
            nulls.append_non_null();
        }
    }
    let array = PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls.finish())
        .with_data_type(data_type.clone());
    Ok(Arc::new(array))
}

/// Fills a string array; `pick` returns the text of a value of the column's variant.
fn utf8(
    rows: &[OutputRow],
    col: usize,
    kind: Kind,
    pick: impl Fn(&Value) -> Option<&str>,
) -> Result<ArrayRef, Refusal> {
    let bytes = rows
        .iter()
        .map(|r| pick(&r.values[col]).map_or(0, str::len))
        .sum();
    let mut builder = StringBuilder::with_capacity(rows.len(), bytes);
    for (i, row) in rows.iter().enumerate() {
        let value = &row.values[col];
        match pick(value) {
            Some(text) => builder.append_value(text),
            None if is_null(value) => builder.append_null(),
            None => return Err((i, mismatch(kind, value))),
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn boolean(rows: &[OutputRow], col: usize, kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut builder = BooleanBuilder::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        match &row.values[col] {
            Value::Bool(b) => builder.append_value(*b),
            v if is_null(v) => builder.append_null(),
            v => return Err((i, mismatch(kind, v))),
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn binary(rows: &[OutputRow], col: usize, kind: Kind) -> Result<ArrayRef, Refusal> {
    let bytes = rows
        .iter()
        .map(|r| match &r.values[col] {
            Value::Bytea(b) => b.len(),
            _ => 0,
        })
        .sum();
    let mut builder = BinaryBuilder::with_capacity(rows.len(), bytes);
    for (i, row) in rows.iter().enumerate() {
        match &row.values[col] {
            Value::Bytea(b) => builder.append_value(b),
            v if is_null(v) => builder.append_null(),
            v => return Err((i, mismatch(kind, v))),
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn uuid(rows: &[OutputRow], col: usize, kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut bytes = Vec::with_capacity(rows.len() * 16);
    let mut nulls = NullBufferBuilder::new(rows.len());
    for (i, row) in rows.iter().enumerate() {
        match &row.values[col] {
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

fn interval(rows: &[OutputRow], col: usize, kind: Kind) -> Result<ArrayRef, Refusal> {
    let mut months = Vec::with_capacity(rows.len());
    let mut days = Vec::with_capacity(rows.len());
    let mut micros = Vec::with_capacity(rows.len());
    let mut nulls = NullBufferBuilder::new(rows.len());
    for (i, row) in rows.iter().enumerate() {
        match &row.values[col] {
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

/// Builds column `col` of `rows` as an array of `kind`'s Arrow type.
pub(super) fn build(
    rows: &[OutputRow],
    col: usize,
    kind: Kind,
    data_type: &DataType,
) -> Result<ArrayRef, Refusal> {
    let dt = data_type;
    match kind {
        Kind::Bool => boolean(rows, col, kind),
        Kind::Int2 => primitive::<Int16Type>(rows, col, dt, |v| match v {
            Value::Int2(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Int4 => primitive::<Int32Type>(rows, col, dt, |v| match v {
            Value::Int4(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Int8 => primitive::<Int64Type>(rows, col, dt, |v| match v {
            Value::Int8(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Oid => primitive::<UInt32Type>(rows, col, dt, |v| match v {
            Value::Int8(n) => u32::try_from(*n).map_err(|_| format!("oid {n} out of range")),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Float4 => primitive::<Float32Type>(rows, col, dt, |v| match v {
            Value::Float4(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Float8 => primitive::<Float64Type>(rows, col, dt, |v| match v {
            Value::Float8(n) => Ok(*n),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Decimal128 { precision, scale } => {
            primitive::<Decimal128Type>(rows, col, dt, |v| match v {
                Value::Numeric(text) => decimal::parse_i128(text, precision, scale),
                v => Err(mismatch(kind, v)),
            })
        }
        Kind::Decimal256 { precision, scale } => {
            primitive::<Decimal256Type>(rows, col, dt, |v| match v {
                Value::Numeric(text) => decimal::parse_i256(text, precision, scale),
                v => Err(mismatch(kind, v)),
            })
        }
        Kind::Date => primitive::<Date32Type>(rows, col, dt, |v| match v {
            Value::Date(d) => Ok(*d),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Time => primitive::<Time64MicrosecondType>(rows, col, dt, |v| match v {
            Value::Time(t) => Ok(*t),
            v => Err(mismatch(kind, v)),
        }),
        Kind::Timestamp => primitive::<TimestampMicrosecondType>(rows, col, dt, |v| match v {
            Value::Timestamp(t) => Ok(*t),
            v => Err(mismatch(kind, v)),
        }),
        Kind::TimestampTz => primitive::<TimestampMicrosecondType>(rows, col, dt, |v| match v {
            Value::TimestampTz(t) => Ok(*t),
            v => Err(mismatch(kind, v)),
        }),
        Kind::NumericText => utf8(rows, col, kind, |v| match v {
            Value::Numeric(s) => Some(s),
            _ => None,
        }),
        Kind::Text => utf8(rows, col, kind, |v| match v {
            Value::Text(s) => Some(s),
            _ => None,
        }),
        Kind::Json => utf8(rows, col, kind, |v| match v {
            Value::Json(s) => Some(s),
            _ => None,
        }),
        Kind::Array => utf8(rows, col, kind, |v| match v {
            Value::Array(s) => Some(s),
            _ => None,
        }),
        Kind::Other => utf8(rows, col, kind, |v| match v {
            Value::Other(s) => Some(s),
            _ => None,
        }),
        Kind::Bytea => binary(rows, col, kind),
        Kind::Uuid => uuid(rows, col, kind),
        Kind::Interval => interval(rows, col, kind),
    }
}

/// The change metadata columns of `rows`, in schema order.
pub(super) fn metadata(rows: &[OutputRow], commit_time_type: &DataType) -> [ArrayRef; 5] {
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
    ]
}
