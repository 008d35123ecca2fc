//! Runtime types to WIT types and back, and which values fit which column types.
//!
//! A batch crosses into the guest with its relations deduplicated into a table; changes and
//! `source` targets refer to relations by their position in it ("handles"), because a batch
//! can hold two versions of one table (same OID, different columns) when it was altered
//! mid-batch.

use std::collections::HashMap;
use std::sync::Arc;

use super::host::wit;
use crate::change::{Array, Batch, Message, Op, OutputColumn, Value};
use crate::pgoutput::Relation;
use crate::pgtype::{self, ColumnType};

/// The relations of one batch, by handle, with the output each one derives.
pub(super) struct Relations {
    pub relations: Vec<Arc<Relation>>,
    /// `schema.table` and columns of the output derived from each relation.
    pub outputs: Vec<(String, Arc<[OutputColumn]>)>,
}

impl Relations {
    /// Collect the distinct relations of `batch`; `handles[i]` is the handle of the relation of
    /// the i-th change of the batch in commit order.
    pub fn of(batch: &Batch) -> (Relations, Vec<u32>) {
        let mut relations: Vec<Arc<Relation>> = Vec::new();
        // Changes of one relation version share one `Arc`, so the pointer is a fast key; equal
        // relations behind different pointers still collapse into one handle.
        let mut by_ptr: HashMap<*const Relation, u32> = HashMap::new();
        let mut handles = Vec::with_capacity(batch.change_count());
        for change in batch.transactions.iter().flat_map(|t| &t.changes) {
            let ptr = Arc::as_ptr(&change.relation);
            let handle = match by_ptr.get(&ptr) {
                Some(&h) => h,
                None => {
                    let h = match relations.iter().position(|r| **r == *change.relation) {
                        Some(i) => i as u32,
                        None => {
                            relations.push(change.relation.clone());
                            (relations.len() - 1) as u32
                        }
                    };
                    by_ptr.insert(ptr, h);
                    h
                }
            };
            handles.push(handle);
        }
        let outputs = relations
            .iter()
            .map(|r| (r.qualified_name(), OutputColumn::from_relation(r)))
            .collect();
        (Relations { relations, outputs }, handles)
    }
}

/// The batch as the guest sees it.
pub(super) fn batch_to_wit(batch: &Batch, relations: &Relations, handles: &[u32]) -> wit::Batch {
    let mut handles = handles.iter();
    let transactions = batch
        .transactions
        .iter()
        .map(|t| wit::Transaction {
            xid: t.xid,
            commit_lsn: t.commit_lsn.0,
            end_lsn: t.end_lsn.0,
            commit_time: t.commit_time,
            changes: t
                .changes
                .iter()
                .map(|c| wit::Change {
                    op: op_to_wit(c.op),
                    relation: handles.next().copied().unwrap_or_default(),
                    seq: c.seq,
                    new: c
                        .new
                        .as_ref()
                        .map(|row| row.iter().map(value_to_wit).collect()),
                    old: c
                        .old
                        .as_ref()
                        .map(|row| row.iter().map(value_to_wit).collect()),
                })
                .collect(),
            messages: t.messages.iter().map(message_to_wit).collect(),
        })
        .collect();
    wit::Batch {
        relations: relations
            .relations
            .iter()
            .map(|r| relation_to_wit(r))
            .collect(),
        transactions,
        messages: batch.messages.iter().map(message_to_wit).collect(),
    }
}

fn message_to_wit(message: &Message) -> wit::Message {
    wit::Message {
        prefix: message.prefix.clone(),
        content: message.content.clone(),
        lsn: message.lsn.0,
        before_seq: message.before_seq,
    }
}

fn relation_to_wit(relation: &Relation) -> wit::Relation {
    wit::Relation {
        id: relation.id,
        schema: relation.namespace.clone(),
        table: relation.name.clone(),
        columns: relation
            .columns
            .iter()
            .map(|c| wit::Column {
                name: c.name.clone(),
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
                type_name: c.ty.name.to_string(),
                key: c.key,
            })
            .collect(),
    }
}

pub(super) fn op_to_wit(op: Op) -> wit::Op {
    match op {
        Op::Insert => wit::Op::Insert,
        Op::Update => wit::Op::Update,
        Op::Delete => wit::Op::Delete,
        Op::Truncate => wit::Op::Truncate,
    }
}

pub(super) fn op_from_wit(op: wit::Op) -> Op {
    match op {
        wit::Op::Insert => Op::Insert,
        wit::Op::Update => Op::Update,
        wit::Op::Delete => Op::Delete,
        wit::Op::Truncate => Op::Truncate,
    }
}

/// The scalar cases, which `value` and `element` share, in both directions. `$rest` handles
/// what is not a scalar.
macro_rules! scalar_to_wit {
    ($wit:ident, $value:expr, $rest:pat => $other:expr) => {
        match $value {
            Value::Null => wit::$wit::Null,
            Value::Bool(b) => wit::$wit::Boolean(*b),
            Value::Int2(v) => wit::$wit::Int2(*v),
            Value::Int4(v) => wit::$wit::Int4(*v),
            Value::Int8(v) => wit::$wit::Int8(*v),
            Value::Float4(v) => wit::$wit::Float4(*v),
            Value::Float8(v) => wit::$wit::Float8(*v),
            Value::Numeric(s) => wit::$wit::Numeric(s.clone()),
            Value::Text(s) => wit::$wit::Text(s.clone()),
            Value::Bytea(b) => wit::$wit::Bytea(b.clone()),
            Value::Date(d) => wit::$wit::Date(*d),
            Value::Time(t) => wit::$wit::Time(*t),
            Value::Timestamp(t) => wit::$wit::Timestamp(*t),
            Value::TimestampTz(t) => wit::$wit::Timestamptz(*t),
            Value::Uuid(bytes) => wit::$wit::Uuid(uuid_to_wit(bytes)),
            Value::Json(s) => wit::$wit::Json(s.clone()),
            Value::Interval {
                months,
                days,
                micros,
            } => wit::$wit::Interval(wit::Interval {
                months: *months,
                days: *days,
                micros: *micros,
            }),
            Value::TimeTz { micros, offset } => wit::$wit::Timetz(wit::Timetz {
                micros: *micros,
                offset_seconds: *offset,
            }),
            Value::Other(s) => wit::$wit::Other(s.clone()),
            $rest => $other,
        }
    };
}

macro_rules! scalar_from_wit {
    ($wit:ident, $value:expr, $rest:pat => $other:expr) => {
        match $value {
            wit::$wit::Null => Value::Null,
            wit::$wit::Boolean(b) => Value::Bool(b),
            wit::$wit::Int2(v) => Value::Int2(v),
            wit::$wit::Int4(v) => Value::Int4(v),
            wit::$wit::Int8(v) => Value::Int8(v),
            wit::$wit::Float4(v) => Value::Float4(v),
            wit::$wit::Float8(v) => Value::Float8(v),
            wit::$wit::Numeric(s) => Value::Numeric(s),
            wit::$wit::Text(s) => Value::Text(s),
            wit::$wit::Bytea(b) => Value::Bytea(b),
            wit::$wit::Date(d) => Value::Date(d),
            wit::$wit::Time(t) => Value::Time(t),
            wit::$wit::Timestamp(t) => Value::Timestamp(t),
            wit::$wit::Timestamptz(t) => Value::TimestampTz(t),
            wit::$wit::Uuid(halves) => Value::Uuid(uuid_from_wit(halves)),
            wit::$wit::Json(s) => Value::Json(s),
            wit::$wit::Interval(i) => Value::Interval {
                months: i.months,
                days: i.days,
                micros: i.micros,
            },
            wit::$wit::Timetz(t) => Value::TimeTz {
                micros: t.micros,
                offset: t.offset_seconds,
            },
            wit::$wit::Other(s) => Value::Other(s),
            $rest => $other,
        }
    };
}

fn uuid_to_wit(bytes: &[u8; 16]) -> (u64, u64) {
    let n = u128::from_be_bytes(*bytes);
    ((n >> 64) as u64, n as u64)
}

fn uuid_from_wit((hi, lo): (u64, u64)) -> [u8; 16] {
    ((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes()
}

pub(super) fn value_to_wit(value: &Value) -> wit::Value {
    scalar_to_wit!(Value, value, rest => match rest {
        Value::UnchangedToast => wit::Value::UnchangedToast,
        Value::Array(array) => wit::Value::Array(wit::PgArray {
            dims: array.dims.clone(),
            elements: array.elements.iter().map(element_to_wit).collect(),
        }),
        _ => unreachable!("every scalar case is matched above"),
    })
}

/// An array element; arrays hold scalars only, so a nested array or an unchanged-TOAST
/// marker (which the decoder never puts in an array) crosses as null.
fn element_to_wit(value: &Value) -> wit::Element {
    scalar_to_wit!(Element, value, Value::UnchangedToast | Value::Array(_) => wit::Element::Null)
}

pub(super) fn value_from_wit(value: wit::Value) -> Value {
    scalar_from_wit!(Value, value, rest => match rest {
        wit::Value::UnchangedToast => Value::UnchangedToast,
        wit::Value::Array(array) => Value::Array(Box::new(Array {
            dims: array.dims,
            elements: array.elements.into_iter().map(element_from_wit).collect(),
        })),
        _ => unreachable!("every scalar case is matched above"),
    })
}

fn element_from_wit(element: wit::Element) -> Value {
    #[allow(unreachable_patterns)]
    let value = scalar_from_wit!(Element, element, _ => unreachable!("elements are scalars"));
    value
}

/// The declared column types: WIT case and PostgreSQL type OID.
const COLUMN_TYPES: &[(wit::ColumnType, u32)] = &[
    (wit::ColumnType::Boolean, 16),
    (wit::ColumnType::Int2, 21),
    (wit::ColumnType::Int4, 23),
    (wit::ColumnType::Int8, 20),
    (wit::ColumnType::Float4, 700),
    (wit::ColumnType::Float8, 701),
    (wit::ColumnType::Numeric, 1700),
    (wit::ColumnType::Text, 25),
    (wit::ColumnType::Bytea, 17),
    (wit::ColumnType::Date, 1082),
    (wit::ColumnType::Time, 1083),
    (wit::ColumnType::Timestamp, 1114),
    (wit::ColumnType::Timestamptz, 1184),
    (wit::ColumnType::Uuid, 2950),
    (wit::ColumnType::Json, 114),
    (wit::ColumnType::Jsonb, 3802),
    (wit::ColumnType::Interval, 1186),
];

/// The PostgreSQL type OID of a declared column type.
pub(super) fn column_type_oid(column_type: wit::ColumnType) -> u32 {
    COLUMN_TYPES
        .iter()
        .find(|t| t.0 == column_type)
        .map_or(25, |t| t.1)
}

/// The kind of value a scalar of the built-in type `type_oid` holds, as the name of its
/// `Value` case, when the decoder reads it into a typed value.
fn expected_kind(type_oid: u32) -> Option<&'static str> {
    use pgtype::oid;
    Some(match type_oid {
        oid::BOOL => "boolean",
        oid::INT2 => "int2",
        oid::INT4 => "int4",
        oid::INT8 | oid::OID => "int8",
        oid::FLOAT4 => "float4",
        oid::FLOAT8 => "float8",
        oid::NUMERIC | oid::MONEY => "numeric",
        oid::BYTEA => "bytea",
        oid::DATE => "date",
        oid::TIME => "time",
        oid::TIMETZ => "timetz",
        oid::TIMESTAMP => "timestamp",
        oid::TIMESTAMPTZ => "timestamptz",
        oid::UUID => "uuid",
        oid::JSON | oid::JSONB => "json",
        oid::INTERVAL => "interval",
        t if pgtype::is_text_like(t) => "text",
        _ => return None,
    })
}

/// Whether `value` may sit in a column of type `ty`.
///
/// Typed columns take their own kind; text-like columns also take `other`; columns of types
/// kept as text (composites, ranges, ...) take the text-like kinds; array columns take arrays
/// whose elements fit the element type. `null` and `unchanged-toast` fit everywhere.
pub(super) fn fits(ty: &ColumnType, value: &Value) -> bool {
    match value {
        Value::Null | Value::UnchangedToast => true,
        Value::Array(array) if ty.is_array() => array.elements.iter().all(|e| {
            !matches!(e, Value::Array(_) | Value::UnchangedToast) && fits_scalar(ty.scalar, e)
        }),
        _ if ty.is_array() => false,
        _ => fits_scalar(ty.scalar, value),
    }
}

fn fits_scalar(scalar: u32, value: &Value) -> bool {
    let kind = value.kind();
    match expected_kind(scalar) {
        _ if kind == "null" => true,
        Some("text") => matches!(kind, "text" | "other"),
        Some(expected) => kind == expected,
        None => matches!(kind, "text" | "other" | "json"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trips_big_endian() {
        let bytes: [u8; 16] = *b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff";
        let wit = value_to_wit(&Value::Uuid(bytes));
        let wit::Value::Uuid((hi, lo)) = wit else {
            panic!("not a uuid: {wit:?}")
        };
        assert_eq!((hi, lo), (0x0011_2233_4455_6677, 0x8899_aabb_ccdd_eeff));
        assert_eq!(
            value_from_wit(wit::Value::Uuid((hi, lo))),
            Value::Uuid(bytes)
        );
    }

    #[test]
    fn values_fit_their_types_and_nothing_else() {
        let ty = |oid| ColumnType::builtin(oid, -1);
        let ints = |elements| Value::Array(Box::new(Array::from_elements(elements)));
        assert!(fits(&ty(23), &Value::Int4(1)));
        assert!(!fits(&ty(23), &Value::Int8(1)));
        assert!(!fits(&ty(23), &Value::Text("1".into())));
        assert!(fits(&ty(23), &Value::Null));
        assert!(fits(&ty(1043), &Value::Text("x".into())));
        assert!(fits(&ty(869), &Value::Text("10.0.0.1".into())));
        assert!(fits(&ty(1007), &ints(vec![Value::Int4(1), Value::Null])));
        assert!(!fits(&ty(1007), &ints(vec![Value::Int8(1)])));
        assert!(!fits(&ty(1007), &Value::Int4(1)));
        assert!(!fits(&ty(23), &ints(vec![])));
        assert!(fits(&ty(3802), &Value::Json("{}".into())));
    }

    #[test]
    fn every_declared_type_maps_to_an_oid_that_takes_its_own_case() {
        let sample = |t: wit::ColumnType| match t {
            wit::ColumnType::Boolean => Value::Bool(true),
            wit::ColumnType::Int2 => Value::Int2(1),
            wit::ColumnType::Int4 => Value::Int4(1),
            wit::ColumnType::Int8 => Value::Int8(1),
            wit::ColumnType::Float4 => Value::Float4(1.0),
            wit::ColumnType::Float8 => Value::Float8(1.0),
            wit::ColumnType::Numeric => Value::Numeric("1".into()),
            wit::ColumnType::Text => Value::Text("1".into()),
            wit::ColumnType::Bytea => Value::Bytea(vec![1]),
            wit::ColumnType::Date => Value::Date(1),
            wit::ColumnType::Time => Value::Time(1),
            wit::ColumnType::Timestamp => Value::Timestamp(1),
            wit::ColumnType::Timestamptz => Value::TimestampTz(1),
            wit::ColumnType::Uuid => Value::Uuid([1; 16]),
            wit::ColumnType::Json | wit::ColumnType::Jsonb => Value::Json("1".into()),
            wit::ColumnType::Interval => Value::Interval {
                months: 1,
                days: 1,
                micros: 1,
            },
        };
        for (t, oid) in COLUMN_TYPES {
            assert_eq!(column_type_oid(*t), *oid);
            assert!(fits(&ColumnType::builtin(*oid, -1), &sample(*t)), "{t:?}");
        }
    }
}
