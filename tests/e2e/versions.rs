//! The core of the pipeline on each PostgreSQL major that CI runs besides the system's
//! ([`TESTED_MAJORS`]: 16, 17 and 18; the rest of the suite runs on the system's, 15 on
//! Debian). Each test starts a cluster of its major (`wal_level = logical`) and runs the real
//! `tributary run` into the shared S3 server, once per capture mode, each in a database of its
//! own:
//!
//! - from a slot: inserts, updates and deletes land once and the lake, replayed, equals the
//!   source; a transaction larger than the server's decoding memory is streamed before it
//!   commits (16 and later speak pgoutput protocol 4) and lands without the rows of the
//!   savepoint it rolled back to; a large rolled-back transaction never lands; and the
//!   transaction's logical decoding message reaches the `messages` plugin;
//! - through triggers (`source.capture = "trigger"`): the same workload lands through the
//!   journal;
//! - in both, a column added while the pipeline streams: the rows before it land without the
//!   column, the rows after it with it.
//!
//! A major whose binaries are missing fails its test with the step that installs them, in CI
//! and on a developer's machine alike, as every other prerequisite of the suite does: a skip
//! would pass without having tested the version. `scripts/test.sh` installs them (a couple of
//! seconds each); a developer who has no use for them leaves these tests out with
//! `-- --skip versions::`.

use std::time::Duration;

use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::chaos::assert_lake_equals_source;
use tributary_tests::lake::committed_rows;
use tributary_tests::service::{Fixture, Service};
use tributary_tests::{TESTED_MAJORS, cluster_of, database_on, plugin};

const TABLES: [&str; 2] = ["public.events", "public.items"];

/// The workload, one transaction per statement (statements sent in one string share an
/// implicit transaction).
const WORKLOAD: [&str; 9] = [
    "INSERT INTO events SELECT g, 'event ' || g FROM generate_series(1, 100) g",
    "UPDATE events SET body = 'changed' WHERE id <= 20",
    "DELETE FROM events WHERE id > 90",
    // Larger than the decoding memory: streamed before it commits.
    "BEGIN;
     INSERT INTO events SELECT g, repeat('x', 20) FROM generate_series(1000, 1999) g;
     SAVEPOINT s;
     INSERT INTO events SELECT g, 'gone' FROM generate_series(5000, 5999) g;
     ROLLBACK TO s;
     SELECT pg_logical_emit_message(true, 'audit', 'large');
     UPDATE events SET body = 'large' WHERE id <= 5;
     COMMIT",
    "BEGIN;
     INSERT INTO events SELECT g, 'aborted' FROM generate_series(7000, 7999) g;
     ROLLBACK",
    "INSERT INTO items VALUES (1, 'one'), (2, 'two')",
    "ALTER TABLE items ADD COLUMN price numeric(8, 2)",
    "INSERT INTO items VALUES (3, 'three', 9.99)",
    "UPDATE items SET price = 1.50 WHERE id = 1",
];

/// The changes [`WORKLOAD`] commits: 100 + 20 + 10 + 1005 in `events`, 4 in `items`.
const CHANGES: u64 = 1139;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Capture {
    Slot,
    Trigger,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_lands_once_on_postgresql_16() {
    core_subset(16).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_lands_once_on_postgresql_17() {
    core_subset(17).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_lands_once_on_postgresql_18() {
    core_subset(18).await;
}

/// The majors the tests name are the ones `scripts/lib.sh` installs, and each has its test
/// above.
#[test]
fn the_tested_majors_are_the_installed_ones() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/lib.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    let installed: Vec<u32> = text
        .lines()
        .find_map(|l| l.strip_prefix("PG_TESTED_MAJORS=("))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no PG_TESTED_MAJORS=(...) line in {}", script.display()))
        .split_whitespace()
        .map(|major| major.parse().unwrap())
        .collect();
    assert_eq!(installed, TESTED_MAJORS);
    assert_eq!(TESTED_MAJORS, [16, 17, 18], "a test above for each");
}

async fn core_subset(major: u32) {
    // The smallest decoding memory the server allows, so the large transaction is streamed.
    let cluster = cluster_of(
        major,
        ClusterOptions::fast().setting("logical_decoding_work_mem", "'64kB'"),
    );
    lands_once(&cluster, major, Capture::Slot).await;
    lands_once(&cluster, major, Capture::Trigger).await;
}

/// Runs [`WORKLOAD`] under a `tributary run` capturing by `capture`, in a database of its own,
/// and checks what landed.
async fn lands_once(cluster: &TempCluster, major: u32, capture: Capture) {
    let hint = format!("pg{major}_{capture:?}").to_lowercase();
    let db = database_on(cluster, &hint).await;
    db.client
        .batch_execute(
            "CREATE TABLE events (id int PRIMARY KEY, body text);
             CREATE TABLE items (id int PRIMARY KEY, name text);",
        )
        .await
        .unwrap();
    let mut fx = Fixture::new(&db.url, &hint, &TABLES).await;
    match capture {
        Capture::Slot => fx.cfg.transforms.push(plugin("messages")),
        Capture::Trigger => fx.cfg.source.push(("capture".into(), "\"trigger\"".into())),
    }
    fx.file = fx.cfg.write(&fx.dir);
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    for transaction in WORKLOAD {
        db.client.batch_execute(transaction).await.unwrap();
    }
    run.wait_for_landed(&fx.log, CHANGES, Duration::from_secs(120))
        .await;
    let log = run.stop().await;
    let at = format!("PostgreSQL {major}, capture {capture:?}");
    if capture == Capture::Trigger {
        assert!(log.contains("trigger capture installed"), "{at}:\n{log}");
        let slots: i64 = db
            .client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            slots, 0,
            "{at}: the changes came through the journal, not a slot"
        );
    }

    let figures = assert_lake_equals_source(&db.client, &fx.sink, &[("public.events", "id")]).await;
    let ops: Vec<(&str, usize)> = figures[0]
        .ops
        .iter()
        .map(|(op, n)| (op.as_str(), *n))
        .collect();
    assert_eq!(
        (figures[0].rows, ops),
        (1090, vec![("delete", 10), ("insert", 1100), ("update", 25)]),
        "{at}: {figures:?}"
    );
    assert_added_column_lands(&fx, &at).await;
    if capture == Capture::Slot {
        assert_streamed(&db.client, major, &fx.name, &at).await;
        let messages = committed_rows(&fx.sink, "messages").await;
        assert_eq!(messages.len(), 1, "{at}: {messages:#?}");
        assert_eq!(messages[0].values["text"].as_deref(), Some("large"), "{at}");
        assert_eq!(
            messages[0].values["before_seq"].as_deref(),
            Some("1000"),
            "{at}"
        );
    }
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// `items` gained `price` mid-stream: the two rows before it land without it, the insert and
/// the update after it with it.
async fn assert_added_column_lands(fx: &Fixture, at: &str) {
    let landed: Vec<String> = committed_rows(&fx.sink, "public.items")
        .await
        .iter()
        .map(|row| {
            let values: Vec<String> = row
                .values
                .iter()
                .map(|(column, value)| format!("{column}={}", value.as_deref().unwrap_or("null")))
                .collect();
            format!("{} {}", row.op, values.join(" "))
        })
        .collect();
    assert_eq!(
        landed,
        [
            "insert id=1 name=one",
            "insert id=2 name=two",
            "insert id=3 name=three price=9.99",
            "update id=1 name=one price=1.50",
        ],
        "{at}"
    );
}

/// The slot streamed the large transactions (`stream_txns`, which the server publishes a
/// moment after it decodes them) instead of spilling them to disk: both before 18. From 18 on,
/// the server first asks whether a transaction that outgrew the decoding memory has aborted,
/// and drops an aborted one unsent, so the rolled-back one streams only when the server decoded
/// it while it still ran.
async fn assert_streamed(client: &tokio_postgres::Client, major: u32, slot: &str, at: &str) {
    let least = if major >= 18 { 1 } else { 2 };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (streamed, spilled) = loop {
        let stats: (i64, i64) = client
            .query_opt(
                "SELECT stream_txns, spill_txns FROM pg_stat_replication_slots \
                 WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .map_or((0, 0), |row| (row.get(0), row.get(1)));
        if stats.0 >= least || tokio::time::Instant::now() > deadline {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        (least..=2).contains(&streamed) && spilled == 0,
        "{at}: stream_txns {streamed} (expected {least} to 2), spill_txns {spilled} (expected 0)"
    );
}
