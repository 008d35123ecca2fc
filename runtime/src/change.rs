//! The pipeline's data model: typed values, changes, transactions, and the rows that
//! transforms emit into outputs.
//!
//! Everything after the decoder speaks these types; nothing here does IO.

use std::sync::Arc;

use crate::Lsn;
use crate::pgoutput::Relation;
use crate::pgtype::ColumnType;

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

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Op {
    /// The value of the `_op` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Truncate => "truncate",
        }
    }
}

/// One row-level change of a committed transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub op: Op,
    pub relation: Arc<Relation>,
    /// Ordinal of the change within its transaction, from 0. With the transaction's commit
    /// LSN it identifies the change: a replay produces the same pair.
    pub seq: u32,
    /// The new row (insert, update), in relation column order.
    pub new: Option<Vec<Value>>,
    /// The old row or old key (update, delete) when the replica identity sends one; columns
    /// outside the key are `Null` for a key-only image.
    pub old: Option<Vec<Value>>,
}

/// A committed transaction, whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    pub xid: u32,
    /// LSN of the commit record.
    pub commit_lsn: Lsn,
    /// LSN just past the commit record: what may be confirmed once this transaction is durable.
    pub end_lsn: Lsn,
    /// Microseconds since the Unix epoch.
    pub commit_time: i64,
    pub changes: Vec<Change>,
    /// The transaction's logical decoding messages (`pg_logical_emit_message(true, ...)`), in
    /// the order they were written; [`Message::before_seq`] places each among `changes`.
    pub messages: Vec<Message>,
}

/// A logical decoding message: what `pg_logical_emit_message` wrote to the WAL.
///
/// Messages are not changes: they do not take a `seq`, so a change's identity is the same
/// whether or not messages were asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub prefix: String,
    pub content: Vec<u8>,
    /// LSN of the message's WAL record.
    pub lsn: Lsn,
    /// Where it falls among its neighbours: in [`Transaction::messages`], the number of the
    /// transaction's changes that precede it; in [`Batch::messages`], the number of the
    /// batch's transactions that precede it.
    pub before_seq: u32,
}

/// What one transform call receives: one or more whole transactions in commit order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub transactions: Vec<Transaction>,
    /// Non-transactional logical decoding messages (`pg_logical_emit_message(false, ...)`)
    /// written after the previous batch's last commit and before this batch's last commit, in
    /// WAL order. [`Message::before_seq`] counts the transactions that committed before each.
    pub messages: Vec<Message>,
}

impl Batch {
    pub fn change_count(&self) -> usize {
        self.transactions.iter().map(|t| t.changes.len()).sum()
    }

    /// Commit LSN of the first and last transaction.
    pub fn lsn_range(&self) -> Option<(Lsn, Lsn)> {
        Some((
            self.transactions.first()?.commit_lsn,
            self.transactions.last()?.commit_lsn,
        ))
    }
}

/// A column of an output: a name and the PostgreSQL type its values have.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutputColumn {
    pub name: String,
    /// The declared type.
    pub type_oid: u32,
    /// -1 when the type has no modifier.
    pub type_modifier: i32,
    /// What the declared type resolves to; decides the column's Arrow type.
    pub ty: ColumnType,
}

/// One row bound for an output, with the identity of the change it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputRow {
    pub op: Op,
    pub commit_lsn: Lsn,
    pub seq: u32,
    pub xid: u32,
    /// Microseconds since the Unix epoch.
    pub commit_time: i64,
    /// One value per output column, in column order.
    pub values: Vec<Value>,
    /// The row before an update or delete, as far as the replica identity sent it (key
    /// columns, or the whole row under `REPLICA IDENTITY FULL`); outputs derived from source
    /// tables land it in `_old`.
    pub old: Option<Vec<Value>>,
}

/// Rows for one output that share one schema, in commit order.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputBatch {
    /// `schema.table` for outputs derived from a source table; the plugin's name otherwise.
    pub output: String,
    pub columns: Arc<[OutputColumn]>,
    pub rows: Vec<OutputRow>,
    /// Derived from a source table: the files carry an `_old` column with the old images.
    pub old_image: bool,
}

impl OutputColumn {
    /// A column of a built-in type.
    pub fn builtin(name: impl Into<String>, type_oid: u32, type_modifier: i32) -> OutputColumn {
        OutputColumn {
            name: name.into(),
            type_oid,
            type_modifier,
            ty: ColumnType::builtin(type_oid, type_modifier),
        }
    }

    /// The columns of an output derived from a source table.
    pub fn from_relation(relation: &Relation) -> Arc<[OutputColumn]> {
        relation
            .columns
            .iter()
            .map(|c| OutputColumn {
                name: c.name.clone(),
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
                ty: c.ty.clone(),
            })
            .collect()
    }
}
