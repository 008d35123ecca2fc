//! PostgreSQL column types to Arrow fields.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::extension::{Json, Uuid};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::stream::change::OutputColumn;
use crate::wire::pgtype::{self, oid};

/// Field metadata key holding the PostgreSQL type name (`int4`, `_text`, `numeric`).
pub const PG_TYPE_KEY: &str = "pg.type";
/// Field metadata key holding the PostgreSQL type OID, in decimal.
pub const PG_OID_KEY: &str = "pg.oid";
/// Field metadata key holding the type modifier (`atttypmod`), present when it is not -1.
pub const PG_TYPMOD_KEY: &str = "pg.typmod";
/// Field metadata key holding the number of array dimensions of an array column.
pub const PG_DIMS_KEY: &str = "pg.dims";

/// The change metadata columns that open every file, in order.
pub const METADATA_COLUMNS: [&str; 7] = [
    "_op",
    "_commit_lsn",
    "_seq",
    "_xid",
    "_commit_time",
    "_schema",
    "_unchanged_toast",
];

/// Name of the child field of a list column, as the Parquet LIST convention spells it.
pub const LIST_ITEM: &str = "element";

const DECIMAL128_MAX_PRECISION: u16 = 38;

/// How a column is stored, and so which [`Value`](crate::stream::change::Value) variant it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bool,
    Int2,
    Int4,
    Int8,
    /// `oid`: unsigned 32 bits, carried as `Value::Int8`.
    Oid,
    Float4,
    Float8,
    /// `numeric(p,s)` with `p <= 38`.
    Decimal128 {
        precision: u8,
        scale: i8,
    },
    /// `numeric` without a modifier, or wider than 38 digits: exact text.
    NumericText,
    Text,
    Bytea,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Interval,
    TimeTz,
    Uuid,
    Json,
    Other,
}

impl Kind {
    /// The kind of a column's values; for an array column, of its elements.
    pub(super) fn of(column: &OutputColumn) -> Kind {
        let ty = &column.ty;
        match ty.scalar {
            oid::BOOL => Kind::Bool,
            oid::INT2 => Kind::Int2,
            oid::INT4 => Kind::Int4,
            oid::INT8 => Kind::Int8,
            oid::OID => Kind::Oid,
            oid::FLOAT4 => Kind::Float4,
            oid::FLOAT8 => Kind::Float8,
            oid::NUMERIC => numeric_kind(ty.modifier),
            // Minor units in a signed 64-bit integer: at most 19 digits.
            oid::MONEY => Kind::Decimal128 {
                precision: 19,
                scale: ty.modifier.clamp(0, 18) as i8,
            },
            t if pgtype::is_text_like(t) => Kind::Text,
            oid::BYTEA => Kind::Bytea,
            oid::DATE => Kind::Date,
            oid::TIME => Kind::Time,
            oid::TIMESTAMP => Kind::Timestamp,
            oid::TIMESTAMPTZ => Kind::TimestampTz,
            oid::INTERVAL => Kind::Interval,
            oid::TIMETZ => Kind::TimeTz,
            oid::UUID => Kind::Uuid,
            oid::JSON | oid::JSONB => Kind::Json,
            _ => Kind::Other,
        }
    }

    pub(super) fn data_type(self) -> DataType {
        match self {
            Kind::Bool => DataType::Boolean,
            Kind::Int2 => DataType::Int16,
            Kind::Int4 => DataType::Int32,
            Kind::Int8 => DataType::Int64,
            Kind::Oid => DataType::UInt32,
            Kind::Float4 => DataType::Float32,
            Kind::Float8 => DataType::Float64,
            Kind::Decimal128 { precision, scale } => DataType::Decimal128(precision, scale),
            Kind::NumericText | Kind::Text | Kind::Json | Kind::Other => DataType::Utf8,
            Kind::Bytea => DataType::Binary,
            Kind::Date => DataType::Date32,
            Kind::Time => DataType::Time64(TimeUnit::Microsecond),
            Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Kind::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Kind::Interval => DataType::Struct(interval_fields()),
            Kind::TimeTz => DataType::Struct(timetz_fields()),
            Kind::Uuid => DataType::FixedSizeBinary(16),
        }
    }

    /// A field of this kind, with the extension type that gives it its Parquet logical type.
    pub(super) fn field(self, name: &str) -> Field {
        let field = Field::new(name, self.data_type(), true);
        // The extension types add `ARROW:extension:*` keys that the Parquet writer turns into
        // the UUID and JSON logical types.
        match self {
            Kind::Uuid => field.with_extension_type(Uuid),
            Kind::Json => field.with_extension_type(Json::default()),
            _ => field,
        }
    }

    /// The Arrow type of a column of this kind with `dims` array dimensions: a list of lists
    /// as deep as the dimensions, each level's items named [`LIST_ITEM`].
    pub(super) fn column_type(self, dims: u8) -> DataType {
        let mut data_type = self.data_type();
        let mut item = self.field(LIST_ITEM);
        for _ in 0..dims {
            data_type = DataType::List(Arc::new(item));
            item = Field::new(LIST_ITEM, data_type.clone(), true);
        }
        data_type
    }

    /// The value variant a column of this kind takes, as [`crate::stream::change::Value::kind`] names it.
    pub(super) fn expected(self) -> &'static str {
        match self {
            Kind::Bool => "boolean",
            Kind::Int2 => "int2",
            Kind::Int4 => "int4",
            Kind::Int8 => "int8",
            Kind::Oid => "int8 (0 to 4294967295)",
            Kind::Float4 => "float4",
            Kind::Float8 => "float8",
            Kind::Decimal128 { .. } | Kind::NumericText => "numeric",
            Kind::Text => "text",
            Kind::Bytea => "bytea",
            Kind::Date => "date",
            Kind::Time => "time",
            Kind::Timestamp => "timestamp",
            Kind::TimestampTz => "timestamptz",
            Kind::Interval => "interval",
            Kind::TimeTz => "timetz",
            Kind::Uuid => "uuid",
            Kind::Json => "json",
            Kind::Other => "other",
        }
    }
}

/// `numeric(p,s)` stores `((p << 16) | (s & 0x7ff)) + 4` in its modifier; the scale is an
/// 11-bit signed number since PostgreSQL 15 (negative, or larger than `p`).
pub(super) fn numeric_precision_scale(type_modifier: i32) -> Option<(u16, i16)> {
    if type_modifier < 4 {
        return None;
    }
    let packed = type_modifier - 4;
    let precision = ((packed >> 16) & 0xffff) as u16;
    let scale = (((packed & 0x7ff) ^ 1024) - 1024) as i16;
    Some((precision, scale))
}

fn numeric_kind(type_modifier: i32) -> Kind {
    // Parquet decimals need 0 <= scale <= precision; other modifiers keep the exact text.
    match numeric_precision_scale(type_modifier) {
        Some((p, s)) if p >= 1 && s >= 0 && s as u16 <= p => {
            let (precision, scale) = (p as u8, s as i8);
            // Wider decimals stay exact text: DuckDB misreads Parquet decimals of more than
            // 38 digits, and Spark and Trino stop at 38.
            if p <= DECIMAL128_MAX_PRECISION {
                Kind::Decimal128 { precision, scale }
            } else {
                Kind::NumericText
            }
        }
        _ => Kind::NumericText,
    }
}

/// `interval` as three exact fields, the way PostgreSQL stores it: months and days do not
/// have a fixed length in microseconds, so no single number is lossless.
pub(super) fn interval_fields() -> Fields {
    Fields::from(vec![
        Field::new("months", DataType::Int32, false),
        Field::new("days", DataType::Int32, false),
        Field::new("micros", DataType::Int64, false),
    ])
}

/// `timetz` as the local time of day and its offset, the two things PostgreSQL keeps:
/// normalising to UTC would lose the offset, and no Arrow type holds both.
pub(super) fn timetz_fields() -> Fields {
    Fields::from(vec![
        Field::new("time", DataType::Time64(TimeUnit::Microsecond), false),
        Field::new("offset_seconds", DataType::Int32, false),
    ])
}

/// The type as a person reads it in an error: `int4`, `numeric(12,2)`, `public.mood`.
pub(super) fn type_label(column: &OutputColumn) -> String {
    match (
        column.type_oid,
        numeric_precision_scale(column.type_modifier),
    ) {
        (oid::NUMERIC, Some((p, s))) => format!("numeric({p},{s})"),
        _ => column.ty.label(),
    }
}

pub(super) fn column_field(column: &OutputColumn) -> Field {
    let kind = Kind::of(column);
    let mut metadata = HashMap::with_capacity(4);
    if !column.ty.name.is_empty() {
        metadata.insert(PG_TYPE_KEY.to_owned(), column.ty.name.to_string());
    }
    metadata.insert(PG_OID_KEY.to_owned(), column.type_oid.to_string());
    if column.type_modifier != -1 {
        metadata.insert(PG_TYPMOD_KEY.to_owned(), column.type_modifier.to_string());
    }
    if column.key {
        metadata.insert(KEY_KEY.to_owned(), "true".to_owned());
    }
    if column.ty.dims > 0 {
        metadata.insert(PG_DIMS_KEY.to_owned(), column.ty.dims.to_string());
        return Field::new(
            &column.name,
            kind.column_type(column.ty.dims),
            column.nullable,
        )
        .with_metadata(metadata);
    }
    let field = kind.field(&column.name).with_nullable(column.nullable);
    let mut merged = field.metadata().clone();
    merged.extend(metadata);
    field.with_metadata(merged)
}

/// The item field of `_unchanged_toast`: column names, never null.
pub(super) fn unchanged_toast_item() -> Field {
    Field::new(LIST_ITEM, DataType::Utf8, false)
}

/// A short stable digest of an output's columns: names, declared types and how they are
/// stored. Files of one output with the same fingerprint have the same schema.
pub fn fingerprint(columns: &[OutputColumn]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for c in columns {
        hash.update(format!(
            "{}\0{}\0{}\0{}\0{}\0{}\n",
            c.name, c.type_oid, c.type_modifier, c.ty.scalar, c.ty.modifier, c.ty.dims
        ));
    }
    let digest = hash.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Name of the struct column that holds the old image of updates and deletes.
pub const OLD_COLUMN: &str = "_old";

/// Name of the column that closes a declared output's files: which of the rows one change or
/// message gave rise to this is (0, 1, ...).
pub const SUB_COLUMN: &str = "_sub";

/// Field metadata key set to `true` on the columns a plugin declared as the output's key.
pub const KEY_KEY: &str = "tributary.key";

/// The struct type of `_old`: the output's columns, as they are typed in the row.
pub(super) fn old_image_type(columns: &[OutputColumn]) -> DataType {
    DataType::Struct(columns.iter().map(column_field).collect())
}

/// The Arrow schema of an output's files: the change metadata columns, then the output's
/// columns in order (nullable unless a plugin declared one not to be), then, for an output
/// derived from a source table (`old_image`), `_old`: the row before an update or delete, null
/// for other rows; for a declared output, `_sub`.
pub fn arrow_schema(columns: &[OutputColumn], old_image: bool) -> SchemaRef {
    let mut fields = Vec::with_capacity(METADATA_COLUMNS.len() + columns.len());
    fields.extend([
        Field::new("_op", DataType::Utf8, false),
        Field::new("_commit_lsn", DataType::UInt64, false),
        Field::new("_seq", DataType::UInt32, false),
        Field::new("_xid", DataType::UInt32, false),
        Field::new(
            "_commit_time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("_schema", DataType::Utf8, false),
        Field::new(
            "_unchanged_toast",
            DataType::List(Arc::new(unchanged_toast_item())),
            true,
        ),
    ]);
    fields.extend(columns.iter().map(column_field));
    if old_image {
        fields.push(Field::new(OLD_COLUMN, old_image_type(columns), true));
    } else {
        fields.push(Field::new(SUB_COLUMN, DataType::UInt32, false));
    }
    Arc::new(Schema::new(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(p: i32, s: i32) -> i32 {
        ((p << 16) | (s & 0x7ff)) + 4
    }

    #[test]
    fn numeric_modifiers() {
        assert_eq!(numeric_precision_scale(-1), None);
        assert_eq!(numeric_precision_scale(numeric(12, 2)), Some((12, 2)));
        assert_eq!(numeric_precision_scale(numeric(5, -3)), Some((5, -3)));
        assert_eq!(
            numeric_precision_scale(numeric(1000, 1000)),
            Some((1000, 1000))
        );
        assert_eq!(numeric_kind(-1), Kind::NumericText);
        assert_eq!(
            numeric_kind(numeric(12, 2)),
            Kind::Decimal128 {
                precision: 12,
                scale: 2
            }
        );
        assert_eq!(
            numeric_kind(numeric(38, 0)),
            Kind::Decimal128 {
                precision: 38,
                scale: 0
            }
        );
        assert_eq!(numeric_kind(numeric(39, 5)), Kind::NumericText);
        assert_eq!(numeric_kind(numeric(76, 76)), Kind::NumericText);
        assert_eq!(numeric_kind(numeric(77, 0)), Kind::NumericText);
        assert_eq!(numeric_kind(numeric(5, -3)), Kind::NumericText);
        assert_eq!(numeric_kind(numeric(3, 5)), Kind::NumericText);
    }

    #[test]
    fn type_labels() {
        let col = |type_oid, type_modifier| OutputColumn::builtin("c", type_oid, type_modifier);
        assert_eq!(type_label(&col(oid::INT4, -1)), "int4");
        assert_eq!(
            type_label(&col(oid::NUMERIC, numeric(12, 2))),
            "numeric(12,2)"
        );
        assert_eq!(type_label(&col(oid::NUMERIC, -1)), "numeric");
        assert_eq!(type_label(&col(16_385, -1)), "type with oid 16385");
    }
}
