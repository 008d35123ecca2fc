//! The full-load scenario: `start_from = "full"` on tables that already hold their rows, beside
//! its ceiling in the same run, `COPY ... TO STDOUT (FORMAT binary)` of the same page ranges by
//! `psql` on as many connections into /dev/null.
//!
//! Both read the inserts table (10M rows; --quick 200k) and the 50-column table (200k; --quick
//! 20k) in chunks of `CHUNK_MIB` of heap pages, planned by the same function
//! (`tributary::stream::load::plan`), on `CONNECTIONS` connections. The pipeline is timed from the moment
//! it holds its slot (the snapshot taken) until the commit log holds every row, as the other
//! pipeline consumers are; `psql` from its start to its end.
//!
//! While the pipeline starts and loads, a writer commits [`WRITES`] transactions of
//! [`WRITE_ROWS`] rows into the marker table, some before the snapshot and some after it; the
//! run then checks that the lake holds each of those rows exactly once, so the hand-over from
//! the load to the stream left no gap and doubled nothing.

use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::Lake;
use crate::consume::{self, Measured};
use crate::workload;

/// Connections both sides read on.
pub const CONNECTIONS: usize = 2;
/// Heap read per chunk, as `load.chunk_mib`.
pub const CHUNK_MIB: usize = 64;
/// Transactions the concurrent writer commits while the pipeline starts and loads...
const WRITES: u64 = 100;
/// ...each of this many rows...
const WRITE_ROWS: u64 = 100;
/// ...one every this often: about a second across the snapshot.
const WRITE_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
/// The table it writes to (tracked, and empty when the load starts).
const WRITTEN: &str = "public.bench_marker";

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct FullLoadRun {
    pub ceiling_seconds: f64,
    pub pipeline: Measured,
    /// Rows the concurrent writer committed (each landed exactly once, or the run fails)...
    pub written: u64,
    /// ...and how many of them came with the load, the others from the stream.
    pub written_loaded: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FullLoadResult {
    pub rows: u64,
    pub wide_rows: u64,
    pub heap_bytes: u64,
    pub runs: Vec<Result<FullLoadRun, String>>,
}

impl FullLoadResult {
    pub fn failures(&self) -> usize {
        self.runs.iter().filter(|r| r.is_err()).count()
    }

    pub fn print(&self) -> String {
        let ok: Vec<&FullLoadRun> = self.runs.iter().filter_map(|r| r.as_ref().ok()).collect();
        let rows = (self.rows + self.wide_rows) as f64;
        let mut out = format!(
            "\n== full-load: {} rows of ~200 bytes and {} rows of the 50-column table ({:.0} MB of heap), {CONNECTIONS} connections, {CHUNK_MIB} MiB chunks\n",
            self.rows,
            self.wide_rows,
            self.heap_bytes as f64 / 1e6
        );
        if ok.is_empty() {
            out.push_str("no run succeeded\n");
            return out;
        }
        let ceiling: Vec<f64> = ok.iter().map(|r| rows / r.ceiling_seconds).collect();
        let pipeline: Vec<f64> = ok
            .iter()
            .map(|r| rows / r.pipeline.consumer.seconds)
            .collect();
        let cpu: Vec<f64> = ok
            .iter()
            .map(|r| r.pipeline.consumer.cpu_seconds / rows * 1e6)
            .collect();
        let rss: Vec<f64> = ok
            .iter()
            .map(|r| r.pipeline.consumer.max_rss_kib as f64 / 1024.0)
            .collect();
        let ratios: Vec<f64> = ok
            .iter()
            .map(|r| r.ceiling_seconds / r.pipeline.consumer.seconds)
            .collect();
        out.push_str(&format!(
            "{:<36}{:>26}{:>24}{:>20}\n",
            "consumer", "rows/s", "CPU s/M rows", "peak RSS MiB"
        ));
        out.push_str(&format!(
            "{:<36}{:>26}{:>24}{:>20}\n",
            format!("psql COPY binary ×{CONNECTIONS} → /dev/null"),
            figure(&ceiling, 1e-3, "k"),
            "-",
            "-"
        ));
        out.push_str(&format!(
            "{:<36}{:>26}{:>24}{:>20}\n",
            "tributary full load → file",
            figure(&pipeline, 1e-3, "k"),
            figure(&cpu, 1.0, ""),
            figure(&rss, 1.0, "")
        ));
        out.push_str(&format!(
            "ratio of rows/s: tributary/ceiling {}\n",
            figure(&ratios, 1.0, "")
        ));
        let split: Vec<String> = ok
            .iter()
            .map(|r| format!("{}+{}", r.written_loaded, r.written - r.written_loaded))
            .collect();
        out.push_str(&format!(
            "no gap: every run's {} rows written to {WRITTEN} while the pipeline started landed once each (loaded+streamed per run: {})\n",
            ok[0].written,
            split.join(", ")
        ));
        let stages = &ok[ok.len() / 2].pipeline.consumer.stages;
        out.push_str(&format!(
            "tributary's stages (a middle run, busy seconds): decode {:.2}, transform {:.2}, encode {:.2}, upload {:.2}, commit {:.2}\n",
            stages.decode, stages.transform, stages.encode, stages.upload, stages.commit
        ));
        out
    }
}

/// Median [min–max], scaled, with a unit suffix.
fn figure(values: &[f64], scale: f64, unit: &str) -> String {
    let mut v: Vec<f64> = values.iter().map(|x| x * scale).collect();
    v.sort_by(f64::total_cmp);
    let median = v[v.len() / 2];
    let digits = if median >= 100.0 { 0 } else { 2 };
    format!(
        "{median:.digits$}{unit} [{:.digits$}{unit}–{:.digits$}{unit}]",
        v[0],
        v[v.len() - 1]
    )
}

impl crate::Bench {
    pub async fn full_load(&self) -> anyhow::Result<FullLoadResult> {
        let size = |full: u64, quick: u64| {
            let n = if self.args.quick { quick } else { full };
            ((n as f64 * self.args.scale).round() as u64).max(1)
        };
        let (rows, wide_rows) = (size(10_000_000, 200_000), size(200_000, 20_000));
        eprintln!("==> full-load: {rows} rows and {wide_rows} wide rows");
        let mut result = FullLoadResult {
            rows,
            wide_rows,
            heap_bytes: 0,
            runs: Vec::new(),
        };
        for run in 0..self.runs() {
            self.client
                .batch_execute("TRUNCATE bench_rows, bench_wide, bench_marker")
                .await?;
            for (table, total) in [("bench_rows", rows), ("bench_wide", wide_rows)] {
                // In pieces of a million, so no statement holds the whole table in memory.
                let mut first = 1;
                while first <= total {
                    let last = (first + 999_999).min(total);
                    let sql = match table {
                        "bench_rows" => workload::insert_rows(first, last),
                        _ => workload::insert_wide(first, last),
                    };
                    self.client.batch_execute(&sql).await?;
                    first = last + 1;
                }
            }
            self.client.batch_execute("VACUUM ANALYZE").await?;
            self.client.batch_execute("CHECKPOINT").await?;
            let measured = self.full_load_once(run, rows + wide_rows).await;
            match &measured {
                Ok((run_result, heap)) => {
                    result.heap_bytes = *heap;
                    eprintln!(
                        "    run {}: ceiling {:.2} s, tributary {:.2} s ({:.0} MiB peak)",
                        run + 1,
                        run_result.ceiling_seconds,
                        run_result.pipeline.consumer.seconds,
                        run_result.pipeline.consumer.max_rss_kib as f64 / 1024.0
                    );
                }
                Err(e) => eprintln!("    run {}: failed: {e:#}", run + 1),
            }
            result
                .runs
                .push(measured.map(|(r, _)| r).map_err(|e| format!("{e:#}")));
        }
        Ok(result)
    }

    /// One run: the ceiling, then the pipeline; also the tables' heap size.
    async fn full_load_once(&self, run: usize, rows: u64) -> anyhow::Result<(FullLoadRun, u64)> {
        let chunk_pages = u32::try_from((CHUNK_MIB << 20) / 8192)?;
        let mut ranges = Vec::new();
        let mut heap = 0u64;
        for table in ["bench_rows", "bench_wide"] {
            let pages: i64 = self
                .client
                .query_one(
                    "SELECT pg_relation_size($1::text::regclass) / current_setting('block_size')::bigint",
                    &[&table],
                )
                .await?
                .get(0);
            heap += pages as u64 * 8192;
            for pages in tributary::stream::load::plan(u32::try_from(pages)?, chunk_pages, true) {
                let tributary::stream::load::Pages::Range { from, to } = pages else {
                    bail!("{table} is planned as one chunk");
                };
                let upper = to.map_or(String::new(), |to| format!(" AND ctid < '({to},0)'::tid"));
                ranges.push(format!(
                    "COPY (SELECT * FROM {table} WHERE ctid >= '({from},0)'::tid{upper}) TO STDOUT (FORMAT binary)"
                ));
            }
        }
        // The ceiling: the same ranges on as many connections, each taking the next.
        let started = Instant::now();
        let mut children = Vec::new();
        for connection in 0..CONNECTIONS {
            let mut command = tokio::process::Command::new(self.cluster.bin_dir().join("psql"));
            command
                .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
                .arg(self.cluster.url("bench"));
            for sql in ranges.iter().skip(connection).step_by(CONNECTIONS) {
                command.args(["-c", sql]);
            }
            children.push(
                command
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .context("starting psql")?,
            );
        }
        for child in children {
            let output = child.wait_with_output().await?;
            if !output.status.success() {
                bail!("psql failed: {}", String::from_utf8_lossy(&output.stderr));
            }
        }
        let ceiling_seconds = started.elapsed().as_secs_f64();

        // The pipeline, on a slot of its own that it creates with the snapshot.
        let slot = format!("bench_full_load_{run}");
        let (config, cleanup) = self
            .pipeline_config(
                &slot,
                None,
                Lake::default(),
                &format!("full-load-{run}"),
                None,
            )
            .await?;
        let text = std::fs::read_to_string(&config)?
            .replace("slot_behavior = \"reuse\"", "slot_behavior = \"create\"")
            .replace("start_from = \"head\"", "start_from = \"full\"")
            + &format!("\n[load]\nparallelism = {CONNECTIONS}\nchunk_mib = {CHUNK_MIB}\n");
        std::fs::write(&config, text)?;
        // Every row, the writer's rows (loaded or streamed), and one marker per table.
        let written = WRITES * WRITE_ROWS;
        let expected = rows + written + workload::TABLES.len() as u64;
        let args = [
            "__pipeline".to_owned(),
            config.display().to_string(),
            tributary::Lsn(u64::MAX).to_string(),
            expected.to_string(),
        ];
        let writer = async {
            let mut every = tokio::time::interval(WRITE_EVERY);
            for _ in 0..WRITES {
                every.tick().await;
                self.client
                    .batch_execute(&format!(
                        "INSERT INTO bench_marker (at) SELECT now() FROM generate_series(1, {WRITE_ROWS})"
                    ))
                    .await?;
            }
            anyhow::Ok(())
        };
        let (measured, wrote) = tokio::join!(
            consume::measure_child(
                self.client.clone(),
                &slot,
                &args,
                self.args.perf.as_deref(),
                &[],
            ),
            writer
        );
        let landed = match (&measured, wrote) {
            (Ok(_), Ok(())) => self.landed_once(&cleanup.join("sink")).await,
            (_, Err(e)) => Err(e.context("the concurrent writer failed")),
            (Err(_), _) => Ok((0, 0)),
        };
        let _ = std::fs::remove_dir_all(&cleanup);
        self.drop_slot(&slot).await?;
        let pipeline = measured?;
        if pipeline.consumer.changes != expected {
            bail!(
                "the full load landed {} rows and markers, expected {expected}",
                pipeline.consumer.changes
            );
        }
        let (landed, written_loaded) = landed?;
        if landed != written {
            bail!(
                "of the {written} rows written during the load, {landed} landed (each once): the hand-over to streaming lost some"
            );
        }
        Ok((
            FullLoadRun {
                ceiling_seconds,
                pipeline,
                written,
                written_loaded,
            },
            heap,
        ))
    }
}

impl crate::Bench {
    /// Rows of the writer's table the lake at `sink` holds, and how many of them the load
    /// landed, after checking that each landed once and that the table has exactly one load
    /// marker.
    async fn landed_once(&self, sink: &std::path::Path) -> anyhow::Result<(u64, u64)> {
        let sink = tributary::lake::sink::Sink::open(
            &format!("file://{}", sink.display()),
            &Default::default(),
        )?;
        let rows = tributary_tests::lake::committed_rows(&sink, WRITTEN).await;
        let markers = rows.iter().filter(|r| r.op == "load").count();
        if markers != 1 {
            bail!("{WRITTEN} has {markers} load markers in the lake, expected one");
        }
        let mut ids: Vec<&str> = rows
            .iter()
            .filter(|r| r.op != "load")
            .filter_map(|r| r.values.get("id").and_then(|v| v.as_deref()))
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != all {
            bail!(
                "{} of the rows written during the load landed twice",
                all - ids.len()
            );
        }
        let loaded = rows
            .iter()
            .filter(|r| r.op != "load" && r.xid == tributary::stream::load::LOAD_XID)
            .count();
        Ok((all as u64, loaded as u64))
    }
}
