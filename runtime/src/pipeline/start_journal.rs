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
use crate::config::{PipelineConfig, StartFrom};
use crate::lake::commit::{
    AcceptedGap, Checkpoint, FORMAT, PipelineIdentity, Provisioned, ProvisionedKind, journal_name,
    unix_micros,
};
use crate::source::catalog::Catalog;
use crate::source::provision::{self, ProvisionError};
use crate::source::snapshot::Snapshot;
use crate::source::trigger::owner::Claim;
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
        ends:
            Ends {
                writer,
                pg,
                client,
                sink,
                log,
                latest,
            },
    } = opening;
    let source = &config.source;
    let schema = &source.trigger_schema;
    let name = journal_name(schema);

    // 1. Refusals.
    let (system_id, timeline) = capture::identify(&client).await?;
    let database = provision::current_database(&client).await?;
    let identity = PipelineIdentity {
        format: FORMAT,
        system_identifier: system_id.clone(),
        database: database.clone(),
        slot: name.clone(),
        created_by: writer.clone(),
        created_at: unix_micros(),
    };
    log.check_identity(&identity, latest.as_ref()).await?;
    let first_read = Checkpoint::from_entry(latest.as_ref());
    // The journal is a table: a promoted standby has it as far as it replayed, which may be
    // short of what landed. A move is taken only when named by --accept-gap.
    let (switch, judged) = preflight::judge_timeline(
        &client,
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
        &client,
        schema,
        super::position::lake_end(&first_read),
        sink.url(),
        options.accept_gap.as_deref(),
    )
    .await?;
    let claim = judged.map_err(ProvisionError::from)?;
    let tracked = provision::tracked_tables(&client, source).await?;

    // 2. Holding the journal.
    let mut reader = crate::source::connect::sql(&pg).await?;
    if !hold(&reader, schema, options, shutdown).await? {
        return Ok(None);
    }

    // 3. Provisioning.
    let claiming = install::Claiming {
        sink: sink.url(),
        judged: found.as_ref(),
        claim: &claim,
    };
    install_capture(&mut reader, schema, &tracked, &claiming).await?;
    let accepted = matches!(claim, Claim::Take { gap: Some(_), .. }).then(|| AcceptedGap {
        from: first_read.confirmed(),
        to: first_read.confirmed(),
    });
    let record = Provisioned {
        kind: ProvisionedKind::TriggerCapture,
        name: schema.clone(),
        database: database.clone(),
        system_identifier: system_id.clone(),
        created_by: writer.clone(),
        created_at: unix_micros(),
    };
    log.record_created(&record).await?;

    // 4. Taking over the log, and opening the journal where the lake ends (with a load of
    // every table when the pipeline asked for one).
    log.claim_identity(&identity).await?;
    let due = capture::load_due(&reader, schema).await?;
    if due {
        tracing::info!(%schema, "a load of every table is due: a column came into a current-state table holding rows");
    }
    let (checkpoint, opened) = open_log(
        &log,
        &client,
        options,
        OpenAt {
            slot: false,
            accepted,
            name: &name,
            timeline,
            switch: &switch,
            first_start: first_start.as_ref(),
            start_at: Lsn::ZERO,
            load: first_start
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
        &sink,
        &log,
        &identity,
        &checkpoint,
        &opened,
        shutdown,
    )
    .await?;
    let confirmed = checkpoint.confirmed();
    let load = match opened.load.clone() {
        Some(state) => Some(take_load(&pg, &mut reader, schema, state, confirmed).await?),
        None => None,
    };
    let capture = capture::TriggerCapture::open(reader, schema, confirmed.0).await?;
    let resumed = opened.started_from.is_none();
    tracing::info!(
        capture = "trigger",
        mode = %match (resumed, load.is_some()) {
            (false, true) => "first run with a full load: the tables as the load's snapshot sees them, then the journal after it".to_owned(),
            (false, false) => "first run from the tail: the changes committed from now on".to_owned(),
            (true, true) => format!("resuming after position {}, with a full load (one a stop cut short, or one the pipeline asked for)", confirmed.0),
            (true, false) => format!("resuming after position {}", confirmed.0),
        },
        schema = %schema,
        tables = %tracked.join(", "),
        plugins = %plugin_names(&plugins),
        sink = %sink.url(),
        writer = %writer.id,
        sequence = checkpoint.sequence(),
        "streaming"
    );
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
        timeline,
        load,
        tracked,
        tables,
        name,
    }))
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
        took_ms = installing.elapsed().as_millis() as u64,
        "trigger capture installed: the journal, a capture function per table, and its triggers"
    );
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
