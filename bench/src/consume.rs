//! The consumers under test, each draining its own slot in a process of its own so that its
//! CPU time and peak memory are its alone: `pg_recvlogical`, Tributary's replication client
//! doing nothing with the bytes, and the whole Tributary pipeline.
//!
//! The two Tributary consumers are this binary started again with a hidden subcommand; they
//! print one JSON line when they have everything up to the marker. The parent meanwhile
//! samples the walsender serving the slot from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio_postgres::Client;
use tributary::Lsn;
use tributary::config::PipelineConfig;
use tributary::pipeline::{self, Progress, RunOptions};
use tributary::source::replication::{ReplicationConnection, XLogData};

/// What a consumer reports about itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConsumerReport {
    /// From the first read of the slot to the last commit landed (or seen).
    pub seconds: f64,
    /// Start-up before the first read: connection, provisioning, plugin compilation.
    pub startup_seconds: f64,
    /// User + system CPU of the consumer over `seconds`.
    pub cpu_seconds: f64,
    pub max_rss_kib: u64,
    pub changes: u64,
    pub transactions: u64,
    pub parquet_bytes: u64,
    pub flushes: u64,
    pub stages: Stages,
    /// Requests the pipeline sent to its Iceberg catalog over `seconds`, as its counter
    /// (`tributary_catalog_requests_total`) has them; `None` for other formats.
    #[serde(default)]
    pub catalog_requests: Option<u64>,
}

/// Seconds per pipeline stage (see `tributary::pipeline::StageTimes`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Stages {
    pub decode: f64,
    pub transform: f64,
    pub encode: f64,
    pub upload: f64,
    pub commit: f64,
}

/// A consumer's report with the walsender's CPU over the same run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measured {
    #[serde(flatten)]
    pub consumer: ConsumerReport,
    pub walsender_cpu_seconds: f64,
}

fn cpu_and_rss() -> (f64, u64) {
    // SAFETY: getrusage writes into the struct we pass and has no other preconditions.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    (
        timeval(usage.ru_utime) + timeval(usage.ru_stime),
        usage.ru_maxrss as u64,
    )
}

fn children_cpu() -> f64 {
    // SAFETY: as above.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// The child side: run the pipeline until it has landed `changes` changes or a commit at or
/// past `until` (or, with neither, until stdin closes), then stop it cleanly and print the
/// report.
pub async fn run_pipeline_child(config: &Path, until: Option<(Lsn, u64)>) -> anyhow::Result<()> {
    let config = PipelineConfig::load(config)?;
    // The pipeline runs in this process: the catalog's request counter is this process's.
    let iceberg = config.sink.format == tributary::lake::TableFormat::Iceberg;
    let started = Instant::now();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (progress_tx, mut progress) = watch::channel(Progress::default());
    let run = tokio::spawn(pipeline::run(
        config,
        RunOptions::default(),
        stop_rx,
        progress_tx,
    ));
    let ended = |progress: &watch::Receiver<Progress>| progress.has_changed().is_err();
    while !progress.borrow_and_update().streaming {
        if progress.changed().await.is_err() {
            break;
        }
    }
    if ended(&progress) {
        run.await??;
        bail!("the pipeline stopped before streaming");
    }
    let streaming = Instant::now();
    let (cpu0, _) = cpu_and_rss();
    let requests0 = tributary::lake::iceberg::catalog::requests_sent();
    println!("{{\"streaming\":true}}");
    match until {
        Some((until, changes)) => loop {
            let landed = {
                let p = progress.borrow_and_update();
                p.changes >= changes
                    || p.last_entry
                        .as_ref()
                        .is_some_and(|e| e.last_commit_lsn >= until)
            };
            if landed {
                break;
            }
            if progress.changed().await.is_err() {
                run.await??;
                bail!("the pipeline stopped before landing {until}");
            }
        },
        None => {
            let mut stdin = BufReader::new(tokio::io::stdin()).lines();
            while stdin.next_line().await?.is_some() {}
        }
    }
    let seconds = streaming.elapsed().as_secs_f64();
    let (cpu1, rss) = cpu_and_rss();
    let catalog_requests =
        iceberg.then(|| tributary::lake::iceberg::catalog::requests_sent() - requests0);
    let p = progress.borrow().clone();
    let report = ConsumerReport {
        seconds,
        startup_seconds: (streaming - started).as_secs_f64(),
        cpu_seconds: cpu1 - cpu0,
        max_rss_kib: rss,
        changes: p.changes,
        transactions: p.transactions,
        parquet_bytes: p.bytes_written,
        flushes: p.flushes,
        stages: Stages {
            decode: p.stages.decode.as_secs_f64(),
            transform: p.stages.transform.as_secs_f64(),
            encode: p.stages.encode.as_secs_f64(),
            upload: p.stages.upload.as_secs_f64(),
            commit: p.stages.commit.as_secs_f64(),
        },
        catalog_requests,
    };
    println!("{}", serde_json::to_string(&report)?);
    let _ = stop_tx.send(true);
    run.await??;
    Ok(())
}

/// The child side of the raw reader: stream the slot with Tributary's replication client,
/// count changes and commits, stop at the first commit at or past `until` and confirm it.
pub async fn run_raw_child(
    url: &str,
    slot: &str,
    publication: &str,
    until: Lsn,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let config: tributary::source::connect::PgConfig = url.parse()?;
    let conn = ReplicationConnection::connect(&config).await?;
    // The same protocol and streaming the pipeline asks for.
    let proto = match conn.server_version_num() {
        Some(v) if v >= 160_000 => "4",
        Some(v) if v >= 150_000 => "3",
        Some(v) if v >= 140_000 => "2",
        _ => "1",
    };
    let publications = format!("\"{publication}\"");
    let mut options = vec![
        ("proto_version", proto),
        ("publication_names", publications.as_str()),
    ];
    if proto != "1" {
        options.push(("streaming", "on"));
    }
    let mut stream = conn
        .start_logical(slot, Lsn::ZERO, &options, Duration::from_secs(10))
        .await?;
    let streaming = Instant::now();
    let (cpu0, _) = cpu_and_rss();
    let (mut changes, mut transactions) = (0u64, 0u64);
    let mut frames: Vec<XLogData> = Vec::with_capacity(8192);
    // Confirmed once, at the end: each confirm sends a status update the walsender must
    // process, and pg_recvlogical reports only every 10 s.
    let end = 'read: loop {
        frames.clear();
        if stream.recv_many(&mut frames, 8192).await? == 0 {
            bail!("the server ended the stream before {until}");
        }
        for frame in &frames {
            let data = &frame.data;
            // Commit: 'C', flags, commit LSN, end LSN; Stream Commit: 'c', xid, flags, ...
            let lsns = match data.first() {
                Some(b'I' | b'U' | b'D') => {
                    changes += 1;
                    None
                }
                Some(b'C') if data.len() >= 18 => Some((&data[2..10], &data[10..18])),
                Some(b'c') if data.len() >= 22 => Some((&data[6..14], &data[14..22])),
                _ => None,
            };
            if let Some((commit, end)) = lsns {
                transactions += 1;
                if Lsn(u64::from_be_bytes(commit.try_into()?)) >= until {
                    break 'read Lsn(u64::from_be_bytes(end.try_into()?));
                }
            }
        }
    };
    let seconds = streaming.elapsed().as_secs_f64();
    let (cpu1, rss) = cpu_and_rss();
    let report = ConsumerReport {
        seconds,
        startup_seconds: (streaming - started).as_secs_f64(),
        cpu_seconds: cpu1 - cpu0,
        max_rss_kib: rss,
        changes,
        transactions,
        ..ConsumerReport::default()
    };
    println!("{}", serde_json::to_string(&report)?);
    stream.confirm(end);
    stream.shutdown().await?;
    Ok(())
}

/// The server process a consumer reads through, whose CPU is sampled beside it.
#[derive(Debug, Clone)]
pub enum Served {
    /// The walsender serving this slot (its `active_pid`).
    Slot(String),
    /// The backend of the connection holding the reader lock on the journal of this trigger
    /// capture schema: it reads the journal and deletes what landed.
    Journal(String),
}

impl Served {
    /// A name for files about the consumer (`perf` profiles).
    fn label(&self) -> String {
        match self {
            Served::Slot(slot) => slot.clone(),
            Served::Journal(schema) => format!("journal_{schema}"),
        }
    }

    /// The process id serving it now, if any.
    async fn pid(&self, client: &Client) -> anyhow::Result<Option<i32>> {
        Ok(match self {
            Served::Slot(slot) => client
                .query_opt(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                    &[slot],
                )
                .await?
                .and_then(|r| r.get(0)),
            Served::Journal(schema) => tributary::source::trigger::capture::reader(client, schema)
                .await?
                .map(|holder| holder.pid),
        })
    }
}

/// Samples the CPU time of the server process that serves a consumer (the walsender of its
/// slot, or the backend reading its journal), from when it appears until stopped; the last
/// sample is the answer (such a process serves one connection and starts at zero).
pub struct WalsenderSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<f64>>,
}

impl WalsenderSampler {
    pub fn start(client: Arc<Client>, served: Served) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut pid: Option<i32> = None;
            let mut last = 0.0;
            loop {
                let stopping = flag.load(Ordering::SeqCst);
                if pid.is_none() {
                    // A consumer that creates its slot (a full load) has none at first.
                    pid = served.pid(&client).await?;
                }
                if let Some(pid) = pid
                    && let Some(cpu) = process_cpu(pid)
                {
                    last = cpu;
                }
                if stopping {
                    return Ok(last);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        WalsenderSampler { stop, task }
    }

    pub async fn finish(self) -> anyhow::Result<f64> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await?
    }
}

/// utime + stime of a process, in seconds, from `/proc/<pid>/stat`.
pub fn process_cpu(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

/// Peak resident memory of a process in KiB, from `/proc/<pid>/status`.
fn process_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs this binary as a consumer child with `args` and the environment variables `env` on
/// top of ours, sampling the slot's walsender meanwhile. With `perf`, the child runs under
/// `perf record` writing `<perf>/<slot>.data`.
pub async fn measure_child(
    client: Arc<Client>,
    slot: &str,
    args: &[String],
    perf: Option<&Path>,
    env: &[(&str, &Path)],
) -> anyhow::Result<Measured> {
    measure_child_serving(client, Served::Slot(slot.to_owned()), args, perf, env).await
}

/// [`measure_child`] for a consumer served by `served`, whose CPU the report's
/// `walsender_cpu_seconds` then holds.
pub async fn measure_child_serving(
    client: Arc<Client>,
    served: Served,
    args: &[String],
    perf: Option<&Path>,
    env: &[(&str, &Path)],
) -> anyhow::Result<Measured> {
    let exe = std::env::current_exe()?;
    let label = served.label();
    let sampler = WalsenderSampler::start(client, served);
    let mut command = match perf {
        Some(dir) => {
            let mut command = tokio::process::Command::new("perf");
            command
                .args(["record", "--quiet", "-F", "999", "-o"])
                .arg(dir.join(format!("{label}.data")))
                .arg("--")
                .arg(exe);
            command
        }
        None => tokio::process::Command::new(exe),
    };
    let mut child = command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // The child's log goes on to ours; its last line says why it failed, if it did.
    let mut errors = BufReader::new(child.stderr.take().context("child stderr")?).lines();
    let last_error = tokio::spawn(async move {
        let mut last = None;
        while let Ok(Some(line)) = errors.next_line().await {
            eprintln!("{line}");
            if !line.trim().is_empty() {
                last = Some(line);
            }
        }
        last
    });
    let mut lines = BufReader::new(child.stdout.take().context("child stdout")?).lines();
    let mut report = None;
    while let Some(line) = lines.next_line().await? {
        if line.contains("\"seconds\"") {
            report = Some(serde_json::from_str::<ConsumerReport>(&line)?);
            break;
        }
    }
    // The walsender is still serving the child while it stops.
    let walsender = sampler.finish().await?;
    let status = child.wait().await?;
    let last_error = last_error.await?.unwrap_or_default();
    let Some(consumer) = report else {
        bail!("the consumer ended ({status}) without a report: {last_error}");
    };
    if !status.success() {
        bail!("consumer {args:?} failed after its report ({status})");
    }
    Ok(Measured {
        consumer,
        walsender_cpu_seconds: walsender,
    })
}

/// `pg_recvlogical` to /dev/null, stopping at the marker.
pub async fn measure_pg_recvlogical(
    client: Arc<Client>,
    bin_dir: &Path,
    url: &str,
    slot: &str,
    until: Lsn,
    proto: u32,
    changes: u64,
) -> anyhow::Result<Measured> {
    let program: PathBuf = bin_dir.join("pg_recvlogical");
    let sampler = WalsenderSampler::start(client, Served::Slot(slot.to_owned()));
    let cpu0 = children_cpu();
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&program);
    command
        .args([
            "-d",
            url,
            "--slot",
            slot,
            "--start",
            "--no-loop",
            "-f",
            "/dev/null",
        ])
        .args(["-E", &until.to_string()])
        .args(["-o", &format!("proto_version={proto}")])
        .args([
            "-o",
            &format!("publication_names={}", crate::workload::PUBLICATION),
        ])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if proto >= 2 {
        command.args(["-o", "streaming=on"]);
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let pid = child.id().context("pg_recvlogical pid")?;
    let mut hwm = 0;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                hwm = process_hwm(pid).unwrap_or(hwm).max(hwm);
            }
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let walsender = sampler.finish().await?;
    if !status.success() {
        bail!("pg_recvlogical failed ({status})");
    }
    Ok(Measured {
        consumer: ConsumerReport {
            seconds,
            cpu_seconds: children_cpu() - cpu0,
            max_rss_kib: hwm,
            changes,
            ..ConsumerReport::default()
        },
        walsender_cpu_seconds: walsender,
    })
}
