//! `tributary verify` against lakes a real `tributary run` landed: a mixed workload over many
//! types is reported equal (exit 0) without leaving a slot behind, and each planted defect is
//! found and named (exit 1): a committed file deleted, a committed file copied (named by no
//! entry, then named by an entry too, so its changes land twice), and a row changed while
//! the table was out of the publication, behind the slot's back; unchanged TOAST values take
//! their earlier version's. A stopped pipeline and a pipeline with transforms are refused with
//! what to do (exit 2).

use std::path::Path as FsPath;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tributary::lake::commit::{CommitEntry, EntryKind};
use tributary_tests::fresh_database;
use tributary_tests::lake::landed_changes;
use tributary_tests::service::{Fixture, Service, Verified, verify};

const EVENTS: &str = "public.events";

/// Run `tributary verify --config <file>`, which must find differences (exit 1).
async fn differs(file: &FsPath) -> Verified {
    let verified = verify(file, &[]).await;
    assert_eq!(verified.code, 1, "{verified}");
    verified
}

/// Temporary slots of verify left in this database.
async fn verify_slots(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots
             WHERE slot_name LIKE 'tributary_verify_%' AND database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Start `tributary run` on the fixture and wait until it streams.
async fn start(fixture: &Fixture, log: &str) -> Service {
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join(log));
    service
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    service
}

/// Run `sql` on the source and wait until `changes` changes have landed in all.
async fn land(
    db: &tributary_tests::TestDatabase,
    fixture: &Fixture,
    service: &Service,
    sql: &str,
    changes: u64,
) {
    db.client.batch_execute(sql).await.unwrap();
    service
        .wait_for_landed(&fixture.log, changes, Duration::from_secs(90))
        .await;
}

/// The flush entries that name files, in log order.
async fn flushes_with_files(fixture: &Fixture) -> Vec<CommitEntry> {
    let mut entries = Vec::new();
    for sequence in fixture.log.sequences().await.unwrap() {
        let entry = fixture.log.read_entry(sequence).await.unwrap().unwrap();
        if entry.kind == EntryKind::Flush && !entry.files.is_empty() {
            entries.push(entry);
        }
    }
    entries
}

const KINDS: &str = "
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    CREATE TABLE kinds (
        id bigint PRIMARY KEY, n numeric(12,3), u numeric, f float8, r real, b bool,
        t timestamptz, ts timestamp, d date, tm time, tz timetz, iv interval, j jsonb,
        by bytea, uu uuid, ints int[], texts text[], m mood, ip inet, cash money, pt point,
        s smallint, o oid, c char(3), v varchar(10)
    );
    CREATE TABLE notes (body text, n int);
    ALTER TABLE notes REPLICA IDENTITY FULL;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lake_landed_from_a_mixed_workload_equals_its_source_and_no_slot_is_left() {
    let db = fresh_database("verify_clean").await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE events (id int PRIMARY KEY, body text); {KINDS}"
        ))
        .await
        .unwrap();
    let fixture = Fixture::new(
        &db.url,
        "verify_clean",
        &[EVENTS, "public.kinds", "public.notes"],
    )
    .await;
    let service = start(&fixture, "run.log").await;

    // 300 + 30 + 42 + 2 + 3 events, 3 + 1 + 1 kinds, 3 + 1 + 4 + 1 + 1 notes.
    let changes = 377 + 5 + 10;
    let workload = "INSERT INTO events SELECT g, 'e' || g FROM generate_series(1, 300) g;
             UPDATE events SET body = 'updated ' || id WHERE id % 10 = 0;
             DELETE FROM events WHERE id % 7 = 0;
             UPDATE events SET id = id + 1000 WHERE id IN (3, 4);
             BEGIN;
             INSERT INTO events VALUES (2000, 'in a transaction');
             UPDATE events SET body = NULL WHERE id = 2000;
             DELETE FROM events WHERE id = 1;
             COMMIT;
             INSERT INTO kinds VALUES
               (1, 12.5, 'NaN', 'Infinity', -0.5, true, '2024-02-29 12:34:56.789+05:30',
                '1999-12-31 23:59:59.999999', 'infinity', '24:00:00', '10:00:00+02', '1 year 2 mons -3 days 04:05:06.7',
                '{\"a\": [1, 2, {\"b\": null}]}', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
                '{1,NULL,3}', '{\"a, b\",NULL,\"\"}', 'happy', '192.168.0.1/24', '-12.34', '(1.5,-2)',
                -32768, 4294967295, 'ab', 'x'),
               (2, NULL, '-1.000000000000000000000000000000000000000001', '-Infinity', 'NaN', false,
                '-infinity', '0001-01-01 00:00:00', '0001-01-01', '00:00:00', '23:59:59-14', '0 seconds',
                'null', '', NULL, '{}', '{}', 'sad', '::1', '0', NULL, 0, 0, NULL, ''),
               (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
             UPDATE kinds SET m = 'ok', j = '[]', ints = '{4,5}' WHERE id = 2;
             DELETE FROM kinds WHERE id = 3;
             INSERT INTO notes VALUES ('gone', 1), ('gone', 1), ('kept', 2);
             TRUNCATE notes;
             INSERT INTO notes VALUES ('same', 1), ('same', 1), ('other', 2), ('moved', 3);
             UPDATE notes SET n = 30 WHERE body = 'moved';
             DELETE FROM notes WHERE body = 'other';";
    land(&db, &fixture, &service, workload, changes).await;
    // The pipeline is idle now: only verify's own message can move its log past the snapshot.
    let entries_before = fixture.log.sequences().await.unwrap().len();

    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    let events: i64 = db
        .client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    for line in [
        format!("{EVENTS}: equal ({events} rows)"),
        "public.kinds: equal (2 rows)".to_owned(),
        "public.notes: equal (3 rows)".to_owned(),
        "duplicates: none".to_owned(),
    ] {
        assert!(
            verified.stdout.lines().any(|l| l == line),
            "no line {line:?}:\n{verified}"
        );
    }
    assert!(
        verified.stdout.contains("committed data files, all intact"),
        "{verified}"
    );
    assert!(
        verified
            .last_line()
            .starts_with("verify: the lake equals the source at "),
        "{verified}"
    );
    assert!(
        fixture.log.sequences().await.unwrap().len() > entries_before,
        "the pipeline committed an entry for verify's message"
    );
    assert_eq!(verify_slots(&db.client).await, 0, "no slot is left behind");

    // One table, as asked.
    let one = verify(&fixture.file, &["--table", "public.notes"]).await;
    assert_eq!(one.code, 0, "{one}");
    assert!(!one.stdout.contains(EVENTS), "{one}");
    let unknown = verify(&fixture.file, &["--table", "public.nope"]).await;
    assert_eq!(unknown.code, 2, "{unknown}");
    assert!(
        unknown
            .stderr
            .contains("table public.nope is not tracked by this pipeline"),
        "{unknown}"
    );
    service.stop().await;
    assert_eq!(verify_slots(&db.client).await, 0);
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_running_workload_the_snapshot_splits_the_changes_exactly() {
    let db = tributary_tests::pipeline::events_database("verify_running").await;
    let fixture = Fixture::new(&db.url, "verify_running", &[EVENTS]).await;
    let service = start(&fixture, "run.log").await;
    let rows = "INSERT INTO events SELECT g, 'v0' FROM generate_series(1, 100) g";
    land(&db, &fixture, &service, rows, 100).await;

    // Small transactions commit all the while verify takes its snapshot and the pipeline lands
    // them: whatever committed before the snapshot must be in the lake's replay, and nothing
    // after it.
    let writer = tributary_tests::connect(&db.url).await;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let workload = tokio::spawn(async move {
        let mut n = 0;
        while !*stopped.borrow_and_update() {
            n += 1;
            writer
                .batch_execute(&format!(
                    "BEGIN;
                     UPDATE events SET body = 'v{n}' WHERE id = {};
                     INSERT INTO events VALUES ({}, 'new');
                     DELETE FROM events WHERE id = {};
                     COMMIT;",
                    n % 100 + 1,
                    1000 + n,
                    1000 + n - 1
                ))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let verified = verify(&fixture.file, &[]).await;
    stop.send(true).unwrap();
    let transactions = workload.await.unwrap();
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .contains(&format!("{EVENTS}: equal (101 rows)")),
        "{verified}"
    );
    assert!(
        transactions > 20,
        "the workload ran: {transactions} transactions"
    );
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

/// A table of rows 1..=5 landed in one flush, then rows 6..=8 and an update in later ones.
async fn two_flushes(hint: &str) -> (tributary_tests::TestDatabase, Fixture, Service) {
    let db = tributary_tests::pipeline::events_database(hint).await;
    let fixture = Fixture::new(&db.url, hint, &[EVENTS]).await;
    let service = start(&fixture, "run.log").await;
    let first = "INSERT INTO events SELECT g, 'first ' || g FROM generate_series(1, 5) g";
    land(&db, &fixture, &service, first, 5).await;
    let later = "INSERT INTO events SELECT g, 'later ' || g FROM generate_series(6, 8) g;
                 UPDATE events SET body = 'updated' WHERE id = 6;";
    land(&db, &fixture, &service, later, 9).await;
    (db, fixture, service)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_data_file_is_named_with_the_rows_it_held() {
    let (db, fixture, service) = two_flushes("verify_deleted").await;
    let first = flushes_with_files(&fixture).await.remove(0);
    let file = first.files[0].clone();
    assert_eq!(file.rows, 5);
    fixture
        .sink
        .store()
        .delete(&Path::from(file.path.as_str()))
        .await
        .unwrap();

    let verified = differs(&fixture.file).await;
    let out = &verified.stdout;
    assert!(
        out.contains(&format!(
            "  missing: {} (entry {}: 5 rows, {} bytes)",
            file.path, first.sequence, file.bytes
        )),
        "{verified}"
    );
    assert!(
        out.contains(&format!(
            "{EVENTS}: DIFFERENT (source 8 rows, lake 3 rows: 5 missing, 0 extra, 0 changed)"
        )),
        "{verified}"
    );
    assert!(
        out.contains("  missing id=1\n    source: id=1, body=\"first 1\"\n"),
        "{verified}"
    );
    assert!(
        verified
            .last_line()
            .starts_with("verify: 6 differences at ")
            && verified.last_line().ends_with(": 5 rows, 1 missing file"),
        "{verified}"
    );
    assert_eq!(verify_slots(&db.client).await, 0);

    // Stopped, the pipeline cannot reach a new snapshot: verify says so and gives up.
    service.stop().await;
    let stopped = verify(&fixture.file, &[]).await;
    assert_eq!(stopped.code, 2, "{stopped}");
    assert!(
        stopped
            .stderr
            .contains("error: the pipeline is not running: slot")
            && stopped.stderr.contains("start it with `tributary run`"),
        "{stopped}"
    );
    assert_eq!(verify_slots(&db.client).await, 0);
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_file_is_named_and_once_an_entry_names_it_its_changes_land_twice() {
    let (_db, fixture, service) = two_flushes("verify_duplicated").await;
    let mut first = flushes_with_files(&fixture).await.remove(0);
    let original = first.files[0].clone();
    let copy = original.path.replace(".parquet", "-copy.parquet");
    let store = fixture.sink.store();
    store
        .copy(
            &Path::from(original.path.as_str()),
            &Path::from(copy.as_str()),
        )
        .await
        .unwrap();

    let verified = differs(&fixture.file).await;
    assert!(
        verified.stdout.contains(&format!(
            "  named by no entry: {copy} ({} bytes)",
            original.bytes
        )),
        "{verified}"
    );
    assert!(
        verified
            .stdout
            .contains(&format!("{EVENTS}: equal (8 rows)")),
        "a file no entry names is not part of the lake: {verified}"
    );
    assert!(
        verified.last_line().ends_with(": 1 file named by no entry"),
        "{verified}"
    );

    // An entry rewritten to name the copy as well: its five changes are now in the lake twice.
    let mut named = original.clone();
    named.path = copy.clone();
    first.files.push(named);
    let entry_path = Path::from(format!("_tributary/log/{:020}.json", first.sequence));
    store
        .put(
            &entry_path,
            PutPayload::from(Bytes::from(serde_json::to_vec_pretty(&first).unwrap())),
        )
        .await
        .unwrap();
    let verified = differs(&fixture.file).await;
    let out = &verified.stdout;
    assert!(
        out.contains("duplicates: 5 change identities landed more than once"),
        "{verified}"
    );
    assert!(
        out.contains(&format!(
            "  {EVENTS} ({}, seq 0, sub 0): {} row 0 and {copy} row 0",
            tributary::Lsn(
                tributary_tests::lake::read_output(store.as_ref(), EVENTS).await[0].commit_lsn
            ),
            original.path
        )),
        "{verified}"
    );
    assert!(!out.contains("named by no entry"), "{verified}");
    assert!(
        out.contains(&format!("{EVENTS}: equal (8 rows)")),
        "a duplicate is replayed once: {verified}"
    );
    assert!(
        verified
            .last_line()
            .ends_with(": 5 duplicate change identities"),
        "{verified}"
    );
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_changed_behind_the_slots_back_is_printed_with_both_values() {
    let (db, fixture, service) = two_flushes("verify_behind").await;
    let publication = &fixture.name;
    let behind = format!(
        "ALTER PUBLICATION {publication} DROP TABLE events;
         UPDATE events SET body = 'behind the slot' WHERE id = 2;
         ALTER PUBLICATION {publication} ADD TABLE events;
         INSERT INTO events VALUES (9, 'after');"
    );
    land(&db, &fixture, &service, &behind, 10).await;
    let landed = landed_changes(&fixture.log).await;
    assert_eq!(landed, 10, "the update never reached the lake");

    let verified = differs(&fixture.file).await;
    let out = &verified.stdout;
    assert!(
        out.contains(&format!(
            "{EVENTS}: DIFFERENT (source 9 rows, lake 9 rows: 0 missing, 0 extra, 1 changed)\n  changed id=2\n    source: id=2, body=\"behind the slot\"\n    lake:   id=2, body=\"first 2\"\n"
        )),
        "{verified}"
    );
    let first = flushes_with_files(&fixture).await.remove(0);
    assert!(
        out.contains(&format!("({} row 1, change ", first.files[0].path)),
        "where the lake's version is: {verified}"
    );
    assert!(verified.last_line().ends_with(": 1 row"), "{verified}");
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_toast_values_take_their_earlier_version_and_one_the_lake_never_had_is_named() {
    let db = fresh_database("verify_toast").await;
    // EXTERNAL storage keeps a long value uncompressed, so it can only live out of line.
    db.client
        .batch_execute(
            "CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
             ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
             INSERT INTO docs VALUES (2, 'before the lake', repeat('b', 100000));",
        )
        .await
        .unwrap();
    let fixture = Fixture::new(&db.url, "verify_toast", &["public.docs"]).await;
    let service = start(&fixture, "run.log").await;
    let updates = "INSERT INTO docs VALUES (1, 'draft', repeat('a', 100000));
                   UPDATE docs SET title = 'final' WHERE id = 1;
                   UPDATE docs SET title = 'renamed' WHERE id = 2;";
    land(&db, &fixture, &service, updates, 3).await;
    let rows =
        tributary_tests::lake::read_output(fixture.sink.store().as_ref(), "public.docs").await;
    let toasted: Vec<Option<&str>> = rows.iter().map(|r| r.unchanged_toast.as_deref()).collect();
    assert_eq!(toasted, [None, Some("[body]"), Some("[body]")], "{rows:#?}");

    // Row 1's update takes its body from the insert; row 2's body never reached the lake.
    let verified = differs(&fixture.file).await;
    let out = &verified.stdout;
    assert!(
        out.contains(
            "public.docs: DIFFERENT (source 2 rows, lake 2 rows: 0 missing, 0 extra, 1 changed)\n  changed id=2\n"
        ),
        "{verified}"
    );
    assert!(
        out.contains(
            "    lake:   id=2, title=\"renamed\", body=(unchanged TOAST value the lake never had)\n"
        ),
        "{verified}"
    );
    assert!(!out.contains("changed id=1"), "{verified}");
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_transforms_only_identities_are_checked_and_only_when_asked() {
    let db = tributary_tests::pipeline::events_database("verify_transforms").await;
    let mut fixture = Fixture::new(&db.url, "verify_transforms", &[EVENTS]).await;
    fixture.cfg.transforms = vec![tributary_tests::plugin("passthrough")];
    fixture.file = fixture.cfg.write(&fixture.dir);
    let service = start(&fixture, "run.log").await;
    let rows = "INSERT INTO events SELECT g, 'x' FROM generate_series(1, 4) g";
    land(&db, &fixture, &service, rows, 4).await;

    let refused = verify(&fixture.file, &[]).await;
    assert_eq!(refused.code, 2, "{refused}");
    assert!(
        refused
            .stderr
            .contains("error: the pipeline transforms what lands (")
            && refused.stderr.contains("--identities-only"),
        "{refused}"
    );
    let checked = verify(&fixture.file, &["--identities-only"]).await;
    assert_eq!(checked.code, 0, "{checked}");
    assert!(
        checked
            .stdout
            .contains(&format!("{EVENTS}: 4 rows landed (content not compared)")),
        "{checked}"
    );
    assert_eq!(
        checked.last_line(),
        "verify: the lake's files are intact and no change landed twice (content not compared)",
        "{checked}"
    );
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

/// How long verify takes on a large lake (`TRIBUTARY_VERIFY_ROWS`, a million by default):
/// `cargo test ... -- --ignored verify::how_long`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn how_long_verify_takes_on_a_large_lake() {
    let rows: i64 = std::env::var("TRIBUTARY_VERIFY_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let db = tributary_tests::pipeline::events_database("verify_large").await;
    let mut fixture = Fixture::new(&db.url, "verify_large", &[EVENTS]).await;
    fixture.cfg.max_rows = 100_000;
    fixture.file = fixture.cfg.write(&fixture.dir);
    let service = start(&fixture, "run.log").await;
    let started = std::time::Instant::now();
    db.client
        .batch_execute(&format!(
            "INSERT INTO events SELECT g, md5(g::text) FROM generate_series(1, {rows}) g;
             UPDATE events SET body = 'updated' WHERE id % 10 = 0;
             DELETE FROM events WHERE id % 10 = 1;"
        ))
        .await
        .unwrap();
    let changes = (rows + rows / 5) as u64;
    service
        .wait_for_landed(&fixture.log, changes, Duration::from_secs(1800))
        .await;
    eprintln!("landed {changes} changes in {:?}", started.elapsed());
    let started = std::time::Instant::now();
    let verified = verify(&fixture.file, &[]).await;
    eprintln!("verify took {:?}:\n{verified}", started.elapsed());
    assert_eq!(verified.code, 0, "{verified}");
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}
