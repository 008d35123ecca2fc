//! The preflight: everything a start would refuse, found without changing anything, in one
//! report. `tributary check` prints it; `tributary run` makes it first and refuses with the
//! whole list, so the two never disagree and a problem found early does not hide the later
//! checks that do not depend on it.
//!
//! The source's prerequisites come first ([`crate::source::prerequisites`]: settings, role,
//! tables, their identities and current-state keys, publication, slot, capture mode); then the
//! connections (the replication connection is tried whatever else failed, unless the role
//! cannot replicate); then the plugins, loaded and initialized by the same
//! [`TransformChain::load`] a start uses, so a missing file, a file that is no usable
//! transform and a plugin whose `init` refuses its settings fail here in the words the start
//! refuses with; then the sink: the URL, the commit log read, and whether the sink belongs to
//! another pipeline (compared by the server's system identifier, read over SQL when the
//! replication connection failed); then the server's timeline against the lake's
//! ([`judge_timeline`], which the start calls too): another one is refused unless it is a
//! promotion the pipeline follows by itself or `--accept-gap` names the move; last, where a
//! run would start: a first run, with an empty commit log, has `source.start_from` judged as
//! the start judges it; a later run resumes from the log, and a slot or a trigger journal that
//! would leave a gap is refused unless `--accept-gap` names it. The start's own steps judge the
//! same facts again as they act on them, which catches what changed in between (another
//! instance, a slot dropped meanwhile).

use tokio_postgres::Client;

use super::error::PipelineError;
use super::messages::Shutdown;
use super::position;
use super::reconnect::switch_point;
use super::{RunOptions, load_transforms};
use crate::Lsn;
use crate::config::{PipelineConfig, SourceConfig, StartFrom};
use crate::lake::commit::PluginRecord;
use crate::lake::commit::{
    Checkpoint, CommitEntry, CommitError, CommitLog, FORMAT, PipelineIdentity, StartedFrom,
    TimelineMove, Writer, journal_name,
};
use crate::lake::sink::Sink;
use crate::source::connect;
use crate::source::connect::{PgConfig, SslMode};
use crate::source::prerequisites::{self, Capture, Choice, Refusal, Report};
use crate::source::provision::{self, ProvisionError, SlotState};
use crate::source::replication::{ReplicationConnection, SystemIdentity};
use crate::source::trigger::{capture, install};
use crate::transform::TransformChain;

/// What the preflight is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose<'a> {
    /// `tributary check`: a sink that cannot be read now is a problem. `accept_gap` (from
    /// `check --accept-gap`) judges the start as `run --accept-gap` with the same text would.
    Check { accept_gap: Option<&'a str> },
    /// A start: a sink unreachable for now is waited for by the start, and `accept_gap` (from
    /// `--accept-gap`) accepts the gap it names.
    Run { accept_gap: Option<&'a str> },
}

impl<'a> Purpose<'a> {
    fn accept_gap(self) -> Option<&'a str> {
        match self {
            Purpose::Check { accept_gap } | Purpose::Run { accept_gap } => accept_gap,
        }
    }
}

/// The source server as the preflight met it: its system identifier and timeline, and with a
/// slot the replication connection that asks its timeline history (`None` when that
/// connection failed, said in the report).
struct Server {
    system_id: String,
    timeline: u32,
    replication: Option<ReplicationConnection>,
}

/// The whole preflight: a report of every finding, or why it could not be made (the source
/// unreachable).
pub async fn gather(
    config: &PipelineConfig,
    purpose: Purpose<'_>,
) -> Result<Report, ProvisionError> {
    let source = &config.source;
    let pg = connect::parse_url(&source.url)?;
    let client = connect::sql(&pg).await?;
    let mut report = prerequisites::run(&client, &pg, source, &config.mirrored()).await?;
    let trigger = report.choice.as_ref().map(|c| c.capture) == Some(Capture::Trigger);
    let mut server = meet_server(&mut report, &client, &pg, trigger).await?;
    check_plugins(&mut report, config).await;
    check_catalog(&mut report, config, purpose).await;
    if let Some(problem) = super::spill_dir_problem(&config.flush) {
        report.refuse(problem.to_string());
    }
    let name = match trigger {
        true => journal_name(&source.trigger_schema),
        false => source.slot.clone(),
    };
    let accept = purpose.accept_gap();
    let system = server.as_ref().map(|s| s.system_id.clone());
    let Some(log) = check_sink(&mut report, config, system, &name, &client, purpose).await else {
        return Ok(report);
    };
    let lake = Checkpoint::from_entry(log.latest.as_ref());
    if let Some(server) = server.as_mut() {
        let timeline = server.timeline;
        // A slot's start asks the timeline history over its replication connection: when that
        // failed (said above), the move is not judged here.
        let replication = server.replication.as_mut();
        if trigger || replication.is_some() {
            let judged =
                judge_timeline(&client, replication, source, &lake, timeline, accept).await;
            report_timeline(&mut report, &lake, timeline, judged);
        }
    }
    match trigger {
        false => {
            check_start(
                &mut report,
                &client,
                source,
                log.latest.as_ref(),
                log.first.as_ref(),
                accept,
            )
            .await?
        }
        true => {
            judge_trigger_start(&mut report, source, log.latest.as_ref());
            check_journal(&mut report, &client, config, log.latest.as_ref(), accept).await?;
        }
    }
    Ok(report)
}

/// The server's system identifier and timeline, with a slot over the replication connection
/// (its protection said in the report), else over SQL; `None` when neither could tell (said).
async fn meet_server(
    report: &mut Report,
    client: &Client,
    pg: &PgConfig,
    trigger: bool,
) -> Result<Option<Server>, ProvisionError> {
    Ok(match trigger {
        // The sink's owner is compared by the server's system identifier, which SQL reads too
        // when the replication connection fails: a problem with one does not hide the other.
        false => match check_connections(report, client, pg).await? {
            Some((identity, replication)) => Some(Server {
                system_id: identity.system_id,
                timeline: identity.timeline,
                replication: Some(replication),
            }),
            None => capture::identify(client)
                .await
                .ok()
                .map(|(system_id, timeline)| Server {
                    system_id,
                    timeline,
                    replication: None,
                }),
        },
        true => {
            report.ok(format!(
                "connection (SQL): {}",
                connect::describe_sql(client, pg).await?
            ));
            warn_weak_tls(report, pg);
            // Trigger capture needs no replication connection; the system identifier is read
            // over SQL, as its start reads it.
            match capture::identify(client).await {
                Ok((system_id, timeline)) => Some(Server {
                    system_id,
                    timeline,
                    replication: None,
                }),
                Err(e) => {
                    report.fail(e);
                    None
                }
            }
        }
    })
}

/// Where the lake's timeline ended in the server's history, when the move to the server's
/// timeline is a promotion the pipeline can follow, or why not (see
/// [`crate::lake::commit::follow_promotion`]).
pub(super) type Switch = Result<Lsn, String>;

/// The server's timeline against the lake's, judged as a start judges it before anything is
/// created: the lake's own timeline goes on; another one is followed when it is a promotion
/// the pipeline can follow by itself (`source.failover`, the slot synchronised on the promoted
/// standby, and the lake ending at or before the switch point, see [`switch_point`]), and
/// refused otherwise unless `accept` (`--accept-gap`) names the move. `replication` asks the
/// server's timeline history; trigger capture has none and follows no promotion by itself
/// (its journal is a table, which a promoted standby holds only as far as it replayed).
/// Returns the switch point or why there is none (the open entry judges the move again) and
/// the judgement.
pub(super) async fn judge_timeline(
    client: &Client,
    replication: Option<&mut ReplicationConnection>,
    source: &SourceConfig,
    lake: &Checkpoint,
    timeline: u32,
    accept: Option<&str>,
) -> Result<(Switch, Result<TimelineMove, CommitError>), PipelineError> {
    let switch = match replication {
        None => Err("trigger capture does not follow a promotion by itself".to_owned()),
        Some(replication) => match lake.timeline() {
            Some(from) if from != timeline => {
                let client = source.failover.then_some(client);
                switch_point(client, replication, &source.slot, from, timeline).await?
            }
            _ => Err("the timeline did not change".to_owned()),
        },
    };
    let judged = lake.judge_timeline(timeline, &switch, accept);
    Ok((switch, judged))
}

/// What [`judge_timeline`] found, in the report: a move the start would refuse is refused in
/// its words.
fn report_timeline(
    report: &mut Report,
    lake: &Checkpoint,
    timeline: u32,
    judged: Result<(Switch, Result<TimelineMove, CommitError>), PipelineError>,
) {
    // A lake that does not say its timeline (an empty one, or older entries) accepts any.
    let Some(from) = lake.timeline() else {
        return;
    };
    match judged {
        Ok((_, Ok(TimelineMove::Same))) => report.ok(format!(
            "timeline: the server is on timeline {timeline}, the lake's"
        )),
        Ok((_, Ok(TimelineMove::Accepted))) => report.ok(format!(
            "timeline: the server moved from the lake's timeline {from} to {timeline}, and \
             --accept-gap accepts that move (the commit log records it)"
        )),
        Ok((_, Ok(TimelineMove::Followed(failover)))) => report.ok(format!(
            "timeline: the server is a promoted standby on timeline {timeline} that synchronised \
             the failover slot, and the lake ends at {}, at or before where its history ends \
             timeline {from} ({}): a start follows the promotion",
            failover.lake_end, failover.switch_point
        )),
        Ok((_, Err(refused))) => report.refuse(crate::error_chain(&refused)),
        Err(e) => report.refuse(crate::error_chain(&e)),
    }
}

/// Load and initialize every plugin as a start does.
async fn check_plugins(report: &mut Report, config: &PipelineConfig) {
    if config.transforms.is_empty() {
        return;
    }
    let specs = config.transform_specs();
    match tokio::task::spawn_blocking(move || TransformChain::load(&specs)).await {
        Ok(Ok(chain)) => {
            for plugin in chain.plugins() {
                report.ok(format!(
                    "plugin {:?} {} ({}): loaded, and its init accepted its settings",
                    plugin.name, plugin.version, plugin.path
                ));
            }
        }
        Ok(Err(e)) => report.refuse(crate::error_chain(&e)),
        Err(e) => report.refuse(format!("loading the plugins: a blocking task failed: {e}")),
    }
}

/// The Iceberg catalog (`sink.catalog`) reached with its credentials, as the tables will
/// reach it. A start waits for a catalog it cannot reach yet, as for the sink.
async fn check_catalog(report: &mut Report, config: &PipelineConfig, purpose: Purpose<'_>) {
    let Some(catalog) = config.sink.catalog() else {
        return;
    };
    match catalog.connect().await {
        Ok(()) => report.ok("sink.catalog: reached, and it accepted the credentials".into()),
        Err(e @ crate::lake::iceberg::catalog::CatalogError::Failed { .. })
            if matches!(purpose, Purpose::Run { .. }) =>
        {
            report.note(format!(
                "{}; the start waits for the catalog",
                crate::error_chain(&e)
            ));
        }
        Err(e) => report.refuse(crate::error_chain(&e)),
    }
}

/// The commit log's latest and first entries.
struct LogRead {
    latest: Option<CommitEntry>,
    first: Option<CommitEntry>,
}

/// Open the sink, read its commit log and compare its owner with this pipeline's source, as a
/// start does before it creates anything; `None` when the sink refused (said in the report).
async fn check_sink(
    report: &mut Report,
    config: &PipelineConfig,
    system: Option<String>,
    name: &str,
    client: &Client,
    purpose: Purpose<'_>,
) -> Option<LogRead> {
    let url = &config.sink.url;
    let sink = match Sink::open(url, &config.sink.options) {
        Ok(sink) => sink,
        Err(e) => {
            report.refuse(crate::error_chain(&e));
            return None;
        }
    };
    if let Some(advice) = sink.table_location_advice(config.sink.format) {
        report.advise(advice);
    }
    let log = CommitLog::new(sink.clone(), Writer::named("check"));
    let read = async {
        let latest = log.latest().await?;
        let first = match &latest {
            Some(_) => log.read_entry(1).await?,
            None => None,
        };
        // After the read, whose refusals (no such bucket) name the store best.
        sink.probe_fence().await?;
        Ok::<_, CommitError>(LogRead { latest, first })
    };
    let read = match read.await {
        Ok(read) => read,
        // A start waits for a sink it cannot reach yet, as it waits while running.
        Err(CommitError::Sink(e)) if e.is_transient() && matches!(purpose, Purpose::Run { .. }) => {
            report.note(format!(
                "sink {url}: not reachable now ({}); the start waits for it",
                crate::error_chain(&e)
            ));
            return None;
        }
        Err(e) => {
            report.refuse(crate::error_chain(&e));
            return None;
        }
    };
    // The owner record names the server by its system identifier; when neither connection
    // could tell it (said above), the owner is left uncompared.
    let Some(system) = system else {
        return Some(read);
    };
    let database = match provision::current_database(client).await {
        Ok(database) => database,
        Err(e) => {
            report.refuse(crate::error_chain(&e));
            return Some(read);
        }
    };
    let ours = PipelineIdentity {
        format: FORMAT,
        system_identifier: system,
        database,
        slot: name.to_owned(),
        created_by: log.writer().clone(),
        created_at: 0,
    };
    match log.check_identity(&ours, read.latest.as_ref()).await {
        Ok(()) => {
            let entries = match &read.latest {
                Some(entry) => format!("its commit log ends at entry {}", entry.sequence),
                None => "its commit log is empty".to_owned(),
            };
            report.ok(format!(
                "sink {url}: writable with conditional puts, {entries}, and it is not another \
                 pipeline's"
            ));
            Some(read)
        }
        // Where this pipeline would start means nothing in another pipeline's log.
        Err(e) => {
            report.refuse(crate::error_chain(&e));
            None
        }
    }
}

/// The preflight a start makes first, and the plugins it loads once the preflight found
/// nothing to refuse: the capture mode chosen, the plugins; `None` when a stop came first.
/// Compiling a plugin can take half a minute: a stop asked for meanwhile is honoured at once,
/// before anything is created (the compile is left to finish on its own thread).
pub(super) async fn cleared(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
) -> Result<Option<(Choice, TransformChain, Vec<PluginRecord>)>, PipelineError> {
    let mut stopping = shutdown.clone();
    let purpose = Purpose::Run {
        accept_gap: options.accept_gap.as_deref(),
    };
    let report = tokio::select! {
        report = gather(config, purpose) => report?,
        _ = stopping.wait_for(|s| *s) => {
            tracing::info!("asked to stop during the preflight: stopping before anything is created");
            return Ok(None);
        }
    };
    for warning in report.warning_texts() {
        tracing::warn!("{warning}");
    }
    let choice = report.choice.clone();
    match report.into_refusal() {
        Some(Refusal::One(problem)) => return Err(problem.into()),
        Some(Refusal::Said(reason)) => return Err(PipelineError::Refused(reason)),
        Some(Refusal::Several(report)) => return Err(PipelineError::Prerequisites(report)),
        None => {}
    }
    let choice = choice.expect("a report without failures names its capture mode");
    tracing::info!(capture = choice.capture.as_str(), why = %choice.why, "capture mode chosen");
    // The plugins the preflight loaded, from the compile cache.
    let (transforms, plugins) = tokio::select! {
        loaded = load_transforms(config) => loaded?,
        _ = stopping.wait_for(|s| *s) => {
            tracing::info!("asked to stop while the plugins were loading: stopping before anything is created");
            return Ok(None);
        }
    };
    Ok(Some((choice, transforms, plugins)))
}

/// What a run would make of `source.start_from`: a first run (an empty commit log) has its
/// position judged as the start judges it; a later run resumes from the log and ignores
/// `start_from` (a warning when it differs from what the first run started from).
pub fn judge_start(
    report: &mut Report,
    source: &SourceConfig,
    latest: Option<&CommitEntry>,
    first: Option<&StartedFrom>,
    slot: Option<&SlotState>,
    current: Lsn,
) {
    match latest {
        None => match position::first_start(source.start_from, &source.slot, slot, current) {
            Ok(_) => report.ok(format!(
                "start: a first run (the sink's commit log is empty), from {}",
                source.start_from
            )),
            Err(e) => report.fail(e),
        },
        Some(entry) => {
            let resume = Checkpoint::from_entry(Some(entry)).confirmed();
            report.ok(format!(
                "start: resumes from the sink's commit log at {resume} (entry {})",
                entry.sequence
            ));
            if let Some(ignored) = position::ignored(source.start_from, first, resume) {
                report.warn(ignored);
            }
        }
    }
}

/// [`judge_start`] with the slot as it is now; `latest` and `first` are the commit log's latest
/// and first entries. A later run is also judged against the slot, as the start judges it
/// before it holds the slot: a missing slot is a gap, refused unless `accept`
/// (`--accept-gap`) names it.
async fn check_start(
    report: &mut Report,
    client: &Client,
    source: &SourceConfig,
    latest: Option<&CommitEntry>,
    first: Option<&CommitEntry>,
    accept: Option<&str>,
) -> Result<(), ProvisionError> {
    let slot = provision::slot_state(client, &source.slot).await?;
    let current = provision::current_wal_lsn(client).await?;
    // A missing slot only: a slot confirmed past the log read a moment ago may be a running
    // instance's (a rolling restart), which the start judges once it holds the slot.
    if slot.is_none()
        && let Err(gap) = Checkpoint::from_entry(latest).check_slot(&source.slot, None, accept)
    {
        report.refuse(crate::error_chain(&gap));
        return Ok(());
    }
    let first = first.and_then(|e| e.started_from.as_ref());
    judge_start(report, source, latest, first, slot.as_ref(), current);
    Ok(())
}

/// How each kind of connection to the source is protected ("TLS 1.3 (...), verify-full against
/// ca.pem, channel binding", or "unencrypted"), with a warning when `sslmode` lets a
/// connection that crosses a network go unencrypted or unchecked. Returns what the replication
/// connection says of the server, for the sink's owner check, and the connection itself, which
/// asks the server's timeline history.
async fn check_connections(
    report: &mut Report,
    client: &Client,
    pg: &PgConfig,
) -> Result<Option<(SystemIdentity, ReplicationConnection)>, ProvisionError> {
    report.ok(format!(
        "connection (SQL): {}",
        connect::describe_sql(client, pg).await?
    ));
    // A role without REPLICATION (said above) would only be refused again; any other problem
    // found so far does not keep the replication connection from being tried.
    let mut system = None;
    let no_replication = report
        .failures()
        .any(|f| matches!(f, ProvisionError::NoReplication { .. }));
    if !no_replication {
        let identified = match connect::replication(pg).await {
            Ok(mut replication) => {
                report.ok(format!(
                    "connection (replication): {}",
                    replication.protection()
                ));
                match replication.identify_system().await {
                    Ok(identity) => Ok((identity, replication)),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match identified {
            Ok(identified) => system = Some(identified),
            Err(e) => report.fail(ProvisionError::ReplicationConnection(Box::new(e))),
        }
    }
    warn_weak_tls(report, pg);
    Ok(system)
}

/// A warning when `sslmode` lets a connection that crosses a network go unencrypted or
/// unchecked.
fn warn_weak_tls(report: &mut Report, pg: &PgConfig) {
    if pg.ssl_mode() <= SslMode::Prefer && !pg.is_local() {
        report.warn(ProvisionError::WeakSslMode {
            mode: pg.ssl_mode(),
            hosts: pg.hosts(),
        });
    }
}

/// What a run in trigger capture would make of `source.start_from`: a first run starts at
/// the tail or with a full load; a later run resumes from the commit log.
fn judge_trigger_start(report: &mut Report, source: &SourceConfig, latest: Option<&CommitEntry>) {
    match (latest, source.start_from) {
        (None, StartFrom::Tail) => report.ok(
            "start: a first run (the sink's commit log is empty), from the tail: the changes committed once the triggers are installed".into(),
        ),
        (None, StartFrom::Full) => report.ok(
            "start: a first run (the sink's commit log is empty), with a full load: the tables as one snapshot sees them, then the journal from that snapshot on".into(),
        ),
        (None, other) => report.fail(ProvisionError::TriggerStartFrom(format!("\"{other}\""))),
        (Some(entry), _) => report.ok(format!(
            "start: resumes from the sink's commit log after position {} (entry {})",
            Checkpoint::from_entry(Some(entry)).confirmed().0,
            entry.sequence
        )),
    }
}

/// Whether the journal holds every change after the lake's end, judged as a start judges it
/// ([`install::judge_journal`]): a new journal on a lake that has landed changes, one installed again
/// since, or another sink's, is refused unless `--accept-gap` names it.
async fn check_journal(
    report: &mut Report,
    client: &Client,
    config: &PipelineConfig,
    latest: Option<&CommitEntry>,
    accept: Option<&str>,
) -> Result<(), ProvisionError> {
    let schema = &config.source.trigger_schema;
    let lake = super::position::lake_end(&Checkpoint::from_entry(latest));
    let (found, judged) =
        install::judge_journal(client, schema, lake, &config.sink.url, accept).await?;
    match judged {
        Ok(_) => report.ok(match &found {
            None => format!("journal in schema {schema:?}: none yet, a first run installs it"),
            Some(o) if o.sink.is_none() => format!(
                "journal in schema {schema:?}: not claimed by any sink, a start claims it for this one"
            ),
            Some(o) => format!(
                "journal in schema {schema:?} (journal {}): captures for this sink since position {}",
                o.short_id(),
                o.claimed_at
            ),
        }),
        Err(gap) => report.fail(ProvisionError::from(gap)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StartFrom;
    use crate::source::prerequisites::tests::{failures, source};

    #[test]
    fn a_first_runs_position_is_judged_and_a_later_run_resumes() {
        let mut cfg = source();
        cfg.start_from = StartFrom::Lsn(Lsn(0x10));
        let held = SlotState {
            plugin: "pgoutput".into(),
            database: "shop".into(),
            holder: None,
            confirmed_flush_lsn: Some(Lsn(0x20)),
            restart_lsn: None,
            wal_status: None,
            safe_wal_size: None,
            two_phase: false,
        };
        let mut report = Report::default();
        judge_start(&mut report, &cfg, None, None, Some(&held), Lsn(0x30));
        assert!(
            failures(&report)[0].contains("is behind slot \"shop\"'s confirmed position 0/20"),
            "{report}"
        );

        let mut entry = crate::lake::commit::Checkpoint::default().open_entry(
            &crate::lake::commit::Writer::named("w"),
            "shop",
            Lsn(0x20),
            false,
            1,
        );
        entry.started_from = Some(StartedFrom {
            start_from: "tail".into(),
            lsn: Lsn(0x20),
        });
        let mut report = Report::default();
        judge_start(
            &mut report,
            &cfg,
            Some(&entry),
            entry.started_from.as_ref(),
            Some(&held),
            Lsn(0x30),
        );
        assert!(report.is_ready(), "{report}");
        let text = report.to_string();
        assert!(
            text.contains("ok    start: resumes from the sink's commit log at 0/20 (entry 1)")
                && text.contains("warn  source.start_from = \"lsn:0/10\" is ignored"),
            "{text}"
        );
    }
}
