//! PostgreSQL restarts under a running `tributary run`: a clean one (`pg_ctl stop -m fast`) and
//! a crash (`-m immediate`), each with changes committed but not yet landed when the server
//! goes away. The same process reconnects, resumes from what it had committed, and every
//! change lands exactly once; the slot's confirmed position never passes a commit entry.

use std::collections::BTreeSet;
use std::time::Duration;

use tributary::Lsn;
use tributary::lake::commit::CommitLog;
use tributary_cluster::{ClusterOptions, StopMode, TempCluster};
use tributary_tests::connect;
use tributary_tests::lake::committed_rows;
use tributary_tests::pipeline::{confirmed_flush, events_on};
use tributary_tests::proxy::{Mode, Proxy};
use tributary_tests::service::{Fixture, Service};

const TABLE: &str = "public.events";

/// `count` transactions of ten rows each, ids from `from`.
async fn write(url: &str, from: u32, count: u32) {
    let client = connect(url).await;
    for t in 0..count {
        let first = from + t * 10;
        client
            .batch_execute(&format!(
                "INSERT INTO events SELECT g, 'event ' || g FROM generate_series({first}, {}) g",
                first + 9
            ))
            .await
            .unwrap();
    }
}

/// The end of the last commit entry.
async fn log_end(log: &CommitLog) -> Lsn {
    log.latest()
        .await
        .unwrap()
        .map_or(Lsn::ZERO, |e| e.last_end_lsn)
}

/// `pg_ctl stop -m fast` under a running pipeline, which must finish within 20 s.
fn stop_fast_promptly(cluster: &TempCluster, service: &Service) {
    let asked = std::time::Instant::now();
    cluster
        .stop_server(StopMode::Fast)
        .unwrap_or_else(|e| panic!("{e}\n{}", service.log()));
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "the shutdown took {:?}",
        asked.elapsed()
    );
}

/// A `tributary run` of `fixture` landing through a proxy to the S3 server (which a test
/// freezes to make the sink hang), after the first ten changes (ids 1 to 10) landed.
async fn landing_through_a_proxy(url: &str, fixture: &mut Fixture) -> (Proxy, Service) {
    let s3 = tributary_tests::s3();
    let proxy = Proxy::start(&format!("127.0.0.1:{}", s3.port())).await;
    for (key, value) in &mut fixture.cfg.sink_options {
        if key == "aws_endpoint" {
            *value = format!("http://127.0.0.1:{}", proxy.port());
        }
    }
    let file = fixture.cfg.write(&fixture.dir);
    let mut service = Service::spawn(&file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    write(url, 1, 1).await;
    service
        .wait_for_landed(&fixture.log, 10, Duration::from_secs(60))
        .await;
    (proxy, service)
}

/// Stops `service` and asserts the table holds ids 1 to `total`, each once.
async fn assert_landed_once(service: Service, fixture: &Fixture, total: u32) {
    let run_log = service.stop().await;
    let ids: Vec<u32> = committed_rows(&fixture.sink, TABLE)
        .await
        .iter()
        .map(|r| r.values["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    let distinct: BTreeSet<u32> = ids.iter().copied().collect();
    assert_eq!(distinct, (1..=total).collect(), "{run_log}");
    assert_eq!(
        ids.len(),
        total as usize,
        "a change landed twice: {run_log}"
    );
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

/// A cluster of its own (the shared one must not restart under other tests) with the events
/// table: the cluster, its URL, a connection.
async fn own_cluster() -> (TempCluster, String, tokio_postgres::Client) {
    let cluster = TempCluster::start(ClusterOptions::fast()).expect("a PostgreSQL cluster");
    let url = cluster.url("postgres");
    let client = events_on(&cluster).await;
    (cluster, url, client)
}

/// A `tributary run` landing the events table of `url`, streaming.
async fn streaming(url: &str, hint: &str) -> (Fixture, Service) {
    let fixture = Fixture::new(url, hint, &[TABLE]).await;
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    (fixture, service)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_pipeline_rides_through_postgresql_restarts_and_lands_every_change_once() {
    let (cluster, url, _) = own_cluster().await;
    let (
        Fixture {
            name,
            sink,
            log,
            dir,
            ..
        },
        mut service,
    ) = streaming(&url, "restart").await;
    write(&url, 1, 20).await;
    service
        .wait_for_landed(&log, 200, Duration::from_secs(120))
        .await;

    let mut next = 201;
    for (round, mode) in [StopMode::Fast, StopMode::Immediate]
        .into_iter()
        .enumerate()
    {
        // Committed just before the server goes: some of it is not landed yet.
        write(&url, next, 20).await;
        next += 200;
        cluster.stop_server(mode).unwrap();
        let round = round + 1;
        service
            .wait_for_logged(
                "lost the replication connection",
                round,
                Duration::from_secs(30),
            )
            .await;
        // Down long enough for a few failed attempts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.start_again().unwrap();
        service
            .wait_for_logged(
                "replication connection restored",
                round,
                Duration::from_secs(90),
            )
            .await;
        write(&url, next, 20).await;
        next += 200;
        let expected = u64::from(next - 1);
        service
            .wait_for_landed(&log, expected, Duration::from_secs(120))
            .await;
        // The slot never runs ahead of the log.
        let client = connect(&url).await;
        let confirmed = confirmed_flush(&client, &name).await.unwrap();
        let end = log_end(&log).await;
        assert!(
            confirmed <= end,
            "{mode:?}: slot at {confirmed}, log ends at {end}"
        );
    }
    let run_log = service.stop().await;
    for line in run_log
        .lines()
        .filter(|l| l.contains("replication connection"))
    {
        eprintln!("{line}");
    }

    let ids: Vec<u32> = committed_rows(&sink, TABLE)
        .await
        .iter()
        .map(|r| r.values["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    let distinct: BTreeSet<u32> = ids.iter().copied().collect();
    assert_eq!(distinct, (1..next).collect(), "{run_log}");
    assert_eq!(
        ids.len(),
        distinct.len(),
        "a change landed twice: {run_log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    cluster.stop().unwrap();
}

/// Regression (found by the chaos test, seed 3331434724241618050): a fast shutdown waits until
/// the client of every logical walsender has confirmed all the walsender sent it. When the
/// last WAL before the shutdown was not a transaction the pipeline lands (one that rolled back,
/// one on a table outside the publication), the pipeline confirmed only its last landed
/// transaction, and `pg_ctl stop -m fast` never finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_shutdown_is_not_held_up_by_wal_the_pipeline_has_nothing_to_land_from() {
    let (cluster, url, client) = own_cluster().await;
    client
        .batch_execute("CREATE TABLE elsewhere (id int)")
        .await
        .unwrap();
    let (Fixture { name, log, dir, .. }, mut service) = streaming(&url, "fast_shutdown").await;
    write(&url, 1, 1).await;
    service
        .wait_for_landed(&log, 10, Duration::from_secs(60))
        .await;
    client
        .batch_execute(
            "BEGIN; INSERT INTO events VALUES (0, 'rolled back'); ROLLBACK;
             INSERT INTO elsewhere VALUES (1)",
        )
        .await
        .unwrap();
    drop(client);

    stop_fast_promptly(&cluster, &service);
    service
        .wait_for_log("lost the replication connection", Duration::from_secs(30))
        .await;
    cluster.start_again().unwrap();
    write(&url, 11, 1).await;
    service
        .wait_for_landed(&log, 20, Duration::from_secs(60))
        .await;
    let client = connect(&url).await;
    let confirmed = confirmed_flush(&client, &name).await.unwrap();
    let end = log_end(&log).await;
    assert!(confirmed <= end, "slot at {confirmed}, log ends at {end}");
    service.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    cluster.stop().unwrap();
}

/// A fast shutdown while the read stage is paused: the sink hangs, the one-MiB in-flight budget
/// fills, and the stream stops reading its socket with WAL still to send. A walsender sends
/// everything before it exits, so nothing but closing the connection lets the server stop: an
/// SQL session opened while paused learns of the stop (the server ends it with 57P01) and the
/// stream closes. Without that, `pg_ctl stop -m fast` waited out its minute. After the
/// restart every change lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_shutdown_is_not_held_up_by_a_reader_paused_behind_a_full_budget() {
    let (cluster, url, client) = own_cluster().await;
    let mut fixture = Fixture::new(&url, "fast_shutdown_paused", &[TABLE]).await;
    fixture.cfg.flush.extend([
        ("in_flight_mib".into(), "1".into()),
        ("chunk_mib".into(), "1".into()),
    ]);
    let (proxy, mut service) = landing_through_a_proxy(&url, &mut fixture).await;

    // About 40 MB of WAL in 2,000 transactions: far more than the budget, the stream's
    // queue and the socket's buffers hold.
    proxy.freeze();
    const ROWS: u32 = 200_000;
    for chunk in 0..2_000 {
        let first = 11 + chunk * 100;
        client
            .batch_execute(&format!(
                "INSERT INTO events SELECT g, repeat('x', 160) || g FROM generate_series({first}, {}) g",
                first + 99
            ))
            .await
            .unwrap();
    }
    // The premise: the walsender has WAL it could not send.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let unsent: i64 = client
        .query_one(
            "SELECT (pg_current_wal_lsn() - sent_lsn)::bigint FROM pg_stat_replication \
             WHERE application_name LIKE 'tributary%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        unsent > 8 << 20,
        "the walsender sent all but {unsent} bytes: the reader was not paused"
    );
    drop(client);
    stop_fast_promptly(&cluster, &service);
    service
        .wait_for_log("closing the replication stream", Duration::from_secs(10))
        .await;
    proxy.set_mode(Mode::Forward);
    cluster.start_again().unwrap();
    let last = 11 + ROWS;
    write(&url, last, 1).await;
    let total = last + 9;
    service
        .wait_for_landed(&fixture.log, total.into(), Duration::from_secs(300))
        .await;
    assert_landed_once(service, &fixture, total).await;
    cluster.stop().unwrap();
}

/// A fast shutdown while the pipeline is behind: the sink hangs, so changes the pipeline has
/// received are not landed, and a walsender shutting down waits until its client has
/// everything it sent. Answering its requests with the confirmed position held `pg_ctl stop
/// -m fast` until the landing caught up (past `pg_ctl`'s minute, in the chaos test); answered
/// with what was received, the server stops at once, the slot keeps what was not landed,
/// and after the restart every change lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_shutdown_is_not_held_up_by_changes_the_pipeline_has_not_landed_yet() {
    let (cluster, url, client) = own_cluster().await;
    drop(client);
    let mut fixture = Fixture::new(&url, "fast_shutdown_behind", &[TABLE]).await;
    let (proxy, service) = landing_through_a_proxy(&url, &mut fixture).await;

    proxy.freeze();
    write(&url, 11, 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_fast_promptly(&cluster, &service);
    proxy.set_mode(Mode::Forward);
    cluster.start_again().unwrap();
    write(&url, 41, 1).await;
    service
        .wait_for_landed(&fixture.log, 50, Duration::from_secs(120))
        .await;
    let client = connect(&url).await;
    let confirmed = confirmed_flush(&client, &fixture.name).await.unwrap();
    let end = log_end(&fixture.log).await;
    assert!(confirmed <= end, "slot at {confirmed}, log ends at {end}");
    assert_landed_once(service, &fixture, 50).await;
    cluster.stop().unwrap();
}
