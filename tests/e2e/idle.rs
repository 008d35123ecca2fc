//! A pipeline whose tables are idle while another database writes WAL: the slot's confirmed
//! position follows the server's instead of retaining that WAL without bound, through an
//! advance entry in the commit log, and a restart afterwards is not refused as a gap.

use std::time::Duration;

use tributary::Lsn;
use tributary::lake::commit::EntryKind;
use tributary_tests::fresh_database;
use tributary_tests::lake::committed_rows;
use tributary_tests::pipeline::{confirmed_flush, events_database};
use tributary_tests::service::{Fixture, Service};

const TABLE: &str = "public.events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pipeline_confirms_where_the_servers_wal_moved_on() {
    let db = events_database("idle").await;
    // Keepalives every second or so instead of every 30 s.
    db.client
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET wal_sender_timeout = '2s'",
            db.name
        ))
        .await
        .unwrap();
    let other = fresh_database("idle_other").await;
    other
        .client
        .batch_execute("CREATE TABLE noise (id int, body text)")
        .await
        .unwrap();
    let Fixture {
        name,
        sink,
        log,
        dir,
        file,
        ..
    } = Fixture::new(&db.url, "idle", &[TABLE]).await;

    let mut a = Service::spawn(&file, &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'before')")
        .await
        .unwrap();
    a.wait_for_landed(&log, 1, Duration::from_secs(60)).await;
    let landed: Lsn = confirmed_flush(&db.client, &name).await.unwrap();

    // Another database writes some 60 MB of WAL; nothing of it is the pipeline's.
    other
        .client
        .batch_execute(
            "INSERT INTO noise SELECT g, repeat('n', 200) FROM generate_series(1, 250000) g",
        )
        .await
        .unwrap();
    let wal_end: Lsn = tributary::source::provision::current_wal_lsn(&other.client)
        .await
        .unwrap();
    assert!(wal_end.0 > landed.0 + (32 << 20), "{landed} .. {wal_end}");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let confirmed = loop {
        let confirmed = confirmed_flush(&db.client, &name).await.unwrap();
        if confirmed.0 >= landed.0 + (16 << 20) {
            break confirmed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot stayed at {confirmed} while the server's WAL reached {wal_end}:\n{}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // Never past what the server has written (others write to it too meanwhile).
    let now: Lsn = tributary::source::provision::current_wal_lsn(&other.client)
        .await
        .unwrap();
    assert!(confirmed <= now, "{confirmed} past the server's {now}");
    // The log says so before the slot does.
    let last = log.latest().await.unwrap().unwrap();
    assert_eq!(last.kind, EntryKind::Advance, "{last:?}");
    assert!(last.files.is_empty() && last.last_end_lsn >= confirmed);
    assert!(
        a.log()
            .contains("confirmed where the server's WAL moved on"),
        "{}",
        a.log()
    );
    a.stop().await;

    // The next run resumes from the advance: no gap, and the next change lands once.
    let mut b = Service::spawn(&file, &[], &dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (2, 'after')")
        .await
        .unwrap();
    b.wait_for_landed(&log, 2, Duration::from_secs(60)).await;
    let b_log = b.stop().await;
    let ids: Vec<String> = committed_rows(&sink, TABLE)
        .await
        .iter()
        .map(|r| r.values["id"].clone().unwrap())
        .collect();
    assert_eq!(ids, ["1", "2"], "{b_log}");
    let _ = std::fs::remove_dir_all(&dir);
}
