//! Logical decoding messages reach the transforms: through the `messages` plugin, what
//! `pg_logical_emit_message` writes in a committed transaction lands as a row, and what a
//! rolled-back transaction wrote does not (unless it was written non-transactionally).

use std::time::Duration;

use tributary_tests::lake::{LandedRow, read_output};
use tributary_tests::pipeline::{RunningPipeline, config, events_database};
use tributary_tests::{plugin, s3, unique_name};

fn value<'a>(row: &'a LandedRow, column: &str) -> Option<&'a str> {
    row.values
        .get(column)
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"))
        .as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emitted_messages_of_committed_transactions_land_through_a_plugin() {
    let db = events_database("messages").await;
    let server = s3();
    let bucket = server.fresh_bucket("messages").await;
    let name = unique_name("messages");
    let running = RunningPipeline::start(config(
        &db.url,
        &name,
        &["public.events"],
        &format!("s3://{bucket}/lake"),
        server.object_store_options(),
        &[plugin("messages")],
    ))
    .await;

    db.client
        .batch_execute(
            "BEGIN;
             INSERT INTO events VALUES (1, 'a');
             SELECT pg_logical_emit_message(true, 'audit', 'hello');
             INSERT INTO events VALUES (2, 'b');
             COMMIT;
             BEGIN;
             INSERT INTO events VALUES (3, 'gone');
             SELECT pg_logical_emit_message(true, 'audit', 'rolled back');
             SELECT pg_logical_emit_message(false, 'audit', 'kept despite the rollback');
             ROLLBACK;
             BEGIN;
             SELECT pg_logical_emit_message(true, 'audit', 'alone');
             COMMIT;
             INSERT INTO events VALUES (4, 'd');",
        )
        .await
        .unwrap();
    let mut running = running;
    running.wait_for_changes(3, Duration::from_secs(60)).await;
    running.stop().await;

    let store = object_store::prefix::PrefixStore::new(server.object_store(&bucket), "lake");
    let events = read_output(&store, "public.events").await;
    let ids: Vec<Option<&str>> = events.iter().map(|r| value(r, "id")).collect();
    assert_eq!(ids, [Some("1"), Some("2"), Some("4")]);

    let messages = read_output(&store, "messages").await;
    let texts: Vec<Option<&str>> = messages.iter().map(|r| value(r, "text")).collect();
    assert_eq!(
        texts,
        [
            Some("hello"),
            Some("alone"),
            Some("kept despite the rollback")
        ],
        "{messages:#?}"
    );
    let (hello, alone, kept) = (&messages[0], &messages[1], &messages[2]);
    // The transactional message lands with its transaction's identity, between its changes.
    assert_eq!(
        (hello.commit_lsn, hello.xid, hello.seq),
        (events[0].commit_lsn, events[0].xid, 0)
    );
    assert_eq!(value(hello, "before_seq"), Some("1"));
    assert_eq!(value(hello, "transactional"), Some("true"));
    assert_eq!(value(hello, "prefix"), Some("audit"));
    assert_eq!(value(hello, "content"), Some("68656c6c6f"));
    let lsn: u64 = value(hello, "lsn").unwrap().parse().unwrap();
    assert!(lsn < hello.commit_lsn, "written before its commit");
    // A transaction that only wrote a message is a transaction too.
    assert_eq!((alone.seq, value(alone, "before_seq")), (0, Some("0")));
    assert!(alone.commit_lsn > hello.commit_lsn && alone.commit_lsn < events[2].commit_lsn);
    // The non-transactional one travels with the first commit after it, numbered after that
    // transaction's own messages.
    assert_eq!(
        (kept.commit_lsn, kept.xid, kept.seq),
        (alone.commit_lsn, alone.xid, 1)
    );
    assert_eq!(value(kept, "transactional"), Some("false"));
    assert_eq!(value(kept, "before_seq"), None);
}
