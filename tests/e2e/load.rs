//! The full load (`source.start_from = "full"`, issue 11): the tables' rows from the snapshot
//! the slot was created with, in chunks read on two connections, each table behind one load
//! marker, then the changes committed after the snapshot; under concurrent writes, and with
//! the process killed in the middle of the load and started again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tributary::lake::commit::{CommitLog, EntryKind};
use tributary::stream::load::LOAD_XID;
use tributary_tests::chaos::assert_lake_equals_source;
use tributary_tests::lake::{committed_rows, entries};
use tributary_tests::service::{Fixture, Service, verify};
use tributary_tests::{TestDatabase, fresh_database};

const TABLES: [(&str, &str); 3] = [
    ("public.accounts", "id"),
    ("public.orders", "id"),
    ("public.notes", "id"),
];
/// Rows each table holds before the pipeline's first start: a few chunks of 1 MiB each.
const ROWS: i64 = 20_000;

async fn loaded_database(hint: &str) -> TestDatabase {
    let db = fresh_database(hint).await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE accounts (id int PRIMARY KEY, name text, balance numeric(12,2));
             CREATE TABLE orders (id bigint PRIMARY KEY, account int, placed timestamptz, note text);
             CREATE TABLE notes (id int PRIMARY KEY, body text, tag varchar(20));
             INSERT INTO accounts SELECT i, 'account ' || i, i * 1.25 FROM generate_series(1, {ROWS}) i;
             INSERT INTO orders SELECT i, i % 500, '2026-01-01'::timestamptz + i * interval '1 minute',
                 repeat('o', i % 60) FROM generate_series(1, {ROWS}) i;
             INSERT INTO notes SELECT i, md5(i::text) || repeat('n', i % 90), 't' || (i % 7)
                 FROM generate_series(1, {ROWS}) i;
             -- Holes in the heap: dead rows the snapshot does not see.
             DELETE FROM notes WHERE id % 10 = 0;"
        ))
        .await
        .unwrap();
    db
}

/// A pipeline file loading the three tables in 1 MiB chunks on two connections.
async fn full_load_fixture(db: &TestDatabase, hint: &str) -> Fixture {
    let tables: Vec<&str> = TABLES.iter().map(|(t, _)| *t).collect();
    let mut fx = Fixture::new(&db.url, hint, &tables).await;
    fx.cfg.source = vec![("start_from".into(), "\"full\"".into())];
    fx.cfg.load = vec![
        ("parallelism".into(), "2".into()),
        ("chunk_mib".into(), "1".into()),
    ];
    fx.cfg.flush = vec![("chunk_mib".into(), "1".into())];
    fx.file = fx.cfg.write(&fx.dir);
    fx
}

/// Writes inserts, updates and deletes on the three tables in small transactions until
/// stopped; returns how many transactions it committed.
fn concurrent_writes(url: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let client = tributary_tests::connect(&url).await;
        let done = AtomicU64::new(0);
        let mut i: i64 = 0;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            let fresh = ROWS + i;
            let old = (i * 7919) % ROWS + 1;
            client
                .batch_execute(&format!(
                    "BEGIN;
                     INSERT INTO accounts VALUES ({fresh}, 'new {fresh}', 1.00);
                     UPDATE accounts SET balance = balance + 1 WHERE id = {old};
                     UPDATE orders SET note = 'changed {i}' WHERE id = {old};
                     DELETE FROM notes WHERE id = {old};
                     INSERT INTO orders VALUES ({fresh}, 1, now(), 'fresh');
                     COMMIT;"
                ))
                .await
                .unwrap();
            done.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done.load(Ordering::Relaxed)
    })
}

/// What every loaded lake must show: per table, the lake replayed equals the source, no
/// identity twice (both checked by `assert_lake_equals_source`), and `tributary verify` agrees.
async fn assert_loaded(db: &TestDatabase, fx: &Fixture) {
    let said = verify(&fx.file, &[]).await;
    assert_eq!(said.code, 0, "{said}");
    assert!(
        said.last_line().contains("the lake equals the source"),
        "{said}"
    );
    assert_lake_equals_source(&db.client, &fx.sink, &TABLES).await;
}

/// The load markers of `table`, as `(commit_lsn, seq)`.
async fn markers(fx: &Fixture, table: &str) -> Vec<(u64, u32)> {
    committed_rows(&fx.sink, table)
        .await
        .iter()
        .filter(|r| r.op == "load")
        .map(|r| (r.commit_lsn, r.seq))
        .collect()
}

async fn last_load_state(log: &CommitLog) -> Option<tributary::stream::load::LoadState> {
    entries(log).await.into_iter().rev().find_map(|e| e.load)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_load_under_concurrent_writes_lands_each_table_once_then_the_changes_after_it() {
    let db = loaded_database("load_concurrent").await;
    let fx = full_load_fixture(&db, "load_concurrent").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = concurrent_writes(db.url.clone(), stop.clone());
    // The writes run before, while and after the slot and its snapshot are made.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("full load handed on", Duration::from_secs(120))
        .await;
    run.wait_for_log("streaming", Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    assert!(
        transactions > 20,
        "only {transactions} concurrent transactions"
    );
    assert_loaded(&db, &fx).await;
    let log = run.stop().await;

    let entries = entries(&fx.log).await;
    let state = entries
        .iter()
        .rev()
        .find_map(|e| e.load.clone())
        .expect("load entries record progress");
    assert!(state.finished(), "{state:?}");
    assert!(
        state.tables.iter().all(|t| t.chunks.unwrap() >= 2),
        "each table read in several chunks: {state:?}"
    );
    let snapshot = state.tables[0].snapshot_lsn.0;
    assert!(
        state.tables.iter().all(|t| t.snapshot_lsn.0 == snapshot),
        "one snapshot: {state:?}"
    );
    for (table, _) in TABLES {
        // One marker per table, at the snapshot, first of its rows there.
        assert_eq!(markers(&fx, table).await, [(snapshot, 0)], "{table}\n{log}");
        let rows = committed_rows(&fx.sink, table).await;
        let loaded = rows
            .iter()
            .filter(|r| r.xid == LOAD_XID && r.op == "insert");
        assert!(
            loaded
                .clone()
                .all(|r| r.commit_lsn == snapshot && r.seq > 0),
            "{table}: load rows at the snapshot, after the marker"
        );
        // Each concurrent transaction inserts one row into accounts and orders and deletes
        // one from notes, before or after the snapshot: the load holds the rows there were,
        // give or take one per transaction.
        let before = if table == "public.notes" {
            ROWS - ROWS / 10
        } else {
            ROWS
        };
        let before = before as u64;
        let loaded = loaded.count() as u64;
        assert!(
            loaded + transactions >= before && loaded <= before + transactions,
            "{table}: the load landed {loaded} rows, {before} were there before \
             {transactions} concurrent transactions"
        );
        // Streamed changes all committed after the snapshot.
        assert!(
            rows.iter()
                .filter(|r| r.xid != LOAD_XID)
                .all(|r| r.commit_lsn > snapshot),
            "{table}: a streamed change at or before the snapshot"
        );
    }
    assert!(
        entries.last().unwrap().load.is_none(),
        "entries after the load carry no load state"
    );
    assert!(log.contains("first run with a full load"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_in_the_middle_of_a_full_load_resume_and_land_the_same_result() {
    let db = loaded_database("load_killed").await;
    let fx = full_load_fixture(&db, "load_killed").await;
    // Killed after the 3rd chunk's commit entry, then after the 2nd of the next run's load.
    for (round, point) in [(1, "flush.after-commit@3"), (2, "flush.after-commit@2")] {
        let log_file = fx.dir.join(format!("killed-{round}.log"));
        let mut run = Service::spawn_with(
            &fx.file,
            &["--wait"],
            &log_file,
            &[("TRIBUTARY_FAILPOINTS", point)],
        );
        run.wait_for_log(
            "failpoint flush.after-commit reached",
            Duration::from_secs(120),
        )
        .await;
        let said = run.log();
        run.kill().await;
        let state = last_load_state(&fx.log).await.expect("a load under way");
        assert!(!state.finished(), "round {round}: {state:?}\n{said}");
        if round == 1 {
            // `status` shows the load's progress from the commit log.
            let status = tokio::process::Command::new(tributary_tests::service::tributary_bin())
                .args(["status", "--config"])
                .arg(&fx.file)
                .output()
                .await
                .unwrap();
            let shown = String::from_utf8_lossy(&status.stdout);
            assert!(shown.contains("full load         under way"), "{shown}");
            assert!(
                shown.contains("chunks landed") || shown.contains("loaded, "),
                "{shown}"
            );
            assert!(shown.contains("public.notes"), "{shown}");
        }
        db.client
            .batch_execute(&format!(
                "UPDATE accounts SET name = 'between {round}' WHERE id <= 10;
                 INSERT INTO notes VALUES ({}, 'after kill {round}', 't')",
                ROWS + round
            ))
            .await
            .unwrap();
    }
    let mut run = Service::spawn(&fx.file, &["--wait"], &fx.dir.join("last.log"));
    run.wait_for_log("full load handed on", Duration::from_secs(120))
        .await;
    let log = run.log();
    assert!(
        log.contains("loading the table again under a new snapshot"),
        "the resumed run says it reloads:\n{log}"
    );
    assert_loaded(&db, &fx).await;
    run.stop().await;
    let state = last_load_state(&fx.log).await.unwrap();
    assert!(state.finished(), "{state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_loads_a_table_again_while_the_pipeline_streams() {
    let db = loaded_database("load_resync").await;
    let mut fx = full_load_fixture(&db, "load_resync").await;
    // From the tail: the rows the tables held before the start never reach the lake...
    fx.cfg.source = vec![];
    fx.file = fx.cfg.write(&fx.dir);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = concurrent_writes(db.url.clone(), stop.clone());
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(60)).await;
    let before = verify(&fx.file, &["--table", "public.accounts"]).await;
    assert_eq!(before.code, 1, "{before}");

    // ...until a resync of one of them, while changes keep streaming.
    let resync = run_resync(&fx.file, "public.accounts").await;
    let said = String::from_utf8_lossy(&resync.stdout);
    assert!(
        resync.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&resync.stderr)
    );
    assert!(
        said.contains("requested a new full load of public.accounts at "),
        "{said}"
    );
    assert!(said.contains("the running pipeline loads them"), "{said}");
    run.wait_for_log("full load handed on", Duration::from_secs(120))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let accounts = verify(&fx.file, &["--table", "public.accounts"]).await;
    assert_eq!(accounts.code, 0, "{accounts}\n{}", run.log());
    let orders = verify(&fx.file, &["--table", "public.orders"]).await;
    assert_eq!(orders.code, 1, "orders was not loaded again: {orders}");
    assert_eq!(markers(&fx, "public.accounts").await.len(), 1);
    assert!(markers(&fx, "public.orders").await.is_empty());
    let log = run.stop().await;
    assert!(log.contains("resync requested"), "{log}");
    let state = last_load_state(&fx.log).await.unwrap();
    assert!(state.resync && state.finished(), "{state:?}");

    // A table the pipeline does not track is refused by name.
    let refused = run_resync(&fx.file, "public.nothing").await;
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("public.nothing is not a table this pipeline tracks"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_lands_its_chunks_between_the_streams_batches_and_resumes_after_a_kill() {
    let db = loaded_database("load_resync_killed").await;
    let mut fx = full_load_fixture(&db, "load_resync_killed").await;
    fx.cfg.source = vec![];
    fx.file = fx.cfg.write(&fx.dir);
    // The load's second chunk is never read: its connection stops at the failpoint, while
    // the first chunk lands and the stream goes on.
    let mut run = Service::spawn_with(
        &fx.file,
        &[],
        &fx.dir.join("stuck.log"),
        &[("TRIBUTARY_FAILPOINTS", "load.before-chunk@2")],
    );
    run.wait_for_log("streaming", Duration::from_secs(60)).await;
    let resync = run_resync(&fx.file, "public.notes").await;
    assert!(resync.status.success(), "{resync:?}");
    run.wait_for_log(
        "failpoint load.before-chunk reached",
        Duration::from_secs(60),
    )
    .await;
    // The chunks are read on two connections: the second can reach its failpoint while the
    // first is still landing, so wait for the first chunk's entry before writing.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !entries(&fx.log)
        .await
        .iter()
        .any(|e| e.kind == EntryKind::Load)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the load's first chunk did not land:\n{}",
            run.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Streamed changes land while the load waits for its chunk, in entries that say the load
    // is unfinished.
    db.client
        .batch_execute(&format!(
            "INSERT INTO orders VALUES ({0}, 1, now(), 'during the resync');
             UPDATE notes SET body = 'during the resync' WHERE id = 1;",
            ROWS + 1
        ))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let streamed = loop {
        let all = entries(&fx.log).await;
        let first_chunk = all.iter().position(|e| e.kind == EntryKind::Load);
        let after = first_chunk.and_then(|i| {
            all[i..]
                .iter()
                .find(|e| e.kind == EntryKind::Flush && e.changes > 0)
                .cloned()
        });
        if let Some(entry) = after {
            break entry;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no streamed entry after the load's first chunk:\n{all:#?}\n{}",
            run.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let state = streamed
        .load
        .expect("a streamed entry during a load records it");
    assert!(state.resync && !state.finished(), "{state:?}");
    assert_eq!(state.unfinished(), ["public.notes"], "{state:?}");
    run.kill().await;

    // The next run loads the table again under a new snapshot, beside the stream.
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("resumed.log"));
    run.wait_for_log("full load handed on", Duration::from_secs(120))
        .await;
    let log = run.log();
    assert!(
        log.contains("loading the table again under a new snapshot"),
        "{log}"
    );
    db.client
        .batch_execute("UPDATE notes SET tag = 'after' WHERE id = 2")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let notes = verify(&fx.file, &["--table", "public.notes"]).await;
    assert_eq!(notes.code, 0, "{notes}\n{}", run.log());
    // The interrupted load's marker and the new one, each at its own snapshot.
    let marks = markers(&fx, "public.notes").await;
    assert_eq!(marks.len(), 2, "{marks:?}");
    assert_ne!(marks[0].0, marks[1].0, "{marks:?}");
    run.stop().await;
    let state = last_load_state(&fx.log).await.unwrap();
    assert!(state.finished(), "{state:?}");
}

/// Run `tributary resync --config <file> --table <table>`.
async fn run_resync(file: &std::path::Path, table: &str) -> std::process::Output {
    tokio::process::Command::new(tributary_tests::service::tributary_bin())
        .args(["resync", "--config"])
        .arg(file)
        .args(["--table", table])
        .output()
        .await
        .unwrap()
}

/// Current-state tables through a full load and a resync beside the stream (issue 36): the
/// load's marker empties the output's current-state table as it empties a reader's replay,
/// its rows fill it, and the changes streamed meanwhile are neither lost under the load's
/// older rows nor replaced by them. `verify` compares each current-state table with the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_load_and_a_resync_keep_current_state_tables_equal_to_the_source() {
    let db = loaded_database("load_mirror").await;
    let mut fx = full_load_fixture(&db, "load_mirror").await;
    fx.cfg.sink.push(("format".into(), "\"delta\"".into()));
    for (table, _) in TABLES {
        fx.cfg
            .sections
            .push(format!("[outputs.{table:?}]\nmirror = true"));
    }
    fx.file = fx.cfg.write(&fx.dir);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = concurrent_writes(db.url.clone(), stop.clone());
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Every table again (the writer updates, inserts and deletes among them).
    let resync = tokio::process::Command::new(tributary_tests::service::tributary_bin())
        .args(["resync", "--config"])
        .arg(&fx.file)
        .output()
        .await
        .unwrap();
    assert!(resync.status.success(), "{resync:?}");
    // The first load's, then the resync's.
    run.wait_for_logged("full load handed on", 2, Duration::from_secs(120))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 0);
    // Verify compares a current-state table at an entry that ends at its snapshot: one the
    // quiet source leaves.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let said = verify(&fx.file, &[]).await;
    assert_eq!(said.code, 0, "{said}\n{}", run.log());
    for (table, _) in TABLES {
        let line = format!("current-state table {table}__current: version ");
        let compared = said.stdout.lines().find(|l| l.starts_with(&line));
        assert!(
            compared.is_some_and(|l| l.ends_with("equal to the source")),
            "{table}: {said}"
        );
    }
    for (table, _) in TABLES {
        assert_eq!(markers(&fx, table).await.len(), 2, "{table}");
    }
    run.stop().await;
    std::fs::remove_dir_all(&fx.dir).unwrap();
}

/// A table DDL changed after a load's snapshot was taken, before the load locked it, is named
/// (the load then takes another snapshot): a column dropped since would fail the read, and a
/// rewrite since would show the snapshot an empty table. One that did not change is held as is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_changed_after_the_loads_snapshot_is_told_apart_when_it_is_locked() {
    use tributary::source::catalog::Catalog;
    use tributary::source::snapshot::{Snapshot, temporary_slot_name};
    let db = fresh_database("load_ddl_race").await;
    db.client
        .batch_execute(
            "CREATE TABLE kept (id int PRIMARY KEY, a text);
             CREATE TABLE dropped (id int PRIMARY KEY, a text, b text);
             CREATE TABLE rewritten (id int PRIMARY KEY, n int);
             INSERT INTO rewritten SELECT g, g FROM generate_series(1, 100) g;",
        )
        .await
        .unwrap();
    let pg = tributary::source::connect::parse_url(&db.url).unwrap();
    let snapshot = Snapshot::take(&pg, &temporary_slot_name("test"))
        .await
        .unwrap();
    let mut catalog = Catalog::new(pg.clone(), false);
    let mut tables = Vec::new();
    for name in ["public.kept", "public.dropped", "public.rewritten"] {
        tables.push(snapshot.table(&mut catalog, name, None).await.unwrap());
    }
    db.client
        .batch_execute(
            "ALTER TABLE dropped DROP COLUMN b;
             ALTER TABLE rewritten ALTER COLUMN n TYPE bigint;",
        )
        .await
        .unwrap();
    let said: Vec<Option<String>> =
        futures::future::join_all(tables.iter().map(|t| snapshot.hold(t)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    assert_eq!(said[0], None);
    assert_eq!(
        said[1].as_deref(),
        Some("its columns were (id, a, b) and are now (id, a)")
    );
    assert_eq!(said[2].as_deref(), Some("its storage was rewritten"));
    snapshot.close().await.unwrap();
}
