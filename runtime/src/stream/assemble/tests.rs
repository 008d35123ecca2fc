use bytes::Bytes;

use std::time::{Duration, Instant};

use super::*;
use crate::stream::batch::{BatchLimits, Batcher};
use crate::stream::change::Message;
use crate::wire::pgoutput::{OldTuple, RelationColumn, ReplicaIdentity};

/// The pipeline reads a spilled transaction back in parts; these tests look at it whole.
trait Whole {
    fn whole(&mut self, message: LogicalMessage) -> Result<Option<Assembled>, AssembleError>;
}

impl Whole for Assembler {
    fn whole(&mut self, message: LogicalMessage) -> Result<Option<Assembled>, AssembleError> {
        self.push(message)?.map(Completed::into_whole).transpose()
    }
}

fn relation() -> Arc<Relation> {
    Arc::new(Relation {
        id: 16384,
        namespace: "public".into(),
        name: "orders".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![
            RelationColumn::new("id", 23, -1, true),
            RelationColumn::new("note", 25, -1, false),
        ],
    })
}

fn tuple(id: &str, note: Option<&str>) -> Tuple {
    Tuple(vec![
        TupleValue::Text(Bytes::copy_from_slice(id.as_bytes())),
        note.map_or(TupleValue::Null, |n| {
            TupleValue::Text(Bytes::copy_from_slice(n.as_bytes()))
        }),
    ])
}

fn begin(xid: u32, lsn: u64) -> LogicalMessage {
    LogicalMessage::Begin {
        final_lsn: Lsn(lsn),
        commit_time: 1_000,
        xid,
    }
}

fn commit(lsn: u64) -> LogicalMessage {
    LogicalMessage::Commit {
        flags: 0,
        commit_lsn: Lsn(lsn),
        end_lsn: Lsn(lsn + 8),
        commit_time: 1_000,
    }
}

fn insert(id: &str) -> LogicalMessage {
    LogicalMessage::Insert {
        xid: None,
        relation: relation(),
        new: tuple(id, Some("x")),
    }
}

#[test]
fn assembles_a_transaction_with_ordinals() {
    let mut a = Assembler::new();
    assert_eq!(a.whole(begin(7, 0x100)).unwrap(), None);
    a.whole(insert("1")).unwrap();
    a.whole(LogicalMessage::Update {
        xid: None,
        relation: relation(),
        old: Some(OldTuple::Key(tuple("1", None))),
        new: tuple("2", Some("y")),
    })
    .unwrap();
    a.whole(LogicalMessage::Delete {
        xid: None,
        relation: relation(),
        old: OldTuple::Key(tuple("2", None)),
    })
    .unwrap();
    a.whole(LogicalMessage::Truncate {
        xid: None,
        options: 0,
        relations: vec![relation()],
    })
    .unwrap();
    let done = a
        .whole(commit(0x100))
        .unwrap()
        .expect("commit completes the transaction");
    let t = done.transaction;
    assert_eq!(
        (t.xid, t.commit_lsn, t.end_lsn),
        (7, Lsn(0x100), Lsn(0x108))
    );
    let ops: Vec<_> = t.changes.iter().map(|c| (c.op, c.seq)).collect();
    assert_eq!(
        ops,
        [
            (Op::Insert, 0),
            (Op::Update, 1),
            (Op::Delete, 2),
            (Op::Truncate, 3)
        ]
    );
    assert_eq!(t.changes[1].old.as_ref().unwrap()[1], Value::Null);
    assert!(t.changes[2].new.is_none() && t.changes[2].old.is_some());
    assert!(t.changes[3].new.is_none() && t.changes[3].old.is_none());
    assert!(done.bytes > 0);
}

#[test]
fn refuses_rows_outside_a_transaction() {
    let mut a = Assembler::new();
    let err = a.whole(insert("1")).unwrap_err();
    assert!(matches!(
        err,
        AssembleError::OutsideTransaction {
            message: "insert",
            ..
        }
    ));
    assert!(matches!(
        a.whole(commit(1)).unwrap_err(),
        AssembleError::OutsideTransaction {
            message: "commit",
            ..
        }
    ));
}

#[test]
fn refuses_nested_begin_and_mismatched_commit() {
    let mut a = Assembler::new();
    a.whole(begin(1, 0x10)).unwrap();
    assert!(matches!(
        a.whole(begin(2, 0x20)).unwrap_err(),
        AssembleError::NestedBegin { .. }
    ));
    let err = a.whole(commit(0x30)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "commit at 0/30 does not match the open transaction xid 1 that announced commit 0/10"
    );
}

fn stream_start(xid: u32, first_segment: bool) -> LogicalMessage {
    LogicalMessage::StreamStart { xid, first_segment }
}

fn stream_commit(xid: u32, lsn: u64) -> LogicalMessage {
    LogicalMessage::StreamCommit {
        xid,
        flags: 0,
        commit_lsn: Lsn(lsn),
        end_lsn: Lsn(lsn + 8),
        commit_time: 2_000,
    }
}

fn stream_abort(xid: u32, subxid: u32) -> LogicalMessage {
    LogicalMessage::StreamAbort {
        xid,
        subxid,
        abort_lsn: None,
        abort_time: None,
    }
}

/// An insert inside a streamed chunk, made by (sub)transaction `xid`.
fn streamed_insert(xid: u32, id: &str) -> LogicalMessage {
    LogicalMessage::Insert {
        xid: Some(xid),
        relation: relation(),
        new: tuple(id, Some("x")),
    }
}

/// One chunk of streamed transaction `top`: `(own xid, id)` inserts.
fn chunk(a: &mut Assembler, top: u32, first: bool, rows: &[(u32, &str)]) {
    assert_eq!(a.whole(stream_start(top, first)).unwrap(), None);
    for (own, id) in rows {
        assert_eq!(a.whole(streamed_insert(*own, id)).unwrap(), None);
    }
    assert_eq!(a.whole(LogicalMessage::StreamStop).unwrap(), None);
}

/// The inserted ids and their ordinals.
fn ids(t: &Transaction) -> Vec<(i32, u32)> {
    t.changes
        .iter()
        .map(|c| match c.new.as_ref().map(|n| &n[0]) {
            Some(Value::Int4(id)) => (*id, c.seq),
            other => panic!("change {} has no integer id: {other:?}", c.seq),
        })
        .collect()
}

#[test]
fn interleaved_streams_and_a_whole_transaction_between_chunks() {
    let mut a = Assembler::new();
    chunk(&mut a, 100, true, &[(100, "1"), (100, "2")]);
    chunk(&mut a, 200, true, &[(200, "20")]);
    // A small transaction commits while both large ones are still in progress.
    a.whole(begin(300, 0x300)).unwrap();
    a.whole(insert("30")).unwrap();
    let whole = a.whole(commit(0x300)).unwrap().expect("whole transaction");
    assert_eq!(
        (whole.transaction.xid, ids(&whole.transaction)),
        (300, vec![(30, 0)])
    );
    chunk(&mut a, 100, false, &[(100, "3")]);
    chunk(&mut a, 200, false, &[(200, "21"), (200, "22")]);
    assert_eq!(a.streams_in_progress(), 2);

    let t2 = a
        .whole(stream_commit(200, 0x400))
        .unwrap()
        .expect("t2 commits");
    assert_eq!(
        (
            t2.transaction.xid,
            t2.transaction.commit_lsn,
            t2.transaction.end_lsn
        ),
        (200, Lsn(0x400), Lsn(0x408))
    );
    assert_eq!(t2.transaction.commit_time, 2_000);
    assert_eq!(ids(&t2.transaction), [(20, 0), (21, 1), (22, 2)]);
    assert!(t2.bytes > 0);

    let t1 = a
        .whole(stream_commit(100, 0x500))
        .unwrap()
        .expect("t1 commits");
    assert_eq!(t1.transaction.xid, 100);
    assert_eq!(ids(&t1.transaction), [(1, 0), (2, 1), (3, 2)]);
    assert_eq!((a.streams_in_progress(), a.held_bytes()), (0, 0));
}

#[test]
fn a_subtransaction_abort_drops_only_its_changes_and_renumbers() {
    let mut a = Assembler::new();
    chunk(&mut a, 100, true, &[(100, "1"), (101, "2"), (102, "3")]);
    chunk(&mut a, 100, false, &[(101, "4"), (100, "5")]);
    assert_eq!(
        a.held_bytes(),
        0,
        "streamed rows wait on disk, not in memory"
    );
    a.whole(stream_abort(100, 101)).unwrap();
    // A subtransaction whose changes were never streamed is aborted too: nothing to drop.
    a.whole(stream_abort(100, 999)).unwrap();
    chunk(&mut a, 100, false, &[(103, "6")]);
    let done = a.whole(stream_commit(100, 0x900)).unwrap().unwrap();
    assert_eq!(ids(&done.transaction), [(1, 0), (3, 1), (5, 2), (6, 3)]);
    // Each change, and its two values (an id of one digit, a note of one letter).
    assert_eq!(
        done.bytes,
        done.transaction.changes.len() * (CHANGE_BYTES + 2 * (VALUE_BYTES + 1))
    );
    assert_eq!(a.held_bytes(), 0);
}

#[test]
fn a_streamed_transaction_lands_as_it_would_have_whole() {
    // What a replay after a restart might deliver whole, without the rolled-back savepoint.
    let mut whole = Assembler::new();
    whole.whole(begin(100, 0x900)).unwrap();
    for id in ["1", "3"] {
        whole.whole(insert(id)).unwrap();
    }
    let whole = whole.whole(commit(0x900)).unwrap().unwrap();

    let mut streamed = Assembler::new();
    chunk(
        &mut streamed,
        100,
        true,
        &[(100, "1"), (101, "2"), (100, "3")],
    );
    streamed.whole(stream_abort(100, 101)).unwrap();
    let streamed = streamed
        .whole(LogicalMessage::StreamCommit {
            xid: 100,
            flags: 0,
            commit_lsn: Lsn(0x900),
            end_lsn: Lsn(0x908),
            commit_time: 1_000,
        })
        .unwrap()
        .unwrap();
    assert_eq!(streamed.transaction, whole.transaction);
}

#[test]
fn a_whole_abort_lands_nothing() {
    let mut a = Assembler::new();
    chunk(&mut a, 100, true, &[(100, "1"), (101, "2")]);
    chunk(&mut a, 200, true, &[(200, "20")]);
    a.whole(stream_abort(100, 100)).unwrap();
    assert_eq!(a.streams_in_progress(), 1);
    let err = a.whole(stream_commit(100, 0x500)).unwrap_err();
    assert!(matches!(
        err,
        AssembleError::UnknownStreamCommit { xid: 100, .. }
    ));
    let t2 = a.whole(stream_commit(200, 0x600)).unwrap().unwrap();
    assert_eq!(ids(&t2.transaction), [(20, 0)]);
    assert_eq!(a.held_bytes(), 0);
}

#[test]
fn refuses_a_stream_commit_of_an_unknown_xid() {
    let mut a = Assembler::new();
    a.whole(begin(1, 0x10)).unwrap();
    a.whole(commit(0x10)).unwrap().unwrap();
    let err = a.whole(stream_commit(42, 0x20)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "pgoutput sent stream commit at 0/20 for xid 42, which no stream started (after commit 0/10)"
    );
}

#[test]
fn refuses_stream_messages_out_of_place() {
    let mut a = Assembler::new();
    assert_eq!(
        a.whole(LogicalMessage::StreamStop).unwrap_err(),
        AssembleError::StopOutsideChunk
    );
    assert_eq!(
        a.whole(stream_start(7, false)).unwrap_err(),
        AssembleError::StreamNotStarted { xid: 7 }
    );

    chunk(&mut a, 7, true, &[(7, "1")]);
    // Between chunks nothing is open: a row there belongs to no transaction.
    assert!(matches!(
        a.whole(streamed_insert(7, "2")).unwrap_err(),
        AssembleError::OutsideTransaction {
            message: "insert",
            ..
        }
    ));
    assert_eq!(
        a.whole(stream_start(7, true)).unwrap_err(),
        AssembleError::StreamRestarted { xid: 7 }
    );

    a.whole(stream_start(7, false)).unwrap();
    for message in [
        begin(8, 0x80),
        commit(0x80),
        stream_commit(7, 0x90),
        stream_abort(7, 7),
    ] {
        assert!(matches!(
            a.whole(message).unwrap_err(),
            AssembleError::ChunkOpen { stream: 7, .. }
        ));
    }
    assert!(matches!(
        a.whole(stream_start(9, true)).unwrap_err(),
        AssembleError::ChunkOpen {
            message: "stream start",
            stream: 7
        }
    ));
    a.whole(LogicalMessage::StreamStop).unwrap();

    a.whole(begin(8, 0x80)).unwrap();
    let err = a.whole(stream_start(9, true)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "pgoutput sent stream start while xid 8 (commit 0/80) was open"
    );
    assert!(matches!(
        a.whole(stream_commit(7, 0x90)).unwrap_err(),
        AssembleError::TransactionOpen { open: 8, .. }
    ));
}

#[test]
fn a_bad_value_in_a_stream_names_the_transaction_at_its_commit() {
    let mut a = Assembler::new();
    a.whole(stream_start(7, true)).unwrap();
    // Spilled as sent: the value is read, and refused, when the committed transaction is.
    a.whole(streamed_insert(8, "not a number")).unwrap();
    a.whole(LogicalMessage::StreamStop).unwrap();
    let err = a.whole(stream_commit(7, 0x90)).unwrap_err();
    assert!(
        matches!(&err, AssembleError::Value { xid: 7, lsn: Lsn(0x90), column, .. } if column == "id"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("table public.orders column \"id\" in transaction 7 (commit 0/90): "),
        "{err}"
    );
}

#[test]
fn two_phase_messages_are_refused_with_the_way_out() {
    let gid = || "order-42".to_owned();
    let messages = [
        (
            "begin prepare",
            LogicalMessage::BeginPrepare {
                prepare_lsn: Lsn(0x100),
                end_lsn: Lsn(0x108),
                prepare_time: 1,
                xid: 7,
                gid: gid(),
            },
        ),
        (
            "prepare",
            LogicalMessage::Prepare {
                flags: 0,
                prepare_lsn: Lsn(0x100),
                end_lsn: Lsn(0x108),
                prepare_time: 1,
                xid: 7,
                gid: gid(),
            },
        ),
        (
            "stream prepare",
            LogicalMessage::StreamPrepare {
                flags: 0,
                prepare_lsn: Lsn(0x100),
                end_lsn: Lsn(0x108),
                prepare_time: 1,
                xid: 7,
                gid: gid(),
            },
        ),
        (
            "commit prepared",
            LogicalMessage::CommitPrepared {
                flags: 0,
                commit_lsn: Lsn(0x200),
                end_lsn: Lsn(0x208),
                commit_time: 2,
                xid: 7,
                gid: gid(),
            },
        ),
        (
            "rollback prepared",
            LogicalMessage::RollbackPrepared {
                flags: 0,
                prepare_end_lsn: Lsn(0x108),
                rollback_end_lsn: Lsn(0x208),
                prepare_time: 1,
                rollback_time: 2,
                xid: 7,
                gid: gid(),
            },
        ),
    ];
    for (message, m) in messages {
        let err = Assembler::new().whole(m).unwrap_err();
        assert_eq!(
            err,
            AssembleError::TwoPhase {
                message,
                xid: 7,
                gid: gid()
            }
        );
        let text = err.to_string();
        assert!(text.contains("\"order-42\""), "{text}");
        assert!(text.contains("without two_phase"), "{text}");
    }
}

fn message(xid: Option<u32>, transactional: bool, lsn: u64, content: &str) -> LogicalMessage {
    LogicalMessage::Message {
        xid,
        transactional,
        lsn: Lsn(lsn),
        prefix: "audit".into(),
        content: Bytes::copy_from_slice(content.as_bytes()),
    }
}

/// Content and position of each message.
fn placed(messages: &[Message]) -> Vec<(String, u32)> {
    messages
        .iter()
        .map(|m| {
            (
                String::from_utf8_lossy(&m.content).into_owned(),
                m.before_seq,
            )
        })
        .collect()
}

#[test]
fn a_transactional_message_is_placed_among_the_changes_without_taking_a_seq() {
    let mut a = Assembler::new();
    a.whole(begin(7, 0x100)).unwrap();
    a.whole(message(None, true, 0xf0, "first")).unwrap();
    a.whole(insert("1")).unwrap();
    a.whole(insert("2")).unwrap();
    a.whole(message(None, true, 0xf8, "between")).unwrap();
    a.whole(message(None, true, 0xf9, "again")).unwrap();
    a.whole(insert("3")).unwrap();
    a.whole(message(None, true, 0xfa, "last")).unwrap();
    let done = a.whole(commit(0x100)).unwrap().unwrap();
    let t = done.transaction;
    assert_eq!(ids(&t), [(1, 0), (2, 1), (3, 2)]);
    assert_eq!(
        placed(&t.messages),
        [
            ("first".into(), 0),
            ("between".into(), 2),
            ("again".into(), 2),
            ("last".into(), 3)
        ]
    );
    assert_eq!(t.messages[0].prefix, "audit");
    assert_eq!(t.messages[0].lsn, Lsn(0xf0));
    assert!(done.preceding.is_empty());
}

#[test]
fn a_transaction_of_messages_only_is_a_transaction() {
    let mut a = Assembler::new();
    a.whole(begin(7, 0x100)).unwrap();
    a.whole(message(None, true, 0xf0, "hello")).unwrap();
    let t = a.whole(commit(0x100)).unwrap().unwrap().transaction;
    assert!(t.changes.is_empty());
    assert_eq!(placed(&t.messages), [("hello".into(), 0)]);
}

#[test]
fn a_transactional_message_outside_a_transaction_is_refused() {
    let err = Assembler::new()
        .whole(message(None, true, 0xf0, "x"))
        .unwrap_err();
    assert!(matches!(
        err,
        AssembleError::OutsideTransaction {
            message: "logical decoding message",
            ..
        }
    ));
}

#[test]
fn non_transactional_messages_travel_with_the_next_commit() {
    let mut a = Assembler::new();
    let mut b = Batcher::new(BatchLimits {
        max_rows: 100,
        max_bytes: usize::MAX,
        max_delay: Duration::from_secs(1),
    });
    let now = Instant::now();
    assert_eq!(a.whole(message(None, false, 0x10, "a")).unwrap(), None);
    assert!(a.held_bytes() > 0, "held until a transaction completes");
    a.whole(begin(1, 0x100)).unwrap();
    a.whole(insert("1")).unwrap();
    let t1 = a.whole(commit(0x100)).unwrap().unwrap();
    assert_eq!(placed(&t1.preceding), [("a".into(), 0)]);
    assert!(t1.transaction.messages.is_empty());
    b.push(t1, now);
    // Between two chunks of a streamed transaction, then a whole one commits first.
    chunk(&mut a, 200, true, &[(200, "20")]);
    a.whole(message(None, false, 0x180, "b")).unwrap();
    a.whole(message(None, false, 0x181, "c")).unwrap();
    a.whole(begin(2, 0x200)).unwrap();
    a.whole(insert("2")).unwrap();
    b.push(a.whole(commit(0x200)).unwrap().unwrap(), now);
    a.whole(message(None, false, 0x280, "d")).unwrap();
    b.push(a.whole(stream_commit(200, 0x300)).unwrap().unwrap(), now);
    a.whole(message(None, false, 0x380, "after the last commit"))
        .unwrap();

    let batch = b.take().unwrap();
    assert_eq!(batch.transactions.len(), 3);
    // Placed by the number of the batch's transactions before each.
    assert_eq!(
        placed(&batch.messages),
        [
            ("a".into(), 0),
            ("b".into(), 1),
            ("c".into(), 1),
            ("d".into(), 2)
        ]
    );
    assert!(batch.transactions.iter().all(|t| t.messages.is_empty()));
    // The next batch counts from its own first transaction.
    a.whole(begin(4, 0x400)).unwrap();
    b.push(a.whole(commit(0x400)).unwrap().unwrap(), now);
    let next = b.take().unwrap();
    assert_eq!(
        placed(&next.messages),
        [("after the last commit".into(), 0)]
    );
    assert_eq!(a.held_bytes(), 0);
}

#[test]
fn a_streamed_message_belongs_to_its_stream_and_goes_with_its_subtransaction() {
    let mut a = Assembler::new();
    let streamed_message = |a: &mut Assembler, top: u32, own: u32, content: &str| {
        a.whole(stream_start(top, false)).unwrap();
        a.whole(message(Some(own), true, 0x10, content)).unwrap();
        a.whole(LogicalMessage::StreamStop).unwrap();
    };
    chunk(&mut a, 100, true, &[(100, "1"), (101, "2")]);
    streamed_message(&mut a, 100, 101, "in the savepoint");
    chunk(&mut a, 200, true, &[(200, "20")]);
    streamed_message(&mut a, 200, 200, "other stream");
    chunk(&mut a, 100, false, &[(101, "3"), (100, "4")]);
    streamed_message(&mut a, 100, 100, "kept");
    // A whole transaction between chunks does not take the streams' messages.
    a.whole(begin(300, 0x300)).unwrap();
    a.whole(insert("30")).unwrap();
    let whole = a.whole(commit(0x300)).unwrap().unwrap();
    assert!(whole.transaction.messages.is_empty());

    // The rolled-back savepoint takes its changes and its message; the later message moves up.
    a.whole(stream_abort(100, 101)).unwrap();
    let t1 = a.whole(stream_commit(100, 0x400)).unwrap().unwrap();
    assert_eq!(ids(&t1.transaction), [(1, 0), (4, 1)]);
    assert_eq!(placed(&t1.transaction.messages), [("kept".into(), 2)]);

    // An aborted stream takes its messages with it.
    a.whole(stream_abort(200, 200)).unwrap();
    assert_eq!((a.streams_in_progress(), a.held_bytes()), (0, 0));
}

/// Every part of a completed transaction, checking that only the final one says it is last.
fn parts(completed: Completed) -> Vec<Part> {
    let Completed::Spilled(mut spilled) = completed else {
        panic!("expected a spilled transaction")
    };
    let parts: Vec<Part> = std::iter::from_fn(|| spilled.next_part().unwrap()).collect();
    let lasts: Vec<bool> = parts.iter().map(|p| p.last).collect();
    assert_eq!(lasts.iter().filter(|l| **l).count(), 1, "{lasts:?}");
    assert_eq!(lasts.last(), Some(&true));
    parts
}

fn small_parts() -> Assembler {
    Assembler::with_spill(SpillSettings {
        part_bytes: 400,
        ..SpillSettings::default()
    })
}

#[test]
fn a_large_whole_transaction_spills_and_reads_back_in_parts_numbered_as_it_arrived() {
    let feed = |a: &mut Assembler| {
        a.push(begin(7, 0x700)).unwrap();
        for i in 0..30 {
            if i == 5 || i == 20 {
                a.push(message(None, true, 0x10 + i, &format!("before {i}")))
                    .unwrap();
            }
            a.push(insert(&i.to_string())).unwrap();
        }
        a.push(message(None, true, 0x90, "at the end")).unwrap();
        a.push(commit(0x700)).unwrap().unwrap()
    };
    let whole = match feed(&mut Assembler::new()) {
        Completed::Whole(whole) => whole,
        spilled => panic!("{spilled:?} fits in memory"),
    };
    let mut small = small_parts();
    let parts = parts(feed(&mut small));
    assert!(parts.len() >= 3, "{} parts", parts.len());
    let changes: Vec<Change> = parts
        .iter()
        .flat_map(|p| p.transaction.changes.clone())
        .collect();
    let messages: Vec<Message> = parts
        .iter()
        .flat_map(|p| p.transaction.messages.clone())
        .collect();
    assert_eq!(changes, whole.transaction.changes);
    assert_eq!(
        placed(&messages),
        [
            ("before 5".into(), 5),
            ("before 20".into(), 20),
            ("at the end".into(), 30)
        ]
    );
    assert_eq!(placed(&messages), placed(&whole.transaction.messages));
    assert!(parts.iter().all(|p| p.transaction.commit_lsn == Lsn(0x700)));
    assert_eq!(small.held_bytes(), 0);
}

#[test]
fn a_streamed_transaction_in_parts_skips_rolled_back_savepoints_and_places_messages() {
    let feed = |a: &mut Assembler| {
        let mut rows: Vec<(u32, String)> = Vec::new();
        for i in 0..40u32 {
            // Every third row is in savepoint 101, rolled back below.
            rows.push((if i % 3 == 0 { 101 } else { 100 }, i.to_string()));
        }
        let rows: Vec<(u32, &str)> = rows.iter().map(|(x, id)| (*x, id.as_str())).collect();
        chunk(a, 100, true, &rows[..20]);
        a.push(stream_start(100, false)).unwrap();
        a.push(message(Some(100), true, 0x50, "kept")).unwrap();
        a.push(message(Some(101), true, 0x51, "rolled back"))
            .unwrap();
        a.push(LogicalMessage::StreamStop).unwrap();
        chunk(a, 100, false, &rows[20..]);
        a.push(stream_abort(100, 101)).unwrap();
        a.push(stream_commit(100, 0x900)).unwrap().unwrap()
    };
    let whole = feed(&mut Assembler::new()).into_whole().unwrap();
    let parts = parts(feed(&mut small_parts()));
    assert!(parts.len() >= 2, "{} parts", parts.len());
    let ids_in_parts: Vec<(i32, u32)> = parts.iter().flat_map(|p| ids(&p.transaction)).collect();
    let expected: Vec<(i32, u32)> = (0..40)
        .filter(|i| i % 3 != 0)
        .enumerate()
        .map(|(seq, id)| (id, seq as u32))
        .collect();
    assert_eq!(ids_in_parts, expected);
    assert_eq!(ids(&whole.transaction), expected);
    // 20 rows came before the message; 7 of them were in the savepoint.
    let messages: Vec<Message> = parts
        .iter()
        .flat_map(|p| p.transaction.messages.clone())
        .collect();
    assert_eq!(placed(&messages), [("kept".into(), 13)]);
    assert_eq!(placed(&whole.transaction.messages), [("kept".into(), 13)]);
}

#[test]
fn spill_media_that_cannot_be_had_name_their_place_and_remedy() {
    let mut a = Assembler::with_spill(SpillSettings {
        media: SpillMedia::new("the attic", "clear the attic", || {
            Err(std::io::Error::other("no room"))
        }),
        part_bytes: 400,
    });
    let err = a.push(stream_start(5, true)).unwrap_err();
    assert!(
        matches!(err, AssembleError::Spill { xid: 5, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "spilling transaction 5 to the attic: no room; clear the attic"
    );
}
