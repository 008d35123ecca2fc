//! Test plugin: a passthrough built against the 0.1 contract (kept in
//! `tests/fixtures/wit-0.1/`), so the tests can show how the host refuses it.

wit_bindgen::generate!({
    path: "../../tests/fixtures/wit-0.1",
    world: "transform",
});

use tributary::transform::types::Target;

struct OldContract;

impl Guest for OldContract {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "old-contract".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            outputs: Vec::new(),
        }
    }

    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
        let mut emits = Vec::new();
        for transaction in batch.transactions {
            for change in transaction.changes {
                emits.push(Emit {
                    target: Target::Source(change.relation),
                    commit_lsn: transaction.commit_lsn,
                    seq: change.seq,
                    op: change.op,
                    values: change.new.or(change.old).unwrap_or_default(),
                    old: None,
                });
            }
        }
        Ok(emits)
    }
}

export!(OldContract);
