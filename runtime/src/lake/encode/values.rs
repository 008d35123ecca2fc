//! Arrow arrays back to values, the inverse of `columns.rs`: for the columns a plugin of the
//! `columnar` interface returns, which must be typed exactly as their column lands.
//!
//! Every kind a scalar column has reads back into the [`Value`] variant `columns.rs` takes for
//! it, so a value that goes out and comes back unchanged is the same value. Array columns
//! (lists) are not read back: a plugin replaces them with a typed row.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, UInt32Type,
};
use arrow_array::{Array, ArrowPrimitiveType, PrimitiveArray};

use super::columns::{NEG_INFINITY_DATE, NEG_INFINITY_TIMESTAMP};
use super::schema::Kind;
use crate::stream::change::{OutputColumn, Value};

/// The values of `array`, one per row, for `column`; or why the array is not one of its
/// values (its type, a null where the column may not hold one).
pub(crate) fn column_values(
    column: &OutputColumn,
    array: &dyn Array,
) -> Result<Vec<Value>, String> {
    let kind = Kind::of(column);
    if column.ty.dims > 0 {
        return Err(format!(
            "it is an array column ({}), which a plugin cannot replace by column yet; emit a \
             typed row for these changes instead",
            super::schema::type_label(column)
        ));
    }
    let expected = kind.data_type();
    if !array.data_type().equals_datatype(&expected) {
        return Err(format!(
            "it is {}, but a {} column is {expected}; return the column typed as it lands \
             (docs/plugins.md, the columnar interface)",
            array.data_type(),
            super::schema::type_label(column)
        ));
    }
    if !column.nullable && array.null_count() > 0 {
        let row = (0..array.len()).find(|&i| array.is_null(i)).unwrap_or(0);
        return Err(format!(
            "row {row} is null, but the column is declared not nullable; give every row a value"
        ));
    }
    let mut values = Vec::with_capacity(array.len());
    let null = |i: usize| array.is_null(i);
    match kind {
        Kind::Bool => {
            let a = array.as_boolean();
            values.extend((0..a.len()).map(|i| match null(i) {
                true => Value::Null,
                false => Value::Bool(a.value(i)),
            }));
        }
        Kind::Int2 => primitive::<Int16Type>(array, &mut values, Value::Int2),
        Kind::Int4 => primitive::<Int32Type>(array, &mut values, Value::Int4),
        Kind::Int8 => primitive::<Int64Type>(array, &mut values, Value::Int8),
        Kind::Oid => primitive::<UInt32Type>(array, &mut values, |n| Value::Int8(i64::from(n))),
        Kind::Float4 => primitive::<Float32Type>(array, &mut values, Value::Float4),
        Kind::Float8 => primitive::<Float64Type>(array, &mut values, Value::Float8),
        Kind::Decimal128 { scale, .. } => primitive::<Decimal128Type>(array, &mut values, |n| {
            Value::Numeric(decimal_text(n, scale))
        }),
        Kind::Date => primitive::<Date32Type>(array, &mut values, |d| {
            Value::Date(if d == NEG_INFINITY_DATE { i32::MIN } else { d })
        }),
        Kind::Time => primitive::<Time64MicrosecondType>(array, &mut values, Value::Time),
        Kind::Timestamp => primitive::<TimestampMicrosecondType>(array, &mut values, |t| {
            Value::Timestamp(from_timestamp(t))
        }),
        Kind::TimestampTz => primitive::<TimestampMicrosecondType>(array, &mut values, |t| {
            Value::TimestampTz(from_timestamp(t))
        }),
        Kind::Text | Kind::NumericText | Kind::Json | Kind::Other => {
            let a = array.as_string::<i32>();
            let make = match kind {
                Kind::Text => Value::Text,
                Kind::NumericText => Value::Numeric,
                Kind::Json => Value::Json,
                _ => Value::Other,
            };
            values.extend((0..a.len()).map(|i| match null(i) {
                true => Value::Null,
                false => make(a.value(i).to_owned()),
            }));
        }
        Kind::Bytea => {
            let a = array.as_binary::<i32>();
            values.extend((0..a.len()).map(|i| match null(i) {
                true => Value::Null,
                false => Value::Bytea(a.value(i).to_vec()),
            }));
        }
        Kind::Uuid => {
            let a = array.as_fixed_size_binary();
            for i in 0..a.len() {
                values.push(match null(i) {
                    true => Value::Null,
                    false => Value::Uuid(a.value(i).try_into().map_err(|_| "a uuid of 16 bytes")?),
                });
            }
        }
        Kind::Interval => {
            let a = array.as_struct();
            let months = a.column(0).as_primitive::<Int32Type>();
            let days = a.column(1).as_primitive::<Int32Type>();
            let micros = a.column(2).as_primitive::<Int64Type>();
            values.extend((0..a.len()).map(|i| match null(i) {
                true => Value::Null,
                false => Value::Interval {
                    months: months.value(i),
                    days: days.value(i),
                    micros: micros.value(i),
                },
            }));
        }
        Kind::TimeTz => {
            let a = array.as_struct();
            let times = a.column(0).as_primitive::<Time64MicrosecondType>();
            let offsets = a.column(1).as_primitive::<Int32Type>();
            values.extend((0..a.len()).map(|i| match null(i) {
                true => Value::Null,
                false => Value::TimeTz {
                    micros: times.value(i),
                    offset: offsets.value(i),
                },
            }));
        }
    }
    Ok(values)
}

fn primitive<T: ArrowPrimitiveType>(
    array: &dyn Array,
    values: &mut Vec<Value>,
    make: impl Fn(T::Native) -> Value,
) {
    let a: &PrimitiveArray<T> = array.as_primitive();
    values.extend((0..a.len()).map(|i| match a.is_null(i) {
        true => Value::Null,
        false => make(a.value(i)),
    }));
}

fn from_timestamp(micros: i64) -> i64 {
    if micros == NEG_INFINITY_TIMESTAMP {
        i64::MIN
    } else {
        micros
    }
}

/// A scaled integer as PostgreSQL prints a `numeric(p,s)`: `-12.340` for -12340 at scale 3.
fn decimal_text(n: i128, scale: i8) -> String {
    let digits = n.unsigned_abs().to_string();
    let scale = scale.max(0) as usize;
    let sign = if n < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_print_as_postgresql_prints_them() {
        assert_eq!(decimal_text(-12340, 3), "-12.340");
        assert_eq!(decimal_text(5, 2), "0.05");
        assert_eq!(decimal_text(-5, 2), "-0.05");
        assert_eq!(decimal_text(0, 2), "0.00");
        assert_eq!(decimal_text(42, 0), "42");
    }
}

#[cfg(test)]
mod column_tests {
    use super::*;
    use crate::stream::change::OutputColumn;

    #[test]
    fn a_null_where_the_column_may_hold_none_is_refused_with_its_row() {
        let mut column = OutputColumn::builtin("region", crate::wire::pgtype::oid::TEXT, -1);
        column.nullable = false;
        let array = arrow_array::StringArray::from(vec![Some("eu"), None]);
        let error = column_values(&column, &array).unwrap_err();
        assert!(error.contains("row 1 is null"), "{error}");
        assert!(error.contains("not nullable"), "{error}");
        column.nullable = true;
        assert_eq!(
            column_values(&column, &array).unwrap(),
            [Value::Text("eu".into()), Value::Null]
        );
    }
}
