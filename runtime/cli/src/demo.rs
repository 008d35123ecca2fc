//! `tributary demo`: the whole pipeline on throwaway parts.
//!
//! A temporary PostgreSQL cluster, a small shop schema with a workload of inserts, updates and
//! deletes, the passthrough plugin, and a local directory as the sink. It runs the real
//! pipeline until every change has landed, then prints what landed and how to query it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;

use tributary::commands::status;
use tributary::config::{FlushConfig, PipelineConfig, SinkConfig, SourceConfig, TransformConfig};
use tributary::pipeline::{self, Progress, RunOptions};
use tributary::units::human_bytes;
use tributary_cluster::{ClusterOptions, TempCluster};

const PLUGIN_DIR_ENV: &str = "TRIBUTARY_PLUGIN_DIR";

#[derive(Debug, Clone, clap::Args)]
pub struct DemoOptions {
    /// Directory to land the Parquet files in (default: a new directory under the system
    /// temporary directory). It is kept after the demo.
    #[arg(long)]
    pub sink_dir: Option<PathBuf>,
    /// The transform plugin (default: the passthrough plugin built for wasm32-wasip2).
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// Run without any transform: changes land in their tables' outputs directly.
    #[arg(long, conflicts_with = "plugin")]
    pub no_plugin: bool,
    /// Orders the workload inserts (customers, updates and deletes scale with it).
    #[arg(long, default_value_t = 2000)]
    pub orders: u32,
}

/// The sample workload: each statement its own transaction, as an application would commit.
fn workload(orders: u32) -> (Vec<String>, u64) {
    let customers = (orders / 20).max(1);
    let mut statements = vec![format!(
        "INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com',
                date '2024-01-01' + g, g % 7 = 0
         FROM generate_series(1, {customers}) g"
    )];
    let per_transaction = 20;
    let mut start = 1;
    while start <= orders {
        let end = (start + per_transaction - 1).min(orders);
        statements.push(format!(
            "INSERT INTO orders SELECT g, 1 + g % {customers}, round((g * 7.31)::numeric % 500, 2),
                    'placed', timestamptz '2026-11-01 09:00:00+00' + g * interval '1 minute',
                    jsonb_build_object('sku', 'SKU-' || (g % 97), 'qty', 1 + g % 5),
                    md5(g::text)::uuid
             FROM generate_series({start}, {end}) g"
        ));
        start = end + 1;
    }
    let shipped = orders / 10;
    let mut shipped_start = 1;
    while shipped_start <= shipped {
        let end = (shipped_start + per_transaction - 1).min(shipped);
        statements.push(format!(
            "UPDATE orders SET status = 'shipped' WHERE id BETWEEN {shipped_start} AND {end}"
        ));
        shipped_start = end + 1;
    }
    let cancelled = orders / 40;
    statements.push(format!(
        "DELETE FROM orders WHERE id > {} ",
        orders - cancelled
    ));
    let changes = u64::from(customers + orders + shipped + cancelled);
    (statements, changes)
}

const SCHEMA: &str = "
    CREATE TABLE customers (
        id int PRIMARY KEY, name text NOT NULL, email text, signed_up date, vip boolean);
    CREATE TABLE orders (
        id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2), status text,
        placed_at timestamptz, items jsonb, ref uuid);
    -- Updates then carry the whole old row: untouched large values are filled from it.
    ALTER TABLE customers REPLICA IDENTITY FULL;
    ALTER TABLE orders REPLICA IDENTITY FULL;
";

pub async fn run(options: DemoOptions) -> anyhow::Result<()> {
    let plugin = if options.no_plugin {
        None
    } else {
        Some(match options.plugin {
            Some(p) => p,
            None => find_plugin("passthrough")?,
        })
    };
    let sink_dir = match options.sink_dir {
        Some(d) => std::path::absolute(d)?,
        None => std::env::temp_dir().join(format!("tributary-demo-{}", std::process::id())),
    };
    if sink_dir
        .join(tributary::lake::commit::STATE_PREFIX)
        .exists()
    {
        bail!(
            "{} already holds a pipeline's files; the demo starts a new database, so give it an empty directory",
            sink_dir.display()
        );
    }

    println!("starting a throwaway PostgreSQL cluster...");
    let cluster =
        tokio::task::spawn_blocking(|| TempCluster::start(ClusterOptions::fast())).await??;
    println!(
        "  PostgreSQL {} on port {}",
        cluster.server_version(),
        cluster.port()
    );
    let admin = tributary::source::connect::sql(&tributary::source::connect::parse_url(
        &cluster.url("postgres"),
    )?)
    .await?;
    admin
        .batch_execute("CREATE DATABASE shop")
        .await
        .context("creating database shop")?;
    let url = cluster.url("shop");
    let client =
        tributary::source::connect::sql(&tributary::source::connect::parse_url(&url)?).await?;
    client
        .batch_execute(SCHEMA)
        .await
        .context("creating the demo schema")?;

    let config = PipelineConfig {
        source: SourceConfig::new(
            &url,
            "tributary_demo",
            "tributary_demo",
            &["public.customers", "public.orders"],
        ),
        transforms: plugin
            .iter()
            .map(|p| TransformConfig {
                plugin: p.clone(),
                config: BTreeMap::new(),
                memory_limit_mib: 256,
                timeout_ms: 30_000,
                stack_kib: 512,
                on_error: Default::default(),
            })
            .collect(),
        sink: SinkConfig {
            url: format!("file://{}", sink_dir.display()),
            options: BTreeMap::new(),
            ..SinkConfig::default()
        },
        flush: FlushConfig {
            max_rows: 1000,
            ..FlushConfig::default()
        },
        metrics: Default::default(),
        retry: Default::default(),
        parquet: Default::default(),
        load: Default::default(),
        outputs: Default::default(),
    };

    let (stop, shutdown) = watch::channel(false);
    let (progress_tx, mut progress) = watch::channel(Progress::default());
    let running = tokio::spawn(pipeline::run(
        config.clone(),
        RunOptions::default(),
        shutdown,
        progress_tx,
    ));
    // Start the workload only once the pipeline reads its slot, so it sees all of it.
    while !progress.borrow_and_update().streaming {
        if progress.changed().await.is_err() {
            running.await.context("pipeline task")??;
            bail!("the pipeline stopped while starting");
        }
    }

    let (statements, expected) = workload(options.orders);
    println!(
        "running the workload: {} transactions, {expected} changes to customers and orders",
        statements.len()
    );
    for sql in &statements {
        client
            .batch_execute(sql)
            .await
            .with_context(|| format!("running {sql}"))?;
    }
    match plugin {
        Some(p) => println!("landing through plugin {}...", p.display()),
        None => println!("landing without a transform..."),
    }
    let wait = async {
        loop {
            if progress.borrow_and_update().changes >= expected {
                break;
            }
            if progress.changed().await.is_err() {
                break;
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .is_err()
    {
        let p = progress.borrow().clone();
        bail!(
            "the pipeline landed {} of {expected} changes in two minutes",
            p.changes
        );
    }
    let _ = stop.send(true);
    let landed = running.await.context("pipeline task")??;
    let positions = status::collect(&config).await?;
    drop(client);
    drop(admin);
    tokio::task::spawn_blocking(move || cluster.stop()).await??;

    report(&sink_dir, &landed, &positions)?;
    Ok(())
}

fn report(sink_dir: &Path, landed: &Progress, positions: &status::Status) -> anyhow::Result<()> {
    println!();
    println!("landed in {}", sink_dir.display());
    println!(
        "  {:<20} {:>6} {:>8} {:>10}",
        "output", "files", "rows", "bytes"
    );
    let mut outputs: Vec<_> = std::fs::read_dir(sink_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('_'))
        })
        .collect();
    outputs.sort();
    for dir in &outputs {
        let (mut files, mut rows, mut bytes) = (0u64, 0i64, 0u64);
        for file in std::fs::read_dir(dir)?.filter_map(Result::ok) {
            let path = file.path();
            if path.extension().is_some_and(|e| e == "parquet") {
                files += 1;
                bytes += file.metadata()?.len();
                rows += parquet_rows(&path)?;
            }
        }
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        println!(
            "  {name:<20} {files:>6} {rows:>8} {:>10}",
            human_bytes(bytes)
        );
    }
    println!(
        "  {} transactions, {} changes in {} commits; {} replayed transactions skipped",
        landed.transactions, landed.changes, landed.flushes, landed.replays_skipped
    );
    println!();
    println!("positions");
    print!("{}", indent(&positions.to_string()));
    let orders = sink_dir.join("public.orders");
    println!();
    println!("query it (every row carries _op, _commit_lsn, _seq, _xid, _commit_time):");
    println!(
        "  duckdb -c \"SELECT _op, count(*) FROM '{}/*.parquet' GROUP BY _op\"",
        orders.display()
    );
    println!(
        "  python3 -c \"import pandas as pd; print(pd.read_parquet('{}').tail())\"",
        orders.display()
    );
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn parquet_rows(path: &Path) -> anyhow::Result<i64> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = std::fs::File::open(path)?;
    let reader =
        SerializedFileReader::new(file).with_context(|| format!("reading {}", path.display()))?;
    Ok(reader.metadata().file_metadata().num_rows())
}

/// Where a plugin built from this workspace is: `TRIBUTARY_PLUGIN_DIR`, or beside the
/// running executable's build directory (`target/<profile>/tributary` →
/// `target/wasm32-wasip2/release/`).
pub fn find_plugin(name: &str) -> anyhow::Result<PathBuf> {
    let file = format!("{name}.wasm");
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os(PLUGIN_DIR_ENV) {
        candidates.push(PathBuf::from(dir).join(&file));
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(target) = exe.parent().and_then(Path::parent)
    {
        candidates.push(target.join("wasm32-wasip2/release").join(&file));
    }
    candidates.push(PathBuf::from("target/wasm32-wasip2/release").join(&file));
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let searched: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "plugin {file} not found (looked in {}); build it with `cargo build --release --target wasm32-wasip2 -p {name}`, pass --plugin PATH, or run with --no-plugin",
        searched.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::workload;

    #[test]
    fn workload_counts_its_changes() {
        let (statements, changes) = workload(2000);
        // 100 customers, 2000 orders, 200 shipped, 50 cancelled.
        assert_eq!(changes, 2350);
        assert_eq!(statements.len(), 1 + 100 + 10 + 1);
    }
}
