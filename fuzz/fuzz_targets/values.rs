//! Feeds arbitrary bytes to the value decoders, in the text and the binary form of every
//! built-in type, as scalars and as arrays of up to three dimensions.
//!
//! Input layout: byte 0 picks the type, byte 1 the form (even: text, odd: binary) and the
//! array dimensions of an array type (`(byte >> 1) % 3 + 1`); the rest is the value.
//! Errors are expected; panics and hangs are bugs.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tributary::wire::pgtype::{self, ColumnType};

fuzz_target!(|data: &[u8]| {
    let [pick, form, value @ ..] = data else { return };
    let types: Vec<u32> = pgtype::builtin_types().collect();
    let type_oid = types[usize::from(*pick) % types.len()];
    let ty = ColumnType::builtin(type_oid, -1).with_dims((form >> 1) % 3 + 1);
    if form & 1 == 0 {
        let _ = pgtype::decode_text(&ty, value);
    } else {
        let _ = pgtype::decode_binary(&ty, value);
    }
});
