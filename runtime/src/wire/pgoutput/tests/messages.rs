//! Well-formed messages of every type decode to what was written.

use super::*;

#[test]
fn begin_converts_commit_time_to_unix_micros() {
    let m = decode_ok(
        &mut Decoder::new(1),
        &fixture::begin(0x16_B374_D848, PG_TIME, 742),
    );
    assert_eq!(
        m,
        LogicalMessage::Begin {
            final_lsn: Lsn(0x16_B374_D848),
            commit_time: UNIX_TIME,
            xid: 742,
        }
    );
}

#[test]
fn commit_carries_commit_and_end_lsn() {
    let m = decode_ok(
        &mut Decoder::new(1),
        &fixture::commit(0x100, 0x130, PG_TIME),
    );
    assert_eq!(
        m,
        LogicalMessage::Commit {
            flags: 0,
            commit_lsn: Lsn(0x100),
            end_lsn: Lsn(0x130),
            commit_time: UNIX_TIME,
        }
    );
}

#[test]
fn origin_carries_its_name() {
    let m = decode_ok(&mut Decoder::new(1), &fixture::origin(0x42, "node_a"));
    assert_eq!(
        m,
        LogicalMessage::Origin {
            commit_lsn: Lsn(0x42),
            name: "node_a".into(),
        }
    );
}

#[test]
fn relation_message_is_cached_and_a_new_one_replaces_it() {
    let mut d = Decoder::new(1);
    let LogicalMessage::Relation { xid, relation } = decode_ok(&mut d, &orders(None)) else {
        panic!("expected a relation message");
    };
    assert_eq!(xid, None);
    assert_eq!(relation.id, ORDERS);
    assert_eq!(relation.qualified_name(), "public.orders");
    assert_eq!(relation.replica_identity, ReplicaIdentity::Default);
    assert_eq!(
        relation.columns[3],
        RelationColumn::new("amount", 1700, NUMERIC_10_2, false)
    );
    assert!(relation.columns[0].key);
    assert!(Arc::ptr_eq(&relation, d.relation(ORDERS).expect("cached")));

    // ALTER TABLE orders DROP COLUMN ...: the server resends the relation.
    let altered = fixture::relation(
        None,
        ORDERS,
        "public",
        "orders",
        b'f',
        &[("id", 20, -1, true)],
    );
    decode_ok(&mut d, &altered);
    let cached = d.relation(ORDERS).expect("still cached");
    assert_eq!(cached.columns.len(), 1);
    assert_eq!(cached.replica_identity, ReplicaIdentity::Full);
    // Rows decoded earlier keep the shape they were sent with.
    assert_eq!(relation.columns.len(), 4);
}

#[test]
fn every_replica_identity_is_read() {
    for (byte, identity) in [
        (b'd', ReplicaIdentity::Default),
        (b'n', ReplicaIdentity::Nothing),
        (b'f', ReplicaIdentity::Full),
        (b'i', ReplicaIdentity::Index),
    ] {
        let mut d = Decoder::new(1);
        decode_ok(&mut d, &fixture::relation(None, 1, "s", "t", byte, &[]));
        assert_eq!(d.relation(1).expect("cached").replica_identity, identity);
    }
}

#[test]
fn type_message_names_the_type() {
    let m = decode_ok(
        &mut Decoder::new(1),
        &fixture::type_message(None, 90_001, "public", "mood"),
    );
    assert_eq!(
        m,
        LogicalMessage::Type {
            xid: None,
            id: 90_001,
            namespace: "public".into(),
            name: "mood".into(),
        }
    );
}

#[test]
fn insert_reads_every_column_kind_and_shares_the_cached_relation() {
    let mut d = decoder(1);
    let LogicalMessage::Insert { xid, relation, new } =
        decode_ok(&mut d, &fixture::insert(None, ORDERS, ROW))
    else {
        panic!("expected an insert");
    };
    assert_eq!(xid, None);
    assert_eq!(new, row_tuple());
    assert!(Arc::ptr_eq(&relation, d.relation(ORDERS).expect("cached")));
}

#[test]
fn update_without_old_image() {
    let m = decode_ok(&mut decoder(1), &fixture::update(None, ORDERS, None, ROW));
    let LogicalMessage::Update { old, new, .. } = m else {
        panic!("expected an update");
    };
    assert_eq!(old, None);
    assert_eq!(new, row_tuple());
}

#[test]
fn update_with_old_key_and_with_full_old_row() {
    let mut d = decoder(1);
    let m = decode_ok(
        &mut d,
        &fixture::update(None, ORDERS, Some((b'K', KEY)), ROW),
    );
    let LogicalMessage::Update { old, new, .. } = m else {
        panic!("expected an update");
    };
    assert_eq!(old, Some(OldTuple::Key(key_tuple())));
    assert_eq!(new, row_tuple());

    let m = decode_ok(
        &mut d,
        &fixture::update(None, ORDERS, Some((b'O', ROW)), KEY),
    );
    let LogicalMessage::Update { old, new, .. } = m else {
        panic!("expected an update");
    };
    assert_eq!(old, Some(OldTuple::Full(row_tuple())));
    assert_eq!(new, key_tuple());
}

#[test]
fn delete_with_key_and_with_full_old_row() {
    let mut d = decoder(1);
    let m = decode_ok(&mut d, &fixture::delete(None, ORDERS, b'K', KEY));
    let LogicalMessage::Delete { xid, relation, old } = m else {
        panic!("expected a delete");
    };
    assert_eq!((xid, relation.id), (None, ORDERS));
    assert_eq!(old, OldTuple::Key(key_tuple()));

    let m = decode_ok(&mut d, &fixture::delete(None, ORDERS, b'O', ROW));
    let LogicalMessage::Delete { old, .. } = m else {
        panic!("expected a delete");
    };
    assert_eq!(old.tuple(), &row_tuple());
}

#[test]
fn truncate_lists_its_relations_and_options() {
    let mut d = decoder(1);
    let m = decode_ok(&mut d, &fixture::truncate(None, 0b11, &[ORDERS, CUSTOMERS]));
    let LogicalMessage::Truncate {
        xid,
        options,
        relations,
    } = m
    else {
        panic!("expected a truncate");
    };
    assert_eq!((xid, options), (None, 0b11));
    let names: Vec<_> = relations.iter().map(|r| r.qualified_name()).collect();
    assert_eq!(names, ["public.orders", "crm.customers"]);
}

#[test]
fn logical_decoding_messages_transactional_or_not() {
    let mut d = Decoder::new(1);
    for transactional in [true, false] {
        let m = decode_ok(
            &mut d,
            &fixture::message(None, transactional, 0x77, "audit", b"\x00{\"a\":1}"),
        );
        assert_eq!(
            m,
            LogicalMessage::Message {
                xid: None,
                transactional,
                lsn: Lsn(0x77),
                prefix: "audit".into(),
                content: Bytes::from_static(b"\x00{\"a\":1}"),
            }
        );
    }
}

#[test]
fn messages_inside_a_streamed_chunk_carry_the_xid() {
    let mut d = Decoder::new(2);
    assert_eq!(
        decode_ok(&mut d, &fixture::stream_start(900, true)),
        LogicalMessage::StreamStart {
            xid: 900,
            first_segment: true
        }
    );
    assert_eq!(d.open_stream(), Some(900));

    let LogicalMessage::Relation { xid, .. } = decode_ok(&mut d, &orders(Some(900))) else {
        panic!("expected a relation");
    };
    assert_eq!(xid, Some(900));
    let m = decode_ok(
        &mut d,
        &fixture::type_message(Some(900), 5, "public", "mood"),
    );
    assert!(
        matches!(m, LogicalMessage::Type { xid: Some(900), .. }),
        "{m:?}"
    );
    // Changes of a subtransaction carry the subtransaction's xid.
    let m = decode_ok(&mut d, &fixture::insert(Some(901), ORDERS, ROW));
    assert!(
        matches!(m, LogicalMessage::Insert { xid: Some(901), .. }),
        "{m:?}"
    );
    let m = decode_ok(
        &mut d,
        &fixture::update(Some(900), ORDERS, Some((b'K', KEY)), ROW),
    );
    assert!(
        matches!(m, LogicalMessage::Update { xid: Some(900), .. }),
        "{m:?}"
    );
    let m = decode_ok(&mut d, &fixture::delete(Some(900), ORDERS, b'K', KEY));
    assert!(
        matches!(m, LogicalMessage::Delete { xid: Some(900), .. }),
        "{m:?}"
    );
    let m = decode_ok(&mut d, &fixture::truncate(Some(900), 0, &[ORDERS]));
    assert!(
        matches!(m, LogicalMessage::Truncate { xid: Some(900), .. }),
        "{m:?}"
    );
    let m = decode_ok(&mut d, &fixture::message(Some(900), true, 1, "p", b"c"));
    assert!(
        matches!(m, LogicalMessage::Message { xid: Some(900), .. }),
        "{m:?}"
    );

    assert_eq!(
        decode_ok(&mut d, &fixture::stream_stop()),
        LogicalMessage::StreamStop
    );
    assert_eq!(d.open_stream(), None);
    // Between chunks, messages have no leading xid again.
    let m = decode_ok(&mut d, &fixture::insert(None, ORDERS, ROW));
    assert!(
        matches!(m, LogicalMessage::Insert { xid: None, .. }),
        "{m:?}"
    );

    let m = decode_ok(&mut d, &fixture::stream_start(900, false));
    assert_eq!(
        m,
        LogicalMessage::StreamStart {
            xid: 900,
            first_segment: false
        }
    );
    decode_ok(&mut d, &fixture::stream_stop());
    assert_eq!(
        decode_ok(&mut d, &fixture::stream_commit(900, 0x500, 0x530, PG_TIME)),
        LogicalMessage::StreamCommit {
            xid: 900,
            flags: 0,
            commit_lsn: Lsn(0x500),
            end_lsn: Lsn(0x530),
            commit_time: UNIX_TIME,
        }
    );
}

#[test]
fn stream_abort_reads_the_abort_position_only_from_protocol_4() {
    let plain = fixture::stream_abort(900, 901, None);
    let parallel = fixture::stream_abort(900, 901, Some((0x600, PG_TIME)));
    for proto in [2, 3, 4] {
        assert_eq!(
            decode_ok(&mut Decoder::new(proto), &plain),
            LogicalMessage::StreamAbort {
                xid: 900,
                subxid: 901,
                abort_lsn: None,
                abort_time: None,
            },
            "protocol {proto}"
        );
    }
    assert_eq!(
        decode_ok(&mut Decoder::new(4), &parallel),
        LogicalMessage::StreamAbort {
            xid: 900,
            subxid: 901,
            abort_lsn: Some(Lsn(0x600)),
            abort_time: Some(UNIX_TIME),
        }
    );
    for proto in [2, 3] {
        let err = Decoder::new(proto).decode(&parallel).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TrailingBytes {
                message: "stream abort",
                remaining: 16
            }
        );
    }
}

#[test]
fn a_prepared_transaction_and_its_outcome_decode_from_protocol_3() {
    let mut d = decoder(3);
    let gid = "order-42";
    assert_eq!(
        decode_ok(
            &mut d,
            &fixture::begin_prepare(0x700, 0x728, PG_TIME, 910, gid)
        ),
        LogicalMessage::BeginPrepare {
            prepare_lsn: Lsn(0x700),
            end_lsn: Lsn(0x728),
            prepare_time: UNIX_TIME,
            xid: 910,
            gid: gid.into(),
        }
    );
    // Rows of a prepared transaction carry no xid: they are not inside a streamed chunk.
    assert!(matches!(
        decode_ok(&mut d, &fixture::insert(None, ORDERS, ROW)),
        LogicalMessage::Insert { xid: None, .. }
    ));
    assert_eq!(
        decode_ok(
            &mut d,
            &fixture::prepare_like(tag::PREPARE, 0x700, 0x728, PG_TIME, 910, gid)
        ),
        LogicalMessage::Prepare {
            flags: 0,
            prepare_lsn: Lsn(0x700),
            end_lsn: Lsn(0x728),
            prepare_time: UNIX_TIME,
            xid: 910,
            gid: gid.into(),
        }
    );
    assert_eq!(
        decode_ok(
            &mut d,
            &fixture::prepare_like(tag::COMMIT_PREPARED, 0x800, 0x830, PG_TIME + 1, 910, gid)
        ),
        LogicalMessage::CommitPrepared {
            flags: 0,
            commit_lsn: Lsn(0x800),
            end_lsn: Lsn(0x830),
            commit_time: UNIX_TIME + 1,
            xid: 910,
            gid: gid.into(),
        }
    );
    assert_eq!(
        decode_ok(
            &mut d,
            &fixture::rollback_prepared(0x728, 0x900, (PG_TIME, PG_TIME + 2), 911, "other")
        ),
        LogicalMessage::RollbackPrepared {
            flags: 0,
            prepare_end_lsn: Lsn(0x728),
            rollback_end_lsn: Lsn(0x900),
            prepare_time: UNIX_TIME,
            rollback_time: UNIX_TIME + 2,
            xid: 911,
            gid: "other".into(),
        }
    );
}

#[test]
fn a_streamed_transaction_is_prepared_after_its_last_chunk() {
    let mut d = decoder(4);
    decode_ok(&mut d, &fixture::stream_start(920, true));
    decode_ok(&mut d, &fixture::insert(Some(920), ORDERS, ROW));
    let inside = fixture::prepare_like(tag::STREAM_PREPARE, 0xa00, 0xa28, PG_TIME, 920, "big");
    assert_eq!(
        d.decode(&inside).unwrap_err(),
        DecodeError::StreamState {
            message: "stream prepare",
            stream_open: true
        }
    );
    decode_ok(&mut d, &fixture::stream_stop());
    assert_eq!(
        decode_ok(&mut d, &inside),
        LogicalMessage::StreamPrepare {
            flags: 0,
            prepare_lsn: Lsn(0xa00),
            end_lsn: Lsn(0xa28),
            prepare_time: UNIX_TIME,
            xid: 920,
            gid: "big".into(),
        }
    );
}

#[test]
fn two_phase_messages_do_not_exist_before_protocol_3() {
    for bytes in [
        fixture::begin_prepare(1, 2, 3, 4, "g"),
        fixture::prepare_like(tag::PREPARE, 1, 2, 3, 4, "g"),
        fixture::prepare_like(tag::COMMIT_PREPARED, 1, 2, 3, 4, "g"),
        fixture::rollback_prepared(1, 2, (3, 4), 5, "g"),
        fixture::prepare_like(tag::STREAM_PREPARE, 1, 2, 3, 4, "g"),
    ] {
        for proto in [1, 2] {
            let err = Decoder::new(proto).decode(&bytes).unwrap_err();
            assert!(
                matches!(
                    err,
                    DecodeError::NotInProtocol {
                        feature: "two-phase commit",
                        needs: 3,
                        ..
                    }
                ),
                "{err}"
            );
            let text = err.to_string();
            assert!(text.contains("proto_version 3"), "{text}");
            assert!(
                text.contains(&format!("'{}'", char::from(bytes[0]))),
                "{text}"
            );
        }
    }
}

#[test]
fn streaming_messages_do_not_exist_in_protocol_1() {
    for bytes in [
        fixture::stream_start(1, true),
        fixture::stream_stop(),
        fixture::stream_commit(1, 2, 3, 4),
        fixture::stream_abort(1, 1, None),
    ] {
        let err = Decoder::new(1).decode(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::NotInProtocol {
                    proto_version: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("proto_version 2"), "{err}");
    }
}

#[test]
fn decode_bytes_shares_the_frame_instead_of_copying() {
    let frame = Bytes::from(fixture::insert(None, ORDERS, ROW));
    let range = frame.as_ptr_range();
    let m = decoder(1)
        .decode_bytes(frame.clone())
        .expect("insert decodes");
    let LogicalMessage::Insert { new, .. } = m else {
        panic!("expected an insert");
    };
    assert_eq!(new, row_tuple());
    let TupleValue::Binary(value) = &new.0[2] else {
        panic!("expected a binary column");
    };
    assert!(range.contains(&value.as_ptr()), "the value was copied");
}
