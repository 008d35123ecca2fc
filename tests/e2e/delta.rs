//! Delta tables (`sink.format = "delta"`), read back by the `deltalake` package (delta-rs) and
//! pyarrow: every change once, the replayed log equal to the source, the documented schema
//! through an added and a dropped column, and each table's log one version per flush with its
//! `txn` version, also after a real process is killed between the commit entry and the tables.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tributary::lake::commit::CommitLog;
use tributary::lake::sink::Sink;
use tributary_tests::lake::{
    DeltaPoller, committed_rows, delta_txn_versions, entries, entries_of, read_delta,
    read_delta_version,
};
use tributary_tests::service::{Fixture, Service, ServiceConfig, command, peak_rss_mib, verify};
use tributary_tests::{TestDatabase, fresh_database};

use super::crash::{TABLES, create_tables, kill_at, transaction};

/// A fixture landing `tables` of `db` as Delta tables.
async fn delta_fixture(db: &TestDatabase, hint: &str, tables: &[&str]) -> Fixture {
    let mut fixture = Fixture::new(&db.url, hint, tables).await;
    fixture.cfg.sink.push(("format".into(), "\"delta\"".into()));
    fixture.file = fixture.cfg.write(&fixture.dir);
    fixture
}

/// A database with `t (id int PRIMARY KEY, body text)` and a fixture landing it as a Delta
/// table, its pipeline file written after `configure` had its say.
pub(super) async fn t_fixture(
    hint: &str,
    configure: impl FnOnce(&mut ServiceConfig),
) -> (TestDatabase, Fixture) {
    let db = fresh_database(hint).await;
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, body text)")
        .await
        .unwrap();
    let mut fixture = delta_fixture(&db, hint, &["public.t"]).await;
    configure(&mut fixture.cfg);
    fixture.file = fixture.cfg.write(&fixture.dir);
    (db, fixture)
}

fn table_uri(fixture: &Fixture, output: &str) -> String {
    format!("{}/{output}", fixture.cfg.sink_url)
}

/// The table's log has no gap, one `txn` version per version, each an entry of the commit log
/// with files of the output, every such entry exactly once.
pub(super) async fn check_history(sink: &Sink, log: &CommitLog, output: &str) {
    let txns = delta_txn_versions(sink, output).await;
    let txns: Vec<u64> = txns
        .iter()
        .map(|t| t.unwrap_or_else(|| panic!("{output}: a version without txn: {txns:?}")))
        .collect();
    assert_eq!(
        txns,
        entries_of(log, output).await,
        "{output}: the table's txn versions are the commit entries with its files, once each"
    );
}

/// The section that keeps `output`'s current-state table.
pub(super) fn mirror_section(output: &str) -> String {
    format!("[outputs.{output:?}]\nmirror = true")
}

/// Key to the row's `columns` as of the last change, replaying the rows by (_commit_lsn, _seq)
/// (they come in that order).
fn replay(
    rows: &[BTreeMap<String, Option<String>>],
    columns: &[&str],
) -> BTreeMap<String, Vec<Option<String>>> {
    let mut state = BTreeMap::new();
    for row in rows {
        let op = row["_op"].as_deref().unwrap();
        // A load's marker: the rows after it are the table as its snapshot held it.
        if op == "load" {
            state.clear();
            continue;
        }
        let key = match op {
            "delete" => {
                let old: serde_json::Value =
                    serde_json::from_str(row["_old"].as_deref().unwrap()).unwrap();
                old["id"].to_string()
            }
            _ => row["id"].clone().unwrap(),
        };
        match op {
            "insert" | "update" => {
                let values = columns
                    .iter()
                    .map(|c| row.get(*c).cloned().flatten())
                    .collect();
                state.insert(key, values);
            }
            "delete" => {
                state.remove(&key);
            }
            other => panic!("unexpected _op {other}"),
        }
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_workload_with_a_column_added_and_dropped_reads_back_as_delta_tables() {
    let db = fresh_database("delta_mixed").await;
    db.client
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(10,2), at timestamp, u uuid, big text);
             CREATE TABLE side (k bigint PRIMARY KEY, v text);",
        )
        .await
        .unwrap();
    let mut fixture = delta_fixture(&db, "delta_mixed", &["public.t", "public.side"]).await;
    fixture.cfg.sections.push(mirror_section("public.t"));
    fixture.file = fixture.cfg.write(&fixture.dir);
    let service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    let mut service = service;
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let steps = [
        // Rows 1 to 3 hold a value PostgreSQL stores out of line (TOAST), which the updates
        // after do not send again.
        "INSERT INTO t SELECT g, 'name ' || g, g * 1.5, '2026-01-01'::timestamp + g * interval '1 hour', gen_random_uuid(),
                CASE WHEN g <= 3 THEN (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 200) i) END
         FROM generate_series(1, 20) g;
         INSERT INTO side SELECT g, 'v' || g FROM generate_series(1, 5) g;",
        "UPDATE t SET name = name || '!' WHERE id % 3 = 0; DELETE FROM t WHERE id % 5 = 0;",
        "ALTER TABLE t ADD COLUMN note text;",
        "INSERT INTO t (id, name, note) SELECT g, 'late ' || g, 'note ' || g FROM generate_series(21, 30) g;
         UPDATE t SET note = 'n' || id WHERE id < 5;",
        "ALTER TABLE t DROP COLUMN amount;",
        "INSERT INTO t (id, name) SELECT g, 'last ' || g FROM generate_series(31, 35) g;
         UPDATE t SET name = 'x' WHERE id = 31; DELETE FROM t WHERE id = 32;
         UPDATE side SET v = 'w' WHERE k = 2;",
    ];
    for step in steps {
        db.client.batch_execute(step).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // t: 20 + 6 + 4 + 10 + 4 + 5 + 1 + 1; side: 5 + 1.
    let (t_changes, side_changes) = (51, 6);
    service
        .wait_for_landed(
            &fixture.log,
            t_changes + side_changes,
            Duration::from_secs(60),
        )
        .await;
    // The column added to t came into its current-state table, which loads t again.
    wait_for_load_of(&fixture, "public.t", Duration::from_secs(60)).await;
    // The current-state table's updates and deletes rewrote its files: a vacuum with no
    // retention deletes the ones no version reads any more, and everything below still reads.
    let (code, out, err) = command("vacuum", &fixture.file, &["--retain", "0s"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let rewritten: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("vacuum: public.t__current: deleted "))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(rewritten > 0, "{out}");
    assert!(out.contains("vacuum: public.t: deleted 0 files"), "{out}");
    // verify holds the tables against the commit log and the lake against the source.
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .last_line()
            .starts_with("verify: the lake equals the source"),
        "{verified}"
    );
    for output in ["public.t", "public.side"] {
        assert!(
            verified
                .stdout
                .lines()
                .any(|l| l.starts_with(&format!("delta table {output}: version"))
                    && l.ends_with("intact")),
            "{verified}"
        );
    }
    let current = verified
        .stdout
        .lines()
        .find(|l| l.starts_with("current-state table public.t__current: version"))
        .unwrap_or_else(|| panic!("{verified}"));
    assert!(current.ends_with("rows, equal to the source"), "{current}");
    assert!(
        verified
            .stdout
            .lines()
            .any(|l| l.starts_with("delta table public.t__current: version")
                && l.ends_with("intact")),
        "{verified}"
    );
    let (code, status, err) = command("status", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(status.contains("  Delta tables\n"), "{status}");
    let log = service.stop().await;

    let read = read_delta(&table_uri(&fixture, "public.t"), &fixture.cfg.sink_options);
    let through_log = committed_rows(&fixture.sink, "public.t").await;
    assert_eq!(read.rows.len(), through_log.len(), "{log}");
    let streamed = read
        .rows
        .iter()
        .filter(|r| r["_xid"].as_deref() != Some("0"));
    assert_eq!(streamed.count() as u64, t_changes, "every change once");
    let positions: BTreeSet<(String, String)> = read
        .rows
        .iter()
        .map(|r| {
            (
                r["_commit_lsn"].clone().unwrap(),
                r["_seq"].clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(positions.len(), read.rows.len(), "no change twice");

    // Replaying the log table gives the source's SELECT.
    let source: BTreeMap<String, Vec<Option<String>>> = db
        .client
        .query("SELECT id::text, name, note, big FROM t", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), vec![r.get(0), r.get(1), r.get(2), r.get(3)]))
        .collect();
    let without_big = |rows: &BTreeMap<String, Vec<Option<String>>>| {
        rows.iter()
            .map(|(k, v)| (k.clone(), v[..3].to_vec()))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(
        replay(&read.rows, &["id", "name", "note"]),
        without_big(&source)
    );
    let toasted = read
        .rows
        .iter()
        .filter(|r| {
            r["_unchanged_toast"]
                .as_deref()
                .is_some_and(|t| t.contains("big"))
        })
        .count();
    assert!(toasted >= 3, "updates of rows 1 to 3 left big out");

    // The current-state table equals the source's SELECT without a replay, the values the
    // updates did not send again kept.
    let current = read_delta(
        &table_uri(&fixture, "public.t__current"),
        &fixture.cfg.sink_options,
    );
    let by_key: BTreeMap<String, Vec<Option<String>>> = current
        .rows
        .iter()
        .map(|r| {
            let id = r["id"].clone().unwrap();
            (
                id,
                ["id", "name", "note", "big"]
                    .iter()
                    .map(|c| r[*c].clone())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(by_key.len(), current.rows.len(), "one row per key");
    assert_eq!(by_key, source);
    let columns: Vec<&str> = current.schema.iter().map(|(n, ..)| n.as_str()).collect();
    assert_eq!(
        columns,
        [
            "_commit_lsn",
            "_seq",
            "_commit_time",
            "id",
            "name",
            "amount",
            "at",
            "u",
            "big",
            "note"
        ]
    );

    // The documented schema: the change metadata, the columns as they were added, the one
    // dropped still there, `_old`, and the added column last and nullable.
    let schema: Vec<(&str, &str, bool)> = read
        .schema
        .iter()
        .map(|(n, t, null)| (n.as_str(), t.as_str(), *null))
        .filter(|(n, ..)| *n != "_old" && *n != "_unchanged_toast")
        .collect();
    assert_eq!(
        schema,
        [
            ("_op", "string", false),
            ("_commit_lsn", "long", false),
            ("_seq", "long", false),
            ("_xid", "long", false),
            ("_commit_time", "timestamp", false),
            ("_schema", "string", false),
            ("id", "integer", true),
            ("name", "string", true),
            ("amount", "decimal(10,2)", true),
            ("at", "timestamp_ntz", true),
            ("u", "string", true),
            ("big", "string", true),
            ("note", "string", true),
        ]
    );
    let amounts: Vec<Option<&str>> = read
        .rows
        .iter()
        .filter(|r| r["id"].as_deref() == Some("33"))
        .map(|r| r["amount"].as_deref())
        .collect();
    assert_eq!(amounts, [None], "a dropped column is null for new rows");
    let u = read.rows[0]["u"].as_deref().unwrap();
    assert_eq!(
        (u.len(), u.matches('-').count()),
        (36, 4),
        "uuid as text: {u}"
    );

    let side = read_delta(
        &table_uri(&fixture, "public.side"),
        &fixture.cfg.sink_options,
    );
    assert_eq!(side.rows.len() as u64, side_changes);
    for output in ["public.t", "public.side"] {
        check_history(&fixture.sink, &fixture.log, output).await;
    }

    // A table whose log lost a version is a defect verify names.
    let first = object_store::path::Path::from("public.side/_delta_log/00000000000000000000.json");
    fixture.sink.delete(&first).await.unwrap();
    let verified = verify(&fixture.file, &["--identities-only"]).await;
    assert_ne!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .contains("delta table public.side: version 1, no commit entry, 1 problem\n  versions [0] of its log are missing"),
        "{verified}"
    );
    assert!(
        verified.last_line().contains("1 Delta table problem"),
        "{verified}"
    );
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// Land one transaction, kill the service at `point` (its `hit`-th pass) in the flush of the
/// second, restart without failpoints, land a third: each table holds every change once and
/// its log each flush once.
async fn crash_at(point: &str, hit: u32) {
    let hint = format!("delta_{}", point.replace(['.', '-'], "_"));
    let db = fresh_database(&hint).await;
    create_tables(&db).await;
    let mut fixture = delta_fixture(&db, &hint, &TABLES).await;
    fixture.cfg.sections.push(mirror_section(TABLES[0]));
    fixture.file = fixture.cfg.write(&fixture.dir);
    kill_at(&db, &fixture, point, hit).await;
    let crashing = fixture.log.latest().await.unwrap().unwrap();
    let before_commit = [
        "flush.after-intent",
        "flush.after-file",
        "flush.before-commit",
    ];
    if !before_commit.contains(&point) {
        assert_eq!(crashing.files.len(), 3, "the second flush is committed");
    }

    let mut b = Service::spawn(&fixture.file, &[], &fixture.dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(120)).await;
    db.client.batch_execute(&transaction(21)).await.unwrap();
    // Changes the current-state table of the first table applies in place.
    let first = TABLES[0];
    db.client
        .batch_execute(&format!(
            "UPDATE {first} SET body = 'changed' WHERE id % 4 = 0; DELETE FROM {first} WHERE id % 7 = 0;"
        ))
        .await
        .unwrap();
    b.wait_for_landed(&fixture.log, 90 + 7 + 4, Duration::from_secs(60))
        .await;
    // verify holds the current-state table against the commit log (one version per flush,
    // in order, none twice) and against the source.
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .contains(&format!("current-state table {first}__current: version"))
            && verified.stdout.contains("rows, equal to the source"),
        "{verified}"
    );
    let b_log = b.stop().await;
    let current = read_delta(
        &table_uri(&fixture, &format!("{first}__current")),
        &fixture.cfg.sink_options,
    );
    let rows: BTreeMap<u32, String> = current
        .rows
        .iter()
        .map(|r| {
            (
                r["id"].as_deref().unwrap().parse().unwrap(),
                r["body"].clone().unwrap(),
            )
        })
        .collect();
    let expected: BTreeMap<u32, String> = (1..=30)
        .filter(|id| id % 7 != 0)
        .map(|id| {
            let body = match id % 4 {
                0 => "changed".to_owned(),
                _ => format!("row {id}"),
            };
            (id, body)
        })
        .collect();
    assert_eq!(rows, expected, "{b_log}");
    assert_eq!(current.rows.len(), expected.len(), "one row per key");
    for table in TABLES {
        check_history(&fixture.sink, &fixture.log, table).await;
        let read = read_delta(&table_uri(&fixture, table), &fixture.cfg.sink_options);
        let ids: Vec<u32> = read
            .rows
            .iter()
            .filter(|r| r["_op"].as_deref() == Some("insert"))
            .map(|r| r["id"].as_deref().unwrap().parse().unwrap())
            .collect();
        let changes = if table == first { 30 + 7 + 4 } else { 30 };
        assert_eq!(
            read.rows.len(),
            changes,
            "{table}: every change once: {b_log}"
        );
        assert_eq!(ids.len(), 30, "{table}: every insert once: {b_log}");
        assert_eq!(
            ids.iter().copied().collect::<BTreeSet<_>>(),
            (1..=30).collect()
        );
        assert_eq!(
            read.files.len(),
            entries_of(&fixture.log, table).await.len(),
            "{table}: one file per flush"
        );
    }
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

// Each failpoint of the flush protocol, in the second flush (three files, one per table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_intent_leaves_the_tables_without_the_flush_and_lands_it_once() {
    crash_at("flush.after-intent", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_first_file_leaves_the_tables_without_the_flush_and_lands_it_once() {
    crash_at("flush.after-file", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_the_commit_entry_is_caught_up_at_the_next_start() {
    crash_at("flush.after-commit", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_confirm_leaves_every_table_holding_the_flush_once() {
    crash_at("flush.after-confirm", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_commit_entry_leaves_the_tables_without_the_flush_and_lands_it_once() {
    crash_at("flush.before-commit", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_commit_entry_and_the_tables_is_caught_up_at_the_next_start() {
    crash_at("tables.before-publish", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_one_table_of_three_has_the_flush_catches_up_the_other_two_once() {
    // Three tables per flush: the fourth pass is the first table of the second flush.
    crash_at("tables.after-table", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_a_change_log_table_and_its_current_state_table_applies_the_flush_once() {
    crash_at("delta.before-current", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_every_table_and_before_the_confirm_writes_no_version_twice() {
    crash_at("tables.after-publish", 2).await;
}

/// Start the pipeline and insert `ids` into `t` one transaction at a time, each landed before
/// the next (so one flush each).
async fn run_inserting(
    db: &TestDatabase,
    fixture: &Fixture,
    log: &str,
    ids: std::ops::RangeInclusive<u64>,
) -> Service {
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join(log));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    for id in ids {
        db.client
            .batch_execute(&format!("INSERT INTO t VALUES ({id}, 'row {id}')"))
            .await
            .unwrap();
        service
            .wait_for_landed(&fixture.log, id, Duration::from_secs(30))
            .await;
    }
    service
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_every_ten_versions_lets_a_reader_start_there() {
    let (db, fixture) = t_fixture("delta_checkpoint", |_| {}).await;
    // One flush, so one version, per transaction.
    let service = run_inserting(&db, &fixture, "run.log", 1..=12).await;
    service.stop().await;
    let log_dir = "public.t/_delta_log";
    let names = tributary_tests::lake::object_names(fixture.sink.store().as_ref(), log_dir).await;
    let checkpoint = format!("{log_dir}/00000000000000000010.checkpoint.parquet");
    assert!(names.contains(&checkpoint), "{names:?}");
    let last = object_store::path::Path::from(format!("{log_dir}/_last_checkpoint"));
    let last = fixture
        .sink
        .get(&last)
        .await
        .unwrap()
        .expect("_last_checkpoint");
    let last: serde_json::Value = serde_json::from_slice(&last).unwrap();
    // The protocol, the metadata, the pipeline's txn and the files of versions 0 to 10.
    assert_eq!(last, serde_json::json!({"version": 10, "size": 14}));

    // With the commits before it gone, a reader has only the checkpoint to start from.
    for version in 0..10 {
        let path = object_store::path::Path::from(format!("{log_dir}/{version:020}.json"));
        fixture.sink.delete(&path).await.unwrap();
    }
    let read = read_delta(&table_uri(&fixture, "public.t"), &fixture.cfg.sink_options);
    assert_eq!(read.version, 11);
    let ids: Vec<&str> = read
        .rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap())
        .collect();
    assert_eq!(ids, (1..=12).map(|i| i.to_string()).collect::<Vec<_>>());

    // Tributary opens it from the checkpoint too: a restart appends the next flushes after
    // it (checkpointing again at version 20), status and verify read it, verify audits its
    // log from the checkpoint, and vacuum, which needs every removal, leaves it alone.
    let service = run_inserting(&db, &fixture, "run2.log", 13..=22).await;
    // One version per entry with files of the table, 22 of them.
    let held = entries_of(&fixture.log, "public.t").await;
    assert_eq!(held.len(), 22, "{held:?}");
    let last = held[21];
    let (code, status, err) = command("status", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        status
            .lines()
            .any(|l| l.trim_start().starts_with("public.t")
                && l.ends_with(&format!("version 21, entries up to #{last}, 22 files"))),
        "{status}"
    );
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified.stdout.contains(&format!(
            "delta table public.t: version 21, entries up to {last}, intact\n  audited from its checkpoint at version 20: the commits before it are gone"
        )),
        "{verified}"
    );
    assert!(
        verified
            .last_line()
            .starts_with("verify: the lake equals the source"),
        "{verified}"
    );
    service.stop().await;
    let (code, out, err) = command("vacuum", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "vacuum: public.t: left alone: its commits before the checkpoint at version 20 are gone"
        ),
        "{out}"
    );
    let read = read_delta(&table_uri(&fixture, "public.t"), &fixture.cfg.sink_options);
    assert_eq!(read.version, 21);
    assert_eq!(read.rows.len(), 22, "every change once");
    // Versions 10 to 21 are there, each with the txn of the next entry, in order.
    let names = tributary_tests::lake::object_names(fixture.sink.store().as_ref(), log_dir).await;
    let mut txns = Vec::new();
    for name in names.iter().filter(|n| n.ends_with(".json")) {
        let bytes = fixture
            .sink
            .get(&object_store::path::Path::from(name.as_str()))
            .await
            .unwrap()
            .unwrap();
        let commit: Vec<serde_json::Value> = std::str::from_utf8(&bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let txn = commit.iter().find_map(|a| a["txn"]["version"].as_u64());
        txns.push((name.rsplit('/').next().unwrap().to_owned(), txn));
    }
    let expected: Vec<(String, Option<u64>)> = (10..=21usize)
        .map(|v| (format!("{v:020}.json"), Some(held[v])))
        .collect();
    assert_eq!(txns, expected);
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// `tributary compact` beside a running pipeline that goes on inserting: a reader polling the
/// table throughout sees every id once and never fewer rows than before; afterwards the table
/// has fewer files, holds every change once, and verify finds it intact. The compaction's
/// version carries no `txn`, so the pipeline's history is the commit log's still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_beside_a_running_pipeline_keeps_every_row_once_in_fewer_files() {
    let db = fresh_database("delta_compact").await;
    db.client
        .batch_execute("CREATE TABLE events (id int PRIMARY KEY, body text)")
        .await
        .unwrap();
    let fixture = delta_fixture(&db, "delta_compact", &["public.events"]).await;
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // One flush, so one small file, per transaction.
    let mut written = 0;
    for _ in 0..20 {
        db.client
            .batch_execute(&format!(
                "INSERT INTO events SELECT g, 'e' || g FROM generate_series({}, {}) g",
                written + 1,
                written + 5
            ))
            .await
            .unwrap();
        written += 5;
        service
            .wait_for_landed(&fixture.log, written, Duration::from_secs(30))
            .await;
    }
    let uri = table_uri(&fixture, "public.events");
    let before = read_delta(&uri, &fixture.cfg.sink_options);
    assert_eq!(before.files.len(), 20);

    let poller = DeltaPoller::start(&uri, &fixture.cfg.sink_options, &fixture.dir);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (url, stop) = (db.url.clone(), stop.clone());
        tokio::spawn(async move {
            let client = tributary_tests::connect(&url).await;
            let mut next = written;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .batch_execute(&format!(
                        "INSERT INTO events SELECT g, 'e' || g FROM generate_series({}, {}) g",
                        next + 1,
                        next + 5
                    ))
                    .await
                    .unwrap();
                next += 5;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            next
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, out, err) = command("compact", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("compact: public.events: ") && out.contains(" rewritten as 1 "),
        "{out}"
    );
    assert!(
        err.contains("compacting"),
        "the compaction is logged: {err}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written: u64 = writer.await.unwrap();
    service
        .wait_for_landed(&fixture.log, written, Duration::from_secs(60))
        .await;
    let polled = poller.finish();
    assert!(polled.problems.is_empty(), "{:?}", polled.problems);
    assert!(
        polled.versions.len() > 2,
        "the reader read through the compaction: {polled:?}"
    );

    let after = read_delta(&uri, &fixture.cfg.sink_options);
    let ids: Vec<u32> = after
        .rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), written as usize, "no change twice");
    assert_eq!(
        ids.iter().copied().collect::<BTreeSet<_>>(),
        (1..=written as u32).collect(),
        "every change"
    );
    let flushes = entries_of(&fixture.log, "public.events").await.len();
    assert!(
        after.files.len() < flushes,
        "{} files for {flushes} flushes",
        after.files.len()
    );
    assert!(
        after.files.iter().any(|f| f.contains("/_compacted/")),
        "{:?}",
        after.files
    );
    let txns = delta_txn_versions(&fixture.sink, "public.events").await;
    assert_eq!(txns.iter().filter(|t| t.is_none()).count(), 1, "{txns:?}");
    let held: Vec<u64> = txns.into_iter().flatten().collect();
    assert_eq!(held, entries_of(&fixture.log, "public.events").await);

    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .contains("delta table public.events: version ")
            && verified.stdout.contains("intact"),
        "{verified}"
    );

    // The files the compaction replaced stay for the retention (seven days unless told) ...
    let replaced: usize = out
        .split("compact: public.events: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("how many files the compaction replaced: {out}"));
    let files = || async {
        let mut names = Vec::new();
        for folder in ["public.events", "public.events/_compacted"] {
            let listing = fixture
                .sink
                .list_dir(Some(&object_store::path::Path::from(folder)))
                .await
                .unwrap();
            names.extend(listing.objects.into_iter().map(|(n, _)| n));
        }
        names.retain(|n| n.ends_with(".parquet"));
        names.len()
    };
    assert_eq!(files().await, after.files.len() + replaced);
    let (code, out, err) = command("vacuum", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "vacuum: public.events: deleted 0 files (0 B); {replaced} removed files ("
        )) && out.contains("stay until their removal is 7d old"),
        "{out}"
    );
    let (code, out, err) = command(
        "vacuum",
        &fixture.file,
        &["--retain", "0s", "--dry-run"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("would delete {replaced} files")),
        "{out}"
    );
    assert_eq!(
        files().await,
        after.files.len() + replaced,
        "a dry run deletes nothing"
    );
    // ... and go when it is over, beside the running pipeline, which keeps landing.
    let (code, out, err) = command("vacuum", &fixture.file, &["--retain", "0s"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("vacuum: public.events: deleted {replaced} files")),
        "{out}"
    );
    assert!(
        err.contains("a reader of a version older than that"),
        "{err}"
    );
    assert_eq!(
        files().await,
        after.files.len(),
        "only the files readers read are left"
    );
    db.client
        .batch_execute(&format!(
            "INSERT INTO events SELECT g, 'e' || g FROM generate_series({}, {}) g",
            written + 1,
            written + 5
        ))
        .await
        .unwrap();
    let written = written + 5;
    service
        .wait_for_landed(&fixture.log, written, Duration::from_secs(60))
        .await;
    let vacuumed = read_delta(&uri, &fixture.cfg.sink_options);
    assert_eq!(vacuumed.rows.len(), written as usize);
    // Verify reads the table's rows through the files its log names, not through the commit
    // entries' files, of which the vacuum deleted most.
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(verified.stdout.contains("intact"), "{verified}");
    service.stop().await;
    // A start reads no file of a flush its tables hold.
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run2.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    service.stop().await;
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// Compaction refuses a pipeline that lands Parquet files, and an output that is not a table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_names_what_it_cannot_compact() {
    let db = fresh_database("compact_refusals").await;
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let plain = Fixture::new(&db.url, "compact_plain", &["public.t"]).await;
    let (code, _, err) = command("compact", &plain.file, &[], &[]).await;
    assert_ne!(code, 0);
    assert!(err.contains("sink.format = \"parquet\""), "{err}");
    let fixture = delta_fixture(&db, "compact_missing", &["public.t"]).await;
    let (code, _, err) = command("compact", &fixture.file, &["--output", "public.nope"], &[]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("\"public.nope\" is not a table of this sink"),
        "{err}"
    );
}

/// The region of each row of every file a reader of `output`'s table reads, by the file's
/// partition value: read through the table's log and the files themselves.
async fn regions_by_partition(
    sink: &Sink,
    output: &str,
) -> Vec<(Option<String>, Vec<Option<String>>)> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let state = tributary::lake::delta::read_table(sink, output, Default::default())
        .await
        .unwrap();
    let mut files = Vec::new();
    for add in state.files.values() {
        let bytes = sink
            .get(&object_store::path::Path::from(format!(
                "{output}/{}",
                add.path
            )))
            .await
            .unwrap()
            .unwrap();
        let mut regions = Vec::new();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let column = batch
                .column_by_name("region")
                .unwrap()
                .as_string::<i32>()
                .clone();
            regions.extend(
                (0..column.len()).map(|i| column.is_valid(i).then(|| column.value(i).to_owned())),
            );
        }
        assert_eq!(add.partition_values.len(), 1, "{add:?}");
        files.push((add.partition_values["region"].clone(), regions));
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_partitioned_by_a_column_and_by_commit_day_read_back_by_partition() {
    let db = fresh_database("delta_partitions").await;
    db.client
        .batch_execute(
            "CREATE TABLE pa (id int PRIMARY KEY, region text);
             CREATE TABLE pb (id int PRIMARY KEY, v text);",
        )
        .await
        .unwrap();
    let mut fixture = delta_fixture(&db, "delta_partitions", &["public.pa", "public.pb"]).await;
    fixture
        .cfg
        .sections
        .push("[outputs.\"public.pa\"]\npartition_by = \"region\"".into());
    fixture
        .cfg
        .sections
        .push("[outputs.\"public.pb\"]\npartition_by = \"day(_commit_time)\"".into());
    fixture.file = fixture.cfg.write(&fixture.dir);
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // One transaction with rows of three regions and none; then a row moves.
    db.client
        .batch_execute(
            "INSERT INTO pa SELECT g, (ARRAY['eu', 'us', 'ap', NULL])[1 + g % 4] FROM generate_series(1, 20) g;
             INSERT INTO pb SELECT g, 'v' || g FROM generate_series(1, 10) g;",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    db.client
        .batch_execute(
            "UPDATE pa SET region = 'eu' WHERE id = 2; INSERT INTO pa VALUES (21, 'us');",
        )
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 20 + 10 + 2, Duration::from_secs(60))
        .await;
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    let log = service.stop().await;

    // Each file holds the rows of one region, the one its add action names.
    let files = regions_by_partition(&fixture.sink, "public.pa").await;
    for (partition, regions) in &files {
        assert!(
            regions.iter().all(|r| r == partition),
            "{partition:?}: {regions:?}"
        );
    }
    let partitions: BTreeSet<Option<String>> = files.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(
        partitions,
        [
            None,
            Some("ap".into()),
            Some("eu".into()),
            Some("us".into())
        ]
        .into(),
        "{log}"
    );
    assert!(files.len() >= 4, "a file per region and flush: {log}");

    // delta-rs reads the partition column from the log, each row once.
    let read = read_delta(&table_uri(&fixture, "public.pa"), &fixture.cfg.sink_options);
    assert_eq!(read.partition_columns, ["region"]);
    assert_eq!(read.rows.len(), 22);
    let moved: Vec<Option<&str>> = read
        .rows
        .iter()
        .filter(|r| r["id"].as_deref() == Some("2"))
        .map(|r| r["region"].as_deref())
        .collect();
    assert_eq!(moved, [Some("ap"), Some("eu")]);

    // By commit day: a column the files do not hold, which readers take from the log.
    let read = read_delta(&table_uri(&fixture, "public.pb"), &fixture.cfg.sink_options);
    assert_eq!(read.partition_columns, ["_commit_time_day"]);
    assert_eq!(read.rows.len(), 10);
    for row in &read.rows {
        let day = row["_commit_time_day"].as_deref().unwrap();
        let at = row["_commit_time"].as_deref().unwrap();
        assert!(at.starts_with(day), "{day} is the day of {at}");
    }
    assert_eq!(
        read.schema.last().map(|(n, t, _)| (n.as_str(), t.as_str())),
        Some(("_commit_time_day", "date"))
    );

    // Compaction rewrites files within a partition only.
    let (code, out, err) = command("compact", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let files = regions_by_partition(&fixture.sink, "public.pa").await;
    assert_eq!(
        files.len(),
        4,
        "one file per region after compaction: {out}"
    );
    for (partition, regions) in &files {
        assert!(
            regions.iter().all(|r| r == partition),
            "{partition:?}: {regions:?}"
        );
    }
    let read = read_delta(&table_uri(&fixture, "public.pa"), &fixture.cfg.sink_options);
    assert_eq!(read.rows.len(), 22);
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_stops_the_pipeline_or_starts_a_new_version_of_the_table() {
    let db = fresh_database("delta_type_change").await;
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, amount int)")
        .await
        .unwrap();
    let mut fixture = delta_fixture(&db, "delta_type_change", &["public.t"]).await;
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("a.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    db.client
        .batch_execute("INSERT INTO t SELECT g, g * 10 FROM generate_series(1, 5) g")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 5, Duration::from_secs(60))
        .await;
    db.client
        .batch_execute(
            "ALTER TABLE t ALTER COLUMN amount TYPE text;
             INSERT INTO t SELECT g, 'x' || g FROM generate_series(6, 8) g;",
        )
        .await
        .unwrap();
    // By default the pipeline stops, naming the column and both types.
    let status = service.wait_exit(Duration::from_secs(60)).await;
    assert!(!status.success());
    let log = service.log();
    assert!(
        log.contains("column \"amount\" changed type from integer to string"),
        "{log}"
    );
    let before = read_delta(&table_uri(&fixture, "public.t"), &fixture.cfg.sink_options);
    assert_eq!(before.rows.len(), 5);

    // Asked to, it starts a new version of the table instead.
    fixture
        .cfg
        .sink
        .push(("on_type_change".into(), "\"new_version\"".into()));
    fixture.file = fixture.cfg.write(&fixture.dir);
    let service = Service::spawn(&fixture.file, &[], &fixture.dir.join("b.log"));
    service
        .wait_for_landed(&fixture.log, 8, Duration::from_secs(120))
        .await;
    // The table's log against the commit log (the content differs from the source by design:
    // ALTER TABLE rewrote rows 1 to 5 as text without sending a change).
    let verified = verify(&fixture.file, &["--identities-only"]).await;
    assert_eq!(verified.code, 0, "{verified}");
    let log = service.stop().await;
    assert!(
        log.contains("this version of the table replaces its schema"),
        "{log}"
    );

    let after = read_delta(&table_uri(&fixture, "public.t"), &fixture.cfg.sink_options);
    let amounts: Vec<Option<&str>> = after.rows.iter().map(|r| r["amount"].as_deref()).collect();
    assert_eq!(amounts, [Some("x6"), Some("x7"), Some("x8")]);
    let amount = after.schema.iter().find(|(n, ..)| n == "amount").unwrap();
    assert_eq!(amount.1, "string");
    // The rows before the change are where they were, one version back.
    let earlier = read_delta_version(
        &table_uri(&fixture, "public.t"),
        &fixture.cfg.sink_options,
        Some(after.version - 1),
    );
    let amounts: Vec<Option<&str>> = earlier
        .rows
        .iter()
        .map(|r| r["amount"].as_deref())
        .collect();
    assert_eq!(
        amounts,
        [Some("10"), Some("20"), Some("30"), Some("40"), Some("50")]
    );
    check_history(&fixture.sink, &fixture.log, "public.t").await;
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// A plugin's declared output and the dead-letter output are Delta tables like a source
/// table's: each its own log, one version per flush that touched it with that flush's `txn`,
/// read back by delta-rs with the rows the plugin made and the change it rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_output_and_the_dead_letters_land_as_delta_tables() {
    let db = fresh_database("delta_outputs").await;
    db.client
        .batch_execute("CREATE TABLE signups (id bigint PRIMARY KEY, payload text)")
        .await
        .unwrap();
    let mut fixture = delta_fixture(&db, "delta_outputs", &["public.signups"]).await;
    // flatten lands each signup's plan in `flattened` beside the table's own output, and
    // rejects a payload that is not JSON, which goes to the dead letters.
    fixture.cfg.sections.push(format!(
        "[[transform]]\nplugin = {:?}\non_error = \"dead-letter\"\n\
         config = {{ column = \"payload\", fields = \"plan:text\", copy = \"id:int8\" }}",
        tributary_tests::plugin("flatten").display().to_string()
    ));
    fixture.file = fixture.cfg.write(&fixture.dir);
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    db.client
        .batch_execute(
            r#"INSERT INTO signups VALUES (1, '{"plan": "pro"}'), (2, '{"plan": "free"}'), (3, '{oops');
               INSERT INTO signups VALUES (4, '{"plan": "team"}');
               UPDATE signups SET payload = '{"plan": "pro"}' WHERE id = 2;"#,
        )
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 5, Duration::from_secs(60))
        .await;
    let verified = verify(&fixture.file, &["--identities-only"]).await;
    service.stop().await;
    assert_eq!(verified.code, 0, "{verified}");
    for output in ["public.signups", "flattened", "_dead_letters"] {
        assert!(
            verified
                .stdout
                .lines()
                .any(|l| l.starts_with(&format!("delta table {output}: version"))
                    && l.ends_with("intact")),
            "{verified}"
        );
        check_history(&fixture.sink, &fixture.log, output).await;
    }

    let flattened = read_delta(&table_uri(&fixture, "flattened"), &fixture.cfg.sink_options);
    let plans: Vec<(String, String, String)> = flattened
        .rows
        .iter()
        .map(|r| {
            let text = |c: &str| r[c].clone().unwrap_or_else(|| panic!("{c}: {r:?}"));
            (text("_op"), text("id"), text("plan"))
        })
        .collect();
    let expected = [
        ("insert", "1", "pro"),
        ("insert", "2", "free"),
        ("insert", "4", "team"),
        ("update", "2", "pro"),
    ]
    .map(|(op, id, plan)| (op.to_owned(), id.to_owned(), plan.to_owned()));
    assert_eq!(plans, expected);
    let names: Vec<&str> = flattened.schema.iter().map(|c| c.0.as_str()).collect();
    assert!(
        names.starts_with(&["_op", "_commit_lsn", "_seq"])
            && names.ends_with(&["id", "plan", "_sub"]),
        "{names:?}"
    );

    let dead = read_delta(
        &table_uri(&fixture, "_dead_letters"),
        &fixture.cfg.sink_options,
    );
    assert_eq!(dead.rows.len(), 1, "{:?}", dead.rows);
    let letter = &dead.rows[0];
    assert_eq!(letter["table"].as_deref(), Some("public.signups"));
    assert_eq!(letter["plugin"].as_deref(), Some("flatten"));
    assert_eq!(letter["class"].as_deref(), Some("parse"));
    assert!(
        letter["row"].as_deref().unwrap().contains("{oops"),
        "{letter:?}"
    );
    // flatten keeps every change in its table's output too (its `keep` setting), the
    // rejected one included.
    let signups = read_delta(
        &table_uri(&fixture, "public.signups"),
        &fixture.cfg.sink_options,
    );
    let ids: BTreeSet<&str> = signups
        .rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from(["1", "2", "3", "4"]));
    assert_eq!(signups.rows.len(), 5);
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// Wait until `table` holds the latest commit entry (the publish step follows the entry).
/// Wait until the commit log records a finished load of `table`.
pub(super) async fn wait_for_load_of(fixture: &Fixture, table: &str, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let loaded = entries(&fixture.log).await.into_iter().any(|e| {
            e.load
                .is_some_and(|l| l.tables.iter().any(|t| t.table == table && t.finished()))
        });
        if loaded {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no load of {table} finished within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(super) async fn wait_for_table(fixture: &Fixture, table: &str, timeout: Duration) {
    let latest = fixture.log.latest().await.unwrap().unwrap().sequence;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let txns = delta_txn_versions(&fixture.sink, table).await;
        if txns.last().copied().flatten() >= Some(latest) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{table} did not reach entry {latest} within {timeout:?}: {txns:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A flush whose keys lie in every file of a current-state table rewrites every file, one at a
/// time: the process's peak memory over that flush stays far below the table's size, and the
/// table still equals the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_that_rewrites_every_file_of_a_current_state_table_holds_one_file_at_a_time() {
    const ROWS: u64 = 100_000;
    let (db, fixture) = t_fixture("delta_rewrite", |cfg| {
        cfg.sections.push(mirror_section("public.t"));
        cfg.sections.push("[parquet]\ntarget_file_mb = 1".into());
    })
    .await;
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // About 1 KiB of hex digits a row: some 100 MiB of rows, in files of a few MiB (a file is
    // cut at the target size between chunks of 8192 rows).
    db.client
        .batch_execute(&format!(
            "INSERT INTO t SELECT g, (SELECT string_agg(md5(random()::text || g || i), '')
                                      FROM generate_series(1, 32) i)
             FROM generate_series(1, {ROWS}) g"
        ))
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, ROWS, Duration::from_secs(600))
        .await;
    wait_for_table(&fixture, "public.t__current", Duration::from_secs(300)).await;
    service.stop().await;
    let (code, status, err) = command("status", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{err}");
    let files: u64 = status
        .lines()
        .find_map(|l| {
            let l = l.trim_start().strip_prefix("public.t__current")?;
            l.rsplit(", ").next()?.strip_suffix(" files")?.parse().ok()
        })
        .unwrap_or_else(|| panic!("{status}"));
    assert!(files >= 10, "{files} files: {status}");

    // A fresh process, so its peak is this flush's: 50 updates, one in every 2000 keys, so in
    // every file.
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run2.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let idle = peak_rss_mib(service.pid());
    db.client
        .batch_execute("UPDATE t SET body = 'changed ' || id WHERE id % 2000 = 0")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, ROWS + 50, Duration::from_secs(300))
        .await;
    wait_for_table(&fixture, "public.t__current", Duration::from_secs(300)).await;
    let verified = verify(&fixture.file, &[]).await;
    let peak = peak_rss_mib(service.pid());
    let log = service.stop().await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .contains("current-state table public.t__current: version")
            && verified
                .stdout
                .contains(&format!("{ROWS} rows, equal to the source")),
        "{verified}"
    );
    let (_, status, _) = command("status", &fixture.file, &[], &[]).await;
    eprintln!("{files} files before the update; peak RSS {peak} MiB, idle {idle} MiB\n{status}");
    assert!(
        peak <= idle + 64,
        "the update's flush peaked at {peak} MiB against {idle} MiB idle, over {files} files:\n{log}"
    );
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// A SIGKILL between the parts of a large transaction, which land as one flush in parts with
/// no commit entry until the last: the tables never show a part, and after the restart the
/// transaction is in the change-log table once and in the current-state table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_parts_of_a_large_transaction_shows_no_part_and_lands_it_once() {
    const ROWS: u64 = 100_000;
    let (db, fixture) = t_fixture("delta_parts", |cfg| {
        cfg.sections.push(mirror_section("public.t"));
        cfg.flush = vec![
            ("in_flight_mib".into(), "16".into()),
            ("chunk_mib".into(), "1".into()),
        ];
    })
    .await;
    let mut a = Service::spawn_with(
        &fixture.file,
        &[],
        &fixture.dir.join("a.log"),
        &[("TRIBUTARY_FAILPOINTS", "flush.after-part@3")],
    );
    a.wait_for_log("streaming", Duration::from_secs(120)).await;
    db.client
        .batch_execute("INSERT INTO t VALUES (0, 'before')")
        .await
        .unwrap();
    a.wait_for_landed(&fixture.log, 1, Duration::from_secs(60))
        .await;
    wait_for_table(&fixture, "public.t__current", Duration::from_secs(60)).await;
    db.client
        .batch_execute(&format!(
            "INSERT INTO t SELECT g, 'row ' || g || repeat('x', 100) FROM generate_series(1, {ROWS}) g"
        ))
        .await
        .unwrap();
    a.wait_for_log(
        "failpoint flush.after-part reached",
        Duration::from_secs(120),
    )
    .await;
    a.kill().await;
    for table in ["public.t", "public.t__current"] {
        let read = read_delta(&table_uri(&fixture, table), &fixture.cfg.sink_options);
        assert_eq!(read.rows.len(), 1, "{table}: no part of the transaction");
    }

    let mut b = Service::spawn(&fixture.file, &[], &fixture.dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(120)).await;
    b.wait_for_landed(&fixture.log, ROWS + 1, Duration::from_secs(300))
        .await;
    wait_for_table(&fixture, "public.t__current", Duration::from_secs(120)).await;
    let verified = verify(&fixture.file, &[]).await;
    let b_log = b.stop().await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .contains(&format!("{} rows, equal to the source", ROWS + 1)),
        "{verified}"
    );
    check_history(&fixture.sink, &fixture.log, "public.t").await;
    let read = read_delta(&table_uri(&fixture, "public.t"), &fixture.cfg.sink_options);
    let ids: BTreeSet<&str> = read
        .rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap())
        .collect();
    assert_eq!(
        read.rows.len() as u64,
        ROWS + 1,
        "every change once: {b_log}"
    );
    assert_eq!(ids.len() as u64, ROWS + 1);
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}
