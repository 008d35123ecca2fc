//! Keeps the changes whose row matches a predicate over its columns, and drops the rest.
//!
//! Settings:
//! - `where` (required): conditions joined by ` and `, each `column op value` with `op` one of
//!   `=`, `!=`, `<`, `<=`, `>`, `>=`, or `column is null` / `column is not null`
//!   (`status = shipped and amount >= 100`). Values compare as numbers when both sides are
//!   numbers, else as text; a column that is null (or missing from the table) matches only
//!   `is null`.
//! - `tables`: comma-separated `schema.table` names to filter; others pass untouched.
//! - `deletes`: `keep` (the default: a delete's row often holds only the key, so deletes pass)
//!   or `filter` (deletes are tested like other rows).
//!
//! It reads only the columns the conditions name; kept changes land as they came.

use std::cell::RefCell;
use std::cmp::Ordering;

use tributary_guest::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    IsNull,
    NotNull,
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    column: String,
    test: Test,
    value: String,
}

#[derive(Debug, Default)]
struct Settings {
    conditions: Vec<Condition>,
    tables: Vec<String>,
    filter_deletes: bool,
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

/// One condition of `where`.
fn condition(text: &str) -> Result<Condition, String> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    for (suffix, test) in [(" is not null", Test::NotNull), (" is null", Test::IsNull)] {
        if let Some(column) = lower.strip_suffix(suffix) {
            return Ok(Condition {
                column: text[..column.len()].trim().to_owned(),
                test,
                value: String::new(),
            });
        }
    }
    // Two-character operators first, so `<=` is not read as `<`.
    for (op, test) in [
        ("!=", Test::Ne),
        ("<=", Test::Le),
        (">=", Test::Ge),
        ("=", Test::Eq),
        ("<", Test::Lt),
        (">", Test::Gt),
    ] {
        if let Some((column, value)) = text.split_once(op) {
            let (column, value) = (column.trim(), value.trim());
            if column.is_empty() || value.is_empty() {
                break;
            }
            return Ok(Condition {
                column: column.to_owned(),
                test,
                value: value.trim_matches('\'').to_owned(),
            });
        }
    }
    Err(format!(
        "where: {text:?} is not a condition like \"status = shipped\", \"amount >= 100\" or \
         \"note is null\""
    ))
}

fn configure(config: &[(String, String)]) -> Result<Settings, String> {
    let mut settings = Settings::default();
    for (key, value) in config {
        match key.as_str() {
            "where" => {
                settings.conditions = value
                    .split(" and ")
                    .map(condition)
                    .collect::<Result<_, _>>()?;
            }
            "tables" => {
                settings.tables = value
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect();
            }
            "deletes" => {
                settings.filter_deletes = match value.as_str() {
                    "keep" => false,
                    "filter" => true,
                    other => return Err(format!("deletes = {other:?}: expected keep or filter")),
                }
            }
            other => {
                return Err(format!(
                    "unknown setting {other:?}: expected where, tables or deletes"
                ));
            }
        }
    }
    if settings.conditions.is_empty() {
        return Err("where is missing: give a condition like \"status = shipped\"".into());
    }
    Ok(settings)
}

/// The text form a value compares by, `None` for null.
fn text(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null | Value::Absent | Value::UnchangedToast => return None,
        Value::Boolean(b) => b.to_string(),
        Value::Int2(v) => v.to_string(),
        Value::Int4(v) => v.to_string(),
        Value::Int8(v) => v.to_string(),
        Value::Float4(v) => v.to_string(),
        Value::Float8(v) => v.to_string(),
        Value::Date(v) => v.to_string(),
        Value::Time(v) | Value::Timestamp(v) | Value::Timestamptz(v) => v.to_string(),
        Value::Numeric(s) | Value::Text(s) | Value::Uuid(s) | Value::Json(s) | Value::Other(s) => {
            s.clone()
        }
        _ => return None,
    })
}

fn matches(condition: &Condition, value: Option<&Value>) -> bool {
    let value = value.and_then(text);
    let Some(value) = value else {
        return condition.test == Test::IsNull;
    };
    let ordering = match (value.parse::<f64>(), condition.value.parse::<f64>()) {
        (Ok(a), Ok(b)) => a.partial_cmp(&b),
        _ => Some(value.as_str().cmp(condition.value.as_str())),
    };
    match (condition.test, ordering) {
        (Test::IsNull, _) => false,
        (Test::NotNull, _) => true,
        (_, None) => false,
        (Test::Eq, Some(o)) => o == Ordering::Equal,
        (Test::Ne, Some(o)) => o != Ordering::Equal,
        (Test::Lt, Some(o)) => o == Ordering::Less,
        (Test::Le, Some(o)) => o != Ordering::Greater,
        (Test::Gt, Some(o)) => o == Ordering::Greater,
        (Test::Ge, Some(o)) => o != Ordering::Less,
    }
}

struct Filter;

impl Transform for Filter {
    fn describe() -> PluginInfo {
        PluginInfo::new("filter", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        let settings = configure(&config)?;
        let reads: Vec<&str> = settings
            .conditions
            .iter()
            .map(|c| c.column.as_str())
            .collect();
        let setup = Setup::new().reads_columns(&reads).without_old_images();
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(setup)
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        SETTINGS.with(|s| {
            let settings = s.borrow();
            let kept = batch.changes().filter(|change| {
                let table = change.relation.qualified_name();
                let filtered = settings.tables.is_empty() || settings.tables.contains(&table);
                let tested = match change.op() {
                    Op::Truncate => false,
                    Op::Delete => settings.filter_deletes,
                    Op::Insert | Op::Update => true,
                };
                !(filtered && tested)
                    || settings
                        .conditions
                        .iter()
                        .all(|c| matches(c, change.column(&c.column)))
            });
            Ok(kept.map(|c| c.keep()).collect())
        })
    }
}

export_transform!(Filter);

#[cfg(test)]
mod tests {
    use tributary_guest::testing::{Sample, run};

    use super::*;

    #[test]
    fn conditions_read_like_sql() {
        let c = condition("amount >= 100").unwrap();
        assert_eq!(
            (c.column.as_str(), c.test, c.value.as_str()),
            ("amount", Test::Ge, "100")
        );
        assert_eq!(condition("note IS NOT NULL").unwrap().test, Test::NotNull);
        assert_eq!(condition("status = 'shipped'").unwrap().value, "shipped");
        assert!(
            condition("amount")
                .unwrap_err()
                .contains("is not a condition")
        );
    }

    #[test]
    fn only_matching_rows_are_kept() {
        let text = |s: &str| Value::Text(s.to_owned());
        let batch = Sample::new()
            .table(
                "public.orders",
                &[("id", "int4"), ("status", "text"), ("amount", "numeric")],
            )
            .insert(
                "public.orders",
                vec![
                    Value::Int4(1),
                    text("shipped"),
                    Value::Numeric("150".into()),
                ],
            )
            .insert(
                "public.orders",
                vec![
                    Value::Int4(2),
                    text("shipped"),
                    Value::Numeric("99.5".into()),
                ],
            )
            .insert(
                "public.orders",
                vec![Value::Int4(3), text("open"), Value::Numeric("500".into())],
            )
            .insert(
                "public.orders",
                vec![Value::Int4(4), Value::Null, Value::Numeric("500".into())],
            )
            .delete(
                "public.orders",
                vec![Value::Int4(2), Value::Null, Value::Null],
            )
            .commit()
            .build();
        let config = [("where", "status = shipped and amount >= 100")];
        let rows = run::<Filter>(&config, batch.clone()).unwrap().rows;
        let kept: Vec<(Op, &Value)> = rows.iter().map(|r| (r.op, &r.values[0])).collect();
        assert_eq!(
            kept,
            [(Op::Insert, &Value::Int4(1)), (Op::Delete, &Value::Int4(2))]
        );
        let config = [("where", "status is null"), ("deletes", "filter")];
        let rows = run::<Filter>(&config, batch).unwrap().rows;
        let kept: Vec<&Value> = rows.iter().map(|r| &r.values[0]).collect();
        assert_eq!(kept, [&Value::Int4(4), &Value::Int4(2)]);
    }
}
