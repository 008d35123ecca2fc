//! `tributary status`: the positions an operator must see, side by side.
//!
//! The server's current WAL position, the slot's `restart_lsn` (what the server keeps) and
//! `confirmed_flush_lsn` (what the slot believes is done), and the sink's latest commit entry
//! (what is durable in the lake). The entry is never behind `confirmed_flush_lsn`.

use serde::Serialize;

use crate::Lsn;
use crate::config::{CaptureMode, PipelineConfig};
use crate::lake::commit::utc_text;
use crate::lake::commit::{CommitError, CommitLog, Writer};
use crate::lake::sink::{Sink, SinkError};
use crate::lake::tables::{TableSet, app_id};
use crate::source::failover::{self, StandbyCopy};
use crate::source::provision::{self, ProvisionError, SlotHolder, SlotState};
use crate::source::trigger::capture;
use crate::units::human_bytes;
use tokio_postgres::Client;

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] CommitError),
}

#[derive(Debug, Clone, Serialize)]
pub struct SlotStatus {
    pub name: String,
    pub exists: bool,
    pub active_pid: Option<i32>,
    /// Who reads it now: application_name, client address and walsender pid.
    pub holder: Option<String>,
    pub restart_lsn: Option<Lsn>,
    pub confirmed_flush_lsn: Option<Lsn>,
    /// WAL the server keeps for this slot: current WAL position minus `restart_lsn`.
    pub retained_wal_bytes: Option<u64>,
    /// Current WAL position minus `confirmed_flush_lsn`.
    pub lag_bytes: Option<u64>,
    pub wal_status: Option<String>,
    pub safe_wal_size: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SinkStatus {
    pub url: String,
    pub last_sequence: Option<u64>,
    pub last_commit_lsn: Option<Lsn>,
    pub last_end_lsn: Option<Lsn>,
    /// Microseconds since the Unix epoch.
    pub last_committed_at: Option<i64>,
    /// The instance that wrote the latest entry: the pipeline's current writer.
    pub writer: Option<Writer>,
    /// Whether that writer runs now: it holds the slot (`true`), nothing holds the slot
    /// (`false`), or another client does (unknown, `None`: it may be this writer under an
    /// application_name of the source URL's own).
    pub writer_running: Option<bool>,
    /// Changes plugins rejected that landed in the dead-letter output, in all.
    pub dead_letters: u64,
    /// A full load (or resync) under way, as of the latest entry.
    pub load: Option<crate::stream::load::LoadState>,
    /// With tables (`sink.format = "delta"`): each table of the sink.
    pub tables: Vec<TableStatus>,
}

/// One output's Delta table.
#[derive(Debug, Clone, Serialize)]
pub struct TableStatus {
    pub output: String,
    /// The table's latest version.
    pub version: Option<u64>,
    /// The latest commit entry the table holds (its `txn` version for this pipeline).
    pub sequence: Option<u64>,
    /// Data files a reader of the latest version reads.
    pub files: usize,
}

/// Trigger capture's journal, for a lake captured by triggers.
#[derive(Debug, Clone, Serialize)]
pub struct JournalStatus {
    pub schema: String,
    /// Rows not yet landed (or landed and not yet deleted); `None` when there is no journal.
    pub rows: Option<i64>,
    /// The journal's size on disk, indexes and TOAST included.
    pub bytes: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub current_wal_lsn: Lsn,
    /// The slot; `None` with trigger capture, which reads none.
    pub slot: Option<SlotStatus>,
    pub sink: SinkStatus,
    /// With trigger capture: its journal (the slot is then not looked at).
    pub journal: Option<JournalStatus>,
    /// With `source.failover` and a slot: whether a promotion of the standby keeps the slot.
    pub failover: Option<FailoverStatus>,
}

/// Failover readiness: what the standby of `source.standby_url` holds of the slot.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverStatus {
    /// A promotion of the standby now keeps the slot, and the pipeline goes on from it.
    pub ready: bool,
    pub standby_copy: StandbyCopy,
}

pub async fn collect(config: &PipelineConfig) -> Result<Status, StatusError> {
    let client =
        crate::source::connect::sql(&crate::source::connect::parse_url(&config.source.url)?)
            .await?;
    let current = provision::current_wal_lsn(&client).await?;
    let sink = Sink::open(&config.sink.url, &config.sink.options)?;
    let log = CommitLog::new(sink.clone(), Writer::named("status"));
    let latest = log.latest().await?;
    // The lake names its source: a slot, or a trigger journal; before it has landed anything,
    // the pipeline file does.
    let source = log
        .identity()
        .await?
        .map(|i| i.slot)
        .or_else(|| latest.as_ref().map(|e| e.slot.clone()))
        .unwrap_or_else(|| configured_source(config));
    let (slot, journal, holder) = match crate::lake::commit::journal_schema(&source) {
        Some(schema) => {
            let holder = capture::reader(&client, schema).await?;
            (None, Some(journal_status(&client, schema).await?), holder)
        }
        None => {
            let state = provision::slot_state(&client, &source).await?;
            let holder = state.as_ref().and_then(|s| s.holder.clone());
            (Some(slot_status(&source, state, current)), None, holder)
        }
    };
    let failover = match &slot {
        Some(slot) if config.source.failover => {
            let copy = StandbyCopy::judge(
                failover::ask_standby(&config.source, &slot.name)
                    .await
                    .as_ref(),
            );
            Some(FailoverStatus {
                ready: copy.ready(),
                standby_copy: copy,
            })
        }
        _ => None,
    };
    let mut tables = Vec::new();
    let database = provision::current_database(&client).await?;
    if let Some(set) = TableSet::open(
        config.sink.format,
        &sink,
        Some(app_id(&database, &source)),
        config.sink.catalog(),
    ) {
        for output in set.names().await? {
            let table = set.latest(&output).await?;
            tables.push(TableStatus {
                sequence: table.holds,
                version: table.version,
                files: table.files.len(),
                output,
            });
        }
    }
    let sink = SinkStatus {
        url: config.sink.url.clone(),
        last_sequence: latest.as_ref().map(|e| e.sequence),
        last_commit_lsn: latest.as_ref().map(|e| e.last_commit_lsn),
        last_end_lsn: latest.as_ref().map(|e| e.last_end_lsn),
        last_committed_at: latest.as_ref().map(|e| e.committed_at),
        writer: latest.as_ref().map(|e| e.writer.clone()),
        writer_running: latest
            .as_ref()
            .and_then(|e| writer_running(&e.writer, holder.as_ref())),
        dead_letters: latest.as_ref().map_or(0, |e| e.dead_letters),
        load: latest.as_ref().and_then(|e| e.load.clone()),
        tables,
    };
    Ok(Status {
        current_wal_lsn: current,
        slot,
        sink,
        journal,
        failover,
    })
}

/// What the pipeline file says the lake's source is: the slot, or with trigger capture the
/// journal (named as the lake names it).
fn configured_source(config: &PipelineConfig) -> String {
    match config.source.capture {
        CaptureMode::Trigger => crate::lake::commit::journal_name(&config.source.trigger_schema),
        CaptureMode::Wal | CaptureMode::Auto => config.source.slot.clone(),
    }
}

/// Slot `name` as the server has it (`state`, `None` when it does not exist), with the server
/// at `current`.
fn slot_status(name: &str, state: Option<SlotState>, current: Lsn) -> SlotStatus {
    let behind = |lsn: Option<Lsn>| lsn.map(|l| current.0.saturating_sub(l.0));
    let slot = state.as_ref();
    SlotStatus {
        name: name.to_owned(),
        exists: slot.is_some(),
        active_pid: slot.and_then(|s| s.active_pid()),
        holder: slot.and_then(|s| s.holder.as_ref()).map(|h| h.to_string()),
        restart_lsn: slot.and_then(|s| s.restart_lsn),
        confirmed_flush_lsn: slot.and_then(|s| s.confirmed_flush_lsn),
        retained_wal_bytes: behind(slot.and_then(|s| s.restart_lsn)),
        lag_bytes: behind(slot.and_then(|s| s.confirmed_flush_lsn)),
        wal_status: slot.and_then(|s| s.wal_status.clone()),
        safe_wal_size: slot.and_then(|s| s.safe_wal_size),
    }
}

/// The journal of `schema`: its rows and size.
async fn journal_status(client: &Client, schema: &str) -> Result<JournalStatus, StatusError> {
    let size = crate::source::trigger::capture::size(client, schema).await?;
    Ok(JournalStatus {
        schema: schema.to_owned(),
        rows: size.map(|s| s.rows),
        bytes: size.map(|s| s.bytes),
    })
}

/// Whether `writer` runs now, as the slot's holder tells: a start names its connections
/// `tributary <writer id>` unless the source URL names them otherwise.
fn writer_running(writer: &Writer, holder: Option<&SlotHolder>) -> Option<bool> {
    let Some(holder) = holder else {
        return Some(false);
    };
    let ours = format!("tributary {}", writer.id);
    match holder.application_name.as_deref() {
        Some(name) if name == ours => Some(true),
        _ => None,
    }
}

/// The slot's lines: who holds it, and its positions against the server's.
fn slot_lines(f: &mut std::fmt::Formatter<'_>, s: &SlotStatus) -> std::fmt::Result {
    let lsn = |l: Option<Lsn>| l.map_or_else(|| "-".to_owned(), |l| l.to_string());
    let size = |b: Option<u64>| b.map_or_else(|| "?".to_owned(), human_bytes);
    if !s.exists {
        return writeln!(f, "slot {:?}: does not exist", s.name);
    }
    let active = s
        .active_pid
        .map_or_else(|| "inactive".to_owned(), |p| format!("active, pid {p}"));
    let active = match &s.holder {
        Some(holder) => format!("active, held by {holder}"),
        None => active,
    };
    writeln!(f, "slot {:?}: {active}", s.name)?;
    writeln!(
        f,
        "  confirmed_flush   {}, {} behind",
        lsn(s.confirmed_flush_lsn),
        size(s.lag_bytes)
    )?;
    writeln!(
        f,
        "  restart_lsn       {}, {} of WAL retained",
        lsn(s.restart_lsn),
        size(s.retained_wal_bytes)
    )?;
    let safe = s
        .safe_wal_size
        .map_or_else(|| "unlimited".to_owned(), |b| human_bytes(b.max(0) as u64));
    writeln!(
        f,
        "  wal_status        {} (safe_wal_size {safe})",
        s.wal_status.as_deref().unwrap_or("-")
    )?;
    Ok(())
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lsn = |l: Option<Lsn>| l.map_or_else(|| "-".to_owned(), |l| l.to_string());
        // With trigger capture a position is a journal's transaction number, not a WAL one.
        let position = |l: Option<Lsn>| match (&self.journal, l) {
            (Some(_), Some(l)) => format!("position {}", l.0),
            _ => lsn(l),
        };
        if let Some(journal) = &self.journal {
            match (journal.rows, journal.bytes) {
                (Some(rows), Some(bytes)) => writeln!(
                    f,
                    "trigger journal {:?}: {rows} rows, {}",
                    journal.schema,
                    human_bytes(bytes.max(0) as u64)
                )?,
                _ => writeln!(f, "trigger journal {:?}: not installed", journal.schema)?,
            }
        }
        if let Some(s) = &self.slot {
            writeln!(f, "current WAL         {}", self.current_wal_lsn)?;
            slot_lines(f, s)?;
            if let Some(failover) = &self.failover {
                writeln!(f, "  {}", failover.standby_copy.describe(&s.name))?;
            }
        }
        writeln!(f, "sink {}", self.sink.url)?;
        match self.sink.last_sequence {
            None => writeln!(f, "  nothing committed yet"),
            Some(n) => {
                writeln!(
                    f,
                    "  last commit       #{n}: transactions up to {} (confirmable {})",
                    position(self.sink.last_commit_lsn),
                    position(self.sink.last_end_lsn)
                )?;
                if let Some(w) = &self.sink.writer {
                    writeln!(f, "  written by        {w}")?;
                    let last = self
                        .sink
                        .last_committed_at
                        .map(|at| format!(", last seen {}", utc_text(at)))
                        .unwrap_or_default();
                    let source = match self.journal {
                        Some(_) => "the journal",
                        None => "the slot",
                    };
                    match self.sink.writer_running {
                        Some(true) => {
                            writeln!(f, "  writer            running (it holds {source})")?
                        }
                        Some(false) => writeln!(
                            f,
                            "  writer            stopped (nothing holds {source}){last}"
                        )?,
                        None => writeln!(
                            f,
                            "  writer            not known to run: another client holds {source}{last}"
                        )?,
                    }
                }
                if let Some(load) = &self.sink.load {
                    let what = if load.resync { "resync" } else { "full load" };
                    writeln!(f, "  {what:<17} under way")?;
                    for t in &load.tables {
                        let state = match t.chunks {
                            None => "to load".to_owned(),
                            Some(n) if n == t.done => format!("loaded, {} rows", t.rows),
                            Some(n) => format!("{}/{n} chunks landed, {} rows", t.done, t.rows),
                        };
                        writeln!(
                            f,
                            "    {:<15} {state} (snapshot {})",
                            t.table, t.snapshot_lsn
                        )?;
                    }
                }
                if !self.sink.tables.is_empty() {
                    writeln!(f, "  Delta tables")?;
                }
                for t in &self.sink.tables {
                    let version = t.version.map_or_else(|| "-".to_owned(), |v| v.to_string());
                    let holds = t.sequence.map_or_else(
                        || "no commit entry".to_owned(),
                        |s| format!("entries up to #{s}"),
                    );
                    writeln!(
                        f,
                        "    {:<15} version {version}, {holds}, {} files",
                        t.output, t.files
                    )?;
                }
                match self.sink.dead_letters {
                    0 => Ok(()),
                    n => writeln!(
                        f,
                        "  dead letters      {n} rejected changes in {}/",
                        crate::transform::DEAD_LETTERS
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(name: &str) -> SlotHolder {
        SlotHolder {
            pid: 42,
            application_name: Some(name.into()),
            client: Some("10.0.0.5:51234".into()),
            local: false,
        }
    }

    fn status(writer_running: Option<bool>) -> Status {
        Status {
            current_wal_lsn: Lsn(0x30),
            journal: None,
            failover: None,
            slot: Some(SlotStatus {
                name: "shop".into(),
                exists: true,
                active_pid: None,
                holder: None,
                restart_lsn: Some(Lsn(0x10)),
                confirmed_flush_lsn: Some(Lsn(0x20)),
                retained_wal_bytes: Some(0x20),
                lag_bytes: Some(0x10),
                wal_status: Some("reserved".into()),
                safe_wal_size: None,
            }),
            sink: SinkStatus {
                url: "s3://lake/shop".into(),
                last_sequence: Some(3),
                last_commit_lsn: Some(Lsn(0x18)),
                last_end_lsn: Some(Lsn(0x20)),
                last_committed_at: Some(1_764_578_472_000_000),
                writer: Some(Writer {
                    id: "00ff".into(),
                    host: "db-7".into(),
                    pid: 7,
                    started_at: 1_764_578_412_000_000,
                }),
                writer_running,
                dead_letters: 0,
                load: None,
                tables: Vec::new(),
            },
        }
    }

    #[test]
    fn with_trigger_capture_the_journal_and_its_positions_are_shown_and_no_slot() {
        let mut status = status(Some(true));
        status.slot = None;
        status.journal = Some(JournalStatus {
            schema: "tributary".into(),
            rows: Some(3),
            bytes: Some(8192),
        });
        let text = status.to_string();
        assert!(
            text.starts_with(
                "trigger journal \"tributary\": 3 rows, 8.0 KiB\nsink s3://lake/shop\n"
            ) && text.contains(
                "  last commit       #3: transactions up to position 24 (confirmable position 32)\n"
            ) && text.contains("  writer            running (it holds the journal)\n"),
            "{text}"
        );
        assert!(!text.contains("slot") && !text.contains("WAL"), "{text}");
    }

    #[test]
    fn a_writer_runs_while_it_holds_the_slot() {
        let writer = Writer::named("00ff");
        assert_eq!(
            writer_running(&writer, Some(&holder("tributary 00ff"))),
            Some(true)
        );
        assert_eq!(writer_running(&writer, None), Some(false));
        assert_eq!(writer_running(&writer, Some(&holder("psql"))), None);
    }

    #[test]
    fn a_stopped_writer_is_said_to_have_stopped_not_to_run() {
        let text = status(Some(false)).to_string();
        assert!(
            text.contains(
                "  written by        writer 00ff on host db-7, pid 7, started 2025-12-01 08:40:12 UTC\n\
                 \x20 writer            stopped (nothing holds the slot), last seen 2025-12-01 08:41:12 UTC\n"
            ),
            "{text}"
        );
        assert!(!text.contains("running"), "{text}");
        let text = status(Some(true)).to_string();
        assert!(
            text.contains("  writer            running (it holds the slot)\n"),
            "{text}"
        );
    }

    #[test]
    fn with_failover_the_slot_says_whether_a_promotion_keeps_it() {
        let mut status = status(Some(true));
        let text = status.to_string();
        assert!(!text.contains("failover"), "{text}");
        status.failover = Some(FailoverStatus {
            ready: false,
            standby_copy: StandbyCopy::Temporary,
        });
        let text = status.to_string();
        let line = format!(
            "  wal_status        reserved (safe_wal_size unlimited)\n  {}\nsink ",
            StandbyCopy::Temporary.describe("shop")
        );
        assert!(text.contains(&line), "{text}");
        assert!(
            text.contains("a failover now would lose the slot"),
            "{text}"
        );
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json["failover"],
            serde_json::json!({"ready": false, "standby_copy": "temporary"})
        );
    }
}
