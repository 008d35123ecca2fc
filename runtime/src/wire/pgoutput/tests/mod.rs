//! The decoder against messages built byte by byte: every message type decodes to what was
//! written, and every malformed variant is a typed error, never a panic.

use std::sync::Arc;

use bytes::Bytes;

use super::fixture::{self, Col, ColumnDef};
use super::*;
use crate::Lsn;

mod malformed;
mod messages;

const ORDERS: u32 = 16_384;
const CUSTOMERS: u32 = 16_390;
/// 2024-01-02 03:04:05.678901 UTC, as microseconds since 2000-01-01.
const PG_TIME: i64 = 757_479_845_678_901;
/// The same instant as microseconds since 1970-01-01.
const UNIX_TIME: i64 = 1_704_164_645_678_901;
const NUMERIC_10_2: i32 = (10 << 16 | 2) + 4;

const ORDERS_COLUMNS: &[ColumnDef<'static>] = &[
    ("id", 20, -1, true),
    ("note", 25, -1, false),
    ("payload", 17, -1, false),
    ("amount", 1700, NUMERIC_10_2, false),
];

fn orders(xid: Option<u32>) -> Vec<u8> {
    fixture::relation(xid, ORDERS, "public", "orders", b'd', ORDERS_COLUMNS)
}

fn customers() -> Vec<u8> {
    fixture::relation(
        None,
        CUSTOMERS,
        "crm",
        "customers",
        b'f',
        &[("id", 23, -1, true)],
    )
}

const ROW: &[Col<'static>] = &[
    Col::Text("7"),
    Col::Null,
    Col::Binary(&[0xde, 0xad, 0x00, 0xff]),
    Col::UnchangedToast,
];
const KEY: &[Col<'static>] = &[Col::Text("7"), Col::Null, Col::Null, Col::Null];

fn text(s: &str) -> TupleValue {
    TupleValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row_tuple() -> Tuple {
    Tuple(vec![
        text("7"),
        TupleValue::Null,
        TupleValue::Binary(Bytes::from_static(&[0xde, 0xad, 0x00, 0xff])),
        TupleValue::UnchangedToast,
    ])
}

fn key_tuple() -> Tuple {
    Tuple(vec![
        text("7"),
        TupleValue::Null,
        TupleValue::Null,
        TupleValue::Null,
    ])
}

/// A decoder for `proto_version` that has seen the orders and customers relations.
fn decoder(proto_version: u32) -> Decoder {
    let mut d = Decoder::new(proto_version);
    d.decode(&orders(None)).expect("orders relation");
    d.decode(&customers()).expect("customers relation");
    d
}

fn decode_ok(d: &mut Decoder, bytes: &[u8]) -> LogicalMessage {
    match d.decode(bytes) {
        Ok(m) => m,
        Err(e) => panic!("decoding {bytes:02x?} failed: {e}"),
    }
}
