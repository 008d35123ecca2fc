//! Start-up in trigger capture (`source.capture`, docs/design.md "Capture without a slot"),
//! in the order of a slot's start ([`super::start`]), with the journal where the slot was:
//!
//! 1. Refusals first (the prerequisite check ran already; plugins and sink are open): the
//!    sink's owner, the server's timeline against the lake's, `source.start_from`, and the
//!    journal against the lake (a new, reinstalled or another sink's journal is a gap).
//! 2. Holding the journal: one reader at a time, by a lock its session holds (waited for as a
//!    held slot is).
//! 3. Provisioning: the schema, its journal (claimed for this sink, after the refusals judged
//!    who it captures for, see [`owner`]) and each table's capture function and triggers,
//!    replaced on every start (an upgraded Tributary upgrades them); recorded in the sink for
//!    `tributary teardown`.
//! 4. Taking over the sink (the same open entry as a slot's), and opening the journal at the
//!    position the lake confirmed: the rows of ticks that landed whole are deleted, the ticks
//!    after them read again.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::RunOptions;
use super::error::PipelineError;
use super::feed::{Feed, JournalFeed, JournalSource};
use super::load::LoadJob;
use super::messages::Shutdown;
use super::position::FirstStart;
use super::preflight;
use super::start::{Ends, OpenAt, Opening, Started, open_log, plugin_names, settle_sink};
use crate::Lsn;
use crate::config::{PipelineConfig, SourceConfig, StartFrom};
use crate::lake::commit::{
    AcceptedGap, Checkpoint, CommitEntry, PipelineIdentity, PluginRecord, Provisioned,
    ProvisionedKind, journal_name, unix_micros,
};
use crate::lake::tables::Tables;
use crate::source::catalog::Catalog;
use crate::source::provision::{self, ProvisionError};
use crate::source::snapshot::Snapshot;
use crate::source::trigger::owner::{Claim, JournalOwner};
use crate::source::trigger::poll::Tick;
use crate::source::trigger::{capture, install};
use crate::stream::load::LoadState;

/// How often a waiting start asks for the journal's lock again, and says it still waits.
const HOLD_POLL: Duration = Duration::from_millis(500);
const WAIT_LOG_EVERY: Duration = Duration::from_secs(30);

/// Start a pipeline capturing through triggers; `None` when a stop was requested while it
/// waited for the journal.
pub(super) async fn start(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
    opening: Opening,
) -> Result<Option<Started>, PipelineError> {
    let Opening {
        transforms,
        plugins,
        ends,
    } = opening;
    let source = &config.source;
    let schema = &source.trigger_schema;

    // 1. Refusals.
    let facts = judge_journal(source, options, &ends).await?;

    // 2. Holding the journal.
    let mut reader = crate::source::connect::sql(&ends.pg).await?;
    if !hold(&reader, schema, options, shutdown).await? {
        return Ok(None);
    }

    // 3. Provisioning.
    let accepted = provision_journal(&mut reader, schema, &ends, &facts).await?;

    // 4. Taking over the log, and opening the journal where the lake ends (with a load of
    // every table when the pipeline asked for one).
    let (checkpoint, opened, tables) =
        take_over_journal(config, options, shutdown, &ends, &facts, &reader, accepted).await?;
    let confirmed = checkpoint.confirmed();
    let load = match opened.load.clone() {
        Some(state) => Some(take_load(&ends.pg, &mut reader, schema, state, confirmed).await?),
        None => None,
    };
    let capture = capture::TriggerCapture::open(reader, schema, confirmed.0).await?;
    announce(
        schema,
        &facts.tracked,
        &plugins,
        &ends,
        &checkpoint,
        opened.started_from.is_some(),
        load.is_some(),
    );
    let Ends { pg, log, .. } = ends;
    let feed = JournalFeed::start(
        capture,
        JournalSource {
            pg: pg.clone(),
            schema: schema.clone(),
            retry_limit: config.retry.limit(),
        },
        confirmed,
    );
    Ok(Some(Started {
        log,
        checkpoint,
        opened,
        transforms,
        plugins,
        feed: Feed::Journal(feed),
        followed: tokio::sync::watch::channel(None).1,
        pg: pg.clone(),
        // The journal's frames are pgoutput's newest protocol (without streamed parts).
        proto_version: super::PROTO_VERSION,
        catalog: Catalog::new(pg, false),
        timeline: facts.timeline,
        load,
        tracked: facts.tracked,
        tables,
        name: facts.name,
    }))
}

/// What the refusals of a trigger start found, for the steps after.
struct JournalFacts {
    /// What the entries name as their source: the journal.
    name: String,
    system_id: String,
    timeline: u32,
    database: String,
    /// The pipeline the sink is to belong to.
    identity: PipelineIdentity,
    /// The commit log as first read.
    first_read: Checkpoint,
    /// Where the lake's timeline ended in the server's history, or why the move cannot be
    /// followed.
    switch: preflight::Switch,
    /// A first run's decision, made from the log as first read.
    first_start: Option<FirstStart>,
    /// The journal's owner as found, and how this start is to claim it.
    found: Option<JournalOwner>,
    claim: Claim,
    /// The tables the pipeline tracks (`schema.table`).
    tracked: Vec<String>,
}

/// Step 1 in trigger capture: whether the sink is this pipeline's, the server's timeline the
/// lake's, `source.start_from` one a journal can start from, and the journal the lake (one
/// that is new, installed again, or another sink's is a gap). Nothing is created before all
/// of them pass.
async fn judge_journal(
    source: &SourceConfig,
    options: &RunOptions,
    ends: &Ends,
) -> Result<JournalFacts, PipelineError> {
    let client = &ends.client;
    let schema = &source.trigger_schema;
    let name = journal_name(schema);
    let (system_id, timeline) = capture::identify(client).await?;
    let database = provision::current_database(client).await?;
    let identity = ends.identity(&system_id, &database, &name).await?;
    let first_read = Checkpoint::from_entry(ends.latest.as_ref());
    // The journal is a table: a promoted standby has it as far as it replayed, which may be
    // short of what landed. A move is taken only when named by --accept-gap.
    let (switch, judged) = preflight::judge_timeline(
        client,
        None,
        source,
        &first_read,
        timeline,
        options.accept_gap.as_deref(),
    )
    .await?;
    judged?;
    let first_start = match first_read.sequence() {
        0 => Some(first_start(source.start_from)?),
        _ => None,
    };
    // The journal must hold every change after the lake's end: one that is new, installed
    // again, or another sink's is refused unless --accept-gap names it.
    let (found, judged) = install::judge_journal(
        client,
        schema,
        super::position::lake_end(&first_read),
        ends.sink.url(),
        options.accept_gap.as_deref(),
    )
    .await?;
    let claim = judged.map_err(ProvisionError::from)?;
    let tracked = provision::tracked_tables(client, source).await?;
    Ok(JournalFacts {
        name,
        system_id,
        timeline,
        database,
        identity,
        first_read,
        switch,
        first_start,
        found,
        claim,
        tracked,
    })
}

/// Step 3 in trigger capture, with the journal held: install the capture on `reader`,
/// claiming the journal as judged, and record it in the sink for `tributary teardown`.
/// Returns the gap `--accept-gap` named, when the claim takes one.
async fn provision_journal(
    reader: &mut Client,
    schema: &str,
    ends: &Ends,
    facts: &JournalFacts,
) -> Result<Option<AcceptedGap>, PipelineError> {
    let claiming = install::Claiming {
        sink: ends.sink.url(),
        judged: facts.found.as_ref(),
        claim: &facts.claim,
    };
    install_capture(reader, schema, &facts.tracked, &claiming).await?;
    let accepted = matches!(facts.claim, Claim::Take { gap: Some(_), .. }).then(|| AcceptedGap {
        from: facts.first_read.confirmed(),
        to: facts.first_read.confirmed(),
    });
    let record = Provisioned {
        kind: ProvisionedKind::TriggerCapture,
        name: schema.to_owned(),
        database: facts.database.clone(),
        system_identifier: facts.system_id.clone(),
        created_by: ends.writer.clone(),
        created_at: unix_micros(),
    };
    ends.log.record_created(&record).await?;
    Ok(accepted)
}

/// Step 4 in trigger capture: claim the sink, append the open entry that fences every
/// earlier writer (with a load of every table when one is due), and make the sink whole.
async fn take_over_journal(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
    ends: &Ends,
    facts: &JournalFacts,
    reader: &Client,
    accepted: Option<AcceptedGap>,
) -> Result<(Checkpoint, CommitEntry, Option<Tables>), PipelineError> {
    let schema = &config.source.trigger_schema;
    let tracked = &facts.tracked;
    ends.log.claim_identity(&facts.identity).await?;
    let due = capture::load_due(reader, schema).await?;
    if due {
        tracing::info!(%schema, "a load of every table is due: a column came into a current-state table holding rows");
    }
    let (checkpoint, opened) = open_log(
        &ends.log,
        &ends.client,
        options,
        OpenAt {
            slot: false,
            accepted,
            name: &facts.name,
            timeline: facts.timeline,
            switch: &facts.switch,
            first_start: facts.first_start.as_ref(),
            start_at: Lsn::ZERO,
            load: facts
                .first_start
                .is_some_and(|f| f.from == StartFrom::Full)
                .then(|| tracked.clone()),
            due: due.then(|| tracked.clone()),
        },
        config.retry.limit(),
        shutdown,
    )
    .await?;
    let tables = settle_sink(
        config,
        &ends.sink,
        &ends.log,
        &facts.identity,
        &checkpoint,
        &opened,
        shutdown,
    )
    .await?;
    Ok((checkpoint, opened, tables))
}

/// The one line that says a pipeline is streaming from the journal: how it starts (first run
/// or resumed, with a load or not), what, through which plugins, to which sink.
fn announce(
    schema: &str,
    tracked: &[String],
    plugins: &[PluginRecord],
    ends: &Ends,
    checkpoint: &Checkpoint,
    first_run: bool,
    loading: bool,
) {
    let confirmed = checkpoint.confirmed();
    tracing::info!(
        capture = "trigger",
        mode = %match (first_run, loading) {
            (true, true) => "first run with a full load: the tables as the load's snapshot sees them, then the journal after it".to_owned(),
            (true, false) => "first run from the tail: the changes committed from now on".to_owned(),
            (false, true) => format!("resuming after position {}, with a full load (one a stop cut short, or one the pipeline asked for)", confirmed.0),
            (false, false) => format!("resuming after position {}", confirmed.0),
        },
        schema = %schema,
        tables = %tracked.join(", "),
        plugins = %plugin_names(plugins),
        sink = %ends.sink.url(),
        writer = %ends.writer.id,
        sequence = checkpoint.sequence(),
        "streaming"
    );
}

/// Install capture of `tracked` in `schema`, claiming its journal as judged, and say what was
/// installed, and the gap `--accept-gap` named when one is taken.
async fn install_capture(
    reader: &mut Client,
    schema: &str,
    tracked: &[String],
    claiming: &install::Claiming<'_>,
) -> Result<(), PipelineError> {
    let installing = Instant::now();
    let installed = install::install(reader, schema, tracked, claiming).await?;
    if let Claim::Take { gap: Some(gap), .. } = claiming.claim {
        tracing::warn!(
            schema = %schema,
            gap = %gap,
            "accepting the gap named by --accept-gap: the changes committed between the lake's last landed position and the journal's claim never reach this sink; the commit log records it"
        );
    }
    tracing::info!(
        schema = %schema,
        tables = installed.tables.len(),
        triggers = installed.triggers,
        ddl_watch = installed.ddl_watch,
        took_ms = installing.elapsed().as_millis() as u64,
        "trigger capture installed: the journal, a capture function per table, and its triggers"
    );
    if !installed.ddl_watch {
        tracing::info!(
            schema = %schema,
            "this role may not create event triggers, so no DDL watch replaces a capture function when its table's columns change: each captured statement checks them itself (three catalog lookups, tens of microseconds a statement); a superuser's start puts the watch in place"
        );
    }
    Ok(())
}

/// The full load due (a first run's, or one a crash cut short): its snapshot taken in a
/// transaction of its own and recorded as the tick the journal is read from, in the same
/// snapshot, so that a transaction is either in the load or read from the journal, never both
/// and never neither (the capture is installed before: every transaction the snapshot does not
/// see wrote its rows to the journal). A load a crash cut short loads every table again: the
/// journal is read from one snapshot.
async fn take_load(
    pg: &crate::source::connect::PgConfig,
    reader: &mut Client,
    schema: &str,
    mut state: LoadState,
    confirmed: Lsn,
) -> Result<LoadJob, PipelineError> {
    if state.resync {
        return Err(ProvisionError::TriggerResync.into());
    }
    let position = capture::load_position(reader, schema, confirmed.0).await?;
    tracing::info!(
        tables = ?state.tables.iter().map(|t| t.table.as_str()).collect::<Vec<_>>(),
        position,
        "full load: taking its snapshot, the one the journal is read from after it"
    );
    let (anchor, snapshot, taken_us) = Snapshot::begin(pg, Lsn(position)).await?;
    let tick = Tick { snapshot, taken_us };
    capture::record_load(reader, schema, &tick, position).await?;
    for table in &mut state.tables {
        // Loaded again, at this snapshot (one before keeps its position, so that the load
        // says it loads the table again).
        table.chunks = None;
        table.done = 0;
        table.rows = 0;
    }
    Ok(LoadJob {
        anchor: Some(anchor),
        state,
    })
}

/// Where a first run in trigger capture starts: at the tail, from the installation on.
fn first_start(from: StartFrom) -> Result<FirstStart, ProvisionError> {
    match from {
        StartFrom::Tail | StartFrom::Full => Ok(FirstStart {
            from,
            at: Lsn::ZERO,
        }),
        StartFrom::Head => Err(ProvisionError::TriggerStartFrom("\"head\"".into())),
        StartFrom::Lsn(lsn) => Err(ProvisionError::TriggerStartFrom(format!("\"lsn:{lsn}\""))),
    }
}

/// Take the journal's reader lock on `reader`'s session, waiting while another instance holds
/// it: briefly by default, for as long as it takes with `--wait`. `false` when a stop came
/// first.
async fn hold(
    reader: &Client,
    schema: &str,
    options: &RunOptions,
    shutdown: &Shutdown,
) -> Result<bool, PipelineError> {
    let since = Instant::now();
    let mut told: Option<Instant> = None;
    loop {
        if capture::hold(reader, schema).await? {
            return Ok(true);
        }
        if !options.wait_for_slot && since.elapsed() >= options.slot_grace {
            return Err(ProvisionError::JournalHeld {
                schema: schema.to_owned(),
            }
            .into());
        }
        if told.is_none_or(|t| t.elapsed() >= WAIT_LOG_EVERY) {
            told = Some(Instant::now());
            tracing::info!(
                schema,
                waited_secs = since.elapsed().as_secs(),
                "another instance reads the trigger journal; waiting for it to stop"
            );
        }
        let mut stop = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(HOLD_POLL) => {}
            _ = stop.wait_for(|s| *s) => return Ok(false),
        }
    }
}
