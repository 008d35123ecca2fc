//! Drops, renames and adds columns of table outputs. It reads no value: it declares a reshape
//! and keeps every change (or edits in the constants of added columns), and the host projects
//! the rows.
//!
//! Settings:
//! - `tables`: comma-separated `schema.table` names to reshape; all tables when absent.
//! - `drop`: comma-separated columns to leave out.
//! - `rename`: comma-separated `from:to` pairs.
//! - `add`: comma-separated `name:type` columns to add, `type` one of `text`, `int4`, `int8`,
//!   `bool`, `float8`, `timestamptz`, `jsonb`; null in every row, or `name:type=value`, that
//!   constant in every row (not for `timestamptz`: `region:text=eu-west`, `tier:int4=2`). A `!`
//!   after the type declares the column not nullable (`region:text!=eu-west`): the host then
//!   refuses a row that leaves it null.

use std::cell::RefCell;

use tributary_guest::*;

struct Select;

/// What `process` needs of the settings: the tables reshaped, and the constant of each added
/// column (in the order added).
#[derive(Default)]
struct Constants {
    tables: Vec<String>,
    values: Vec<Option<Value>>,
}

thread_local! {
    static CONSTANTS: RefCell<Constants> = RefCell::new(Constants::default());
}

/// `value` as a value of column type `ty`, for a constant.
fn constant(name: &str, ty: ScalarType, value: &str) -> Result<Value, String> {
    let bad = |what: &str| format!("add: {name}'s constant {value:?} is not {what}");
    Ok(match ty {
        ScalarType::Text => Value::Text(value.to_owned()),
        ScalarType::Int4 => Value::Int4(value.parse().map_err(|_| bad("an int4"))?),
        ScalarType::Int8 => Value::Int8(value.parse().map_err(|_| bad("an int8"))?),
        ScalarType::Float8 => Value::Float8(value.parse().map_err(|_| bad("a float8"))?),
        ScalarType::Boolean => Value::Boolean(value.parse().map_err(|_| bad("true or false"))?),
        ScalarType::Jsonb => Value::Json(value.to_owned()),
        _ => {
            return Err(format!(
                "add: {name} cannot take a constant of its type; constants are for text, int4, \
                 int8, bool, float8 and jsonb"
            ));
        }
    })
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn scalar(name: &str) -> Option<ScalarType> {
    Some(match name {
        "text" => ScalarType::Text,
        "int4" => ScalarType::Int4,
        "int8" => ScalarType::Int8,
        "bool" => ScalarType::Boolean,
        "float8" => ScalarType::Float8,
        "timestamptz" => ScalarType::Timestamptz,
        "jsonb" => ScalarType::Jsonb,
        _ => return None,
    })
}

/// The reshape the settings describe, and the constants of the columns it adds.
pub fn reshape(config: &[(String, String)]) -> Result<(Reshape, Vec<Option<Value>>), String> {
    let tables: Vec<&str> = setting(config, "tables")
        .map(|t| list(t).collect())
        .unwrap_or_default();
    let mut reshape = Reshape::of(&tables);
    let mut constants = Vec::new();
    for (key, value) in config {
        match key.as_str() {
            "tables" => {}
            "drop" => list(value).for_each(|c| reshape.drop.push(c.to_owned())),
            "rename" => {
                for pair in list(value) {
                    let (from, to) = pair.split_once(':').ok_or_else(|| {
                        format!("rename: {pair:?} is not a from:to pair, like \"email:contact\"")
                    })?;
                    reshape = reshape.rename_column(from.trim(), to.trim());
                }
            }
            "add" => {
                for column in list(value) {
                    let (name, ty) = column.split_once(':').ok_or_else(|| {
                        format!("add: {column:?} is not a name:type pair, like \"region:text\"")
                    })?;
                    let name = name.trim();
                    let (ty, value) = match ty.split_once('=') {
                        Some((ty, value)) => (ty, Some(value)),
                        None => (ty, None),
                    };
                    let (ty, not_null) = match ty.trim().strip_suffix('!') {
                        Some(ty) => (ty, true),
                        None => (ty.trim(), false),
                    };
                    let ty = scalar(ty).ok_or_else(|| {
                        format!(
                            "add: type {ty:?} of {name:?} is not one of text, int4, int8, bool, \
                             float8, timestamptz, jsonb"
                        )
                    })?;
                    constants.push(value.map(|v| constant(name, ty, v)).transpose()?);
                    let added = OutputColumn::new(name, ty);
                    reshape = reshape.add_column(match not_null {
                        true => added.not_null(),
                        false => added,
                    });
                }
            }
            other => {
                return Err(format!(
                    "unknown setting {other:?}: expected tables, drop, rename or add"
                ));
            }
        }
    }
    if reshape.drop.is_empty() && reshape.rename.is_empty() && reshape.add.is_empty() {
        return Err("nothing to do: set drop, rename or add".into());
    }
    Ok((reshape, constants))
}

impl Transform for Select {
    fn describe() -> PluginInfo {
        PluginInfo::new("select", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        let (reshape, values) = reshape(&config)?;
        CONSTANTS.with(|c| {
            *c.borrow_mut() = Constants {
                tables: reshape.tables.clone(),
                values,
            }
        });
        Ok(Setup::new()
            .reads_columns(&[])
            .without_old_images()
            .reshape(reshape))
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        CONSTANTS.with(|c| {
            let c = c.borrow();
            if c.values.iter().all(Option::is_none) {
                return Ok(batch.changes().map(|c| c.keep()).collect());
            }
            Ok(batch
                .changes()
                .map(|change| {
                    let relation = change.relation;
                    let reshaped =
                        c.tables.is_empty() || c.tables.contains(&relation.qualified_name());
                    if !reshaped || matches!(change.op(), Op::Truncate) {
                        return change.keep();
                    }
                    // Added columns come after the table's own, in the order added.
                    let first = relation.columns.len() as u32;
                    let values = (first..)
                        .zip(&c.values)
                        .filter_map(|(p, v)| v.clone().map(|v| (p, v)))
                        .collect();
                    change.edit(values, Vec::new())
                })
                .collect())
        })
    }
}

export_transform!(Select);

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn settings_become_one_reshape() {
        let r = reshape(&config(&[
            ("tables", "public.users, public.orders"),
            ("drop", "ssn"),
            ("rename", "email:contact"),
            ("add", "region:text"),
        ]))
        .unwrap()
        .0;
        assert_eq!(r.tables, ["public.users", "public.orders"]);
        assert_eq!(r.drop, ["ssn"]);
        assert_eq!(r.rename, [("email".to_owned(), "contact".to_owned())]);
        assert_eq!(r.add[0].name, "region");
    }

    #[test]
    fn added_columns_take_constants_and_may_be_not_nullable() {
        let (r, constants) = reshape(&config(&[(
            "add",
            "region:text!=eu-west, tier:int4=2, note:text",
        )]))
        .unwrap();
        let shown: Vec<(&str, bool)> = r
            .add
            .iter()
            .map(|c| (c.name.as_str(), c.nullable))
            .collect();
        assert_eq!(shown, [("region", false), ("tier", true), ("note", true)]);
        assert_eq!(
            constants,
            [
                Some(Value::Text("eu-west".into())),
                Some(Value::Int4(2)),
                None
            ]
        );
    }

    #[test]
    fn bad_settings_say_what_to_write() {
        let e = reshape(&config(&[("rename", "email")])).unwrap_err();
        assert!(e.contains("not a from:to pair"), "{e}");
        let e = reshape(&config(&[("add", "region:varchar")])).unwrap_err();
        assert!(e.contains("is not one of text"), "{e}");
        let e = reshape(&config(&[("add", "tier:int4=two")])).unwrap_err();
        assert!(e.contains("tier's constant \"two\" is not an int4"), "{e}");
        let e = reshape(&config(&[("add", "at:timestamptz=now")])).unwrap_err();
        assert!(e.contains("cannot take a constant"), "{e}");
        let e = reshape(&config(&[("tables", "x")])).unwrap_err();
        assert!(e.contains("nothing to do"), "{e}");
    }
}
