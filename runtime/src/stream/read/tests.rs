//! The read machine driven by a simulated stream: pgoutput frames built byte by byte, catalog
//! answers and idle facts chosen by the test, a simulated clock; no server.

use std::time::{Duration, Instant};

use super::*;
use crate::stream::load::RESYNC_PREFIX;
use crate::wire::pgoutput::fixture::{self, Col, ColumnDef};

const ORDERS: u32 = 16384;
const TWO: &[ColumnDef<'static>] = &[("id", 23, -1, true), ("note", 25, -1, false)];
const THREE: &[ColumnDef<'static>] = &[
    ("id", 23, -1, true),
    ("note", 25, -1, false),
    ("mood", 90_001, -1, false),
];
const DELAY: Duration = Duration::from_secs(1);
const PG_TIME: i64 = 1_000;

fn limits(max_rows: usize, max_bytes: usize) -> BatchLimits {
    BatchLimits {
        max_rows,
        max_bytes,
        max_delay: DELAY,
    }
}

fn settings(limits: BatchLimits) -> ReadSettings {
    ReadSettings {
        proto_version: 1,
        limits,
        spill: SpillSettings::default(),
        tracked: vec!["public.orders".into(), "public.items".into()],
    }
}

/// The sink held nothing: the first flush is 1.
fn empty() -> Landed {
    Landed {
        next_sequence: 1,
        last_commit: Lsn::ZERO,
        confirmed: Lsn::ZERO,
        replays_through: None,
    }
}

/// The sink held flushes up to `sequence`, the last commit at `commit`.
fn holding(sequence: u64, commit: u64) -> Landed {
    Landed {
        next_sequence: sequence + 1,
        last_commit: Lsn(commit),
        confirmed: Lsn(commit + 8),
        replays_through: Some(Lsn(commit)),
    }
}

fn frame(lsn: u64, data: Vec<u8>) -> Frame {
    Frame {
        wal_start: Lsn(lsn),
        data: data.into(),
    }
}

fn relation(columns: &[ColumnDef<'_>]) -> Frame {
    frame(
        0,
        fixture::relation(None, ORDERS, "public", "orders", b'd', columns),
    )
}

fn row(id: &str) -> Frame {
    frame(
        0,
        fixture::insert(None, ORDERS, &[Col::Text(id), Col::Null]),
    )
}

fn begin(xid: u32, commit: u64) -> Frame {
    frame(commit - 0x10, fixture::begin(commit, PG_TIME, xid))
}

fn commit(commit: u64) -> Frame {
    frame(commit, fixture::commit(commit, commit + 8, PG_TIME))
}

/// A whole transaction committing at `at` that inserts `rows` rows.
fn tx(xid: u32, at: u64, rows: usize) -> Vec<Frame> {
    let mut frames = vec![begin(xid, at)];
    frames.extend((0..rows).map(|k| row(&k.to_string())));
    frames.push(commit(at));
    frames
}

/// Every action due at `now`, each relation answered with the types it was sent with.
fn drain(m: &mut ReadMachine, now: Instant) -> Vec<ReadAction> {
    let mut actions = Vec::new();
    while let Some(action) = m.poll_action(now).expect("the stream decodes") {
        if let ReadAction::Resolve(relation) = &action {
            m.handle_resolved(relation.id, None, None);
        }
        actions.push(action);
    }
    actions
}

/// An action as a line, with the values the tests look at.
fn show(action: &ReadAction) -> String {
    match action {
        ReadAction::Resolve(relation) => format!(
            "resolve {} ({} columns)",
            relation.qualified_name(),
            relation.columns.len()
        ),
        ReadAction::Resync {
            lsn,
            tables,
            unknown,
        } => format!("resync at {lsn}: {tables:?}, unknown {unknown:?}"),
        ReadAction::BadResync { lsn, .. } => format!("bad resync at {lsn}"),
        ReadAction::Cut {
            batch, sequence, ..
        } => {
            let commits: Vec<String> = batch
                .transactions
                .iter()
                .map(|t| t.commit_lsn.to_string())
                .collect();
            format!(
                "cut {sequence}: [{}], {} rows",
                commits.join(" "),
                batch.change_count()
            )
        }
        ReadAction::LandSpilled { spilled, sequence } => {
            format!("land spilled {sequence}: {}", spilled.commit_lsn)
        }
        ReadAction::Advance {
            sequence,
            last_commit,
            end,
        } => format!("advance {sequence}: last commit {last_commit}, end {end}"),
        ReadAction::Decoded { replays } => format!("decoded, {replays} replays"),
    }
}

fn shown(actions: &[ReadAction]) -> Vec<String> {
    actions.iter().map(show).collect()
}

#[test]
fn replays_at_or_below_the_checkpoint_are_dropped() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), holding(4, 0x200), t0);
    let mut frames = vec![relation(TWO)];
    for (xid, at) in [(1, 0x100), (2, 0x200), (3, 0x300)] {
        frames.extend(tx(xid, at, 2));
    }
    m.handle_frames(frames, t0);
    assert_eq!(
        shown(&drain(&mut m, t0)),
        ["resolve public.orders (2 columns)", "decoded, 2 replays"]
    );
    assert_eq!(m.poll_timeout(), Some(t0 + DELAY), "the batch waits");
    assert!(drain(&mut m, t0 + DELAY - Duration::from_millis(1)).is_empty());
    assert_eq!(
        shown(&drain(&mut m, t0 + DELAY)),
        ["cut 5: [0/300], 2 rows"]
    );
    assert_eq!(m.poll_timeout(), None);
    assert_eq!(m.next_sequence(), 6);
}

#[test]
fn a_batch_is_cut_by_rows_by_bytes_and_by_its_deadline() {
    let t0 = Instant::now();
    // Rows: four in two transactions reach three; the batch is cut once the frames are
    // decoded, whole transactions only.
    let mut m = ReadMachine::new(settings(limits(3, 1 << 30)), empty(), t0);
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x100, 2));
    frames.extend(tx(2, 0x200, 2));
    m.handle_frames(frames, t0);
    assert_eq!(
        shown(&drain(&mut m, t0)),
        [
            "resolve public.orders (2 columns)",
            "decoded, 0 replays",
            "cut 1: [0/100 0/200], 4 rows"
        ]
    );

    // Bytes: one row passes a limit of one byte; the cut says how large it is.
    let mut m = ReadMachine::new(settings(limits(100, 1)), empty(), t0);
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x100, 1));
    m.handle_frames(frames, t0);
    let actions = drain(&mut m, t0);
    assert_eq!(shown(&actions)[2..], ["cut 1: [0/100], 1 rows".to_owned()]);
    let ReadAction::Cut { bytes, .. } = &actions[2] else {
        unreachable!()
    };
    assert!(*bytes > 0, "the budget takes what the batch holds");

    // Deadline: the oldest transaction's arrival plus max_delay, however late the next.
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), empty(), t0);
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x100, 1));
    m.handle_frames(frames, t0);
    drain(&mut m, t0);
    let t1 = t0 + Duration::from_millis(600);
    m.handle_frames(tx(2, 0x200, 1), t1);
    assert_eq!(shown(&drain(&mut m, t1)), ["decoded, 0 replays"]);
    assert_eq!(m.poll_timeout(), Some(t0 + DELAY));
    assert_eq!(
        shown(&drain(&mut m, t0 + DELAY)),
        ["cut 1: [0/100 0/200], 2 rows"]
    );
}

#[test]
fn a_lost_connection_cuts_whole_transactions_and_drops_their_replay() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), holding(6, 0x80), t0);
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x100, 2));
    frames.extend(tx(2, 0x200, 1));
    // The third is under way when the connection goes.
    frames.extend([begin(3, 0x300), row("9")]);
    m.handle_frames(frames, t0);
    assert_eq!(
        shown(&drain(&mut m, t0)),
        ["resolve public.orders (2 columns)", "decoded, 0 replays"]
    );

    let t1 = t0 + Duration::from_millis(200);
    m.handle_lost(t1);
    assert_eq!(
        shown(&drain(&mut m, t1)),
        ["cut 7: [0/100 0/200], 3 rows"],
        "the whole transactions go on before the connection is opened again"
    );
    assert_eq!(m.poll_timeout(), None);

    // The new session sends everything not confirmed again, its relations first: what was
    // handed on is dropped, the one that was under way arrives whole.
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x100, 2));
    frames.extend(tx(2, 0x200, 1));
    frames.extend(tx(3, 0x300, 3));
    m.handle_frames(frames, t1);
    assert_eq!(
        shown(&drain(&mut m, t1)),
        ["resolve public.orders (2 columns)", "decoded, 2 replays"]
    );
    assert_eq!(
        shown(&drain(&mut m, t1 + DELAY)),
        ["cut 8: [0/300], 3 rows"]
    );

    // The relations of the lost session are forgotten: a row before its relation is refused.
    m.handle_lost(t1 + DELAY);
    m.handle_frames([begin(4, 0x400), frame(0x3f8, row("b").data.to_vec())], t1);
    match m.poll_action(t1) {
        Err(ReadError::Decode { lsn, .. }) => assert_eq!(lsn, Lsn(0x3f8)),
        other => panic!("a row of an unknown relation: {other:?}"),
    }
}

#[test]
fn an_idle_pipeline_advances_past_wal_others_wrote() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), holding(2, 0x500), t0);
    let confirmed = Lsn(0x508);
    let far = Lsn(confirmed.0 + ADVANCE_BYTES);
    let idle = |position: Lsn, reply_wanted: Lsn| IdleFacts {
        confirmed,
        idle_position: Some(position),
        reply_wanted,
    };

    // Not before ADVANCE_IDLE since the last hand-over, nor before the WAL moved a segment.
    m.handle_idle(
        idle(far, Lsn::ZERO),
        t0 + ADVANCE_IDLE - Duration::from_millis(1),
    );
    m.handle_idle(
        idle(Lsn(far.0 - 1), Lsn::ZERO),
        t0 + ADVANCE_IDLE + Duration::from_secs(1),
    );
    assert!(drain(&mut m, t0 + ADVANCE_IDLE).is_empty());
    // Not while the connection has frames the stage has not taken.
    m.handle_idle(
        IdleFacts {
            confirmed,
            idle_position: None,
            reply_wanted: Lsn::ZERO,
        },
        t0 + ADVANCE_IDLE,
    );
    assert!(drain(&mut m, t0 + ADVANCE_IDLE).is_empty());

    let t1 = t0 + ADVANCE_IDLE;
    m.handle_idle(idle(far, Lsn::ZERO), t1);
    assert_eq!(
        shown(&drain(&mut m, t1)),
        ["advance 3: last commit 0/500, end 0/1000508"]
    );

    // Not until that advance landed, and then at most every ADVANCE_EVERY.
    let farther = Lsn(far.0 + ADVANCE_BYTES);
    m.handle_idle(idle(farther, Lsn::ZERO), t1 + ADVANCE_EVERY);
    assert!(drain(&mut m, t1 + ADVANCE_EVERY).is_empty(), "not landed");
    let landed = |position: Lsn| IdleFacts {
        confirmed: far,
        idle_position: Some(position),
        reply_wanted: Lsn::ZERO,
    };
    m.handle_idle(
        landed(farther),
        t1 + ADVANCE_EVERY - Duration::from_millis(1),
    );
    assert!(drain(&mut m, t1 + ADVANCE_EVERY).is_empty(), "too soon");
    m.handle_idle(landed(farther), t1 + ADVANCE_EVERY);
    assert_eq!(
        shown(&drain(&mut m, t1 + ADVANCE_EVERY)),
        ["advance 4: last commit 0/500, end 0/2000508"]
    );

    // A transaction hands on; the next advance keeps its commit as the last one.
    let t2 = t1 + ADVANCE_EVERY + Duration::from_secs(1);
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x2000600, 1));
    m.handle_frames(frames, t2);
    drain(&mut m, t2);
    // Nothing is due while a batch is pending or a transaction is open, even when asked.
    let asked = IdleFacts {
        confirmed: farther,
        idle_position: Some(Lsn(0x2000700)),
        reply_wanted: Lsn(0x2000700),
    };
    m.handle_idle(asked, t2);
    assert!(drain(&mut m, t2).is_empty());
    assert_eq!(
        shown(&drain(&mut m, t2 + DELAY)),
        ["cut 5: [0/2000600], 1 rows"]
    );
    let t3 = t2 + DELAY;
    m.handle_frames([begin(2, 0x2000680)], t3);
    drain(&mut m, t3);
    let confirmed = Lsn(0x2000608);
    let asked = IdleFacts {
        confirmed,
        idle_position: Some(Lsn(0x2000700)),
        reply_wanted: Lsn(0x2000700),
    };
    m.handle_idle(asked, t3);
    assert!(drain(&mut m, t3).is_empty(), "a transaction is open");

    // A server shutting down asks for a reply past the confirmed position: the advance is due
    // at once, a few bytes on and just after a hand-over.
    m.handle_lost(t3);
    drain(&mut m, t3);
    m.handle_idle(asked, t3);
    assert_eq!(
        shown(&drain(&mut m, t3)),
        ["advance 6: last commit 0/2000600, end 0/2000700"]
    );
    // Asked again at the same place, with nothing new: nothing.
    m.handle_idle(
        IdleFacts {
            confirmed: Lsn(0x2000700),
            ..asked
        },
        t3 + ADVANCE_EVERY,
    );
    assert!(drain(&mut m, t3 + ADVANCE_EVERY).is_empty());
}

#[test]
fn a_position_to_confirm_past_is_advanced_to_at_once_when_idle_past_it() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), holding(2, 0x500), t0);
    let confirmed = Lsn(0x508);
    // The running-xacts record a start asked the primary for ends a few bytes on.
    let record_end = Lsn(0x560);
    m.advance_past(record_end);
    let idle = |confirmed: Lsn, position: Lsn| IdleFacts {
        confirmed,
        idle_position: Some(position),
        reply_wanted: Lsn::ZERO,
    };
    // Not while the stream is idle short of it (the server has not decoded it yet).
    m.handle_idle(idle(confirmed, Lsn(0x540)), t0);
    assert!(drain(&mut m, t0).is_empty());
    // Once it is idle past it: at once, long before ADVANCE_IDLE and a segment of WAL.
    m.handle_idle(idle(confirmed, Lsn(0x598)), t0);
    assert_eq!(
        shown(&drain(&mut m, t0)),
        ["advance 3: last commit 0/500, end 0/598"]
    );
    // Once: when that has landed, the idle advance's thresholds apply again.
    let t1 = t0 + Duration::from_secs(1);
    m.handle_idle(idle(Lsn(0x598), Lsn(0x5f0)), t1);
    assert!(drain(&mut m, t1).is_empty());

    // A transaction that lands past the position confirms it: no advance is due for it.
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), holding(2, 0x500), t0);
    m.advance_past(record_end);
    m.handle_idle(idle(Lsn(0x600), Lsn(0x600)), t0);
    m.handle_idle(idle(Lsn(0x600), Lsn(0x680)), t0);
    assert!(drain(&mut m, t0).is_empty());
}

#[test]
fn a_resync_message_comes_before_the_cut_of_its_batch() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), empty(), t0);
    let request = br#"{"tables": ["public.items", "public.gone"]}"#;
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x100, 1));
    frames.extend([
        begin(2, 0x200),
        frame(
            0x1f0,
            fixture::message(None, true, 0x1f0, RESYNC_PREFIX, request),
        ),
        row("1"),
        frame(
            0x1f8,
            fixture::message(None, true, 0x1f8, RESYNC_PREFIX, b"nope"),
        ),
        frame(0x1fa, fixture::message(None, true, 0x1fa, "audit", b"{}")),
        commit(0x200),
    ]);
    frames.extend([
        begin(3, 0x300),
        frame(
            0x2f0,
            fixture::message(None, true, 0x2f0, RESYNC_PREFIX, br#"{"tables": []}"#),
        ),
        commit(0x300),
    ]);
    m.handle_frames(frames, t0);
    drain(&mut m, t0);
    assert_eq!(
        shown(&drain(&mut m, t0 + DELAY)),
        [
            r#"resync at 0/1F0: ["public.items"], unknown ["public.gone"]"#,
            "bad resync at 0/1F8",
            r#"resync at 0/2F0: ["public.orders", "public.items"], unknown []"#,
            "cut 1: [0/100 0/200 0/300], 2 rows",
        ]
    );

    // A load chunk handed on between batches takes the next number and keeps the positions
    // of the last flush.
    let ticket = m.load_chunk(t0 + DELAY);
    assert_eq!(
        ticket,
        ChunkTicket {
            sequence: 2,
            positions: (Lsn(0x300), Lsn(0x308)),
        }
    );
    m.handle_frames(tx(4, 0x400, 1), t0 + DELAY);
    drain(&mut m, t0 + DELAY);
    m.finish(t0 + DELAY);
    assert_eq!(
        shown(&drain(&mut m, t0 + DELAY)),
        ["cut 3: [0/400], 1 rows"],
        "a stop cuts what is pending"
    );
}

#[test]
fn a_load_chunk_keeps_the_positions_the_sink_held() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), holding(9, 0x700), t0);
    assert_eq!(
        m.load_chunk(t0),
        ChunkTicket {
            sequence: 10,
            positions: (Lsn(0x700), Lsn(0x708)),
        }
    );
    // A first load of every table at snapshot 0/900: what committed before it is in the lake.
    m.loaded(20, Some(Lsn(0x900)));
    let mut frames = vec![relation(TWO)];
    frames.extend(tx(1, 0x800, 1));
    frames.extend(tx(2, 0x900, 1));
    frames.extend(tx(3, 0xa00, 1));
    m.handle_frames(frames, t0);
    assert_eq!(shown(&drain(&mut m, t0))[1], "decoded, 2 replays");
    m.finish(t0);
    assert_eq!(shown(&drain(&mut m, t0)), ["cut 20: [0/A00], 1 rows"]);
}

#[test]
fn a_relation_that_changes_mid_transaction_decodes_later_rows_in_its_new_shape() {
    let t0 = Instant::now();
    let mut m = ReadMachine::new(settings(limits(100, 1 << 30)), empty(), t0);
    m.handle_frames(
        [
            relation(TWO),
            begin(1, 0x100),
            row("1"),
            relation(THREE),
            frame(
                0,
                fixture::insert(
                    None,
                    ORDERS,
                    &[Col::Text("2"), Col::Text("b"), Col::Text("happy")],
                ),
            ),
            commit(0x100),
        ],
        t0,
    );
    let Some(ReadAction::Resolve(first)) = m.poll_action(t0).unwrap() else {
        panic!("the first relation is resolved first")
    };
    assert_eq!(first.columns.len(), 2);
    assert!(
        m.poll_action(t0).unwrap().is_none(),
        "nothing until answered"
    );
    m.handle_resolved(ORDERS, None, None);
    let Some(ReadAction::Resolve(second)) = m.poll_action(t0).unwrap() else {
        panic!("the new shape is resolved before the rows after it")
    };
    assert_eq!(second.columns.len(), 3);
    assert!(
        m.poll_action(t0).unwrap().is_none(),
        "nothing until answered"
    );
    let mood = ColumnType {
        scalar: 25,
        modifier: -1,
        dims: 0,
        name: "public.mood".into(),
    };
    let types = vec![
        ColumnType::builtin(23, -1),
        ColumnType::builtin(25, -1),
        mood.clone(),
    ];
    m.handle_resolved(ORDERS, Some(types), None);
    assert_eq!(shown(&drain(&mut m, t0)), ["decoded, 0 replays"]);
    let Some(ReadAction::Cut { batch, .. }) = m.poll_action(t0 + DELAY).unwrap() else {
        panic!("the transaction is cut at its deadline")
    };
    let changes = &batch.transactions[0].changes;
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[0].relation.columns.len(), 2);
    assert_eq!(changes[0].new.as_ref().map(Vec::len), Some(2));
    assert_eq!(changes[1].relation.columns.len(), 3);
    assert_eq!(changes[1].new.as_ref().map(Vec::len), Some(3));
    assert_eq!(changes[1].relation.columns[2].ty, mood);
    assert_eq!(changes[1].relation.columns[2].type_oid, 90_001);
}
