//! `tributary compact` and `tributary vacuum` on Iceberg tables, beside a running pipeline
//! that goes on inserting: the compaction is one `replace` snapshot that changes no row; the
//! vacuum expires the old snapshots and deletes what only they referenced once the retention
//! allows, and a dry run changes nothing. pyiceberg and DuckDB read every change once
//! throughout, and verify says equal.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use object_store::path::Path;
use tributary::lake::iceberg::table::Table;
use tributary::lake::sink::Sink;
use tributary_tests::fresh_database;
use tributary_tests::lake::read_iceberg;
use tributary_tests::service::{Fixture, Service, command, verify};

use super::iceberg::{assert_audited, iceberg_fixture_with};
use tributary_tests::lake::entries_of;

const OUTPUT: &str = "public.events";

/// The data files in the table's folder and its `_compacted/`, as the store lists them.
async fn parquet_files(sink: &Sink) -> usize {
    let mut count = 0;
    for folder in [OUTPUT.to_owned(), format!("{OUTPUT}/_compacted")] {
        let listing = sink.list_dir(Some(&Path::from(folder))).await.unwrap();
        count += listing
            .objects
            .iter()
            .filter(|(n, _)| n.ends_with(".parquet"))
            .count();
    }
    count
}

/// The table as pyiceberg and DuckDB read it once it holds `written` rows (a flush is in the
/// commit log a moment before it is in the table): the ids of its rows, which both must agree
/// on; and how many data files its current snapshot reads.
async fn read_ids(fixture: &Fixture, written: u64) -> (Vec<u32>, usize) {
    let table = Table::open(fixture.sink.clone(), OUTPUT, None);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let current = loop {
        let current = table.load().await.unwrap().expect("the table");
        let rows = current.metadata.current_snapshot().unwrap().summary["total-records"].clone();
        if rows == written.to_string() || std::time::Instant::now() > deadline {
            break current;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let snapshot = current.metadata.current_snapshot().unwrap();
    let files = table.live_files(snapshot).await.unwrap().len();
    let folder = format!("{}/{OUTPUT}", fixture.cfg.sink_url);
    let read = read_iceberg(&folder, &current.location, &fixture.cfg.sink_options);
    assert_eq!(read.duckdb, read.rows, "DuckDB reads what pyiceberg reads");
    let ids = read
        .rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    (ids, files)
}

fn assert_once(ids: &[u32], written: u64) {
    assert_eq!(ids.len(), written as usize, "no change twice");
    assert_eq!(
        ids.iter().copied().collect::<BTreeSet<_>>(),
        (1..=written as u32).collect(),
        "every change"
    );
}

fn insert(from: u64) -> String {
    format!(
        "INSERT INTO events SELECT g, 'e' || g FROM generate_series({}, {}) g",
        from + 1,
        from + 5
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iceberg_compaction_and_expiry_beside_a_running_pipeline_lose_nothing() {
    let db = fresh_database("iceberg_tend").await;
    db.client
        .batch_execute("CREATE TABLE events (id int PRIMARY KEY, body text)")
        .await
        .unwrap();
    let fixture = iceberg_fixture_with(&db, "iceberg_tend", &[OUTPUT], false, &[]).await;
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // One flush, so one small file, per transaction.
    let mut written = 0;
    for _ in 0..12 {
        db.client.batch_execute(&insert(written)).await.unwrap();
        written += 5;
        service
            .wait_for_landed(&fixture.log, written, Duration::from_secs(30))
            .await;
    }
    let table = Table::open(fixture.sink.clone(), OUTPUT, None);

    // A reader of the table's metadata throughout never finds fewer rows than before.
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (table, stop) = (table.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut seen, mut reads) = (0u64, 0);
            while !stop.load(Ordering::Relaxed) {
                let current = table.load().await.unwrap().unwrap();
                let snapshot = current.metadata.current_snapshot().unwrap();
                let rows: u64 = snapshot.summary["total-records"].parse().unwrap();
                assert!(rows >= seen, "{rows} rows after {seen}");
                (seen, reads) = (rows, reads + 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            reads
        })
    };
    let writer = {
        let (url, stop) = (db.url.clone(), stop.clone());
        tokio::spawn(async move {
            let client = tributary_tests::connect(&url).await;
            let mut next = written;
            while !stop.load(Ordering::Relaxed) {
                client.batch_execute(&insert(next)).await.unwrap();
                next += 5;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            next
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, out, err) = command("compact", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let replaced: usize = out
        .split(&format!("compact: {OUTPUT}: "))
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("how many files the compaction replaced: {out}"));
    assert!(replaced >= 12 && out.contains(" rewritten as 1 "), "{out}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let written: u64 = writer.await.unwrap();
    assert!(
        poller.await.unwrap() > 10,
        "the reader read through the compaction"
    );
    service
        .wait_for_landed(&fixture.log, written, Duration::from_secs(60))
        .await;

    let (ids, live) = read_ids(&fixture, written).await;
    assert_once(&ids, written);
    let flushes = entries_of(&fixture.log, OUTPUT).await;
    assert!(
        live < flushes.len(),
        "{live} files for {} flushes",
        flushes.len()
    );
    let current = table.load().await.unwrap().unwrap().metadata;
    let operations: Vec<&str> = current
        .snapshots
        .iter()
        .map(|s| s.summary["operation"].as_str())
        .collect();
    assert_eq!(
        operations.iter().filter(|o| **o == "replace").count(),
        1,
        "{operations:?}"
    );
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert_audited(&verified, OUTPUT);

    // The replaced files stay for the retention (seven days unless told) ...
    assert_eq!(parquet_files(&fixture.sink).await, live + replaced);
    let (code, out, err) = command("vacuum", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "vacuum: {OUTPUT}: deleted 0 files (0 B); {replaced} removed files ("
        )) && out.contains("stay until their removal is 7d old"),
        "{out}"
    );
    let snapshots = table
        .load()
        .await
        .unwrap()
        .unwrap()
        .metadata
        .snapshots
        .len();
    let (code, out, err) = command(
        "vacuum",
        &fixture.file,
        &["--retain", "0s", "--dry-run"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("vacuum: {OUTPUT}: would delete ")),
        "{out}"
    );
    assert_eq!(
        parquet_files(&fixture.sink).await,
        live + replaced,
        "a dry run deletes nothing"
    );
    let after = table.load().await.unwrap().unwrap().metadata;
    assert_eq!(
        after.snapshots.len(),
        snapshots,
        "a dry run expires nothing"
    );

    // ... and go when it is over, beside the running pipeline, which keeps landing.
    let (code, out, err) = command("vacuum", &fixture.file, &["--retain", "0s"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("vacuum: {OUTPUT}: deleted ")),
        "{out}"
    );
    assert!(
        err.contains("a reader of a version older than that"),
        "{err}"
    );
    assert_eq!(
        parquet_files(&fixture.sink).await,
        live,
        "only the files the current snapshot reads are left"
    );
    let expired = table.load().await.unwrap().unwrap().metadata;
    assert!(
        expired.snapshots.len() <= 2,
        "the current snapshot and the pipeline's newest are kept: {}",
        expired.snapshots.len()
    );
    assert_eq!(
        expired.position(&current_app(&current)),
        flushes.last().copied(),
        "the pipeline's position survives the expiry"
    );
    db.client.batch_execute(&insert(written)).await.unwrap();
    let written = written + 5;
    service
        .wait_for_landed(&fixture.log, written, Duration::from_secs(60))
        .await;
    let (ids, _) = read_ids(&fixture, written).await;
    assert_once(&ids, written);
    // The audit starts from the oldest snapshot the expiry kept.
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert_audited(&verified, OUTPUT);
    assert!(
        verified
            .stdout
            .contains("  audited from its oldest snapshot, version "),
        "{verified}"
    );
    service.stop().await;
    // A start reads no file of a flush its tables hold.
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run2.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    service.stop().await;
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// The pipeline's application id, from its snapshots.
fn current_app(metadata: &tributary::lake::iceberg::metadata::TableMetadata) -> String {
    metadata
        .snapshots
        .iter()
        .find_map(|s| s.summary.get("tributary.app").cloned())
        .expect("a snapshot of the pipeline")
}
