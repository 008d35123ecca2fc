//! Failover readiness (issue 36): whether the standby holds a copy of the failover slot that a
//! promotion keeps, as `tributary check` and `tributary status` say it, and a start that makes
//! a temporary copy persist within seconds. On the PostgreSQL 17 primary and standby of
//! [`super::failover`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tributary_tests::service::Service;
use tributary_tests::{connect, unique_name};

use super::failover::{both, commit_log, failover_pipeline, primary_and_standby, tributary};

/// The failover-readiness line of `check` and of `status` for `file`, each without its
/// prefix (`ok    `, `warn  `, `note  `; two spaces of indent).
async fn readiness(file: &Path) -> (String, String) {
    let mut lines = Vec::new();
    for (command, prefixes) in [
        ("check", &["ok    ", "warn  ", "note  "][..]),
        ("status", &["  "][..]),
    ] {
        let (code, said) = tributary(command, file).await;
        assert_eq!(code, 0, "{command}:\n{said}");
        let line = said
            .lines()
            .find_map(|l| {
                prefixes
                    .iter()
                    .find_map(|p| l.strip_prefix(p))
                    .filter(|rest| rest.starts_with("failover "))
            })
            .unwrap_or_else(|| panic!("no failover readiness line from {command}:\n{said}"));
        lines.push(line.to_owned());
    }
    (lines.remove(0), lines.remove(0))
}

/// Whether the standby holds `slot` synchronised, and if so whether still temporary.
async fn standby_copy(standby: &tokio_postgres::Client, slot: &str) -> Option<bool> {
    standby
        .query_opt(
            "SELECT temporary FROM pg_replication_slots WHERE slot_name = $1 AND synced",
            &[&slot],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// Failover readiness, as `check` and `status` say it (issue 36): while the standby has no copy
/// of the slot, while its copy is temporary (a promotion would drop it), and once the copy
/// persists, which a start brings about by itself within seconds, with nothing written to the
/// source but a transaction a second outside the publication. Before the start hastened it,
/// such a source kept the copy temporary until a segment of WAL had gone by (minutes at this
/// rate): the test would time out. Without `source.standby_url`, `status` says how to see it.
/// Asking the primary for a record takes the superuser or a grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_status_say_whether_a_promotion_keeps_the_slot() {
    let (primary, standby) = primary_and_standby();
    let on_primary = tributary_tests::pipeline::events_on(&primary).await;
    on_primary
        .batch_execute("CREATE TABLE other (id serial PRIMARY KEY, body text)")
        .await
        .unwrap();
    let on_standby = connect(&standby.url("postgres")).await;
    let url = both(&primary, &standby);
    let dir = std::env::temp_dir().join(unique_name("failover-ready"));
    let (slot, file) = failover_pipeline(&url, &standby, &dir);
    commit_log(&dir).await;
    let setup = "on the standby, set sync_replication_slots = on and hot_standby_feedback = on, \
                 name its physical slot in primary_slot_name and a database in primary_conninfo";

    // No slot yet: the standby has no copy, and both say how a copy comes about.
    let none = format!(
        "failover not ready: the standby has no copy of slot {slot:?} yet, so a failover now \
         would lose the slot; a copy appears once the slot exists on the primary as a failover \
         slot and the standby's slot sync has seen it (if it never does: {setup})"
    );
    assert_eq!(readiness(&file).await, (none.clone(), none));

    // A failover slot made while a transaction with a transaction id is open: the slot's
    // catalog horizon is older than that transaction, and the standby's copy (made once the
    // slot is, after that transaction ended) takes the standby's newer one, so it stays
    // temporary until the primary's slot is confirmed past a running-xacts record written
    // after it. Nothing reads the slot meanwhile, so nothing moves it.
    let (open, connection) =
        tokio_postgres::connect(&primary.url("postgres"), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    open.batch_execute("BEGIN; INSERT INTO other (body) VALUES ('open while the slot is made')")
        .await
        .unwrap();
    let creating = {
        let url = primary.url("postgres");
        let slot = slot.clone();
        tokio::spawn(async move {
            connect(&url)
                .await
                .query_one(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)",
                    &[&slot],
                )
                .await
                .unwrap();
        })
    };
    // The creation waits for the open transaction to end.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = on_primary
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE query LIKE 'SELECT pg_create_logical_replication_slot%' AND wait_event = 'transactionid'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot's creation did not wait for the open transaction"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    open.batch_execute("COMMIT").await.unwrap();
    creating.await.unwrap();
    // The standby's slot sync looks at most every 30 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while standby_copy(&on_standby, &slot).await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the standby made no copy of slot {slot:?}; its log:\n{}",
            std::fs::read_to_string(standby.log_path()).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(standby_copy(&on_standby, &slot).await, Some(true));
    let temporary = format!(
        "failover not ready: the standby holds slot {slot:?} only as a temporary synchronised \
         copy, which a promotion drops, so a failover now would lose the slot; PostgreSQL 17 \
         keeps the copy temporary until the primary's slot has moved past the standby's \
         catalog horizon, which takes a position the pipeline confirmed after a running-xacts \
         record (a running pipeline asks the primary for one and confirms past it)"
    );
    assert_eq!(readiness(&file).await, (temporary.clone(), temporary));

    // The pipeline starts on that slot while the source writes only outside the publication.
    let stop = Arc::new(AtomicBool::new(false));
    let elsewhere = {
        let url = primary.url("postgres");
        let stop = stop.clone();
        tokio::spawn(async move {
            let client = connect(&url).await;
            while !stop.load(Ordering::SeqCst) {
                client
                    .batch_execute("INSERT INTO other (body) VALUES ('elsewhere')")
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let mut service = Service::spawn(&file, &[], &dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let streaming = tokio::time::Instant::now();
    while standby_copy(&on_standby, &slot).await != Some(false) {
        assert!(
            streaming.elapsed() < Duration::from_secs(60),
            "the standby's copy of slot {slot:?} is still temporary {:?} after the start:\n{}",
            streaming.elapsed(),
            service.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "the standby's copy persisted {:?} after streaming began",
        streaming.elapsed()
    );
    let ready = format!(
        "failover ready: the standby holds slot {slot:?} synchronised and persistent, so a \
         promotion keeps it"
    );
    assert_eq!(readiness(&file).await, (ready.clone(), ready.clone()));
    // The running pipeline watched it too, and said so.
    service.wait_for_log(&ready, Duration::from_secs(30)).await;
    stop.store(true, Ordering::SeqCst);
    elsewhere.await.unwrap();
    service.stop().await;

    // Without source.standby_url nothing can be seen, and both say which key to set.
    let blind = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("standby_url"))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    let blind_file = dir.join("blind.toml");
    std::fs::write(&blind_file, blind).unwrap();
    let unknown = format!(
        "failover readiness not known: set source.standby_url to the standby that synchronises \
         slot {slot:?} to see whether a promotion keeps it"
    );
    assert_eq!(readiness(&blind_file).await, (unknown.clone(), unknown));

    // Asking for a record is the superuser's unless granted: a role without it is told no
    // (the pipeline then logs it and goes on), and a grant is enough.
    on_primary
        .batch_execute("CREATE ROLE plain LOGIN")
        .await
        .unwrap();
    let plain = connect(&primary.url("postgres").replace("postgres@", "plain@")).await;
    let asked = tributary::source::failover::log_standby_snapshot(&plain).await;
    assert!(matches!(asked, Ok(None)), "{asked:?}");
    on_primary
        .batch_execute("GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO plain")
        .await
        .unwrap();
    let before: String = on_primary
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let before: tributary::Lsn = before.parse().unwrap();
    let asked = tributary::source::failover::log_standby_snapshot(&plain).await;
    assert!(
        matches!(asked, Ok(Some(end)) if end > before),
        "{asked:?}, the WAL was at {before}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
