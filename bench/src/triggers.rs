//! The `triggers` scenario, run only when named: what trigger capture costs the source, beside
//! no capture at all and beside a slot, and how fast a pipeline drains its journal, beside the
//! same pipeline draining a slot.
//!
//! Four workloads are each written, in every run, in three states of the same tables:
//!
//! - *no capture*: no triggers, no slot;
//! - *slot*: a logical slot on the benchmark's publication (WAL mode, pipeline stopped);
//! - *triggers*: trigger capture installed by a trigger-mode pipeline's first start, which
//!   stops as soon as it streams (trigger mode, pipeline stopped).
//!
//! Before each state the capture schema is removed, the tables emptied and preloaded
//! ([`workload::prepare`]); the figures are the wall time of the writer's statements and the
//! WAL they wrote, and in trigger mode the journal's size and rows once the writer is done.
//! The three states take turns at going first from one run to the next.
//! On the inserts, the pipeline with no transform into a local directory then drains what the
//! state left: the slot's backlog, or the journal's, each the same workload, timed from its
//! first read to the commit entry holding the last change, as the throughput scenarios time
//! it.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;
use tributary::Lsn;
use tributary::source::trigger::install;

use crate::consume::{self, Measured, Served};
use crate::report::{NONE_FILE, Spread, fixed0, fixed2, rate};
use crate::workload::{self, Generated, Scenario, Workload};
use crate::{Bench, Lake};

/// The schema trigger capture installs in: `source.trigger_schema`'s default.
const SCHEMA: &str = "tributary";

/// Where the writer's changes are captured while it writes (no pipeline runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capture {
    /// No triggers and no slot.
    Plain,
    /// A logical slot on the publication of the benchmark's tables.
    Slot,
    /// Trigger capture installed; the journal fills.
    Triggers,
}

impl Capture {
    const ALL: [Capture; 3] = [Capture::Plain, Capture::Slot, Capture::Triggers];

    fn name(self) -> &'static str {
        match self {
            Capture::Plain => "no capture",
            Capture::Slot => "slot (WAL mode)",
            Capture::Triggers => "triggers (trigger mode)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Capture::Plain => "plain",
            Capture::Slot => "slot",
            Capture::Triggers => "triggers",
        }
    }
}

/// The workloads written in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The `inserts` scenario's workload.
    Inserts,
    /// The `small-txns` scenario's workload.
    SmallTxns,
    /// The `updates` scenario's workload.
    Updates,
    /// One `UPDATE` of every row of a preloaded table.
    BigUpdate,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::Inserts,
        Kind::SmallTxns,
        Kind::Updates,
        Kind::BigUpdate,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Inserts => "inserts",
            Kind::SmallTxns => "small-txns",
            Kind::Updates => "updates",
            Kind::BigUpdate => "big-update",
        }
    }

    /// Sized: the throughput scenarios' own workloads, and for the big update 1M rows
    /// (--quick 100k).
    fn workload(self, quick: bool, scale: f64) -> Workload {
        match self {
            Kind::Inserts => Workload::new(Scenario::Inserts, quick, scale),
            Kind::SmallTxns => Workload::new(Scenario::SmallTxns, quick, scale),
            Kind::Updates => Workload::new(Scenario::Updates, quick, scale),
            Kind::BigUpdate => {
                let full = if quick { 100_000 } else { 1_000_000 };
                let rows = ((full as f64 * scale).round() as u64).max(1);
                Workload {
                    scenario: Scenario::Triggers,
                    changes: rows,
                    transactions: 1,
                    preload: rows,
                    description: format!(
                        "one UPDATE of {rows} rows (amount + 1) in one statement, on {rows} preloaded rows"
                    ),
                }
            }
        }
    }
}

/// One write of a workload in one state.
#[derive(Debug, Clone, Serialize)]
pub struct Write {
    /// Wall time of the writer's statements (the marker excluded).
    pub seconds: f64,
    /// WAL from before the first statement to before the marker.
    pub wal_bytes: u64,
    /// The journal once the writer is done (trigger mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<Journal>,
    /// WAL the slot holds back once the writer is done, from its `restart_lsn` (WAL mode
    /// only): what a stopped pipeline costs the source in this mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retained_wal_bytes: Option<u64>,
}

/// The journal's size and rows, the marker's included.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Journal {
    /// `pg_total_relation_size` of the journal table.
    pub bytes: u64,
    pub rows: u64,
}

/// One workload's writes: per state, per run, the measurement or why it failed.
#[derive(Debug, Clone, Serialize)]
pub struct KindResult {
    pub kind: Kind,
    pub workload: Workload,
    pub plain: Vec<Result<Write, String>>,
    pub slot: Vec<Result<Write, String>>,
    pub triggers: Vec<Result<Write, String>>,
}

impl KindResult {
    fn runs(&self, capture: Capture) -> &Vec<Result<Write, String>> {
        match capture {
            Capture::Plain => &self.plain,
            Capture::Slot => &self.slot,
            Capture::Triggers => &self.triggers,
        }
    }

    fn runs_mut(&mut self, capture: Capture) -> &mut Vec<Result<Write, String>> {
        match capture {
            Capture::Plain => &mut self.plain,
            Capture::Slot => &mut self.slot,
            Capture::Triggers => &mut self.triggers,
        }
    }

    /// Per-run ratios `f(a) / f(b)` over the runs where both succeeded.
    fn ratio(&self, a: Capture, b: Capture, f: fn(&Write) -> f64) -> Option<Spread> {
        let values: Vec<f64> = self
            .runs(a)
            .iter()
            .zip(self.runs(b))
            .filter_map(|(a, b)| Some(f(a.as_ref().ok()?) / f(b.as_ref().ok()?)))
            .collect();
        Spread::of(&values)
    }
}

/// A pipeline draining the inserts' backlog.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    /// `walsender_cpu_seconds` is the CPU of the server process it read through: the slot's
    /// walsender, or the backend of the connection reading the journal.
    #[serde(flatten)]
    pub measured: Measured,
    /// WAL written from its start until it stopped: in trigger mode, the journal rows that
    /// landed deleted and the ticks recorded.
    pub wal_bytes: u64,
    /// Journal rows left once it stopped (trigger mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_rows_left: Option<u64>,
}

/// The scenario's runs.
#[derive(Debug, Clone, Serialize)]
pub struct TriggersResult {
    pub kinds: Vec<KindResult>,
    /// Changes of the inserts workload each drain lands.
    pub drain_changes: u64,
    pub slot_drains: Vec<Result<Drain, String>>,
    pub trigger_drains: Vec<Result<Drain, String>>,
}

/// A write, and the drain of what it left when the state has one drained.
type Written = (Write, Option<Result<Drain, String>>);

impl Bench {
    pub(crate) async fn triggers(&self) -> anyhow::Result<TriggersResult> {
        let (quick, scale) = (self.args.quick, self.args.scale);
        let mut result = TriggersResult {
            kinds: Kind::ALL
                .iter()
                .map(|&kind| KindResult {
                    kind,
                    workload: kind.workload(quick, scale),
                    plain: Vec::new(),
                    slot: Vec::new(),
                    triggers: Vec::new(),
                })
                .collect(),
            drain_changes: Kind::Inserts.workload(quick, scale).changes,
            slot_drains: Vec::new(),
            trigger_drains: Vec::new(),
        };
        eprintln!(
            "==> triggers: each workload with no capture, a slot, and trigger capture; the \
             inserts' backlog drained from the slot and from the journal"
        );
        for run in 0..self.runs() {
            for k in 0..result.kinds.len() {
                let (kind, workload) = (result.kinds[k].kind, result.kinds[k].workload.clone());
                // The states take turns at going first, so none always follows another's
                // WAL and autovacuum.
                let mut order = Capture::ALL;
                order.rotate_left(run % Capture::ALL.len());
                for capture in order {
                    let label = format!(
                        "bench_triggers_{}_{}_{run}",
                        kind.name().replace('-', "_"),
                        capture.short()
                    );
                    let drain = kind == Kind::Inserts && capture != Capture::Plain;
                    let written = self.write_in(&workload, capture, &label, drain).await;
                    match &written {
                        Ok((w, _)) => eprintln!(
                            "    run {}: {}, {}: {:.2} s, {} rows/s, {:.0} MB of WAL{}",
                            run + 1,
                            kind.name(),
                            capture.name(),
                            w.seconds,
                            rate(workload.changes as f64 / w.seconds),
                            w.wal_bytes as f64 / 1e6,
                            w.journal.map_or(String::new(), |j| format!(
                                "; journal {} rows, {:.0} MB",
                                j.rows,
                                j.bytes as f64 / 1e6
                            ))
                        ),
                        Err(e) => eprintln!(
                            "    run {}: {}, {}: failed: {e:#}",
                            run + 1,
                            kind.name(),
                            capture.name()
                        ),
                    }
                    let (write, drained) = match written {
                        Ok((w, d)) => (Ok(w), d),
                        Err(e) => {
                            let e = format!("{e:#}");
                            (Err(e.clone()), drain.then_some(Err(e)))
                        }
                    };
                    result.kinds[k].runs_mut(capture).push(write);
                    if let Some(drained) = drained {
                        match &drained {
                            Ok(d) => eprintln!(
                                "    run {}: drain from the {}: {:.2} s, {} rows/s, {:.0} MiB peak",
                                run + 1,
                                capture.short(),
                                d.measured.consumer.seconds,
                                rate(result.drain_changes as f64 / d.measured.consumer.seconds),
                                d.measured.consumer.max_rss_kib as f64 / 1024.0
                            ),
                            Err(e) => eprintln!(
                                "    run {}: drain from the {}: failed: {e}",
                                run + 1,
                                capture.short()
                            ),
                        }
                        match capture {
                            Capture::Slot => result.slot_drains.push(drained),
                            _ => result.trigger_drains.push(drained),
                        }
                    }
                }
            }
        }
        self.remove_capture().await?;
        Ok(result)
    }

    /// Writes `workload` in state `capture` (named `label`: the slot, the sink directory), and
    /// with `drain` lets the pipeline drain what it left; whatever happens, the slot is
    /// dropped and the sink removed afterwards (the capture schema goes before the next
    /// state).
    async fn write_in(
        &self,
        workload: &Workload,
        capture: Capture,
        label: &str,
        drain: bool,
    ) -> anyhow::Result<Written> {
        let mut cleanup: Option<PathBuf> = None;
        let written = self
            .write_and_drain(workload, capture, label, drain, &mut cleanup)
            .await;
        if capture == Capture::Slot {
            let exists = self
                .client
                .query_opt(
                    "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                    &[&label],
                )
                .await?
                .is_some();
            if exists {
                self.drop_slot(label).await?;
            }
        }
        if let Some(dir) = cleanup {
            let _ = std::fs::remove_dir_all(dir);
        }
        written
    }

    async fn write_and_drain(
        &self,
        workload: &Workload,
        capture: Capture,
        label: &str,
        drain: bool,
        cleanup: &mut Option<PathBuf>,
    ) -> anyhow::Result<Written> {
        // No triggers of an earlier state may fire on the emptying or the preload.
        self.remove_capture().await?;
        workload::prepare(&self.client, workload).await?;
        let mut config = None;
        match capture {
            Capture::Plain => {}
            Capture::Slot => {
                self.create_slot(label).await?;
                if drain {
                    let (file, dir) = self
                        .pipeline_config(label, None, Lake::default(), label, None)
                        .await?;
                    *cleanup = Some(dir);
                    config = Some(file);
                }
            }
            Capture::Triggers => {
                let (file, dir) = self.trigger_pipeline_config(label).await?;
                *cleanup = Some(dir);
                // The first start installs capture and stops as soon as it streams; the lake
                // it opened is where the drain resumes.
                let args = ["__pipeline".to_owned(), file.display().to_string()];
                consume::measure_child_serving(
                    self.client.clone(),
                    Served::Journal(SCHEMA.to_owned()),
                    &args,
                    None,
                    &[],
                )
                .await
                .context("the trigger-mode pipeline's first start, which installs capture")?;
                let triggered = install::triggered_tables(&self.client, SCHEMA).await?;
                if triggered.len() != workload::TABLES.len() {
                    bail!(
                        "trigger capture is installed on {} tables, expected {}",
                        triggered.len(),
                        workload::TABLES.len()
                    );
                }
                config = Some(file);
            }
        }
        self.client.batch_execute("CHECKPOINT").await?;
        let generated = generate(&self.client, workload).await?;
        let journal = match capture {
            Capture::Triggers => Some(self.journal().await?),
            _ => None,
        };
        let retained_wal_bytes = match capture {
            Capture::Slot => Some(self.retained(label).await?),
            _ => None,
        };
        let write = Write {
            seconds: generated.seconds,
            wal_bytes: generated.wal_bytes(),
            journal,
            retained_wal_bytes,
        };
        let drained = match (drain, config) {
            (true, Some(config)) => Some(
                self.drain(capture, label, &config, workload, generated.marker)
                    .await
                    .map_err(|e| format!("{e:#}")),
            ),
            _ => None,
        };
        Ok((write, drained))
    }

    /// The pipeline with no transform drains the backlog `capture` left of `workload`.
    async fn drain(
        &self,
        capture: Capture,
        slot: &str,
        config: &std::path::Path,
        workload: &Workload,
        marker: Lsn,
    ) -> anyhow::Result<Drain> {
        self.client.batch_execute("CHECKPOINT").await?;
        // A slot's pipeline stops at the marker's commit or once the workload's changes
        // landed; the journal's positions are its own (1, 2, 3, ...), so the trigger-mode
        // pipeline stops on the changes alone.
        let (until, served) = match capture {
            Capture::Slot => (marker, Served::Slot(slot.to_owned())),
            _ => (Lsn(u64::MAX), Served::Journal(SCHEMA.to_owned())),
        };
        let args = [
            "__pipeline".to_owned(),
            config.display().to_string(),
            until.to_string(),
            workload.changes.to_string(),
        ];
        let wal_start = workload::current_lsn(&self.client).await?;
        let measured = consume::measure_child_serving(
            self.client.clone(),
            served,
            &args,
            self.args.perf.as_deref(),
            &[],
        )
        .await?;
        let wal_end = workload::current_lsn(&self.client).await?;
        // The marker transaction may land with the last of the workload.
        let landed = measured.consumer.changes;
        if landed != workload.changes && landed != workload.changes + 1 {
            bail!("landed {landed} changes, expected {}", workload.changes);
        }
        let journal_rows_left = match capture {
            Capture::Triggers => Some(self.journal().await?.rows),
            _ => None,
        };
        Ok(Drain {
            measured,
            wal_bytes: wal_end.0.saturating_sub(wal_start.0),
            journal_rows_left,
        })
    }

    /// A trigger-mode pipeline file: the harness's pipeline (no transform, local directory,
    /// the same flush settings) capturing through triggers in [`SCHEMA`], from the tail.
    async fn trigger_pipeline_config(&self, label: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let (config, cleanup) = self
            .pipeline_config(label, None, Lake::default(), label, None)
            .await?;
        let text = std::fs::read_to_string(&config)?;
        let head = "start_from = \"head\"\n";
        if !text.contains(head) {
            bail!("the pipeline file has no {head:?} to replace");
        }
        let text = text.replace(
            head,
            &format!("start_from = \"tail\"\ncapture = \"trigger\"\ntrigger_schema = {SCHEMA:?}\n"),
        );
        std::fs::write(&config, text)?;
        Ok((config, cleanup))
    }

    /// The journal's total size and rows now.
    async fn journal(&self) -> anyhow::Result<Journal> {
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT pg_total_relation_size('{SCHEMA}.journal'::regclass), count(*) FROM {SCHEMA}.journal"
                ),
                &[],
            )
            .await
            .context("measuring the journal")?;
        Ok(Journal {
            bytes: row.get::<_, i64>(0) as u64,
            rows: row.get::<_, i64>(1) as u64,
        })
    }

    /// The WAL slot `slot` holds back now.
    async fn retained(&self, slot: &str) -> anyhow::Result<u64> {
        let row = self
            .client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
                   FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .context("measuring the WAL the slot holds")?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// Removes trigger capture (what `tributary teardown` drops): the triggers, and the schema
    /// with its journal and functions. Nothing when it is not installed.
    async fn remove_capture(&self) -> anyhow::Result<()> {
        let mut client = crate::connect(&self.cluster.url("bench")).await?;
        install::remove(&mut client, SCHEMA)
            .await
            .context("removing trigger capture")?;
        Ok(())
    }
}

/// Writes `workload` and the marker transaction: the throughput scenarios' writers, and for
/// the big update its one statement.
async fn generate(
    client: &tokio_postgres::Client,
    workload: &Workload,
) -> anyhow::Result<Generated> {
    if workload.scenario != Scenario::Triggers {
        return workload::generate(client, workload).await;
    }
    let wal_start = workload::current_lsn(client).await?;
    let started = Instant::now();
    let updated = client
        .execute("UPDATE bench_rows SET amount = amount + 1", &[])
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    if updated != workload.changes {
        bail!(
            "the update changed {updated} rows, expected {}",
            workload.changes
        );
    }
    let marker = workload::write_marker(client).await?;
    Ok(Generated {
        wal_start,
        marker,
        seconds,
    })
}

/// The slot's consumer and the journal's, as printed.
const SLOT_DRAIN: &str = "tributary none → file, slot";
const TRIGGER_DRAIN: &str = "tributary none → file, triggers";

impl TriggersResult {
    pub fn failures(&self) -> usize {
        let writes = self
            .kinds
            .iter()
            .flat_map(|k| k.plain.iter().chain(&k.slot).chain(&k.triggers))
            .filter(|r| r.is_err())
            .count();
        writes
            + self
                .slot_drains
                .iter()
                .chain(&self.trigger_drains)
                .filter(|r| r.is_err())
                .count()
    }

    pub fn print(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n== triggers: the writer's time and WAL with no capture, a slot and trigger \
             capture (no pipeline running), the journal left, and the inserts' backlog drained"
        );
        let _ = writeln!(
            out,
            "{:<26} {:<24} {:>20} {:>20} {:>16} {:>16} {:>16}",
            "workload", "capture", "seconds", "rows/s", "WAL MB", "time ratio", "WAL ratio"
        );
        let show = |values: Vec<f64>, format: fn(f64) -> String| {
            Spread::of(&values).map_or("-".into(), |s| s.show(format))
        };
        for k in &self.kinds {
            let changes = k.workload.changes as f64;
            for capture in Capture::ALL {
                let runs = k.runs(capture);
                let ok: Vec<&Write> = runs.iter().filter_map(|r| r.as_ref().ok()).collect();
                let first = match capture {
                    Capture::Plain => format!("{} ({})", k.kind.name(), k.workload.changes),
                    _ => String::new(),
                };
                if ok.is_empty() {
                    let why = runs.iter().find_map(|r| r.as_ref().err());
                    let _ = writeln!(
                        out,
                        "{first:<26} {:<24} failed: {}",
                        capture.name(),
                        why.map_or("not run", |s| s.as_str())
                    );
                    continue;
                }
                let (time_ratio, wal_ratio) = match capture {
                    Capture::Plain => ("-".to_owned(), "-".to_owned()),
                    _ => (
                        k.ratio(capture, Capture::Plain, |w| w.seconds)
                            .map_or("-".into(), |s| s.show(fixed2)),
                        k.ratio(capture, Capture::Plain, |w| w.wal_bytes as f64)
                            .map_or("-".into(), |s| s.show(fixed2)),
                    ),
                };
                let failed = runs.len() - ok.len();
                let _ = writeln!(
                    out,
                    "{first:<26} {:<24} {:>20} {:>20} {:>16} {:>16} {:>16}{}",
                    capture.name(),
                    show(ok.iter().map(|w| w.seconds).collect(), fixed2),
                    show(ok.iter().map(|w| changes / w.seconds).collect(), rate),
                    show(
                        ok.iter().map(|w| w.wal_bytes as f64 / 1e6).collect(),
                        fixed0
                    ),
                    time_ratio,
                    wal_ratio,
                    if failed == 0 {
                        String::new()
                    } else {
                        format!("  ({failed} run(s) failed)")
                    }
                );
            }
            let against_slot = [
                k.ratio(Capture::Triggers, Capture::Slot, |w| w.seconds),
                k.ratio(Capture::Triggers, Capture::Slot, |w| w.wal_bytes as f64),
            ];
            if let [Some(time), Some(wal)] = against_slot {
                let _ = writeln!(
                    out,
                    "{:<26} triggers/slot: time {}, WAL {}",
                    "",
                    time.show(fixed2),
                    wal.show(fixed2)
                );
            }
            let retained: Vec<f64> = k
                .slot
                .iter()
                .filter_map(|r| r.as_ref().ok()?.retained_wal_bytes)
                .map(|b| b as f64 / 1e6)
                .collect();
            if !retained.is_empty() {
                let _ = writeln!(
                    out,
                    "{:<26} slot while stopped: holds {} MB of WAL",
                    "",
                    show(retained, fixed0)
                );
            }
            let journals: Vec<Journal> = k
                .triggers
                .iter()
                .filter_map(|r| r.as_ref().ok()?.journal)
                .collect();
            if !journals.is_empty() {
                let _ = writeln!(
                    out,
                    "{:<26} journal while stopped: {} rows, {} MB, {} bytes per captured change",
                    "",
                    show(journals.iter().map(|j| j.rows as f64).collect(), fixed0),
                    show(
                        journals.iter().map(|j| j.bytes as f64 / 1e6).collect(),
                        fixed0
                    ),
                    show(
                        journals
                            .iter()
                            .map(|j| j.bytes as f64 / j.rows.max(1) as f64)
                            .collect(),
                        fixed0
                    )
                );
            }
        }
        let _ = writeln!(
            out,
            "seconds: the writer's statements, marker excluded; WAL: LSN before the workload to \
             before the marker; ratios: over no capture's in the same run (time: seconds, \
             higher is slower); journal: pg_total_relation_size and rows after the workload and \
             the marker, per journal row"
        );

        let _ = writeln!(
            out,
            "\ndrain of the inserts' backlog ({} changes, written for each drain)",
            self.drain_changes
        );
        let _ = writeln!(
            out,
            "{:<34} {:>18} {:>18} {:>18} {:>16} {:>14} {:>18}",
            "consumer",
            "rows/s",
            "CPU s/M rows",
            "server CPU s/M",
            "peak RSS MiB",
            "start-up s",
            "WAL MB draining"
        );
        let rows = self.drain_changes as f64;
        for (name, drains) in [
            (SLOT_DRAIN, &self.slot_drains),
            (TRIGGER_DRAIN, &self.trigger_drains),
        ] {
            let ok: Vec<&Drain> = drains.iter().filter_map(|r| r.as_ref().ok()).collect();
            if ok.is_empty() {
                let why = drains.iter().find_map(|r| r.as_ref().err());
                let _ = writeln!(
                    out,
                    "{name:<34} failed: {}",
                    why.map_or("not run", |s| s.as_str())
                );
                continue;
            }
            let col = |f: &dyn Fn(&Drain) -> f64, format: fn(f64) -> String| {
                show(ok.iter().map(|d| f(d)).collect(), format)
            };
            let _ = writeln!(
                out,
                "{:<34} {:>18} {:>18} {:>18} {:>16} {:>14} {:>18}",
                name,
                col(&|d| rows / d.measured.consumer.seconds, rate),
                col(&|d| d.measured.consumer.cpu_seconds / rows * 1e6, fixed2),
                col(&|d| d.measured.walsender_cpu_seconds / rows * 1e6, fixed2),
                col(&|d| d.measured.consumer.max_rss_kib as f64 / 1024.0, fixed0),
                col(&|d| d.measured.consumer.startup_seconds, fixed2),
                col(&|d| d.wal_bytes as f64 / 1e6, fixed0),
            );
        }
        let ratios: Vec<f64> = self
            .trigger_drains
            .iter()
            .zip(&self.slot_drains)
            .filter_map(|(t, s)| {
                Some(
                    s.as_ref().ok()?.measured.consumer.seconds
                        / t.as_ref().ok()?.measured.consumer.seconds,
                )
            })
            .collect();
        if let Some(ratio) = Spread::of(&ratios) {
            let _ = writeln!(out, "ratio of rows/s: triggers/slot {}", ratio.show(fixed2));
        }
        let left: Vec<String> = self
            .trigger_drains
            .iter()
            .filter_map(|d| d.as_ref().ok()?.journal_rows_left)
            .map(|n| n.to_string())
            .collect();
        if !left.is_empty() {
            let _ = writeln!(
                out,
                "journal rows left once the trigger-mode pipeline stopped, per run: {}",
                left.join(", ")
            );
        }
        let _ = writeln!(
            out,
            "both are {NONE_FILE} (local directory, the harness's flush settings), timed from \
             the first read to the commit entry holding the last change; server CPU: the slot's \
             walsender, or the backend of the connection reading the journal; WAL while draining: \
             from the start until the pipeline stopped (the journal's rows deleted once landed)"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workloads_are_the_throughput_scenarios_and_a_one_statement_update() {
        let sizes = |quick| -> Vec<(u64, u64)> {
            Kind::ALL
                .iter()
                .map(|k| {
                    let w = k.workload(quick, 1.0);
                    (w.changes, w.transactions)
                })
                .collect()
        };
        assert_eq!(
            sizes(false),
            [
                (1_000_000, 100),
                (300_000, 300_000),
                (500_000, 1_000),
                (1_000_000, 1)
            ]
        );
        assert_eq!(
            sizes(true),
            [
                (100_000, 100),
                (20_000, 20_000),
                (50_000, 100),
                (100_000, 1)
            ]
        );
        let update = Kind::BigUpdate.workload(false, 1.0);
        assert_eq!(update.preload, update.changes);
        // Run only when named.
        assert!(!Scenario::THROUGHPUT.contains(&Scenario::Triggers));
    }
}
