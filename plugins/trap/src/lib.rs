//! Test plugin: passes changes through, unless a text value of the batch is a command:
//! `panic` panics, `unreachable` executes the `unreachable` instruction, `fatal` returns a
//! fatal error, `alloc` allocates until memory runs out.

use std::hint::black_box;

use tributary_guest::*;

struct Trap;

impl Transform for Trap {
    fn describe() -> PluginInfo {
        PluginInfo::new("trap", env!("CARGO_PKG_VERSION"))
    }

    fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
        let commands = batch
            .changes()
            .flat_map(|c| c.change.row().unwrap_or_default());
        for command in commands.filter_map(Value::as_text) {
            match command {
                "panic" => panic!("asked to panic"),
                "unreachable" => unreachable_instruction(),
                "fatal" => return Err(Error::Fatal("asked to fail".to_owned())),
                "alloc" => {
                    let mut hoard: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hoard.push(black_box(vec![1u8; 8 << 20]));
                    }
                }
                _ => {}
            }
        }
        Ok(batch.changes().map(|c| c.passthrough()).collect())
    }
}

fn unreachable_instruction() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

export_transform!(Trap);
