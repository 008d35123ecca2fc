//! Test plugin: `process` never returns.

use std::hint::black_box;

use tributary_guest::*;

struct Spin;

impl Transform for Spin {
    fn describe() -> PluginInfo {
        PluginInfo::new("spin", env!("CARGO_PKG_VERSION"))
    }

    fn process(_batch: Batch) -> Result<Processed, Error> {
        let mut n = 0u64;
        loop {
            n = black_box(n.wrapping_add(1));
        }
    }
}

export_transform!(Spin);
