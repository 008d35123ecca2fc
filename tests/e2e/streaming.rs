//! A transaction larger than the server's decoding memory is streamed to the pipeline before
//! it commits: it lands once if it commits, not at all if it rolls back, and without the rows
//! of a savepoint it rolled back to.

use std::time::Duration;

use tributary::config::PipelineConfig;
use tributary_tests::lake::{LandedRow, read_output};
use tributary_tests::pipeline::{RunningPipeline, config, streaming_database};
use tributary_tests::{TestDatabase, plugin, s3, unique_name};

const TABLE: &str = "public.events";

/// Runs `body` (statements) in one transaction that ends with `end`; returns its xid.
async fn transaction(client: &tokio_postgres::Client, body: &str, end: &str) -> u32 {
    client.batch_execute("BEGIN").await.unwrap();
    client.batch_execute(body).await.unwrap();
    let xid = client
        .query_one("SELECT txid_current()::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0) as u32;
    client.batch_execute(end).await.unwrap();
    xid
}

fn insert(from: u32, to: u32) -> String {
    format!("INSERT INTO events SELECT g, 'event ' || g FROM generate_series({from}, {to}) g;")
}

/// The slot's streaming and spilling counters: (stream_txns, spill_txns).
async fn slot_stats(client: &tokio_postgres::Client, slot: &str) -> (i64, i64) {
    client
        .query_opt(
            "SELECT stream_txns, spill_txns FROM pg_stat_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .map_or((0, 0), |row| (row.get(0), row.get(1)))
}

/// A streaming database, a fresh bucket, and a pipeline file (named `name`, through `plugins`)
/// that lands its events table there.
async fn streaming_setup(
    hint: &str,
    plugins: &[std::path::PathBuf],
) -> (TestDatabase, String, String, PipelineConfig) {
    let db = streaming_database(hint).await;
    let server = s3();
    let bucket = server.fresh_bucket(&hint.replace('_', "-")).await;
    let name = unique_name(hint);
    let cfg = config(
        &db.url,
        &name,
        &[TABLE],
        &server.bucket_url(&bucket),
        server.object_store_options(),
        plugins,
    );
    (db, bucket, name, cfg)
}

/// Rows grouped by transaction, in commit order.
fn by_transaction(rows: &[LandedRow]) -> Vec<Vec<&LandedRow>> {
    let mut groups: Vec<Vec<&LandedRow>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(group) if group[0].commit_lsn == row.commit_lsn => group.push(row),
            _ => groups.push(vec![row]),
        }
    }
    groups
}

fn ids(group: &[&LandedRow]) -> Vec<i64> {
    group
        .iter()
        .map(|r| r.values["id"].as_deref().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_transactions_land_once_and_aborted_ones_never() {
    let (db, bucket, name, mut cfg) = streaming_setup("streaming", &[plugin("passthrough")]).await;
    let server = s3();
    // A batch holds whole transactions: the largest one goes through the plugin in one call.
    for transform in &mut cfg.transforms {
        transform.memory_limit_mib = 1024;
        transform.timeout_ms = 60_000;
    }
    let mut running = RunningPipeline::start(cfg).await;

    let big = transaction(&db.client, &insert(1, 200_000), "COMMIT").await;
    running
        .wait_for_changes(200_000, Duration::from_secs(120))
        .await;

    // A rolled-back transaction lands nothing; the marker after it shows it was read past.
    transaction(&db.client, &insert(1_000_001, 1_100_000), "ROLLBACK").await;
    db.client.batch_execute(&insert(0, 0)).await.unwrap();
    running
        .wait_for_changes(200_001, Duration::from_secs(60))
        .await;

    // Rows before the savepoint and after rolling back to it are kept; rows inside it are not.
    let savepoint = transaction(
        &db.client,
        &format!(
            "{} SAVEPOINT s; {} ROLLBACK TO SAVEPOINT s; {}",
            insert(2_000_001, 2_025_000),
            insert(3_000_001, 3_050_000),
            insert(4_000_001, 4_025_000),
        ),
        "COMMIT",
    )
    .await;
    running
        .wait_for_changes(250_001, Duration::from_secs(60))
        .await;

    // The server streamed all three large transactions instead of spilling them to disk.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut stats = slot_stats(&db.client, &name).await;
    while stats.0 < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stats = slot_stats(&db.client, &name).await;
    }
    assert_eq!(stats, (3, 0), "(stream_txns, spill_txns) of the slot");

    let progress = running.stop().await;
    assert_eq!((progress.transactions, progress.changes), (3, 250_001));

    let rows = read_output(&server.object_store(&bucket), TABLE).await;
    assert_eq!(rows.len(), 250_001, "every kept row lands exactly once");
    let groups = by_transaction(&rows);
    assert_eq!(groups.len(), 3, "the rolled-back transaction lands nothing");
    for group in &groups {
        let seqs: Vec<u32> = group.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (0..group.len() as u32).collect::<Vec<_>>());
        assert!(group.iter().all(|r| r.op == "insert"));
    }

    assert_eq!(ids(&groups[0]), (1..=200_000).collect::<Vec<i64>>());
    assert!(groups[0].iter().all(|r| r.xid == big));
    assert_eq!(ids(&groups[1]), [0]);
    let kept: Vec<i64> = (2_000_001..=2_025_000)
        .chain(4_000_001..=4_025_000)
        .collect();
    assert_eq!(ids(&groups[2]), kept);
    assert!(
        groups[2].iter().all(|r| r.xid == savepoint),
        "changes of the savepoint's subtransaction carry the top-level xid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_million_row_transaction_streams_and_lands_once() {
    let (db, bucket, name, mut cfg) = streaming_setup("streaming_2m", &[]).await;
    let server = s3();
    cfg.flush.max_mib = 1024;
    let mut running = RunningPipeline::start(cfg).await;

    // An aborted transaction of a million rows first, then two million rows that commit.
    transaction(&db.client, &insert(3_000_001, 4_000_000), "ROLLBACK").await;
    let big = transaction(&db.client, &insert(1, 2_000_000), "COMMIT").await;
    running
        .wait_for_changes(2_000_000, Duration::from_secs(300))
        .await;
    let (streamed, spilled) = slot_stats(&db.client, &name).await;
    assert!(
        streamed >= 2 && spilled == 0,
        "stream_txns {streamed}, spill_txns {spilled}"
    );
    let progress = running.stop().await;
    assert_eq!((progress.transactions, progress.changes), (1, 2_000_000));

    let rows = read_output(&server.object_store(&bucket), TABLE).await;
    assert_eq!(rows.len(), 2_000_000);
    assert!(rows.iter().all(|r| r.xid == big && r.op == "insert"));
    let groups = by_transaction(&rows);
    assert_eq!(groups.len(), 1, "the aborted transaction lands nothing");
    assert_eq!(ids(&groups[0]), (1..=2_000_000).collect::<Vec<i64>>());
}
