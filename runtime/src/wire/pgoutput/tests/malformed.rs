//! Malformed messages of every type are typed errors, never panics.

use super::fixture::Wire;
use super::*;

#[test]
fn stream_control_messages_must_match_the_open_stream() {
    let mut d = Decoder::new(2);
    let err = d.decode(&fixture::stream_stop()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::StreamState {
            message: "stream stop",
            stream_open: false
        }
    );
    decode_ok(&mut d, &fixture::stream_start(5, true));
    for bytes in [
        fixture::stream_start(6, true),
        fixture::stream_commit(5, 1, 2, 3),
        fixture::stream_abort(5, 5, None),
    ] {
        let err = d.decode(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::StreamState {
                    stream_open: true,
                    ..
                }
            ),
            "{err}"
        );
    }
    // The refusals left the chunk open.
    assert_eq!(d.open_stream(), Some(5));
}

#[test]
fn empty_and_unknown_tags_are_refused() {
    assert_eq!(Decoder::new(1).decode(&[]).unwrap_err(), DecodeError::Empty);
    let err = Decoder::new(1).decode(b"Z").unwrap_err();
    assert_eq!(err, DecodeError::UnknownTag(b'Z'));
    assert_eq!(err.to_string(), "unknown pgoutput message tag 'Z'");
    let err = Decoder::new(1).decode(&[0x01]).unwrap_err();
    assert_eq!(err.to_string(), "unknown pgoutput message tag 0x01");
}

#[test]
fn rows_of_an_unknown_relation_are_refused() {
    for bytes in [
        fixture::insert(None, 999, ROW),
        fixture::update(None, 999, None, ROW),
        fixture::delete(None, 999, b'K', KEY),
        fixture::truncate(None, 0, &[ORDERS, 999]),
    ] {
        let err = decoder(1).decode(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::UnknownRelation { id: 999 });
        assert!(
            err.to_string()
                .contains("a relation message must precede its rows")
        );
    }
}

#[test]
fn tuples_whose_arity_differs_from_the_relation_are_refused() {
    let short: &[Col<'_>] = &[Col::Text("7"), Col::Null, Col::Null];
    for bytes in [
        fixture::insert(None, ORDERS, short),
        fixture::update(None, ORDERS, None, short),
        fixture::update(None, ORDERS, Some((b'K', short)), ROW),
        fixture::update(None, ORDERS, Some((b'O', ROW)), short),
        fixture::delete(None, ORDERS, b'K', short),
        fixture::delete(None, ORDERS, b'O', short),
    ] {
        let err = decoder(1).decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::ArityMismatch {
                relation: "public.orders".into(),
                expected: 4,
                actual: 3
            }
        );
    }
}

#[test]
fn strings_that_are_not_utf8_are_refused() {
    let bad = b"caf\xe9";
    let relation = |ns: &[u8], name: &[u8], col: &[u8]| {
        Wire::tag(b'R')
            .u32(1)
            .cstr_bytes(ns)
            .cstr_bytes(name)
            .u8(b'd')
            .u16(1)
            .u8(0)
            .cstr_bytes(col)
            .u32(25)
            .i32(-1)
            .build()
    };
    let cases = [
        (relation(bad, b"t", b"c"), "relation", "namespace"),
        (relation(b"s", bad, b"c"), "relation", "relation name"),
        (relation(b"s", b"t", bad), "relation", "column name"),
        (
            Wire::tag(b'Y').u32(1).cstr("s").cstr_bytes(bad).build(),
            "type",
            "type name",
        ),
        (
            Wire::tag(b'O').u64(1).cstr_bytes(bad).build(),
            "origin",
            "origin name",
        ),
        (
            Wire::tag(b'M').u8(1).u64(1).cstr_bytes(bad).i32(0).build(),
            "logical decoding",
            "prefix",
        ),
    ];
    for (bytes, message, what) in cases {
        let err = Decoder::new(1).decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::InvalidUtf8 {
                message,
                what,
                valid_up_to: 3
            }
        );
    }
}

#[test]
fn malformed_fields_are_refused_by_name() {
    let mut d = decoder(1);
    let unterminated = Wire::tag(b'O').u64(1).raw(b"no_nul").build();
    assert_eq!(
        d.decode(&unterminated).unwrap_err(),
        DecodeError::UnterminatedString {
            message: "origin",
            what: "origin name"
        }
    );
    let negative = Wire::tag(b'I')
        .u32(ORDERS)
        .u8(b'N')
        .u16(4)
        .u8(b't')
        .i32(-1)
        .build();
    assert_eq!(
        d.decode(&negative).unwrap_err(),
        DecodeError::NegativeLength {
            message: "insert",
            what: "text column length",
            len: -1
        }
    );
    let bad_kind = Wire::tag(b'I').u32(ORDERS).u8(b'N').u16(4).u8(b'x').build();
    assert_eq!(
        d.decode(&bad_kind).unwrap_err().to_string(),
        "invalid column kind 'x' in insert message"
    );
    let bad_identity = fixture::relation(None, 1, "s", "t", b'z', &[]);
    assert!(matches!(
        d.decode(&bad_identity).unwrap_err(),
        DecodeError::UnexpectedByte {
            what: "replica identity",
            found: b'z',
            ..
        }
    ));
    let insert_without_n = Wire::tag(b'I').u32(ORDERS).u8(b'K').tuple(KEY).build();
    assert!(matches!(
        d.decode(&insert_without_n).unwrap_err(),
        DecodeError::UnexpectedByte {
            what: "new tuple marker",
            found: b'K',
            ..
        }
    ));
    let update_bad_marker = Wire::tag(b'U').u32(ORDERS).u8(b'X').tuple(ROW).build();
    assert!(matches!(
        d.decode(&update_bad_marker).unwrap_err(),
        DecodeError::UnexpectedByte {
            what: "tuple marker",
            found: b'X',
            ..
        }
    ));
    let update_key_then_garbage = Wire::tag(b'U')
        .u32(ORDERS)
        .u8(b'K')
        .tuple(KEY)
        .u8(b'K')
        .tuple(ROW)
        .build();
    assert!(matches!(
        d.decode(&update_key_then_garbage).unwrap_err(),
        DecodeError::UnexpectedByte {
            what: "new tuple marker",
            found: b'K',
            ..
        }
    ));
    let delete_new = Wire::tag(b'D').u32(ORDERS).u8(b'N').tuple(ROW).build();
    assert!(matches!(
        d.decode(&delete_new).unwrap_err(),
        DecodeError::UnexpectedByte {
            what: "old tuple marker",
            found: b'N',
            ..
        }
    ));
    let far_future = fixture::begin(1, i64::MAX, 1);
    assert!(matches!(
        d.decode(&far_future).unwrap_err(),
        DecodeError::TimestampOutOfRange {
            what: "commit time",
            micros: i64::MAX,
            ..
        }
    ));
    // A column count far beyond the message must fail on the data, not on an allocation.
    let huge = Wire::tag(b'R')
        .u32(1)
        .cstr("s")
        .cstr("t")
        .u8(b'd')
        .u16(u16::MAX)
        .build();
    assert!(matches!(
        d.decode(&huge).unwrap_err(),
        DecodeError::Truncated {
            what: "column flags",
            ..
        }
    ));
    let huge = Wire::tag(b'T').u32(u32::MAX).u8(0).u32(ORDERS).build();
    assert!(matches!(
        d.decode(&huge).unwrap_err(),
        DecodeError::Truncated { .. }
    ));
}

/// One message of each type with the decoder state it needs, and the prefix lengths at which
/// the bytes already form a shorter valid message.
struct Case {
    name: &'static str,
    proto_version: u32,
    setup: Vec<Vec<u8>>,
    message: Vec<u8>,
    valid_prefixes: &'static [usize],
}

fn cases() -> Vec<Case> {
    let case = |name, proto_version, setup: Vec<Vec<u8>>, message| Case {
        name,
        proto_version,
        setup,
        message,
        valid_prefixes: &[],
    };
    let rel = || vec![orders(None), customers()];
    let streaming = || vec![orders(None), customers(), fixture::stream_start(900, true)];
    vec![
        case("begin", 1, vec![], fixture::begin(1, PG_TIME, 2)),
        case("commit", 1, vec![], fixture::commit(1, 2, PG_TIME)),
        case("origin", 1, vec![], fixture::origin(1, "node_a")),
        case("relation", 1, vec![], orders(None)),
        case(
            "type",
            1,
            vec![],
            fixture::type_message(None, 1, "public", "mood"),
        ),
        case("insert", 1, rel(), fixture::insert(None, ORDERS, ROW)),
        case("update", 1, rel(), fixture::update(None, ORDERS, None, ROW)),
        case(
            "update key",
            1,
            rel(),
            fixture::update(None, ORDERS, Some((b'K', KEY)), ROW),
        ),
        case(
            "update old",
            1,
            rel(),
            fixture::update(None, ORDERS, Some((b'O', ROW)), ROW),
        ),
        case(
            "delete key",
            1,
            rel(),
            fixture::delete(None, ORDERS, b'K', KEY),
        ),
        case(
            "delete old",
            1,
            rel(),
            fixture::delete(None, ORDERS, b'O', ROW),
        ),
        case(
            "truncate",
            1,
            rel(),
            fixture::truncate(None, 1, &[ORDERS, CUSTOMERS]),
        ),
        case(
            "message",
            1,
            vec![],
            fixture::message(None, true, 1, "p", b"content"),
        ),
        case("stream start", 2, vec![], fixture::stream_start(900, true)),
        case("stream stop", 2, streaming(), fixture::stream_stop()),
        case(
            "stream commit",
            2,
            vec![],
            fixture::stream_commit(900, 1, 2, PG_TIME),
        ),
        case(
            "stream abort",
            2,
            vec![],
            fixture::stream_abort(900, 901, None),
        ),
        Case {
            valid_prefixes: &[9],
            ..case(
                "stream abort parallel",
                4,
                vec![],
                fixture::stream_abort(900, 901, Some((1, PG_TIME))),
            )
        },
        case(
            "begin prepare",
            3,
            vec![],
            fixture::begin_prepare(1, 2, PG_TIME, 3, "gid"),
        ),
        case(
            "prepare",
            3,
            vec![],
            fixture::prepare_like(tag::PREPARE, 1, 2, PG_TIME, 3, "gid"),
        ),
        case(
            "commit prepared",
            3,
            vec![],
            fixture::prepare_like(tag::COMMIT_PREPARED, 1, 2, PG_TIME, 3, "gid"),
        ),
        case(
            "rollback prepared",
            3,
            vec![],
            fixture::rollback_prepared(1, 2, (PG_TIME, PG_TIME), 3, "gid"),
        ),
        case(
            "stream prepare",
            4,
            vec![],
            fixture::prepare_like(tag::STREAM_PREPARE, 1, 2, PG_TIME, 3, "gid"),
        ),
        case("streamed relation", 2, streaming(), orders(Some(900))),
        case(
            "streamed type",
            2,
            streaming(),
            fixture::type_message(Some(900), 1, "s", "t"),
        ),
        case(
            "streamed insert",
            2,
            streaming(),
            fixture::insert(Some(900), ORDERS, ROW),
        ),
        case(
            "streamed update",
            2,
            streaming(),
            fixture::update(Some(900), ORDERS, Some((b'K', KEY)), ROW),
        ),
        case(
            "streamed delete",
            2,
            streaming(),
            fixture::delete(Some(900), ORDERS, b'O', ROW),
        ),
        case(
            "streamed truncate",
            2,
            streaming(),
            fixture::truncate(Some(900), 0, &[ORDERS]),
        ),
        case(
            "streamed message",
            2,
            streaming(),
            fixture::message(Some(900), true, 1, "p", b"c"),
        ),
    ]
}

impl Case {
    fn decoder(&self) -> Decoder {
        let mut d = Decoder::new(self.proto_version);
        for bytes in &self.setup {
            decode_ok(&mut d, bytes);
        }
        d
    }
}

fn assert_house_style(err: &DecodeError, case: &str) {
    let text = err.to_string();
    assert!(!text.starts_with(char::is_uppercase), "{case}: {text}");
    assert!(!text.ends_with('.'), "{case}: {text}");
}

#[test]
fn every_truncation_of_every_message_is_an_error() {
    for case in cases() {
        let mut d = case.decoder();
        let expected = case.decoder().decode(&case.message).expect(case.name);
        for len in 0..case.message.len() {
            if case.valid_prefixes.contains(&len) {
                continue;
            }
            let prefix = &case.message[..len];
            let err = match d.decode(prefix) {
                Ok(m) => panic!("{}: prefix of {len} bytes decoded as {m:?}", case.name),
                Err(err) => err,
            };
            assert_house_style(&err, case.name);
            if len > 0 {
                assert!(
                    matches!(
                        err,
                        DecodeError::Truncated { .. } | DecodeError::UnterminatedString { .. }
                    ),
                    "{}: prefix of {len} bytes: {err}",
                    case.name
                );
            }
            let err = d.decode_bytes(Bytes::copy_from_slice(prefix)).unwrap_err();
            assert_house_style(&err, case.name);
        }
        // None of the failures disturbed the decoder's state.
        assert_eq!(
            d.decode(&case.message).as_ref(),
            Ok(&expected),
            "{}",
            case.name
        );
    }
}

#[test]
fn trailing_bytes_after_every_message_are_an_error() {
    for case in cases() {
        let mut bytes = case.message.clone();
        bytes.push(0);
        let err = case.decoder().decode(&bytes).unwrap_err();
        assert_house_style(&err, case.name);
        if case.valid_prefixes.is_empty() {
            assert!(
                matches!(err, DecodeError::TrailingBytes { remaining: 1, .. }),
                "{}: {err}",
                case.name
            );
        }
    }
}

/// xorshift64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

#[test]
fn random_and_mutated_input_never_panics() {
    const TAGS: &[u8] = b"BCORYIUDTMSEcAbPKrpNn";
    let cases = cases();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut decoded = 0;
    for round in 0..6000 {
        let bytes = if round % 2 == 0 {
            // Random bytes behind a real tag, so most inputs get past the first byte.
            let len = rng.below(64);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
            if let Some(first) = bytes.first_mut() {
                *first = TAGS[rng.below(TAGS.len())];
            }
            bytes
        } else {
            // A valid message with a few bytes overwritten, cut short or extended.
            let mut bytes = cases[rng.below(cases.len())].message.clone();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(bytes.len());
                bytes[at] = rng.byte();
            }
            match rng.below(4) {
                0 => bytes.truncate(rng.below(bytes.len() + 1)),
                1 => bytes.extend((0..rng.below(8)).map(|_| rng.byte())),
                _ => {}
            }
            bytes
        };
        let mut d = decoder(1 + rng.below(4) as u32);
        if d.proto_version() >= 2 && rng.below(2) == 0 {
            decode_ok(&mut d, &fixture::stream_start(900, true));
        }
        let result = if rng.below(2) == 0 {
            d.decode(&bytes)
        } else {
            d.decode_bytes(Bytes::from(bytes))
        };
        match result {
            Ok(_) => decoded += 1,
            Err(err) => assert_house_style(&err, "random"),
        }
    }
    // Mutations that only touch values (lsns, text) still decode: the generator reaches deep.
    assert!(decoded > 50, "only {decoded} inputs decoded");
}

#[test]
fn a_malformed_relation_message_leaves_the_cached_one_in_place() {
    let mut d = decoder(1);
    let cached = Arc::clone(d.relation(ORDERS).expect("cached"));
    let mut altered = fixture::relation(
        None,
        ORDERS,
        "public",
        "orders",
        b'f',
        &[("id", 20, -1, true)],
    );
    altered.pop();
    assert!(matches!(
        d.decode(&altered).unwrap_err(),
        DecodeError::Truncated { .. }
    ));
    assert!(Arc::ptr_eq(
        &cached,
        d.relation(ORDERS).expect("still cached")
    ));
}
