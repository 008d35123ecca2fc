//! The metrics endpoint of a real `tributary run`: what landed, where the slot is confirmed,
//! and what each plugin counted and sent to the dead-letter output, labelled with the plugin;
//! the flush, upload and commit latencies as histograms; probes and scrapes answered at once
//! while idle and stalled clients hold connections open; and an address in use refused before
//! the slot or the publication is created.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tributary_tests::plugin;
use tributary_tests::service::{Fixture, Service, get, metric as sample, scrape};

const TABLE: &str = "public.signups";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_counters_and_dead_letters_reach_the_metrics_labelled_with_the_plugin() {
    let db = tributary_tests::fresh_database("metrics").await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE {TABLE} (id bigint PRIMARY KEY, email text, payload text)"
        ))
        .await
        .unwrap();
    let fixture = Fixture::new(&db.url, "metrics", &[TABLE]).await;
    // The mask counts what it masked; flatten rejects the row whose payload is not JSON.
    let mut text = fixture.cfg.toml();
    text.push_str(&format!(
        "\n[[transform]]\nplugin = {:?}\nconfig = {{ columns = \"email\" }}\n\
         \n[[transform]]\nplugin = {:?}\non_error = \"dead-letter\"\n\
         config = {{ column = \"payload\", fields = \"plan:text\", copy = \"id:int8\" }}\n\
         \n[metrics]\nlisten = \"127.0.0.1:0\"\n",
        plugin("mask").display().to_string(),
        plugin("flatten").display().to_string(),
    ));
    std::fs::write(&fixture.file, text).unwrap();
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let address = service.metrics_address();

    db.client
        .batch_execute(&format!(
            r#"INSERT INTO {TABLE} VALUES (1, 'ann@example.com', '{{"plan": "pro"}}'),
                                          (2, 'bob@example.com', '{{"plan": "free"}}'),
                                          (3, 'cy@example.com', '{{oops');
               INSERT INTO {TABLE} VALUES (4, 'di@example.com', '{{"plan": "pro"}}');"#
        ))
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 4, Duration::from_secs(60))
        .await;
    let metrics = scrape(&address).await;
    let entry = fixture.log.latest().await.unwrap().unwrap();

    assert_eq!(
        sample(&metrics, "tributary_changes_total"),
        Some(4),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "tributary_streaming"),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "tributary_confirmed_lsn"),
        Some(entry.last_end_lsn.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"tributary_plugin_counter_total{plugin="mask",counter="values_masked"}"#
        ),
        Some(4),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"tributary_dead_letters_total{plugin="flatten"}"#
        ),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, r#"tributary_dead_letters_total{plugin="mask"}"#),
        Some(0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "tributary_dead_letters_committed"),
        Some(1),
        "{metrics}"
    );
    let calls = sample(&metrics, r#"tributary_plugin_calls_total{plugin="mask"}"#).unwrap();
    assert!(calls >= 1, "{metrics}");

    // The counters are in the log too, with the plugin's name.
    let log = service.stop().await;
    assert!(log.contains("plugin counters so far: "), "{log}");
    assert!(log.contains("values_masked"), "{log}");
    let last = log
        .lines()
        .rfind(|l| l.contains("plugin counters: "))
        .unwrap_or_else(|| panic!("no final plugin counters in the log:\n{log}"));
    assert!(last.contains("flatten: "), "{last}");
    assert!(last.contains("1 dead letters"), "{last}");
    assert!(last.contains("values_masked 4"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_address_in_use_is_refused_before_the_slot_is_created() {
    let db = tributary_tests::fresh_database("metrics_busy").await;
    db.client
        .batch_execute(&format!("CREATE TABLE {TABLE} (id bigint PRIMARY KEY)"))
        .await
        .unwrap();
    let fixture = Fixture::new(&db.url, "metrics_busy", &[TABLE]).await;
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = held.local_addr().unwrap();
    let mut text = fixture.cfg.toml();
    text.push_str(&format!("\n[metrics]\nlisten = \"{address}\"\n"));
    std::fs::write(&fixture.file, text).unwrap();

    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    let status = service.wait_exit(Duration::from_secs(60)).await;
    assert!(!status.success());
    let log = service.log();
    assert!(
        log.contains(&format!(
            "metrics.listen = \"{address}\": cannot listen there; choose a free port, or stop what holds it"
        )),
        "{log}"
    );
    let slots = db
        .client
        .query(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&fixture.name],
        )
        .await
        .unwrap();
    assert!(slots.is_empty(), "a slot was created:\n{log}");
    let publications = db
        .client
        .query(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&fixture.name],
        )
        .await
        .unwrap();
    assert!(publications.is_empty(), "a publication was created:\n{log}");
    drop(held);
}

/// Issue 36: the endpoint answered one connection at a time, giving each 5 s to send its
/// request, so one idle client added 5 s to every probe and fifty stalled it for minutes (a
/// Kubernetes probe gives up after 5 s and restarts a healthy pipeline). Now each connection
/// is served on its own, and a client that does not finish its request is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_idle_connections_and_a_stalled_request_delay_no_probe_or_scrape() {
    let db = tributary_tests::fresh_database("metrics_idle").await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE {TABLE} (id bigint PRIMARY KEY, email text)"
        ))
        .await
        .unwrap();
    let fixture = Fixture::new(&db.url, "metrics_idle", &[TABLE]).await;
    let mut text = fixture.cfg.toml();
    text.push_str("\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
    std::fs::write(&fixture.file, text).unwrap();
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let address = service.metrics_address();
    // Two transactions, so that there is something to time.
    for id in [1, 2] {
        db.client
            .batch_execute(&format!(
                "INSERT INTO {TABLE} VALUES ({id}, 'user{id}@example.com')"
            ))
            .await
            .unwrap();
    }
    service
        .wait_for_landed(&fixture.log, 2, Duration::from_secs(60))
        .await;

    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(TcpStream::connect(&address).await.unwrap());
    }
    let mut stalled = TcpStream::connect(&address).await.unwrap();
    stalled.write_all(b"GET /metr").await.unwrap();
    // The server has taken them all before the probe comes.
    tokio::time::sleep(Duration::from_millis(200)).await;

    for (path, code, body) in [
        ("/healthz", 200, "alive: streaming\n"),
        ("/readyz", 200, "ready: streaming"),
    ] {
        let asked = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), get(&address, path))
            .await
            .unwrap_or_else(|_| panic!("{path} gave no answer within 5 s"));
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(1), "{path} took {took:?}");
        assert_eq!(answer.0, code, "{path}: {}", answer.1);
        assert!(answer.1.starts_with(body), "{path}: {}", answer.1);
    }
    // Within a Kubernetes probe's default timeoutSeconds, a scrape too.
    let metrics = tokio::time::timeout(Duration::from_secs(5), scrape(&address))
        .await
        .expect("/metrics gave no answer within 5 s");

    let flushes = sample(&metrics, "tributary_flushes_total").unwrap();
    let files = sample(&metrics, "tributary_files_written_total").unwrap();
    assert!(flushes >= 1 && files >= 1, "{metrics}");
    for (name, help) in [
        ("tributary_flush_seconds", "# HELP tributary_flush_seconds "),
        (
            "tributary_upload_seconds",
            "# HELP tributary_upload_seconds ",
        ),
        (
            "tributary_commit_seconds",
            "# HELP tributary_commit_seconds ",
        ),
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(help)),
            "no HELP for {name}:\n{metrics}"
        );
        assert!(
            metrics.contains(&format!("\n# TYPE {name} histogram\n")),
            "no TYPE for {name}:\n{metrics}"
        );
        let count = sample(&metrics, &format!("{name}_count")).unwrap();
        let inf = sample(&metrics, &format!("{name}_bucket{{le=\"+Inf\"}}"));
        assert_eq!(inf, Some(count), "{name}:\n{metrics}");
        let sum: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_sum "))?.parse().ok())
            .unwrap_or_else(|| panic!("no {name}_sum:\n{metrics}"));
        assert!(sum > 0.0, "{name}_sum {sum}:\n{metrics}");
    }
    // Every committed flush was timed once; every data file's upload, and every commit
    // entry, at least once (a retried attempt is timed too).
    assert_eq!(
        sample(&metrics, "tributary_flush_seconds_count"),
        Some(flushes),
        "{metrics}"
    );
    assert!(sample(&metrics, "tributary_upload_seconds_count").unwrap() >= files);
    assert!(sample(&metrics, "tributary_commit_seconds_count").unwrap() >= flushes);

    // The stalled client is dropped once its time to send the request is up.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), stalled.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(_)) | Ok(Err(_))),
        "a stalled request was still open after 15 s"
    );
    drop(idle);
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}
