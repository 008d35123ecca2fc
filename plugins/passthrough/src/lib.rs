//! Lands every change in the output derived from its table, unchanged: the new row for
//! inserts and updates, the old row for deletes, a row of nulls for truncates.

use tributary_guest::*;

struct Passthrough;

impl Transform for Passthrough {
    fn describe() -> PluginInfo {
        PluginInfo::new("passthrough", env!("CARGO_PKG_VERSION"))
    }

    fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
        Ok(batch.changes().map(|c| c.passthrough()).collect())
    }
}

export_transform!(Passthrough);
