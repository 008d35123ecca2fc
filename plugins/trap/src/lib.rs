//! Test plugin: passes changes through, each row spelled out whole, unless a text value of the batch is a command:
//! `panic` panics, `unreachable` executes the `unreachable` instruction, `fatal` returns a
//! fatal error, `alloc` allocates until memory runs out, `recurse` recurses a million calls deep,
//! `reject` rejects the change (class `test`), `slow` computes for half a second before it
//! answers.

use std::hint::black_box;

use tributary_guest::*;

struct Trap;

impl Transform for Trap {
    fn describe() -> PluginInfo {
        PluginInfo::new("trap", env!("CARGO_PKG_VERSION"))
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        let commands = batch
            .changes()
            .flat_map(|c| c.change.row().unwrap_or_default());
        let mut rejections = Vec::new();
        for change in batch.changes() {
            if change
                .change
                .row()
                .unwrap_or_default()
                .iter()
                .any(|v| v.as_text() == Some("reject"))
            {
                rejections.push(change.reject("test", "asked to reject"));
            }
        }
        for command in commands.filter_map(Value::as_text) {
            match command {
                "panic" => panic!("asked to panic"),
                "unreachable" => unreachable_instruction(),
                "fatal" => return Err(Error::Fatal("asked to fail".to_owned())),
                "recurse" => {
                    black_box(depth(black_box(1_000_000)));
                }
                "slow" => {
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(500);
                    let mut n = 0u64;
                    while std::time::Instant::now() < until {
                        n = black_box(n.wrapping_add(1));
                    }
                }
                "alloc" => {
                    let mut hoard: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hoard.push(black_box(vec![1u8; 8 << 20]));
                    }
                }
                _ => {}
            }
        }
        // Every row spelled out whole, so this plugin also exercises the `row` emit.
        let emits = batch
            .changes()
            .map(|c| {
                Emit::Row(Row {
                    target: Target::Source(c.change.relation),
                    origin: Origin::Change(c.at),
                    sub: 0,
                    op: c.op(),
                    values: c
                        .change
                        .row()
                        .map(<[Value]>::to_vec)
                        .unwrap_or_else(|| vec![Value::Null; c.relation.columns.len()]),
                    old: c.change.old.clone(),
                })
            })
            .collect();
        Ok(Processed { emits, rejections })
    }
}

/// Recursion `n` calls deep, each frame kept alive by the addition after the call.
fn depth(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        black_box(depth(black_box(n - 1))) + 1
    }
}

fn unreachable_instruction() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

export_transform!(Trap);
