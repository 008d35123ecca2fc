//! Test plugin: a transform of the current contract that imports a later version of the host's
//! column functions (`tributary:functions@1.1.0`, kept in `tests/fixtures/functions-1.1/`) than
//! the host serves, so the tests can show how the host refuses it when it loads.

wit_bindgen::generate!({
    path: ["../../guest-sdk/wit", "../../tests/fixtures/functions-1.1"],
    world: "tributary:functions/newer-functions@1.1.0",
    // The contract's interfaces come from another package than the world's.
    generate_all,
});

use exports::tributary::transform::plugin::Guest;
use tributary::transform::types::{Batch, Error, Interest, PluginInfo, Processed, Setup};

struct NewerFunctions;

impl Guest for NewerFunctions {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "newer-functions".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    fn init(_config: Vec<(String, String)>) -> Result<Setup, String> {
        Ok(Setup {
            outputs: Vec::new(),
            reshapes: Vec::new(),
            interest: Interest {
                columns: None,
                old_images: false,
                messages: false,
                whole_transactions: false,
            },
        })
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        // Called, so that the component imports the interface.
        let rows = tributary::functions1_1_0::columns::count_rows(&[]).map_err(Error::Fatal)?;
        Err(Error::Fatal(format!(
            "a fixture that never processes ({rows} rows, {} transactions)",
            batch.transactions.len()
        )))
    }
}

export!(NewerFunctions);
