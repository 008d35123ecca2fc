//! Drops, renames and adds columns of table outputs. It reads no value: it declares a reshape
//! and keeps every change, and the host projects the rows.
//!
//! Settings:
//! - `tables`: comma-separated `schema.table` names to reshape; all tables when absent.
//! - `drop`: comma-separated columns to leave out.
//! - `rename`: comma-separated `from:to` pairs.
//! - `add`: comma-separated `name:type` columns to add (null in every row), `type` one of
//!   `text`, `int4`, `int8`, `bool`, `float8`, `timestamptz`, `jsonb`.

use tributary_guest::*;

struct Select;

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

/// The reshape the settings describe.
pub fn reshape(config: &[(String, String)]) -> Result<Reshape, String> {
    let tables: Vec<&str> = setting(config, "tables")
        .map(|t| list(t).collect())
        .unwrap_or_default();
    let mut reshape = Reshape::of(&tables);
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
                    let ty = scalar(ty.trim()).ok_or_else(|| {
                        format!(
                            "add: type {ty:?} of {name:?} is not one of text, int4, int8, bool, \
                             float8, timestamptz, jsonb"
                        )
                    })?;
                    reshape = reshape.add_column(OutputColumn::new(name.trim(), ty));
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
    Ok(reshape)
}

impl Transform for Select {
    fn describe() -> PluginInfo {
        PluginInfo::new("select", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        let reshape = reshape(&config)?;
        Ok(Setup::new()
            .reads_columns(&[])
            .without_old_images()
            .reshape(reshape))
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        Ok(batch.changes().map(|c| c.keep()).collect())
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
        .unwrap();
        assert_eq!(r.tables, ["public.users", "public.orders"]);
        assert_eq!(r.drop, ["ssn"]);
        assert_eq!(r.rename, [("email".to_owned(), "contact".to_owned())]);
        assert_eq!(r.add[0].name, "region");
    }

    #[test]
    fn bad_settings_say_what_to_write() {
        let e = reshape(&config(&[("rename", "email")])).unwrap_err();
        assert!(e.contains("not a from:to pair"), "{e}");
        let e = reshape(&config(&[("add", "region:varchar")])).unwrap_err();
        assert!(e.contains("is not one of text"), "{e}");
        let e = reshape(&config(&[("tables", "x")])).unwrap_err();
        assert!(e.contains("nothing to do"), "{e}");
    }
}
