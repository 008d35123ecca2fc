//! Avro object container files, as far as Iceberg's manifests and manifest lists need them:
//! the binary encoding of every Avro type, the container framing, and the `null` and `deflate`
//! codecs.
//!
//! Why not the `apache-avro` crate: what Iceberg needs is narrow (records, unions with null,
//! arrays, and maps spelled as arrays of key/value records), and the crate brings a schema
//! model, serde glue, a dozen dependencies and version constraints of its own for it. What
//! matters most is reading files other writers made (pyiceberg, Spark, Trino): those are
//! decoded by the writer schema each file embeds, into generic [`Value`]s that the manifest
//! code looks up by field name, so fields a writer adds, a different field order, `int` where
//! `long` was expected, or a union in another order all read. That is a decoder driven by a
//! parsed schema, about 400 lines here, with raw deflate from `flate2`. Written files use
//! `deflate`, as Java and pyiceberg do by default. Other codecs (snappy, zstd, bzip2) are
//! refused by name when read.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;

/// The four bytes that open an object container file.
const MAGIC: &[u8; 4] = b"Obj\x01";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AvroError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, AvroError> {
    Err(AvroError(message.into()))
}

/// A parsed Avro schema. Logical types are read as their underlying type.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum(Vec<String>),
    Array(Box<Schema>),
    Map(Box<Schema>),
    Union(Vec<Schema>),
    Record(Arc<Record>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub name: String,
    pub fields: Vec<(String, Schema)>,
}

/// A decoded datum. A union decodes to its branch's value; `Null` is the null branch.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(Vec<u8>),
    String(String),
    Fixed(Vec<u8>),
    Enum(String),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
    Record(Vec<(String, Value)>),
}

impl Value {
    /// The record field `name`, or `None` when this is not a record or has no such field.
    pub fn field(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Record(fields) => fields.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// An `int` or a `long` (writers differ in which they use for counts).
    pub fn as_long(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(i64::from(*v)),
            Value::Long(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::Enum(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) | Value::Fixed(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
}

/// Parse a schema from its JSON form, as a container file's `avro.schema` holds it.
pub fn parse_schema(json: &serde_json::Value) -> Result<Schema, AvroError> {
    parse(json, &mut BTreeMap::new(), "")
}

fn parse(
    json: &serde_json::Value,
    named: &mut BTreeMap<String, Schema>,
    namespace: &str,
) -> Result<Schema, AvroError> {
    use serde_json::Value as J;
    match json {
        J::String(name) => primitive(name)
            .or_else(|| named.get(name.as_str()).cloned())
            .or_else(|| named.get(&format!("{namespace}.{name}")).cloned())
            .map_or_else(|| err(format!("unknown Avro type {name:?}")), Ok),
        J::Array(branches) => Ok(Schema::Union(
            branches
                .iter()
                .map(|b| parse(b, named, namespace))
                .collect::<Result<_, _>>()?,
        )),
        J::Object(object) => {
            let kind = object.get("type").unwrap_or(&J::Null);
            let name = object.get("name").and_then(J::as_str).unwrap_or("");
            let namespace = object
                .get("namespace")
                .and_then(J::as_str)
                .unwrap_or(namespace);
            let schema = match kind.as_str() {
                Some("record" | "error") => {
                    let mut fields = Vec::new();
                    for field in object
                        .get("fields")
                        .and_then(J::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let field_name = field.get("name").and_then(J::as_str).unwrap_or("");
                        let field_type = field.get("type").unwrap_or(&J::Null);
                        fields.push((field_name.to_owned(), parse(field_type, named, namespace)?));
                    }
                    Schema::Record(Arc::new(Record {
                        name: name.to_owned(),
                        fields,
                    }))
                }
                Some("enum") => Schema::Enum(
                    object
                        .get("symbols")
                        .and_then(J::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect(),
                ),
                Some("array") => Schema::Array(Box::new(parse(
                    object.get("items").unwrap_or(&J::Null),
                    named,
                    namespace,
                )?)),
                Some("map") => Schema::Map(Box::new(parse(
                    object.get("values").unwrap_or(&J::Null),
                    named,
                    namespace,
                )?)),
                Some("fixed") => {
                    Schema::Fixed(object.get("size").and_then(J::as_u64).unwrap_or(0) as usize)
                }
                _ => return parse(kind, named, namespace),
            };
            if !name.is_empty() {
                named.insert(name.to_owned(), schema.clone());
                if !namespace.is_empty() {
                    named.insert(format!("{namespace}.{name}"), schema.clone());
                }
            }
            Ok(schema)
        }
        other => err(format!("{other} is not an Avro schema")),
    }
}

fn primitive(name: &str) -> Option<Schema> {
    Some(match name {
        "null" => Schema::Null,
        "boolean" => Schema::Boolean,
        "int" => Schema::Int,
        "long" => Schema::Long,
        "float" => Schema::Float,
        "double" => Schema::Double,
        "bytes" => Schema::Bytes,
        "string" => Schema::String,
        _ => return None,
    })
}

/// A reader over the bytes of one datum or block.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], AvroError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return err(format!("the data ends {n} bytes early at byte {}", self.at));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn long(&mut self) -> Result<i64, AvroError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        err("a variable-length integer runs past ten bytes")
    }

    fn length(&mut self) -> Result<usize, AvroError> {
        let n = self.long()?;
        usize::try_from(n).or_else(|_| err(format!("negative length {n}")))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, AvroError> {
        let n = self.length()?;
        Ok(self.take(n)?.to_vec())
    }

    /// The item count of the next block of an array or map (0 ends it).
    fn block(&mut self) -> Result<usize, AvroError> {
        let count = self.long()?;
        if count < 0 {
            self.long()?; // the block's size in bytes, for skipping
        }
        usize::try_from(count.unsigned_abs()).or_else(|_| err("a block count overflows"))
    }

    fn value(&mut self, schema: &Schema) -> Result<Value, AvroError> {
        Ok(match schema {
            Schema::Null => Value::Null,
            Schema::Boolean => Value::Boolean(self.take(1)?[0] != 0),
            Schema::Int => {
                Value::Int(i32::try_from(self.long()?).or_else(|_| err("an int out of range"))?)
            }
            Schema::Long => Value::Long(self.long()?),
            Schema::Float => Value::Float(f32::from_le_bytes(
                self.take(4)?.try_into().expect("four bytes"),
            )),
            Schema::Double => Value::Double(f64::from_le_bytes(
                self.take(8)?.try_into().expect("eight bytes"),
            )),
            Schema::Bytes => Value::Bytes(self.bytes()?),
            Schema::String => Value::String(
                String::from_utf8(self.bytes()?).or_else(|_| err("a string is not UTF-8"))?,
            ),
            Schema::Fixed(n) => Value::Fixed(self.take(*n)?.to_vec()),
            Schema::Enum(symbols) => {
                let i = self.length()?;
                match symbols.get(i) {
                    Some(s) => Value::Enum(s.clone()),
                    None => return err(format!("enum index {i} out of range")),
                }
            }
            Schema::Array(items) => {
                let mut values = Vec::new();
                loop {
                    let count = self.block()?;
                    if count == 0 {
                        break Value::Array(values);
                    }
                    for _ in 0..count {
                        values.push(self.value(items)?);
                    }
                }
            }
            Schema::Map(values_schema) => {
                let mut entries = Vec::new();
                loop {
                    let count = self.block()?;
                    if count == 0 {
                        break Value::Map(entries);
                    }
                    for _ in 0..count {
                        let key = String::from_utf8(self.bytes()?)
                            .or_else(|_| err("a map key is not UTF-8"))?;
                        entries.push((key, self.value(values_schema)?));
                    }
                }
            }
            Schema::Union(branches) => {
                let i = self.length()?;
                match branches.get(i) {
                    Some(branch) => self.value(branch)?,
                    None => return err(format!("union branch {i} out of range")),
                }
            }
            Schema::Record(record) => Value::Record(
                record
                    .fields
                    .iter()
                    .map(|(name, schema)| Ok((name.clone(), self.value(schema)?)))
                    .collect::<Result<_, AvroError>>()?,
            ),
        })
    }
}

fn write_long(out: &mut Vec<u8>, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

/// Whether `value` is a datum of `schema` (to choose a union's branch).
fn fits(schema: &Schema, value: &Value) -> bool {
    matches!(
        (schema, value),
        (Schema::Null, Value::Null)
            | (Schema::Boolean, Value::Boolean(_))
            | (Schema::Int, Value::Int(_))
            | (Schema::Long, Value::Long(_) | Value::Int(_))
            | (Schema::Float, Value::Float(_))
            | (Schema::Double, Value::Double(_))
            | (Schema::Bytes, Value::Bytes(_))
            | (Schema::String, Value::String(_))
            | (Schema::Fixed(_), Value::Fixed(_))
            | (Schema::Enum(_), Value::Enum(_))
            | (Schema::Array(_), Value::Array(_))
            | (Schema::Map(_), Value::Map(_))
            | (Schema::Record(_), Value::Record(_))
    )
}

/// Append `value`'s binary encoding by `schema`. Record fields are taken by name; a field the
/// value lacks is written as null (its schema must allow it).
pub fn encode(out: &mut Vec<u8>, schema: &Schema, value: &Value) -> Result<(), AvroError> {
    match (schema, value) {
        (Schema::Null, Value::Null) => {}
        (Schema::Boolean, Value::Boolean(b)) => out.push(u8::from(*b)),
        (Schema::Int, Value::Int(v)) => write_long(out, i64::from(*v)),
        (Schema::Long, Value::Long(v)) => write_long(out, *v),
        (Schema::Long, Value::Int(v)) => write_long(out, i64::from(*v)),
        (Schema::Float, Value::Float(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (Schema::Double, Value::Double(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (Schema::Bytes, Value::Bytes(b)) => write_bytes(out, b),
        (Schema::String, Value::String(s)) => write_bytes(out, s.as_bytes()),
        (Schema::Fixed(n), Value::Fixed(b)) if b.len() == *n => out.extend_from_slice(b),
        (Schema::Enum(symbols), Value::Enum(s)) => match symbols.iter().position(|x| x == s) {
            Some(i) => write_long(out, i as i64),
            None => return err(format!("{s:?} is not a symbol of the enum")),
        },
        (Schema::Array(items), Value::Array(values)) => {
            if !values.is_empty() {
                write_long(out, values.len() as i64);
                for v in values {
                    encode(out, items, v)?;
                }
            }
            write_long(out, 0);
        }
        (Schema::Map(values_schema), Value::Map(entries)) => {
            if !entries.is_empty() {
                write_long(out, entries.len() as i64);
                for (key, v) in entries {
                    write_bytes(out, key.as_bytes());
                    encode(out, values_schema, v)?;
                }
            }
            write_long(out, 0);
        }
        (Schema::Union(branches), value) => {
            let Some(i) = branches.iter().position(|b| fits(b, value)) else {
                return err(format!("{value:?} fits no branch of {branches:?}"));
            };
            write_long(out, i as i64);
            encode(out, &branches[i], value)?;
        }
        (Schema::Record(record), Value::Record(_)) => {
            for (name, field_schema) in &record.fields {
                let v = value.field(name).unwrap_or(&Value::Null);
                encode(out, field_schema, v).map_err(|e| {
                    AvroError(format!(
                        "field {name:?} of record {:?}: {}",
                        record.name, e.0
                    ))
                })?;
            }
        }
        (schema, value) => return err(format!("{value:?} is not a datum of {schema:?}")),
    }
    Ok(())
}

/// How a container file's blocks are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Null,
    Deflate,
}

/// A container file: the schema it was written with, its metadata and its records.
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    pub schema: Schema,
    /// The metadata entries other than `avro.*`, as text.
    pub metadata: BTreeMap<String, String>,
    pub records: Vec<Value>,
}

/// Write `records` as an object container file of `schema` (its JSON form), one block.
pub fn write_container(
    schema: &serde_json::Value,
    metadata: &[(&str, String)],
    records: &[Value],
    codec: Codec,
) -> Result<Vec<u8>, AvroError> {
    let parsed = parse_schema(schema)?;
    let mut out = MAGIC.to_vec();
    let codec_name = match codec {
        Codec::Null => "null",
        Codec::Deflate => "deflate",
    };
    let mut header: Vec<(String, Value)> = vec![
        (
            "avro.schema".into(),
            Value::Bytes(schema.to_string().into_bytes()),
        ),
        (
            "avro.codec".into(),
            Value::Bytes(codec_name.as_bytes().to_vec()),
        ),
    ];
    header.extend(
        metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::Bytes(v.as_bytes().to_vec()))),
    );
    encode(
        &mut out,
        &Schema::Map(Box::new(Schema::Bytes)),
        &Value::Map(header),
    )?;
    let mut sync = [0u8; 16];
    getrandom::fill(&mut sync).map_err(|e| AvroError(format!("the random source: {e}")))?;
    out.extend_from_slice(&sync);
    if records.is_empty() {
        return Ok(out);
    }
    let mut block = Vec::new();
    for record in records {
        encode(&mut block, &parsed, record)?;
    }
    let block = match codec {
        Codec::Null => block,
        Codec::Deflate => {
            let mut encoder =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            encoder
                .write_all(&block)
                .and_then(|_| encoder.finish())
                .map_err(|e| AvroError(format!("deflate: {e}")))?
        }
    };
    write_long(&mut out, records.len() as i64);
    write_bytes(&mut out, &block);
    out.extend_from_slice(&sync);
    Ok(out)
}

/// Read an object container file, whoever wrote it, by the schema it embeds.
pub fn read_container(bytes: &[u8]) -> Result<Container, AvroError> {
    if !bytes.starts_with(MAGIC) {
        return err("not an Avro object container file (no Obj\\x01 magic)");
    }
    let mut cursor = Cursor { bytes, at: 4 };
    let header = cursor.value(&Schema::Map(Box::new(Schema::Bytes)))?;
    let Value::Map(entries) = header else {
        unreachable!("a map schema decodes to a map");
    };
    let mut metadata = BTreeMap::new();
    let (mut schema_json, mut codec) = (None, Codec::Null);
    for (key, value) in entries {
        let Value::Bytes(value) = value else { continue };
        match key.as_str() {
            "avro.schema" => schema_json = Some(value),
            "avro.codec" => {
                codec = match value.as_slice() {
                    b"null" => Codec::Null,
                    b"deflate" => Codec::Deflate,
                    other => {
                        return err(format!(
                            "Avro codec {:?} is not supported (null and deflate are)",
                            String::from_utf8_lossy(other)
                        ));
                    }
                }
            }
            _ => {
                metadata.insert(key, String::from_utf8_lossy(&value).into_owned());
            }
        }
    }
    let Some(schema_json) = schema_json else {
        return err("the file has no avro.schema");
    };
    let schema_json: serde_json::Value = serde_json::from_slice(&schema_json)
        .map_err(|e| AvroError(format!("avro.schema is not JSON: {e}")))?;
    let schema = parse_schema(&schema_json)?;
    let sync = cursor.take(16)?.to_vec();
    let mut records = Vec::new();
    while cursor.at < bytes.len() {
        let count = cursor.length()?;
        let data = cursor.bytes()?;
        let data = match codec {
            Codec::Null => data,
            Codec::Deflate => {
                let mut inflated = Vec::new();
                flate2::read::DeflateDecoder::new(data.as_slice())
                    .read_to_end(&mut inflated)
                    .map_err(|e| AvroError(format!("a deflate block: {e}")))?;
                inflated
            }
        };
        let mut block = Cursor {
            bytes: &data,
            at: 0,
        };
        for _ in 0..count {
            records.push(block.value(&schema)?);
        }
        if cursor.take(16)? != sync.as_slice() {
            return err("a block does not end in the file's sync marker");
        }
    }
    Ok(Container {
        schema,
        metadata,
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn zigzag_varints_round_trip() {
        for v in [
            0,
            -1,
            1,
            63,
            -64,
            64,
            300,
            i64::MAX,
            i64::MIN,
            i64::from(i32::MIN),
        ] {
            let mut out = Vec::new();
            write_long(&mut out, v);
            assert_eq!(Cursor { bytes: &out, at: 0 }.long().unwrap(), v);
        }
        let mut out = Vec::new();
        write_long(&mut out, -3);
        assert_eq!(out, [5], "zigzag: -3 is 5");
        out.clear();
        write_long(&mut out, 64);
        assert_eq!(out, [0x80, 0x01]);
    }

    fn schema() -> serde_json::Value {
        json!({
            "type": "record", "name": "r", "fields": [
                {"name": "id", "type": "long", "field-id": 1},
                {"name": "name", "type": ["null", "string"], "default": null},
                {"name": "tags", "type": {"type": "array", "items": {
                    "type": "record", "name": "k1_v2", "fields": [
                        {"name": "key", "type": "int"},
                        {"name": "value", "type": "bytes"}]}}},
                {"name": "props", "type": {"type": "map", "values": "string"}},
                {"name": "d", "type": {"type": "int", "logicalType": "date"}},
                {"name": "again", "type": ["null", "k1_v2"]},
                {"name": "f", "type": {"type": "fixed", "name": "f16", "size": 2}},
                {"name": "x", "type": "double"}
            ]
        })
    }

    fn record() -> Value {
        let pair = Value::Record(vec![
            ("key".into(), Value::Int(7)),
            ("value".into(), Value::Bytes(vec![1, 2])),
        ]);
        Value::Record(vec![
            ("id".into(), Value::Long(-5)),
            ("name".into(), Value::String("ü".into())),
            (
                "tags".into(),
                Value::Array(vec![pair.clone(), pair.clone()]),
            ),
            (
                "props".into(),
                Value::Map(vec![("a".into(), Value::String("b".into()))]),
            ),
            ("d".into(), Value::Int(19_000)),
            ("again".into(), pair),
            ("f".into(), Value::Fixed(vec![9, 8])),
            ("x".into(), Value::Double(1.5)),
        ])
    }

    #[test]
    fn containers_round_trip_with_both_codecs() {
        for codec in [Codec::Null, Codec::Deflate] {
            let records = vec![record(), record()];
            let bytes = write_container(
                &schema(),
                &[("format-version", "2".into())],
                &records,
                codec,
            )
            .unwrap();
            let read = read_container(&bytes).unwrap();
            assert_eq!(read.records, records);
            assert_eq!(read.metadata.get("format-version").unwrap(), "2");
        }
    }

    #[test]
    fn a_missing_optional_field_is_written_as_null() {
        let mut value = record();
        if let Value::Record(fields) = &mut value {
            fields.retain(|(n, _)| n != "name" && n != "again");
        }
        let bytes = write_container(&schema(), &[], &[value], Codec::Null).unwrap();
        let read = read_container(&bytes).unwrap();
        assert_eq!(read.records[0].field("name"), Some(&Value::Null));
        assert_eq!(read.records[0].field("again"), Some(&Value::Null));
    }

    #[test]
    fn negative_block_counts_and_unknown_codecs() {
        // An array written as one block with a negative count and its byte size.
        let mut out = Vec::new();
        write_long(&mut out, -2);
        write_long(&mut out, 2);
        write_long(&mut out, 1);
        write_long(&mut out, 2);
        write_long(&mut out, 0);
        let value = Cursor { bytes: &out, at: 0 }
            .value(&Schema::Array(Box::new(Schema::Long)))
            .unwrap();
        assert_eq!(value, Value::Array(vec![Value::Long(1), Value::Long(2)]));

        let mut bytes = MAGIC.to_vec();
        let header = Value::Map(vec![
            ("avro.schema".into(), Value::Bytes(b"\"long\"".to_vec())),
            ("avro.codec".into(), Value::Bytes(b"snappy".to_vec())),
        ]);
        encode(&mut bytes, &Schema::Map(Box::new(Schema::Bytes)), &header).unwrap();
        bytes.extend_from_slice(&[0; 16]);
        let e = read_container(&bytes).unwrap_err();
        assert!(e.0.contains("\"snappy\" is not supported"), "{e}");
    }
}
