//! The flush machine driven by hand: a simulated clock, results chosen by the test.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::lake::commit::{CommitError, FileEntry, Writer};
use crate::lake::sink::SinkError;

fn flush(sequence: u64, files: usize) -> EncodedFlush {
    let lsn = Lsn(sequence * 0x100);
    EncodedFlush {
        sequence,
        part: 0,
        last: true,
        advance: false,
        first_commit_lsn: lsn,
        last_commit_lsn: lsn,
        last_end_lsn: Lsn(lsn.0 + 0x10),
        transactions: 1,
        changes: files as u64,
        files: (0..files)
            .map(|k| {
                let file = FileEntry {
                    path: format!("public.t{k}/part-{sequence}"),
                    output: format!("public.t{k}"),
                    rows: 1,
                    bytes: 3,
                    schema: "s".into(),
                };
                (file, Bytes::from_static(b"abc"))
            })
            .collect(),
        dead_letters: 0,
        plugins: None,
        chunk: false,
        load: None,
        tables: Vec::new(),
    }
}

fn machine() -> FlushMachine {
    // The log holds an open entry 1 at 0/0.
    FlushMachine::new(Checkpoint::default(), Writer::named("w"), "slot", vec![])
}

fn outage() -> CommitError {
    CommitError::Sink(SinkError::Store {
        url: "s3://lake".into(),
        source: object_store::Error::Generic {
            store: "S3",
            source: "connection refused".into(),
        },
    })
}

/// Every action due now.
fn drain(m: &mut FlushMachine, now: Instant) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action(now, 42)).collect()
}

fn ids(actions: &[Action]) -> Vec<(u64, Step)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::WriteIntent { id, .. }
            | Action::Upload { id, .. }
            | Action::Commit { id, .. }
            | Action::Publish { id, .. }
            | Action::ClearIntent { id, .. }
            | Action::Abandon { id, .. } => Some((id.sequence, id.step)),
            _ => None,
        })
        .collect()
}

fn ok(m: &mut FlushMachine, sequence: u64, step: Step, now: Instant) {
    m.handle(ActionId { sequence, step }, Ok(()), now);
}

#[test]
fn later_flushes_upload_while_commits_stay_in_order() {
    let now = Instant::now();
    let mut m = machine();
    assert_eq!(m.next_sequence(), 1);
    m.push(flush(1, 2));
    m.push(flush(2, 1));
    assert_eq!(
        ids(&drain(&mut m, now)),
        [(1, Step::Intent(0)), (2, Step::Intent(0))],
        "both intents go out at once"
    );
    ok(&mut m, 2, Step::Intent(0), now);
    ok(&mut m, 1, Step::Intent(0), now);
    assert_eq!(
        ids(&drain(&mut m, now)),
        [
            (1, Step::Upload(0)),
            (1, Step::Upload(1)),
            (2, Step::Upload(0))
        ]
    );
    // Flush 2 finishes first, but it may not commit before flush 1.
    ok(&mut m, 2, Step::Upload(0), now);
    assert!(ids(&drain(&mut m, now)).is_empty());
    ok(&mut m, 1, Step::Upload(0), now);
    ok(&mut m, 1, Step::Upload(1), now);
    let actions = drain(&mut m, now);
    assert_eq!(ids(&actions), [(1, Step::Commit)]);
    assert!(
        matches!(
            actions[0],
            Action::PartUploaded {
                sequence: 1,
                part: 0,
                last: true
            }
        ),
        "its memory goes once its files are up"
    );
    let Action::Commit { entry, .. } = &actions[1] else {
        unreachable!()
    };
    assert_eq!((entry.files.len(), entry.committed_at), (2, 42));
    ok(&mut m, 1, Step::Commit, now);

    let actions = drain(&mut m, now);
    assert!(
        matches!(actions[0], Action::Confirm { lsn } if lsn == Lsn(0x110)),
        "{actions:?}"
    );
    assert!(matches!(&actions[1], Action::Landed { entry } if entry.sequence == 1));
    assert_eq!(ids(&actions), [(1, Step::ClearIntent), (2, Step::Commit)]);
    ok(&mut m, 2, Step::Commit, now);
    ok(&mut m, 1, Step::ClearIntent, now);
    let actions = drain(&mut m, now);
    assert!(matches!(actions[0], Action::Confirm { lsn } if lsn == Lsn(0x210)));
    ok(&mut m, 2, Step::ClearIntent, now);
    assert!(drain(&mut m, now).is_empty());
    assert!(m.is_idle());
    assert_eq!((m.confirmed(), m.next_sequence()), (Lsn(0x210), 3));
}

#[test]
fn sink_failures_back_off_and_recover() {
    let start = Instant::now();
    let mut m = machine();
    m.push(flush(1, 1));
    drain(&mut m, start);
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::Intent(0),
        },
        Err(outage()),
        start,
    );
    let actions = drain(&mut m, start);
    assert!(
        matches!(&actions[..], [Action::Retrying { what: "writing the intent", attempts: 1, retry_in, .. }] if *retry_in == Duration::from_millis(500)),
        "{actions:?}"
    );
    assert_eq!(m.poll_timeout(), Some(start + Duration::from_millis(500)));
    assert!(drain(&mut m, start + Duration::from_millis(499)).is_empty());
    let later = start + Duration::from_millis(500);
    assert_eq!(ids(&drain(&mut m, later)), [(1, Step::Intent(0))]);
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::Intent(0),
        },
        Err(outage()),
        later,
    );
    let actions = drain(&mut m, later);
    assert!(
        matches!(&actions[..], [Action::Retrying { attempts: 2, retry_in, .. }] if *retry_in == Duration::from_secs(1)),
        "the delay doubles: {actions:?}"
    );
    let later = later + Duration::from_secs(1);
    drain(&mut m, later);
    ok(&mut m, 1, Step::Intent(0), later);
    let actions = drain(&mut m, later);
    assert!(
        matches!(
            &actions[0],
            Action::Recovered {
                what: "writing the intent",
                attempts: 2
            }
        ),
        "{actions:?}"
    );
    assert_eq!(ids(&actions), [(1, Step::Upload(0))]);
}

#[test]
fn a_stop_during_a_retry_ends_it_and_confirms_nothing_more() {
    let now = Instant::now();
    let mut m = machine();
    m.push(flush(1, 1));
    drain(&mut m, now);
    ok(&mut m, 1, Step::Intent(0), now);
    drain(&mut m, now);
    // A stop while a step runs lets it finish; its failure then ends landing.
    m.stop();
    assert!(!m.is_stopped());
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::Upload(0),
        },
        Err(outage()),
        now,
    );
    assert!(m.is_stopped());
    match m.take_stopped() {
        Some(Stopped::Interrupted { what, confirmed }) => {
            assert_eq!((what, confirmed), ("uploading data files", Lsn::ZERO))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_step_failing_past_the_retry_limit_stops_landing_and_a_success_resets_the_clock() {
    let t0 = Instant::now();
    let mut m = machine().with_retry_limit(Some(Duration::from_secs(60)));
    m.push(flush(1, 1));
    drain(&mut m, t0);
    ok(&mut m, 1, Step::Intent(0), t0);
    drain(&mut m, t0);
    let upload = ActionId {
        sequence: 1,
        step: Step::Upload(0),
    };
    // Failing for 59 s is retried: the upload is due again after each backoff.
    let mut at = t0;
    m.handle(upload, Err(outage()), at);
    while at < t0 + Duration::from_secs(59) {
        at = m.poll_timeout().expect("a retry is due");
        drain(&mut m, at);
        assert!(!m.is_stopped());
        m.handle(upload, Err(outage()), at.min(t0 + Duration::from_secs(59)));
    }
    assert!(!m.is_stopped(), "59 s of failure is within the limit");
    // The failure at 61 s is past it: landing stops, nothing is confirmed.
    at = m
        .poll_timeout()
        .expect("a retry is due")
        .max(t0 + Duration::from_secs(61));
    drain(&mut m, at);
    m.handle(upload, Err(outage()), at);
    assert!(m.is_stopped());
    match m.take_stopped() {
        Some(Stopped::GaveUp {
            what,
            failing_for,
            attempts,
            confirmed,
            ..
        }) => {
            assert_eq!((what, confirmed), ("uploading data files", Lsn::ZERO));
            assert!(failing_for >= Duration::from_secs(60), "{failing_for:?}");
            assert!(attempts > 2, "{attempts}");
        }
        other => panic!("{other:?}"),
    }

    // A step that recovers starts its clock again at its next failure; so does the next step.
    let mut m = machine().with_retry_limit(Some(Duration::from_secs(60)));
    m.push(flush(1, 1));
    drain(&mut m, t0);
    ok(&mut m, 1, Step::Intent(0), t0);
    drain(&mut m, t0);
    m.handle(upload, Err(outage()), t0);
    let retry = m.poll_timeout().unwrap();
    drain(&mut m, retry);
    ok(&mut m, 1, Step::Upload(0), retry);
    drain(&mut m, retry);
    let commit = ActionId {
        sequence: 1,
        step: Step::Commit,
    };
    m.handle(commit, Err(outage()), t0 + Duration::from_secs(100));
    assert!(!m.is_stopped(), "the commit began failing just now");
}

#[test]
fn losing_a_commit_to_another_writer_abandons_every_uncommitted_flush() {
    let now = Instant::now();
    let mut m = machine();
    m.push(flush(1, 1));
    m.push(flush(2, 1));
    m.push(flush(3, 1));
    drain(&mut m, now);
    for n in [1, 2] {
        ok(&mut m, n, Step::Intent(0), now);
    }
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(0), now);
    let actions = drain(&mut m, now);
    assert_eq!(ids(&actions), [(1, Step::Commit)]);
    let conflict = CommitError::Conflict {
        sequence: 1,
        holder: Box::new(Writer::named("other")),
        ours: Box::new(Writer::named("w")),
    };
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::Commit,
        },
        Err(conflict),
        now,
    );
    assert!(m.is_stopped());
    // Flush 3's intent is still out: its result may come, but nothing more starts.
    let actions = drain(&mut m, now);
    assert_eq!(
        ids(&actions),
        [(1, Step::Abandon), (2, Step::Abandon), (3, Step::Abandon)]
    );
    assert!(!m.is_idle());
    for n in [1, 2, 3] {
        ok(&mut m, n, Step::Abandon, now);
    }
    assert!(m.is_idle());
    assert!(matches!(
        m.take_stopped(),
        Some(Stopped::Failed(CommitError::Conflict { .. }))
    ));
}

#[test]
fn a_removed_intent_that_fails_only_warns() {
    let now = Instant::now();
    let mut m = machine();
    m.push(flush(1, 1));
    drain(&mut m, now);
    ok(&mut m, 1, Step::Intent(0), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(0), now);
    assert_eq!(ids(&drain(&mut m, now)), [(1, Step::Commit)]);
    ok(&mut m, 1, Step::Commit, now);
    drain(&mut m, now);
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::ClearIntent,
        },
        Err(outage()),
        now,
    );
    let actions = drain(&mut m, now);
    assert!(
        matches!(&actions[..], [Action::Warning { message }] if message.contains("flush 1")),
        "{actions:?}"
    );
    assert!(m.is_idle() && !m.is_stopped());
}

/// Part `part` of flush `sequence`, with `files` files numbered on from `first`.
fn part(sequence: u64, part: u32, last: bool, first: usize, files: usize) -> EncodedFlush {
    let mut f = flush(sequence, files);
    for (k, (file, _)) in f.files.iter_mut().enumerate() {
        file.path = format!("public.t/part-{sequence}-{}", first + k);
    }
    f.part = part;
    f.last = last;
    f.transactions = u64::from(last);
    f
}

#[test]
fn a_flush_in_parts_commits_once_after_its_last_part_and_frees_each_part_when_uploaded() {
    let now = Instant::now();
    let mut m = machine();
    m.push(part(1, 0, false, 0, 2));
    assert_eq!(ids(&drain(&mut m, now)), [(1, Step::Intent(0))]);
    ok(&mut m, 1, Step::Intent(0), now);
    assert_eq!(
        ids(&drain(&mut m, now)),
        [(1, Step::Upload(0)), (1, Step::Upload(1))]
    );
    ok(&mut m, 1, Step::Upload(0), now);
    assert!(drain(&mut m, now).is_empty(), "half a part is not freed");
    ok(&mut m, 1, Step::Upload(1), now);
    let actions = drain(&mut m, now);
    assert!(
        matches!(
            actions.as_slice(),
            [Action::PartUploaded {
                sequence: 1,
                part: 0,
                last: false
            }]
        ),
        "{actions:?}: no commit before the last part"
    );
    assert!(m.accepts());

    m.push(part(1, 1, true, 2, 1));
    let actions = drain(&mut m, now);
    match actions.as_slice() {
        [Action::WriteIntent { id, files }] => {
            assert_eq!(id.step, Step::Intent(1));
            assert_eq!(
                files,
                &["public.t/part-1-2".to_owned()],
                "only its own files"
            );
        }
        other => panic!("{other:?}"),
    }
    ok(&mut m, 1, Step::Intent(1), now);
    assert_eq!(ids(&drain(&mut m, now)), [(1, Step::Upload(2))]);
    ok(&mut m, 1, Step::Upload(2), now);
    let actions = drain(&mut m, now);
    assert!(matches!(
        actions[0],
        Action::PartUploaded {
            part: 1,
            last: true,
            ..
        }
    ));
    match &actions[1] {
        Action::Commit { entry, .. } => {
            let paths: Vec<&str> = entry.files.iter().map(|f| f.path.as_str()).collect();
            assert_eq!(
                paths,
                [
                    "public.t/part-1-0",
                    "public.t/part-1-1",
                    "public.t/part-1-2"
                ]
            );
            assert_eq!((entry.transactions, entry.changes), (1, 3));
        }
        other => panic!("{other:?}"),
    }
    ok(&mut m, 1, Step::Commit, now);
    let actions = drain(&mut m, now);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ClearIntent { parts: 2, .. })),
        "{actions:?}"
    );
}

#[test]
fn a_lost_flush_in_parts_is_abandoned_with_every_part() {
    let now = Instant::now();
    let mut m = machine();
    m.push(part(1, 0, false, 0, 1));
    drain(&mut m, now);
    ok(&mut m, 1, Step::Intent(0), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(0), now);
    m.push(part(1, 1, true, 1, 1));
    drain(&mut m, now);
    ok(&mut m, 1, Step::Intent(1), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(1), now);
    drain(&mut m, now);
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::Commit,
        },
        Err(CommitError::Conflict {
            sequence: 1,
            holder: Box::new(Writer::named("other")),
            ours: Box::new(Writer::named("w")),
        }),
        now,
    );
    match drain(&mut m, now).as_slice() {
        [Action::Abandon { files, parts, .. }] => {
            assert_eq!(files.len(), 2);
            assert_eq!(*parts, 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn new_flushes_wait_while_many_are_in_flight() {
    let now = Instant::now();
    let mut m = machine();
    for n in 1..=MAX_FLIGHTS as u64 {
        assert!(m.accepts());
        m.push(flush(n, 1));
    }
    assert!(!m.accepts(), "uploads do not run further ahead of commits");
    drain(&mut m, now);
    ok(&mut m, 1, Step::Intent(0), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(0), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Commit, now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::ClearIntent, now);
    drain(&mut m, now);
    assert!(m.accepts(), "the oldest landed");
}

#[test]
fn an_advance_commits_an_entry_without_files_and_confirms_its_end() {
    let now = Instant::now();
    let mut m = machine();
    let mut advance = flush(1, 0);
    advance.advance = true;
    advance.transactions = 0;
    advance.last_commit_lsn = Lsn::ZERO;
    advance.first_commit_lsn = Lsn::ZERO;
    advance.last_end_lsn = Lsn(0x5000);
    m.push(advance);
    let actions = drain(&mut m, now);
    match actions.as_slice() {
        [
            Action::PartUploaded {
                sequence: 1,
                part: 0,
                last: true,
            },
            Action::Commit { entry, .. },
        ] => {
            assert_eq!(entry.kind, EntryKind::Advance);
            assert!(entry.files.is_empty());
            assert_eq!(entry.last_end_lsn, Lsn(0x5000));
        }
        other => panic!("no intent, no upload: its memory goes, then the entry: {other:?}"),
    }
    ok(&mut m, 1, Step::Commit, now);
    let actions = drain(&mut m, now);
    assert!(matches!(actions[0], Action::Confirm { lsn } if lsn == Lsn(0x5000)));
    assert!(
        actions
            .iter()
            .all(|a| !matches!(a, Action::ClearIntent { .. })),
        "{actions:?}"
    );
    assert!(m.is_idle());
}

#[test]
fn a_part_without_files_frees_its_memory_at_once_and_writes_no_intent() {
    let now = Instant::now();
    let mut m = machine();
    m.push(part(1, 0, false, 0, 1));
    m.push(part(1, 1, false, 1, 0));
    let actions = drain(&mut m, now);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::PartUploaded { part: 1, .. })),
        "{actions:?}"
    );
    assert_eq!(
        ids(&actions),
        [(1, Step::Intent(0))],
        "no intent for part 1"
    );
    ok(&mut m, 1, Step::Intent(0), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(0), now);
    m.push(part(1, 2, true, 1, 1));
    drain(&mut m, now);
    ok(&mut m, 1, Step::Intent(2), now);
    drain(&mut m, now);
    ok(&mut m, 1, Step::Upload(1), now);
    match drain(&mut m, now).as_slice() {
        [
            Action::PartUploaded {
                part: 2,
                last: true,
                ..
            },
            Action::Commit { entry, .. },
        ] => {
            assert_eq!(entry.files.len(), 2)
        }
        other => panic!("{other:?}"),
    }
}

/// A flush of `files` files with what each brings to its Delta table.
fn table_flush(sequence: u64, files: usize) -> EncodedFlush {
    let mut f = flush(sequence, files);
    let schema = std::sync::Arc::new(arrow_schema::Schema::empty());
    f.tables = f
        .files
        .iter()
        .map(|(file, _)| TableFile {
            output: file.output.clone(),
            path: file.path.clone(),
            size: file.bytes,
            rows: file.rows,
            schema: schema.clone(),
            partition: None,
            footer: None,
        })
        .collect();
    f
}

/// Upload everything of `sequences` (intents and files), in order.
fn upload_all(m: &mut FlushMachine, now: Instant) {
    loop {
        let actions = drain(m, now);
        let steps: Vec<(u64, Step)> = ids(&actions)
            .into_iter()
            .filter(|(_, s)| matches!(s, Step::Intent(_) | Step::Upload(_)))
            .collect();
        if steps.is_empty() {
            return;
        }
        for (sequence, step) in steps {
            ok(m, sequence, step, now);
        }
    }
}

#[test]
fn with_delta_tables_a_flush_is_confirmed_only_after_its_tables_and_tables_go_in_order() {
    let now = Instant::now();
    let mut m = machine().with_tables(0);
    m.push(table_flush(1, 2));
    m.push(table_flush(2, 1));
    m.push(flush(3, 0));
    upload_all(&mut m, now);
    // Flush 1's entry is written (the uploads' last round issued it).
    ok(&mut m, 1, Step::Commit, now);
    let actions = drain(&mut m, now);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Confirm { .. })),
        "nothing is confirmed before the tables have the flush: {actions:?}"
    );
    assert_eq!(ids(&actions), [(1, Step::Publish), (2, Step::Commit)]);
    let Action::Publish { files, .. } = &actions[0] else {
        unreachable!()
    };
    assert_eq!(files.len(), 2);
    let Action::Commit { entry, .. } = &actions[1] else {
        unreachable!()
    };
    assert_eq!(
        entry.tables_through,
        Some(0),
        "flush 1 is not in its tables yet"
    );
    ok(&mut m, 2, Step::Commit, now);
    assert_eq!(
        ids(&drain(&mut m, now)),
        [(3, Step::Commit)],
        "flush 2 waits for flush 1's tables"
    );
    // Flush 1's tables fail for a while: flush 2's wait on them.
    m.handle(
        ActionId {
            sequence: 1,
            step: Step::Publish,
        },
        Err(outage()),
        now,
    );
    let actions = drain(&mut m, now);
    assert!(
        matches!(&actions[0], Action::Retrying { what, .. } if *what == PUBLISHING),
        "{actions:?}"
    );
    ok(&mut m, 3, Step::Commit, now);
    let later = now + RETRY_MIN;
    assert_eq!(ids(&drain(&mut m, later)), [(1, Step::Publish)]);
    ok(&mut m, 1, Step::Publish, later);
    let actions = drain(&mut m, later);
    let confirm = actions.iter().find(|a| matches!(a, Action::Confirm { .. }));
    assert!(
        matches!(confirm, Some(Action::Confirm { lsn }) if *lsn == Lsn(0x110)),
        "flush 1 alone is confirmed: {actions:?}"
    );
    assert!(ids(&actions).contains(&(2, Step::Publish)), "{actions:?}");
    ok(&mut m, 2, Step::Publish, later);
    // Flush 3 has no files: once flush 2's tables are done it is confirmed too.
    let confirms: Vec<Lsn> = drain(&mut m, later)
        .iter()
        .filter_map(|a| match a {
            Action::Confirm { lsn } => Some(*lsn),
            _ => None,
        })
        .collect();
    assert_eq!(confirms, [Lsn(0x210), Lsn(0x310)]);
}
