//! Partition specs for the partitionings an output can have (`partition_by`,
//! [`crate::lake::encode::partition`]): `day(<column>)` is Iceberg's `day` transform of the
//! column (`_commit_time` for `day(_commit_time)`), `<column>` its `identity`. Partition
//! fields are numbered from 1000, as the spec asks. Unlike Delta, Iceberg derives the day
//! from the source column itself: a `day(...)` table has no `<column>_day` column, and a
//! reader filtering on the timestamp prunes by the day.
//!
//! Each data file's manifest entry carries its partition tuple, typed as the transform's
//! result (`day`: days since 1970-01-01; `identity`: the column's type), and each manifest
//! list entry summarises its manifest's tuples (null or not, lower and upper bounds).

use std::cmp::Ordering;

use super::avro::Value;
use super::metadata::{PartitionField, PartitionSpec};
use super::schema::{Schema, Type};
use crate::lake::encode::partition::{FilePartition, Partition};

/// The first partition field id.
pub const FIRST_FIELD_ID: i32 = 1000;

/// The spec with no fields: an unpartitioned table.
pub fn unpartitioned() -> PartitionSpec {
    PartitionSpec {
        spec_id: 0,
        fields: Vec::new(),
    }
}

/// The spec (id 0) of a table partitioned by `partition` over `schema`.
pub fn spec(partition: &Partition, schema: &Schema) -> Result<PartitionSpec, String> {
    let source = partition.source.as_deref().unwrap_or("_commit_time");
    let Some(field) = schema.field(source) else {
        return Err(format!(
            "it is partitioned by {source:?}, which is not one of its columns"
        ));
    };
    let transform = if partition.day { "day" } else { "identity" };
    if let Type::Primitive(name) = &field.field_type {
        let fits = match partition.day {
            true => matches!(name.as_str(), "date" | "timestamp" | "timestamptz"),
            false => matches!(
                name.as_str(),
                "int" | "long" | "boolean" | "string" | "date" | "uuid"
            ),
        };
        if fits {
            return Ok(PartitionSpec {
                spec_id: 0,
                fields: vec![PartitionField {
                    source_id: field.id,
                    field_id: FIRST_FIELD_ID,
                    name: partition.column(),
                    transform: transform.into(),
                }],
            });
        }
    }
    Err(format!(
        "{transform} partitioning of {source:?}, a column of type {}, is not offered",
        field.field_type.describe()
    ))
}

/// The partitioning a data file's footer records ([`FilePartition`]): for files read back
/// from the commit log, whose partitioning the pipeline file may no longer say.
pub fn of_file(file: &FilePartition) -> Partition {
    match (file.derived.as_deref(), file.column.strip_suffix("_day")) {
        (Some("date"), Some("_commit_time")) => Partition {
            source: None,
            day: true,
        },
        (Some("date"), Some(source)) => Partition {
            source: Some(source.to_owned()),
            day: true,
        },
        _ => Partition {
            source: Some(file.column.clone()),
            day: false,
        },
    }
}

/// The type of a partition field's values, and its Avro schema in a manifest.
fn result_type(field: &PartitionField, schema: &Schema) -> Result<String, String> {
    if field.transform == "day" {
        return Ok("date".into());
    }
    let source = schema
        .all_fields()
        .into_iter()
        .find(|(id, ..)| *id == field.source_id);
    match (field.transform.as_str(), source) {
        ("identity", Some((_, _, Type::Primitive(name), _))) => Ok(name.clone()),
        _ => Err(format!(
            "partition field {:?}: transform {} of field {} is not one this writer knows",
            field.name, field.transform, field.source_id
        )),
    }
}

/// The Avro record of a spec's partition tuple (`r102`).
pub fn avro_schema(spec: &PartitionSpec, schema: &Schema) -> Result<serde_json::Value, String> {
    let fields = spec
        .fields
        .iter()
        .map(|f| {
            let ty = match result_type(f, schema)?.as_str() {
                "date" => serde_json::json!({"type": "int", "logicalType": "date"}),
                "uuid" => serde_json::json!({"type": "fixed", "name": format!("uuid_{}", f.field_id), "size": 16, "logicalType": "uuid"}),
                "int" => "int".into(),
                "long" => "long".into(),
                "boolean" => "boolean".into(),
                "string" => "string".into(),
                other => return Err(format!("partition values of type {other} are not offered")),
            };
            Ok(serde_json::json!({
                "name": f.name, "field-id": f.field_id,
                "type": ["null", ty], "default": null
            }))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(serde_json::json!({"type": "record", "name": "r102", "fields": fields}))
}

/// The partition tuple of a data file, by `spec`, from its footer's partition.
pub fn tuple(
    spec: &PartitionSpec,
    schema: &Schema,
    file: Option<&FilePartition>,
) -> Result<Vec<(String, Value)>, String> {
    spec.fields
        .iter()
        .map(|f| {
            let Some(file) = file.filter(|p| p.column == f.name) else {
                return Err(format!(
                    "the file does not say its value of partition column {:?}",
                    f.name
                ));
            };
            let value = match &file.value {
                None => Value::Null,
                Some(text) => typed(&result_type(f, schema)?, text)
                    .ok_or_else(|| format!("partition value {text:?} of {:?}", f.name))?,
            };
            Ok((f.name.clone(), value))
        })
        .collect()
}

/// A partition value from the text the encoder records.
fn typed(ty: &str, text: &str) -> Option<Value> {
    Some(match ty {
        "date" => Value::Int(i32::try_from(date_days(text)?).ok()?),
        "int" => Value::Int(text.parse().ok()?),
        "long" => Value::Long(text.parse().ok()?),
        "boolean" => Value::Boolean(text.parse().ok()?),
        "string" => Value::String(text.to_owned()),
        "uuid" => {
            let hex: String = text.chars().filter(|c| *c != '-').collect();
            if hex.len() != 32 {
                return None;
            }
            let bytes = (0..16)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            Value::Fixed(bytes)
        }
        _ => return None,
    })
}

/// Days since 1970-01-01 of `YYYY-MM-DD`.
fn date_days(text: &str) -> Option<i64> {
    let mut parts = text.splitn(3, '-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    ((1..=12).contains(&month) && (1..=31).contains(&day))
        .then(|| crate::wire::pgtype::days_from_civil(year, month, day))
}

/// A partition value in Iceberg's single-value binary form (what summaries' bounds hold).
pub fn single_value(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::Int(v) => Some(v.to_le_bytes().to_vec()),
        Value::Long(v) => Some(v.to_le_bytes().to_vec()),
        Value::Boolean(b) => Some(vec![u8::from(*b)]),
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Fixed(b) | Value::Bytes(b) => Some(b.clone()),
        _ => None,
    }
}

fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Long(x), Value::Long(y)) => x.cmp(y),
        (Value::Boolean(x), Value::Boolean(y)) => x.cmp(y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Fixed(x), Value::Fixed(y)) => x.cmp(y),
        _ => Ordering::Equal,
    }
}

/// A manifest list's summary of one partition field over a manifest's tuples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSummary {
    pub contains_null: bool,
    pub contains_nan: Option<bool>,
    pub lower_bound: Option<Vec<u8>>,
    pub upper_bound: Option<Vec<u8>>,
}

/// The summaries of `fields` partition fields over `tuples`.
pub fn summaries<'a>(
    fields: usize,
    tuples: impl Iterator<Item = &'a [(String, Value)]>,
) -> Vec<FieldSummary> {
    let mut nulls = vec![false; fields];
    let mut bounds: Vec<Option<(&Value, &Value)>> = vec![None; fields];
    for tuple in tuples {
        for (i, (_, value)) in tuple.iter().enumerate().take(fields) {
            if *value == Value::Null {
                nulls[i] = true;
                continue;
            }
            bounds[i] = Some(match bounds[i] {
                None => (value, value),
                Some((lo, hi)) => (
                    if compare(value, lo).is_lt() {
                        value
                    } else {
                        lo
                    },
                    if compare(value, hi).is_gt() {
                        value
                    } else {
                        hi
                    },
                ),
            });
        }
    }
    nulls
        .into_iter()
        .zip(bounds)
        .map(|(contains_null, bounds)| FieldSummary {
            contains_null,
            contains_nan: Some(false),
            lower_bound: bounds.and_then(|(lo, _)| single_value(lo)),
            upper_bound: bounds.and_then(|(_, hi)| single_value(hi)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, TimeUnit};

    use super::*;

    fn schema() -> Schema {
        let columns = arrow_schema::Schema::new(vec![
            Field::new(
                "_commit_time",
                DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
                false,
            ),
            Field::new("region", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
            Field::new("f", DataType::Float64, true),
        ]);
        super::super::schema::fresh(&columns).unwrap().0
    }

    #[test]
    fn specs_for_day_and_identity() {
        let s = schema();
        let day = spec(&Partition::parse("day(_commit_time)").unwrap(), &s).unwrap();
        assert_eq!(
            day.fields,
            [PartitionField {
                source_id: 1,
                field_id: 1000,
                name: "_commit_time_day".into(),
                transform: "day".into()
            }]
        );
        let region = spec(&Partition::parse("region").unwrap(), &s).unwrap();
        assert_eq!(
            (
                region.fields[0].source_id,
                region.fields[0].transform.as_str()
            ),
            (2, "identity")
        );
        let e = spec(&Partition::parse("f").unwrap(), &s).unwrap_err();
        assert!(e.contains("type double"), "{e}");
        assert!(spec(&Partition::parse("gone").unwrap(), &s).is_err());
        assert_eq!(
            of_file(&FilePartition {
                column: "_commit_time_day".into(),
                value: None,
                derived: Some("date".into())
            }),
            Partition::parse("day(_commit_time)").unwrap()
        );
    }

    #[test]
    fn tuples_are_typed_and_summarised() {
        let s = schema();
        let day = spec(&Partition::parse("day(_commit_time)").unwrap(), &s).unwrap();
        let file = |value: Option<&str>| FilePartition {
            column: "_commit_time_day".into(),
            value: value.map(str::to_owned),
            derived: Some("date".into()),
        };
        let a = tuple(&day, &s, Some(&file(Some("2024-03-01")))).unwrap();
        assert_eq!(a, [("_commit_time_day".to_owned(), Value::Int(19_783))]);
        let b = tuple(&day, &s, Some(&file(Some("1970-01-02")))).unwrap();
        let c = tuple(&day, &s, Some(&file(None))).unwrap();
        let sums = summaries(1, [a.as_slice(), b.as_slice(), c.as_slice()].into_iter());
        assert_eq!(
            sums,
            [FieldSummary {
                contains_null: true,
                contains_nan: Some(false),
                lower_bound: Some(1i32.to_le_bytes().to_vec()),
                upper_bound: Some(19_783i32.to_le_bytes().to_vec()),
            }]
        );
        assert!(tuple(&day, &s, None).is_err());
        let n = spec(&Partition::parse("n").unwrap(), &s).unwrap();
        let t = tuple(
            &n,
            &s,
            Some(&FilePartition {
                column: "n".into(),
                value: Some("-4".into()),
                derived: None,
            }),
        )
        .unwrap();
        assert_eq!(t[0].1, Value::Int(-4));
    }
}
