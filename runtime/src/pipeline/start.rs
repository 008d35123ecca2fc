//! Start-up, in the order that keeps a refused start from leaving anything behind and a
//! second instance from writing over the first:
//!
//! The prerequisite check also chooses the capture mode (`source.capture`); once plugins and
//! sink are open ([`open`]), the pipeline hands a start capturing through triggers to
//! `start_journal.rs`, in the same order with the journal where the slot is, and a slot's to
//! [`start_slot`]:
//!
//! 1. Everything that can refuse, before anything is created: the prerequisite check (every
//!    problem of the source in one report, see [`crate::source::prerequisites`]), the spill directory
//!    (writable), the plugins (loaded and instantiated), the sink (reachable, and not another
//!    pipeline's), the server's timeline against the lake's (another one is refused unless it
//!    is a promotion the pipeline follows, see [`crate::lake::commit::follow_promotion`]), the
//!    slot (its plugin, database, two-phase setting, and whether the lake
//!    would have a gap without it), and on a first run (an empty commit log) where
//!    `source.start_from` starts ([`position`](super::position)).
//! 2. Provisioning: the publication, replica identity checks, the slot if missing (a failover
//!    slot with `source.failover`, which also marks an existing slot as one); what is
//!    created is recorded in the sink, for `tributary teardown`.
//! 3. Holding the slot: `START_REPLICATION` succeeds for one consumer at a time. A slot held
//!    by another consumer (a previous instance still stopping, during a rolling restart) is
//!    waited for: briefly by default, for as long as it takes with `--wait`.
//! 4. Taking over the sink, now that no other consumer can confirm: record which pipeline it
//!    belongs to (once), read the log again, compare the slot with it (gaps are refused), and
//!    append an open entry that fences every earlier writer (see [`crate::lake::commit`]); a first
//!    run's entry records where it started. Then delete what no one can commit any more, and
//!    say in one line how this run starts.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::error::PipelineError;
use super::feed::Feed;
use super::load::LoadJob;
use super::messages::Shutdown;
use super::position::{self, FirstStart};
use super::preflight;
use super::reconnect::Reconnect;
use super::retry::with_retry;
use super::{RunOptions, proto_version};
use crate::Lsn;
use crate::config::{PipelineConfig, Provisioning, SourceConfig, StartFrom};
use crate::lake::commit::{
    AcceptedGap, Checkpoint, CommitEntry, CommitError, CommitLog, FORMAT, PipelineIdentity,
    PluginRecord, Provisioned, ProvisionedKind, TimelineMove, Writer, unix_micros,
};
use crate::lake::sink::Sink;
use crate::lake::tables::{Keeping, Tables};
use crate::source::catalog::Catalog;
use crate::source::prerequisites::Capture;
use crate::source::provision::{self, Ensured, ProvisionError, SlotHolder, SlotState};
use crate::source::replication::{ReplicationConnection, ReplicationStream, SystemIdentity};
use crate::source::snapshot::{Snapshot, SnapshotError};
use crate::stream::load::LoadState;
use crate::transform::TransformChain;

/// How often a waiting start looks at the slot again, and how often it says it still waits.
const SLOT_POLL: Duration = Duration::from_millis(200);
const WAIT_LOG_EVERY: Duration = Duration::from_secs(30);
/// Open attempts before concluding that another writer keeps committing.
const OPEN_ATTEMPTS: usize = 5;
/// `object_in_use`: START_REPLICATION on a slot another walsender holds.
const SLOT_IN_USE: &str = "55006";
/// `duplicate_object`: CREATE_REPLICATION_SLOT raced another instance creating it.
const DUPLICATE_OBJECT: &str = "42710";

/// A pipeline that holds its slot and owns its sink.
pub(super) struct Started {
    pub log: CommitLog,
    pub checkpoint: Checkpoint,
    pub opened: CommitEntry,
    pub transforms: TransformChain,
    pub plugins: Vec<PluginRecord>,
    /// The slot's stream, or the trigger journal.
    pub feed: Feed,
    /// How to reach the source.
    pub pg: crate::source::connect::PgConfig,
    /// Promotions the slot's stream followed, for the landing stage to record.
    pub followed: tokio::sync::watch::Receiver<Option<crate::lake::commit::Failover>>,
    pub proto_version: u32,
    pub catalog: Catalog,
    /// The source server's timeline.
    pub timeline: u32,
    /// A full load to land before streaming: a first run's, or one a stop interrupted.
    pub load: Option<LoadJob>,
    /// The tables the pipeline tracks (`schema.table`).
    pub tracked: Vec<String>,
    /// With `sink.format = "delta"`: the outputs' tables, up to date with the log.
    pub tables: Option<Tables>,
    /// What the entries name as their source: the slot, or the trigger journal.
    pub name: String,
}

/// What a start has opened when it turns to one capture mode or the other.
pub(super) struct Opening {
    /// The plugins' instances, handed on to the transform stage untouched.
    pub transforms: TransformChain,
    pub plugins: Vec<PluginRecord>,
    pub ends: Ends,
}

/// The source and the sink a start talks to, and the writer it writes as: what the steps of
/// a start borrow (the transforms, which cannot be shared between threads, stay out).
pub(super) struct Ends {
    pub writer: Writer,
    pub pg: crate::source::connect::PgConfig,
    pub client: Client,
    pub sink: Sink,
    pub log: CommitLog,
    /// The commit log's latest entry, as first read.
    pub latest: Option<CommitEntry>,
}

impl Ends {
    /// The pipeline this start is (server, database, and slot or journal), refused unless the
    /// sink is empty or already belongs to it.
    pub(super) async fn identity(
        &self,
        system_identifier: &str,
        database: &str,
        slot: &str,
    ) -> Result<PipelineIdentity, PipelineError> {
        let identity = PipelineIdentity {
            format: FORMAT,
            system_identifier: system_identifier.to_owned(),
            database: database.to_owned(),
            slot: slot.to_owned(),
            created_by: self.writer.clone(),
            created_at: unix_micros(),
        };
        self.log
            .check_identity(&identity, self.latest.as_ref())
            .await?;
        Ok(identity)
    }
}

/// What every start does first, whatever the capture: the preflight (the one `tributary
/// check` prints), the plugins loaded, the sink opened and the commit log's latest entry read;
/// `None` when a stop came first.
pub(super) async fn open(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
) -> Result<Option<(Capture, Opening)>, PipelineError> {
    let source = &config.source;
    for note in source.deprecations() {
        tracing::warn!("{note}");
    }
    let writer = Writer::new();
    let mut pg = crate::source::connect::parse_url(&source.url)?;
    if pg.pg().get_application_name().is_none() {
        // Names this instance to whoever finds the slot busy (pg_stat_replication).
        pg.application_name(&format!("tributary {}", writer.id));
    }
    let client = crate::source::connect::sql(&pg).await?;

    // 1. Everything that can refuse, found at once by the preflight `tributary check` prints.
    let Some((choice, transforms, plugins)) = preflight::cleared(config, options, shutdown).await?
    else {
        return Ok(None);
    };
    let sink = Sink::open(&config.sink.url, &config.sink.options)?;
    let log = CommitLog::new(sink.clone(), writer.clone());
    // An unreachable sink at start is waited for like one while running; a missing bucket or
    // refused credentials stop here, before anything is created.
    let mut stop = shutdown.clone();
    let limit = config.retry.limit();
    let latest = with_retry!(
        "reading the commit log",
        Lsn::ZERO,
        limit,
        &mut stop,
        log.latest()
    )?;
    let opening = Opening {
        transforms,
        plugins,
        ends: Ends {
            writer,
            pg,
            client,
            sink,
            log,
            latest,
        },
    };
    Ok(Some((choice.capture, opening)))
}

/// A start reading a slot, once [`open`]; `None` when a stop came while it waited for the
/// slot.
pub(super) async fn start_slot(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
    opening: Opening,
) -> Result<Option<Started>, PipelineError> {
    let source = &config.source;
    let Opening {
        transforms,
        plugins,
        ends,
    } = opening;
    // 1. What can refuse once the server and the log can be compared.
    let (mut replication, facts) = judge_slot(source, options, &ends).await?;

    // 2. Provisioning.
    let (catalog, anchor) =
        provision_slot(config, shutdown, &ends, &mut replication, &facts).await?;

    // 3. Holding the slot.
    let start_at = facts
        .first_start
        .map_or(facts.first_read.confirmed(), |f| f.at);
    let Some(stream) = hold_slot(
        &ends.pg,
        &ends.client,
        replication,
        source,
        facts.proto_version,
        start_at,
        options,
        shutdown,
    )
    .await?
    else {
        return Ok(None);
    };

    // 4. Taking over the log.
    let taken = take_over_slot(config, options, shutdown, &ends, &facts, &stream, start_at).await?;
    let first_start = facts.first_start.filter(|_| !taken.resumed);
    announce(
        source,
        &taken.tracked,
        &plugins,
        first_start.as_ref(),
        &taken.checkpoint,
        &ends.sink,
        &ends.writer,
    );
    let Ends { pg, log, .. } = ends;
    let load = taken
        .opened
        .load
        .clone()
        .map(|state| LoadJob { anchor, state });
    let reconnect = Reconnect {
        retry_limit: config.retry.limit(),
        pg,
        slot: source.slot.clone(),
        options: stream_options(source, facts.proto_version),
        status_interval: Duration::from_secs(source.status_interval_secs),
        confirmer: stream.confirmer(),
        system_id: facts.system.system_id.clone(),
        timeline: facts.system.timeline,
        failover: source.failover,
        followed: tokio::sync::watch::channel(None).0,
    };
    Ok(Some(Started {
        log,
        checkpoint: taken.checkpoint,
        opened: taken.opened,
        transforms,
        plugins,
        followed: reconnect.followed.subscribe(),
        pg: reconnect.pg.clone(),
        feed: Feed::slot(stream, reconnect),
        proto_version: facts.proto_version,
        catalog,
        timeline: facts.system.timeline,
        load,
        tracked: taken.tracked,
        tables: taken.tables,
        name: source.slot.clone(),
    }))
}

/// What a slot's start found while judging whether it may start, for the steps after.
struct SlotFacts {
    system: SystemIdentity,
    database: String,
    /// The pipeline the sink is to belong to.
    identity: PipelineIdentity,
    proto_version: u32,
    /// The commit log as first read.
    first_read: Checkpoint,
    /// Where the lake's timeline ended in the server's history, or why the move cannot be
    /// followed.
    switch: preflight::Switch,
    /// The slot as found: `None` when this start creates it.
    slot: Option<SlotState>,
    /// A first run's decision, made from the log as first read.
    first_start: Option<FirstStart>,
}

impl SlotFacts {
    /// A first run with a full load: the slot is created with the load's snapshot.
    fn full_load(&self) -> bool {
        self.first_start.is_some_and(|f| f.from == StartFrom::Full)
    }

    /// The record of something this start created, for `tributary teardown`.
    fn created(&self, kind: ProvisionedKind, name: &str, writer: &Writer) -> Provisioned {
        Provisioned {
            kind,
            name: name.to_owned(),
            database: self.database.clone(),
            system_identifier: self.system.system_id.clone(),
            created_by: writer.clone(),
            created_at: unix_micros(),
        }
    }
}

/// Step 1 for a slot: whether the sink is this pipeline's, the server's protocol suits the
/// options, the server's timeline the lake's, and the slot (or its absence) the log; and on a
/// first run, where it starts. Nothing is created before all of them pass. Returns the
/// replication connection the slot is later created and held on.
async fn judge_slot(
    source: &SourceConfig,
    options: &RunOptions,
    ends: &Ends,
) -> Result<(ReplicationConnection, SlotFacts), PipelineError> {
    let client = &ends.client;
    let mut replication = crate::source::connect::replication(&ends.pg).await?;
    let system = replication.identify_system().await?;
    let database = provision::current_database(client).await?;
    let identity = ends
        .identity(&system.system_id, &database, &source.slot)
        .await?;
    let proto_version = proto_version(replication.server_version_num());
    if source.binary && proto_version < 2 {
        return Err(PipelineError::BinaryUnsupported(proto_version));
    }
    let first_read = Checkpoint::from_entry(ends.latest.as_ref());
    // Another timeline than the lake's: a promotion the pipeline may follow by itself.
    let (switch, judged) = preflight::judge_timeline(
        client,
        Some(&mut replication),
        source,
        &first_read,
        system.timeline,
        options.accept_gap.as_deref(),
    )
    .await?;
    judged?;
    let slot = provision::slot_state(client, &source.slot).await?;
    match &slot {
        Some(state) => provision::check_slot(&source.slot, state, &database)?,
        None => {
            first_read.check_slot(&source.slot, None, options.accept_gap.as_deref())?;
            if source.slot_behavior() == Provisioning::Reuse {
                return Err(ProvisionError::NoSlot {
                    slot: source.slot.clone(),
                }
                .into());
            }
        }
    }
    let first_start = match first_read.sequence() {
        0 => Some(position::first_start(
            source.start_from,
            &source.slot,
            slot.as_ref(),
            provision::current_wal_lsn(client).await?,
        )?),
        _ => None,
    };
    let facts = SlotFacts {
        system,
        database,
        identity,
        proto_version,
        first_read,
        switch,
        slot,
        first_start,
    };
    Ok((replication, facts))
}

/// Step 2 for a slot: the publication, the replica identities, the catalog (checked against
/// the tables in binary mode), the slot if missing, and with `source.failover` an existing
/// slot made a failover slot. What is created is recorded in the sink. Returns the catalog,
/// and the snapshot a first run's full load reads, when the slot was created with it.
async fn provision_slot(
    config: &PipelineConfig,
    shutdown: &Shutdown,
    ends: &Ends,
    replication: &mut ReplicationConnection,
    facts: &SlotFacts,
) -> Result<(Catalog, Option<Snapshot>), PipelineError> {
    let source = &config.source;
    let client = &ends.client;
    if provision::ensure_publication(client, source).await? == Ensured::Created {
        let record = facts.created(
            ProvisionedKind::Publication,
            &source.publication,
            &ends.writer,
        );
        let recording = "recording the publication created";
        record_created(config, shutdown, &ends.log, &record, recording).await?;
    }
    provision::check_replica_identity(client, source).await?;
    let mut catalog = Catalog::new(ends.pg.clone(), source.binary);
    if source.binary {
        catalog
            .check_tables(&provision::table_columns(client, source).await?)
            .await?;
    }
    let anchor = match facts.slot {
        None => create_slot(config, shutdown, ends, replication, facts).await?,
        Some(_) => None,
    };
    if source.failover && facts.slot.is_some() {
        let state = crate::source::failover::slot_failover(client, &source.slot).await?;
        if state.is_some_and(|s| !s.failover) {
            // The check said so: an existing slot becomes a failover slot before it is held.
            replication.make_failover_slot(&source.slot).await?;
            tracing::info!(slot = %source.slot, "made the slot a failover slot (source.failover = true)");
        }
    }
    Ok((catalog, anchor))
}

/// Create the missing slot and record it. A first run with a full load creates it exporting
/// its snapshot (returned): the load reads exactly what the slot does not stream. A slot
/// another instance created a moment before is no error: it is waited for like any holder.
async fn create_slot(
    config: &PipelineConfig,
    shutdown: &Shutdown,
    ends: &Ends,
    replication: &mut ReplicationConnection,
    facts: &SlotFacts,
) -> Result<Option<Snapshot>, PipelineError> {
    let source = &config.source;
    let mut anchor = None;
    let made = match facts.full_load() {
        true => match Snapshot::take_with(&ends.pg, &source.slot, true, source.failover).await {
            Ok(snapshot) => {
                let at = snapshot.consistent_point();
                anchor = Some(snapshot);
                Ok(at)
            }
            Err(SnapshotError::Slot(e)) => Err(e),
            Err(e) => return Err(e.into()),
        },
        false if source.failover => replication
            .create_failover_slot(&source.slot, false)
            .await
            .map(|made| made.consistent_point),
        false => replication
            .create_logical_slot(&source.slot)
            .await
            .map(|made| made.consistent_point),
    };
    match made {
        Ok(at) => {
            tracing::info!(slot = %source.slot, %at, "created slot");
            let record = facts.created(ProvisionedKind::Slot, &source.slot, &ends.writer);
            let recording = "recording the slot created";
            record_created(config, shutdown, &ends.log, &record, recording).await?;
        }
        // Another instance created it a moment ago: wait for it like for any holder.
        Err(e) if e.code() == Some(DUPLICATE_OBJECT) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(anchor)
}

/// Record in the sink what this start created, for `tributary teardown`; retried while the
/// sink fails as every start-up step in the sink is.
async fn record_created(
    config: &PipelineConfig,
    shutdown: &Shutdown,
    log: &CommitLog,
    record: &Provisioned,
    what: &'static str,
) -> Result<(), PipelineError> {
    let mut stop = shutdown.clone();
    let limit = config.retry.limit();
    with_retry!(
        what,
        Lsn::ZERO,
        limit,
        &mut stop,
        log.record_created(record)
    )?;
    Ok(())
}

/// What taking over the sink settled: the log opened and the tables up to it.
struct TakenOver {
    /// The tables the pipeline tracks (`schema.table`).
    tracked: Vec<String>,
    checkpoint: Checkpoint,
    /// The open entry this start appended.
    opened: CommitEntry,
    tables: Option<Tables>,
    /// The log had entries before this start: it resumes rather than starts.
    resumed: bool,
}

/// Step 4 for a slot, now that no other consumer can confirm: claim the sink, append the open
/// entry that fences every earlier writer, make the sink whole, and confirm to the slot what
/// the sink already holds.
async fn take_over_slot(
    config: &PipelineConfig,
    options: &RunOptions,
    shutdown: &Shutdown,
    ends: &Ends,
    facts: &SlotFacts,
    stream: &ReplicationStream,
    start_at: Lsn,
) -> Result<TakenOver, PipelineError> {
    let source = &config.source;
    let log = &ends.log;
    // The owner record comes first: of two pipelines that found an empty sink at the same
    // moment, the one that loses it writes nothing at all.
    log.claim_identity(&facts.identity).await?;
    let tracked = provision::tracked_tables(&ends.client, source).await?;
    let (checkpoint, opened) = open_log(
        log,
        &ends.client,
        options,
        OpenAt {
            slot: true,
            accepted: None,
            name: &source.slot,
            timeline: facts.system.timeline,
            switch: &facts.switch,
            first_start: facts.first_start.as_ref(),
            start_at,
            load: facts.full_load().then(|| tracked.clone()),
            due: None,
        },
        config.retry.limit(),
        shutdown,
    )
    .await?;
    let tables = settle_sink(
        config,
        &ends.sink,
        log,
        &facts.identity,
        &checkpoint,
        &opened,
        shutdown,
    )
    .await?;
    // A previous run may have stopped between its last commit and confirming it; what the
    // sink holds is durable, so the slot may release it now.
    stream.confirm(checkpoint.confirmed());
    let resumed = opened.started_from.is_none();
    if resumed {
        warn_start_from_ignored(config, shutdown, log, &checkpoint).await?;
    }
    Ok(TakenOver {
        tracked,
        checkpoint,
        opened,
        tables,
        resumed,
    })
}

/// A resumed run goes on from the log whatever `source.start_from` says now: say so when it
/// says something else than the first run started from.
async fn warn_start_from_ignored(
    config: &PipelineConfig,
    shutdown: &Shutdown,
    log: &CommitLog,
    checkpoint: &Checkpoint,
) -> Result<(), PipelineError> {
    let mut stop = shutdown.clone();
    let first = with_retry!(
        "reading the first commit entry",
        checkpoint.confirmed(),
        config.retry.limit(),
        &mut stop,
        log.read_entry(1)
    )?
    .and_then(|e| e.started_from);
    if let Some(ignored) = position::ignored(
        config.source.start_from,
        first.as_ref(),
        checkpoint.confirmed(),
    ) {
        tracing::warn!("{ignored}");
    }
    Ok(())
}

/// Make the sink whole for this run: remove what flushes that can never commit left, and with
/// a table format (`sink.format`) bring the outputs' tables up to the commit log (returned).
pub(super) async fn settle_sink(
    config: &PipelineConfig,
    sink: &Sink,
    log: &CommitLog,
    identity: &PipelineIdentity,
    checkpoint: &Checkpoint,
    opened: &CommitEntry,
    shutdown: &Shutdown,
) -> Result<Option<Tables>, PipelineError> {
    recover(log, opened.sequence).await?;
    let limit = config.retry.limit();
    let mut stop = shutdown.clone();
    let writer = log.writer();
    let encoder = crate::lake::encode::Encoder::new(&config.parquet.encode_options())?;
    let keeping = Keeping {
        database: identity.database.clone(),
        slot: identity.slot.clone(),
        on_type_change: config.sink.on_type_change,
        mirrored: config.mirrored(),
        properties: encoder.properties().clone(),
        target: config.parquet.target_file_bytes(),
        reload: Some(std::sync::Arc::new(super::refill::AskSource {
            source: config.source.clone(),
        })),
        catalog: config.sink.catalog(),
    };
    let Some(tables) = Tables::open(config.sink.format, sink, writer.clone(), keeping) else {
        return Ok(None);
    };
    let through = checkpoint.tables_through();
    let caught_up = with_retry!(
        "bringing the tables up to the commit log",
        checkpoint.confirmed(),
        limit,
        &mut stop,
        tables.catch_up(log, through, opened.sequence)
    )?;
    if caught_up > 0 {
        tracing::info!(entries = caught_up, "the tables hold every commit entry");
    }
    Ok(Some(tables))
}

/// The one line that says a pipeline is streaming: from where, what, through which plugins, to
/// which sink.
fn announce(
    source: &SourceConfig,
    tracked: &[String],
    plugins: &[PluginRecord],
    first_start: Option<&FirstStart>,
    checkpoint: &Checkpoint,
    sink: &Sink,
    writer: &Writer,
) {
    let tables = match source.tables.is_empty() {
        false => source.tables.join(", "),
        true => format!("every table of the publication ({})", tracked.join(", ")),
    };
    let plugin_names = plugin_names(plugins);
    tracing::info!(
        mode = ?position::describe(first_start, checkpoint.confirmed()),
        slot = %source.slot,
        publication = %source.publication,
        tables = ?tables,
        position = %checkpoint.confirmed(),
        plugins = ?plugin_names,
        sink = %sink.url(),
        writer = %writer.id,
        sequence = checkpoint.sequence(),
        "streaming"
    );
}

/// The plugins as the start-up line names them: `name version, ...`, or `none`.
pub(super) fn plugin_names(plugins: &[PluginRecord]) -> String {
    match plugins.is_empty() {
        true => "none".to_owned(),
        false => plugins
            .iter()
            .map(|p| format!("{} {}", p.name, p.version))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Remove what flushes that can never commit left in the sink (their intents name the files),
/// and say when a newer writer's intents are there: this one will stop at its next commit.
async fn recover(log: &CommitLog, opened: u64) -> Result<(), PipelineError> {
    let recovery = log
        .recover(opened, crate::lake::flush::MAX_FLIGHTS as u64)
        .await?;
    let removed = log.clean_up(&recovery).await?;
    if !removed.is_empty() {
        tracing::info!(
            files = removed.len(),
            "removed files of flushes that can never commit"
        );
    }
    if !recovery.newer.is_empty() {
        tracing::warn!(
            sequences = ?recovery.newer,
            "the sink holds intents of a writer that started after this one; this one will stop at its next commit"
        );
    }
    Ok(())
}

/// The pgoutput options of `START_REPLICATION`.
pub(super) fn stream_options(
    source: &SourceConfig,
    proto_version: u32,
) -> Vec<(&'static str, String)> {
    let mut options = vec![
        ("proto_version", proto_version.to_string()),
        ("publication_names", format!("\"{}\"", source.publication)),
    ];
    if proto_version >= 2 {
        // A transaction larger than logical_decoding_work_mem arrives in chunks as it is
        // written, instead of being spilled to disk on the server until it commits.
        options.push(("streaming", "on".into()));
        // Logical decoding messages (pg_logical_emit_message) reach the transforms; the
        // option exists from PostgreSQL 14, as protocol 2 does.
        options.push(("messages", "true".into()));
    }
    if source.binary {
        options.push(("binary", "true".into()));
    }
    options
}

/// `START_REPLICATION`, once no other consumer holds the slot.
#[allow(clippy::too_many_arguments)]
async fn hold_slot(
    pg: &crate::source::connect::PgConfig,
    client: &Client,
    replication: ReplicationConnection,
    source: &SourceConfig,
    proto_version: u32,
    start: Lsn,
    options: &RunOptions,
    shutdown: &Shutdown,
) -> Result<Option<ReplicationStream>, PipelineError> {
    let owned = stream_options(source, proto_version);
    let start_options: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let status_interval = Duration::from_secs(source.status_interval_secs);

    let waiting_since = Instant::now();
    let mut last_told: Option<Instant> = None;
    let mut replication = Some(replication);
    loop {
        let holder = provision::slot_state(client, &source.slot)
            .await?
            .and_then(|s| s.holder);
        if holder.is_none() {
            let connection = match replication.take() {
                Some(c) => c,
                None => crate::source::connect::replication(pg).await?,
            };
            match connection
                .start_logical(&source.slot, start, &start_options, status_interval)
                .await
            {
                Ok(stream) => {
                    tracing::info!(proto_version, "pgoutput protocol");
                    return Ok(Some(stream));
                }
                // Taken between the look and the start.
                Err(e) if e.code() == Some(SLOT_IN_USE) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let waited = waiting_since.elapsed();
        if !options.wait_for_slot && waited >= options.slot_grace {
            let holder = match holder {
                Some(holder) => holder,
                None => provision::slot_state(client, &source.slot)
                    .await?
                    .and_then(|s| s.holder)
                    .unwrap_or(SlotHolder {
                        pid: 0,
                        application_name: None,
                        client: None,
                        local: false,
                    }),
            };
            return Err(ProvisionError::SlotActive {
                slot: source.slot.clone(),
                holder,
                waited_secs: waited.as_secs(),
            }
            .into());
        }
        if last_told.is_none_or(|t| t.elapsed() >= WAIT_LOG_EVERY) {
            last_told = Some(Instant::now());
            let until = if options.wait_for_slot {
                "until it is released (--wait)".to_owned()
            } else {
                format!(
                    "up to {} s for it to be released",
                    options.slot_grace.as_secs()
                )
            };
            tracing::info!(
                slot = %source.slot,
                holder = %holder.as_ref().map_or_else(|| "?".to_owned(), |h| h.to_string()),
                waited_secs = waited.as_secs(),
                "the slot is held by another consumer; waiting {until}"
            );
        }
        let mut stop = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(SLOT_POLL) => {}
            _ = stop.wait_for(|s| *s) => return Ok(None),
        }
    }
}

/// Where the held stream starts, as the open entry needs it.
pub(super) struct OpenAt<'a> {
    /// Capturing from a slot (`false`: from the trigger journal, which has no slot to compare
    /// the log with; its ticks are, when it is opened).
    pub slot: bool,
    /// A gap of the trigger journal that `--accept-gap` named (a slot's is judged here).
    pub accepted: Option<AcceptedGap>,
    /// What the entries name as their source: the slot, or the journal.
    pub name: &'a str,
    pub timeline: u32,
    /// Where the lake's timeline ended in the server's history, if the pipeline can follow
    /// the move, or why not.
    pub switch: &'a preflight::Switch,
    /// A first run's decision, made from the log as first read.
    pub first_start: Option<&'a FirstStart>,
    /// The position `START_REPLICATION` named.
    pub start_at: Lsn,
    /// A first run's full load: the tables it loads.
    pub load: Option<Vec<String>>,
    /// A load asked for by the pipeline itself, due at this start whatever the log holds
    /// (trigger capture: a column came into a current-state table): the tables it loads.
    pub due: Option<Vec<String>>,
}

/// Read the log as it is now that this instance holds the slot, refuse a gap, and append the
/// open entry that fences every earlier writer.
pub(super) async fn open_log(
    log: &CommitLog,
    client: &Client,
    options: &RunOptions,
    at: OpenAt<'_>,
    limit: Option<Duration>,
    shutdown: &Shutdown,
) -> Result<(Checkpoint, CommitEntry), PipelineError> {
    let timeline = at.timeline;
    let mut shutdown = shutdown.clone();
    let mut holder = None;
    for _ in 0..OPEN_ATTEMPTS {
        let latest = log.latest().await?;
        let mut checkpoint = Checkpoint::from_entry(latest.as_ref());
        let (slot_confirmed, gap) = match at.slot {
            true => {
                let confirmed = provision::slot_state(client, at.name)
                    .await?
                    .and_then(|s| s.confirmed_flush_lsn);
                let gap =
                    checkpoint.check_slot(at.name, confirmed, options.accept_gap.as_deref())?;
                (confirmed, gap)
            }
            false => (None, false),
        };
        let moved =
            checkpoint.judge_timeline(timeline, at.switch, options.accept_gap.as_deref())?;
        let mut entry = checkpoint.open_entry(
            log.writer(),
            at.name,
            slot_confirmed.unwrap_or_default(),
            gap,
            timeline,
        );
        if at.accepted.is_some() {
            entry.accepted_gap = at.accepted;
        }
        match moved {
            TimelineMove::Same => {}
            TimelineMove::Accepted => tracing::warn!(
                timeline,
                "accepting the change of timeline named by --accept-gap; the commit log records it"
            ),
            TimelineMove::Followed(failover) => {
                tracing::warn!(
                    from = failover.from,
                    to = failover.to,
                    switch_point = %failover.switch_point,
                    lake_end = %failover.lake_end,
                    "the source is a promoted standby that synchronised the failover slot, and the lake ends at or before where the old timeline ended: going on from it; the commit log records the move"
                );
                entry.accepted_timeline = None;
                entry.failover = Some(failover);
            }
        }
        match (at.first_start, &latest) {
            // Another instance opened the log after the first read: the stream must not start
            // past where that log ends.
            (Some(_), Some(latest)) if at.start_at > checkpoint.confirmed() => {
                return Err(ProvisionError::StartRaced {
                    sequence: latest.sequence,
                    writer: latest.writer.to_string(),
                }
                .into());
            }
            (Some(first), None) => {
                let confirmed = slot_confirmed.unwrap_or_default();
                if at.slot {
                    position::check_held(first, at.name, confirmed)?;
                }
                entry = entry.starting(first.started(confirmed));
            }
            _ => {}
        }
        // A full load under way goes on in every entry until its last chunk lands; a first
        // run's starts with its open entry.
        let first_load = match (at.first_start, &latest) {
            (Some(_), None) => at
                .load
                .as_ref()
                .map(|tables| LoadState::pending(tables, false)),
            _ => at
                .due
                .as_ref()
                .map(|tables| LoadState::pending(tables, false)),
        };
        entry.load = first_load
            .or_else(|| latest.as_ref().and_then(|l| l.load.clone()))
            .filter(|state| !state.finished());
        // A journal's accepted gap was told of where it was judged.
        if let Some(accepted) = entry.accepted_gap.filter(|_| at.accepted.is_none()) {
            tracing::warn!(
                from = %accepted.from,
                to = %accepted.to,
                "accepting the gap named by --accept-gap: the changes between never reach this sink; the commit log records it"
            );
        }
        let committed = with_retry!(
            "opening the commit log",
            checkpoint.confirmed(),
            limit,
            &mut shutdown,
            log.commit(&entry)
        );
        match committed {
            Ok(()) => {
                checkpoint.advance(&entry)?;
                return Ok((checkpoint, entry));
            }
            // An earlier writer committed in between; it is fenced once we open after it.
            Err(CommitError::Conflict { holder: h, .. }) => {
                tracing::info!(sequence = entry.sequence, holder = %h, "an earlier writer committed while this one opened; reading the log again");
                holder = Some((entry.sequence, h));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let (sequence, holder) = holder.expect("every failed attempt names its holder");
    Err(CommitError::Contended { sequence, holder }.into())
}
