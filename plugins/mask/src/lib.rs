//! Masks personal data before it lands in the lake.
//!
//! Settings:
//! - `columns`: comma-separated column names (`email,phone`). Text values in these columns, in
//!   any table, become `sha256:` and the first 16 hex digits of a keyed SHA-256, so equal
//!   values still join and group but cannot be read back.
//! - `salt`: the key mixed into the digest. Without one, short values such as phone numbers
//!   can be recovered by trying them all.
//! - `drop_deletes`: `true` to leave deletes out of the lake.

use std::cell::RefCell;
use std::fmt::Write;

use sha2::{Digest, Sha256};
use tributary_guest::*;

#[derive(Default)]
struct Settings {
    columns: Vec<String>,
    salt: String,
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

    fn init(config: Vec<(String, String)>) -> Result<(), String> {
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
                "drop_deletes" => {
                    settings.drop_deletes = value.parse().map_err(|_| {
                        format!("drop_deletes = {value:?}: expected \"true\" or \"false\"")
                    })?;
                }
                other => {
                    return Err(format!(
                        "unknown setting {other:?}: expected columns, salt or drop_deletes"
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
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(())
    }

    fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
        SETTINGS.with(|s| {
            let settings = s.borrow();
            let mut out = Vec::with_capacity(batch.transactions.len());
            for change in batch.changes() {
                if settings.drop_deletes && change.op() == Op::Delete {
                    continue;
                }
                let mask = |mut row: Vec<Value>| {
                    for (column, value) in change.relation.columns.iter().zip(row.iter_mut()) {
                        if let Value::Text(text) = value
                            && settings.columns.contains(&column.name)
                        {
                            *text = digest(&settings.salt, text);
                        }
                    }
                    row
                };
                // The old image is masked too, or it would land what the new row hides.
                let old = change.change.old.clone().map(mask);
                out.push(change.emit(mask(change.values())).with_old(old));
            }
            Ok(out)
        })
    }
}

fn digest(salt: &str, text: &str) -> String {
    let hash = Sha256::new()
        .chain_update(salt)
        .chain_update([0])
        .chain_update(text)
        .finalize();
    let mut out = String::from("sha256:");
    for byte in &hash[..8] {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

export_transform!(Mask);
