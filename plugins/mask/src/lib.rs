//! Masks personal data before it lands in the lake.
//!
//! Settings:
//! - `columns`: comma-separated column names (`email,phone`). Text values in these columns, in
//!   any table, become `sha256:` and the first 16 hex digits of a keyed SHA-256, so equal
//!   values still join and group but cannot be read back.
//! - `salt`: the key mixed into the digest. Without one, short values such as phone numbers
//!   can be recovered by trying them all.
//! - `mode`: `hash` (the default, as above) or `redact`: every value of these columns, of any
//!   type, lands as null.
//! - `drop_deletes`: `true` to leave deletes out of the lake.

use std::cell::RefCell;

use sha2::{Digest, Sha256};
use tributary_guest::*;

#[derive(Default)]
struct Settings {
    columns: Vec<String>,
    salt: String,
    redact: bool,
    drop_deletes: bool,
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

struct Mask;

impl Transform for Mask {
    fn describe() -> PluginInfo {
        PluginInfo::new("mask", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        let mut settings = Settings::default();
        for (key, value) in &config {
            match key.as_str() {
                "columns" => {
                    settings.columns = value
                        .split(',')
                        .map(str::trim)
                        .filter(|c| !c.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
                "salt" => settings.salt = value.clone(),
                "mode" => {
                    settings.redact = match value.as_str() {
                        "hash" => false,
                        "redact" => true,
                        other => return Err(format!("mode = {other:?}: expected hash or redact")),
                    }
                }
                "drop_deletes" => {
                    settings.drop_deletes = value.parse().map_err(|_| {
                        format!("drop_deletes = {value:?}: expected \"true\" or \"false\"")
                    })?;
                }
                other => {
                    return Err(format!(
                        "unknown setting {other:?}: expected columns, salt, mode or drop_deletes"
                    ));
                }
            }
        }
        if settings.columns.is_empty() {
            return Err(
                "columns is missing: name the columns to mask, like \"email,phone\"".into(),
            );
        }
        info(&format!("masking columns {}", settings.columns.join(", ")));
        let columns: Vec<&str> = settings.columns.iter().map(String::as_str).collect();
        // Only the masked columns cross into the plugin; old images too, since they must be
        // masked as well or `_old` would land what the row hides.
        let setup = Setup::new().reads_columns(&columns);
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(setup)
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        SETTINGS.with(|s| {
            let settings = s.borrow();
            let mut out = Vec::with_capacity(batch.transactions.len());
            let mut masked = 0;
            // Which columns of each relation are masked, worked out once per batch.
            let mut chosen: Vec<(*const Relation, Vec<bool>)> = Vec::new();
            for change in batch.changes() {
                if settings.drop_deletes && change.op() == Op::Delete {
                    continue;
                }
                let key: *const Relation = change.relation;
                let index = match chosen.iter().position(|(r, _)| *r == key) {
                    Some(index) => index,
                    None => {
                        let columns = &change.relation.columns;
                        let picks = columns
                            .iter()
                            .map(|c| settings.columns.contains(&c.name))
                            .collect();
                        chosen.push((key, picks));
                        chosen.len() - 1
                    }
                };
                let picks = &chosen[index].1;
                let edits = |row: Option<&Vec<Value>>| -> Vec<(u32, Value)> {
                    let Some(row) = row else { return Vec::new() };
                    row.iter()
                        .enumerate()
                        .filter(|&(i, _)| picks.get(i).copied().unwrap_or(false))
                        .filter_map(|(i, value)| match value {
                            Value::Null | Value::Absent => None,
                            _ if settings.redact => Some((i as u32, Value::Null)),
                            Value::Text(text) => {
                                Some((i as u32, Value::Text(digest(&settings.salt, text))))
                            }
                            _ => None,
                        })
                        .collect()
                };
                let values = edits(change.change.new.as_ref().or(change.change.old.as_ref()));
                let old = match change.op() {
                    Op::Update => edits(change.change.old.as_ref()),
                    _ => Vec::new(),
                };
                if values.is_empty() && old.is_empty() {
                    out.push(change.keep());
                } else {
                    masked += values.len() + old.len();
                    out.push(change.edit(values, old));
                }
            }
            count("values_masked", masked as u64);
            Ok(out.into())
        })
    }
}

fn digest(salt: &str, text: &str) -> String {
    let hash = Sha256::new()
        .chain_update(salt)
        .chain_update([0])
        .chain_update(text)
        .finalize();
    // Hex by hand: the formatting machinery cost more than the hash itself.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(23);
    out.push_str("sha256:");
    for byte in &hash[..8] {
        out.push(HEX[usize::from(byte >> 4)] as char);
        out.push(HEX[usize::from(byte & 0xf)] as char);
    }
    out
}

export_transform!(Mask);

#[cfg(test)]
mod tests {
    use tributary_guest::testing::{Sample, run};
    use tributary_guest::*;

    use super::*;

    #[test]
    fn masks_rows_and_old_images_and_keeps_the_rest() {
        let text = |s: &str| Value::Text(s.to_owned());
        let batch = Sample::new()
            .table(
                "public.users",
                &[("id", "int4"), ("email", "text"), ("note", "text")],
            )
            .insert(
                "public.users",
                vec![Value::Int4(1), text("a@x"), text("hi")],
            )
            .update(
                "public.users",
                Some(vec![Value::Int4(1), text("a@x"), text("hi")]),
                vec![Value::Int4(1), text("b@x"), text("hi")],
            )
            .insert(
                "public.users",
                vec![Value::Int4(2), Value::Null, text("no email")],
            )
            .commit()
            .build();
        let outcome = run::<Mask>(&[("columns", "email"), ("salt", "s")], batch).unwrap();
        let rows = &outcome.rows;
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0].values,
            vec![Value::Int4(1), text(&digest("s", "a@x")), text("hi")]
        );
        assert_eq!(rows[1].values[1], text(&digest("s", "b@x")));
        assert_eq!(rows[1].old.as_ref().unwrap()[1], text(&digest("s", "a@x")));
        assert_eq!(
            rows[2].values,
            vec![Value::Int4(2), Value::Null, text("no email")]
        );
        // The digest is what lakes already hold: SHA-256 of salt, a zero byte and the value
        // (`printf 's\0a@x' | sha256sum`), whichever backend computes it.
        assert_eq!(digest("s", "a@x"), "sha256:6ea2e2f114e1ffff");
    }

    #[test]
    fn redact_lands_nulls_in_the_columns_whatever_their_type() {
        let batch = Sample::new()
            .table(
                "public.users",
                &[("id", "int4"), ("email", "text"), ("born", "date")],
            )
            .insert(
                "public.users",
                vec![Value::Int4(1), Value::Text("a@x".into()), Value::Date(9)],
            )
            .commit()
            .build();
        let config = [("columns", "email,born"), ("mode", "redact")];
        let outcome = run::<Mask>(&config, batch).unwrap();
        assert_eq!(
            outcome.rows[0].values,
            vec![Value::Int4(1), Value::Null, Value::Null]
        );
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        let batch = Sample::new().build();
        let error = run::<Mask>(&[("colums", "email")], batch.clone()).unwrap_err();
        assert!(error.contains("unknown setting \"colums\""), "{error}");
        let error = run::<Mask>(&[], batch).unwrap_err();
        assert!(error.contains("columns is missing"), "{error}");
    }
}
