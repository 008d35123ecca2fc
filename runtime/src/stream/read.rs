//! The read stage's decisions as a state machine without IO: replication frames in, batches
//! and advances out, time passed in.
//!
//! [`ReadMachine`] owns what happens between the socket and the transforms: decoding the
//! pgoutput messages, assembling transactions, dropping the server's replays (at or below what
//! the sink held at start, or what was handed on before a reconnect), batching, the idle
//! advance, and numbering every flush it hands on. The read stage (`pipeline/read.rs`) carries
//! out its [`ReadAction`]s: it runs the catalog queries a relation needs, reads a spilled
//! transaction back, takes the in-flight budget, sends the cuts, reopens a lost connection and
//! runs a resync's load. Following the flush machine's shape (`lake/flush.rs`):
//! `handle_*` take inputs, [`ReadMachine::poll_action`] yields what to do,
//! [`ReadMachine::poll_timeout`] says when to poll again, and nothing here reads a clock or
//! touches a socket (a large transaction's spill file is the assembler's, see
//! [`crate::stream::assemble`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::Lsn;
use crate::stream::assemble::{AssembleError, Assembler, Completed, SpillSettings, Spilled};
use crate::stream::batch::{BatchLimits, Batcher};
use crate::stream::change::{Batch, Transaction};
use crate::stream::load::ResyncRequest;
use crate::wire::pgoutput::{DecodeError, Decoder, LogicalMessage, Relation};
use crate::wire::pgtype::ColumnType;

/// An idle pipeline records that the server's WAL moved on (an advance entry) once it moved
/// this far past the confirmed position (a WAL segment)...
pub const ADVANCE_BYTES: u64 = 16 << 20;
/// ...and at most this often, so that an idle slot retains about a segment and a minute of WAL
/// while the log gains at most one entry a minute...
pub const ADVANCE_EVERY: Duration = Duration::from_secs(60);
/// ...and only after nothing was handed on for this long: a busy pipeline confirms as it lands.
pub const ADVANCE_IDLE: Duration = Duration::from_secs(10);

/// One frame of the replication stream: a pgoutput message and where it starts in the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub wal_start: Lsn,
    pub data: Bytes,
}

/// What the sink held when the pipeline started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    /// The sequence number of the next flush.
    pub next_sequence: u64,
    /// The last commit landed and the confirmed position: the positions an entry keeps when
    /// nothing was handed on since the start.
    pub last_commit: Lsn,
    pub confirmed: Lsn,
    /// Transactions that committed at or below it are replays; `None` when the sink holds
    /// none.
    pub replays_through: Option<Lsn>,
}

/// How the machine reads.
#[derive(Debug, Clone)]
pub struct ReadSettings {
    /// The pgoutput protocol version the stream speaks.
    pub proto_version: u32,
    pub limits: BatchLimits,
    pub spill: SpillSettings,
    /// The tables the pipeline tracks, which a resync request is checked against.
    pub tracked: Vec<String>,
}

/// What the replication connection says when the stage looks whether the pipeline is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleFacts {
    /// Where the slot is confirmed to.
    pub confirmed: Lsn,
    /// The server's WAL position from its latest keepalive, when every frame before it was
    /// taken; `None` otherwise.
    pub idle_position: Option<Lsn>,
    /// The WAL position of the latest keepalive that asked for a reply.
    pub reply_wanted: Lsn,
}

/// What the read stage is to do.
#[derive(Debug)]
pub enum ReadAction {
    /// Resolve the column types of a relation that just arrived and answer with
    /// [`ReadMachine::handle_resolved`]: no frame is decoded until then.
    Resolve(Arc<Relation>),
    /// A `tributary resync` message in the batch the next [`ReadAction::Cut`] hands on asks
    /// for `tables` (those it named that are tracked) at `lsn`: record it in the load state
    /// that cut carries.
    Resync {
        lsn: Lsn,
        tables: Vec<String>,
        /// Tables it named that the pipeline does not track.
        unknown: Vec<String>,
    },
    /// A message under the resync prefix that is not a request: it is ignored.
    BadResync { lsn: Lsn, error: String },
    /// Hand `batch` on as flush `sequence`; `bytes` is its decoded size, for the budget.
    Cut {
        batch: Batch,
        sequence: u64,
        bytes: usize,
    },
    /// Hand a large transaction on as flush `sequence`, read back from disk in parts; what
    /// was pending went first, as a cut of its own.
    LandSpilled {
        spilled: Box<Spilled>,
        sequence: u64,
    },
    /// Hand on flush `sequence`, which records only that the server's WAL moved on to `end`;
    /// `last_commit` is the last commit handed on.
    Advance {
        sequence: u64,
        last_commit: Lsn,
        end: Lsn,
    },
    /// The frames handed in are decoded; `replays` transactions among them were replays and
    /// were dropped.
    Decoded { replays: u64 },
}

/// What a load chunk's entry records: its sequence number and the stream positions it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkTicket {
    pub sequence: u64,
    /// The last commit handed on and the end of the last flush handed on: a load does not
    /// move them.
    pub positions: (Lsn, Lsn),
}

/// Why reading stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("malformed pgoutput message at {lsn}: {source}")]
    Decode {
        lsn: Lsn,
        #[source]
        source: DecodeError,
    },
    #[error(transparent)]
    Assemble(#[from] AssembleError),
}

/// The read stage's state: see the module documentation.
pub struct ReadMachine {
    proto_version: u32,
    decoder: Decoder,
    assembler: Assembler,
    batcher: Batcher,
    tracked: Vec<String>,
    landed: Landed,
    next_sequence: u64,
    /// The commit LSN of the last transaction handed on: after a reconnect, the server sends
    /// again everything not yet confirmed, and what was already handed on is a replay.
    handed: Lsn,
    /// The end LSN of the last flush handed on: everything handed on has landed once the
    /// confirmed position reaches it.
    handed_end: Lsn,
    /// When the last flush was handed on (or the machine started).
    last_handed: Instant,
    /// When the last advance was handed on.
    advanced: Option<Instant>,
    /// A position to confirm past as soon as the stream is idle past it, without waiting for
    /// the idle advance's thresholds; dropped once the confirmed position reaches it.
    advance_past: Option<Lsn>,
    /// Frames not decoded yet, and when they arrived.
    frames: VecDeque<Frame>,
    arrived: Instant,
    /// Replays dropped among the frames handed in; `Some` until they are all decoded.
    decoding: Option<u64>,
    /// A relation message waiting for its types; assembled once they are answered.
    awaiting: Option<LogicalMessage>,
    resolved: Option<LogicalMessage>,
    actions: VecDeque<ReadAction>,
}

impl ReadMachine {
    /// A machine that starts reading after what the sink holds (`landed`); `now` counts as
    /// the last hand-over, for the idle advance.
    pub fn new(settings: ReadSettings, landed: Landed, now: Instant) -> Self {
        ReadMachine {
            proto_version: settings.proto_version,
            decoder: Decoder::new(settings.proto_version),
            assembler: Assembler::with_spill(settings.spill),
            batcher: Batcher::new(settings.limits),
            tracked: settings.tracked,
            landed,
            next_sequence: landed.next_sequence,
            handed: Lsn::ZERO,
            handed_end: Lsn::ZERO,
            last_handed: now,
            advanced: None,
            advance_past: None,
            frames: VecDeque::new(),
            arrived: now,
            decoding: None,
            awaiting: None,
            resolved: None,
            actions: VecDeque::new(),
        }
    }

    /// The end LSN of the last flush handed on: where the lake ends once everything handed
    /// on has landed.
    pub fn handed_end(&self) -> Lsn {
        self.handed_end
    }

    /// The oldest transaction of the batch being gathered: read, and not yet handed on.
    pub fn gathering(&self) -> Option<&Transaction> {
        self.batcher.first()
    }

    /// The sequence number the next flush takes.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// A full load ran before streaming and took the sequence numbers up to `next_sequence`;
    /// when it loaded every table at one snapshot (`covers_all`), what committed before it is
    /// in the lake already.
    pub fn loaded(&mut self, next_sequence: u64, covers_all: Option<Lsn>) {
        self.next_sequence = next_sequence;
        if let Some(at) = covers_all {
            self.handed = self.handed.max(at);
        }
    }

    /// Frames that arrived at `now`, in stream order.
    pub fn handle_frames(&mut self, frames: impl IntoIterator<Item = Frame>, now: Instant) {
        self.frames.extend(frames);
        self.arrived = now;
        self.decoding.get_or_insert(0);
    }

    /// The answer to [`ReadAction::Resolve`] for relation `id`: its resolved column types, or
    /// `None` when those the message gave stand; and which columns key its rows, or `None`
    /// when the message's flags stand.
    pub fn handle_resolved(
        &mut self,
        id: u32,
        types: Option<Vec<ColumnType>>,
        key: Option<Vec<bool>>,
    ) {
        let Some(message) = self.awaiting.take() else {
            return;
        };
        if let Some(types) = types {
            self.decoder.resolve_types(id, types);
        }
        if let Some(key) = key {
            self.decoder.resolve_key(id, &key);
        }
        self.resolved = Some(message);
    }

    /// The connection was lost: the whole transactions already received are cut (the next
    /// session's replays of them are dropped), the one in progress is forgotten (the server
    /// sends it again), and the next session starts with a fresh decoder, since it sends its
    /// relations again before their rows.
    pub fn handle_lost(&mut self, now: Instant) {
        self.frames.clear();
        self.awaiting = None;
        self.resolved = None;
        self.decoding = None;
        self.assembler.reset();
        self.cut(now);
        self.decoder = Decoder::new(self.proto_version);
    }

    /// Confirm a position past `lsn` soon: the next time the stream is idle past it (and
    /// everything handed on has landed), an advance is due at once, however little the WAL
    /// moved and however recently something was handed on. For the running-xacts record a
    /// start with a failover slot asks the primary for: the standby's copy of the slot
    /// persists only once the primary's slot was confirmed past one.
    pub fn advance_past(&mut self, lsn: Lsn) {
        self.advance_past = Some(lsn);
    }

    /// Look whether an advance is due: with nothing held, nothing pending and everything
    /// handed on landed, record where the server's WAL went (other databases and tables write
    /// it too), so that the slot does not retain it; at once when the server asks for a reply
    /// past the confirmed position (it shuts down).
    pub fn handle_idle(&mut self, facts: IdleFacts, now: Instant) {
        let IdleFacts {
            confirmed,
            idle_position,
            reply_wanted,
        } = facts;
        if !self.batcher.is_empty()
            || !self.assembler.is_idle()
            || !self.frames.is_empty()
            || self.awaiting.is_some()
            || confirmed < self.handed_end
        {
            return;
        }
        let Some(end) = idle_position else {
            return;
        };
        // A server shutting down waits for the confirmed position to reach everything its
        // walsender sent, asking for a reply until it does: then the advance is due at once,
        // or the shutdown never finishes.
        let asked = reply_wanted > confirmed;
        // Asked to confirm past a position: due once the stream is idle past it.
        let wanted = match self.advance_past {
            Some(lsn) if confirmed >= lsn => {
                self.advance_past = None;
                false
            }
            Some(lsn) => end >= lsn,
            None => false,
        };
        let elapsed = |since: Instant| now.saturating_duration_since(since);
        let due = asked
            || wanted
            || (end.0 >= confirmed.0.saturating_add(ADVANCE_BYTES)
                && elapsed(self.last_handed) >= ADVANCE_IDLE
                && self.advanced.is_none_or(|t| elapsed(t) >= ADVANCE_EVERY));
        if end <= confirmed || !due {
            return;
        }
        self.advanced = Some(now);
        self.handed_end = end;
        let sequence = self.take_sequence();
        self.actions.push_back(ReadAction::Advance {
            sequence,
            last_commit: self.handed.max(self.landed.last_commit),
            end,
        });
    }

    /// The stage hands on a load chunk at `now`: its sequence number and the positions its
    /// entry keeps.
    pub fn load_chunk(&mut self, now: Instant) -> ChunkTicket {
        let positions = (
            self.handed.max(self.landed.last_commit),
            self.handed_end.max(self.landed.confirmed),
        );
        self.last_handed = now;
        ChunkTicket {
            sequence: self.take_sequence(),
            positions,
        }
    }

    /// A stop: cut what is committed and pending; an open transaction is replayed next time.
    pub fn finish(&mut self, now: Instant) {
        self.frames.clear();
        self.cut(now);
    }

    /// The next thing to do, `None` until an input arrives or [`poll_timeout`] passes.
    ///
    /// [`poll_timeout`]: Self::poll_timeout
    pub fn poll_action(&mut self, now: Instant) -> Result<Option<ReadAction>, ReadError> {
        loop {
            if let Some(action) = self.actions.pop_front() {
                return Ok(Some(action));
            }
            if self.awaiting.is_some() {
                return Ok(None);
            }
            if let Some(message) = self.resolved.take() {
                self.assemble(message, now)?;
                continue;
            }
            if let Some(frame) = self.frames.pop_front() {
                self.decode(frame, now)?;
                continue;
            }
            if let Some(replays) = self.decoding.take() {
                return Ok(Some(ReadAction::Decoded { replays }));
            }
            if self.batcher.is_due(now) {
                self.cut(now);
                continue;
            }
            return Ok(None);
        }
    }

    /// When the pending batch is due even if nothing more arrives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.batcher.deadline()
    }

    fn decode(&mut self, frame: Frame, now: Instant) -> Result<(), ReadError> {
        let message =
            self.decoder
                .decode_bytes(frame.data)
                .map_err(|source| ReadError::Decode {
                    lsn: frame.wal_start,
                    source,
                })?;
        if let LogicalMessage::Relation { relation, .. } = &message {
            self.actions
                .push_back(ReadAction::Resolve(Arc::clone(relation)));
            self.awaiting = Some(message);
            return Ok(());
        }
        self.assemble(message, now)
    }

    fn assemble(&mut self, message: LogicalMessage, now: Instant) -> Result<(), ReadError> {
        let Some(done) = self.assembler.push(message)? else {
            return Ok(());
        };
        let commit = done.commit_lsn();
        if self.landed.replays_through.is_some_and(|l| commit <= l) || commit <= self.handed {
            if let Some(replays) = &mut self.decoding {
                *replays += 1;
            }
            return Ok(());
        }
        match done {
            Completed::Whole(assembled) => self.batcher.push(assembled, self.arrived),
            Completed::Spilled(spilled) => {
                // What is pending goes first, as a flush of its own.
                self.cut(now);
                self.handed = spilled.commit_lsn;
                self.handed_end = spilled.end_lsn;
                self.last_handed = now;
                let sequence = self.take_sequence();
                self.actions.push_back(ReadAction::LandSpilled {
                    spilled: Box::new(spilled),
                    sequence,
                });
            }
        }
        Ok(())
    }

    /// Cut the pending batch, if any: the resync requests it holds first, then the batch.
    fn cut(&mut self, now: Instant) {
        let bytes = self.batcher.held_bytes();
        let Some(batch) = self.batcher.take() else {
            return;
        };
        self.note_resync(&batch);
        if let Some((_, last)) = batch.lsn_range() {
            self.handed = last;
        }
        if let Some(t) = batch.transactions.last() {
            self.handed_end = t.end_lsn;
        }
        self.last_handed = now;
        let sequence = self.take_sequence();
        self.actions.push_back(ReadAction::Cut {
            batch,
            sequence,
            bytes,
        });
    }

    /// The `tributary resync` requests among the batch's messages, so that the entry of the
    /// batch records them.
    fn note_resync(&mut self, batch: &Batch) {
        for message in batch.transactions.iter().flat_map(|t| &t.messages) {
            let Some(request) = ResyncRequest::from_message(&message.prefix, &message.content)
            else {
                continue;
            };
            let action = match request {
                Ok(request) => {
                    let (tables, unknown) = request.select(&self.tracked);
                    ReadAction::Resync {
                        lsn: message.lsn,
                        tables,
                        unknown,
                    }
                }
                Err(error) => ReadAction::BadResync {
                    lsn: message.lsn,
                    error,
                },
            };
            self.actions.push_back(action);
        }
    }

    fn take_sequence(&mut self) -> u64 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        sequence
    }
}

#[cfg(test)]
mod tests;
