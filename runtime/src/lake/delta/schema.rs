//! The table schema of a Delta output: Arrow types as Delta types, the files' columns conformed
//! to the types Delta has, and the table's schema evolved by each new file.
//!
//! Delta has no unsigned integers, no time of day and no UUID, so a Delta output's files hold:
//!
//! | Parquet format | Delta format | why |
//! |---|---|---|
//! | `UInt64` (`_commit_lsn`) | `long` | WAL positions stay below 2^63 |
//! | `UInt32` (`_seq`, `_xid`, `_sub`, `oid`) | `long` | every value fits, none turns negative |
//! | `Time64(Microsecond)` (`time`, `timetz.time`) | `long` | microseconds since midnight; the field's `comment` says so |
//! | `FixedSizeBinary(16)` (`uuid`) | `string` | the canonical text, as Spark and Trino treat UUIDs |
//! | `Timestamp(Microsecond, None)` (`timestamp`) | `timestamp_ntz` | the table turns on the `timestampNtz` feature |
//!
//! Every other type is the same in both formats. The `pg.*` field metadata is kept in the
//! table's schema.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, StringArray, StructArray};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

/// Field metadata Delta readers show as the column's comment.
const COMMENT: &str = "comment";
const TIME_COMMENT: &str = "time of day in microseconds since midnight";

/// Characters a column name cannot hold in a Delta table without column mapping.
const FORBIDDEN: &[char] = &[' ', ',', ';', '{', '}', '(', ')', '\n', '\t', '='];

/// A Delta struct type: the table's schema, or a struct column's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructType {
    #[serde(rename = "type")]
    pub kind: String,
    pub fields: Vec<StructField>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructField {
    pub name: String,
    #[serde(rename = "type")]
    pub data_type: DeltaType,
    pub nullable: bool,
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// A Delta data type: a primitive by name (`long`, `decimal(12,2)`), or a nested type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeltaType {
    Primitive(String),
    Struct(StructType),
    Array(ArrayType),
    Map(MapType),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArrayType {
    #[serde(rename = "type")]
    pub kind: String,
    pub element_type: Box<DeltaType>,
    pub contains_null: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MapType {
    #[serde(rename = "type")]
    pub kind: String,
    pub key_type: Box<DeltaType>,
    pub value_type: Box<DeltaType>,
    pub value_contains_null: bool,
}

impl DeltaType {
    fn describe(&self) -> String {
        match self {
            DeltaType::Primitive(name) => name.clone(),
            DeltaType::Struct(_) => "struct".into(),
            DeltaType::Array(a) => format!("array<{}>", a.element_type.describe()),
            DeltaType::Map(_) => "map".into(),
        }
    }

    /// Whether the `timestampNtz` feature is needed to hold this type.
    fn needs_ntz(&self) -> bool {
        match self {
            DeltaType::Primitive(name) => name == "timestamp_ntz",
            DeltaType::Struct(s) => s.needs_ntz(),
            DeltaType::Array(a) => a.element_type.needs_ntz(),
            DeltaType::Map(m) => m.key_type.needs_ntz() || m.value_type.needs_ntz(),
        }
    }
}

impl StructType {
    pub fn new(fields: Vec<StructField>) -> Self {
        StructType {
            kind: "struct".into(),
            fields,
        }
    }

    /// The schema as the `schemaString` of a `metaData` action holds it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a schema serializes")
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("schemaString is not a Delta schema: {e}"))
    }

    /// Whether some column needs the `timestampNtz` table feature.
    pub fn needs_ntz(&self) -> bool {
        self.fields.iter().any(|f| f.data_type.needs_ntz())
    }

    fn field(&self, name: &str) -> Option<&StructField> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Why a file's columns do not fit its table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "column {column:?} changed type from {from} to {to}; a Delta table cannot hold both \
         (land the new type into a new column, or resynchronise the table into a new sink prefix)"
    )]
    TypeChange {
        column: String,
        from: String,
        to: String,
    },
    #[error(
        "column {column:?}: a Delta table cannot name a column with a space or any of ,;{{}}()= \
         (rename the column, or land this output with sink.format = \"parquet\")"
    )]
    Name { column: String },
    #[error("column {column:?} has Arrow type {data_type}, which Delta cannot hold")]
    Unsupported { column: String, data_type: String },
    #[error(
        "columns {first:?} and {second:?} differ only in case, and Delta readers (Spark) take \
         column names without case (rename one, or land this output with \
         sink.format = \"parquet\")"
    )]
    Case { first: String, second: String },
}

/// The Arrow type a Delta output's files hold for `data_type` (see the module docs).
fn conform_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::UInt8 | DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 | DataType::Time64(_) => DataType::Int64,
        DataType::FixedSizeBinary(16) => DataType::Utf8,
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(conform_field).collect()),
        DataType::List(item) => DataType::List(conform_field(item)),
        other => other.clone(),
    }
}

fn conform_field(field: &FieldRef) -> FieldRef {
    let data_type = conform_type(field.data_type());
    let mut metadata = field.metadata().clone();
    // The canonical extension types (UUID, JSON) mean nothing to Delta readers: the column is
    // a plain string, and `pg.type` says what it was.
    metadata.retain(|key, _| !key.starts_with("ARROW:"));
    if matches!(field.data_type(), DataType::Time64(_)) {
        metadata.insert(COMMENT.to_owned(), TIME_COMMENT.to_owned());
    }
    if data_type == *field.data_type() && metadata == *field.metadata() {
        return field.clone();
    }
    Arc::new(
        Field::new(field.name(), data_type, field.is_nullable()).with_metadata(metadata.clone()),
    )
}

/// The schema a Delta output's files have, for the schema its Parquet files would have.
pub fn conform_schema(schema: &Schema) -> SchemaRef {
    let fields: Fields = schema.fields().iter().map(conform_field).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A batch of the Parquet format's schema as `schema`, its [`conform_schema`].
pub fn conform_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| conform_array(column, field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}

fn conform_array(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    match (array.data_type(), to) {
        (from, to) if from == to => Ok(array.clone()),
        (DataType::FixedSizeBinary(16), DataType::Utf8) => Ok(uuid_text(array)),
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .zip(fields)
                .map(|(c, f)| conform_array(c, f.data_type()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                columns,
                s.nulls().cloned(),
            )?))
        }
        (DataType::List(_), DataType::List(item)) => {
            let list = array.as_list::<i32>();
            let values = conform_array(list.values(), item.data_type())?;
            Ok(Arc::new(ListArray::try_new(
                item.clone(),
                list.offsets().clone(),
                values,
                list.nulls().cloned(),
            )?))
        }
        (_, to) => arrow_cast::cast(array, to),
    }
}

/// UUIDs as their canonical text (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
fn uuid_text(array: &ArrayRef) -> ArrayRef {
    let bytes = array.as_fixed_size_binary();
    let values: StringArray = (0..bytes.len())
        .map(|i| {
            let value: &[u8; 16] = bytes.value(i).try_into().ok()?;
            bytes
                .is_valid(i)
                .then(|| crate::wire::pgtype::uuid_text(value))
        })
        .collect();
    Arc::new(values)
}

/// The Delta type of a conformed Arrow type.
fn delta_type(column: &str, data_type: &DataType) -> Result<DeltaType, SchemaError> {
    let primitive = |name: &str| Ok(DeltaType::Primitive(name.into()));
    match data_type {
        DataType::Boolean => primitive("boolean"),
        DataType::Int8 => primitive("byte"),
        DataType::Int16 => primitive("short"),
        DataType::Int32 => primitive("integer"),
        DataType::Int64 => primitive("long"),
        DataType::Float32 => primitive("float"),
        DataType::Float64 => primitive("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => primitive("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => primitive("binary"),
        DataType::Date32 => primitive("date"),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => primitive("timestamp"),
        DataType::Timestamp(TimeUnit::Microsecond, None) => primitive("timestamp_ntz"),
        DataType::Decimal128(p, s) if *p <= 38 && *s >= 0 => {
            primitive(&format!("decimal({p},{s})"))
        }
        DataType::Struct(fields) => Ok(DeltaType::Struct(struct_type(
            &format!("{column}."),
            fields.iter().map(|f| f.as_ref()),
        )?)),
        DataType::List(item) => Ok(DeltaType::Array(ArrayType {
            kind: "array".into(),
            element_type: Box::new(delta_type(column, item.data_type())?),
            contains_null: item.is_nullable(),
        })),
        other => Err(SchemaError::Unsupported {
            column: column.into(),
            data_type: other.to_string(),
        }),
    }
}

fn struct_field(path: &str, field: &Field) -> Result<StructField, SchemaError> {
    if field.name().contains(FORBIDDEN) {
        return Err(SchemaError::Name {
            column: path.into(),
        });
    }
    Ok(StructField {
        name: field.name().clone(),
        data_type: delta_type(path, field.data_type())?,
        nullable: field.is_nullable(),
        metadata: field
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    })
}

/// The struct of `fields`, whose names (after `path`) must differ in more than case.
fn struct_type<'a>(
    path: &str,
    fields: impl Iterator<Item = &'a Field>,
) -> Result<StructType, SchemaError> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for f in fields {
        let name = format!("{path}{}", f.name());
        if let Some(first) = seen.insert(f.name().to_lowercase(), name.clone()) {
            return Err(SchemaError::Case {
                first,
                second: name,
            });
        }
        out.push(struct_field(&name, f)?);
    }
    Ok(StructType::new(out))
}

/// The Delta schema of a file with this (conformed) Arrow schema.
pub fn table_schema(schema: &Schema) -> Result<StructType, SchemaError> {
    struct_type("", schema.fields().iter().map(|f| f.as_ref()))
}

/// The table's schema once it also holds a file of schema `file`: columns the table lacks are
/// added at the end, nullable (their rows in earlier files read as null); columns the file
/// lacks stay, and become nullable; a struct column gains and keeps fields the same way.
/// `None` when the table holds the file as it is.
pub fn evolve(table: &StructType, file: &StructType) -> Result<Option<StructType>, SchemaError> {
    let evolved = evolve_struct("", table, file)?;
    Ok((evolved != *table).then_some(evolved))
}

fn evolve_struct(
    path: &str,
    table: &StructType,
    file: &StructType,
) -> Result<StructType, SchemaError> {
    let mut fields = Vec::with_capacity(table.fields.len().max(file.fields.len()));
    for old in &table.fields {
        let name = format!("{path}{}", old.name);
        let field = match file.field(&old.name) {
            Some(new) => StructField {
                data_type: evolve_type(&name, &old.data_type, &new.data_type)?,
                nullable: old.nullable || new.nullable,
                ..old.clone()
            },
            // Dropped, or not in this file: later rows are null.
            None => StructField {
                nullable: true,
                ..old.clone()
            },
        };
        fields.push(field);
    }
    for new in &file.fields {
        if table.field(&new.name).is_none() {
            fields.push(StructField {
                nullable: true,
                ..new.clone()
            });
        }
    }
    Ok(StructType::new(fields))
}

fn evolve_type(column: &str, old: &DeltaType, new: &DeltaType) -> Result<DeltaType, SchemaError> {
    match (old, new) {
        (DeltaType::Struct(a), DeltaType::Struct(b)) => Ok(DeltaType::Struct(evolve_struct(
            &format!("{column}."),
            a,
            b,
        )?)),
        (DeltaType::Array(a), DeltaType::Array(b)) => Ok(DeltaType::Array(ArrayType {
            kind: a.kind.clone(),
            element_type: Box::new(evolve_type(column, &a.element_type, &b.element_type)?),
            contains_null: a.contains_null || b.contains_null,
        })),
        (a, b) if a == b => Ok(a.clone()),
        (a, b) => Err(SchemaError::TypeChange {
            column: column.into(),
            from: a.describe(),
            to: b.describe(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{FixedSizeBinaryArray, Int64Array, Time64MicrosecondArray, UInt32Array};

    use super::*;

    fn schema(fields: Vec<Field>) -> StructType {
        table_schema(&conform_schema(&Schema::new(fields))).unwrap()
    }

    #[test]
    fn types_delta_lacks_become_ones_it_has_and_the_batch_follows() {
        let uuid = Field::new("id", DataType::FixedSizeBinary(16), true)
            .with_extension_type(arrow_schema::extension::Uuid);
        let parquet = Schema::new(vec![
            Field::new("_seq", DataType::UInt32, false),
            Field::new("at", DataType::Time64(TimeUnit::Microsecond), true),
            uuid,
        ]);
        let delta = conform_schema(&parquet);
        assert_eq!(delta.field(0).data_type(), &DataType::Int64);
        assert_eq!(delta.field(1).data_type(), &DataType::Int64);
        assert_eq!(
            delta.field(1).metadata().get(COMMENT).map(String::as_str),
            Some(TIME_COMMENT)
        );
        assert_eq!(delta.field(2).data_type(), &DataType::Utf8);
        assert!(
            delta.field(2).metadata().is_empty(),
            "no UUID extension left"
        );

        let mut id = [0u8; 16];
        id[0] = 0x12;
        id[15] = 0xab;
        let batch = RecordBatch::try_new(
            Arc::new(parquet),
            vec![
                Arc::new(UInt32Array::from(vec![7, u32::MAX])),
                Arc::new(Time64MicrosecondArray::from(vec![Some(1_500_000), None])),
                Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                        [Some(id), None].into_iter(),
                        16,
                    )
                    .unwrap(),
                ),
            ],
        )
        .unwrap();
        let out = conform_batch(&batch, &delta).unwrap();
        let seq = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(seq.values(), &[7, u32::MAX as i64]);
        let at = out.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((at.value(0), at.is_null(1)), (1_500_000, true));
        let text = out.column(2).as_string::<i32>();
        assert_eq!(text.value(0), "12000000-0000-0000-0000-0000000000ab");
        assert!(text.is_null(1));
    }

    #[test]
    fn delta_types_are_named_as_the_protocol_names_them() {
        let s = schema(vec![
            Field::new("n", DataType::Int16, false),
            Field::new("d", DataType::Decimal128(12, 2), true),
            Field::new("t", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new(
                "tz",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("element", DataType::Utf8, false))),
                true,
            ),
        ]);
        let json = s.to_json();
        assert!(
            json.contains(r#""type":"short","nullable":false"#),
            "{json}"
        );
        assert!(json.contains(r#""type":"decimal(12,2)""#), "{json}");
        assert!(json.contains(r#""type":"timestamp_ntz""#), "{json}");
        assert!(json.contains(r#""name":"tz","type":"timestamp""#), "{json}");
        assert!(
            json.contains(r#"{"type":"array","elementType":"string","containsNull":false}"#),
            "{json}"
        );
        assert!(s.needs_ntz());
        assert_eq!(StructType::from_json(&json).unwrap(), s);
    }

    #[test]
    fn an_added_column_is_appended_nullable_and_a_dropped_one_stays() {
        let old_image =
            |fields: Vec<Field>| Field::new("_old", DataType::Struct(Fields::from(fields)), true);
        let table = schema(vec![
            Field::new("_seq", DataType::UInt32, false),
            Field::new("a", DataType::Int32, false),
            Field::new("gone", DataType::Utf8, true),
            old_image(vec![Field::new("a", DataType::Int32, true)]),
        ]);
        let file = schema(vec![
            Field::new("_seq", DataType::UInt32, false),
            Field::new("a", DataType::Int32, false),
            Field::new("added", DataType::Utf8, false),
            old_image(vec![
                Field::new("a", DataType::Int32, true),
                Field::new("added", DataType::Utf8, true),
            ]),
        ]);
        let evolved = evolve(&table, &file).unwrap().expect("the table changes");
        let names: Vec<&str> = evolved.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["_seq", "a", "gone", "_old", "added"]);
        assert!(evolved.fields[4].nullable, "an added column is nullable");
        assert!(!evolved.fields[1].nullable);
        let DeltaType::Struct(old) = &evolved.fields[3].data_type else {
            panic!("_old stays a struct")
        };
        assert_eq!(old.fields.len(), 2);
        assert_eq!(evolve(&evolved, &file).unwrap(), None, "nothing new");
        assert_eq!(
            evolve(&evolved, &table).unwrap(),
            None,
            "an older file fits"
        );
    }

    #[test]
    fn a_changed_type_or_a_name_delta_cannot_hold_is_refused_by_name() {
        let table = schema(vec![Field::new("a", DataType::Int32, true)]);
        let file = schema(vec![Field::new("a", DataType::Utf8, true)]);
        let err = evolve(&table, &file).unwrap_err();
        assert_eq!(
            err,
            SchemaError::TypeChange {
                column: "a".into(),
                from: "integer".into(),
                to: "string".into()
            }
        );
        let err = table_schema(&Schema::new(vec![Field::new(
            "first name",
            DataType::Utf8,
            true,
        )]))
        .unwrap_err();
        assert!(err.to_string().contains("\"first name\""), "{err}");
        let err = table_schema(&Schema::new(vec![
            Field::new("Name", DataType::Utf8, true),
            Field::new("name", DataType::Utf8, true),
        ]))
        .unwrap_err();
        assert_eq!(
            err,
            SchemaError::Case {
                first: "Name".into(),
                second: "name".into()
            }
        );
    }
}
