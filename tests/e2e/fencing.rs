//! One writer per pipeline, and committed data is immutable: a second instance waits for the
//! slot and takes over without touching what the first committed, a writer that was paused
//! or cut off from PostgreSQL cannot commit after it lost the pipeline, and a sink belongs to
//! one pipeline.
//!
//! Regression tests for the rolling-restart defect (faults issue, point 3): an instance
//! started while another ran uploaded under the same file names and overwrote committed files.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tributary::lake::commit::{CommitLog, EntryKind, Writer};
use tributary::lake::sink::Sink;
use tributary::pipeline::{PipelineError, RunOptions};
use tributary_tests::lake::committed_rows;
use tributary_tests::pipeline::{RunningPipeline, config, events_database, slot_and_publication};
use tributary_tests::proxy::Proxy;
use tributary_tests::service::{Service, ServiceConfig};
use tributary_tests::{TestDatabase, s3, unique_name};

fn temp_dir(hint: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name(hint));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Inserts into `events` in small transactions until stopped; the ids written are
/// `1..=written`.
struct Workload {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl Workload {
    fn start(url: &str) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU32::new(0));
        let (url, flag, count) = (url.to_owned(), stop.clone(), written.clone());
        let task = tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            while !flag.load(Ordering::Relaxed) {
                let first = count.load(Ordering::Relaxed) + 1;
                client
                    .batch_execute(&format!(
                        "INSERT INTO events SELECT g, 'e' || g FROM generate_series({first}, {}) g",
                        first + 4
                    ))
                    .await
                    .unwrap();
                count.store(first + 4, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        });
        Workload {
            stop,
            written,
            task,
        }
    }

    async fn finish(self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.written.load(Ordering::Relaxed)
    }
}

/// Cut the slot's walsender off, as `wal_sender_timeout` does with a consumer that went quiet.
async fn drop_walsender(db: &TestDatabase, slot: &str) {
    db.client
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
}

/// One transaction inserting ids `from..from+10`.
fn insert_ten(from: u32) -> String {
    format!(
        "INSERT INTO events SELECT g, 'e' || g FROM generate_series({from}, {}) g",
        from + 9
    )
}

/// Wait until the lake holds `count` rows of `public.events`.
async fn wait_for_rows(sink: &Sink, count: usize, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let rows = tributary_tests::lake::read_output(sink.store().as_ref(), "public.events").await;
        if rows.len() >= count {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let landed: BTreeSet<u32> = rows
                .iter()
                .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
                .collect();
            let missing: Vec<u32> = (1..=count as u32).filter(|i| !landed.contains(i)).collect();
            let log = CommitLog::new(sink.clone(), Writer::named("test"));
            let mut entries = String::new();
            for sequence in log.sequences().await.unwrap() {
                let e = log.read_entry(sequence).await.unwrap().unwrap();
                entries.push_str(&format!(
                    "\n  {sequence} {:?} {} {}..{} end {} tx {}",
                    e.kind,
                    e.writer.id,
                    e.first_commit_lsn,
                    e.last_commit_lsn,
                    e.last_end_lsn,
                    e.transactions
                ));
            }
            panic!(
                "the lake holds {} of {count} rows after {timeout:?}; missing ids {missing:?}; log:{entries}",
                rows.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ids landed, checked to be exactly once with every file intact.
async fn landed_ids(sink: &Sink) -> Vec<u32> {
    committed_rows(sink, "public.events")
        .await
        .iter()
        .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
        .collect()
}

/// The writer id a service logged when it started streaming.
fn writer_of(log: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains(" streaming ") || l.ends_with("streaming"))
        .unwrap_or_else(|| panic!("no streaming line in:\n{log}"));
    let at = line
        .find("writer=")
        .expect("the streaming line names the writer")
        + 7;
    line[at..].split_whitespace().next().unwrap().to_owned()
}

fn s3_service(db: &TestDatabase, name: &str, bucket: &str) -> (ServiceConfig, Sink) {
    let server = s3();
    let mut cfg = ServiceConfig::new(
        &db.url,
        name,
        &["public.events"],
        &server.bucket_url(bucket),
    );
    cfg.sink_options = server.object_store_options();
    let sink = Sink::open(&cfg.sink_url, &cfg.sink_options.iter().cloned().collect()).unwrap();
    (cfg, sink)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restarts_hand_over_without_losing_doubling_or_rewriting_a_change() {
    rolling_restarts("rolling", 20, false).await;
}

/// With Delta tables, the tables hand over too: each instance's first flush follows the last
/// one's in the table's log, no flush is in it twice, and a reader sees every change once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restarts_hand_delta_tables_over_without_a_flush_twice() {
    let (sink, cfg) = rolling_restarts("rolling_delta", 6, true).await;
    let txns = tributary_tests::lake::delta_txn_versions(&sink, "public.events").await;
    let log = CommitLog::new(sink.clone(), Writer::named("test"));
    let mut with_files = Vec::new();
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        if !entry.files.is_empty() {
            with_files.push(Some(sequence));
        }
    }
    assert_eq!(txns, with_files, "each flush once, in order, in the table");
    let read = tributary_tests::lake::read_delta(
        &format!("{}/public.events", cfg.sink_url),
        &cfg.sink_options,
    );
    let ids: Vec<u32> = read
        .rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    let distinct: BTreeSet<u32> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "a reader sees no change twice");
    assert_eq!(distinct, (1..=ids.len() as u32).collect());
}

/// `rounds` rolling restarts under a steady workload (with `delta` tables or not): every
/// change lands once, every file keeps its bytes, each instance opens the log once.
async fn rolling_restarts(hint: &str, rounds: usize, delta: bool) -> (Sink, ServiceConfig) {
    let db = events_database(hint).await;
    let bucket = s3().fresh_bucket(&hint.replace('_', "-")).await;
    let name = unique_name(hint);
    let (mut cfg, sink) = s3_service(&db, &name, &bucket);
    if delta {
        cfg.sink.push(("format".into(), "\"delta\"".into()));
    }
    let dir = temp_dir(hint);
    let file = cfg.write(&dir);

    let mut current = Service::spawn(&file, &["--wait"], &dir.join("0.log"));
    current
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    // The slot exists from here on: every change the workload makes reaches the lake.
    let workload = Workload::start(&db.url);
    let mut writers = BTreeSet::new();
    for round in 1..=rounds {
        // The next instance starts while this one runs, as a rollout does it, and waits.
        let mut next = Service::spawn(&file, &["--wait"], &dir.join(format!("{round}.log")));
        next.wait_for_log("held by another consumer", Duration::from_secs(60))
            .await;
        let log = current.stop().await;
        writers.insert(writer_of(&log));
        next.wait_for_log("streaming", Duration::from_secs(60))
            .await;
        current = next;
    }
    let written = workload.finish().await;
    wait_for_rows(&sink, written as usize, Duration::from_secs(60)).await;
    // Every committed file still holds the bytes and rows its entry names, no change landed
    // twice, none is missing, and no file is left that no entry names.
    let verified = tributary_tests::service::verify(&file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .last_line()
            .starts_with("verify: the lake equals the source at "),
        "{verified}"
    );
    let log = current.stop().await;
    writers.insert(writer_of(&log));
    assert_eq!(
        writers.len(),
        rounds + 1,
        "every instance had its own writer id"
    );

    let ids = landed_ids(&sink).await;
    assert_eq!(ids.len(), written as usize, "no change landed twice");
    assert_eq!(
        ids.iter().copied().collect::<BTreeSet<u32>>(),
        (1..=written).collect(),
        "every change landed"
    );
    // Each instance opened the log once, after the one before it had committed.
    let log = CommitLog::new(sink.clone(), Writer::named("test"));
    let mut opened_by = Vec::new();
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        if entry.kind == EntryKind::Open {
            opened_by.push(entry.writer.id);
        }
    }
    assert_eq!(opened_by.len(), rounds + 1);
    assert_eq!(opened_by.iter().collect::<BTreeSet<_>>().len(), rounds + 1);
    std::fs::remove_dir_all(&dir).unwrap();
    (sink, cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_writer_that_resumes_cannot_commit_over_the_instance_that_took_over() {
    let db = events_database("paused").await;
    let bucket = s3().fresh_bucket("paused").await;
    let name = unique_name("paused");
    let (mut cfg, sink) = s3_service(&db, &name, &bucket);
    // A holds what it read for up to 3 s before flushing: long enough to pause it holding rows.
    cfg.max_delay_ms = 3_000;
    let dir = temp_dir("paused");
    let file = cfg.write(&dir);

    let mut a = Service::spawn(&file, &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client.batch_execute(&insert_ten(1)).await.unwrap();
    wait_for_rows(&sink, 10, Duration::from_secs(30)).await;

    // A reads 11..20, then stops dead (a frozen VM); its connection is cut, as
    // wal_sender_timeout would, so the slot is free.
    db.client.batch_execute(&insert_ten(11)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.signal(libc::SIGSTOP);
    drop_walsender(&db, &name).await;

    // B takes over and lands 11..20 itself (A never confirmed them), then 21..30.
    let mut b = Service::spawn(&file, &["--wait"], &dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client.batch_execute(&insert_ten(21)).await.unwrap();
    wait_for_rows(&sink, 30, Duration::from_secs(30)).await;

    // A wakes up with 11..20 in hand; it finds its connection gone, or its sequence number
    // taken, and stops without committing.
    a.signal(libc::SIGCONT);
    let status = a.wait_exit(Duration::from_secs(30)).await;
    let a_log = a.log();
    assert!(!status.success(), "A must not go on:\n{a_log}");
    let b_log = b.stop().await;
    assert_taken_over(&sink, &writer_of(&a_log), &writer_of(&b_log), 30).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lake holds ids 1..=n exactly once, and `a` committed nothing after `b` opened.
async fn assert_taken_over(sink: &Sink, a: &str, b: &str, n: u32) {
    let ids = landed_ids(sink).await;
    assert_eq!(ids, (1..=n).collect::<Vec<u32>>());
    let log = CommitLog::new(sink.clone(), Writer::named("test"));
    let mut after_b = false;
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        after_b |= entry.writer.id == b;
        assert!(
            !(after_b && entry.writer.id == a),
            "A committed entry {sequence} after B took over"
        );
    }
}

/// A partition: A's connection to PostgreSQL goes silent (nothing delivered, nothing closed),
/// the server drops A's walsender and B takes over, while A still reaches the sink. A's next
/// commit is the first thing that can tell it, and the open entry makes sure it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_cut_off_from_postgres_cannot_commit_over_the_instance_that_took_over() {
    let db = events_database("partitioned").await;
    let bucket = s3().fresh_bucket("partitioned").await;
    let name = unique_name("partitioned");
    let cluster = tributary_tests::postgres();
    let proxy = Proxy::start(&format!("{}:{}", cluster.host(), cluster.port())).await;
    let (mut cfg_a, sink) = s3_service(&db, &name, &bucket);
    cfg_a.source_url = db.url.replace(
        &format!(":{}/", cluster.port()),
        &format!(":{}/", proxy.port()),
    );
    // A holds what it read for 5 s before flushing: the partition and B's take-over fit in.
    cfg_a.max_delay_ms = 5_000;
    let (cfg_b, _) = s3_service(&db, &name, &bucket);
    let dir = temp_dir("partitioned");
    let (file_a, file_b) = (dir.join("a.toml"), dir.join("b.toml"));
    std::fs::write(&file_a, cfg_a.toml()).unwrap();
    std::fs::write(&file_b, cfg_b.toml()).unwrap();

    let mut a = Service::spawn(&file_a, &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client.batch_execute(&insert_ten(1)).await.unwrap();
    wait_for_rows(&sink, 10, Duration::from_secs(30)).await;
    db.client.batch_execute(&insert_ten(11)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.freeze();
    drop_walsender(&db, &name).await;

    let mut b = Service::spawn(&file_b, &["--wait"], &dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(60)).await;
    let b_writer = writer_of(&b.log());
    db.client.batch_execute(&insert_ten(21)).await.unwrap();
    wait_for_rows(&sink, 30, Duration::from_secs(30)).await;

    let status = a.wait_exit(Duration::from_secs(30)).await;
    let a_log = a.log();
    assert!(!status.success(), "A must not go on:\n{a_log}");
    assert!(
        a_log.contains(&format!(
            "was written by another tributary, writer {b_writer}"
        )) && a_log.contains("stops and writes nothing more"),
        "A names the instance that took over:\n{a_log}"
    );
    b.stop().await;
    assert_taken_over(&sink, &writer_of(&a_log), &b_writer, 30).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every object in the sink, with its size.
async fn objects(sink: &Sink) -> Vec<(String, u64)> {
    use futures::TryStreamExt;
    let mut all: Vec<(String, u64)> = sink
        .store()
        .list(None)
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await
        .unwrap();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_pipeline_on_the_same_sink_is_refused_before_it_writes_anything() {
    let first = events_database("sink_owner").await;
    let other = events_database("sink_intruder").await;
    let server = s3();
    let bucket = server.fresh_bucket("one-sink").await;
    let url = server.bucket_url(&bucket);
    let options = server.object_store_options();
    let sink = Sink::open(&url, &options.iter().cloned().collect()).unwrap();
    let owner = unique_name("owner");
    let mut running = RunningPipeline::start(config(
        &first.url,
        &owner,
        &["public.events"],
        &url,
        options.clone(),
        &[],
    ))
    .await;
    first
        .client
        .batch_execute("INSERT INTO events VALUES (1, 'a'), (2, 'b')")
        .await
        .unwrap();
    running.wait_for_changes(2, Duration::from_secs(60)).await;
    running.stop().await;
    let before = objects(&sink).await;

    // Another database, and the same database with another slot.
    for (db, hint) in [(&other, "intruder"), (&first, "neighbour")] {
        let name = unique_name(hint);
        let cfg = config(
            &db.url,
            &name,
            &["public.events"],
            &url,
            options.clone(),
            &[],
        );
        let err = RunningPipeline::start_failure(cfg, RunOptions::default()).await;
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "the sink belongs to another pipeline: slot {owner:?} on database {:?}",
                first.name
            )) && text.contains(&format!(
                "this one reads slot {name:?} on database {:?}",
                db.name
            )) && text.contains("give each pipeline a sink prefix of its own"),
            "{text}"
        );
        assert_eq!(
            slot_and_publication(db, &name).await,
            (false, false),
            "nothing was created"
        );
        assert_eq!(
            objects(&sink).await,
            before,
            "nothing was written to the sink"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_by_another_consumer_is_refused_naming_it() {
    let db = events_database("busy_slot").await;
    let server = s3();
    let bucket = server.fresh_bucket("busy-slot").await;
    let url = server.bucket_url(&bucket);
    let options = server.object_store_options();
    let sink = Sink::open(&url, &options.iter().cloned().collect()).unwrap();
    let name = unique_name("busy_slot");
    let cfg = config(&db.url, &name, &["public.events"], &url, options, &[]);
    let holder = RunningPipeline::start(cfg.clone()).await;
    let before = objects(&sink).await;

    let options = RunOptions {
        slot_grace: Duration::from_secs(1),
        ..RunOptions::default()
    };
    let err = RunningPipeline::start_failure(cfg, options).await;
    let pid: i32 = db
        .client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    let text = err.to_string();
    assert!(
        matches!(err, PipelineError::Provision(_))
            && text.starts_with(&format!("slot {name:?} is held by \"tributary "))
            && (text.contains("\" at 127.0.0.1:")
                || text.contains("\" over a local socket"))
            && text.contains(&format!(" (walsender pid {pid}) "))
            && text.ends_with(
                "and was not released within 1 s: another consumer is reading it; stop that consumer, or pass --wait to wait until it lets go"
            ),
        "{text}"
    );
    assert_eq!(
        objects(&sink).await,
        before,
        "the refused instance wrote nothing"
    );
    holder.stop().await;
}
