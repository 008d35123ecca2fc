//! Feeds arbitrary pgoutput message streams through the decoder and the transaction assembler.
//!
//! Input layout: the first byte picks the protocol version (1 to 4); the rest is a sequence of
//! messages, each a 2-byte big-endian length and that many bytes. A sequence, not a single
//! message, so that the relation cache, stream state and transaction assembly (including text
//! value parsing) are exercised across messages. Errors are expected; panics and hangs are bugs.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tributary::stream::assemble::Assembler;
use tributary::wire::pgoutput::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&version, mut rest)) = data.split_first() else { return };
    let mut decoder = Decoder::new(u32::from(version % 4) + 1);
    let mut assembler = Assembler::new();
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let body = &rest[2..];
        let (message, tail) = body.split_at(len.min(body.len()));
        rest = tail;
        if let Ok(message) = decoder.decode(message) {
            // Reading a spilled transaction back exercises the spill file format too.
            if let Ok(Some(done)) = assembler.push(message) {
                let _ = done.into_whole();
            }
        }
    }
});
