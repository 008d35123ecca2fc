//! Runtime types to WIT types and back, and which values fit which column types.
//!
//! A batch crosses into the guest with its relations deduplicated into a table; changes and
//! `source` targets refer to relations by their position in it ("handles"), because a batch
//! can hold two versions of one table (same OID, different columns) when it was altered
//! mid-batch.

use std::collections::HashMap;
use std::sync::Arc;

use super::host::wit;
use super::host::wit::columnar as cw;
use crate::stream::change::{Array, Batch, Message, Op, OutputColumn, Transaction, Value};
use crate::wire::pgoutput::Relation;
use crate::wire::pgtype::{self, ColumnType};

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

/// What of a batch one plugin sees: the columns it reads per relation, whether it reads old
/// images and messages, and which part of its transaction a partial batch is.
pub(super) struct View {
    /// Per relation handle, which columns the plugin reads; `None` for all of them.
    pub read: Vec<Option<Vec<bool>>>,
    pub old_images: bool,
    pub messages: bool,
    /// `(part, last)` of the batch's one transaction when it is delivered in parts.
    pub part: Option<(u32, bool)>,
}

impl View {
    pub fn new(interest: &wit::Interest, relations: &Relations, part: Option<(u32, bool)>) -> Self {
        let read = relations
            .relations
            .iter()
            .map(|relation| {
                interest.columns.as_ref().map(|names| {
                    relation
                        .columns
                        .iter()
                        .map(|c| names.contains(&c.name))
                        .collect()
                })
            })
            .collect();
        View {
            read,
            old_images: interest.old_images,
            messages: interest.messages,
            part,
        }
    }

    /// Messages as the plugin sees them: every one when it reads messages, none otherwise.
    pub fn messages(&self, messages: &[Message]) -> Vec<wit::Message> {
        match self.messages {
            true => messages.iter().map(message_to_wit).collect(),
            false => Vec::new(),
        }
    }
}

/// A transaction as the plugin sees it, without its changes: the columnar interface's header,
/// which the typed interface's transaction repeats around the changes.
pub(super) fn transaction_header(t: &Transaction, view: &View) -> cw::TransactionHeader {
    let (part, last_part) = view.part.unwrap_or((0, true));
    cw::TransactionHeader {
        xid: t.xid,
        commit_lsn: t.commit_lsn.0,
        end_lsn: t.end_lsn.0,
        commit_time: t.commit_time,
        messages: view.messages(&t.messages),
        part,
        last_part,
    }
}

/// The batch as the guest sees it.
pub(super) fn batch_to_wit(
    batch: &Batch,
    relations: &Relations,
    handles: &[u32],
    view: &View,
) -> wit::Batch {
    let mut handles = handles.iter();
    let row = |row: &[Value], read: &Option<Vec<bool>>| -> Vec<wit::Value> {
        match read {
            None => row.iter().map(value_to_wit).collect(),
            Some(read) => row
                .iter()
                .zip(read)
                .map(|(v, &r)| {
                    if r {
                        value_to_wit(v)
                    } else {
                        wit::Value::Absent
                    }
                })
                .collect(),
        }
    };
    let transactions = batch
        .transactions
        .iter()
        .map(|t| {
            let header = transaction_header(t, view);
            wit::Transaction {
                xid: header.xid,
                commit_lsn: header.commit_lsn,
                end_lsn: header.end_lsn,
                commit_time: header.commit_time,
                changes: t
                    .changes
                    .iter()
                    .map(|c| {
                        let handle = handles.next().copied().unwrap_or_default();
                        let read = &view.read[handle as usize];
                        wit::Change {
                            op: op_to_wit(c.op),
                            relation: handle,
                            seq: c.seq,
                            new: c.new.as_deref().map(|r| row(r, read)),
                            // A delete's old row is its row: sent whatever the interest says.
                            old: match view.old_images || c.op == Op::Delete {
                                true => c.old.as_deref().map(|r| row(r, read)),
                                false => None,
                            },
                        }
                    })
                    .collect(),
                messages: header.messages,
                part: header.part,
                last_part: header.last_part,
            }
        })
        .collect();
    wit::Batch {
        relations: relations
            .relations
            .iter()
            .map(|r| relation_to_wit(r))
            .collect(),
        transactions,
        messages: view.messages(&batch.messages),
    }
}

pub(super) fn message_to_wit(message: &Message) -> wit::Message {
    wit::Message {
        prefix: message.prefix.clone(),
        content: message.content.clone(),
        lsn: message.lsn.0,
        before_seq: message.before_seq,
    }
}

pub(super) fn relation_to_wit(relation: &Relation) -> wit::Relation {
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
        Op::Truncate | Op::Load => wit::Op::Truncate,
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
            wit::$wit::Uuid(text) => Value::Uuid(uuid_from_wit(&text)?),
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

/// The canonical text of a uuid, as the plugin interface carries it.
fn uuid_to_wit(bytes: &[u8; 16]) -> String {
    pgtype::uuid_text(bytes)
}

/// A uuid back from its canonical text (either case), or why it is not one.
fn uuid_from_wit(text: &str) -> Result<[u8; 16], String> {
    let bad = || format!("{text:?} is not a uuid (expected 8-4-4-4-12 hexadecimal digits)");
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return Err(bad());
    }
    let mut digits = bytes.iter().filter(|&&b| b != b'-').map(|&b| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    });
    let mut out = [0u8; 16];
    for byte in &mut out {
        let (Some(Some(hi)), Some(Some(lo))) = (digits.next(), digits.next()) else {
            return Err(bad());
        };
        *byte = (hi << 4) | lo;
    }
    Ok(out)
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

/// A value an emit carries: `Ok(None)` for `absent` (the change's own value), or why it is
/// not a value (a malformed uuid).
pub(super) fn value_from_wit(value: wit::Value) -> Result<Option<Value>, String> {
    let value = scalar_from_wit!(Value, value, rest => match rest {
        wit::Value::Absent => return Ok(None),
        wit::Value::UnchangedToast => Value::UnchangedToast,
        wit::Value::Array(array) => Value::Array(Box::new(Array {
            dims: array.dims,
            elements: array
                .elements
                .into_iter()
                .map(element_from_wit)
                .collect::<Result<_, _>>()?,
        })),
        _ => unreachable!("every scalar case is matched above"),
    });
    Ok(Some(value))
}

fn element_from_wit(element: wit::Element) -> Result<Value, String> {
    #[allow(unreachable_patterns)]
    let value = scalar_from_wit!(Element, element, _ => unreachable!("elements are scalars"));
    Ok(value)
}

/// The declared scalar types: WIT case and PostgreSQL type OID.
const SCALAR_TYPES: &[(wit::ScalarType, u32)] = &[
    (wit::ScalarType::Boolean, 16),
    (wit::ScalarType::Int2, 21),
    (wit::ScalarType::Int4, 23),
    (wit::ScalarType::Int8, 20),
    (wit::ScalarType::Float4, 700),
    (wit::ScalarType::Float8, 701),
    (wit::ScalarType::Numeric, 1700),
    (wit::ScalarType::Text, 25),
    (wit::ScalarType::Bytea, 17),
    (wit::ScalarType::Date, 1082),
    (wit::ScalarType::Time, 1083),
    (wit::ScalarType::Timetz, 1266),
    (wit::ScalarType::Timestamp, 1114),
    (wit::ScalarType::Timestamptz, 1184),
    (wit::ScalarType::Uuid, 2950),
    (wit::ScalarType::Json, 114),
    (wit::ScalarType::Jsonb, 3802),
    (wit::ScalarType::Interval, 1186),
];

/// The PostgreSQL type OID of a declared scalar type.
fn scalar_type_oid(scalar: wit::ScalarType) -> u32 {
    SCALAR_TYPES
        .iter()
        .find(|t| t.0 == scalar)
        .map_or(25, |t| t.1)
}

/// A declared column as an output column, or why it cannot be one.
pub(super) fn output_column(column: &wit::OutputColumn) -> Result<OutputColumn, String> {
    let scalar = scalar_type_oid(column.type_);
    let modifier = match (&column.numeric, column.type_) {
        (None, _) => -1,
        (Some(spec), wit::ScalarType::Numeric) => {
            if spec.precision == 0 || spec.precision > 1000 || spec.scale > spec.precision {
                return Err(format!(
                    "column {:?} is numeric({}, {}): precision must be 1 to 1000 and scale 0 \
                     to the precision",
                    column.name, spec.precision, spec.scale
                ));
            }
            // As `atttypmod` holds it.
            ((i32::from(spec.precision) << 16) | i32::from(spec.scale)) + 4
        }
        (Some(_), _) => {
            return Err(format!(
                "column {:?} gives a numeric precision and scale to a {} column",
                column.name,
                pgtype::type_name(scalar).unwrap_or("non-numeric")
            ));
        }
    };
    let type_oid = match column.array {
        false => scalar,
        true => pgtype::array_of(scalar).ok_or_else(|| {
            format!(
                "column {:?}: no array type over type oid {scalar}",
                column.name
            )
        })?,
    };
    let mut output = OutputColumn::builtin(column.name.clone(), type_oid, modifier);
    output.nullable = column.nullable;
    output.key = column.key;
    Ok(output)
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
    fn uuids_cross_as_canonical_text() {
        let bytes: [u8; 16] = *b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff";
        let wit = value_to_wit(&Value::Uuid(bytes));
        let wit::Value::Uuid(text) = wit else {
            panic!("not a uuid: {wit:?}")
        };
        assert_eq!(text, "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(
            value_from_wit(wit::Value::Uuid(text.to_uppercase())),
            Ok(Some(Value::Uuid(bytes)))
        );
        for bad in [
            "",
            "00112233445566778899aabbccddeeff",
            "0011223-34455-6677-8899-aabbccddeeff",
        ] {
            let error = value_from_wit(wit::Value::Uuid(bad.into())).unwrap_err();
            assert!(error.contains("is not a uuid"), "{error}");
        }
        assert_eq!(value_from_wit(wit::Value::Absent), Ok(None));
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
        let sample = |t: wit::ScalarType| match t {
            wit::ScalarType::Boolean => Value::Bool(true),
            wit::ScalarType::Int2 => Value::Int2(1),
            wit::ScalarType::Int4 => Value::Int4(1),
            wit::ScalarType::Int8 => Value::Int8(1),
            wit::ScalarType::Float4 => Value::Float4(1.0),
            wit::ScalarType::Float8 => Value::Float8(1.0),
            wit::ScalarType::Numeric => Value::Numeric("1".into()),
            wit::ScalarType::Text => Value::Text("1".into()),
            wit::ScalarType::Bytea => Value::Bytea(vec![1]),
            wit::ScalarType::Date => Value::Date(1),
            wit::ScalarType::Time => Value::Time(1),
            wit::ScalarType::Timetz => Value::TimeTz {
                micros: 1,
                offset: 3600,
            },
            wit::ScalarType::Timestamp => Value::Timestamp(1),
            wit::ScalarType::Timestamptz => Value::TimestampTz(1),
            wit::ScalarType::Uuid => Value::Uuid([1; 16]),
            wit::ScalarType::Json | wit::ScalarType::Jsonb => Value::Json("1".into()),
            wit::ScalarType::Interval => Value::Interval {
                months: 1,
                days: 1,
                micros: 1,
            },
        };
        let declared = |t, array, numeric| wit::OutputColumn {
            name: "c".into(),
            type_: t,
            array,
            numeric,
            nullable: true,
            key: false,
        };
        for (t, oid) in SCALAR_TYPES {
            assert_eq!(scalar_type_oid(*t), *oid);
            let column = output_column(&declared(*t, false, None)).unwrap();
            assert!(fits(&column.ty, &sample(*t)), "{t:?}");
            let array = output_column(&declared(*t, true, None)).unwrap();
            let elements = Value::Array(Box::new(Array::from_elements(vec![sample(*t)])));
            assert!(fits(&array.ty, &elements), "{t:?}[]");
            assert!(!fits(&array.ty, &sample(*t)), "{t:?}[]");
        }
        let spec = |precision, scale| Some(wit::NumericSpec { precision, scale });
        let numeric = output_column(&declared(wit::ScalarType::Numeric, false, spec(12, 2)));
        assert_eq!(numeric.unwrap().type_modifier, (12 << 16 | 2) + 4);
        let error = output_column(&declared(wit::ScalarType::Numeric, false, spec(2, 3)));
        assert!(error.unwrap_err().contains("scale 0 to the precision"));
        let error = output_column(&declared(wit::ScalarType::Text, false, spec(2, 1)));
        assert!(
            error
                .unwrap_err()
                .contains("precision and scale to a text column")
        );
    }
}
