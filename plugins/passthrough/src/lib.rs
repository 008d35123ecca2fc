//! Lands every change as it came. It reads no values: the host sends it none and keeps each
//! change, so this is the least a plugin can cost.

use tributary_guest::*;

struct Passthrough;

impl Transform for Passthrough {
    fn describe() -> PluginInfo {
        PluginInfo::new("passthrough", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        no_settings(&config)?;
        Ok(Setup::new().reads_columns(&[]).without_old_images())
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        Ok(batch.changes().map(|c| c.keep()).collect())
    }
}

export_transform!(Passthrough);
