//! Commit-to-visible latency at a steady rate: a live pipeline lands a paced insert load
//! while the sink's commit log is watched; each transaction's latency is from its COMMIT
//! returning in PostgreSQL to the commit entry that holds it appearing in the sink.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_postgres::Client;
use tributary::lake::commit::CommitEntry;

use crate::report::{Spread, fixed0, fixed1};
use crate::workload;

pub const ROWS_PER_TXN: u64 = 100;
pub const TXNS_PER_SECOND: u64 = 100;

#[derive(Debug, Clone, Serialize)]
pub struct LatencyRun {
    pub transactions: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Rows per second the load actually achieved.
    pub achieved_rows_per_second: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyResult {
    pub seconds: u64,
    pub max_delay_ms: u64,
    pub runs: Vec<Result<LatencyRun, String>>,
}

impl LatencyResult {
    pub fn print(&self) -> String {
        let ok: Vec<&LatencyRun> = self.runs.iter().filter_map(|r| r.as_ref().ok()).collect();
        let mut out = format!(
            "\n== latency: {} rows/s ({TXNS_PER_SECOND} transactions/s of {ROWS_PER_TXN} rows) for {} s, \
             tributary none → file, flush.max_delay_ms = {}\n",
            ROWS_PER_TXN * TXNS_PER_SECOND,
            self.seconds,
            self.max_delay_ms
        );
        let col = |f: fn(&LatencyRun) -> f64, format: fn(f64) -> String| {
            Spread::of(&ok.iter().map(|r| f(r)).collect::<Vec<_>>())
                .map_or("-".into(), |s| s.show(format))
        };
        out.push_str(&format!(
            "commit → visible ms: p50 {}, p99 {}, max {}; achieved {} rows/s\n",
            col(|r| r.p50_ms, fixed0),
            col(|r| r.p99_ms, fixed0),
            col(|r| r.max_ms, fixed0),
            col(|r| r.achieved_rows_per_second, fixed1),
        ));
        for failure in self.runs.iter().filter_map(|r| r.as_ref().err()) {
            out.push_str(&format!("failed run: {failure}\n"));
        }
        out
    }
}

/// One run: `config` is a pipeline file for `slot` landing in the directory `sink`.
pub async fn run_once(
    client: Arc<Client>,
    config: &Path,
    sink: &Path,
    seconds: u64,
    first_id: u64,
) -> anyhow::Result<LatencyRun> {
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .arg("__pipeline")
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("child stdout")?).lines();
    loop {
        match lines.next_line().await? {
            Some(line) if line.contains("streaming") => break,
            Some(_) => {}
            None => bail!("the pipeline ended before streaming"),
        }
    }

    let log_dir = sink.join("_tributary").join("log");
    let (seen, watcher) = watch_log(log_dir);

    let mut commits: Vec<SystemTime> = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_millis(1000 / TXNS_PER_SECOND));
    let started = Instant::now();
    let mut id = first_id;
    while started.elapsed() < Duration::from_secs(seconds) {
        ticker.tick().await;
        client
            .batch_execute(&workload::insert_batch(id, ROWS_PER_TXN))
            .await?;
        commits.push(SystemTime::now());
        id += ROWS_PER_TXN;
    }
    let achieved = (commits.len() as u64 * ROWS_PER_TXN) as f64 / started.elapsed().as_secs_f64();
    let marker = workload::write_marker(&client).await?;

    let deadline = Instant::now() + Duration::from_secs(120);
    let entries = loop {
        let snapshot = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if snapshot.iter().any(|(e, _)| e.last_commit_lsn >= marker) {
            break snapshot;
        }
        if Instant::now() > deadline {
            bail!("the marker did not land within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The watcher stops once it holds the last reference.
    drop(seen);
    watcher.await?;
    drop(child.stdin.take());
    while lines.next_line().await?.is_some() {}
    child.wait().await?;

    // Entries in sequence order; transaction i of the load is in the entry whose running
    // count of transactions passes i (the load is the only writer of the published tables).
    let mut latencies = Vec::with_capacity(commits.len());
    let mut entry = entries.iter();
    let mut current = entry.next();
    let mut before = 0u64;
    for (i, commit) in commits.iter().enumerate() {
        while let Some((e, _)) = current
            && before + e.transactions <= i as u64
        {
            before += e.transactions;
            current = entry.next();
        }
        let Some((_, visible)) = current else {
            bail!("transaction {i} of the load is in no commit entry");
        };
        let latency = visible
            .duration_since(*commit)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64()
            * 1000.0;
        latencies.push(latency);
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    Ok(LatencyRun {
        transactions: latencies.len(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: latencies.last().copied().unwrap_or_default(),
        achieved_rows_per_second: achieved,
    })
}

type Seen = Arc<std::sync::Mutex<Vec<(CommitEntry, SystemTime)>>>;

/// Polls the commit log directory every 2 ms and notes when each entry first appears.
fn watch_log(dir: PathBuf) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let shared = seen.clone();
    let task = tokio::task::spawn_blocking(move || {
        let mut known = std::collections::BTreeSet::new();
        loop {
            if Arc::strong_count(&shared) == 1 {
                return;
            }
            if let Ok(entries) = std::fs::read_dir(&dir) {
                let now = SystemTime::now();
                let mut names: Vec<PathBuf> = entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "json") && !known.contains(p))
                    .collect();
                names.sort();
                for path in names {
                    // An entry is written whole; a read racing its creation is retried.
                    if let Some(entry) = std::fs::read(&path)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<CommitEntry>(&b).ok())
                    {
                        known.insert(path);
                        let mut seen = shared.lock().unwrap_or_else(|p| p.into_inner());
                        seen.push((entry, now));
                        seen.sort_by_key(|(e, _)| e.sequence);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    (seen, task)
}
