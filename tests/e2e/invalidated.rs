//! A slot the server invalidated (it removed WAL the slot still needed, past
//! `max_slot_wal_keep_size`) is refused at start with the way out, before anything is written.

use std::time::Duration;

use tributary::commit::{CommitLog, Writer};
use tributary::sink::Sink;
use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::service::{Service, ServiceConfig};
use tributary_tests::{s3, unique_name};

const TABLE: &str = "public.events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidated_slot_is_refused_with_the_way_out() {
    // A cluster of its own: the shared one must keep its slots.
    let cluster = TempCluster::start(
        ClusterOptions::fast()
            .setting("max_slot_wal_keep_size", "'1MB'")
            .setting("min_wal_size", "'32MB'")
            .setting("max_wal_size", "'64MB'"),
    )
    .expect("a PostgreSQL cluster");
    let url = cluster.url("postgres");
    let client = tributary_tests::connect(&url).await;
    client
        .batch_execute("CREATE TABLE events (id int PRIMARY KEY, body text)")
        .await
        .unwrap();
    let server = s3();
    let bucket = server.fresh_bucket("invalidated").await;
    let name = unique_name("invalidated");
    let mut cfg = ServiceConfig::new(&url, &name, &[TABLE], &server.bucket_url(&bucket));
    cfg.sink_options = server.object_store_options();
    let sink = Sink::open(&cfg.sink_url, &cfg.sink_options.iter().cloned().collect()).unwrap();
    let log = CommitLog::new(sink, Writer::named("test"));
    let dir = std::env::temp_dir().join(unique_name("invalidated"));
    let file = cfg.write(&dir);

    let mut a = Service::spawn(&file, &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    client
        .batch_execute("INSERT INTO events VALUES (1, 'landed')")
        .await
        .unwrap();
    a.wait_for_landed(&log, 1, Duration::from_secs(60)).await;
    a.stop().await;
    let entries = log.sequences().await.unwrap();

    // With nobody reading the slot, the server writes far past what it may keep for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        client
            .batch_execute(
                "INSERT INTO events SELECT g, repeat('w', 500) FROM generate_series(
                     (SELECT max(id) + 1 FROM events), (SELECT max(id) + 20000 FROM events)) g;
                 SELECT pg_switch_wal(); CHECKPOINT;",
            )
            .await
            .unwrap();
        let status: Option<String> = client
            .query_one(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        if status.as_deref() == Some("lost") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot was not invalidated ({status:?})"
        );
    }

    let mut b = Service::spawn(&file, &[], &dir.join("b.log"));
    let status = b.wait_exit(Duration::from_secs(60)).await;
    assert!(!status.success());
    let said = b.log();
    assert!(
        said.contains(&format!(
            "slot \"{name}\" is invalidated (wal_status = lost)"
        )) && said.contains("--allow-gap"),
        "{said}"
    );
    assert_eq!(
        log.sequences().await.unwrap(),
        entries,
        "nothing was written"
    );
    let _ = std::fs::remove_dir_all(&dir);
    cluster.stop().unwrap();
}
