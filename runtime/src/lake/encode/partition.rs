//! How an output's rows are split into partitions (`[outputs."<output>"] partition_by`): each
//! data file holds the rows of one partition value, which a Delta table records in the file's
//! `add` action (`partitionValues`). No IO.
//!
//! | `partition_by` | partition column | value |
//! |---|---|---|
//! | `"day(_commit_time)"` | `_commit_time_day` (`date`) | the UTC day the transaction committed |
//! | `"day(<column>)"` | `<column>_day` (`date`) | the day of a `date`, `timestamp` or `timestamptz` column (UTC) |
//! | `"<column>"` | the column itself | its value as text: integers, `bool`, text, `date`, `uuid` |
//!
//! A derived column (`..._day`) is not in the data files: readers take it from the table's
//! log, as Delta readers take every partition column. A column partitioned by itself stays in
//! the files too (the change log is read without the table, by `verify` among others).

use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef};

use crate::stream::change::{OutputColumn, OutputRow, Value};

/// The partitioning of one output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// `None`: the transaction's commit time.
    pub source: Option<String>,
    /// By the day of `source`, rather than by its value.
    pub day: bool,
}

/// The key of the file metadata that records a data file's partition.
pub const PARTITION_KEY: &str = "tributary.partition";

/// One file's partition: the partition column and the value its rows share.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FilePartition {
    pub column: String,
    pub value: Option<String>,
    /// Set for a derived column (not in the file): its Delta type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived: Option<String>,
}

impl FilePartition {
    /// The field a derived partition column adds to the table's schema.
    pub fn derived_field(&self) -> Option<FieldRef> {
        match self.derived.as_deref() {
            Some("date") => Some(Arc::new(Field::new(&self.column, DataType::Date32, true))),
            _ => None,
        }
    }
}

impl Partition {
    /// Read `partition_by`.
    pub fn parse(spec: &str) -> Result<Partition, String> {
        let spec = spec.trim();
        let (inner, day) = match spec.strip_prefix("day(").and_then(|s| s.strip_suffix(')')) {
            Some(inner) => (inner.trim(), true),
            None => (spec, false),
        };
        if inner.is_empty() || inner.contains(['(', ')', ' ']) {
            return Err(format!(
                "{spec:?} is not a partitioning: use a column's name, \"day(<column>)\" or \"day(_commit_time)\""
            ));
        }
        match (inner, day) {
            ("_commit_time", true) => Ok(Partition {
                source: None,
                day: true,
            }),
            (column, _) if column.starts_with('_') => Err(format!(
                "{spec:?}: of the change metadata only _commit_time partitions a table, by day(_commit_time)"
            )),
            (column, day) => Ok(Partition {
                source: Some(column.to_owned()),
                day,
            }),
        }
    }

    /// The table's partition column.
    pub fn column(&self) -> String {
        let source = self.source.as_deref().unwrap_or("_commit_time");
        match self.day {
            true => format!("{source}_day"),
            false => source.to_owned(),
        }
    }

    /// The position of the source column among `columns`, or why it cannot partition.
    pub fn locate(&self, columns: &[OutputColumn]) -> Result<Option<usize>, String> {
        let Some(source) = &self.source else {
            return Ok(None);
        };
        match columns.iter().position(|c| &c.name == source) {
            Some(i) => Ok(Some(i)),
            None => Err(format!(
                "it is partitioned by {source:?}, which is not one of its columns"
            )),
        }
    }

    /// Row `row`'s partition; `at` is the source column's position ([`Self::locate`]).
    pub fn of(&self, row: &OutputRow, at: Option<usize>) -> Result<FilePartition, String> {
        let value = match at {
            None => Some(day(row.commit_time)),
            Some(i) => self.value(&row.values[i])?,
        };
        Ok(FilePartition {
            column: self.column(),
            value,
            derived: self.day.then(|| "date".to_owned()),
        })
    }

    fn value(&self, value: &Value) -> Result<Option<String>, String> {
        let text = match (value, self.day) {
            (Value::Null, _) => return Ok(None),
            (Value::Date(d), true) => day(i64::from(*d) * MICROS_PER_DAY),
            (Value::Timestamp(t) | Value::TimestampTz(t), true) => day(*t),
            (Value::Date(d), false) => day(i64::from(*d) * MICROS_PER_DAY),
            (Value::Bool(b), false) => b.to_string(),
            (Value::Int2(v), false) => v.to_string(),
            (Value::Int4(v), false) => v.to_string(),
            (Value::Int8(v), false) => v.to_string(),
            (Value::Text(t), false) => t.clone(),
            (Value::Uuid(u), false) => crate::wire::pgtype::uuid_text(u),
            (Value::UnchangedToast, _) => {
                return Err(
                    "a value PostgreSQL did not send (unchanged TOAST) cannot choose a partition"
                        .into(),
                );
            }
            (other, true) => {
                return Err(format!(
                    "day() takes a date or a timestamp, not {}",
                    kind(other)
                ));
            }
            (other, false) => {
                return Err(format!(
                    "a table is partitioned by integers, bool, text, date or uuid columns, not by {}",
                    kind(other)
                ));
            }
        };
        Ok(Some(text))
    }
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Float4(_) | Value::Float8(_) => "floating point",
        Value::Numeric(_) => "numeric",
        Value::Bytea(_) => "bytea",
        Value::Time(_) | Value::TimeTz { .. } => "a time of day",
        Value::Timestamp(_) | Value::TimestampTz(_) => "a timestamp (use day(...))",
        Value::Json(_) => "json",
        Value::Interval { .. } => "an interval",
        Value::Array(_) => "an array",
        _ => "this type",
    }
}

/// The UTC day of `micros` since the Unix epoch, as `YYYY-MM-DD`.
pub fn day(micros: i64) -> String {
    let (y, m, d) = civil(micros.div_euclid(MICROS_PER_DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (the era arithmetic of the civil
/// calendar: 400-year eras of 146,097 days, years starting in March).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Lsn;
    use crate::stream::change::Op;

    #[test]
    fn days_print_as_the_calendar_has_them() {
        for (days, date) in [
            (0, (1970, 1, 1)),
            (20_790, (2026, 12, 3)),
            (11_016, (2000, 2, 29)),
            (-1, (1969, 12, 31)),
            (-719_162, (1, 1, 1)),
        ] {
            assert_eq!(civil(days), date);
        }
        assert_eq!(day(0), "1970-01-01");
        assert_eq!(day(-1), "1969-12-31");
        assert_eq!(day(MICROS_PER_DAY * 20_426 + 5), "2025-12-04");
    }

    #[test]
    fn partitionings_parse_and_name_their_column() {
        let p = Partition::parse("day(_commit_time)").unwrap();
        assert_eq!(
            (p.source.as_deref(), p.day, p.column()),
            (None, true, "_commit_time_day".into())
        );
        let p = Partition::parse(" region ").unwrap();
        assert_eq!(
            (p.source.as_deref(), p.day, p.column()),
            (Some("region"), false, "region".into())
        );
        assert_eq!(Partition::parse("day(at)").unwrap().column(), "at_day");
        assert!(
            Partition::parse("_seq")
                .unwrap_err()
                .contains("only _commit_time")
        );
        assert!(
            Partition::parse("month(at)")
                .unwrap_err()
                .contains("not a partitioning")
        );
        assert!(Partition::parse("").is_err());
    }

    #[test]
    fn a_rows_partition_comes_from_its_commit_time_or_a_column() {
        let row = |values: Vec<Value>| OutputRow {
            op: Op::Insert,
            commit_lsn: Lsn(1),
            seq: 0,
            sub: 0,
            xid: 1,
            commit_time: MICROS_PER_DAY * 3 + 7,
            values,
            old: None,
        };
        let by_day = Partition::parse("day(_commit_time)").unwrap();
        let part = by_day.of(&row(vec![]), None).unwrap();
        assert_eq!(part.value.as_deref(), Some("1970-01-04"));
        assert_eq!(part.derived_field().unwrap().data_type(), &DataType::Date32);
        let by_region = Partition::parse("region").unwrap();
        let part = by_region
            .of(&row(vec![Value::Text("eu".into())]), Some(0))
            .unwrap();
        assert_eq!(
            (part.value.as_deref(), part.derived_field()),
            (Some("eu"), None)
        );
        assert_eq!(
            by_region
                .of(&row(vec![Value::Null]), Some(0))
                .unwrap()
                .value,
            None
        );
        let err = by_region
            .of(&row(vec![Value::Float8(1.0)]), Some(0))
            .unwrap_err();
        assert!(err.contains("not by floating point"), "{err}");
        let by_at = Partition::parse("day(at)").unwrap();
        let part = by_at
            .of(&row(vec![Value::TimestampTz(MICROS_PER_DAY)]), Some(0))
            .unwrap();
        assert_eq!(part.value.as_deref(), Some("1970-01-02"));
        let columns = [OutputColumn::builtin("region", 25, -1)];
        assert_eq!(by_region.locate(&columns), Ok(Some(0)));
        assert!(by_at.locate(&columns).unwrap_err().contains("\"at\""));
    }
}
