//! Routes rows to outputs of their own by the value of a column: orders of region `eu` to
//! `orders_eu`, of `us` to `orders_us`, the rest to the table's own output (or nowhere).
//!
//! Settings:
//! - `column` (required): the column whose text form picks the route.
//! - `routes` (required): comma-separated `value:output` pairs (`eu:orders_eu,us:orders_us`).
//!   Several values may share an output.
//! - `columns` (required): the routed outputs' columns, comma-separated `name:type` pairs
//!   (`id:int8,region:text,amount:numeric`), taken from the change's row by name; `type` is one
//!   of `bool`, `int2`, `int4`, `int8`, `float4`, `float8`, `numeric`, `text`, `bytea`, `date`,
//!   `time`, `timestamp`, `timestamptz`, `uuid`, `json`, `jsonb`, `interval`.
//! - `tables`: comma-separated `schema.table` names to route; all tables when absent.
//! - `unmatched`: `keep` (the default: the row lands in its table's output) or `drop`.
//!
//! A routed row keeps its change's identity and op. A delete is routed by its old row, which
//! holds only the key unless the table is `REPLICA IDENTITY FULL`: a delete whose routing
//! column is not in it is unmatched.

use std::cell::RefCell;

use tributary_guest::*;

#[derive(Debug, Default)]
struct Settings {
    column: String,
    routes: Vec<(String, String)>,
    columns: Vec<String>,
    tables: Vec<String>,
    drop_unmatched: bool,
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn scalar(name: &str) -> Option<ScalarType> {
    use ScalarType as S;
    Some(match name {
        "bool" => S::Boolean,
        "int2" => S::Int2,
        "int4" => S::Int4,
        "int8" => S::Int8,
        "float4" => S::Float4,
        "float8" => S::Float8,
        "numeric" => S::Numeric,
        "text" => S::Text,
        "bytea" => S::Bytea,
        "date" => S::Date,
        "time" => S::Time,
        "timestamp" => S::Timestamp,
        "timestamptz" => S::Timestamptz,
        "uuid" => S::Uuid,
        "json" => S::Json,
        "jsonb" => S::Jsonb,
        "interval" => S::Interval,
        _ => return None,
    })
}

fn pair<'a>(what: &str, item: &'a str, example: &str) -> Result<(&'a str, &'a str), String> {
    item.split_once(':')
        .map(|(a, b)| (a.trim(), b.trim()))
        .filter(|(a, b)| !a.is_empty() && !b.is_empty())
        .ok_or_else(|| format!("{what}: {item:?} is not a pair like {example:?}"))
}

/// The settings, and the setup they declare.
fn configure(config: &[(String, String)]) -> Result<(Settings, Setup), String> {
    let mut settings = Settings::default();
    let mut columns = Vec::new();
    for (key, value) in config {
        match key.as_str() {
            "column" => settings.column = value.trim().to_owned(),
            "routes" => {
                for item in list(value) {
                    let (value, output) = pair("routes", item, "eu:orders_eu")?;
                    settings.routes.push((value.to_owned(), output.to_owned()));
                }
            }
            "columns" => {
                for item in list(value) {
                    let (name, ty) = pair("columns", item, "id:int8")?;
                    let ty = scalar(ty).ok_or_else(|| {
                        format!("columns: type {ty:?} of {name:?} is not one this plugin knows")
                    })?;
                    settings.columns.push(name.to_owned());
                    columns.push(OutputColumn::new(name, ty));
                }
            }
            "tables" => settings.tables = list(value).map(str::to_owned).collect(),
            "unmatched" => {
                settings.drop_unmatched = match value.as_str() {
                    "keep" => false,
                    "drop" => true,
                    other => {
                        return Err(format!("unmatched = {other:?}: expected keep or drop"));
                    }
                }
            }
            other => {
                return Err(format!(
                    "unknown setting {other:?}: expected column, routes, columns, tables or \
                     unmatched"
                ));
            }
        }
    }
    for (missing, what) in [
        (
            settings.column.is_empty(),
            "column (the column that picks the route)",
        ),
        (settings.routes.is_empty(), "routes (value:output pairs)"),
        (
            columns.is_empty(),
            "columns (name:type pairs of the routed outputs)",
        ),
    ] {
        if missing {
            return Err(format!("{what} is missing"));
        }
    }
    let mut reads: Vec<&str> = settings.columns.iter().map(String::as_str).collect();
    reads.push(&settings.column);
    let mut setup = Setup::new().reads_columns(&reads).without_old_images();
    let mut outputs: Vec<&str> = settings.routes.iter().map(|(_, o)| o.as_str()).collect();
    outputs.sort_unstable();
    outputs.dedup();
    for output in outputs {
        setup = setup.output(output, columns.clone());
    }
    Ok((settings, setup))
}

/// The text a routing value is matched by.
fn key(value: &Value) -> Option<String> {
    Some(match value {
        Value::Text(s) | Value::Numeric(s) | Value::Uuid(s) | Value::Json(s) | Value::Other(s) => {
            s.clone()
        }
        Value::Int2(v) => v.to_string(),
        Value::Int4(v) => v.to_string(),
        Value::Int8(v) => v.to_string(),
        Value::Boolean(v) => v.to_string(),
        _ => return None,
    })
}

struct Router;

impl Transform for Router {
    fn describe() -> PluginInfo {
        PluginInfo::new("router", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        let (settings, setup) = configure(&config)?;
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(setup)
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        SETTINGS.with(|s| {
            let settings = s.borrow();
            let mut emits = Vec::with_capacity(batch.transactions.len());
            for change in batch.changes() {
                let table = change.relation.qualified_name();
                let routed = settings.tables.is_empty() || settings.tables.contains(&table);
                let route = routed
                    .then(|| change.column(&settings.column).and_then(key))
                    .flatten()
                    .and_then(|k| settings.routes.iter().find(|(v, _)| *v == k));
                match route {
                    Some((_, output)) => {
                        let values = settings
                            .columns
                            .iter()
                            .map(|name| change.column(name).cloned().unwrap_or(Value::Null))
                            .collect();
                        emits.push(change.to_declared(output, 0, values));
                    }
                    None if settings.drop_unmatched => {}
                    None => emits.push(change.keep()),
                }
            }
            Ok(emits.into())
        })
    }
}

export_transform!(Router);

#[cfg(test)]
mod tests {
    use tributary_guest::testing::{Sample, run};

    use super::*;

    fn sample() -> Batch {
        let text = |s: &str| Value::Text(s.to_owned());
        Sample::new()
            .table(
                "public.orders",
                &[("id", "int8"), ("region", "text"), ("amount", "numeric")],
            )
            .insert(
                "public.orders",
                vec![Value::Int8(1), text("eu"), Value::Numeric("9.5".into())],
            )
            .insert(
                "public.orders",
                vec![Value::Int8(2), text("us"), Value::Numeric("3".into())],
            )
            .insert(
                "public.orders",
                vec![Value::Int8(3), text("apac"), Value::Numeric("1".into())],
            )
            .delete(
                "public.orders",
                vec![Value::Int8(1), text("eu"), Value::Null],
            )
            .commit()
            .build()
    }

    const CONFIG: &[(&str, &str)] = &[
        ("column", "region"),
        ("routes", "eu:orders_eu, us:orders_us"),
        ("columns", "id:int8, amount:numeric"),
    ];

    #[test]
    fn rows_go_where_their_value_says_and_the_rest_stays() {
        let outcome = run::<Router>(CONFIG, sample()).unwrap();
        let seen: Vec<(&str, Op, &Value)> = outcome
            .rows
            .iter()
            .map(|r| (r.output.as_str(), r.op, &r.values[0]))
            .collect();
        assert_eq!(
            seen,
            [
                ("orders_eu", Op::Insert, &Value::Int8(1)),
                ("orders_us", Op::Insert, &Value::Int8(2)),
                ("public.orders", Op::Insert, &Value::Int8(3)),
                ("orders_eu", Op::Delete, &Value::Int8(1)),
            ]
        );
        assert_eq!(
            outcome.rows[0].values,
            [Value::Int8(1), Value::Numeric("9.5".into())]
        );
        let mut with_drop = CONFIG.to_vec();
        with_drop.push(("unmatched", "drop"));
        assert_eq!(run::<Router>(&with_drop, sample()).unwrap().rows.len(), 3);
    }

    #[test]
    fn each_output_is_declared_once_with_its_columns() {
        let config: Vec<(String, String)> = CONFIG
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (_, setup) = configure(&config).unwrap();
        let names: Vec<&str> = setup.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["orders_eu", "orders_us"]);
        assert_eq!(setup.outputs[0].columns.len(), 2);
        let e = configure(&config[..1]).unwrap_err();
        assert!(e.contains("routes (value:output pairs) is missing"), "{e}");
    }
}
