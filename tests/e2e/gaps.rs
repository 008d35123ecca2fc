//! Gaps between the lake and the slot are refused at start with the way out, before anything
//! is written: a slot advanced behind the pipeline's back (accepted only by `--accept-gap` with
//! the exact positions the refusal printed, and then recorded in the log), a slot the server
//! invalidated (it removed WAL the slot still needed, past `max_slot_wal_keep_size`),
//! another server answering at the source's address with the same database and slot names, and
//! the source moved to another timeline, at start or under a running pipeline. A gap or a move
//! accepted counts in the metrics (`tributary_accepted_gaps_total`).

use std::time::Duration;

use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::lake::committed_rows;
use tributary_tests::pipeline::{events_database, events_on};
use tributary_tests::service::{Fixture, Service, ServiceConfig, command, metric, scrape};
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
    let client = events_on(&cluster).await;
    let Fixture {
        name,
        log,
        dir,
        file,
        ..
    } = Fixture::new(&url, "invalidated", &[TABLE]).await;

    let a = land_first_row(&client, &file, &dir, &log, "landed").await;
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
        )) && said.contains("--accept-gap"),
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

/// `tributary run` with `extra`, which must refuse to start; what it said.
async fn refused(file: &std::path::Path, dir: &std::path::Path, extra: &[&str]) -> String {
    let mut run = Service::spawn(file, extra, &dir.join("refused.log"));
    assert!(!run.wait_exit(Duration::from_secs(60)).await.success());
    run.log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_advanced_behind_the_pipelines_back_is_accepted_only_by_its_exact_positions() {
    let db = events_database("gap").await;
    let Fixture {
        name,
        sink,
        log,
        dir,
        file,
        ..
    } = Fixture::new(&db.url, "gap", &[TABLE]).await;
    serve_metrics(&file);

    let mut a = Service::spawn(&file, &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'landed')")
        .await
        .unwrap();
    a.wait_for_landed(&log, 1, Duration::from_secs(60)).await;
    assert_eq!(accepted_gaps(&a).await, 0, "a start without a gap");
    a.stop().await;
    // A change the pipeline never sees: the slot is moved past it by hand.
    db.client
        .batch_execute("INSERT INTO events VALUES (2, 'skipped')")
        .await
        .unwrap();
    db.client
        .query_one(
            "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())::text",
            &[&name],
        )
        .await
        .unwrap();
    let entries = log.sequences().await.unwrap();
    let committed = log.latest().await.unwrap().unwrap().last_end_lsn;

    let said = refused(&file, &dir, &[]).await;
    let prefix = format!("slot \"{name}\" has confirmed up to ");
    assert!(said.contains(&prefix), "{said}");
    let token = said
        .split("--accept-gap \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the refusal names the gap to accept")
        .to_owned();
    assert!(token.starts_with(&format!("{committed}..")), "{token}");
    // Any other gap is still refused.
    let wrong = format!("{committed}..0/1");
    let said = refused(&file, &dir, &["--accept-gap", &wrong]).await;
    assert!(said.contains(&prefix), "{said}");
    assert_eq!(
        log.sequences().await.unwrap(),
        entries,
        "nothing was written"
    );

    let mut c = Service::spawn(&file, &["--accept-gap", &token], &dir.join("c.log"));
    c.wait_for_log("streaming", Duration::from_secs(60)).await;
    assert!(c.log().contains("accepting the gap"), "{}", c.log());
    let opened = log.latest().await.unwrap().unwrap();
    let gap = opened.accepted_gap.expect("the open entry records the gap");
    assert_eq!(format!("{}..{}", gap.from, gap.to), token);
    assert_eq!(accepted_gaps(&c).await, 1, "the metrics count the gap");
    db.client
        .batch_execute("INSERT INTO events VALUES (3, 'after')")
        .await
        .unwrap();
    c.wait_for_landed(&log, 2, Duration::from_secs(60)).await;
    let c_log = c.stop().await;
    let ids: Vec<String> = committed_rows(&sink, TABLE)
        .await
        .iter()
        .map(|r| r.values["id"].clone().unwrap())
        .collect();
    assert_eq!(ids, ["1", "3"], "{c_log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_server_at_the_sources_address_is_refused_before_anything_is_created() {
    let server = s3();
    let bucket = server.fresh_bucket("other-server").await;
    let name = unique_name("other_server");
    let dir = std::env::temp_dir().join(unique_name("other_server"));
    let run_on = |cluster: &TempCluster| {
        let mut cfg = ServiceConfig::new(
            &cluster.url("postgres"),
            &name,
            &[TABLE],
            &server.bucket_url(&bucket),
        );
        cfg.sink_options = server.object_store_options();
        cfg
    };
    let first = TempCluster::start(ClusterOptions::fast()).expect("a PostgreSQL cluster");
    events_on(&first).await;
    let cfg = run_on(&first);
    let sink = Sink::open(&cfg.sink_url, &cfg.sink_options.iter().cloned().collect()).unwrap();
    let log = CommitLog::new(sink, Writer::named("test"));
    let mut a = Service::spawn(&cfg.write(&dir.join("a")), &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    a.stop().await;
    let entries = log.sequences().await.unwrap();

    // The same database and slot names, on a server that is not the one the lake came from.
    let second = TempCluster::start(ClusterOptions::fast()).expect("a PostgreSQL cluster");
    let other = events_on(&second).await;
    let mut b = Service::spawn(
        &run_on(&second).write(&dir.join("b")),
        &[],
        &dir.join("b.log"),
    );
    assert!(!b.wait_exit(Duration::from_secs(60)).await.success());
    let said = b.log();
    assert!(
        said.contains(&format!(
            "the sink was written from slot \"{name}\" on database \"postgres\""
        )) && said.contains("but the server at source.url has system identifier"),
        "{said}"
    );
    let slots: i64 = other
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "no slot was created on the other server");
    assert_eq!(
        log.sequences().await.unwrap(),
        entries,
        "nothing was written"
    );
    let _ = std::fs::remove_dir_all(&dir);
    first.stop().unwrap();
    second.stop().unwrap();
}

/// Stop the cluster and start it in archive recovery that finds no archive: it replays its
/// pg_wal and ends on timeline 2, as a point-in-time recovery does. Returns a client once it
/// accepts writes there.
async fn recover_onto_a_new_timeline(cluster: &TempCluster, url: &str) -> tokio_postgres::Client {
    cluster
        .stop_server(tributary_cluster::StopMode::Fast)
        .unwrap();
    std::fs::write(cluster.data_dir().join("recovery.signal"), "").unwrap();
    let conf = cluster.data_dir().join("postgresql.auto.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap_or_default();
    text.push_str("restore_command = 'false'\n");
    std::fs::write(&conf, text).unwrap();
    cluster.start_again().unwrap();
    let client = tributary_tests::connect(url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let recovering: bool = client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .unwrap()
            .get(0);
        let timeline: i32 = client
            .query_one("SELECT timeline_id FROM pg_control_checkpoint()", &[])
            .await
            .unwrap()
            .get(0);
        if !recovering && timeline == 2 {
            return client;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still recovering ({recovering}) or on timeline {timeline}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The source server moved to another timeline (here a point-in-time style recovery of its
/// own WAL, which ends on a new timeline): start is refused with both timelines and the way
/// out before anything is written; `--accept-gap "timeline 1..2"` starts, the open entry
/// records the move, and the changes made on the new timeline land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_timeline_is_refused_until_that_move_is_accepted() {
    let cluster = TempCluster::start(ClusterOptions::fast()).expect("a PostgreSQL cluster");
    let url = cluster.url("postgres");
    let client = events_on(&cluster).await;
    let Fixture {
        sink,
        log,
        dir,
        file,
        ..
    } = Fixture::new(&url, "timeline", &[TABLE]).await;
    serve_metrics(&file);
    let a = land_first_row(&client, &file, &dir, &log, "timeline 1").await;
    assert_eq!(accepted_gaps(&a).await, 0, "a first run accepts nothing");
    a.stop().await;
    drop(client);
    let latest = log.latest().await.unwrap().unwrap();
    assert_eq!(latest.timeline, Some(1), "{latest:?}");

    let client = recover_onto_a_new_timeline(&cluster, &url).await;
    client
        .batch_execute("INSERT INTO events VALUES (2, 'timeline 2')")
        .await
        .unwrap();

    // `tributary check` refuses the move as the run does, in the same words.
    let sequences = log.sequences().await.unwrap();
    let refused = crate::check::refused_alike(&file, &dir).await;
    assert!(
        refused.starts_with(&format!(
            "the source server is on timeline 2, but this sink was written from timeline 1 (commit entry {})",
            latest.sequence
        )) && refused.contains("cannot be followed by itself: source.failover is false."),
        "{refused}"
    );
    assert!(
        refused.contains("--accept-gap \"timeline 1..2\""),
        "{refused}"
    );
    assert_eq!(
        log.sequences().await.unwrap(),
        sequences,
        "a refused start writes nothing"
    );
    // Naming the move, the check says ready, as the run then starts.
    let (code, out, err) = command("check", &file, &["--accept-gap", "timeline 1..2"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let accepted = "ok    timeline: the server moved from the lake's timeline 1 to 2, and \
                    --accept-gap accepts that move (the commit log records it)";
    assert!(out.lines().any(|l| l == accepted), "{out}");

    let mut c = Service::spawn(
        &file,
        &["--accept-gap", "timeline 1..2"],
        &dir.join("c.log"),
    );
    c.wait_for_log("streaming", Duration::from_secs(60)).await;
    c.wait_for_landed(&log, 2, Duration::from_secs(60)).await;
    assert_eq!(accepted_gaps(&c).await, 1, "the metrics count the move");
    c.stop().await;
    let mut opened = None;
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        if entry.accepted_timeline.is_some() {
            opened = Some(entry);
        }
    }
    let opened = opened.expect("an open entry that records the accepted timeline");
    let accepted = opened.accepted_timeline.unwrap();
    assert_eq!((accepted.from, accepted.to), (1, 2));
    assert_eq!(opened.timeline, Some(2));
    let bodies: Vec<String> = committed_rows(&sink, TABLE)
        .await
        .iter()
        .map(|r| r.values["body"].clone().unwrap())
        .collect();
    assert_eq!(bodies, ["timeline 1", "timeline 2"], "each change once");
}

/// The same move while the pipeline runs: its replication connection drops when the server
/// stops, and when it comes back the server is on timeline 2. The pipeline stops there, naming
/// both, before it reads or confirms anything on the new timeline; the next start is the
/// check above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_comes_back_on_another_timeline_stops_the_pipeline() {
    let cluster = TempCluster::start(ClusterOptions::fast()).expect("a PostgreSQL cluster");
    let url = cluster.url("postgres");
    let client = events_on(&cluster).await;
    let Fixture { log, dir, file, .. } = Fixture::new(&url, "moved", &[TABLE]).await;
    let mut a = land_first_row(&client, &file, &dir, &log, "timeline 1").await;
    drop(client);

    let client = recover_onto_a_new_timeline(&cluster, &url).await;
    let status = a.wait_exit(Duration::from_secs(120)).await;
    assert!(!status.success());
    let said = a.log();
    assert!(
        said.contains("lost the replication connection; reconnecting"),
        "{said}"
    );
    assert!(
        said.contains("the replication connection came back to server ")
            && said.contains(" on timeline 2, but the pipeline started on server ")
            && said.contains(" on timeline 1 (a failover"),
        "{said}"
    );
    let mut timelines = Vec::new();
    for sequence in log.sequences().await.unwrap() {
        timelines.push(log.read_entry(sequence).await.unwrap().unwrap().timeline);
    }
    assert!(
        timelines.iter().all(|t| *t == Some(1)),
        "nothing written from timeline 2: {timelines:?}"
    );

    // The next start refuses the move until it is accepted, as above.
    client
        .batch_execute("INSERT INTO events VALUES (2, 'timeline 2')")
        .await
        .unwrap();
    let mut b = Service::spawn(&file, &[], &dir.join("b.log"));
    assert!(!b.wait_exit(Duration::from_secs(60)).await.success());
    assert!(
        b.log().contains("--accept-gap \"timeline 1..2\""),
        "{}",
        b.log()
    );
    let _ = std::fs::remove_dir_all(&dir);
    cluster.stop().unwrap();
}

/// Serve the metrics of every run of the pipeline `file` on a free port.
fn serve_metrics(file: &std::path::Path) {
    let mut text = std::fs::read_to_string(file).unwrap();
    text.push_str("\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
    std::fs::write(file, text).unwrap();
}

/// What a running service's metrics count as gaps accepted (declared, and 0 without any).
async fn accepted_gaps(service: &Service) -> u64 {
    let metrics = scrape(&service.metrics_address()).await;
    metric(&metrics, "tributary_accepted_gaps_total")
        .unwrap_or_else(|| panic!("no tributary_accepted_gaps_total in:\n{metrics}"))
}

/// Start a pipeline on `file`, commit row 1 with `body` and wait until it landed.
async fn land_first_row(
    client: &tokio_postgres::Client,
    file: &std::path::Path,
    dir: &std::path::Path,
    log: &CommitLog,
    body: &str,
) -> Service {
    let mut a = Service::spawn(file, &[], &dir.join("a.log"));
    a.wait_for_log("streaming", Duration::from_secs(60)).await;
    client
        .batch_execute(&format!("INSERT INTO events VALUES (1, '{body}')"))
        .await
        .unwrap();
    a.wait_for_landed(log, 1, Duration::from_secs(60)).await;
    a
}
