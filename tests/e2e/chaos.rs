//! The chaos test: the exactly-once promise under a seeded random schedule of real faults.
//!
//! A mixed workload ([`workload`]) writes to three tables of a PostgreSQL cluster of the test's
//! own while one process run of the test applies, in an order drawn from the seed
//! ([`schedule`]):
//!
//! - SIGKILLs of the real `tributary run` child at a random moment of its life (start-up, the
//!   middle of a flush, between flushes), each followed by a new start (`--wait`, since the
//!   killed walsender may hold the slot a moment longer), in bursts;
//! - S3 outages: the test's own S3 server stopped for 30 s, and the proxy in front of it
//!   answering 500 or 503 to every request, or stalling (accepting, saying nothing);
//! - PostgreSQL restarts, `-m fast` and `-m immediate`.
//!
//! After every burst of kills, and before and after every outage, the test waits until the
//! pipeline has caught up with the source (a marker row written, the commit log past it): a
//! pipeline that is stuck or crash-loops fails the test there. An outage hits a running
//! process, which must ride it out and catch up by itself (no restart) and log that it saw it.
//! Throughout, the slot's confirmed position is sampled and must never be past the end of the
//! latest commit entry. At the end the lake, replayed, equals the source
//! ([`assert_lake_equals_source`]): no duplicate and no missing identity, no file no entry
//! names.
//!
//! The seed is printed at the start and in every failure; `TRIBUTARY_CHAOS_SEED=<seed>` replays
//! the same schedule (the same faults, durations and order) and the same choices in each
//! workload task. Timings vary with the machine, so where exactly a kill lands in the flush
//! protocol, and how the tasks interleave (and so which ids their statements touch), do too.
//! `TRIBUTARY_CHAOS_KEEP=1` keeps the runs' logs of a passing run too (a failing one always
//! keeps them). The long mode (`#[ignore]`d; see `docs/reliability.md` and `scripts/chaos.sh`)
//! runs 500+ kills.

mod schedule;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use schedule::{
    CI, CI_ICEBERG_DIRECTORY, CI_ICEBERG_REST, CI_ICEBERG_SQL, LONG, Lake, Plan, S3_OUTAGE, Step,
    schedule,
};
use tributary::Lsn;
use tributary::config::PipelineConfig;
use tributary::lake::commit::{CommitLog, EntryKind, Writer};
use tributary::lake::iceberg::pointer::Catalog;
use tributary::lake::sink::Sink;
use tributary_cluster::{ClusterOptions, StopMode, TempCluster};
use tributary_tests::catalog::{
    CLIENT_SECRET, RestCatalogServer, RestServerOptions, rest_sink, toml_text,
};
use tributary_tests::chaos::{
    ConfirmWatch, Rng, TableFigures, assert_lake_equals_source, seed_from_env, try_connect,
};
use tributary_tests::lake::{entries, object_names};
use tributary_tests::proxy::{Mode, Proxy};
use tributary_tests::service::{Service, ServiceConfig};
use tributary_tests::{S3Server, TestDatabase, unique_name};
use workload::{SCHEMA, TABLES, Tally, Workload, marker_id};

/// What the run did, for the report and `docs/reliability.md`.
#[derive(Debug, Default)]
struct Figures {
    kills: usize,
    /// Kills while a large transaction, committed in the source, had no entry in the log yet.
    kills_in_large: usize,
    starts: usize,
    s3_outages: usize,
    errors_500: usize,
    errors_503: usize,
    stalls: usize,
    pg_fast: usize,
    pg_immediate: usize,
    /// The longest a PostgreSQL stop took.
    longest_stop: Duration,
    settles: usize,
    longest_settle: Duration,
    confirmed: Lsn,
    samples: u64,
    entries: usize,
    /// When the schedule ended, the pipeline had caught up and stopped, and the lake was
    /// compared.
    phases: [Duration; 3],
}

/// Everything one chaos run holds.
struct Chaos {
    plan: &'static Plan,
    started: Instant,
    cluster: Arc<TempCluster>,
    s3: Arc<Mutex<S3Server>>,
    proxy: Proxy,
    url: String,
    slot: String,
    file: PathBuf,
    dir: PathBuf,
    /// The sink and its log, reached directly (not through the proxy).
    sink: Sink,
    /// The sink's own object_store settings (none for a directory).
    sink_options: BTreeMap<String, String>,
    log: CommitLog,
    /// The Iceberg tables' catalog, and what serves it, when the lake has one.
    catalog: Option<Catalog>,
    _catalog_db: Option<TestDatabase>,
    _catalog_server: Option<RestCatalogServer>,
    service: Option<Service>,
    sql: Option<tokio_postgres::Client>,
    markers: u64,
    workload: Option<Workload>,
    /// The log's latest sequence when a large transaction committed, until its entry appears.
    large_pending: Option<u64>,
    /// Data files the entries up to `named_upto` name.
    named: BTreeSet<String>,
    named_upto: u64,
    figures: Figures,
}

impl Chaos {
    async fn new(plan: &'static Plan) -> Chaos {
        let cluster = TempCluster::start(
            // Large transactions reach the pipeline in chunks while they run.
            ClusterOptions::fast().setting("logical_decoding_work_mem", "64kB"),
        )
        .expect("a PostgreSQL cluster");
        let url = cluster.url("postgres");
        tributary_tests::connect(&url)
            .await
            .batch_execute(SCHEMA)
            .await
            .unwrap();
        let s3 = S3Server::start();
        let bucket = s3.fresh_bucket("chaos").await;
        let proxy = Proxy::start(&format!("127.0.0.1:{}", s3.port())).await;
        let name = unique_name("chaos");
        let tables: Vec<&str> = TABLES.iter().map(|(t, _)| *t).collect();
        let dir = std::env::temp_dir().join(&name);
        let (sink_url, direct) = match plan.lake {
            Lake::Directory => {
                let lake = dir.join("lake");
                std::fs::create_dir_all(&lake).unwrap();
                (format!("file://{}", lake.display()), Vec::new())
            }
            _ => (s3.bucket_url(&bucket), s3.object_store_options()),
        };
        let mut cfg = ServiceConfig::new(&url, &name, &tables, &sink_url);
        cfg.sink_options = direct
            .iter()
            .map(|(key, value)| match key.as_str() {
                "aws_endpoint" => (key.clone(), format!("http://127.0.0.1:{}", proxy.port())),
                _ => (key.clone(), value.clone()),
            })
            .collect();
        // Flushes often enough that kills land in every step of one; a large transaction in
        // parts of 4 MiB, with a budget that makes the reader wait for landing.
        cfg.max_delay_ms = 400;
        cfg.max_rows = 5_000;
        cfg.flush = vec![
            ("in_flight_mib".into(), "32".into()),
            ("chunk_mib".into(), "4".into()),
        ];
        if plan.format != "parquet" {
            cfg.sink
                .push(("format".into(), format!("{:?}", plan.format)));
            for table in &tables {
                cfg.sections
                    .push(format!("[outputs.\"{table}\"]\nmirror = true"));
            }
        }
        let (mut catalog_db, mut catalog_server) = (None, None);
        match plan.lake {
            Lake::S3 | Lake::Directory => {}
            Lake::S3Sql => {
                let db = tributary_tests::fresh_database("chaos_catalog").await;
                cfg.sink.push(("catalog".into(), toml_text(&db.url)));
                catalog_db = Some(db);
            }
            Lake::S3Rest => {
                let server = RestCatalogServer::start(&RestServerOptions::on_s3(&s3, &bucket));
                std::fs::create_dir_all(&dir).unwrap();
                cfg.sink.extend(rest_sink(&server, &dir, CLIENT_SECRET));
                catalog_server = Some(server);
            }
        }
        let file = cfg.write(&dir);
        let catalog = PipelineConfig::load(&file).unwrap().sink.catalog();
        let sink_options: BTreeMap<String, String> = direct.into_iter().collect();
        let sink = Sink::open(&cfg.sink_url, &sink_options).unwrap();
        Chaos {
            plan,
            started: Instant::now(),
            cluster: Arc::new(cluster),
            s3: Arc::new(Mutex::new(s3)),
            proxy,
            url,
            slot: name,
            file,
            dir,
            log: CommitLog::new(sink.clone(), Writer::named("chaos")),
            sink,
            sink_options,
            catalog,
            _catalog_db: catalog_db,
            _catalog_server: catalog_server,
            service: None,
            sql: None,
            markers: 0,
            workload: None,
            large_pending: None,
            named: BTreeSet::new(),
            named_upto: 0,
            figures: Figures::default(),
        }
    }

    fn spawn(&mut self) {
        self.figures.starts += 1;
        let log = self.run_log(self.figures.starts);
        self.service = Some(Service::spawn(&self.file, &["--wait"], &log));
    }

    /// The log of the `n`-th run.
    fn run_log(&self, n: usize) -> PathBuf {
        self.dir.join(format!("run-{n:04}.log"))
    }

    fn service(&mut self) -> &mut Service {
        self.service.as_mut().expect("a running service")
    }

    /// A failure message: what went wrong, where the logs are, the current run's last lines.
    fn failure(&mut self, what: &str) -> String {
        let log = self.service.as_ref().map(Service::log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "{what} (after {:?}; every run's log is in {}); the last lines of run {}:\n{}",
            self.started.elapsed(),
            self.dir.display(),
            self.figures.starts,
            tail.join("\n")
        )
    }

    /// Panics if the current run has exited: nothing but the test may end it.
    fn check_alive(&mut self) {
        if let Some(status) = self.service().exited() {
            let message = self.failure(&format!("run {} exited ({status})", self.figures.starts));
            panic!("{message}");
        }
    }

    async fn execute(&mut self, step: &Step) {
        match *step {
            Step::Kill { after } => {
                tokio::time::sleep(after).await;
                self.check_alive();
                if self.large_in_flight().await {
                    self.figures.kills_in_large += 1;
                }
                self.service.take().unwrap().kill().await;
                self.figures.kills += 1;
                self.spawn();
            }
            Step::Settle => {
                self.settle().await;
            }
            Step::S3Down { lasting } => {
                let before = self.before_outage().await;
                let s3 = self.s3.clone();
                blocking(move || s3.lock().unwrap().stop()).await;
                tokio::time::sleep(lasting).await;
                let s3 = self.s3.clone();
                blocking(move || s3.lock().unwrap().restart()).await;
                self.figures.s3_outages += 1;
                self.after_outage(&before, &["the sink is reachable again"])
                    .await;
            }
            Step::S3Errors { status, lasting } => {
                let before = self.before_outage().await;
                self.proxy.set_mode(Mode::Status(status));
                tokio::time::sleep(lasting).await;
                self.proxy.set_mode(Mode::Forward);
                match status {
                    500 => self.figures.errors_500 += 1,
                    _ => self.figures.errors_503 += 1,
                }
                self.after_outage(&before, &["the sink is reachable again"])
                    .await;
            }
            Step::S3Stall { lasting } => {
                let before = self.before_outage().await;
                self.proxy.set_mode(Mode::Stall);
                tokio::time::sleep(lasting).await;
                self.proxy.set_mode(Mode::Forward);
                self.figures.stalls += 1;
                // A stall shorter than the request timeout may only delay requests.
                self.after_outage(&before, &[]).await;
            }
            Step::PgRestart { mode, down } => {
                let before = self.before_outage().await;
                let cluster = self.cluster.clone();
                let asked = Instant::now();
                if let Err(e) = blocking(move || cluster.stop_server(mode)).await {
                    let message = self.failure(&format!("PostgreSQL did not stop ({mode:?}): {e}"));
                    panic!("{message}");
                }
                self.figures.longest_stop = self.figures.longest_stop.max(asked.elapsed());
                tokio::time::sleep(down).await;
                let cluster = self.cluster.clone();
                if let Err(e) = blocking(move || cluster.start_again()).await {
                    let message = self.failure(&format!("PostgreSQL did not start again: {e}"));
                    panic!("{message}");
                }
                match mode {
                    StopMode::Fast => self.figures.pg_fast += 1,
                    StopMode::Immediate => self.figures.pg_immediate += 1,
                }
                self.after_outage(
                    &before,
                    &[
                        "lost the replication connection",
                        "replication connection restored",
                    ],
                )
                .await;
            }
            Step::Truncate => self.workload.as_mut().unwrap().truncate().await,
            Step::LargeTransaction => {
                // Its entry comes after the log's latest now; from its commit until that entry
                // is in the log, kills interrupt it.
                let latest = self.log.latest().await.ok().flatten();
                let rows = self.plan.large_rows;
                self.workload
                    .as_mut()
                    .unwrap()
                    .large_transaction(rows)
                    .await;
                self.large_pending = Some(latest.map_or(0, |e| e.sequence));
            }
        }
    }

    /// Whether a large transaction has committed in the source and has no entry in the log
    /// yet: a kill now interrupts it.
    async fn large_in_flight(&mut self) -> bool {
        let Some(from) = self.large_pending else {
            return false;
        };
        let Ok(sequences) = self.log.sequences().await else {
            return true;
        };
        for sequence in sequences.into_iter().filter(|s| *s > from) {
            match self.log.read_entry(sequence).await {
                Ok(Some(entry)) if entry.changes >= self.plan.large_rows => {
                    self.large_pending = None;
                    return false;
                }
                Ok(_) => self.large_pending = Some(sequence),
                Err(_) => return true,
            }
        }
        true
    }

    /// Before an outage: the pipeline streams and has caught up. Returns what it logged.
    async fn before_outage(&mut self) -> String {
        self.settle().await;
        self.service().log()
    }

    /// After one: the same process (never restarted) catches up by itself, and its log shows
    /// each of `evidence` more often than `before` did.
    async fn after_outage(&mut self, before: &str, evidence: &[&str]) {
        self.settle().await;
        let log = self.service().log();
        for text in evidence {
            if log.matches(text).count() <= before.matches(text).count() {
                let message = self.failure(&format!(
                    "the running pipeline never logged {text:?} for this outage"
                ));
                panic!("{message}");
            }
        }
    }

    /// Write a marker row and wait until the commit log is past it: everything committed
    /// before it has landed. Returns the position it waited for.
    async fn settle(&mut self) -> Lsn {
        let began = Instant::now();
        let target = self.mark().await;
        let deadline = began + self.plan.settle_timeout;
        loop {
            self.check_alive();
            if let Ok(Some(latest)) = self.log.latest().await
                && latest.last_end_lsn >= target
            {
                break;
            }
            if Instant::now() > deadline {
                let latest = self.log.latest().await.ok().flatten();
                let message = self.failure(&format!(
                    "the pipeline is stuck: the commit log did not reach {target} within {:?} (latest entry: {:?})",
                    self.plan.settle_timeout,
                    latest.map(|e| (e.sequence, e.kind, e.last_end_lsn))
                ));
                panic!("{message}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.figures.settles += 1;
        self.figures.longest_settle = self.figures.longest_settle.max(began.elapsed());
        self.check_no_strays().await;
        target
    }

    /// Once a run has started, the sink holds no data file that no entry names but the
    /// running writer's own (its flushes in flight): its start removed every other, so readers
    /// that glob the files see each committed change once. And nothing here is a newer
    /// writer's: there is none.
    async fn check_no_strays(&mut self) {
        let log = self.service().log();
        let Some(writer) = log
            .lines()
            .filter_map(|l| l.split(" writer=").nth(1)?.split_whitespace().next())
            .next_back()
            .map(str::to_owned)
        else {
            return;
        };
        if log.contains("started after this one") {
            let message = self.failure("a start took an earlier writer's intents for a newer's");
            panic!("{message}");
        }
        let Ok(sequences) = self.log.sequences().await else {
            return;
        };
        let upto = self.named_upto;
        for sequence in sequences.into_iter().filter(|s| *s > upto) {
            let Ok(Some(entry)) = self.log.read_entry(sequence).await else {
                return;
            };
            self.named.extend(entry.files.into_iter().map(|f| f.path));
            self.named_upto = sequence;
        }
        let mut strays = Vec::new();
        for (table, _) in TABLES {
            for path in object_names(self.sink.store().as_ref(), table).await {
                // <output>/part-<sequence>-<writer>-<part>.parquet; a table's own files (its
                // metadata, its current-state table's) are the table's to account for.
                let file = path.strip_prefix(&format!("{table}/"));
                if file.is_none_or(|f| f.contains('/') || !f.ends_with(".parquet")) {
                    continue;
                }
                let ours = path.split('-').nth(2) == Some(writer.as_str());
                if !ours && !self.named.contains(&path) {
                    strays.push(path);
                }
            }
        }
        if !strays.is_empty() {
            let message = self.failure(&format!(
                "files no entry names, left by earlier writers after run {} started: {strays:?}",
                self.figures.starts
            ));
            panic!("{message}");
        }
    }

    /// The WAL position before a new marker row's commit.
    async fn mark(&mut self) -> Lsn {
        self.markers += 1;
        let id = marker_id(self.markers);
        loop {
            if self.sql.as_ref().is_none_or(|c| c.is_closed()) {
                self.sql = try_connect(&self.url).await;
            }
            if let Some(sql) = &self.sql
                && let Ok(row) = sql
                    .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                    .await
                && sql
                    .execute(
                        "INSERT INTO events (id, kind, body) VALUES ($1, 'marker', 'caught up?')",
                        &[&id],
                    )
                    .await
                    .is_ok()
            {
                return row.get::<_, String>(0).parse().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The slot's confirmed position, once it reaches `lsn` (within a minute).
    async fn confirmed_at_least(&mut self, lsn: Lsn) -> Lsn {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sql = self.sql.as_ref().expect("connected by the settle before");
            let confirmed = tributary_tests::pipeline::confirmed_flush(sql, &self.slot).await;
            match confirmed {
                Some(at) if at >= lsn => return at,
                _ if Instant::now() > deadline => {
                    let message = self.failure(&format!(
                        "the slot is confirmed at {confirmed:?}, not {lsn}"
                    ));
                    panic!("{message}");
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// A blocking call (pg_ctl, starting a server) off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// The processor, as `/proc/cpuinfo` names it.
fn processor() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

async fn chaos(seed: u64, plan: &'static Plan) {
    let mut rng = Rng::new(seed);
    let steps = schedule(&mut rng, plan);
    let mut chaos = Chaos::new(plan).await;
    chaos.spawn();
    chaos
        .service()
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // The slot exists from here on: every change the workload makes must reach the lake.
    chaos.workload = Some(Workload::start(&chaos.url, &mut rng, plan.pool));
    let watch = ConfirmWatch::start(
        &chaos.url,
        &chaos.slot,
        chaos.log.clone(),
        Duration::from_millis(200),
    );
    for (i, step) in steps.iter().enumerate() {
        eprintln!(
            "chaos {seed} {:7.1}s step {}/{}: {step:?}",
            chaos.started.elapsed().as_secs_f64(),
            i + 1,
            steps.len()
        );
        chaos.execute(step).await;
    }

    let faults_done = chaos.started.elapsed();
    let tallies: Vec<(String, Tally)> = chaos.workload.take().unwrap().finish().await;
    let end = chaos.settle().await;
    chaos.figures.confirmed = chaos.confirmed_at_least(end).await;
    // The operator's reconciliation, while the pipeline still runs: the source at a snapshot
    // against the lake replayed to it, every committed file as its entry names it, no
    // duplicate identity and no file that no entry names.
    let verified = tributary_tests::service::verify(&chaos.file, &[]).await;
    assert!(
        verified.code == 0
            && verified
                .last_line()
                .starts_with("verify: the lake equals the source at "),
        "seed {seed}: tributary verify found the lake different: {verified}"
    );
    let stopped = chaos.service.take().unwrap().stop().await;
    assert!(stopped.contains("stopped"), "{stopped}");
    let samples = watch.finish().await;
    assert!(
        samples.violations.is_empty(),
        "the confirmed position passed the commit log {} times in {} samples: {:?}",
        samples.violations.len(),
        samples.samples,
        &samples.violations[..samples.violations.len().min(10)]
    );
    assert!(samples.samples > 100, "{samples:?}");
    chaos.figures.samples = samples.samples;

    // No start ever found a newer writer's intents: there was none.
    for n in 1..=chaos.figures.starts {
        let text = std::fs::read_to_string(chaos.run_log(n)).unwrap_or_default();
        assert!(
            !text.contains("started after this one"),
            "run {n} took an earlier writer's intents for a newer's:\n{text}"
        );
    }

    let caught_up = chaos.started.elapsed();
    let sql = tributary_tests::connect(&chaos.url).await;
    let tables = assert_lake_equals_source(&sql, &chaos.sink, &TABLES).await;
    let mut large = Vec::new();
    for entry in entries(&chaos.log).await {
        chaos.figures.entries += 1;
        if entry.kind == EntryKind::Flush && entry.changes >= plan.large_rows {
            large.push((entry.transactions, entry.changes, entry.files.len()));
        }
    }
    assert_eq!(
        large.len(),
        plan.large_transactions,
        "each large transaction lands as a flush of its own: {large:?}"
    );
    for (transactions, changes, files) in &large {
        assert!(
            *transactions == 1 && *changes == plan.large_rows && *files > 1,
            "a large transaction lands alone, whole, in parts: {transactions} transactions, {changes} changes, {files} files"
        );
    }
    assert!(
        chaos.figures.kills_in_large > 0,
        "no kill came while a large transaction landed"
    );
    if plan.format == "iceberg" {
        read_iceberg_tables(&chaos, &tables).await;
    }
    chaos.figures.phases = [faults_done, caught_up, chaos.started.elapsed()];
    report(seed, &chaos, &tables, &tallies);
    if std::env::var_os("TRIBUTARY_CHAOS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&chaos.dir);
    }
}

/// Each table's Iceberg change log read by pyiceberg and by DuckDB: every change the commit
/// log holds, once; and its current-state table: one row per source row (verify compared
/// their values already).
async fn read_iceberg_tables(chaos: &Chaos, tables: &[TableFigures]) {
    let options: Vec<(String, String)> = chaos.sink_options.clone().into_iter().collect();
    for t in tables {
        for (name, rows, what) in [
            (t.table.clone(), t.changes, "every change once"),
            (
                format!("{}__current", t.table),
                t.rows,
                "one row per source row",
            ),
        ] {
            let table = tributary::lake::iceberg::table::Table::open(
                chaos.sink.clone(),
                &name,
                chaos.catalog.as_ref(),
            );
            let current = table
                .load()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: no table"));
            let folder = format!("{}/{name}", chaos.sink.url().trim_end_matches('/'));
            let read = blocking({
                let options = options.clone();
                move || tributary_tests::lake::count_iceberg(&folder, &current.location, &options)
            })
            .await;
            assert_eq!(read.rows, rows, "{name}: {what}");
            assert_eq!(
                (read.duckdb, read.difference),
                (rows, None),
                "{name}: DuckDB reads what pyiceberg reads"
            );
        }
    }
}

fn report(seed: u64, chaos: &Chaos, tables: &[TableFigures], tallies: &[(String, Tally)]) {
    let f = &chaos.figures;
    let ended: u64 = tallies.iter().map(|(_, t)| t.ended).sum();
    let failed: u64 = tallies.iter().map(|(_, t)| t.failed).sum();
    let changes: usize = tables.iter().map(|t| t.changes).sum();
    let [faults, caught_up, compared] = f.phases.map(|d| d.as_secs_f64());
    let mut lines = vec![
        format!(
            "chaos {} passed: seed {seed}, {compared:.0} s on {} ({} cores): the schedule took {faults:.0} s, the last catch-up and stop {:.0} s, the comparison {:.0} s",
            chaos.plan.name,
            processor(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            caught_up - faults,
            compared - caught_up,
        ),
        format!(
            "  faults: {} SIGKILLs ({} while a large transaction landed; {} starts), {} S3 outages of {} s, {} periods of HTTP 503 and {} of 500, {} stalls, {} PostgreSQL restarts -m fast and {} -m immediate (the longest stop {:.1} s)",
            f.kills,
            f.kills_in_large,
            f.starts,
            f.s3_outages,
            S3_OUTAGE.as_secs(),
            f.errors_503,
            f.errors_500,
            f.stalls,
            f.pg_fast,
            f.pg_immediate,
            f.longest_stop.as_secs_f64()
        ),
        format!(
            "  caught up {} times, the longest in {:.1} s; slot confirmed at {}, sampled {} times, never past the log",
            f.settles,
            f.longest_settle.as_secs_f64(),
            f.confirmed,
            f.samples
        ),
        format!(
            "  workload: {ended} transactions ran to their end (rolled-back ones included), {failed} failed or ended unknown; {changes} changes landed in {} commit entries",
            f.entries
        ),
    ];
    for t in tables {
        lines.push(format!(
            "  {}: {} rows in the source and the lake, {} changes landed {:?}",
            t.table, t.rows, t.changes, t.ops
        ));
    }
    eprintln!("{}", lines.join("\n"));
}

/// Runs `plan` with the seed of `TRIBUTARY_CHAOS_SEED` (or a new one), naming the seed in
/// every failure.
async fn run(plan: &'static Plan) {
    let seed = seed_from_env("TRIBUTARY_CHAOS_SEED");
    eprintln!(
        "chaos {}: seed {seed} (replay with TRIBUTARY_CHAOS_SEED={seed})",
        plan.name
    );
    if let Err(panic) = AssertUnwindSafe(chaos(seed, plan)).catch_unwind().await {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        panic!(
            "chaos {} failed with seed {seed} (replay with TRIBUTARY_CHAOS_SEED={seed}): {message}",
            plan.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_and_outages_on_a_seeded_schedule_leave_the_lake_equal_to_the_source() {
    run(&CI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_and_outages_into_iceberg_tables_through_a_sql_catalog_leave_them_equal_to_the_source()
 {
    run(&CI_ICEBERG_SQL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_and_outages_into_iceberg_tables_through_a_rest_catalog_leave_them_equal_to_the_source()
 {
    run(&CI_ICEBERG_REST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_into_iceberg_tables_in_a_directory_leave_them_equal_to_the_source() {
    run(&CI_ICEBERG_DIRECTORY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the long mode: 500+ kills, about an hour; scripts/chaos.sh runs it"]
async fn long_mode_kills_and_outages_on_a_seeded_schedule_leave_the_lake_equal_to_the_source() {
    run(&LONG).await;
}
