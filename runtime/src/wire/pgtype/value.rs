//! Typed PostgreSQL values: what [`decode_text`](super::decode_text) and
//! [`decode_binary`](super::decode_binary) make of a column's wire form, and what the rest of
//! the pipeline carries (re-exported as `crate::stream::change::Value`).

/// A PostgreSQL value, typed.
///
/// Times are counted from the Unix epoch in UTC. `infinity` and `-infinity` dates and
/// timestamps are the largest and smallest values of their representation.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// A TOASTed value an update left untouched; PostgreSQL did not send it.
    UnchangedToast,
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Float4(f32),
    Float8(f64),
    /// An exact decimal as PostgreSQL prints it (`-12.340`, `NaN`, `Infinity`).
    Numeric(String),
    Text(String),
    Bytea(Vec<u8>),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since midnight.
    Time(i64),
    /// Microseconds since 1970-01-01 00:00:00, no time zone.
    Timestamp(i64),
    /// Microseconds since 1970-01-01 00:00:00 UTC.
    TimestampTz(i64),
    Uuid([u8; 16]),
    /// `json` or `jsonb`, as text.
    Json(String),
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
    /// `timetz`: the local time of day and its UTC offset.
    TimeTz {
        /// Microseconds since midnight, local time.
        micros: i64,
        /// Seconds east of UTC (`+05:30` is 19 800).
        offset: i32,
    },
    /// An array of any dimensionality; its elements are values of the element type.
    Array(Box<Array>),
    /// Any other type (composites, ranges, extension types), in its text form.
    Other(String),
}

/// The canonical text of a uuid: lowercase hex in groups of 8-4-4-4-12.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(HEX[usize::from(byte >> 4)] as char);
        text.push(HEX[usize::from(byte & 15)] as char);
    }
    text
}

/// A PostgreSQL array: its shape and its elements in row-major order.
///
/// `{{1,2,3},{4,5,6}}` has `dims == [2, 3]` and six elements. An empty array (`{}`) has no
/// dimensions and no elements. PostgreSQL's lower bounds (`[0:2]={...}`) are not kept:
/// elements are positions in a list.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// The length of each dimension, outermost first.
    pub dims: Vec<u32>,
    /// `dims.iter().product()` elements: scalars or `Null`, never arrays.
    pub elements: Vec<Value>,
}

impl Array {
    /// A one-dimensional array.
    pub fn from_elements(elements: Vec<Value>) -> Array {
        let dims = if elements.is_empty() {
            Vec::new()
        } else {
            vec![elements.len() as u32]
        };
        Array { dims, elements }
    }

    /// Whether the shape and the number of elements agree.
    pub fn is_consistent(&self) -> bool {
        let expected = if self.dims.is_empty() {
            0
        } else {
            self.dims.iter().map(|&d| d as usize).product()
        };
        expected == self.elements.len() && !self.dims.contains(&0)
    }
}

impl Value {
    /// The name of the variant, as the WIT contract spells it (`boolean`, `int4`, `text`, ...);
    /// errors about a value of the wrong kind print it.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::UnchangedToast => "unchanged-toast",
            Value::Bool(_) => "boolean",
            Value::Int2(_) => "int2",
            Value::Int4(_) => "int4",
            Value::Int8(_) => "int8",
            Value::Float4(_) => "float4",
            Value::Float8(_) => "float8",
            Value::Numeric(_) => "numeric",
            Value::Text(_) => "text",
            Value::Bytea(_) => "bytea",
            Value::Date(_) => "date",
            Value::Time(_) => "time",
            Value::Timestamp(_) => "timestamp",
            Value::TimestampTz(_) => "timestamptz",
            Value::Uuid(_) => "uuid",
            Value::Json(_) => "json",
            Value::Interval { .. } => "interval",
            Value::TimeTz { .. } => "timetz",
            Value::Array(_) => "array",
            Value::Other(_) => "other",
        }
    }
}
