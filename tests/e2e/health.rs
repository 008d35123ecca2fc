//! What an operator's tools see of a real `tributary run`: `/readyz` turns 503 while the sink
//! is down for longer than `metrics.ready_after_failing_secs` and 200 once it is back, while
//! `/healthz` stays 200; the lag and slot gauges agree with what PostgreSQL says in the same
//! moment; and the log is one JSON object per line naming the slot, or text without a single
//! terminal escape when it goes to a file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tributary::Lsn;
use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_tests::pipeline::{events_database, wait_for_confirmed};
use tributary_tests::proxy::Proxy;
use tributary_tests::service::{Fixture, Service, ServiceConfig, command, get};
use tributary_tests::{S3Server, postgres, s3, unique_name};

const TABLE: &str = "public.events";
/// `metrics.ready_after_failing_secs` of the outage test: small, so the test is quick.
const READY_AFTER: Duration = Duration::from_secs(2);

/// The value of the sample named exactly `series` (name and labels).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Poll `path` until it answers `code`; returns the body.
async fn wait_for_code(
    address: &str,
    path: &str,
    code: u16,
    timeout: Duration,
    log: &Path,
) -> String {
    let started = Instant::now();
    loop {
        let (got, body) = get(address, path).await;
        if got == code {
            return body;
        }
        assert!(
            started.elapsed() < timeout,
            "{path} still answered {got} ({body:?}) after {timeout:?}, not {code}:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server's clock, in seconds since the Unix epoch.
async fn server_clock(client: &tokio_postgres::Client) -> f64 {
    client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .unwrap()
        .get(0)
}

/// The slot's WAL figures as PostgreSQL reports them now: its current WAL position, the
/// slot's restart_lsn, safe_wal_size and wal_status.
async fn slot_row(
    client: &tokio_postgres::Client,
    slot: &str,
) -> (Lsn, Lsn, Option<i64>, Option<String>) {
    let row = client
        .query_one(
            "SELECT pg_current_wal_lsn()::text, restart_lsn::text, safe_wal_size, wal_status
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    let lsn = |i: usize| row.get::<_, String>(i).parse::<Lsn>().unwrap();
    (lsn(0), lsn(1), row.get(2), row.get(3))
}

/// Every line of `log` parsed as JSON; panics naming the first line that is not an object.
fn json_lines(log: &str) -> Vec<Value> {
    assert!(!log.trim().is_empty(), "nothing was logged");
    log.lines()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(value) if value.is_object() => value,
            _ => panic!("a log line is not a JSON object: {line:?}\n--- log\n{log}"),
        })
        .collect()
}

/// Write `cfg`'s pipeline file into a new directory, with slot figures sampled every second
/// and the probes on a free port, ready after [`READY_AFTER`] of failing: the directory and
/// the file.
fn write_with_probes(cfg: &ServiceConfig, hint: &str) -> (PathBuf, PathBuf) {
    let mut cfg = cfg.clone();
    cfg.source.push(("status_interval_secs".into(), "1".into()));
    let dir = std::env::temp_dir().join(unique_name(hint));
    let file = cfg.write(&dir);
    let mut text = cfg.toml();
    text.push_str(&format!(
        "\n[metrics]\nlisten = \"127.0.0.1:0\"\nready_after_failing_secs = {}\n",
        READY_AFTER.as_secs()
    ));
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_while_the_sink_is_down_and_back_to_200_while_healthz_stays_200() {
    let db = events_database("health").await;
    let mut server = S3Server::start();
    let bucket = server.fresh_bucket("health").await;
    let name = unique_name("health");
    let mut cfg = ServiceConfig::new(&db.url, &name, &[TABLE], &server.bucket_url(&bucket));
    cfg.sink_options = server.object_store_options();
    let (dir, file) = write_with_probes(&cfg, "health");
    let sink = Sink::open(&cfg.sink_url, &cfg.sink_options.iter().cloned().collect()).unwrap();
    let log = CommitLog::new(sink, Writer::named("test"));
    let log_file = dir.join("run.log");
    let mut service = Service::spawn(&file, &["--log-format", "json"], &log_file);
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let address = service.metrics_address();

    // /healthz is asked every 100 ms from here to the end; it must never say anything but 200.
    let watching = Arc::new(AtomicBool::new(true));
    let healthz = tokio::spawn({
        let (address, watching) = (address.clone(), Arc::clone(&watching));
        async move {
            let mut answers = 0u32;
            while watching.load(Ordering::Relaxed) {
                let (code, body) = get(&address, "/healthz").await;
                assert_eq!((code, body.as_str()), (200, "alive: streaming\n"));
                answers += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answers
        }
    });

    let ready = wait_for_code(&address, "/readyz", 200, Duration::from_secs(30), &log_file).await;
    assert!(ready.starts_with("ready: streaming, confirmed "), "{ready}");
    assert_eq!(ready.lines().count(), 1, "{ready}");
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'before the outage')")
        .await
        .unwrap();
    let inserted = current_wal(&db.client).await;
    service
        .wait_for_landed(&log, 1, Duration::from_secs(60))
        .await;
    let confirmed = wait_for_confirmed(&db.client, &name, inserted).await;
    assert!(
        confirmed >= inserted,
        "the slot was not confirmed past the insert"
    );

    // Idle, everything read has landed: no lag. The slot's figures agree with the server's.
    let metrics = get(&address, "/metrics").await.1;
    assert_eq!(
        sample(&metrics, "tributary_lag_seconds"),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "tributary_ready"), Some(1.0), "{metrics}");
    slot_gauges_agree_with_the_server(&address, &db.client, &name).await;

    // The sink goes away; a transaction arrives that cannot land.
    server.stop();
    let stopped = Instant::now();
    let before_commit = server_clock(&db.client).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (2, 'during the outage')")
        .await
        .unwrap();
    let after_commit = server_clock(&db.client).await;
    let not_ready =
        wait_for_code(&address, "/readyz", 503, Duration::from_secs(60), &log_file).await;
    let took = stopped.elapsed();
    // The step counts as failing once the sink client's own few request retries (about a
    // second) gave up; then READY_AFTER passes, and the probe is polled every 100 ms.
    assert!(
        took >= READY_AFTER && took <= READY_AFTER + Duration::from_secs(10),
        "503 after {took:?}, {READY_AFTER:?} being the threshold: {not_ready}"
    );
    assert!(
        not_ready.starts_with("not ready: the sink has been failing for ")
            && not_ready.ends_with('\n')
            && not_ready.lines().count() == 1,
        "{not_ready:?}"
    );
    // The lag is the age of the transaction that cannot land, by the server's clock.
    let scrape_from = server_clock(&db.client).await;
    let metrics = get(&address, "/metrics").await.1;
    let scrape_to = server_clock(&db.client).await;
    let lag = sample(&metrics, "tributary_lag_seconds").expect("a lag sample");
    assert!(
        lag >= scrape_from - after_commit - 0.001 && lag <= scrape_to - before_commit + 0.001,
        "lag {lag} s is not the age of the commit between {before_commit} and {after_commit} \
         scraped between {scrape_from} and {scrape_to}"
    );
    assert!(lag >= READY_AFTER.as_secs_f64(), "{metrics}");
    assert_eq!(sample(&metrics, "tributary_ready"), Some(0.0), "{metrics}");
    assert_eq!(
        sample(&metrics, "tributary_sink_failing"),
        Some(1.0),
        "{metrics}"
    );

    // The sink returns: ready again once the step that failed is retried and succeeds.
    server.restart();
    let ready = wait_for_code(&address, "/readyz", 200, Duration::from_secs(90), &log_file).await;
    assert!(ready.starts_with("ready: streaming, confirmed "), "{ready}");
    service
        .wait_for_landed(&log, 2, Duration::from_secs(60))
        .await;
    assert!(
        stopped.elapsed() > READY_AFTER,
        "the outage lasted past the threshold"
    );
    let landed_lag = wait_for_lag_zero(&address).await;
    assert_eq!(landed_lag, 0.0);

    watching.store(false, Ordering::Relaxed);
    let answers = healthz.await.expect("/healthz answered 200 every time");
    assert!(answers >= 20, "/healthz was asked only {answers} times");

    // The log, read as a log pipeline reads it: one JSON object per line, each naming the
    // slot; each committed flush says what it landed and how late.
    let text = service.stop().await;
    let lines = json_lines(&text);
    for line in &lines {
        assert_eq!(line["slot"], name.as_str(), "{line}");
        assert!(
            line["timestamp"].is_string() && line["level"].is_string(),
            "{line}"
        );
    }
    let committed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "committed" && l["changes"].as_u64() > Some(0))
        .collect();
    assert_eq!(
        committed.len(),
        2,
        "one line per flush with changes:\n{text}"
    );
    for line in &committed {
        for field in ["changes", "files", "bytes", "sequence"] {
            assert!(line[field].as_u64().is_some(), "{field} missing: {line}");
        }
        assert!(line["lag_seconds"].as_f64().is_some(), "{line}");
    }
    // The flush that waited out the outage says so.
    let late = committed[1]["lag_seconds"].as_f64().unwrap();
    assert!(late >= READY_AFTER.as_secs_f64(), "{}", committed[1]);
    assert!(
        lines.iter().any(|l| l["level"] == "WARN"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.contains("failed (flush"))),
        "the outage was logged:\n{text}"
    );
}

/// The server's current WAL position.
async fn current_wal(client: &tokio_postgres::Client) -> Lsn {
    tributary::source::provision::current_wal_lsn(client)
        .await
        .unwrap()
}

/// Wait until the lag gauge reads 0 (the landing is published just after the commit entry).
async fn wait_for_lag_zero(address: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = get(address, "/metrics").await.1;
        let lag = sample(&metrics, "tributary_lag_seconds").expect("a lag sample");
        if lag == 0.0 || Instant::now() > deadline {
            return lag;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The slot gauges of a scrape against `pg_replication_slots` read around it.
///
/// Retained WAL is the server's position minus the slot's `restart_lsn`, sampled once a second
/// at a moment the test cannot see, while other tests in the cluster write WAL. Both positions
/// only move forward, so a sample taken between two readings `a` and `b` lies between
/// `current(a) - restart(b)` and `current(b) - restart(a)`: that interval is the tolerance. The
/// test waits more than two sampling intervals after `a`, so the scrape shows a sample taken
/// after it.
async fn slot_gauges_agree_with_the_server(
    address: &str,
    client: &tokio_postgres::Client,
    slot: &str,
) {
    let (current_a, restart_a, safe_a, status_a) = slot_row(client, slot).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let metrics = get(address, "/metrics").await.1;
    let (current_b, restart_b, safe_b, status_b) = slot_row(client, slot).await;
    let retained =
        sample(&metrics, "tributary_slot_retained_wal_bytes").expect("a retained WAL sample");
    let low = current_a.0.saturating_sub(restart_b.0) as f64;
    let high = current_b.0.saturating_sub(restart_a.0) as f64;
    assert!(
        (low..=high).contains(&retained),
        "retained {retained} bytes, the server between {low} and {high}\n{metrics}"
    );
    assert_eq!(status_a, status_b, "wal_status changed during the test");
    let status = status_a.expect("a wal_status");
    for known in ["reserved", "extended", "unreserved", "lost"] {
        let series = format!("tributary_slot_wal_status{{status=\"{known}\"}}");
        let expected = if known == status { 1.0 } else { 0.0 };
        assert_eq!(sample(&metrics, &series), Some(expected), "{metrics}");
    }
    // The test cluster keeps WAL for slots without limit: safe_wal_size is NULL, and the
    // gauge has no sample rather than a made-up number.
    assert_eq!(safe_a.is_none(), safe_b.is_none());
    assert_eq!(
        sample(&metrics, "tributary_slot_safe_wal_bytes").is_some(),
        safe_b.is_some(),
        "{metrics}"
    );
}

/// A network partition between the pipeline and PostgreSQL: nothing is delivered and nothing
/// closed. The replication stream just goes quiet, but the slot's sampler gets no answer, and
/// once that has lasted past the threshold the pipeline is not ready, naming the source; when
/// the network heals it is ready again, and alive throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_stops_answering_turns_readyz_503_naming_the_source() {
    let db = events_database("source_silent").await;
    let cluster = postgres();
    let proxy = Proxy::start(&format!("{}:{}", cluster.host(), cluster.port())).await;
    let server = s3();
    let bucket = server.fresh_bucket("source-silent").await;
    let name = unique_name("source_silent");
    let through_proxy = db.url.replace(
        &format!(":{}/", cluster.port()),
        &format!(":{}/", proxy.port()),
    );
    let mut cfg = ServiceConfig::new(&through_proxy, &name, &[TABLE], &server.bucket_url(&bucket));
    cfg.sink_options = server.object_store_options();
    let (dir, file) = write_with_probes(&cfg, "source_silent");
    let log_file = dir.join("run.log");
    let mut service = Service::spawn(&file, &[], &log_file);
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let address = service.metrics_address();
    wait_for_code(&address, "/readyz", 200, Duration::from_secs(30), &log_file).await;

    proxy.freeze();
    let frozen = Instant::now();
    // A sample waits 10 s for an answer before it counts as failed, then the threshold passes.
    let not_ready =
        wait_for_code(&address, "/readyz", 503, Duration::from_secs(60), &log_file).await;
    assert!(frozen.elapsed() > READY_AFTER, "{not_ready}");
    assert!(
        not_ready.starts_with("not ready: the source has been failing for ")
            && not_ready.contains(&format!("sampling the WAL figures of slot \"{name}\""))
            && not_ready.lines().count() == 1,
        "{not_ready:?}"
    );
    assert_eq!(get(&address, "/healthz").await.0, 200);

    proxy.set_mode(tributary_tests::proxy::Mode::Forward);
    let ready = wait_for_code(&address, "/readyz", 200, Duration::from_secs(60), &log_file).await;
    assert!(ready.starts_with("ready: streaming"), "{ready}");
    assert_eq!(get(&address, "/healthz").await.0, 200);
    let log = service.stop().await;
    assert_eq!(
        log.matches("cannot sample the WAL figures of slot").count(),
        1,
        "the failure is told once:\n{log}"
    );
    assert!(
        log.contains(&format!(
            "sampling the WAL figures of slot \"{name}\" works again"
        )),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_log_in_a_file_has_no_terminal_escapes_and_says_each_flushs_lag() {
    let db = events_database("text_log").await;
    let fixture = Fixture::new(&db.url, "text_log", &[TABLE]).await;
    let log_file = fixture.dir.join("run.log");
    let mut service = Service::spawn(&fixture.file, &[], &log_file);
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'a'), (2, 'b')")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 2, Duration::from_secs(60))
        .await;
    let text = service.stop().await;
    assert!(!text.contains('\x1b'), "an escape byte in the log:\n{text}");
    let committed = text
        .lines()
        .find(|l| l.contains("committed") && l.contains("changes=2"))
        .unwrap_or_else(|| panic!("no committed line for the flush:\n{text}"));
    for field in ["files=", "bytes=", "lag_seconds="] {
        assert!(committed.contains(field), "{field} missing: {committed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_format_comes_from_the_environment_and_a_failure_is_json_too() {
    let db = events_database("json_env").await;
    let fixture = Fixture::new(&db.url, "json_env", &[TABLE]).await;
    // A bucket that does not exist: the run stops at start with an error.
    let mut cfg = fixture.cfg.clone();
    cfg.sink_url = format!("{}-missing", cfg.sink_url);
    let file = cfg.write(&fixture.dir.join("missing"));
    let (code, _, stderr) = command("run", &file, &[], &[("TRIBUTARY_LOG_FORMAT", "json")]).await;
    assert_eq!(code, 1, "{stderr}");
    let lines = json_lines(&stderr);
    assert!(
        lines.iter().all(|l| l["slot"] == fixture.name.as_str()),
        "{stderr}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("does not exist")),
        "{stderr}"
    );
    // An unknown format is refused by name.
    let (code, _, stderr) = command("run", &file, &[], &[("TRIBUTARY_LOG_FORMAT", "yaml")]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("yaml") && stderr.contains("json"),
        "{stderr}"
    );
}

/// The scheduling policy of each thread of process `pid` (`/proc/<pid>/task/*/stat`, field
/// 41): 0 for SCHED_OTHER, 3 for SCHED_BATCH.
fn thread_policies(pid: i32) -> Vec<u32> {
    let mut policies = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
        // The fields after the command name, which is in parentheses, start at field 3.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let policy = after.split(' ').nth(41 - 3).unwrap();
        policies.push(policy.parse().unwrap());
    }
    policies
}

/// A pipeline's threads run under SCHED_BATCH, so that they do not preempt a walsender on
/// the same host each time the stream wakes them; `TRIBUTARY_SCHEDULING=normal` (or
/// `--scheduling normal`) keeps the kernel's default policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelines_threads_run_under_sched_batch_unless_told_otherwise() {
    let db = events_database("scheduling").await;
    let fixture = Fixture::new(&db.url, "scheduling", &[TABLE]).await;
    for (env, wanted) in [(None, 3), (Some("normal"), 0)] {
        let log_file = fixture.dir.join("run.log");
        let env: Vec<(&str, &str)> = env
            .map(|e| ("TRIBUTARY_SCHEDULING", e))
            .into_iter()
            .collect();
        let mut service = Service::spawn_with(&fixture.file, &[], &log_file, &env);
        service
            .wait_for_log("streaming", Duration::from_secs(120))
            .await;
        let policies = thread_policies(service.pid());
        assert!(policies.len() > 2, "{policies:?}");
        assert!(
            policies.iter().all(|&p| p == wanted),
            "{env:?}: {policies:?}"
        );
        service.stop().await;
    }
}
