//! PostgreSQL types: built-in OIDs, names, what a column's type resolves to, and decoding of
//! text and binary values into [`Value`]s.
//!
//! pgoutput sends column values in each type's text output form, or with `binary 'true'` in
//! its binary send form. The replication session pins the settings that shape the text form
//! (`DateStyle=ISO`, `TimeZone=UTC`, `IntervalStyle=postgres`, `extra_float_digits=3`,
//! `bytea_output=hex`), so [`decode_text`] parses exactly those forms and rejects anything
//! else with a [`ValueError`] rather than guessing; [`decode_binary`] produces the same
//! [`Value`] from the binary form of the same value.
//!
//! Which [`Value`] variant a column's [`ColumnType`] decodes to:
//!
//! | type | value |
//! |---|---|
//! | `bool` | `Bool` |
//! | `int2`, `int4`, `int8` | `Int2`, `Int4`, `Int8` |
//! | `oid` | `Int8` (an oid is unsigned 32-bit, which `Int4` cannot hold) |
//! | `float4`, `float8` | `Float4`, `Float8`, including NaN and ±infinity |
//! | `numeric` | `Numeric`, the exact text as printed |
//! | `money` | `Numeric`, the amount without currency symbol or grouping (`-1234.56`) |
//! | `text`, `varchar`, `bpchar`, `name`, `"char"`, `xml`, enums, `citext` | `Text` |
//! | `inet`, `cidr`, `macaddr`, `macaddr8` | `Text`, as PostgreSQL prints them |
//! | `bytea` | `Bytea` |
//! | `date` | `Date`, days since 1970-01-01; ±infinity are `i32::MAX` / `i32::MIN` |
//! | `time` | `Time`, microseconds since midnight |
//! | `timetz` | `TimeTz`, local microseconds since midnight and seconds east of UTC |
//! | `timestamp`, `timestamptz` | `Timestamp`, `TimestampTz`, microseconds since 1970 (UTC for `timestamptz`); ±infinity are `i64::MAX` / `i64::MIN` |
//! | `interval` | `Interval` |
//! | `uuid` | `Uuid` |
//! | `json`, `jsonb` | `Json` |
//! | a domain | what its base type decodes to |
//! | arrays of any of these | `Array` of the element values |
//! | everything else (composites, ranges, geometric and extension types) | `Other`, the text form |

mod array;
mod binary;
mod column;
mod datetime;
mod net;
pub mod oid;
mod value;

pub use column::{ColumnType, DEFAULT_MONEY_DIGITS, TypeCatalog, TypeRow};
pub use datetime::days_from_civil;
pub use value::{Array, Value, uuid_text};

/// How much of an offending value an error message quotes.
const QUOTED_CHARS: usize = 64;

/// A column value that does not parse as its declared type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {text:?} as {type_name}: {reason}")]
pub struct ValueError {
    pub type_name: String,
    /// The offending value, cut to its first 64 characters (marked with `...`) when longer;
    /// binary values are shown as hex.
    pub text: String,
    pub reason: String,
}

impl ValueError {
    fn new(ty: &ColumnType, text: &[u8], reason: &str) -> Self {
        let full = String::from_utf8_lossy(text);
        ValueError::quoting(ty, &full, reason)
    }

    fn binary(ty: &ColumnType, bytes: &[u8], reason: &str) -> Self {
        let hex: String = bytes
            .iter()
            .take(QUOTED_CHARS / 2 + 1)
            .map(|b| format!("{b:02x}"))
            .collect();
        ValueError::quoting(ty, &format!("\\x{hex}"), &format!("binary form: {reason}"))
    }

    fn quoting(ty: &ColumnType, full: &str, reason: &str) -> Self {
        let text = match full.char_indices().nth(QUOTED_CHARS) {
            Some((cut, _)) => format!("{}...", &full[..cut]),
            None => full.to_owned(),
        };
        ValueError {
            type_name: ty.label(),
            text,
            reason: reason.to_owned(),
        }
    }
}

/// Decode the text output of a value of a column of type `ty`.
pub fn decode_text(ty: &ColumnType, text: &[u8]) -> Result<Value, ValueError> {
    if ty.is_array() {
        return text_array(ty, text).map_err(|reason| ValueError::new(ty, text, reason));
    }
    scalar_text(ty.scalar, ty.modifier, text).map_err(|reason| ValueError::new(ty, text, reason))
}

/// Decode the binary send form of a value of a column of type `ty`.
pub fn decode_binary(ty: &ColumnType, bytes: &[u8]) -> Result<Value, ValueError> {
    let fail = |reason: &str| ValueError::binary(ty, bytes, reason);
    if !ty.reads_binary() {
        return Err(fail(
            "this type has no binary decoder; set source.binary = false to receive it as text",
        ));
    }
    if !ty.is_array() {
        return binary::decode(ty.scalar, ty.modifier, bytes).map_err(fail);
    }
    let parsed = binary::array(bytes).map_err(fail)?;
    if type_name(parsed.element_oid).is_some() && parsed.element_oid != ty.scalar {
        return Err(fail("array elements of another type than the column's"));
    }
    let elements = parsed
        .elements
        .iter()
        .map(|element| match element {
            None => Ok(Value::Null),
            Some(b) => binary::decode(ty.scalar, ty.modifier, b),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    Ok(Value::Array(Box::new(Array {
        dims: parsed.dims,
        elements,
    })))
}

fn text_array(ty: &ColumnType, text: &[u8]) -> Result<Value, &'static str> {
    // `box` is the one built-in type whose array delimiter is not a comma.
    let delimiter = if ty.scalar == oid::BOX { b';' } else { b',' };
    let parsed = array::parse(text, delimiter)?;
    let elements = parsed
        .elements
        .into_iter()
        .map(|element| match element {
            None => Ok(Value::Null),
            Some(text) => scalar_text(ty.scalar, ty.modifier, text.as_bytes()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Value::Array(Box::new(Array {
        dims: parsed.dims,
        elements,
    })))
}

/// Decode the text of one scalar of the built-in type `type_oid` (or of a type kept as
/// text).
fn scalar_text(type_oid: u32, modifier: i32, text: &[u8]) -> Result<Value, &'static str> {
    let utf8 = || std::str::from_utf8(text).map_err(|_| "not valid UTF-8");
    let value = match type_oid {
        oid::BOOL => match text {
            b"t" => Value::Bool(true),
            b"f" => Value::Bool(false),
            _ => return Err("expected 't' or 'f'"),
        },
        oid::INT2 => Value::Int2(parse_int::<i16>(text).ok_or(INT_REASON)?),
        oid::INT4 => Value::Int4(parse_int::<i32>(text).ok_or(INT_REASON)?),
        oid::INT8 => Value::Int8(parse_int::<i64>(text).ok_or(INT_REASON)?),
        oid::OID => {
            let n = parse_int::<i64>(text)
                .filter(|n| u32::try_from(*n).is_ok())
                .ok_or("expected an unsigned 32-bit integer")?;
            Value::Int8(n)
        }
        oid::FLOAT4 => {
            Value::Float4(parse_float(text, f32::NAN, f32::INFINITY).ok_or(FLOAT_REASON)?)
        }
        oid::FLOAT8 => {
            Value::Float8(parse_float(text, f64::NAN, f64::INFINITY).ok_or(FLOAT_REASON)?)
        }
        oid::NUMERIC => {
            if !is_numeric_text(text) {
                return Err("expected digits with an optional sign and point, NaN or Infinity");
            }
            Value::Numeric(utf8()?.to_owned())
        }
        oid::MONEY => Value::Numeric(parse_money(text, modifier)?),
        _ if is_text_like(type_oid) => Value::Text(utf8()?.to_owned()),
        oid::BYTEA => Value::Bytea(parse_bytea(text)?),
        oid::DATE => Value::Date(datetime::parse_date(text)?),
        oid::TIME => Value::Time(datetime::parse_time(text)?),
        oid::TIMETZ => {
            let (micros, offset) = datetime::parse_timetz(text)?;
            Value::TimeTz { micros, offset }
        }
        oid::TIMESTAMP => Value::Timestamp(datetime::parse_timestamp(text, false)?),
        oid::TIMESTAMPTZ => Value::TimestampTz(datetime::parse_timestamp(text, true)?),
        oid::INTERVAL => {
            let (months, days, micros) = datetime::parse_interval(text)?;
            Value::Interval {
                months,
                days,
                micros,
            }
        }
        oid::UUID => Value::Uuid(
            parse_uuid(text).ok_or("expected 32 hexadecimal digits grouped 8-4-4-4-12")?,
        ),
        oid::JSON | oid::JSONB => Value::Json(utf8()?.to_owned()),
        _ => Value::Other(utf8()?.to_owned()),
    };
    Ok(value)
}

/// `money` in minor units to the amount as a decimal with `digits` fraction digits.
fn money_text(minor_units: i128, digits: i32) -> String {
    let digits = digits.clamp(0, 18) as usize;
    let magnitude = minor_units.unsigned_abs().to_string();
    let padded = format!("{magnitude:0>width$}", width = digits + 1);
    let (whole, fraction) = padded.split_at(padded.len() - digits);
    let sign = if minor_units < 0 { "-" } else { "" };
    if digits == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

/// `cash_out` text (`$1,234.56`, `-$1,234.56`, `($1.00)` in some locales) to the amount: the
/// digits are the value in minor units whatever the currency symbol and grouping.
fn parse_money(text: &[u8], digits: i32) -> Result<String, &'static str> {
    let negative = text.iter().any(|&b| b == b'-' || b == b'(');
    let mut minor: i128 = 0;
    let mut seen = false;
    for &b in text {
        if b.is_ascii_digit() {
            minor = minor * 10 + i128::from(b - b'0');
            seen = true;
            if minor > i128::from(u64::MAX) {
                return Err("money amount out of range");
            }
        }
    }
    if !seen {
        return Err("expected a money amount");
    }
    Ok(money_text(if negative { -minor } else { minor }, digits))
}

const INT_REASON: &str = "expected an integer in range";
const FLOAT_REASON: &str = "expected a decimal number, NaN, Infinity or -Infinity";

/// The name of a built-in type, as `pg_type.typname` spells it.
pub fn type_name(type_oid: u32) -> Option<&'static str> {
    oid::SCALARS
        .iter()
        .enumerate()
        .find_map(|(i, &(scalar, name, array))| {
            if scalar == type_oid {
                Some(name)
            } else if array == type_oid {
                Some(oid::ARRAY_NAMES[i])
            } else {
                None
            }
        })
}

/// Built-in types whose values are strings: character types, `xml`, and the network types,
/// kept as PostgreSQL prints them.
pub fn is_text_like(type_oid: u32) -> bool {
    matches!(
        type_oid,
        oid::TEXT
            | oid::VARCHAR
            | oid::BPCHAR
            | oid::NAME
            | oid::CHAR
            | oid::XML
            | oid::INET
            | oid::CIDR
            | oid::MACADDR
            | oid::MACADDR8
    )
}

/// Every built-in type the pipeline knows by OID: each scalar, then each array type.
pub fn builtin_types() -> impl Iterator<Item = u32> {
    oid::SCALARS
        .iter()
        .map(|s| s.0)
        .chain(oid::SCALARS.iter().map(|s| s.2))
}

/// The array type over a built-in scalar type.
pub fn array_of(type_oid: u32) -> Option<u32> {
    oid::SCALARS.iter().find(|s| s.0 == type_oid).map(|s| s.2)
}

/// The element type of a built-in array type.
pub fn array_element(type_oid: u32) -> Option<u32> {
    oid::SCALARS.iter().find(|s| s.2 == type_oid).map(|s| s.0)
}

/// An optionally signed decimal integer, without overflow.
fn parse_int<T: TryFrom<i64>>(text: &[u8]) -> Option<T> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // Accumulate negatively so that i64::MIN, whose magnitude i64 cannot hold, parses.
    let mut n: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
    }
    let n = if negative { n } else { n.checked_neg()? };
    T::try_from(n).ok()
}

/// Parsed straight into the target width: going through `f64` for a `float4` would round
/// twice and could land on the wrong `f32`.
fn parse_float<F>(text: &[u8], nan: F, infinity: F) -> Option<F>
where
    F: std::str::FromStr + std::ops::Neg<Output = F>,
{
    match text {
        b"NaN" => Some(nan),
        b"Infinity" => Some(infinity),
        b"-Infinity" => Some(-infinity),
        // Rust also reads "inf" and "nan" spellings PostgreSQL never prints; requiring a
        // digit keeps the accepted set to PostgreSQL's own.
        _ if text.iter().any(u8::is_ascii_digit) => std::str::from_utf8(text).ok()?.parse().ok(),
        _ => None,
    }
}

/// `-?digits[.digits]`, `NaN`, `Infinity` or `-Infinity`: the forms `numeric_out` prints.
fn is_numeric_text(text: &[u8]) -> bool {
    if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
        return true;
    }
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    let (whole, fraction) = match digits.iter().position(|&b| b == b'.') {
        Some(point) => (&digits[..point], &digits[point + 1..]),
        None => (digits, &b"0"[..]),
    };
    !whole.is_empty()
        && !fraction.is_empty()
        && whole.iter().chain(fraction).all(u8::is_ascii_digit)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn parse_bytea(text: &[u8]) -> Result<Vec<u8>, &'static str> {
    let hex = text
        .strip_prefix(b"\\x")
        .ok_or("expected the hex form \\x...; is bytea_output set to hex?")?;
    if hex.len() % 2 != 0 {
        return Err("odd number of hexadecimal digits");
    }
    hex.chunks_exact(2)
        .map(|pair| Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or("expected hexadecimal digits")
}

fn parse_uuid(text: &[u8]) -> Option<[u8; 16]> {
    if text.len() != 36 || [8, 13, 18, 23].iter().any(|&i| text[i] != b'-') {
        return None;
    }
    let mut nibbles = text.iter().filter(|&&b| b != b'-');
    let mut out = [0u8; 16];
    for byte in &mut out {
        *byte = hex_digit(*nibbles.next()?)? << 4 | hex_digit(*nibbles.next()?)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
