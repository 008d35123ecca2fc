//! The flush protocol as a state machine without IO: encoded flushes and results in, actions
//! out, time passed in.
//!
//! A flush is landed in five steps: its intent, its data files, its commit entry, the confirm
//! to the slot, and removing the intent. With Delta tables (`sink.format = "delta"`) a sixth
//! comes between the entry and the confirm: publishing, one Delta commit per output the flush
//! touched, in sequence order like the entries (see [`crate::lake::tables`]). [`FlushMachine`] decides which step of which flush
//! runs next and what a failure means; one IO task carries out its [`Action`]s and reports each
//! result back with [`FlushMachine::handle`]. Following quinn-proto's shape: `push` and
//! `handle` take inputs, `poll_action` yields what to do, `poll_timeout` says when to poll
//! again, and nothing here reads a clock or touches the sink.
//!
//! A flush may arrive in parts (a transaction too large for memory, read back from disk): each
//! part has an intent of its own, written before its files, and gives its memory back once its
//! files are up; the single commit entry, naming the files of every part, is written after the
//! last. A crash before it leaves only files the parts' intents name, which the next start
//! removes.
//!
//! Rules it keeps:
//!
//! - Intents and uploads of later flushes may run while an earlier flush is still uploading
//!   (at most [`MAX_UPLOADS`] uploads at once), but commit entries are written strictly in
//!   sequence order, each only after the one before it exists: the log never has a hole, and
//!   the slot is confirmed in commit order whatever finishes first.
//! - A sink failure that may pass (unreachable, timeout, 5xx, throttling: see
//!   [`SinkError::is_transient`](crate::lake::sink::SinkError::is_transient)) is retried with capped
//!   exponential backoff for as long as it lasts; everything else (no such bucket, access
//!   denied, refused credentials, a corrupt entry) stops the pipeline at once. A commit whose sequence number another writer took
//!   stops it after removing this writer's files of every flush that can no longer commit.
//! - A stop request while a step waits for its retry ends the retries at once: nothing past
//!   the confirmed position is confirmed, and the next start replays the rest.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::Lsn;
use crate::lake::commit::{
    Checkpoint, CommitEntry, CommitError, EntryKind, FORMAT, Failover, FileEntry, PluginRecord,
    Writer,
};
use crate::lake::tables::TableFile;

/// Uploads in flight at once, over all flushes.
pub const MAX_UPLOADS: usize = 4;
/// Flushes taken before the oldest has landed. Memory is bounded by the in-flight budget (a
/// flush's data leaves once uploaded); this bounds how far uploads run ahead of commits.
pub const MAX_FLIGHTS: usize = 8;
/// Backoff between attempts of a failing sink step.
pub const RETRY_MIN: Duration = Duration::from_millis(500);
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// A flush whose data files are encoded and named, ready to land; or one part of it.
#[derive(Debug, Clone)]
pub struct EncodedFlush {
    pub sequence: u64,
    /// Parts of one flush are numbered 0.. and pushed in order; a whole flush is part 0.
    pub part: u32,
    /// No part of this flush follows.
    pub last: bool,
    pub first_commit_lsn: Lsn,
    pub last_commit_lsn: Lsn,
    pub last_end_lsn: Lsn,
    /// Records only that the server's WAL moved on to `last_end_lsn` (an
    /// [`EntryKind::Advance`] entry: no transactions, no files).
    pub advance: bool,
    /// Transactions and changes this part completes and holds.
    pub transactions: u64,
    pub changes: u64,
    pub files: Vec<(FileEntry, Bytes)>,
    /// Changes plugins rejected that this part lands in the dead-letter output.
    pub dead_letters: u64,
    /// The plugins that made the files, when not the ones the machine started with (they were
    /// reloaded since).
    pub plugins: Option<std::sync::Arc<[PluginRecord]>>,
    /// A full load's chunk (an [`EntryKind::Load`] entry), not transactions.
    pub chunk: bool,
    /// While a load runs: its progress as of this flush, which the entry records.
    pub load: Option<crate::stream::load::LoadState>,
    /// With Delta tables: what each of `files` brings to its output's table.
    pub tables: Vec<TableFile>,
}

/// Which step of which flush an action is; results are reported with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActionId {
    pub sequence: u64,
    pub step: Step,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The intent of one part.
    Intent(u32),
    Upload(usize),
    Commit,
    /// The Delta commits of the flush's outputs.
    Publish,
    ClearIntent,
    Abandon,
}

/// What the IO task is to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Create the intent of one part of the flush, listing its files.
    WriteIntent { id: ActionId, files: Vec<String> },
    /// Create one data file; `size` is what an existing object of that name must measure.
    Upload {
        id: ActionId,
        path: String,
        bytes: Bytes,
        size: u64,
    },
    /// Create the commit entry.
    Commit {
        id: ActionId,
        entry: Box<CommitEntry>,
    },
    /// Every file of one part is up: its memory may go (infallible; no result is reported).
    PartUploaded {
        sequence: u64,
        part: u32,
        last: bool,
    },
    /// Commit the flush's files to their outputs' Delta tables as transaction `id.sequence`.
    Publish { id: ActionId, files: Vec<TableFile> },
    /// Tell the slot it may release WAL up to here (infallible; no result is reported).
    Confirm { lsn: Lsn },
    /// The flush is durable and confirmed: report it, release its memory.
    Landed { entry: Box<CommitEntry> },
    /// Remove the intents of a landed flush's parts.
    ClearIntent { id: ActionId, parts: u32 },
    /// Remove this writer's files and intents of a flush that can never commit.
    Abandon {
        id: ActionId,
        files: Vec<String>,
        parts: u32,
    },
    /// A step failed and will be tried again: say so.
    Retrying {
        what: &'static str,
        sequence: u64,
        attempts: u32,
        retry_in: Duration,
        error: String,
    },
    /// A step that was failing works again.
    Recovered { what: &'static str, attempts: u32 },
    /// Something that needs no retry went wrong: say so.
    Warning { message: String },
}

/// Why landing stopped.
#[derive(Debug)]
pub enum Stopped {
    /// A failure retrying cannot fix (another writer, a corrupt entry).
    Failed(CommitError),
    /// A stop request came while `what` kept failing.
    Interrupted { what: &'static str, confirmed: Lsn },
    /// `what` kept failing for longer than the retry limit.
    GaveUp {
        what: &'static str,
        failing_for: Duration,
        attempts: u32,
        error: String,
        confirmed: Lsn,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    /// Being carried out; `attempts` failed before, the first at `since`.
    Issued {
        attempts: u32,
        delay: Duration,
        since: Option<Instant>,
    },
    Retry {
        at: Instant,
        attempts: u32,
        delay: Duration,
        since: Instant,
    },
    Done,
}

impl State {
    fn due(&self, now: Instant) -> bool {
        match self {
            State::Waiting => true,
            State::Retry { at, .. } => *at <= now,
            _ => false,
        }
    }

    /// Mark it issued, keeping what earlier failures said.
    fn issue(&mut self) {
        *self = match *self {
            State::Retry {
                attempts,
                delay,
                since,
                ..
            } => State::Issued {
                attempts,
                delay,
                since: Some(since),
            },
            _ => State::Issued {
                attempts: 0,
                delay: Duration::ZERO,
                since: None,
            },
        };
    }

    fn is_issued(&self) -> bool {
        matches!(self, State::Issued { .. })
    }

    fn attempts(&self) -> u32 {
        match self {
            State::Retry { attempts, .. } | State::Issued { attempts, .. } => *attempts,
            _ => 0,
        }
    }
}

struct Flight {
    /// The parts pushed so far, as one: files appended, counts summed.
    flush: EncodedFlush,
    parts: Vec<PartFlight>,
    uploads: Vec<State>,
    commit: State,
    /// Done from the start unless the flush has files to publish to Delta tables.
    publish: State,
    /// Built when the commit is first issued, so that every retry writes the same bytes.
    entry: Option<CommitEntry>,
    landed: bool,
    clear: State,
}

/// One part of a flight: its intent and which of the flight's files are its own.
struct PartFlight {
    intent: State,
    files: std::ops::Range<usize>,
    uploaded: bool,
}

impl PartFlight {
    /// A part without files writes no intent.
    fn new(files: std::ops::Range<usize>) -> Self {
        let empty = files.is_empty();
        PartFlight {
            intent: if empty { State::Done } else { State::Waiting },
            files,
            uploaded: empty,
        }
    }
}

impl Flight {
    fn uploaded(&self) -> bool {
        self.flush.last
            && self.parts.iter().all(|p| p.intent == State::Done)
            && self.uploads.iter().all(|s| *s == State::Done)
    }

    /// No intent written yet (or none to write): nothing of it is in the sink.
    fn untouched(&self) -> bool {
        self.parts
            .iter()
            .all(|p| p.files.is_empty() || p.intent == State::Waiting)
    }

    fn states(&self) -> impl Iterator<Item = (&'static str, State)> + '_ {
        self.parts
            .iter()
            .map(|p| ("writing the intent", p.intent))
            .chain([
                ("writing the commit entry", self.commit),
                (PUBLISHING, self.publish),
            ])
            .chain(self.uploads.iter().map(|s| ("uploading data files", *s)))
    }

    fn paths(&self) -> Vec<String> {
        self.flush
            .files
            .iter()
            .map(|(f, _)| f.path.clone())
            .collect()
    }
}

const PUBLISHING: &str = "committing to the tables";

/// Whether every flight before the one polled has its commit entry, and is in its tables:
/// entries and Delta commits are made in sequence order.
#[derive(Clone, Copy)]
struct Earlier {
    committed: bool,
    published: bool,
}

/// Lands encoded flushes in order. See the module docs.
pub struct FlushMachine {
    checkpoint: Checkpoint,
    writer: Writer,
    slot: String,
    plugins: Vec<PluginRecord>,
    flights: VecDeque<Flight>,
    /// Flushes whose files must be removed before stopping (after losing the pipeline): the
    /// sequence, the files, the number of parts.
    abandon: Vec<(u64, Vec<String>, u32, State)>,
    pending: VecDeque<Action>,
    stopped: Option<Stopped>,
    /// A stop was requested: the next step that has to wait for a retry ends landing.
    stop_requested: bool,
    /// How long a step may keep failing before landing gives up; `None`: for as long as it
    /// fails.
    retry_limit: Option<Duration>,
    /// The source's timeline, recorded in every entry.
    timeline: Option<u32>,
    /// A promotion the reader followed, recorded in the next entry.
    failover: Option<Failover>,
    /// With Delta tables: every entry up to this one is in its tables.
    tables_through: Option<u64>,
    /// The position confirmed so far: the end of the last flush landed (committed and, with
    /// Delta tables, in its tables). The checkpoint runs ahead of it by flushes committed and
    /// not yet in their tables.
    confirmed: Lsn,
}

impl FlushMachine {
    pub fn new(
        checkpoint: Checkpoint,
        writer: Writer,
        slot: impl Into<String>,
        plugins: Vec<PluginRecord>,
    ) -> Self {
        let confirmed = checkpoint.confirmed();
        FlushMachine {
            checkpoint,
            writer,
            slot: slot.into(),
            plugins,
            flights: VecDeque::new(),
            abandon: Vec::new(),
            pending: VecDeque::new(),
            stopped: None,
            stop_requested: false,
            retry_limit: None,
            timeline: None,
            failover: None,
            tables_through: None,
            confirmed,
        }
    }

    /// Publish every flush to Delta tables; the tables hold every entry up to `through`.
    pub fn with_tables(mut self, through: u64) -> Self {
        self.tables_through = Some(through);
        self
    }

    /// Record the source server's `timeline` in every entry.
    pub fn with_timeline(mut self, timeline: u32) -> Self {
        self.timeline = Some(timeline);
        self
    }

    /// The reader followed a promotion of a standby: later entries record the new timeline,
    /// and the next one the move itself.
    pub fn followed(&mut self, failover: Failover) {
        self.timeline = Some(failover.to);
        self.failover = Some(failover);
    }

    /// How long a step may keep failing before landing gives up, if it ever does.
    pub fn retry_limit(&self) -> Option<Duration> {
        self.retry_limit
    }

    /// Give up on a step that keeps failing for `limit` (`retry.limit_secs`), instead of
    /// retrying it for as long as the fault lasts.
    pub fn with_retry_limit(mut self, limit: Option<Duration>) -> Self {
        self.retry_limit = limit;
        self
    }

    /// The next sequence number a pushed flush must carry.
    pub fn next_sequence(&self) -> u64 {
        self.flights
            .back()
            .map_or(self.checkpoint.next_sequence(), |f| f.flush.sequence + 1)
    }

    /// The position confirmed so far.
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// Flushes not yet landed.
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// Nothing left to do: every flush landed and its intent handled, or landing stopped and
    /// its cleanup is done.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
            && if self.stopped.is_some() {
                self.abandon.iter().all(|a| a.3 == State::Done)
            } else {
                self.flights.is_empty()
            }
    }

    /// Why landing stopped, once it has.
    pub fn take_stopped(&mut self) -> Option<Stopped> {
        self.stopped.take()
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// Whether to take another flush now: always the rest of one begun, and a new one while
    /// fewer than [`MAX_FLIGHTS`] are in flight.
    pub fn accepts(&self) -> bool {
        self.flights.back().is_some_and(|f| !f.flush.last) || self.flights.len() < MAX_FLIGHTS
    }

    /// Hand over the next flush, or the next part of the last one. A new flush's sequence
    /// must be [`next_sequence`](Self::next_sequence).
    pub fn push(&mut self, flush: EncodedFlush) {
        if flush.part > 0 {
            let flight = self
                .flights
                .back_mut()
                .filter(|f| f.flush.sequence == flush.sequence && !f.flush.last)
                .expect("a later part follows the earlier parts of its flush");
            assert_eq!(
                flush.part as usize,
                flight.parts.len(),
                "parts are pushed in order"
            );
            let first = flight.flush.files.len();
            flight
                .parts
                .push(PartFlight::new(first..first + flush.files.len()));
            flight
                .uploads
                .extend(std::iter::repeat_n(State::Waiting, flush.files.len()));
            flight.flush.files.extend(flush.files);
            flight.flush.tables.extend(flush.tables);
            flight.flush.transactions += flush.transactions;
            flight.flush.changes += flush.changes;
            flight.flush.dead_letters += flush.dead_letters;
            if flush.plugins.is_some() {
                flight.flush.plugins = flush.plugins;
            }
            if flush.load.is_some() {
                flight.flush.load = flush.load;
            }
            flight.flush.last_commit_lsn = flush.last_commit_lsn;
            flight.flush.last_end_lsn = flush.last_end_lsn;
            flight.flush.part = flush.part;
            flight.flush.last = flush.last;
            self.part_without_files(flush.sequence, flush.part, flush.last);
            return;
        }
        assert_eq!(
            flush.sequence,
            self.next_sequence(),
            "flushes are pushed in sequence"
        );
        let uploads = vec![State::Waiting; flush.files.len()];
        let parts = vec![PartFlight::new(0..flush.files.len())];
        let (sequence, last) = (flush.sequence, flush.last);
        let publish = match self.tables_through {
            Some(_) => State::Waiting,
            None => State::Done,
        };
        self.flights.push_back(Flight {
            flush,
            parts,
            uploads,
            commit: State::Waiting,
            publish,
            entry: None,
            landed: false,
            clear: State::Waiting,
        });
        self.part_without_files(sequence, 0, last);
    }

    /// A part without files (every row filtered out, or an advance) has nothing to upload: its
    /// memory goes at once.
    fn part_without_files(&mut self, sequence: u64, part: u32, last: bool) {
        let flight = self.flights.back().expect("just pushed");
        if flight.parts[part as usize].files.is_empty() {
            self.pending.push_back(Action::PartUploaded {
                sequence,
                part,
                last,
            });
        }
    }

    /// A stop was requested: landing goes on, unless a step is waiting for a retry or has to
    /// wait for one from now on, which ends it.
    pub fn stop(&mut self) {
        self.stop_requested = true;
        if self.stopped.is_some() {
            return;
        }
        let retrying = self.flights.iter().find_map(|f| {
            f.states()
                .find(|(_, s)| matches!(s, State::Retry { .. }))
                .map(|(what, _)| what)
        });
        if let Some(what) = retrying {
            self.stopped = Some(Stopped::Interrupted {
                what,
                confirmed: self.confirmed,
            });
        }
    }

    /// The result of an action.
    pub fn handle(&mut self, id: ActionId, result: Result<(), CommitError>, now: Instant) {
        if id.step == Step::Abandon {
            if let Some(a) = self.abandon.iter_mut().find(|a| a.0 == id.sequence) {
                // Best effort: what cannot be removed stays orphaned, named by no entry.
                a.3 = State::Done;
            }
            return;
        }
        let Some(index) = self
            .flights
            .iter()
            .position(|f| f.flush.sequence == id.sequence)
        else {
            return;
        };
        let what = match id.step {
            Step::Intent(_) => "writing the intent",
            Step::Upload(_) => "uploading data files",
            Step::Commit => "writing the commit entry",
            Step::Publish => PUBLISHING,
            Step::ClearIntent => "removing a landed flush's intent",
            Step::Abandon => unreachable!(),
        };
        let flight = &mut self.flights[index];
        let state = match id.step {
            Step::Intent(part) => &mut flight.parts[part as usize].intent,
            Step::Upload(k) => &mut flight.uploads[k],
            Step::Commit => &mut flight.commit,
            Step::Publish => &mut flight.publish,
            Step::ClearIntent => &mut flight.clear,
            Step::Abandon => unreachable!(),
        };
        match result {
            Ok(()) => {
                let attempts = state.attempts();
                *state = State::Done;
                if attempts > 0 {
                    self.pending.push_back(Action::Recovered { what, attempts });
                }
                match id.step {
                    Step::Commit => self.committed(index),
                    Step::Publish => self.published(index),
                    Step::Upload(k) => self.uploaded(index, k),
                    _ => {}
                }
            }
            // Removing the intent of a landed flush is bookkeeping: the next start removes it.
            Err(error) if id.step == Step::ClearIntent => {
                *state = State::Done;
                self.pending.push_back(Action::Warning {
                    message: format!(
                        "could not remove the intent of landed flush {}: {error}; the next start removes it",
                        id.sequence
                    ),
                });
            }
            Err(CommitError::Sink(error)) if error.is_transient() => {
                let (attempts, delay, since) = match *state {
                    State::Issued {
                        attempts,
                        delay,
                        since: Some(since),
                    } if attempts > 0 => (attempts + 1, (delay * 2).min(RETRY_MAX), since),
                    _ => (1, RETRY_MIN, now),
                };
                if let Some(limit) = self.retry_limit
                    && now.duration_since(since) >= limit
                {
                    self.stopped.get_or_insert(Stopped::GaveUp {
                        what,
                        failing_for: now.duration_since(since),
                        attempts,
                        error: error.to_string(),
                        confirmed: self.confirmed,
                    });
                    return;
                }
                *state = State::Retry {
                    at: now + delay,
                    attempts,
                    delay,
                    since,
                };
                self.pending.push_back(Action::Retrying {
                    what,
                    sequence: id.sequence,
                    attempts,
                    retry_in: delay,
                    error: error.to_string(),
                });
                if self.stop_requested {
                    self.stop();
                }
            }
            Err(error) => self.fail(error),
        }
    }

    /// File `k` of a flight is up: its bytes go, and with the last of its part, the part's
    /// memory.
    fn uploaded(&mut self, index: usize, k: usize) {
        let flight = &mut self.flights[index];
        flight.flush.files[k].1 = Bytes::new();
        let count = flight.parts.len();
        let Some((part, state)) = flight
            .parts
            .iter_mut()
            .enumerate()
            .find(|(_, p)| p.files.contains(&k))
        else {
            return;
        };
        if !state.uploaded
            && flight.uploads[state.files.clone()]
                .iter()
                .all(|s| *s == State::Done)
        {
            state.uploaded = true;
            self.pending.push_back(Action::PartUploaded {
                sequence: flight.flush.sequence,
                part: part as u32,
                last: flight.flush.last && part + 1 == count,
            });
        }
    }

    fn committed(&mut self, index: usize) {
        let flight = &mut self.flights[index];
        let entry = flight
            .entry
            .clone()
            .expect("a committed flight has its entry");
        if let Err(error) = self.checkpoint.advance(&entry) {
            self.fail(error);
            return;
        }
        // With Delta tables the flush lands once its tables have it, in order (see
        // `poll_action`).
        if self.tables_through.is_none() {
            self.land(index);
        }
    }

    /// A flush's outputs hold its files in their tables (or it has none to publish).
    fn published(&mut self, index: usize) {
        if let Some(through) = &mut self.tables_through {
            let done = self
                .flights
                .iter()
                .take_while(|f| f.commit == State::Done && f.publish == State::Done);
            if let Some(last) = done.last() {
                *through = (*through).max(last.flush.sequence);
            }
        }
        self.land(index);
    }

    /// The flush is in the log and, with Delta tables, in its tables: confirm it.
    fn land(&mut self, index: usize) {
        let flight = &mut self.flights[index];
        let entry = flight
            .entry
            .clone()
            .expect("a committed flight has its entry");
        flight.landed = true;
        self.confirmed = entry.last_end_lsn;
        self.pending.push_back(Action::Confirm {
            lsn: entry.last_end_lsn,
        });
        self.pending.push_back(Action::Landed {
            entry: Box::new(entry),
        });
    }

    fn fail(&mut self, error: CommitError) {
        if self.stopped.is_some() {
            return;
        }
        if matches!(
            error,
            CommitError::Conflict { .. } | CommitError::TableAhead { .. }
        ) {
            // Every flush not yet committed lost its sequence number: remove what it wrote.
            for flight in self
                .flights
                .iter()
                .filter(|f| f.commit != State::Done && !f.untouched())
            {
                self.abandon.push((
                    flight.flush.sequence,
                    flight.paths(),
                    flight.parts.len() as u32,
                    State::Waiting,
                ));
            }
        }
        self.stopped = Some(Stopped::Failed(error));
    }

    /// The next action to carry out, if any is due at `now`. `unix_micros` stamps commit
    /// entries.
    pub fn poll_action(&mut self, now: Instant, unix_micros: i64) -> Option<Action> {
        if let Some(action) = self.pending.pop_front() {
            return Some(action);
        }
        if self.stopped.is_some() {
            return self.abandon_action();
        }
        let uploads = self
            .flights
            .iter()
            .flat_map(|f| &f.uploads)
            .filter(|s| s.is_issued())
            .count();
        let mut earlier = Earlier {
            committed: true,
            published: true,
        };
        for index in 0..self.flights.len() {
            if let Some(action) = self.part_action(index, now, uploads) {
                return Some(action);
            }
            if let Some(action) = self.landing_action(index, now, unix_micros, earlier) {
                return Some(action);
            }
            let flight = &self.flights[index];
            earlier.committed &= flight.commit == State::Done;
            earlier.published &= flight.publish == State::Done;
        }
        // Landed flights whose intent is handled are finished, in order.
        while self
            .flights
            .front()
            .is_some_and(|f| f.landed && f.clear == State::Done)
        {
            self.flights.pop_front();
        }
        None
    }

    /// Once stopped, only removing what flushes that lost their sequence wrote is left: the
    /// next of those removals not yet issued.
    fn abandon_action(&mut self) -> Option<Action> {
        let (sequence, files, parts, state) =
            self.abandon.iter_mut().find(|a| a.3 == State::Waiting)?;
        state.issue();
        Some(Action::Abandon {
            id: ActionId {
                sequence: *sequence,
                step: Step::Abandon,
            },
            files: files.clone(),
            parts: *parts,
        })
    }

    /// The next intent or upload due of flight `index`'s parts: a part's files go up only
    /// once its intent names them, and at most [`MAX_UPLOADS`] (`uploads` are issued) at once.
    fn part_action(&mut self, index: usize, now: Instant, uploads: usize) -> Option<Action> {
        let flight = &mut self.flights[index];
        let sequence = flight.flush.sequence;
        for (p, part) in flight.parts.iter_mut().enumerate() {
            if part.intent.due(now) {
                part.intent.issue();
                let files = flight.flush.files[part.files.clone()]
                    .iter()
                    .map(|(f, _)| f.path.clone())
                    .collect();
                return Some(Action::WriteIntent {
                    id: ActionId {
                        sequence,
                        step: Step::Intent(p as u32),
                    },
                    files,
                });
            }
            if part.intent != State::Done || uploads >= MAX_UPLOADS {
                continue;
            }
            for k in part.files.clone() {
                let state = &mut flight.uploads[k];
                if state.due(now) {
                    state.issue();
                    let (file, bytes) = &flight.flush.files[k];
                    return Some(Action::Upload {
                        id: ActionId {
                            sequence,
                            step: Step::Upload(k),
                        },
                        path: file.path.clone(),
                        bytes: bytes.clone(),
                        size: file.bytes,
                    });
                }
            }
        }
        None
    }

    /// The next step due of flight `index` once its files are up: its commit entry, its Delta
    /// commits, and removing its intents once landed. Entries and Delta commits go in sequence
    /// order, each only after every `earlier` flight's.
    fn landing_action(
        &mut self,
        index: usize,
        now: Instant,
        unix_micros: i64,
        earlier: Earlier,
    ) -> Option<Action> {
        let flight = &mut self.flights[index];
        let sequence = flight.flush.sequence;
        if earlier.committed && flight.uploaded() && flight.commit.due(now) {
            flight.commit.issue();
            if flight.entry.is_none() {
                let entry = self.entry(index, unix_micros);
                self.flights[index].entry = Some(entry);
            }
            let entry = self.flights[index].entry.clone();
            return Some(Action::Commit {
                id: ActionId {
                    sequence,
                    step: Step::Commit,
                },
                entry: Box::new(entry.expect("built just now or at an earlier attempt")),
            });
        }
        if earlier.published
            && flight.commit == State::Done
            && flight.flush.tables.is_empty()
            && flight.publish == State::Waiting
        {
            // Nothing to add to a table: in its tables once the flushes before it are.
            flight.publish = State::Done;
            self.published(index);
            return self.pending.pop_front();
        }
        if earlier.published && flight.commit == State::Done && flight.publish.due(now) {
            flight.publish.issue();
            return Some(Action::Publish {
                id: ActionId {
                    sequence,
                    step: Step::Publish,
                },
                files: flight.flush.tables.clone(),
            });
        }
        if flight.landed && flight.clear == State::Waiting && flight.flush.files.is_empty() {
            // No part wrote an intent.
            flight.clear = State::Done;
        }
        if flight.landed && flight.clear == State::Waiting {
            flight.clear.issue();
            return Some(Action::ClearIntent {
                id: ActionId {
                    sequence,
                    step: Step::ClearIntent,
                },
                parts: flight.parts.len() as u32,
            });
        }
        None
    }

    /// The commit entry of flight `index`, stamped `unix_micros`. Built once, at the first
    /// attempt, so that every retry writes the same bytes; it carries a promotion the reader
    /// followed since the last entry.
    fn entry(&mut self, index: usize, unix_micros: i64) -> CommitEntry {
        let flush = &self.flights[index].flush;
        let kind = match (flush.advance, flush.chunk) {
            (true, _) => EntryKind::Advance,
            (false, true) => EntryKind::Load,
            (false, false) => EntryKind::Flush,
        };
        CommitEntry {
            format: FORMAT,
            kind,
            sequence: flush.sequence,
            writer: self.writer.clone(),
            slot: self.slot.clone(),
            first_commit_lsn: flush.first_commit_lsn,
            last_commit_lsn: flush.last_commit_lsn,
            last_end_lsn: flush.last_end_lsn,
            transactions: flush.transactions,
            changes: flush.changes,
            files: flush.files.iter().map(|(f, _)| f.clone()).collect(),
            plugins: flush
                .plugins
                .as_deref()
                .map_or_else(|| self.plugins.clone(), <[PluginRecord]>::to_vec),
            committed_at: unix_micros,
            accepted_gap: None,
            dead_letters: self.checkpoint.dead_letters() + flush.dead_letters,
            timeline: self.timeline,
            accepted_timeline: None,
            failover: self.failover.take(),
            started_from: None,
            load: flush.load.clone(),
            tables_through: self.tables_through,
        }
    }

    /// When a retry is due, if one waits.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.flights
            .iter()
            .flat_map(|f| f.states().map(|(_, s)| s))
            .filter_map(|s| match s {
                State::Retry { at, .. } => Some(at),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests;
