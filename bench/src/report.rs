//! Machine facts, medians with their spread, and the printed tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use serde::Serialize;

use crate::consume::Measured;
use crate::workload::Workload;

/// What the figures were measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Facts {
    pub commit: String,
    pub cores: usize,
    pub cpu: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub postgres: String,
    pub rustc: String,
    pub profile: &'static str,
    pub date: String,
    pub quick: bool,
    pub runs: usize,
}

impl Facts {
    pub fn gather(postgres: &str, quick: bool, runs: usize) -> Facts {
        let output = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_else(|| "unknown".into())
        };
        let mut commit = output("git", &["rev-parse", "--short=12", "HEAD"]);
        if !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty() {
            commit.push_str(" (with uncommitted changes)");
        }
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, v)| v.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        Facts {
            commit,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            memory_gib: memory_kib / (1024.0 * 1024.0),
            kernel: output("uname", &["-r"]),
            postgres: postgres.to_owned(),
            rustc: output("rustc", &["--version"]),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            date: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            quick,
            runs,
        }
    }

    pub fn print(&self) {
        println!(
            "tributary-bench at commit {} ({} build, {})\n\
             machine: {} cores ({}), {:.1} GiB, Linux {}; PostgreSQL {}; {}\n\
             {} run(s) per figure{}; figures are median [min–max]",
            self.commit,
            self.profile,
            self.date,
            self.cores,
            self.cpu,
            self.memory_gib,
            self.kernel,
            self.postgres,
            self.rustc,
            self.runs,
            if self.quick { ", --quick sizes" } else { "" },
        );
    }
}

/// The median of some runs and their spread.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        })
    }

    /// `median [min–max]`, or the median alone for one run.
    pub fn show(&self, format: fn(f64) -> String) -> String {
        if self.min == self.max {
            format(self.median)
        } else {
            format!(
                "{} [{}–{}]",
                format(self.median),
                format(self.min),
                format(self.max)
            )
        }
    }
}

pub fn rate(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

pub fn fixed1(v: f64) -> String {
    format!("{v:.1}")
}

pub fn fixed2(v: f64) -> String {
    format!("{v:.2}")
}

pub fn fixed0(v: f64) -> String {
    format!("{v:.0}")
}

/// One scenario's runs: per consumer, one result per run.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub workload: Workload,
    pub wal_bytes: Vec<u64>,
    pub generate_seconds: Vec<f64>,
    /// Consumer name → per run: the measurement or why it failed.
    pub runs: BTreeMap<String, Vec<Result<Measured, String>>>,
    pub order: Vec<String>,
}

pub const PG_RECVLOGICAL: &str = "pg_recvlogical";
pub const RAW: &str = "raw reader";
pub const NONE_FILE: &str = "tributary none → file";
pub const PASSTHROUGH_FILE: &str = "tributary passthrough → file";
pub const MASK_FILE: &str = "tributary mask+filter → file";
pub const NONE_S3: &str = "tributary none → s3";
pub const DELTA_S3: &str = "tributary none → s3 delta";
pub const ICEBERG_S3: &str = "tributary none → s3 iceberg";
/// Iceberg tables whose pointers a SQL catalog in the benchmark's PostgreSQL holds.
pub const ICEBERG_SQL_S3: &str = "tributary none → s3 iceberg+sql";
/// Delta tables with every table's current-state table (update mix only).
pub const MIRROR_S3: &str = "tributary none → s3 delta+current";
/// Iceberg tables with every table's current-state table (update mix only).
pub const ICEBERG_MIRROR_S3: &str = "tributary none → s3 iceberg+current";

impl ScenarioResult {
    fn ok(&self, name: &str) -> Vec<(usize, &Measured)> {
        self.runs
            .get(name)
            .map(|runs| {
                runs.iter()
                    .enumerate()
                    .filter_map(|(i, r)| r.as_ref().ok().map(|m| (i, m)))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn rows_per_second(&self, m: &Measured) -> f64 {
        self.workload.changes as f64 / m.consumer.seconds
    }

    /// Per-run ratios of rows/s, `a / b`, over the runs where both succeeded.
    pub fn ratio(&self, a: &str, b: &str) -> Option<Spread> {
        let bs: BTreeMap<usize, &Measured> = self.ok(b).into_iter().collect();
        let ratios: Vec<f64> = self
            .ok(a)
            .into_iter()
            .filter_map(|(i, m)| {
                bs.get(&i)
                    .map(|n| self.rows_per_second(m) / self.rows_per_second(n))
            })
            .collect();
        Spread::of(&ratios)
    }

    pub fn print(&self) -> String {
        let mut out = String::new();
        let w = &self.workload;
        let wal = Spread::of(
            &self
                .wal_bytes
                .iter()
                .map(|&b| b as f64 / 1e6)
                .collect::<Vec<_>>(),
        );
        let _ = writeln!(
            out,
            "\n== {}: {} ({} changes, WAL {} MB)",
            w.scenario.name(),
            w.description,
            w.changes,
            wal.map_or("?".into(), |s| s.show(fixed0))
        );
        let _ = writeln!(
            out,
            "{:<30} {:>22} {:>20} {:>18} {:>18} {:>16}",
            "consumer", "rows/s", "WAL MB/s", "CPU s/M rows", "walsender s/M", "peak RSS MiB"
        );
        for name in &self.order {
            let ok = self.ok(name);
            let failures: Vec<&String> = self.runs[name]
                .iter()
                .filter_map(|r| r.as_ref().err())
                .collect();
            if ok.is_empty() {
                let _ = writeln!(
                    out,
                    "{name:<30} failed: {}",
                    failures.first().map_or("", |s| s.as_str())
                );
                continue;
            }
            let per_m = |v: f64| v / w.changes as f64 * 1e6;
            let col = |f: &dyn Fn(&Measured, usize) -> f64, format: fn(f64) -> String| {
                let values: Vec<f64> = ok.iter().map(|(i, m)| f(m, *i)).collect();
                Spread::of(&values).map_or("-".into(), |s| s.show(format))
            };
            let _ = writeln!(
                out,
                "{:<30} {:>22} {:>20} {:>18} {:>18} {:>16}{}",
                name,
                col(&|m, _| self.rows_per_second(m), rate),
                col(
                    &|m, i| self.wal_bytes[i] as f64 / 1e6 / m.consumer.seconds,
                    fixed1
                ),
                col(&|m, _| per_m(m.consumer.cpu_seconds), fixed2),
                col(&|m, _| per_m(m.walsender_cpu_seconds), fixed2),
                col(&|m, _| m.consumer.max_rss_kib as f64 / 1024.0, fixed0),
                if failures.is_empty() {
                    String::new()
                } else {
                    format!("  ({} run(s) failed: {})", failures.len(), failures[0])
                }
            );
        }
        let ratios = [
            (NONE_FILE, RAW, "tributary/raw reader"),
            (NONE_FILE, PG_RECVLOGICAL, "tributary/pg_recvlogical"),
            (RAW, PG_RECVLOGICAL, "raw reader/pg_recvlogical"),
            (PASSTHROUGH_FILE, NONE_FILE, "passthrough wasm/none"),
            (MASK_FILE, NONE_FILE, "mask+filter wasm/none"),
            (NONE_S3, NONE_FILE, "s3/file"),
            (DELTA_S3, NONE_S3, "delta/parquet (s3)"),
            (ICEBERG_S3, NONE_S3, "iceberg/parquet (s3)"),
            (ICEBERG_SQL_S3, NONE_S3, "iceberg+sql catalog/parquet (s3)"),
            (MIRROR_S3, DELTA_S3, "delta+current/delta (s3)"),
            (
                ICEBERG_MIRROR_S3,
                ICEBERG_S3,
                "iceberg+current/iceberg (s3)",
            ),
        ];
        let shown: Vec<String> = ratios
            .iter()
            .filter_map(|(a, b, label)| {
                self.ratio(a, b)
                    .map(|s| format!("{label} {}", s.show(fixed2)))
            })
            .collect();
        if !shown.is_empty() {
            let _ = writeln!(out, "ratios of rows/s: {}", shown.join("; "));
        }
        for name in [NONE_FILE, PASSTHROUGH_FILE, MASK_FILE] {
            let ok = self.ok(name);
            if ok.is_empty() {
                continue;
            }
            let median = |f: &dyn Fn(&Measured) -> f64| {
                Spread::of(&ok.iter().map(|(_, m)| f(m)).collect::<Vec<_>>())
                    .map_or(0.0, |s| s.median)
            };
            let total = median(&|m| m.consumer.seconds);
            let stages = [
                ("decode", median(&|m| m.consumer.stages.decode)),
                ("transform", median(&|m| m.consumer.stages.transform)),
                ("encode", median(&|m| m.consumer.stages.encode)),
                ("upload", median(&|m| m.consumer.stages.upload)),
                ("commit", median(&|m| m.consumer.stages.commit)),
            ];
            let busy: f64 = stages.iter().map(|(_, s)| s).sum();
            let mut line = format!("stages of {name} (s, % of {total:.2} s):");
            for (stage, s) in stages {
                let _ = write!(line, " {stage} {s:.2} ({:.0}%)", s / total * 100.0);
            }
            // The stages run side by side, so their times may add up to more than the run.
            let rest = if busy <= total {
                format!(
                    "other/waiting {:.2} ({:.0}%)",
                    total - busy,
                    (total - busy) / total * 100.0
                )
            } else {
                format!(
                    "stages overlapping: {:.0}% of the run summed",
                    busy / total * 100.0
                )
            };
            let _ = write!(
                line,
                " {rest}; start-up before the first read {:.2} s; {} flushes, Parquet {:.1} MB",
                median(&|m| m.consumer.startup_seconds),
                ok[0].1.consumer.flushes,
                ok[0].1.consumer.parquet_bytes as f64 / 1e6
            );
            let _ = writeln!(out, "{line}");
        }
        self.print_per_flush(&mut out);
        out
    }

    /// What a flush's commit costs into S3, with and without its tables (the commit stage:
    /// the commit entry, the intent's removal and, with tables, one commit per table touched),
    /// and the requests an Iceberg consumer sent to its catalog per flush.
    fn print_per_flush(&self, out: &mut String) {
        let commit = self.per_flush(
            &[
                (NONE_S3, "parquet"),
                (DELTA_S3, "delta"),
                (ICEBERG_S3, "iceberg"),
                (ICEBERG_SQL_S3, "iceberg+sql"),
                (MIRROR_S3, "delta+current"),
                (ICEBERG_MIRROR_S3, "iceberg+current"),
            ],
            |m| Some(m.consumer.stages.commit * 1e3),
            " ms",
        );
        if !commit.is_empty() {
            let _ = writeln!(out, "commit stage per flush into s3: {}", commit.join("; "));
        }
        let requests = self.per_flush(
            &[(ICEBERG_S3, "iceberg"), (ICEBERG_SQL_S3, "iceberg+sql")],
            |m| m.consumer.catalog_requests.map(|n| n as f64),
            "",
        );
        if !requests.is_empty() {
            let _ = writeln!(out, "catalog requests per flush: {}", requests.join("; "));
        }
    }

    /// Per consumer (name, label) that ran: `figure` of each run divided by its flushes, as
    /// `label median [min–max]<unit> over <flushes> flushes`.
    fn per_flush(
        &self,
        consumers: &[(&str, &str)],
        figure: impl Fn(&Measured) -> Option<f64>,
        unit: &str,
    ) -> Vec<String> {
        consumers
            .iter()
            .filter_map(|(name, label)| {
                let ok = self.ok(name);
                let each: Vec<f64> = ok
                    .iter()
                    .filter(|(_, m)| m.consumer.flushes > 0)
                    .filter_map(|(_, m)| Some(figure(m)? / m.consumer.flushes as f64))
                    .collect();
                let spread = Spread::of(&each)?;
                Some(format!(
                    "{label} {}{unit} over {} flushes",
                    spread.show(fixed1),
                    ok[0].1.consumer.flushes
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        assert!(Spread::of(&[]).is_none());
        assert_eq!(Spread::of(&[5.0]).unwrap().show(fixed1), "5.0");
    }

    #[test]
    fn rates_read_as_thousands() {
        assert_eq!(rate(75_123.0), "75k");
        assert_eq!(rate(2_345.0), "2.3k");
        assert_eq!(rate(512.0), "512");
    }
}
