//! The pipeline on PostgreSQL 16, which speaks pgoutput protocol 4: a large transaction
//! streams and lands whole without its rolled-back savepoint, a large rolled-back one never
//! lands, and a logical decoding message reaches the `messages` plugin.
//!
//! Needs PostgreSQL 16 server binaries, which the suite does not install: run it with
//! `TRIBUTARY_PG16_BIN=<dir holding initdb and postgres> cargo test -p tributary-tests --test e2e
//! -- --ignored postgres16` (see `fuzz/README.md` for one way to get them).

use std::path::PathBuf;
use std::time::Duration;

use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::lake::read_output;
use tributary_tests::pipeline::{RunningPipeline, config, events_on};
use tributary_tests::{plugin, unique_name};

/// The `stream_txns` counter of the slot, once the server has published it.
async fn streamed_transactions(client: &tokio_postgres::Client, slot: &str) -> i64 {
    for _ in 0..100 {
        let row = client
            .query_opt(
                "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap();
        if let Some(count) = row.map(|r| r.get::<_, i64>(0)).filter(|&n| n > 0) {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL 16 binaries in TRIBUTARY_PG16_BIN"]
async fn the_pipeline_streams_and_lands_messages_on_postgresql_16() {
    let bin_dir = std::env::var_os("TRIBUTARY_PG16_BIN")
        .map(PathBuf::from)
        .expect(
            "set TRIBUTARY_PG16_BIN to the directory holding PostgreSQL 16's initdb and postgres",
        );
    let options = ClusterOptions {
        bin_dir: Some(bin_dir),
        ..ClusterOptions::fast()
    }
    .setting("logical_decoding_work_mem", "'64kB'");
    let cluster = TempCluster::start(options).expect("a PostgreSQL 16 cluster");
    assert!(
        cluster.server_version().starts_with("16"),
        "TRIBUTARY_PG16_BIN holds PostgreSQL {}",
        cluster.server_version()
    );
    let url = cluster.url("postgres");
    let client = events_on(&cluster).await;

    let dir = std::env::temp_dir().join(unique_name("pg16-lake"));
    let name = unique_name("pg16");
    let mut running = RunningPipeline::start(config(
        &url,
        &name,
        &["public.events"],
        &format!("file://{}", dir.display()),
        vec![],
        &[plugin("messages")],
    ))
    .await;
    // One transaction per call: statements sent in one string share an implicit transaction.
    for transaction in [
        "INSERT INTO events VALUES (1, 'first')",
        "BEGIN;
         INSERT INTO events SELECT g, repeat('x', 20) FROM generate_series(1000, 1999) g;
         SAVEPOINT s;
         INSERT INTO events SELECT g, 'gone' FROM generate_series(5000, 5999) g;
         ROLLBACK TO s;
         SELECT pg_logical_emit_message(true, 'audit', 'large');
         COMMIT",
        "BEGIN;
         INSERT INTO events SELECT g, 'aborted' FROM generate_series(7000, 7999) g;
         ROLLBACK",
        "INSERT INTO events VALUES (2, 'last')",
    ] {
        client.batch_execute(transaction).await.unwrap();
    }
    running
        .wait_for_changes(1002, Duration::from_secs(120))
        .await;
    let progress = running.stop().await;
    assert_eq!((progress.transactions, progress.changes), (3, 1002));
    assert!(
        streamed_transactions(&client, &name).await > 0,
        "the large transactions streamed"
    );

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let ids: Vec<i32> = read_output(&store, "public.events")
        .await
        .iter()
        .map(|r| r.values["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    let mut expected = vec![1];
    expected.extend(1000..2000);
    expected.push(2);
    assert_eq!(ids, expected);
    let messages = read_output(&store, "messages").await;
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(messages[0].values["text"].as_deref(), Some("large"));
    assert_eq!(messages[0].values["before_seq"].as_deref(), Some("1000"));
    let _ = std::fs::remove_dir_all(&dir);
}
