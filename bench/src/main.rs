//! Measures Tributary against the replication slot's own limit, side by side in one run.
//!
//! One run starts a throwaway PostgreSQL cluster and an S3 server, then for every scenario and
//! every repetition: empties and preloads the tables, creates one slot per consumer, writes the
//! workload and a marker transaction, and lets each consumer drain its own slot up to the
//! marker while nothing else runs. The consumers are `pg_recvlogical` to /dev/null,
//! Tributary's replication client doing nothing with the bytes (the practical ceiling), and
//! the whole pipeline with no transform, the passthrough plugin and the masking plugin (local
//! directory), and with no transform to S3: Parquet files alone, Delta tables, and Iceberg
//! tables without a catalog and through a SQL catalog in the same cluster. The `languages`
//! scenario, run only when named, runs the same two plugins written in Rust, Python,
//! JavaScript and C side by side (`languages.rs`). The `triggers` scenario, also run only when
//! named, measures trigger capture's cost to the writer beside no capture and a slot, and its
//! drain rate beside a slot's (`triggers.rs`). `BENCHMARKS.md` describes the method and holds
//! the latest figures.

mod consume;
mod full_load;
mod languages;
mod latency;
mod report;
mod triggers;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde::Serialize;
use tokio_postgres::{Client, NoTls};
use tributary::Lsn;
use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::S3Server;

use crate::consume::Measured;
use crate::report::{
    DELTA_S3, Facts, ICEBERG_MIRROR_S3, ICEBERG_S3, ICEBERG_SQL_S3, MASK_FILE, MIRROR_S3,
    NONE_FILE, NONE_S3, PASSTHROUGH_FILE, PG_RECVLOGICAL, RAW, ScenarioResult,
};
use crate::workload::{Scenario, Workload};

/// Benchmark Tributary against the replication slot's own limit.
#[derive(Parser)]
#[command(name = "tributary-bench")]
struct Args {
    /// Scenarios to run (all when none is named).
    #[arg(value_enum)]
    scenarios: Vec<Scenario>,
    /// Small sizes, for development and CI.
    #[arg(long)]
    quick: bool,
    /// Runs per figure; each figure is their median, with min and max (default 3, 1 with
    /// --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Multiply every workload size by this.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seconds of steady load in the latency scenario (default 30, 5 with --quick).
    #[arg(long)]
    latency_secs: Option<u64>,
    /// flush.max_delay_ms of the pipeline in the latency scenario (the pipeline's default when
    /// not given); it bounds how long a committed transaction waits to be landed.
    #[arg(long)]
    max_delay_ms: Option<u64>,
    /// flush.parallel_transforms of every pipeline (the pipeline's default when not given):
    /// batches the plugins transform at once.
    #[arg(long)]
    parallel_transforms: Option<usize>,
    /// Leave out the S3 consumers (no S3 server needed).
    #[arg(long)]
    skip_s3: bool,
    /// Run only the consumers that land in S3 (Parquet files, Delta and Iceberg tables): the
    /// formats side by side, without the ceilings and the directory consumers.
    #[arg(long, conflicts_with = "skip_s3")]
    only_s3: bool,
    /// Also write every measurement as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run the pipeline consumers under `perf record`, one profile per run in this directory
    /// (the figures of such a run are perturbed by the sampling; use it for where time goes).
    #[arg(long)]
    perf: Option<PathBuf>,
    /// Exit with an error if any measurement failed (for CI: the harness must keep working).
    #[arg(long)]
    strict: bool,
}

/// Where a pipeline consumer lands: a local directory or S3, in one of the sink's formats.
#[derive(Clone, Copy, Default)]
pub(crate) struct Lake {
    pub(crate) s3: bool,
    pub(crate) format: Format,
    /// Iceberg tables through a SQL catalog in the benchmark's own PostgreSQL
    /// (`sink.catalog`).
    pub(crate) catalog: bool,
    /// Every table also keeps its current-state table (`mirror = true`).
    pub(crate) mirror: bool,
}

/// `sink.format`: Parquet files and the commit log alone, or tables over them as well.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Format {
    #[default]
    Parquet,
    Delta,
    Iceberg,
}

impl Lake {
    const FILE: Lake = Lake {
        s3: false,
        format: Format::Parquet,
        catalog: false,
        mirror: false,
    };
    const S3: Lake = Lake {
        s3: true,
        ..Lake::FILE
    };
}

#[derive(Clone, Copy)]
enum Consumer {
    PgRecvlogical,
    Raw,
    Pipeline {
        plugin: Option<&'static str>,
        lake: Lake,
    },
}

const fn pipeline(plugin: Option<&'static str>, lake: Lake) -> Consumer {
    Consumer::Pipeline { plugin, lake }
}

const CONSUMERS: [(&str, Consumer); 11] = [
    (PG_RECVLOGICAL, Consumer::PgRecvlogical),
    (RAW, Consumer::Raw),
    (NONE_FILE, pipeline(None, Lake::FILE)),
    (PASSTHROUGH_FILE, pipeline(Some("passthrough"), Lake::FILE)),
    (MASK_FILE, pipeline(Some("mask"), Lake::FILE)),
    (NONE_S3, pipeline(None, Lake::S3)),
    (
        DELTA_S3,
        pipeline(
            None,
            Lake {
                format: Format::Delta,
                ..Lake::S3
            },
        ),
    ),
    (
        ICEBERG_S3,
        pipeline(
            None,
            Lake {
                format: Format::Iceberg,
                ..Lake::S3
            },
        ),
    ),
    (
        ICEBERG_SQL_S3,
        pipeline(
            None,
            Lake {
                format: Format::Iceberg,
                catalog: true,
                ..Lake::S3
            },
        ),
    ),
    (
        MIRROR_S3,
        pipeline(
            None,
            Lake {
                format: Format::Delta,
                mirror: true,
                ..Lake::S3
            },
        ),
    ),
    (
        ICEBERG_MIRROR_S3,
        pipeline(
            None,
            Lake {
                format: Format::Iceberg,
                mirror: true,
                ..Lake::S3
            },
        ),
    ),
];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // The pipeline child caps glibc's allocator at two arenas, as the `tributary` binary does
    // (`runtime/cli/src/main.rs`, where the reason is): without it the child's peak RSS is the
    // default allocator's, not the one a user's `tributary run` has (wide table 270-350 MiB
    // against 165). `MALLOC_ARENA_MAX` in the environment still wins.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if args.get(1).map(String::as_str) == Some("__pipeline")
        && std::env::var_os("MALLOC_ARENA_MAX").is_none()
    {
        // SAFETY: mallopt only sets an allocator parameter; no other thread exists yet.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
    // The raw reader runs on one thread, like pg_recvlogical: on a small machine the threads of
    // a multi-threaded runtime handing frames to each other compete with the walsender for
    // cores. The pipeline runs as `tributary run` does.
    let runtime = if args.get(1).map(String::as_str) == Some("__raw") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    // The consumers run as children of this binary, so each has its own CPU and memory count.
    let arg = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .with_context(|| format!("{} needs {} arguments", args[1], i - 1))
    };
    match args.get(1).map(String::as_str) {
        Some("__pipeline") => {
            init_logging();
            let until = match (args.get(3), args.get(4)) {
                (Some(lsn), Some(changes)) => Some((lsn.parse::<Lsn>()?, changes.parse::<u64>()?)),
                _ => None,
            };
            return runtime.block_on(consume::run_pipeline_child(Path::new(arg(2)?), until));
        }
        Some("__raw") => {
            let until: Lsn = arg(5)?.parse()?;
            return runtime.block_on(consume::run_raw_child(arg(2)?, arg(3)?, arg(4)?, until));
        }
        _ => {}
    }
    let mut args = Args::parse();
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 3 });
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    args.runs = Some(runs);
    runtime.block_on(bench(args))
}

fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,wasmtime=warn,cranelift=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

#[derive(Serialize)]
struct Results {
    facts: Facts,
    scenarios: Vec<ScenarioResult>,
    latency: Option<latency::LatencyResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    languages: Option<languages::LanguagesResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    full_load: Option<full_load::FullLoadResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    triggers: Option<triggers::TriggersResult>,
}

struct Bench {
    args: Args,
    cluster: TempCluster,
    client: Arc<Client>,
    s3: Option<S3Server>,
    dir: ScratchDir,
    plugins: BTreeMap<&'static str, PathBuf>,
    /// The languages scenario's consumers, their plugins located (empty unless it runs).
    languages: Vec<languages::LanguageConsumer>,
    proto: u32,
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut plugins = BTreeMap::new();
    for name in ["passthrough", "mask"] {
        plugins.insert(name, tributary_tests::plugin(name));
    }
    let languages = if args.scenarios.contains(&Scenario::Languages) {
        languages::consumers(&plugins)
    } else {
        Vec::new()
    };
    let cluster = tokio::task::spawn_blocking(|| {
        TempCluster::start(
            ClusterOptions::fast()
                .setting("shared_buffers", "512MB")
                .setting("max_wal_size", "16GB")
                .setting("checkpoint_timeout", "1h")
                .setting("max_replication_slots", "32")
                .setting("wal_sender_timeout", "10min"),
        )
    })
    .await??;
    let admin = connect(&cluster.url("postgres")).await?;
    admin.batch_execute("CREATE DATABASE bench").await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {CATALOG_DATABASE}"))
        .await?;
    drop(admin);
    let client = Arc::new(connect(&cluster.url("bench")).await?);
    workload::create_schema(&client).await?;
    let server_version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .get(0);
    let proto = match server_version {
        v if v >= 160_000 => 4,
        v if v >= 150_000 => 3,
        v if v >= 140_000 => 2,
        _ => 1,
    };
    let s3 = if args.skip_s3 {
        None
    } else {
        Some(tokio::task::spawn_blocking(S3Server::start).await?)
    };
    let dir = ScratchDir::create()?;

    let facts = Facts::gather(cluster.server_version(), args.quick, args.runs.unwrap_or(1));
    facts.print();
    let mut scenarios = args.scenarios.clone();
    if scenarios.is_empty() {
        scenarios = Scenario::THROUGHPUT.to_vec();
        scenarios.push(Scenario::Latency);
        scenarios.push(Scenario::FullLoad);
    }
    scenarios.sort();
    scenarios.dedup();

    let bench = Bench {
        args,
        cluster,
        client,
        s3,
        dir,
        plugins,
        languages,
        proto,
    };
    let mut results = Results {
        facts,
        scenarios: Vec::new(),
        latency: None,
        languages: None,
        full_load: None,
        triggers: None,
    };
    for scenario in scenarios {
        if scenario == Scenario::Latency {
            let result = bench.latency().await?;
            print!("{}", result.print());
            results.latency = Some(result);
        } else if scenario == Scenario::FullLoad {
            let result = bench.full_load().await?;
            print!("{}", result.print());
            results.full_load = Some(result);
        } else if scenario == Scenario::Languages {
            let result = bench.languages().await?;
            print!("{}", result.print());
            results.languages = Some(result);
        } else if scenario == Scenario::Triggers {
            let result = bench.triggers().await?;
            print!("{}", result.print());
            results.triggers = Some(result);
        } else {
            let result = bench.throughput(scenario).await?;
            print!("{}", result.print());
            results.scenarios.push(result);
        }
    }
    println!("\nwall time {:.0} s", started.elapsed().as_secs_f64());
    if let Some(path) = &bench.args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let failed = results
        .scenarios
        .iter()
        .flat_map(|s| s.runs.values().flatten())
        .filter(|r| r.is_err())
        .count()
        + results
            .latency
            .iter()
            .flat_map(|l| &l.runs)
            .filter(|r| r.is_err())
            .count()
        + results.languages.as_ref().map_or(0, |l| l.failures())
        + results.full_load.as_ref().map_or(0, |l| l.failures())
        + results.triggers.as_ref().map_or(0, |t| t.failures());
    let strict = bench.args.strict;
    let Bench {
        cluster,
        client,
        s3,
        dir,
        ..
    } = bench;
    drop((client, s3, dir));
    tokio::task::spawn_blocking(move || cluster.stop()).await??;
    if failed > 0 && strict {
        bail!("{failed} measurement(s) failed");
    }
    Ok(())
}

/// The database of the Iceberg consumers' SQL catalog, in the benchmark's cluster.
const CATALOG_DATABASE: &str = "iceberg_catalog";

/// A pipeline file's transform: the plugin, the contents of its `config` table, and its call
/// timeout when not the default.
struct PluginSpec {
    path: PathBuf,
    settings: Option<String>,
    timeout_ms: Option<u64>,
}

/// Pipeline files and sink directories of one harness run; removed when the run ends, however
/// it ends.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create() -> anyhow::Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("tributary-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        // Ends with an error when the cluster stops at the end of the run; queries on a
        // broken connection report their own errors.
        let _ = connection.await;
    });
    Ok(client)
}

impl Bench {
    fn runs(&self) -> usize {
        self.args.runs.unwrap_or(1)
    }

    async fn throughput(&self, scenario: Scenario) -> anyhow::Result<ScenarioResult> {
        let workload = Workload::new(scenario, self.args.quick, self.args.scale);
        eprintln!("==> {}: {}", scenario.name(), workload.description);
        let consumers: Vec<(&str, Consumer)> = CONSUMERS
            .iter()
            .copied()
            .filter(|(_, c)| match c {
                Consumer::Pipeline { lake, .. } => {
                    (lake.s3 || !self.args.only_s3)
                        && (!lake.s3 || self.s3.is_some())
                        && (!lake.mirror || scenario == Scenario::Updates)
                }
                _ => !self.args.only_s3,
            })
            .collect();
        let mut result = ScenarioResult {
            workload: workload.clone(),
            wal_bytes: Vec::new(),
            generate_seconds: Vec::new(),
            runs: consumers
                .iter()
                .map(|(n, _)| ((*n).to_owned(), Vec::new()))
                .collect(),
            order: consumers.iter().map(|(n, _)| (*n).to_owned()).collect(),
        };
        for run in 0..self.runs() {
            workload::prepare(&self.client, &workload).await?;
            let slots: Vec<String> = (0..consumers.len())
                .map(|i| format!("bench_{}_{run}_{i}", scenario.name().replace('-', "_")))
                .collect();
            for slot in &slots {
                self.client
                    .execute(
                        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                        &[slot],
                    )
                    .await?;
            }
            let generated = workload::generate(&self.client, &workload).await?;
            self.client.batch_execute("CHECKPOINT").await?;
            eprintln!(
                "    run {}: workload written in {:.1} s ({:.0} MB of WAL)",
                run + 1,
                generated.seconds,
                generated.wal_bytes() as f64 / 1e6
            );
            result.wal_bytes.push(generated.wal_bytes());
            result.generate_seconds.push(generated.seconds);
            for ((name, consumer), slot) in consumers.iter().zip(&slots) {
                let measured = self
                    .measure(*consumer, slot, &workload, generated.marker, run)
                    .await;
                match &measured {
                    Ok(m) => eprintln!(
                        "    run {}: {name}: {:.2} s, {:.0} rows/s",
                        run + 1,
                        m.consumer.seconds,
                        workload.changes as f64 / m.consumer.seconds
                    ),
                    Err(e) => eprintln!("    run {}: {name}: failed: {e:#}", run + 1),
                }
                self.drop_slot(slot).await?;
                if let Some(runs) = result.runs.get_mut(*name) {
                    runs.push(measured.map_err(|e| format!("{e:#}")));
                }
            }
        }
        Ok(result)
    }

    async fn measure(
        &self,
        consumer: Consumer,
        slot: &str,
        workload: &Workload,
        marker: Lsn,
        run: usize,
    ) -> anyhow::Result<Measured> {
        let url = self.cluster.url("bench");
        match consumer {
            Consumer::PgRecvlogical => {
                consume::measure_pg_recvlogical(
                    self.client.clone(),
                    self.cluster.bin_dir(),
                    &url,
                    slot,
                    marker,
                    self.proto,
                    workload.changes,
                )
                .await
            }
            Consumer::Raw => {
                let args = [
                    "__raw",
                    &url,
                    slot,
                    workload::PUBLICATION,
                    &marker.to_string(),
                ]
                .map(str::to_owned);
                consume::measure_child(self.client.clone(), slot, &args, None, &[]).await
            }
            Consumer::Pipeline { plugin, lake } => {
                let transform = plugin.map(|name| self.plugin_spec(name));
                let (config, cleanup) = self
                    .pipeline_config(
                        slot,
                        transform.as_ref(),
                        lake,
                        &format!("{}-{run}", workload.scenario.name()),
                        None,
                    )
                    .await?;
                let args = [
                    "__pipeline".to_owned(),
                    config.display().to_string(),
                    marker.to_string(),
                    workload.changes.to_string(),
                ];
                let measured = consume::measure_child(
                    self.client.clone(),
                    slot,
                    &args,
                    self.args.perf.as_deref(),
                    &[],
                )
                .await;
                let _ = std::fs::remove_dir_all(&cleanup);
                let measured = measured?;
                // The marker transaction may land with the last of the workload.
                let landed = measured.consumer.changes;
                if landed != workload.changes && landed != workload.changes + 1 {
                    bail!("landed {landed} changes, expected {}", workload.changes);
                }
                Ok(measured)
            }
        }
    }

    /// The bundled plugin `name` as the throughput scenarios run it: the mask with the
    /// scenarios' masked columns and `drop_deletes`.
    fn plugin_spec(&self, name: &str) -> PluginSpec {
        PluginSpec {
            path: self.plugins[name].clone(),
            timeout_ms: None,
            settings: (name == "mask").then(|| {
                format!(
                    "columns = {:?}, salt = \"bench\", drop_deletes = \"true\"",
                    workload::MASKED_COLUMNS
                )
            }),
        }
    }

    /// Writes a pipeline file; returns it and the directory to remove afterwards. Tables are
    /// written only into S3.
    async fn pipeline_config(
        &self,
        slot: &str,
        transform: Option<&PluginSpec>,
        lake: Lake,
        label: &str,
        max_delay: Option<u64>,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        let base = self.dir.0.join(slot);
        std::fs::create_dir_all(&base)?;
        let tables: Vec<String> = workload::TABLES.iter().map(|t| format!("{t:?}")).collect();
        let mut text = format!(
            "[source]\nurl = {:?}\nslot = {slot:?}\npublication = {:?}\ntables = [{}]\n\
             slot_behavior = \"reuse\"\npublication_behavior = \"reuse\"\n\
             start_from = \"head\"\nunchanged_toast = \"null\"\n\n",
            self.cluster.url("bench"),
            workload::PUBLICATION,
            tables.join(", ")
        );
        if let Some(transform) = transform {
            text.push_str(&format!(
                "[[transform]]\nplugin = {:?}\n# One transaction of millions of rows is one call.\nmemory_limit_mib = 4000\n",
                transform.path.display().to_string()
            ));
            if let Some(timeout) = transform.timeout_ms {
                text.push_str(&format!("timeout_ms = {timeout}\n"));
            }
            if let Some(settings) = &transform.settings {
                text.push_str(&format!("config = {{ {settings} }}\n"));
            }
            text.push('\n');
        }
        let mut cleanup = base.clone();
        if lake.s3 {
            let server = self.s3.as_ref().context("no S3 server")?;
            let bucket = server.fresh_bucket(&format!("bench-{label}")).await;
            let options: Vec<String> = server
                .object_store_options()
                .into_iter()
                .map(|(k, v)| format!("{k} = {v:?}"))
                .collect();
            text.push_str(&format!(
                "[sink]\nurl = \"s3://{bucket}\"\noptions = {{ {} }}\n",
                options.join(", ")
            ));
            match lake.format {
                Format::Parquet => {}
                Format::Delta => text.push_str("format = \"delta\"\n"),
                Format::Iceberg => text.push_str("format = \"iceberg\"\n"),
            }
            if lake.catalog {
                // A catalog name of its own per run: every run's bucket is new, its tables too.
                let url = self.cluster.url(CATALOG_DATABASE);
                let join = if url.contains('?') { '&' } else { '?' };
                text.push_str(&format!(
                    "catalog = {:?}\n",
                    format!("{url}{join}catalog_name={}", bucket.replace('-', "_"))
                ));
            }
            if lake.mirror {
                for table in workload::TABLES {
                    text.push_str(&format!("\n[outputs.{table:?}]\nmirror = true\n"));
                }
                text.push('\n');
            }
            cleanup = server.root().join(&bucket);
        } else {
            text.push_str(&format!(
                "[sink]\nurl = \"file://{}\"\n",
                base.join("sink").display()
            ));
        }
        let mut flush = String::new();
        if let Some(delay) = max_delay {
            flush.push_str(&format!("max_delay_ms = {delay}\n"));
        }
        if let Some(parallel) = self.args.parallel_transforms {
            flush.push_str(&format!("parallel_transforms = {parallel}\n"));
        }
        if !flush.is_empty() {
            text.push_str(&format!("\n[flush]\n{flush}"));
        }
        let path = base.join("pipeline.toml");
        std::fs::write(&path, text)?;
        Ok((path, cleanup))
    }

    async fn drop_slot(&self, slot: &str) -> anyhow::Result<()> {
        // A consumer's walsender may take a moment to let go of the slot.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self
                .client
                .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
                .await
            {
                Ok(_) => return Ok(()),
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("dropping slot {slot}")),
            }
        }
    }

    async fn latency(&self) -> anyhow::Result<latency::LatencyResult> {
        let seconds = self
            .args
            .latency_secs
            .unwrap_or(if self.args.quick { 5 } else { 30 });
        eprintln!(
            "==> latency: {} rows/s for {seconds} s",
            latency::ROWS_PER_TXN * latency::TXNS_PER_SECOND
        );
        let workload = Workload {
            scenario: Scenario::Latency,
            changes: 0,
            transactions: 0,
            preload: 0,
            description: String::new(),
        };
        let mut runs = Vec::new();
        for run in 0..self.runs() {
            workload::prepare(&self.client, &workload).await?;
            let slot = format!("bench_latency_{run}");
            self.client
                .execute(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&slot],
                )
                .await?;
            let (config, cleanup) = self
                .pipeline_config(
                    &slot,
                    None,
                    Lake::default(),
                    &format!("latency-{run}"),
                    self.args.max_delay_ms,
                )
                .await?;
            let result = latency::run_once(
                self.client.clone(),
                &config,
                &cleanup.join("sink"),
                seconds,
                1,
            )
            .await;
            match &result {
                Ok(r) => eprintln!(
                    "    run {}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
                    run + 1,
                    r.p50_ms,
                    r.p99_ms,
                    r.max_ms
                ),
                Err(e) => eprintln!("    run {}: failed: {e:#}", run + 1),
            }
            self.drop_slot(&slot).await?;
            let _ = std::fs::remove_dir_all(&cleanup);
            runs.push(result.map_err(|e| format!("{e:#}")));
        }
        Ok(latency::LatencyResult {
            seconds,
            max_delay_ms: self
                .args
                .max_delay_ms
                .unwrap_or(tributary::config::FlushConfig::default().max_delay_ms),
            runs,
        })
    }
}
