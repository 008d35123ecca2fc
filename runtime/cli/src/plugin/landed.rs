//! What `tributary plugin test` prints of the rows a chain lands: a plain table per output,
//! or one JSON object per row.

use std::fmt::Write;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value as Json;
use tributary::stream::change::{OutputBatch, OutputColumn, OutputRow, Value};
use tributary::wire::pgtype::{self, oid};

/// JSON object members in the order given (serde_json's own map sorts its keys).
struct Ordered(Vec<(String, Json)>);

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A row as its JSON line: `output`, `op`, `commit_lsn`, `seq`, `sub`, `values` by column
/// name, `old` (or null), and `unchanged` when the row leaves columns untouched.
pub fn json_line(batch: &OutputBatch, row: &OutputRow) -> String {
    let mut out = format!(
        "{{\"output\":{},\"op\":\"{}\",\"commit_lsn\":\"{}\",\"seq\":{},\"sub\":{},\"values\":",
        Json::String(batch.output.clone()),
        row.op.as_str(),
        row.commit_lsn,
        row.seq,
        row.sub
    );
    out.push_str(&object(&batch.columns, &row.values));
    out.push_str(",\"old\":");
    match &row.old {
        Some(old) => out.push_str(&object(&batch.columns, old)),
        None => out.push_str("null"),
    }
    let unchanged = unchanged(&batch.columns, &row.values);
    if !unchanged.is_empty() {
        let names: Vec<Json> = unchanged.into_iter().map(Json::String).collect();
        let _ = write!(out, ",\"unchanged\":{}", Json::Array(names));
    }
    out.push('}');
    out
}

fn object(columns: &[OutputColumn], values: &[Value]) -> String {
    let members = columns
        .iter()
        .zip(values)
        .map(|(c, v)| (c.name.clone(), json(v)))
        .collect();
    serde_json::to_string(&Ordered(members)).unwrap_or_default()
}

/// The columns whose values an update left untouched (TOAST that PostgreSQL did not resend).
fn unchanged(columns: &[OutputColumn], values: &[Value]) -> Vec<String> {
    columns
        .iter()
        .zip(values)
        .filter(|(_, v)| matches!(v, Value::UnchangedToast))
        .map(|(c, _)| c.name.clone())
        .collect()
}

/// Every landed row, one table per output batch.
pub fn tables(batches: &[OutputBatch]) -> String {
    let mut out = String::new();
    if batches.iter().all(|b| b.rows.is_empty()) {
        out.push_str("nothing landed\n");
        return out;
    }
    for (i, batch) in batches.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&table(batch));
    }
    out
}

fn table(batch: &OutputBatch) -> String {
    // A table's output has `_old`; a declared one has `_sub`.
    let declared = !batch.old_image;
    let with_old = batch.rows.iter().any(|r| r.old.is_some());
    let mut header: Vec<String> = vec!["op".into(), "commit_lsn".into(), "seq".into()];
    if declared {
        header.push("sub".into());
    }
    header.extend(batch.columns.iter().map(|c| c.name.clone()));
    if with_old {
        header.push("old".into());
    }
    let mut rows = vec![header];
    for row in &batch.rows {
        let mut cells = vec![
            row.op.as_str().to_owned(),
            row.commit_lsn.to_string(),
            row.seq.to_string(),
        ];
        if declared {
            cells.push(row.sub.to_string());
        }
        cells.extend(row.values.iter().map(cell));
        if with_old {
            cells.push(match &row.old {
                None => String::new(),
                Some(old) => batch
                    .columns
                    .iter()
                    .zip(old)
                    .filter(|(_, v)| !matches!(v, Value::Null))
                    .map(|(c, v)| format!("{}={}", c.name, cell(v)))
                    .collect::<Vec<_>>()
                    .join(" "),
            });
        }
        rows.push(cells);
    }
    let mut widths = vec![0; rows[0].len()];
    for cells in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let count = batch.rows.len();
    let mut out = format!(
        "{} ({count} row{})\n",
        batch.output,
        if count == 1 { "" } else { "s" }
    );
    for cells in &rows {
        let mut line = String::from(" ");
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            line.push(' ');
            line.push_str(c);
            if i + 1 < cells.len() {
                line.extend(std::iter::repeat_n(' ', w - c.chars().count() + 1));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A value in a table cell: text as it is, NULL for null, the rest as in JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "NULL".into(),
        Value::UnchangedToast => "(unchanged)".into(),
        _ => match json(value) {
            Json::String(s) => s,
            other => other.to_string(),
        },
    }
}

/// A value as JSON: numbers for integers and floats (text for NaN and the infinities), text
/// for numeric, text, bytea (`\x...`), uuid, dates and times (RFC 3339), the document itself
/// for json, an object for interval, lists for arrays. An unchanged TOAST value is null (and
/// its column listed in the row's `unchanged`).
pub fn json(value: &Value) -> Json {
    match value {
        Value::Null | Value::UnchangedToast => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int2(n) => Json::from(*n),
        Value::Int4(n) => Json::from(*n),
        Value::Int8(n) => Json::from(*n),
        // Through its shortest decimal form, so 0.1f32 prints as 0.1.
        Value::Float4(f) => float(f.to_string().parse().unwrap_or(f64::NAN)),
        Value::Float8(f) => float(*f),
        Value::Numeric(s) | Value::Text(s) | Value::Other(s) => Json::String(s.clone()),
        Value::Bytea(bytes) => {
            let mut s = String::with_capacity(2 + bytes.len() * 2);
            s.push_str("\\x");
            for b in bytes {
                let _ = write!(s, "{b:02x}");
            }
            Json::String(s)
        }
        Value::Date(days) => Json::String(date(*days)),
        Value::Time(micros) => Json::String(time_of_day(*micros)),
        Value::TimeTz { micros, offset } => {
            Json::String(format!("{}{}", time_of_day(*micros), utc_offset(*offset)))
        }
        Value::Timestamp(micros) => Json::String(timestamp(*micros, "")),
        Value::TimestampTz(micros) => Json::String(timestamp(*micros, "Z")),
        Value::Uuid(bytes) => {
            let mut s = String::with_capacity(36);
            for (i, b) in bytes.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    s.push('-');
                }
                let _ = write!(s, "{b:02x}");
            }
            Json::String(s)
        }
        Value::Json(text) => {
            serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.clone()))
        }
        Value::Interval {
            months,
            days,
            micros,
        } => serde_json::json!({ "months": months, "days": days, "micros": micros }),
        Value::Array(array) => {
            let elements: Vec<Json> = array.elements.iter().map(json).collect();
            nest(&array.dims, &elements)
        }
    }
}

fn float(f: f64) -> Json {
    match serde_json::Number::from_f64(f) {
        Some(n) => Json::Number(n),
        None if f.is_nan() => Json::String("NaN".into()),
        None if f > 0.0 => Json::String("Infinity".into()),
        None => Json::String("-Infinity".into()),
    }
}

/// Row-major `elements` as nested lists of the shape `dims`.
fn nest(dims: &[u32], elements: &[Json]) -> Json {
    match dims {
        [] | [_] => Json::Array(elements.to_vec()),
        [_, inner @ ..] => {
            let size: usize = inner.iter().map(|&d| d as usize).product();
            Json::Array(
                elements
                    .chunks(size.max(1))
                    .map(|chunk| nest(inner, chunk))
                    .collect(),
            )
        }
    }
}

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// Year, month and day of a day count from 1970-01-01, in the proleptic Gregorian calendar.
fn civil(days: i64) -> (i64, u32, u32) {
    // Count from 0000-03-01, so that a leap day ends its year, in eras of 400 years.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn date(days: i32) -> String {
    match days {
        i32::MAX => "infinity".into(),
        i32::MIN => "-infinity".into(),
        _ => {
            let (year, month, day) = civil(i64::from(days));
            format!("{}-{month:02}-{day:02}", year_text(year))
        }
    }
}

fn year_text(year: i64) -> String {
    match year {
        0..=9999 => format!("{year:04}"),
        _ if year < 0 => format!("-{:04}", -year),
        _ => format!("+{year}"),
    }
}

fn time_of_day(micros: i64) -> String {
    let seconds = micros / MICROS_PER_SECOND;
    let mut s = format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    let fraction = micros % MICROS_PER_SECOND;
    if fraction != 0 {
        let digits = format!("{fraction:06}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s
}

fn utc_offset(seconds_east: i32) -> String {
    let sign = if seconds_east < 0 { '-' } else { '+' };
    let n = seconds_east.unsigned_abs();
    let mut s = format!("{sign}{:02}:{:02}", n / 3600, n / 60 % 60);
    if !n.is_multiple_of(60) {
        let _ = write!(s, ":{:02}", n % 60);
    }
    s
}

fn timestamp(micros: i64, zone: &str) -> String {
    match micros {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        _ => {
            let days = micros.div_euclid(MICROS_PER_DAY);
            let (year, month, day) = civil(days);
            format!(
                "{}-{month:02}-{day:02}T{}{zone}",
                year_text(year),
                time_of_day(micros.rem_euclid(MICROS_PER_DAY))
            )
        }
    }
}

/// A declared column's type as a person writes it: `text`, `int8[]`, `numeric(12,2)`,
/// `varchar(20)`.
pub fn type_label(column: &OutputColumn) -> String {
    let (scalar, array) = match pgtype::array_element(column.type_oid) {
        Some(element) => (element, "[]"),
        None => (column.type_oid, ""),
    };
    let name = pgtype::type_name(scalar).map_or_else(|| column.ty.label(), str::to_owned);
    let m = column.type_modifier;
    let modifier = match scalar {
        oid::NUMERIC if m >= 4 => {
            let (precision, scale) = ((m - 4) >> 16, (m - 4) & 0xffff);
            format!("({precision},{scale})")
        }
        oid::VARCHAR | oid::BPCHAR if m >= 4 => format!("({})", m - 4),
        _ => String::new(),
    };
    format!("{name}{modifier}{array}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::changes;
    use tributary::wire::pgtype::ColumnType;

    #[test]
    fn dates_and_times_print_as_rfc_3339() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(-1), "1969-12-31");
        assert_eq!(date(19_782), "2024-02-29");
        assert_eq!(date(i32::MAX), "infinity");
        assert_eq!(timestamp(1_500_000, "Z"), "1970-01-01T00:00:01.5Z");
        assert_eq!(timestamp(-1, ""), "1969-12-31T23:59:59.999999");
        assert_eq!(time_of_day(3_723_000_000), "01:02:03");
        assert_eq!(utc_offset(19_800), "+05:30");
        assert_eq!(utc_offset(-3_600), "-01:00");
    }

    #[test]
    fn what_prints_reads_back_as_the_same_value() {
        let cases: &[(&str, &str)] = &[
            ("timestamptz", "\"2024-02-29T23:59:59.123456Z\""),
            ("timestamp", "\"1900-01-01T00:00:00\""),
            ("date", "\"0001-01-01\""),
            ("time", "\"12:00:00.5\""),
            ("timetz", "\"12:00:00+05:30\""),
            ("uuid", "\"00112233-4455-6677-8899-aabbccddeeff\""),
            ("bytea", "\"\\\\x00ff10\""),
            ("float4", "0.1"),
            ("float8", "\"-Infinity\""),
            ("numeric", "\"1.10\""),
            ("jsonb", "{\"a\":[1,null]}"),
            ("interval", "{\"months\":1,\"days\":2,\"micros\":3}"),
            ("int4[]", "[[1,2],[3,null]]"),
            ("text[]", "[]"),
        ];
        for (type_text, text) in cases {
            let (type_oid, modifier) = changes::type_named(type_text).unwrap();
            let ty = ColumnType::builtin(type_oid, modifier);
            let given: Json = serde_json::from_str(text).unwrap();
            let value = changes::value(&ty, &given).unwrap();
            assert_eq!(json(&value), given, "{type_text}");
        }
    }

    #[test]
    fn declared_types_print_as_written() {
        let column = |oid, modifier| OutputColumn::builtin("c", oid, modifier);
        assert_eq!(type_label(&column(oid::TEXT, -1)), "text");
        assert_eq!(
            type_label(&column(pgtype::array_of(oid::INT8).unwrap(), -1)),
            "int8[]"
        );
        assert_eq!(
            type_label(&column(oid::NUMERIC, (12 << 16 | 2) + 4)),
            "numeric(12,2)"
        );
        assert_eq!(type_label(&column(oid::VARCHAR, 24)), "varchar(20)");
    }
}
