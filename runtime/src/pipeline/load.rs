//! The load stage: a full load's chunks read on several connections inside one snapshot, and
//! handed on in plan order, each chunk one flush (in parts), before streaming begins.
//!
//! Workers take chunks from a shared queue and read them on connections that imported the
//! snapshot; each chunk has a small queue of its own, so a worker ahead of the hand-over waits
//! with at most two parts read. The hand-over takes the chunks in plan order, gives each part
//! its share of the in-flight budget and sends it on as a [`Cut`]; a chunk's last part carries
//! the load's progress after it, which its commit entry records. Load entries leave the
//! stream positions where they were: the changes after the snapshot are streamed afterwards
//! from the slot's position, and a table's load marker sorts after those it supersedes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::PROGRESS_EVERY;
use super::budget::{Budget, PEAK_COPIES};
use super::error::PipelineError;
use super::messages::{Cut, Progress, Shutdown};
use crate::Lsn;
use crate::lake::commit::unix_micros;
use crate::source::catalog::Catalog;
use crate::source::snapshot::{Snapshot, SnapshotError, SourceTable};
use crate::stream::change::{Batch, Change};
use crate::stream::load::{self, LoadProgress, LoadState, Pages, TableLoad, TableProgress};
use crate::wire::pgoutput::Relation;

/// Parts of a chunk read ahead of the hand-over, per chunk: with the part being read, each
/// connection holds at most two parts outside the in-flight budget.
const READ_AHEAD: usize = 1;

/// A load to run before streaming.
pub(crate) struct LoadJob {
    /// The snapshot exported when the slot was created for this load; `None`: take one.
    pub anchor: Option<Snapshot>,
    /// Every tracked table, those loaded by an earlier run marked finished.
    pub state: LoadState,
}

/// How a load reads.
#[derive(Clone)]
pub(super) struct LoadSettings {
    pub pg: crate::source::connect::PgConfig,
    /// The publication whose column lists and row filters restrict what is loaded; `None`
    /// with trigger capture, which captures whole rows of every table it tracks.
    pub publication: Option<String>,
    pub binary: bool,
    /// A temporary slot's name, for a snapshot of its own.
    pub temporary_slot: String,
    pub parallelism: usize,
    pub chunk_pages: u32,
    /// Decoded bytes per part; `usize::MAX` hands each chunk on whole.
    pub part_bytes: usize,
    /// The positions the load's entries keep: the last commit landed and the confirmed one.
    pub positions: (Lsn, Lsn),
}

/// What a finished load tells the read stage.
pub(super) struct Loaded {
    pub next_sequence: u64,
    /// Every table was loaded at this one snapshot now: streamed transactions that committed
    /// before it are in the lake already.
    pub covers_all: Option<Lsn>,
    /// A stop came during the load; it stopped at a chunk's end.
    pub stopped: bool,
}

/// One chunk of the plan.
struct Chunk {
    table: usize,
    index: u32,
    pages: Pages,
}

/// A read part of a chunk, with what it occupies decoded; `None` says the chunk is read.
type Part = Result<Option<(Vec<Change>, usize)>, SnapshotError>;

/// The next part of a chunk, `None` once it is read; a connection that went away without
/// saying so is an error, never an empty chunk.
async fn next_part(
    rx: &mut mpsc::Receiver<Part>,
    table: &str,
    index: u32,
) -> Result<Option<(Vec<Change>, usize)>, PipelineError> {
    match rx.recv().await {
        Some(part) => Ok(part?),
        None => Err(PipelineError::Task(format!(
            "a full load's connection ended before it finished chunk {} of table {table}",
            index + 1
        ))),
    }
}

struct Planned {
    table: SourceTable,
    relation: Arc<Relation>,
    chunks: u32,
}

/// Run the load before streaming, sending its parts to `output` from sequence
/// `next_sequence` on.
pub(super) async fn run(
    job: LoadJob,
    settings: LoadSettings,
    next_sequence: u64,
    budget: Budget,
    output: mpsc::Sender<Cut>,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
) -> Result<Loaded, PipelineError> {
    let mut loading = Loading::start(job, &settings, progress).await?;
    let mut sequence = next_sequence;
    while loading.ready().await? {
        if *shutdown.borrow() {
            tracing::info!(
                sequence,
                "stopping during the full load, at a chunk's end; the next start loads the unfinished tables again"
            );
            return Ok(Loaded {
                next_sequence: sequence,
                covers_all: None,
                stopped: true,
            });
        }
        let handed = loading
            .hand_over(sequence, settings.positions, &budget, &output)
            .await?;
        sequence += 1;
        if !handed {
            // A later stage stopped; its error is the pipeline's.
            return Ok(Loaded {
                next_sequence: sequence,
                covers_all: None,
                stopped: true,
            });
        }
    }
    Ok(Loaded {
        next_sequence: sequence,
        covers_all: loading.finish(),
        stopped: false,
    })
}

/// A load under way: its connections read chunks inside one snapshot, and the read stage hands
/// them on one by one as they are ready, in plan order, between its own batches (a resync) or
/// before streaming (a first full load, [`run`]).
pub(super) struct Loading {
    /// What every entry records while the load runs: each table's progress, and tables asked
    /// for since it started, loaded after it.
    state: LoadState,
    planned: Arc<Vec<Planned>>,
    /// Each chunk's queue of read parts, in plan order.
    receivers: VecDeque<(usize, u32, mpsc::Receiver<Part>)>,
    /// The first part of the front chunk, once read.
    first: Option<Option<(Vec<Change>, usize)>>,
    tasks: tokio::task::JoinSet<()>,
    snapshot_lsn: Lsn,
    snapshot_time: i64,
    /// A first load of every table (not a resync of some, nor one some tables finished).
    covers_all: bool,
    shown: LoadProgress,
    progress: watch::Sender<Progress>,
    started: Instant,
    said: Instant,
    rows_read: u64,
}

/// The snapshot the load reads (`anchor`, or a new one) with the unfinished tables of `state`
/// as it sees them, each locked against DDL: a table that DDL changed after the snapshot was
/// taken is read under a new one, taken once the DDL is through.
async fn held(
    mut anchor: Option<Snapshot>,
    state: &LoadState,
    settings: &LoadSettings,
) -> Result<(Snapshot, Vec<SourceTable>), PipelineError> {
    let mut catalog = Catalog::new(settings.pg.clone(), settings.binary);
    loop {
        let snapshot = match anchor.take() {
            Some(anchor) => anchor,
            None => {
                tracing::info!(
                    tables = ?state.unfinished(),
                    "taking a snapshot for the load (a temporary slot; this waits for the transactions running now to end)"
                );
                Snapshot::take(&settings.pg, &settings.temporary_slot).await?
            }
        };
        let mut tables = Vec::new();
        let mut changed = None;
        for entry in state.tables.iter().filter(|t| !t.finished()) {
            let table = snapshot
                .table(&mut catalog, &entry.table, settings.publication.as_deref())
                .await?;
            if let Some(what) = snapshot.hold(&table).await? {
                changed = Some((table.name.clone(), what));
                break;
            }
            tables.push(table);
        }
        let Some((table, what)) = changed else {
            return Ok((snapshot, tables));
        };
        tracing::info!(%table, change = %what, snapshot = %snapshot.consistent_point(), "a table changed (DDL) after the load's snapshot was taken: taking another");
        snapshot.close().await?;
    }
}

impl Loading {
    /// Take the snapshot (or use the job's), plan the unfinished tables of `job` in chunks and
    /// start the connections reading them.
    pub async fn start(
        job: LoadJob,
        settings: &LoadSettings,
        progress: watch::Sender<Progress>,
    ) -> Result<Loading, PipelineError> {
        let started = Instant::now();
        let LoadJob { anchor, mut state } = job;
        state.requeue();
        let (anchor, tables) = held(anchor, &state, settings).await?;
        let snapshot_lsn = anchor.consistent_point();
        let snapshot_time = unix_micros();
        let covers_all = !state.resync && state.tables.iter().all(|t| !t.finished());

        // The plan, read inside the snapshot.
        let mut planned = Vec::new();
        let mut chunks = Vec::new();
        let unfinished = state.tables.iter_mut().filter(|t| !t.finished());
        for (entry, table) in unfinished.zip(tables) {
            let pages = anchor.pages(&table).await?;
            let plan = load::plan(pages, settings.chunk_pages, !table.partitioned());
            if entry.snapshot_lsn != Lsn::ZERO && entry.snapshot_lsn != snapshot_lsn {
                tracing::warn!(
                    table = %entry.table,
                    interrupted = %entry.snapshot_lsn,
                    snapshot = %snapshot_lsn,
                    "loading the table again under a new snapshot: the interrupted load's snapshot ended with its process; the rows it landed stay in the lake before the new load marker, which tells readers to drop them"
                );
            }
            *entry = TableLoad {
                table: entry.table.clone(),
                snapshot_lsn,
                chunks: Some(plan.len() as u32),
                done: 0,
                rows: 0,
            };
            let index = planned.len();
            chunks.extend(plan.into_iter().enumerate().map(|(i, pages)| Chunk {
                table: index,
                index: i as u32,
                pages,
            }));
            planned.push(Planned {
                relation: Arc::new(table.relation()),
                chunks: entry.chunks.unwrap_or(1),
                table,
            });
        }
        let tables: Vec<String> = planned.iter().map(|p| p.table.name.clone()).collect();
        let shown = LoadProgress {
            tables: planned
                .iter()
                .map(|p| TableProgress {
                    table: p.table.name.clone(),
                    chunks: p.chunks,
                    ..TableProgress::default()
                })
                .collect(),
            elapsed_ms: 0,
        };
        progress.send_modify(|p| p.load = Some(shown.clone()));
        tracing::info!(
            snapshot = %snapshot_lsn,
            tables = %tables.join(", "),
            chunks = chunks.len(),
            connections = settings.parallelism.min(chunks.len()).max(1),
            "full load: reading the tables as they were at the snapshot"
        );

        // Workers, each inside the snapshot; the anchor is the first.
        let workers = settings.parallelism.min(chunks.len()).max(1);
        let name = match workers > 1 {
            true => Some(anchor.export().await?),
            false => None,
        };
        let mut snapshots = vec![anchor];
        for _ in 1..workers {
            let name = name.as_deref().expect("exported for more than one worker");
            snapshots.push(Snapshot::import(&settings.pg, name, snapshot_lsn).await?);
        }
        let planned = Arc::new(planned);
        let mut receivers = VecDeque::new();
        let queue = Arc::new(Mutex::new(VecDeque::new()));
        for chunk in chunks {
            let (tx, rx) = mpsc::channel::<Part>(READ_AHEAD);
            receivers.push_back((chunk.table, chunk.index, rx));
            queue.lock().expect("never poisoned").push_back((chunk, tx));
        }
        let mut tasks = tokio::task::JoinSet::new();
        for snapshot in snapshots {
            let (queue, planned) = (queue.clone(), planned.clone());
            let part_bytes = settings.part_bytes;
            tasks.spawn(async move {
                loop {
                    let next = queue.lock().expect("never poisoned").pop_front();
                    let Some((chunk, tx)) = next else { break };
                    read_chunk(&snapshot, &planned[chunk.table], &chunk, part_bytes, &tx).await;
                }
                // The transaction ends with the connection; nothing was written.
                drop(snapshot);
            });
        }
        Ok(Loading {
            state,
            planned,
            receivers,
            first: None,
            tasks,
            snapshot_lsn,
            snapshot_time,
            covers_all,
            shown,
            progress,
            started,
            said: Instant::now(),
            rows_read: 0,
        })
    }

    /// What an entry written now records of the load.
    pub fn state(&self) -> &LoadState {
        &self.state
    }

    /// Wait until the next chunk's first part is read: `false` when every chunk was handed
    /// on. Cancel-safe: what arrived is kept for [`hand_over`](Self::hand_over).
    pub async fn ready(&mut self) -> Result<bool, PipelineError> {
        if self.first.is_some() {
            return Ok(true);
        }
        let Some((table, index, rx)) = self.receivers.front_mut() else {
            return Ok(false);
        };
        let name = &self.planned[*table].table.name;
        let first = next_part(rx, name, *index).await?;
        self.first = Some(first);
        Ok(true)
    }

    /// Hand the next chunk on as flush `sequence`, in parts, each with its share of `budget`;
    /// its entry keeps the stream `positions` (last commit landed, confirmed). Call after
    /// [`ready`](Self::ready) said `true`. `Ok(false)` when the next stage is gone.
    pub async fn hand_over(
        &mut self,
        sequence: u64,
        positions: (Lsn, Lsn),
        budget: &Budget,
        output: &mpsc::Sender<Cut>,
    ) -> Result<bool, PipelineError> {
        let first = self.first.take().expect("ready before hand_over");
        let (table, index, mut rx) = self.receivers.pop_front().expect("ready: a chunk is next");
        let planned = self.planned.clone();
        let p = &planned[table];
        // An empty chunk (its pages hold no row the snapshot sees) still lands its progress.
        let mut ended = first.is_none();
        let (mut changes, mut bytes) = first.unwrap_or_default();
        if index == 0 {
            changes.insert(0, load::marker(&p.relation));
        }
        let (last_commit, end) = positions;
        let mut part = 0u32;
        let mut chunk_rows = 0u64;
        loop {
            // Look one part ahead: the last part is the one the chunk's queue ends after.
            let next = match ended {
                true => None,
                false => next_part(&mut rx, &p.table.name, index).await?,
            };
            ended |= next.is_none();
            let last = next.is_none();
            let rows = changes.iter().filter(|c| c.seq != 0).count() as u64;
            chunk_rows += rows;
            self.rows_read += rows;
            let t = &mut self.shown.tables[table];
            t.rows += rows;
            t.bytes += bytes as u64;
            t.chunks_read += u32::from(last);
            self.shown.elapsed_ms = self.started.elapsed().as_millis() as u64;
            let shown = self.shown.clone();
            self.progress.send_modify(|p| p.load = Some(shown));
            if last {
                let entry = self
                    .state
                    .tables
                    .iter_mut()
                    .find(|t| t.table == p.table.name)
                    .expect("planned tables are in the state");
                entry.done += 1;
                entry.rows += chunk_rows;
            }
            let share = budget.take(bytes.saturating_mul(PEAK_COPIES)).await;
            let cut = Cut {
                batch: Batch {
                    transactions: vec![load::transaction(
                        self.snapshot_lsn,
                        self.snapshot_time,
                        changes,
                    )],
                    messages: Vec::new(),
                },
                sequence,
                part,
                last,
                advance: None,
                load: Some(super::LoadCut { last_commit, end }),
                state: last.then(|| self.state.clone()),
                share,
            };
            if output.send(cut).await.is_err() {
                self.tasks.abort_all();
                return Ok(false);
            }
            match next {
                Some((more, more_bytes)) => {
                    (changes, bytes) = (more, more_bytes);
                    part += 1;
                }
                None => break,
            }
        }
        if index + 1 == p.chunks {
            tracing::info!(table = %p.table.name, rows = chunk_rows_total(&self.state, &p.table.name), "table read; its last chunk is on its way to the lake");
        }
        if self.said.elapsed() >= PROGRESS_EVERY {
            self.said = Instant::now();
            tracing::info!("{}", self.shown.line());
        }
        Ok(true)
    }

    /// Note tables `tributary resync` asked for at `lsn` while this load runs: a table it
    /// does not load waits in the state for the next load; one it loads under a snapshot taken
    /// before the request is loaded again after it.
    pub fn request(&mut self, tables: Vec<String>, lsn: Lsn) {
        for table in tables {
            match self.state.tables.iter().find(|t| t.table == table) {
                None => self.state.tables.push(TableLoad::pending(&table)),
                Some(t) if t.snapshot_lsn == Lsn::ZERO || t.snapshot_lsn > lsn => {
                    tracing::info!(%table, "resync: the table is being loaded already, at a snapshot after the request");
                }
                Some(_) => {
                    tracing::info!(%table, "resync: the table is being loaded at a snapshot before the request; it is loaded again after this load");
                    if !self.state.queued.contains(&table) {
                        self.state.queued.push(table);
                    }
                }
            }
        }
    }

    /// The load after this one, once every chunk was handed on: the tables asked for since,
    /// if any, with the finished ones kept in the state.
    pub fn next_job(&self) -> Option<LoadJob> {
        let mut state = self.state.clone();
        state.requeue();
        (!state.finished()).then_some(LoadJob {
            anchor: None,
            state,
        })
    }

    /// Every chunk was handed on: say so. Returns the snapshot's position when it loaded every
    /// table (streamed transactions that committed before it are in the lake already).
    pub fn finish(mut self) -> Option<Lsn> {
        self.tasks.abort_all();
        self.progress.send_modify(|p| p.load = None);
        tracing::info!(
            rows = self.rows_read,
            tables = self.planned.len(),
            secs = format!("{:.1}", self.started.elapsed().as_secs_f64()),
            snapshot = %self.snapshot_lsn,
            "full load handed on"
        );
        self.covers_all.then_some(self.snapshot_lsn)
    }
}

fn chunk_rows_total(state: &LoadState, table: &str) -> u64 {
    state
        .tables
        .iter()
        .find(|t| t.table == table)
        .map_or(0, |t| t.rows)
}

/// Read one chunk into parts of about `part_bytes`, sent to `tx`; an error ends the chunk.
async fn read_chunk(
    snapshot: &Snapshot,
    planned: &Planned,
    chunk: &Chunk,
    part_bytes: usize,
    tx: &mpsc::Sender<Part>,
) {
    crate::failpoint::reached("load.before-chunk").await;
    let result = async {
        let mut rows = snapshot.read(&planned.table, chunk.pages).await?;
        let mut ordinal = 0u32;
        while let Some(read) = rows.next_rows(part_bytes).await? {
            let mut changes = Vec::with_capacity(read.len());
            let bytes = read.iter().map(|r| r.bytes).sum();
            for row in read {
                let seq = match row.place {
                    Some((block, offset)) => load::seq_of_place(block, offset),
                    None => {
                        ordinal =
                            ordinal
                                .checked_add(1)
                                .ok_or_else(|| SnapshotError::TooLarge {
                                    table: planned.table.name.clone(),
                                })?;
                        ordinal
                    }
                };
                changes.push(load::row(&planned.relation, seq, row.values));
            }
            if tx.send(Ok(Some((changes, bytes)))).await.is_err() {
                return Ok(());
            }
        }
        let _ = tx.send(Ok(None)).await;
        Ok::<(), SnapshotError>(())
    }
    .await;
    if let Err(error) = result {
        let _ = tx.send(Err(error)).await;
    }
}
