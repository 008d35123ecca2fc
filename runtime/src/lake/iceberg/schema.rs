//! The table schema of an Iceberg output: the Arrow types the encoder writes as Iceberg v2
//! types with field ids, the table's schema evolved by each new file, and the name mapping
//! that lets readers find those ids in data files that carry none.
//!
//! | Arrow (as the encoder writes it) | Iceberg | note |
//! |---|---|---|
//! | `Boolean` | `boolean` | |
//! | `Int16`, `Int32` | `int` | |
//! | `Int64`, `UInt32` (`_seq`, `_xid`, `oid`), `UInt64` (`_commit_lsn`) | `long` | every unsigned value the encoder writes fits |
//! | `Float32`, `Float64` | `float`, `double` | |
//! | `Decimal128(p, s)` | `decimal(p,s)` | |
//! | `Date32` | `date` | |
//! | `Time64(Microsecond)` | `time` | |
//! | `Timestamp(Microsecond, None)` | `timestamp` | |
//! | `Timestamp(Microsecond, "UTC")` | `timestamptz` | |
//! | `Utf8` | `string` | |
//! | `Binary` | `binary` | |
//! | `FixedSizeBinary(16)` with the UUID extension | `uuid` | other widths are `fixed[n]` |
//! | `List`, `Struct`, `Map` | `list`, `struct`, `map` | ids for elements, fields, keys and values |
//!
//! Iceberg holds every one of these but the unsigned integers, so a file's unsigned columns are
//! written as the signed type that holds every value ([`conform_schema`]): a reader that maps
//! a Parquet `INT32` to `long` without heeding its unsigned annotation would turn an `_xid`
//! past 2^31 negative. Nothing else is conformed. A field's
//! `pg.*` and `tributary.*` metadata is kept as its `doc`, a JSON object, so that what a column
//! was in PostgreSQL (and which columns are the key) survives in the table's schema.

use std::collections::{BTreeMap, HashMap};

use arrow_schema::{DataType, Field, TimeUnit};
use serde::{Deserialize, Serialize};

type Extra = serde_json::Map<String, serde_json::Value>;

/// The type an unsigned integer column is written as: the signed one that holds every value.
fn conform_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::UInt8 | DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::List(item) => DataType::List(conform_field(item)),
        DataType::LargeList(item) => DataType::LargeList(conform_field(item)),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(conform_field).collect()),
        other => other.clone(),
    }
}

fn conform_field(field: &arrow_schema::FieldRef) -> arrow_schema::FieldRef {
    match conform_type(field.data_type()) {
        same if &same == field.data_type() => field.clone(),
        other => std::sync::Arc::new(field.as_ref().clone().with_data_type(other)),
    }
}

/// The columns of `schema` as an Iceberg output's files hold them: unsigned integers signed.
pub fn conform_schema(schema: &arrow_schema::SchemaRef) -> arrow_schema::SchemaRef {
    let fields: arrow_schema::Fields = schema.fields().iter().map(conform_field).collect();
    if &fields == schema.fields() {
        return schema.clone();
    }
    std::sync::Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `batch` with the columns of `schema`, its [`conform_schema`].
pub fn conform_batch(
    batch: &arrow_array::RecordBatch,
    schema: &arrow_schema::SchemaRef,
) -> Result<arrow_array::RecordBatch, arrow_schema::ArrowError> {
    if batch.schema() == *schema {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(
            |(column, field)| match column.data_type() == field.data_type() {
                true => Ok(column.clone()),
                false => arrow_cast::cast(column, field.data_type()),
            },
        )
        .collect::<Result<Vec<_>, _>>()?;
    arrow_array::RecordBatch::try_new(schema.clone(), columns)
}

/// An Iceberg type: a primitive by name (`long`, `decimal(12,2)`, `fixed[16]`) or nested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Type {
    Primitive(String),
    Struct(StructType),
    List(ListType),
    Map(MapType),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructType {
    #[serde(rename = "type")]
    pub kind: String,
    pub fields: Vec<NestedField>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NestedField {
    pub id: i32,
    pub name: String,
    pub required: bool,
    #[serde(rename = "type")]
    pub field_type: Type,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    /// What other writers put here (defaults of format v3, ...), kept as it was.
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ListType {
    #[serde(rename = "type")]
    pub kind: String,
    pub element_id: i32,
    pub element: Box<Type>,
    pub element_required: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MapType {
    #[serde(rename = "type")]
    pub kind: String,
    pub key_id: i32,
    pub key: Box<Type>,
    pub value_id: i32,
    pub value: Box<Type>,
    pub value_required: bool,
}

/// A table schema: the top-level struct, with its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Schema {
    #[serde(rename = "type", default = "struct_kind")]
    pub kind: String,
    pub schema_id: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier_field_ids: Option<Vec<i32>>,
    pub fields: Vec<NestedField>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn struct_kind() -> String {
    "struct".into()
}

/// Why a file's columns do not fit its table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "column {column:?} changed type from {from} to {to}, which an Iceberg table cannot \
         promote (it widens int to long, float to double and a decimal's precision); land the \
         new type into a new column, or resynchronise the table into a new sink prefix"
    )]
    TypeChange {
        column: String,
        from: String,
        to: String,
    },
    #[error(
        "column {column:?} has Arrow type {data_type}, which this writer has no Iceberg type for"
    )]
    Unsupported { column: String, data_type: String },
}

impl Type {
    fn primitive(name: &str) -> Type {
        Type::Primitive(name.to_owned())
    }

    /// The type as an error names it: `long`, `list<int>`, `struct`.
    pub fn describe(&self) -> String {
        match self {
            Type::Primitive(name) => name.clone(),
            Type::Struct(_) => "struct".into(),
            Type::List(l) => format!("list<{}>", l.element.describe()),
            Type::Map(m) => format!("map<{}, {}>", m.key.describe(), m.value.describe()),
        }
    }
}

impl Schema {
    /// The field at a top-level `name`.
    pub fn field(&self, name: &str) -> Option<&NestedField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Every field of the schema, nested ones too, with its id and its dotted name.
    pub fn all_fields(&self) -> Vec<(i32, String, &Type, bool)> {
        let mut out = Vec::new();
        for f in &self.fields {
            walk(&f.name, f.id, &f.field_type, f.required, &mut out);
        }
        out
    }

    /// The highest field id the schema uses.
    pub fn highest_id(&self) -> i32 {
        self.all_fields()
            .iter()
            .map(|(id, ..)| *id)
            .max()
            .unwrap_or(0)
    }
}

fn walk<'a>(
    name: &str,
    id: i32,
    ty: &'a Type,
    required: bool,
    out: &mut Vec<(i32, String, &'a Type, bool)>,
) {
    out.push((id, name.to_owned(), ty, required));
    match ty {
        Type::Primitive(_) => {}
        Type::Struct(s) => {
            for f in &s.fields {
                walk(
                    &format!("{name}.{}", f.name),
                    f.id,
                    &f.field_type,
                    f.required,
                    out,
                );
            }
        }
        Type::List(l) => walk(
            &format!("{name}.element"),
            l.element_id,
            &l.element,
            l.element_required,
            out,
        ),
        Type::Map(m) => {
            walk(&format!("{name}.key"), m.key_id, &m.key, true, out);
            walk(
                &format!("{name}.value"),
                m.value_id,
                &m.value,
                m.value_required,
                out,
            );
        }
    }
}

/// Hands out field ids above the table's `last-column-id`.
struct Ids(i32);

impl Ids {
    fn next(&mut self) -> i32 {
        self.0 += 1;
        self.0
    }
}

/// The Iceberg type of an Arrow field's type, its nested ids taken from `ids`.
fn iceberg_type(column: &str, field: &Field, ids: &mut Ids) -> Result<Type, SchemaError> {
    let p = Type::primitive;
    Ok(match field.data_type() {
        DataType::Boolean => p("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            p("int")
        }
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => p("long"),
        DataType::Float32 => p("float"),
        DataType::Float64 => p("double"),
        DataType::Decimal128(precision, scale) if *precision <= 38 && *scale >= 0 => {
            Type::Primitive(format!("decimal({precision},{scale})"))
        }
        DataType::Date32 => p("date"),
        DataType::Time64(TimeUnit::Microsecond) => p("time"),
        DataType::Timestamp(TimeUnit::Microsecond, None) => p("timestamp"),
        DataType::Timestamp(TimeUnit::Microsecond, Some(tz))
            if matches!(tz.as_ref(), "UTC" | "+00:00" | "Z") =>
        {
            p("timestamptz")
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => p("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => p("binary"),
        DataType::FixedSizeBinary(16) if field.extension_type_name() == Some("arrow.uuid") => {
            p("uuid")
        }
        DataType::FixedSizeBinary(n) => Type::Primitive(format!("fixed[{n}]")),
        DataType::Struct(fields) => Type::Struct(StructType {
            kind: "struct".into(),
            fields: nested_fields(
                &format!("{column}."),
                fields.iter().map(|f| f.as_ref()),
                ids,
            )?,
        }),
        DataType::List(item) | DataType::LargeList(item) => {
            let element_id = ids.next();
            Type::List(ListType {
                kind: "list".into(),
                element_id,
                element: Box::new(iceberg_type(column, item, ids)?),
                element_required: !item.is_nullable(),
            })
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return unsupported(column, field.data_type());
            };
            let (key_id, value_id) = (ids.next(), ids.next());
            Type::Map(MapType {
                kind: "map".into(),
                key_id,
                key: Box::new(iceberg_type(column, &kv[0], ids)?),
                value_id,
                value: Box::new(iceberg_type(column, &kv[1], ids)?),
                value_required: !kv[1].is_nullable(),
            })
        }
        other => return unsupported(column, other),
    })
}

fn unsupported<T>(column: &str, data_type: &DataType) -> Result<T, SchemaError> {
    Err(SchemaError::Unsupported {
        column: column.into(),
        data_type: data_type.to_string(),
    })
}

/// The fields of a struct: each field's id first, then the ids inside each, in order, so
/// that the top-level columns of a new table are numbered 1, 2, 3, ... as readers show them.
fn nested_fields<'a>(
    path: &str,
    fields: impl Iterator<Item = &'a Field>,
    ids: &mut Ids,
) -> Result<Vec<NestedField>, SchemaError> {
    let fields: Vec<(&Field, i32)> = fields.map(|f| (f, ids.next())).collect();
    fields
        .into_iter()
        .map(|(f, id)| {
            let name = format!("{path}{}", f.name());
            Ok(NestedField {
                id,
                name: f.name().clone(),
                required: !f.is_nullable(),
                field_type: iceberg_type(&name, f, ids)?,
                doc: doc(f.metadata()),
                extra: Extra::new(),
            })
        })
        .collect()
}

/// The field metadata a column's `doc` keeps: what it was in PostgreSQL, and the key mark.
fn doc(metadata: &arrow_schema::Metadata) -> Option<String> {
    let kept: BTreeMap<&String, &String> = metadata
        .iter()
        .filter(|(k, _)| k.starts_with("pg.") || k.starts_with("tributary."))
        .collect();
    (!kept.is_empty()).then(|| serde_json::to_string(&kept).expect("strings serialize"))
}

/// The field metadata a column's `doc` holds (none when another writer wrote prose there).
pub fn doc_metadata(doc: Option<&str>) -> HashMap<String, String> {
    doc.and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default()
}

/// The schema (id 0) of a new table whose first file has `columns`, and its last column id.
pub fn fresh(columns: &arrow_schema::Schema) -> Result<(Schema, i32), SchemaError> {
    let mut ids = Ids(0);
    let fields = nested_fields("", columns.fields().iter().map(|f| f.as_ref()), &mut ids)?;
    Ok((
        Schema {
            kind: struct_kind(),
            schema_id: 0,
            identifier_field_ids: None,
            fields,
            extra: Extra::new(),
        },
        ids.0,
    ))
}

/// The table's schema once it also holds a file with `columns`, and the new last column id,
/// or `None` when it holds the file as it is. As Delta's: columns the table lacks are added
/// at the end, optional, each with a new id above `last_column_id` (nested fields too);
/// columns the file lacks stay, and become optional; a type widens where Iceberg promotes
/// (`int` to `long`, `float` to `double`, a decimal's precision at the same scale), and any
/// other change of type is an error that names the column. A file narrower than its table
/// (an `int` column in a `long` table) fits as it is: readers promote it.
pub fn evolve(
    table: &Schema,
    last_column_id: i32,
    columns: &arrow_schema::Schema,
) -> Result<Option<(Schema, i32)>, SchemaError> {
    let mut ids = Ids(last_column_id.max(table.highest_id()));
    let fields = evolve_struct(
        "",
        &table.fields,
        columns.fields().iter().map(|f| f.as_ref()),
        &mut ids,
    )?;
    if fields == table.fields {
        return Ok(None);
    }
    let schema = Schema {
        schema_id: table.schema_id + 1,
        fields,
        ..table.clone()
    };
    Ok(Some((schema, ids.0)))
}

fn evolve_struct<'a>(
    path: &str,
    table: &[NestedField],
    file: impl Iterator<Item = &'a Field>,
    ids: &mut Ids,
) -> Result<Vec<NestedField>, SchemaError> {
    let file: Vec<&Field> = file.collect();
    let mut fields = Vec::with_capacity(table.len().max(file.len()));
    for old in table {
        let name = format!("{path}{}", old.name);
        fields.push(match file.iter().find(|f| f.name() == &old.name) {
            Some(new) => NestedField {
                field_type: evolve_type(&name, &old.field_type, new, ids)?,
                required: old.required && !new.is_nullable(),
                ..old.clone()
            },
            None => NestedField {
                required: false,
                ..old.clone()
            },
        });
    }
    let added: Vec<&Field> = file
        .into_iter()
        .filter(|f| !table.iter().any(|t| &t.name == f.name()))
        .collect();
    for mut field in nested_fields(path, added.into_iter(), ids)? {
        field.required = false;
        fields.push(field);
    }
    Ok(fields)
}

fn evolve_type(column: &str, old: &Type, new: &Field, ids: &mut Ids) -> Result<Type, SchemaError> {
    let change = |to: &Type| SchemaError::TypeChange {
        column: column.into(),
        from: old.describe(),
        to: to.describe(),
    };
    match (old, new.data_type()) {
        (Type::Struct(s), DataType::Struct(fields)) => Ok(Type::Struct(StructType {
            kind: s.kind.clone(),
            fields: evolve_struct(
                &format!("{column}."),
                &s.fields,
                fields.iter().map(|f| f.as_ref()),
                ids,
            )?,
        })),
        (Type::List(l), DataType::List(item) | DataType::LargeList(item)) => {
            Ok(Type::List(ListType {
                element: Box::new(evolve_type(column, &l.element, item, ids)?),
                element_required: l.element_required && !item.is_nullable(),
                ..l.clone()
            }))
        }
        (Type::Primitive(a), _) => {
            // A primitive's ids are never used: only the type matters.
            let b = iceberg_type(column, new, &mut Ids(0))?;
            let Type::Primitive(b_name) = &b else {
                return Err(change(&b));
            };
            match promotion(a, b_name) {
                Some(to) => Ok(Type::Primitive(to)),
                None => Err(change(&b)),
            }
        }
        _ => {
            let b = iceberg_type(column, new, &mut Ids(0))?;
            Err(change(&b))
        }
    }
}

/// The type a column of table type `table` takes to hold a file of type `file`, when Iceberg
/// allows it.
fn promotion(table: &str, file: &str) -> Option<String> {
    if table == file {
        return Some(table.to_owned());
    }
    match (table, file) {
        ("int", "long") | ("long", "int") => Some("long".into()),
        ("float", "double") | ("double", "float") => Some("double".into()),
        _ => {
            let (p1, s1) = decimal(table)?;
            let (p2, s2) = decimal(file)?;
            (s1 == s2).then(|| format!("decimal({},{s1})", p1.max(p2)))
        }
    }
}

/// The precision and scale of `decimal(p,s)`.
pub fn decimal(name: &str) -> Option<(u8, u8)> {
    let inner = name.strip_prefix("decimal(")?.strip_suffix(')')?;
    let (p, s) = inner.split_once(',')?;
    Some((p.trim().parse().ok()?, s.trim().parse().ok()?))
}

/// The table property that maps the names in data files to field ids.
pub const NAME_MAPPING: &str = "schema.name-mapping.default";

/// The name mapping of `schema` as JSON text: every field by its name, lists' elements by
/// `element`, maps' keys and values by `key` and `value`. Readers use it for data files
/// written without field ids, which every file the encoder writes is (see the module docs
/// of [`super`]).
pub fn name_mapping(schema: &Schema) -> String {
    let mapping: Vec<serde_json::Value> = schema.fields.iter().map(mapped_field).collect();
    serde_json::Value::Array(mapping).to_string()
}

fn mapped_field(field: &NestedField) -> serde_json::Value {
    mapped(field.id, &field.name, &field.field_type)
}

fn mapped(id: i32, name: &str, ty: &Type) -> serde_json::Value {
    let nested: Vec<serde_json::Value> = match ty {
        Type::Primitive(_) => Vec::new(),
        Type::Struct(s) => s.fields.iter().map(mapped_field).collect(),
        Type::List(l) => vec![mapped(l.element_id, "element", &l.element)],
        Type::Map(m) => vec![
            mapped(m.key_id, "key", &m.key),
            mapped(m.value_id, "value", &m.value),
        ],
    };
    let mut entry = serde_json::json!({"field-id": id, "names": [name]});
    if !nested.is_empty() {
        entry["fields"] = serde_json::Value::Array(nested);
    }
    entry
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn arrow(fields: Vec<Field>) -> arrow_schema::Schema {
        arrow_schema::Schema::new(fields)
    }

    /// The columns the encoder writes for a table output with these columns.
    fn encoder_columns() -> arrow_schema::Schema {
        use crate::stream::change::OutputColumn;
        use crate::wire::pgtype::oid;
        let mut id = OutputColumn::builtin("id", oid::INT4, -1);
        id.key = true;
        id.nullable = false;
        let columns = vec![
            id,
            OutputColumn::builtin("u", oid::UUID, -1),
            OutputColumn::builtin("price", oid::NUMERIC, ((12 << 16) | 2) + 4),
            OutputColumn::builtin("at", oid::TIME, -1),
            OutputColumn::builtin("ts", oid::TIMESTAMP, -1),
            OutputColumn::builtin("tags", oid::TEXT_ARRAY, -1),
            OutputColumn::builtin("o", oid::OID, -1),
        ];
        let columns = Arc::<[OutputColumn]>::from(columns);
        crate::lake::encode::arrow_schema(&columns, true)
            .as_ref()
            .clone()
    }

    #[test]
    fn the_encoders_types_map_to_iceberg_types_with_ids_in_order() {
        let (schema, last) = fresh(&encoder_columns()).unwrap();
        let names: Vec<(i32, &str, String, bool)> = schema
            .fields
            .iter()
            .map(|f| (f.id, f.name.as_str(), f.field_type.describe(), f.required))
            .collect();
        assert_eq!(
            names,
            vec![
                (1, "_op", "string".into(), true),
                (2, "_commit_lsn", "long".into(), true),
                (3, "_seq", "long".into(), true),
                (4, "_xid", "long".into(), true),
                (5, "_commit_time", "timestamptz".into(), true),
                (6, "_schema", "string".into(), true),
                (7, "_unchanged_toast", "list<string>".into(), false),
                (8, "id", "int".into(), true),
                (9, "u", "uuid".into(), false),
                (10, "price", "decimal(12,2)".into(), false),
                (11, "at", "time".into(), false),
                (12, "ts", "timestamp".into(), false),
                (13, "tags", "list<string>".into(), false),
                (14, "o", "long".into(), false),
                (15, "_old", "struct".into(), false),
            ]
        );
        // Nested ids follow the top-level ones, each struct's fields before what they hold.
        let Type::List(toast) = &schema.fields[6].field_type else {
            panic!("a list")
        };
        assert_eq!((toast.element_id, toast.element_required), (16, true));
        let Type::Struct(old) = &schema.fields[14].field_type else {
            panic!("a struct")
        };
        assert_eq!(old.fields[0].id, 18);
        assert_eq!(last, schema.highest_id());
        let doc = doc_metadata(schema.fields[7].doc.as_deref());
        assert_eq!(doc.get("pg.type").map(String::as_str), Some("int4"));
        assert_eq!(doc.get("tributary.key").map(String::as_str), Some("true"));
        // The JSON form round-trips.
        let json = serde_json::to_string(&schema).unwrap();
        assert_eq!(serde_json::from_str::<Schema>(&json).unwrap(), schema);
    }

    #[test]
    fn a_new_column_gets_the_next_id_and_promotions_widen() {
        let first = arrow(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("f", DataType::Float32, true),
            Field::new("d", DataType::Decimal128(9, 2), true),
            Field::new(
                "s",
                DataType::Struct(vec![Field::new("x", DataType::Int32, true)].into()),
                true,
            ),
        ]);
        let (table, last) = fresh(&first).unwrap();
        assert_eq!(last, 5);
        assert_eq!(evolve(&table, last, &first).unwrap(), None);

        let second = arrow(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("f", DataType::Float64, true),
            Field::new("d", DataType::Decimal128(12, 2), true),
            Field::new(
                "s",
                DataType::Struct(
                    vec![
                        Field::new("x", DataType::Int32, true),
                        Field::new("y", DataType::Utf8, true),
                    ]
                    .into(),
                ),
                true,
            ),
            Field::new("b", DataType::Utf8, false),
        ]);
        let (evolved, last) = evolve(&table, last, &second).unwrap().unwrap();
        assert_eq!(evolved.schema_id, 1);
        assert_eq!(last, 7);
        let types: Vec<String> = evolved
            .fields
            .iter()
            .map(|f| f.field_type.describe())
            .collect();
        assert_eq!(
            types,
            ["long", "double", "decimal(12,2)", "struct", "string"]
        );
        let b = evolved.field("b").unwrap();
        assert_eq!((b.id, b.required), (7, false), "added optional, after s.y");
        let Type::Struct(s) = &evolved.field("s").unwrap().field_type else {
            panic!()
        };
        assert_eq!(s.fields[1].id, 6);

        // A file without `a` makes it optional; a narrower file fits as it is.
        let third = arrow(vec![Field::new("f", DataType::Float32, true)]);
        let (again, _) = evolve(&evolved, last, &third).unwrap().unwrap();
        assert!(!again.field("a").unwrap().required);
        assert_eq!(again.field("f").unwrap().field_type.describe(), "double");
    }

    #[test]
    fn a_change_iceberg_cannot_promote_names_the_column() {
        let (table, last) = fresh(&arrow(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("d", DataType::Decimal128(9, 2), true),
        ]))
        .unwrap();
        let e = evolve(
            &table,
            last,
            &arrow(vec![Field::new("a", DataType::Utf8, true)]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            SchemaError::TypeChange {
                column: "a".into(),
                from: "int".into(),
                to: "string".into()
            }
        );
        let e = evolve(
            &table,
            last,
            &arrow(vec![Field::new("d", DataType::Decimal128(9, 3), true)]),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("\"d\" changed type from decimal(9,2) to decimal(9,3)")
        );
    }

    #[test]
    fn the_name_mapping_names_every_id() {
        let (schema, _) = fresh(&encoder_columns()).unwrap();
        let mapping: serde_json::Value = serde_json::from_str(&name_mapping(&schema)).unwrap();
        assert_eq!(
            mapping[0],
            serde_json::json!({"field-id": 1, "names": ["_op"]})
        );
        assert_eq!(
            mapping[6],
            serde_json::json!({"field-id": 7, "names": ["_unchanged_toast"],
                "fields": [{"field-id": 16, "names": ["element"]}]})
        );
        assert_eq!(mapping[14]["fields"][0]["names"][0], "id");
    }
}
