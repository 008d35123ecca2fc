//! Flattens fields of a `json`/`jsonb` column into the typed columns of a declared output:
//! `{"user": {"id": 7, "plan": "pro"}}` becomes a row with `user_id = 7`, `user_plan = 'pro'`.
//!
//! Settings:
//! - `column` (required): the JSON column.
//! - `fields` (required): comma-separated `path:type` pairs; a path goes into nested objects
//!   with `.` (`user.id:int8, user.plan:text, tags:jsonb`), the output column is named after it
//!   with `_` for `.`. Types: `text`, `int2`, `int4`, `int8`, `float8`, `numeric`, `bool`,
//!   `json`, `jsonb`. A field that is missing, null, or of another kind lands as null.
//! - `copy`: comma-separated `column:type` pairs copied from the row first (the table's key,
//!   say: `id:int8`), so readers can join the flattened rows back.
//! - `output`: the declared output's name (default `flattened`).
//! - `keep`: `true` (the default) also lands every change in its table's output; `false`
//!   lands only the flattened rows.
//!
//! A value of `column` that is not valid JSON is rejected (class `parse`): the pipeline's
//! failure policy decides whether that stops it or lands the change in the dead-letter output.
//! Deletes and truncates produce no flattened row.

use std::cell::RefCell;

use tributary_guest::*;

#[derive(Debug, Default)]
struct Settings {
    column: String,
    /// Path segments and type of each field.
    fields: Vec<(Vec<String>, ScalarType)>,
    copy: Vec<(String, ScalarType)>,
    output: String,
    keep: bool,
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

fn scalar(name: &str) -> Option<ScalarType> {
    use ScalarType as S;
    Some(match name {
        "text" => S::Text,
        "int2" => S::Int2,
        "int4" => S::Int4,
        "int8" => S::Int8,
        "float8" => S::Float8,
        "numeric" => S::Numeric,
        "bool" => S::Boolean,
        "json" => S::Json,
        "jsonb" => S::Jsonb,
        _ => return None,
    })
}

fn pairs(what: &str, value: &str) -> Result<Vec<(String, ScalarType)>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (name, ty) = item
                .split_once(':')
                .ok_or_else(|| format!("{what}: {item:?} is not a name:type pair"))?;
            let ty = scalar(ty.trim()).ok_or_else(|| {
                format!(
                    "{what}: type {:?} of {name:?} is not one this plugin knows",
                    ty.trim()
                )
            })?;
            Ok((name.trim().to_owned(), ty))
        })
        .collect()
}

fn configure(config: &[(String, String)]) -> Result<(Settings, Vec<OutputColumn>), String> {
    let mut settings = Settings {
        output: "flattened".into(),
        keep: true,
        ..Settings::default()
    };
    for (key, value) in config {
        match key.as_str() {
            "column" => settings.column = value.trim().to_owned(),
            "fields" => {
                settings.fields = pairs("fields", value)?
                    .into_iter()
                    .map(|(path, ty)| (path.split('.').map(str::to_owned).collect(), ty))
                    .collect();
            }
            "copy" => settings.copy = pairs("copy", value)?,
            "output" => settings.output = value.trim().to_owned(),
            "keep" => {
                settings.keep = value
                    .parse()
                    .map_err(|_| format!("keep = {value:?}: expected true or false"))?;
            }
            other => {
                return Err(format!(
                    "unknown setting {other:?}: expected column, fields, copy, output or keep"
                ));
            }
        }
    }
    if settings.column.is_empty() {
        return Err("column is missing: name the JSON column to flatten".into());
    }
    if settings.fields.is_empty() {
        return Err("fields is missing: give path:type pairs like \"user.id:int8\"".into());
    }
    let columns = settings
        .copy
        .iter()
        .map(|(name, ty)| OutputColumn::new(name, *ty))
        .chain(
            settings
                .fields
                .iter()
                .map(|(path, ty)| OutputColumn::new(&path.join("_"), *ty)),
        )
        .collect();
    Ok((settings, columns))
}

/// A JSON value as a value of `ty`, or null when it is not one.
fn typed(json: Option<&serde_json::Value>, ty: ScalarType) -> Value {
    use serde_json::Value as J;
    let Some(json) = json.filter(|j| !j.is_null()) else {
        return Value::Null;
    };
    let int = || json.as_i64();
    match ty {
        ScalarType::Text => match json {
            J::String(s) => Value::Text(s.clone()),
            other => Value::Text(other.to_string()),
        },
        ScalarType::Int2 => int()
            .and_then(|v| i16::try_from(v).ok())
            .map_or(Value::Null, Value::Int2),
        ScalarType::Int4 => int()
            .and_then(|v| i32::try_from(v).ok())
            .map_or(Value::Null, Value::Int4),
        ScalarType::Int8 => int().map_or(Value::Null, Value::Int8),
        ScalarType::Float8 => json.as_f64().map_or(Value::Null, Value::Float8),
        ScalarType::Numeric => match json {
            J::Number(n) => Value::Numeric(n.to_string()),
            _ => Value::Null,
        },
        ScalarType::Boolean => json.as_bool().map_or(Value::Null, Value::Boolean),
        _ => Value::Json(json.to_string()),
    }
}

fn path<'a>(json: &'a serde_json::Value, path: &[String]) -> Option<&'a serde_json::Value> {
    path.iter().try_fold(json, |at, key| at.get(key))
}

struct Flatten;

impl Transform for Flatten {
    fn describe() -> PluginInfo {
        PluginInfo::new("flatten", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        let (settings, columns) = configure(&config)?;
        let mut reads: Vec<&str> = settings.copy.iter().map(|(n, _)| n.as_str()).collect();
        reads.push(&settings.column);
        let setup = Setup::new()
            .reads_columns(&reads)
            .without_old_images()
            .output(&settings.output, columns);
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(setup)
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        SETTINGS.with(|s| {
            let settings = s.borrow();
            let mut processed = Processed::from(Vec::new());
            for change in batch.changes() {
                if settings.keep {
                    processed.emits.push(change.keep());
                }
                if !matches!(change.op(), Op::Insert | Op::Update) {
                    continue;
                }
                let json = match change.column(&settings.column) {
                    Some(Value::Json(text) | Value::Text(text)) => {
                        match serde_json::from_str::<serde_json::Value>(text) {
                            Ok(json) => json,
                            Err(error) => {
                                let message = format!("{} is not JSON: {error}", settings.column);
                                processed.rejections.push(change.reject("parse", message));
                                continue;
                            }
                        }
                    }
                    _ => serde_json::Value::Null,
                };
                let values = settings
                    .copy
                    .iter()
                    .map(|(name, _)| change.column(name).cloned().unwrap_or(Value::Null))
                    .chain(
                        settings
                            .fields
                            .iter()
                            .map(|(p, ty)| typed(path(&json, p), *ty)),
                    )
                    .collect();
                processed
                    .emits
                    .push(change.to_declared(&settings.output, 0, values));
            }
            Ok(processed)
        })
    }
}

export_transform!(Flatten);

#[cfg(test)]
mod tests {
    use tributary_guest::testing::{Sample, run};

    use super::*;

    #[test]
    fn fields_become_typed_columns_and_bad_json_is_rejected() {
        let json = |s: &str| Value::Json(s.to_owned());
        let batch = Sample::new()
            .table("public.events", &[("id", "int8"), ("payload", "jsonb")])
            .insert(
                "public.events",
                vec![
                    Value::Int8(1),
                    json(r#"{"user":{"id":7,"plan":"pro"},"n":1.5}"#),
                ],
            )
            .insert(
                "public.events",
                vec![Value::Int8(2), json(r#"{"user":{"id":"x"}}"#)],
            )
            .insert(
                "public.events",
                vec![Value::Int8(3), Value::Text("{not json".into())],
            )
            .commit()
            .build();
        let config = [
            ("column", "payload"),
            ("fields", "user.id:int8, user.plan:text, n:numeric"),
            ("copy", "id:int8"),
            ("keep", "false"),
        ];
        let outcome = run::<Flatten>(&config, batch).unwrap();
        let rows: Vec<(&str, &Vec<Value>)> = outcome
            .rows
            .iter()
            .map(|r| (r.output.as_str(), &r.values))
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "flattened",
                    &vec![
                        Value::Int8(1),
                        Value::Int8(7),
                        Value::Text("pro".into()),
                        Value::Numeric("1.5".into())
                    ]
                ),
                (
                    "flattened",
                    &vec![Value::Int8(2), Value::Null, Value::Null, Value::Null]
                ),
            ]
        );
        assert_eq!(outcome.rejections.len(), 1);
        assert_eq!(outcome.rejections[0].class, "parse");
        assert_eq!(outcome.rejections[0].change.change, 2);
    }

    #[test]
    fn settings_name_what_is_wrong() {
        let config = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let e = configure(&config(&[("column", "p")])).unwrap_err();
        assert!(e.contains("fields is missing"), "{e}");
        let e = configure(&config(&[("column", "p"), ("fields", "a:uuid")])).unwrap_err();
        assert!(e.contains("type \"uuid\" of \"a\""), "{e}");
        let (_, columns) = configure(&config(&[("column", "p"), ("fields", "a.b:int4")])).unwrap();
        assert_eq!(columns[0].name, "a_b");
    }
}
