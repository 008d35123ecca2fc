//! The slot is confirmed only to what the sink has committed; stops, crashes and outages lose
//! nothing and land nothing twice.

use std::collections::BTreeSet;
use std::time::Duration;

use tributary::Lsn;
use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_tests::lake::read_output;
use tributary_tests::pipeline::{
    RunningPipeline, config, confirmed_flush, events_database, wait_for_confirmed,
};
use tributary_tests::{S3Server, plugin, unique_name};

async fn insert_batches(client: &tokio_postgres::Client, from: u32, transactions: u32, rows: u32) {
    for tx in 0..transactions {
        let first = from + tx * rows;
        client
            .batch_execute(&format!(
                "INSERT INTO events SELECT g, 'event ' || g FROM generate_series({first}, {}) g",
                first + rows - 1
            ))
            .await
            .unwrap();
    }
}

async fn latest_end(sink: &Sink) -> Lsn {
    CommitLog::new(sink.clone(), Writer::named("test"))
        .latest()
        .await
        .unwrap()
        .map_or(Lsn::ZERO, |e| e.last_end_lsn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_flush_waits_for_the_commit_entry_through_an_outage() {
    let db = events_database("outage").await;
    let mut server = S3Server::start();
    let bucket = server.fresh_bucket("outage").await;
    let options = server.object_store_options();
    let sink = Sink::open(
        &server.bucket_url(&bucket),
        &options.iter().cloned().collect(),
    )
    .unwrap();
    let name = unique_name("outage");
    let mut running = RunningPipeline::start(config(
        &db.url,
        &name,
        &["public.events"],
        &server.bucket_url(&bucket),
        options.clone(),
        &[plugin("passthrough")],
    ))
    .await;

    insert_batches(&db.client, 1, 5, 20).await;
    running.wait_for_changes(100, Duration::from_secs(60)).await;
    let first = latest_end(&sink).await;
    assert_eq!(wait_for_confirmed(&db.client, &name, first).await, first);

    // The sink goes away: changes arrive, cannot be landed, and must not be confirmed.
    server.stop();
    insert_batches(&db.client, 101, 5, 20).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let confirmed = confirmed_flush(&db.client, &name).await.unwrap();
        assert_eq!(
            confirmed, first,
            "confirmed_flush_lsn moved while the sink was down"
        );
    }
    assert_eq!(running.progress.borrow().changes, 100);

    // It comes back: the pending flush lands and only then is confirmed.
    server.restart();
    running
        .wait_for_changes(200, Duration::from_secs(120))
        .await;
    let second = latest_end(&sink).await;
    assert!(second > first);
    assert_eq!(wait_for_confirmed(&db.client, &name, second).await, second);
    running.stop().await;

    let rows = read_output(&server.object_store(&bucket), "public.events").await;
    let ids: BTreeSet<String> = rows
        .iter()
        .map(|r| r.values["id"].clone().unwrap())
        .collect();
    assert_eq!((rows.len(), ids.len()), (200, 200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_outage_ends_promptly_and_confirms_nothing_more() {
    let db = events_database("stop_in_outage").await;
    let mut server = S3Server::start();
    let bucket = server.fresh_bucket("stop-in-outage").await;
    let options = server.object_store_options();
    let name = unique_name("stop_in_outage");
    let cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &server.bucket_url(&bucket),
        options,
        &[],
    );
    let mut running = RunningPipeline::start(cfg).await;
    insert_batches(&db.client, 1, 1, 10).await;
    running.wait_for_changes(10, Duration::from_secs(60)).await;
    let sink_end = running
        .progress
        .borrow()
        .last_entry
        .as_ref()
        .unwrap()
        .last_end_lsn;
    assert_eq!(
        wait_for_confirmed(&db.client, &name, sink_end).await,
        sink_end
    );

    server.stop();
    insert_batches(&db.client, 11, 1, 10).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let error = running.stop_with_error().await.to_string();
    assert!(error.starts_with("stopped while"), "{error}");
    assert!(error.contains(&sink_end.to_string()), "{error}");
    assert_eq!(confirmed_flush(&db.client, &name).await, Some(sink_end));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_flush_never_passes_the_latest_commit_entry() {
    let db = events_database("never_passes").await;
    let server = S3Server::start();
    let bucket = server.fresh_bucket("never-passes").await;
    let options = server.object_store_options();
    let sink = Sink::open(
        &server.bucket_url(&bucket),
        &options.iter().cloned().collect(),
    )
    .unwrap();
    let name = unique_name("never_passes");
    let mut cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &server.bucket_url(&bucket),
        options,
        &[],
    );
    cfg.flush.max_rows = 50;
    let mut running = RunningPipeline::start(cfg).await;

    // Sample the slot, then the log, while about 40 flushes land: the slot never leads the
    // log.
    let writer = {
        let url = db.url.clone();
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            for tx in 0..40 {
                insert_batches(&client, 1 + tx * 50, 1, 50).await;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };
    let mut samples = 0;
    let mut moved = BTreeSet::new();
    // Before the first commit the slot sits where it was created.
    let mut created = None;
    while running.progress.borrow().changes < 2000 {
        let confirmed = confirmed_flush(&db.client, &name).await.unwrap_or_default();
        let committed = latest_end(&sink).await;
        if created.is_none() && confirmed != Lsn::ZERO {
            created = Some(confirmed);
        }
        assert!(
            confirmed <= committed.max(created.unwrap_or_default()),
            "confirmed_flush_lsn {confirmed} is past the latest commit entry {committed}"
        );
        moved.insert(confirmed);
        samples += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writer.await.unwrap();
    running
        .wait_for_changes(2000, Duration::from_secs(60))
        .await;
    let last = latest_end(&sink).await;
    assert_eq!(wait_for_confirmed(&db.client, &name, last).await, last);
    running.stop().await;
    // Not vacuous: the samples saw the slot move through several positions (how many samples
    // fit in the run depends on the machine's load; the moves are what matter).
    assert!(
        moved.len() > 2,
        "{samples} samples saw {} positions",
        moved.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_and_restarts_land_every_change_exactly_once() {
    let db = events_database("restart").await;
    let dir = std::env::temp_dir().join(unique_name("restart-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("restart");
    let cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &sink_url,
        vec![],
        &[plugin("passthrough")],
    );

    // Round 1 lands some, then crashes mid-stream while more is arriving.
    let mut running = RunningPipeline::start(cfg.clone()).await;
    insert_batches(&db.client, 1, 10, 30).await;
    running.wait_for_changes(300, Duration::from_secs(60)).await;
    insert_batches(&db.client, 301, 10, 30).await;
    running.crash().await;

    // Round 2 stops cleanly while more is arriving.
    let mut running = RunningPipeline::start(cfg.clone()).await;
    insert_batches(&db.client, 601, 10, 30).await;
    running.wait_for_changes(30, Duration::from_secs(60)).await;
    running.stop().await;
    insert_batches(&db.client, 901, 10, 30).await;

    // Round 3 catches up with all of it.
    let mut running = RunningPipeline::start(cfg.clone()).await;
    let sink = Sink::open(&sink_url, &Default::default()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let rows = read_output(sink.store().as_ref(), "public.events").await;
        if rows.len() >= 1200 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = running.progress.borrow_and_update();
    }
    running.stop().await;

    let rows = read_output(sink.store().as_ref(), "public.events").await;
    let identities: BTreeSet<(u64, u32)> = rows.iter().map(|r| (r.commit_lsn, r.seq)).collect();
    let ids: BTreeSet<u32> = rows
        .iter()
        .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(identities.len(), rows.len(), "a change landed twice");
    assert_eq!(ids, (1..=1200).collect(), "every change landed");
    assert_eq!(rows.len(), 1200);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_confirms_what_the_sink_already_holds() {
    let db = events_database("confirm_at_start").await;
    let dir = std::env::temp_dir().join(unique_name("confirm-at-start-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("confirm_at_start");
    let cfg = config(&db.url, &name, &["public.events"], &sink_url, vec![], &[]);
    RunningPipeline::start(cfg.clone()).await.stop().await;
    let created = confirmed_flush(&db.client, &name).await.unwrap();

    // A previous run landed transaction A and committed it, then died before confirming.
    insert_batches(&db.client, 1, 1, 10).await;
    let lsn_a: Lsn = tributary::source::provision::current_wal_lsn(&db.client)
        .await
        .unwrap();
    let sink = Sink::open(&sink_url, &Default::default()).unwrap();
    let log = CommitLog::new(sink.clone(), Writer::named("an earlier run"));
    let opened = log
        .latest()
        .await
        .unwrap()
        .expect("the first run opened the log");
    let entry = tributary::lake::commit::CommitEntry {
        format: tributary::lake::commit::FORMAT,
        kind: tributary::lake::commit::EntryKind::Flush,
        sequence: opened.sequence + 1,
        writer: log.writer().clone(),
        slot: name.clone(),
        first_commit_lsn: lsn_a,
        last_commit_lsn: lsn_a,
        last_end_lsn: lsn_a,
        transactions: 1,
        changes: 10,
        files: vec![],
        plugins: vec![],
        committed_at: 0,
        accepted_gap: None,
        dead_letters: 0,
        timeline: None,
        accepted_timeline: None,
        failover: None,
        started_from: None,
        tables_through: None,
        load: None,
    };
    log.commit(&entry).await.unwrap();
    assert_eq!(confirmed_flush(&db.client, &name).await, Some(created));

    // The next start confirms it without waiting for new work, and does not land A again.
    let mut running = RunningPipeline::start(cfg).await;
    assert_eq!(wait_for_confirmed(&db.client, &name, lsn_a).await, lsn_a);
    insert_batches(&db.client, 11, 1, 10).await;
    running.wait_for_changes(10, Duration::from_secs(60)).await;
    running.stop().await;
    let rows = read_output(sink.store().as_ref(), "public.events").await;
    let ids: BTreeSet<u32> = rows
        .iter()
        .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, (11..=20).collect());
    std::fs::remove_dir_all(&dir).unwrap();
}
