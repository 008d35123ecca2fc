//! Truncates, partitioned tables and schema changes land as a reader expects.

use std::collections::BTreeSet;
use std::time::Duration;

use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_tests::lake::{data_files, read_output};
use tributary_tests::pipeline::{RunningPipeline, config};
use tributary_tests::{fresh_database, unique_name};

fn lake(hint: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(unique_name(hint));
    let url = format!("file://{}", dir.display());
    (dir, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncates_land_as_a_row_per_table_including_cascade() {
    let db = fresh_database("truncate").await;
    db.client
        .batch_execute(
            "CREATE TABLE parents (id int PRIMARY KEY);
             CREATE TABLE children (id int PRIMARY KEY, parent int REFERENCES parents);
             CREATE TABLE other (id int PRIMARY KEY);",
        )
        .await
        .unwrap();
    let (dir, url) = lake("truncate-lake");
    let tables = ["public.parents", "public.children", "public.other"];
    let cfg = config(
        &db.url,
        &unique_name("truncate"),
        &tables,
        &url,
        vec![],
        &[],
    );
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO parents VALUES (1); INSERT INTO children VALUES (1, 1);
             INSERT INTO other VALUES (1);
             TRUNCATE other, children;
             INSERT INTO children VALUES (2, 1);
             TRUNCATE parents CASCADE;",
        )
        .await
        .unwrap();
    // 3 inserts, a two-table truncate, 1 insert, a cascading truncate of two tables.
    running.wait_for_changes(8, Duration::from_secs(60)).await;
    running.stop().await;

    let sink = Sink::open(&url, &Default::default()).unwrap();
    let ops = |rows: Vec<tributary_tests::lake::LandedRow>| {
        rows.into_iter().map(|r| r.op).collect::<Vec<_>>()
    };
    let store = sink.store().as_ref();
    assert_eq!(
        ops(read_output(store, "public.other").await),
        ["insert", "truncate"]
    );
    assert_eq!(
        ops(read_output(store, "public.children").await),
        ["insert", "truncate", "insert", "truncate"]
    );
    assert_eq!(
        ops(read_output(store, "public.parents").await),
        ["insert", "truncate"]
    );
    let truncate = read_output(store, "public.parents").await.pop().unwrap();
    assert!(
        truncate.values.values().all(Option::is_none),
        "a truncate carries no row"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_to_partitions_land_under_the_partitioned_table() {
    let db = fresh_database("partitions").await;
    db.client
        .batch_execute(
            "CREATE TABLE sales (id int, region text, amount int, PRIMARY KEY (id, region))
                 PARTITION BY LIST (region);
             CREATE TABLE sales_eu PARTITION OF sales FOR VALUES IN ('eu');
             CREATE TABLE sales_us PARTITION OF sales FOR VALUES IN ('us');",
        )
        .await
        .unwrap();
    let (dir, url) = lake("partitions-lake");
    let cfg = config(
        &db.url,
        &unique_name("partitions"),
        &["public.sales"],
        &url,
        vec![],
        &[],
    );
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO sales SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g
                 FROM generate_series(1, 10) g;
             UPDATE sales SET amount = 0 WHERE id = 2;",
        )
        .await
        .unwrap();
    running.wait_for_changes(11, Duration::from_secs(60)).await;
    running.stop().await;

    let sink = Sink::open(&url, &Default::default()).unwrap();
    let rows = read_output(sink.store().as_ref(), "public.sales").await;
    assert_eq!(rows.len(), 11);
    let regions: BTreeSet<_> = rows
        .iter()
        .map(|r| r.values["region"].clone().unwrap())
        .collect();
    assert_eq!(regions, BTreeSet::from(["eu".to_owned(), "us".to_owned()]));
    for partition in ["public.sales_eu", "public.sales_us"] {
        assert!(
            data_files(sink.store().as_ref(), partition)
                .await
                .is_empty(),
            "{partition}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_starts_new_files_and_never_mixes_schemas() {
    let db = fresh_database("schema_change").await;
    db.client
        .batch_execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    let (dir, url) = lake("schema-change-lake");
    let mut cfg = config(
        &db.url,
        &unique_name("schema_change"),
        &["public.items"],
        &url,
        vec![],
        &[],
    );
    // One flush holds both schemas, so the split is the encoder's, not the batcher's.
    cfg.flush.max_delay_ms = 2_000;
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO items VALUES (1, 'one'), (2, 'two');
             ALTER TABLE items ADD COLUMN price numeric(8, 2);
             INSERT INTO items VALUES (3, 'three', 9.99);
             ALTER TABLE items DROP COLUMN name;
             INSERT INTO items VALUES (4, 1.50);",
        )
        .await
        .unwrap();
    running.wait_for_changes(4, Duration::from_secs(60)).await;
    let progress = running.stop().await;

    let sink = Sink::open(&url, &Default::default()).unwrap();
    let rows = read_output(sink.store().as_ref(), "public.items").await;
    let columns: Vec<Vec<&str>> = rows
        .iter()
        .map(|r| r.values.keys().map(String::as_str).collect())
        .collect();
    assert_eq!(
        columns,
        [
            vec!["id", "name"],
            vec!["id", "name"],
            vec!["id", "name", "price"],
            vec!["id", "price"]
        ]
    );
    assert_eq!(rows[3].values["price"].as_deref(), Some("1.50"));
    // Three schemas, three files, each with its own fingerprint in the commit log.
    let entry = CommitLog::new(sink.clone(), Writer::named("test"))
        .latest_flush()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(progress.flushes, 1, "one flush held all three schemas");
    let fingerprints: BTreeSet<_> = entry.files.iter().map(|f| f.schema.clone()).collect();
    assert_eq!((entry.files.len(), fingerprints.len()), (3, 3));
    let files: BTreeSet<_> = rows.iter().map(|r| r.file.clone()).collect();
    assert_eq!(files.len(), 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
