//! A real `tributary run` is killed with SIGKILL at each step of the flush protocol (see
//! `runtime/src/failpoint.rs`), then started again. Each time every change lands exactly once,
//! the slot ends confirmed exactly to the last commit entry, and no data file or intent is
//! left that no commit entry names.

use std::collections::BTreeSet;
use std::time::Duration;

use tributary::Lsn;
use tributary::lake::commit::{CommitEntry, CommitLog};
use tributary::lake::sink::Sink;
use tributary_tests::lake::{committed_rows, object_names, read_output};
use tributary_tests::pipeline::{confirmed_flush, wait_for_confirmed};
use tributary_tests::service::{Fixture, Service};
use tributary_tests::{TestDatabase, fresh_database};

pub(crate) const TABLES: [&str; 3] = ["public.t1", "public.t2", "public.t3"];

/// One transaction writing ids `from..from+10` to each of the three tables: three data files
/// per flush.
pub(crate) fn transaction(from: u32) -> String {
    let to = from + 9;
    TABLES
        .iter()
        .map(|t| {
            format!("INSERT INTO {t} SELECT g, 'row ' || g FROM generate_series({from}, {to}) g;")
        })
        .collect()
}

/// Create the three tables in `db`.
pub(crate) async fn create_tables(db: &TestDatabase) {
    for table in TABLES {
        db.client
            .batch_execute(&format!(
                "CREATE TABLE {table} (id int PRIMARY KEY, body text)"
            ))
            .await
            .unwrap();
    }
}

/// Run `fixture`'s pipeline with failpoint `point` armed at its `hit`-th pass, land a first
/// transaction, write a second, and kill the process (SIGKILL) where the point stops it.
pub(crate) async fn kill_at(db: &TestDatabase, fixture: &Fixture, point: &str, hit: u32) {
    let armed = format!("{point}@{hit}");
    let mut a = Service::spawn_with(
        &fixture.file,
        &[],
        &fixture.dir.join("a.log"),
        &[("TRIBUTARY_FAILPOINTS", &armed)],
    );
    a.wait_for_log("streaming", Duration::from_secs(120)).await;
    db.client.batch_execute(&transaction(1)).await.unwrap();
    a.wait_for_landed(&fixture.log, 30, Duration::from_secs(60))
        .await;
    db.client.batch_execute(&transaction(11)).await.unwrap();
    a.wait_for_log(
        &format!("failpoint {point} reached"),
        Duration::from_secs(60),
    )
    .await;
    a.kill().await;
}

async fn wait_for_rows(sink: &Sink, per_table: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for table in TABLES {
        while read_output(sink.store().as_ref(), table).await.len() < per_table {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{table} did not reach {per_table} rows"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn names(sink: &Sink, prefix: &str) -> Vec<String> {
    object_names(sink.store().as_ref(), prefix).await
}

/// Data files of flush `sequence`, over the three tables.
async fn files_of(sink: &Sink, sequence: u64) -> usize {
    let mut count = 0;
    for table in TABLES {
        let part = format!("{table}/part-{sequence:020}-");
        count += names(sink, table)
            .await
            .iter()
            .filter(|n| n.starts_with(&part))
            .count();
    }
    count
}

async fn entry(log: &CommitLog, sequence: u64) -> Option<CommitEntry> {
    log.read_entry(sequence).await.unwrap()
}

/// A database with the three tables, a fixture landing them, and a service with the
/// failpoints `armed` (`point@hit`), streaming.
async fn armed_service(hint: &str, armed: &str) -> (TestDatabase, Fixture, Service) {
    let db = fresh_database(hint).await;
    create_tables(&db).await;
    let fixture = Fixture::new(&db.url, hint, &TABLES).await;
    let mut service = Service::spawn_with(
        &fixture.file,
        &[],
        &fixture.dir.join("a.log"),
        &[("TRIBUTARY_FAILPOINTS", armed)],
    );
    service
        .wait_for_log(
            &format!("failpoints armed: {armed}"),
            Duration::from_secs(60),
        )
        .await;
    service
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    (db, fixture, service)
}

/// Land one transaction, kill the service at `point` (its `hit`-th pass) in the flush of the
/// second, check what the sink and the slot show at that moment with `at_crash`, restart
/// without failpoints, land a third, and check the outcome.
async fn crash_at(point: &str, hit: u32) {
    let hint = point.replace(['.', '-'], "_");
    let (
        db,
        Fixture {
            name,
            sink,
            log,
            dir,
            file,
            ..
        },
        mut a,
    ) = armed_service(&hint, &format!("{point}@{hit}")).await;
    db.client.batch_execute(&transaction(1)).await.unwrap();
    wait_for_rows(&sink, 10).await;
    let crashing = log.latest().await.unwrap().unwrap().sequence + 1;

    db.client.batch_execute(&transaction(11)).await.unwrap();
    a.wait_for_log(
        &format!("failpoint {point} reached"),
        Duration::from_secs(60),
    )
    .await;
    let before = log.read_entry(crashing - 1).await.unwrap().unwrap();
    let intents = names(&sink, "_tributary/intent").await;
    match point {
        "flush.after-intent" => {
            assert_eq!(intents.len(), 1, "{intents:?}");
            assert_eq!(files_of(&sink, crashing).await, 0);
            assert!(entry(&log, crashing).await.is_none());
        }
        "flush.after-file" => {
            let files = files_of(&sink, crashing).await;
            assert!(
                (1..=3).contains(&files),
                "{files} files of flush {crashing}"
            );
            assert!(entry(&log, crashing).await.is_none());
        }
        "flush.before-commit" => {
            assert_eq!(files_of(&sink, crashing).await, 3);
            assert!(entry(&log, crashing).await.is_none());
        }
        "flush.after-commit" => {
            assert!(entry(&log, crashing).await.is_some());
            tokio::time::sleep(Duration::from_millis(500)).await;
            let confirmed = confirmed_flush(&db.client, &name).await.unwrap();
            assert!(
                confirmed <= before.last_end_lsn,
                "confirmed {confirmed} before the confirm step"
            );
        }
        "flush.after-confirm" => {
            let committed = entry(&log, crashing).await.expect("the entry exists");
            assert_eq!(
                wait_for_confirmed(&db.client, &name, committed.last_end_lsn).await,
                committed.last_end_lsn
            );
            assert_eq!(intents.len(), 1, "the intent is still there: {intents:?}");
        }
        other => panic!("no checks for {other}"),
    }
    a.kill().await;

    // The next run cleans up, lands what was lost in the crash and what comes after.
    let mut b = Service::spawn(&file, &[], &dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client.batch_execute(&transaction(21)).await.unwrap();
    wait_for_rows(&sink, 30).await;
    let b_log = b.stop().await;

    for table in TABLES {
        let ids: Vec<u32> = committed_rows(&sink, table)
            .await
            .iter()
            .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            ids.iter().copied().collect::<BTreeSet<_>>(),
            (1..=30).collect(),
            "{table}: {b_log}"
        );
        assert_eq!(ids.len(), 30, "{table}: a change landed twice");
    }
    let last = log.latest().await.unwrap().unwrap();
    let confirmed: Lsn = wait_for_confirmed(&db.client, &name, last.last_end_lsn).await;
    assert_eq!(
        confirmed, last.last_end_lsn,
        "the slot is confirmed to the last entry"
    );
    assert_eq!(
        names(&sink, "_tributary/intent").await,
        Vec::<String>::new(),
        "no intent is left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_intent_lands_every_change_once() {
    crash_at("flush.after-intent", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_first_data_file_of_a_flush_lands_every_change_once() {
    // Three files per flush: the fourth file is the first of the second flush.
    crash_at("flush.after-file", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_every_file_and_before_the_commit_entry_lands_every_change_once() {
    crash_at("flush.before-commit", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_commit_entry_and_before_the_confirm_lands_every_change_once() {
    crash_at("flush.after-commit", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_confirm_and_before_the_intent_is_cleared_lands_every_change_once() {
    crash_at("flush.after-confirm", 2).await;
}

/// Regression (found by the chaos test, long mode, seed 13175979244400301411): an instance
/// killed while one flush waited for its commit entry had already written the intents and files
/// of the flushes after it. The next start took those intents for a newer writer's: it left
/// their files in the sink (uncommitted copies of changes it then landed itself, seen by every
/// reader that globs the files) and warned that it would stop at its next commit, which it did
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_later_flushes_uploaded_ahead_of_a_commit_leaves_none_of_their_files() {
    let (
        db,
        Fixture {
            sink,
            log,
            dir,
            file,
            ..
        },
        mut a,
    ) = armed_service("uploaded_ahead", "flush.before-commit@2").await;
    db.client.batch_execute(&transaction(1)).await.unwrap();
    wait_for_rows(&sink, 10).await;
    let waiting = log.latest().await.unwrap().unwrap().sequence + 1;
    db.client.batch_execute(&transaction(11)).await.unwrap();
    a.wait_for_log(
        "failpoint flush.before-commit reached",
        Duration::from_secs(60),
    )
    .await;
    // The flushes after it go on: intents and files, their commits waiting their turn.
    for from in [21, 31] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        db.client.batch_execute(&transaction(from)).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while files_of(&sink, waiting + 2).await < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "flush {} was not uploaded ahead:\n{}",
            waiting + 2,
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(names(&sink, "_tributary/intent").await.len() >= 3);
    a.kill().await;

    let mut b = Service::spawn(&file, &[], &dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(60)).await;
    b.wait_for_landed(&log, 120, Duration::from_secs(60)).await;
    let b_log = b.stop().await;
    assert!(
        !b_log.contains("started after this one"),
        "the killed instance's intents are not a newer writer's:\n{b_log}"
    );
    // Checked before any other start could clean up: every file is named by an entry.
    for table in TABLES {
        let ids: BTreeSet<u32> = committed_rows(&sink, table)
            .await
            .iter()
            .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
            .collect();
        assert_eq!(ids, (1..=40).collect(), "{table}: {b_log}");
    }
    assert_eq!(
        names(&sink, "_tributary/intent").await,
        Vec::<String>::new()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
