//! Transaction assembly, without network IO.
//!
//! [`Assembler`] turns the decoder's message stream into committed transactions. Transactions
//! reach it in two shapes:
//!
//! - **Whole** (every protocol version): Begin, row messages, Commit, with nothing else in
//!   between. Rows become typed [`Change`]s numbered by their ordinal in the transaction.
//! - **Streamed** (protocol 2 and later, `streaming 'on'`): the server sends a transaction that
//!   outgrows `logical_decoding_work_mem` in chunks before it commits. Each chunk sits between
//!   Stream Start and Stream Stop and names the top-level xid; chunks of several transactions
//!   interleave, and whole transactions may arrive between chunks. Inside a chunk, every row
//!   message carries the xid of the (sub)transaction that made it. The transaction ends with
//!   Stream Commit, or with Stream Abort: of the whole transaction (subxid equal to xid), or of
//!   one subtransaction (a rolled-back savepoint), whose changes alone are dropped.
//!
//! A streamed transaction lands exactly as it would had it arrived whole: the changes that
//! survived, in the order the server sent them, numbered 0.. at Stream Commit. The identity
//! (commit LSN, seq) of a change therefore does not depend on whether the server streamed the
//! transaction, which matters because a replay after a restart may arrive in either shape.
//!
//! **Memory.** A streamed transaction is large by definition (the server streams what outgrew
//! its own memory), so its row messages go to a spill medium (`assemble/spill.rs`) as they
//! arrive, tagged with their subtransaction; an abort of a subtransaction is a note, an abort
//! of the transaction drops the medium. A whole transaction is held typed in memory until it
//! outgrows `part_bytes`; the rest of it is spilled the same way. Either is then a
//! [`Completed::Spilled`]: read back after its commit in parts of about `part_bytes`, typed
//! and numbered as they are read, so no transaction is ever held whole in memory.
//!
//! Logical decoding messages (`pg_logical_emit_message`) travel with the transactions too.
//! A transactional one belongs to its transaction (to the streamed transaction whose chunk
//! carries it, dropped with it on abort, and with its subtransaction when it names one, which
//! PostgreSQL does not do: see docs/design.md) and is placed among the changes by the number of
//! changes before it, without taking a `seq`. A non-transactional
//! one is not part of any transaction; the server sends it as soon as it decodes it, between
//! transactions. It is held until the next transaction completes and travels with it
//! ([`Assembled::preceding`]), so it lands in the same flush as the first commit after it:
//! once that flush is confirmed, the server never sends the message again, and until then it
//! is replayed with that commit.

mod spill;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::Lsn;
use crate::stream::change::{Change, Message, Op, Transaction, Value};
use crate::wire::pgoutput::{LogicalMessage, Relation, Tuple, TupleValue};
use crate::wire::pgtype;
pub use spill::{SpillMedia, SpillMedium};
use spill::{SpillReader, SpillWriter};

/// The message stream does not form the transactions pgoutput promises, a value does not
/// read as its column's type, or a large transaction could not be spilled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    #[error("pgoutput sent {message} outside a transaction (after commit {after})")]
    OutsideTransaction { message: &'static str, after: Lsn },
    #[error("pgoutput sent begin for xid {xid} while xid {open} (commit {open_lsn}) was open")]
    NestedBegin { xid: u32, open: u32, open_lsn: Lsn },
    #[error(
        "commit at {commit_lsn} does not match the open transaction xid {xid} that announced commit {final_lsn}"
    )]
    CommitMismatch {
        xid: u32,
        final_lsn: Lsn,
        commit_lsn: Lsn,
    },
    #[error("table {table} column {column:?} in transaction {xid} (commit {lsn}): {reason}")]
    Value {
        table: String,
        column: String,
        xid: u32,
        lsn: Lsn,
        reason: String,
    },
    #[error("spilling transaction {xid} to {place}: {reason}; {remedy}")]
    Spill {
        xid: u32,
        /// Where the spill media are ([`SpillMedia::place`]).
        place: String,
        reason: String,
        remedy: String,
    },
    #[error("reading back the spilled changes of transaction {xid} (commit {lsn}): {reason}")]
    SpillRead { xid: u32, lsn: Lsn, reason: String },
    #[error(
        "pgoutput sent {message}, which needs a protocol feature this pipeline did not ask for"
    )]
    Unsupported { message: &'static str },
    #[error(
        "pgoutput sent {message} of prepared transaction {gid:?} (xid {xid}): the slot decodes \
         two-phase commit, which this pipeline does not land (it would confirm a prepared \
         transaction before its outcome is known); use a slot created without two_phase"
    )]
    TwoPhase {
        message: &'static str,
        xid: u32,
        gid: String,
    },
    #[error("pgoutput sent {message} while xid {open} (commit {open_lsn}) was open")]
    TransactionOpen {
        message: &'static str,
        open: u32,
        open_lsn: Lsn,
    },
    #[error("pgoutput sent {message} while a streamed chunk of xid {stream} was open")]
    ChunkOpen { message: &'static str, stream: u32 },
    #[error("pgoutput sent stream stop outside a streamed chunk")]
    StopOutsideChunk,
    #[error(
        "pgoutput started streaming xid {xid} anew while its earlier chunks were held; \
         the same transaction would land twice"
    )]
    StreamRestarted { xid: u32 },
    #[error(
        "pgoutput continued streaming xid {xid} but its first chunk never arrived; \
         the transaction would land incomplete"
    )]
    StreamNotStarted { xid: u32 },
    #[error(
        "pgoutput sent stream commit at {commit_lsn} for xid {xid}, which no stream started \
         (after commit {after})"
    )]
    UnknownStreamCommit {
        xid: u32,
        commit_lsn: Lsn,
        after: Lsn,
    },
}

/// Where large transactions go while they are open, and how large a part is.
#[derive(Debug, Clone)]
pub struct SpillSettings {
    /// Where spilled rows are held until their transaction commits.
    pub media: SpillMedia,
    /// A whole transaction past this decoded size continues in a spill medium; a spilled one
    /// is read back in parts of about this size.
    pub part_bytes: usize,
}

impl Default for SpillSettings {
    /// Spills held in memory: the pipeline gives media on disk.
    fn default() -> Self {
        SpillSettings {
            media: SpillMedia::memory(),
            part_bytes: 16 << 20,
        }
    }
}

/// A whole transaction between its Begin and Commit.
struct OpenTransaction {
    xid: u32,
    final_lsn: Lsn,
    /// Typed, in memory, until the transaction outgrows a part; the rest goes to `spill`.
    changes: Vec<Change>,
    /// `before_seq` counts the changes before each, spilled ones included.
    messages: Vec<Message>,
    bytes: usize,
    spill: Option<SpillWriter>,
}

impl OpenTransaction {
    fn raw_changes(&self) -> u64 {
        self.changes.len() as u64 + self.spill.as_ref().map_or(0, |s| s.records())
    }
}

/// A streamed transaction between its first chunk and its Stream Commit or Stream Abort: its
/// row messages are in a spill medium.
struct StreamedTransaction {
    spill: SpillWriter,
    /// Subtransactions rolled back: their rows are skipped when the spill is read back.
    aborted: HashSet<u32>,
    /// Each with the (sub)transaction that wrote it and the number of rows spilled before it.
    messages: Vec<(u32, u64, Message)>,
}

/// Where the next row message goes.
enum Target<'a> {
    Whole(&'a mut OpenTransaction),
    Streamed {
        top: u32,
        own: u32,
        transaction: &'a mut StreamedTransaction,
    },
}

/// Builds committed transactions from decoded messages, whole or streamed.
pub struct Assembler {
    settings: SpillSettings,
    open: Option<OpenTransaction>,
    /// Streamed transactions that have neither committed nor aborted, by top-level xid.
    streams: HashMap<u32, StreamedTransaction>,
    /// The top-level xid of the streamed chunk being received.
    chunk: Option<u32>,
    /// Non-transactional messages since the last completed transaction.
    preceding: Vec<Message>,
    last_commit: Lsn,
}

impl Default for Assembler {
    fn default() -> Self {
        Assembler::with_spill(SpillSettings::default())
    }
}

/// A committed transaction held in memory, with the approximate size of its decoded data.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub transaction: Transaction,
    /// Non-transactional messages that arrived after the previous completed transaction and
    /// before this one, in WAL order (their `before_seq` is not set yet: the batcher places them).
    pub preceding: Vec<Message>,
    pub bytes: usize,
}

/// What a Commit or Stream Commit completed.
#[derive(Debug)]
pub enum Completed {
    /// Small enough to have been held in memory.
    Whole(Assembled),
    /// Too large for memory: read it back in parts.
    Spilled(Spilled),
}

impl Completed {
    pub fn commit_lsn(&self) -> Lsn {
        match self {
            Completed::Whole(a) => a.transaction.commit_lsn,
            Completed::Spilled(s) => s.commit_lsn,
        }
    }

    /// The whole transaction in memory, however large: for tests and tools, never the
    /// pipeline.
    pub fn into_whole(self) -> Result<Assembled, AssembleError> {
        let mut spilled = match self {
            Completed::Whole(assembled) => return Ok(assembled),
            Completed::Spilled(spilled) => spilled,
        };
        let preceding = std::mem::take(&mut spilled.preceding);
        let mut whole: Option<Assembled> = None;
        while let Some(part) = spilled.next_part()? {
            match &mut whole {
                None => {
                    whole = Some(Assembled {
                        transaction: part.transaction,
                        preceding: preceding.clone(),
                        bytes: part.bytes,
                    })
                }
                Some(w) => {
                    w.transaction.changes.extend(part.transaction.changes);
                    w.transaction.messages.extend(part.transaction.messages);
                    w.bytes += part.bytes;
                }
            }
        }
        Ok(whole.expect("a spilled transaction has at least one part"))
    }
}

/// A committed transaction too large for memory, in a spill medium: [`next_part`](Self::next_part)
/// reads it back in parts, typed and numbered exactly as the whole transaction would be.
pub struct Spilled {
    pub xid: u32,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_time: i64,
    /// As [`Assembled::preceding`]: they go with the first part.
    pub preceding: Vec<Message>,
    /// Bytes the spill file holds, for the log.
    pub spilled_bytes: u64,
    /// The typed changes held before the transaction spilled (whole transactions only).
    head: std::vec::IntoIter<Change>,
    head_change_bytes: usize,
    reader: SpillReader,
    aborted: HashSet<u32>,
    /// By the number of rows (head and spilled, aborted ones included) before each.
    messages: VecDeque<(u64, Message)>,
    /// Rows passed so far, aborted ones included.
    raw: u64,
    /// The next change's ordinal: rows passed that survived.
    seq: u32,
    part_bytes: usize,
    finished: bool,
}

/// A part of a spilled transaction: a [`Transaction`] holding some of its changes (numbered as
/// in the whole) and the messages placed among them.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub transaction: Transaction,
    pub bytes: usize,
    /// No part follows.
    pub last: bool,
}

impl std::fmt::Debug for Spilled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spilled")
            .field("xid", &self.xid)
            .field("commit_lsn", &self.commit_lsn)
            .field("spilled_bytes", &self.spilled_bytes)
            .field(
                "rows_left",
                &(self.head.len() as u64 + self.reader.remaining()),
            )
            .finish_non_exhaustive()
    }
}

impl Spilled {
    /// About how large (decoded) each part is.
    pub fn part_bytes(&self) -> usize {
        self.part_bytes
    }

    /// The next part, or `None` after the last.
    pub fn next_part(&mut self) -> Result<Option<Part>, AssembleError> {
        if self.finished {
            return Ok(None);
        }
        let mut changes = Vec::new();
        let mut messages = Vec::new();
        let mut bytes = 0;
        loop {
            while self.messages.front().is_some_and(|(at, _)| *at <= self.raw) {
                let (_, mut message) = self.messages.pop_front().expect("checked");
                message.before_seq = self.seq;
                bytes += message_bytes(&message);
                messages.push(message);
            }
            if bytes >= self.part_bytes && !changes.is_empty() {
                break;
            }
            let mut change = if let Some(change) = self.head.next() {
                self.raw += 1;
                bytes += self.head_change_bytes;
                change
            } else {
                let row = self.reader.next_row().map_err(|e| self.read_error(e))?;
                let Some(row) = row else {
                    self.finished = true;
                    break;
                };
                self.raw += 1;
                if self.aborted.contains(&row.own) {
                    continue;
                }
                let mut row_bytes = CHANGE_BYTES;
                let (new, old) = typed_change(
                    &row.relation,
                    row.new.as_ref(),
                    row.old.as_ref(),
                    &mut row_bytes,
                )
                .map_err(|e| e.at(&row.relation, self.xid, self.commit_lsn))?;
                bytes += row_bytes;
                Change {
                    op: row.op,
                    relation: row.relation,
                    seq: 0,
                    new,
                    old,
                }
            };
            change.seq = self.seq;
            self.seq += 1;
            changes.push(change);
        }
        if self.head.len() == 0 && self.reader.remaining() == 0 && self.messages.is_empty() {
            self.finished = true;
        }
        Ok(Some(Part {
            transaction: Transaction {
                xid: self.xid,
                commit_lsn: self.commit_lsn,
                end_lsn: self.end_lsn,
                commit_time: self.commit_time,
                changes,
                messages,
                load: false,
            },
            bytes,
            last: self.finished,
        }))
    }

    fn read_error(&self, error: std::io::Error) -> AssembleError {
        AssembleError::SpillRead {
            xid: self.xid,
            lsn: self.commit_lsn,
            reason: error.to_string(),
        }
    }
}

impl Assembler {
    pub fn new() -> Self {
        Assembler::default()
    }

    pub fn with_spill(settings: SpillSettings) -> Self {
        Assembler {
            settings,
            open: None,
            streams: HashMap::new(),
            chunk: None,
            preceding: Vec::new(),
            last_commit: Lsn::default(),
        }
    }

    /// Forget every transaction not yet completed (a new replication session sends them
    /// again), keeping the settings.
    pub fn reset(&mut self) {
        *self = Assembler::with_spill(self.settings.clone());
    }

    /// Approximate decoded size of what is held in memory for transactions that have not
    /// committed yet (spilled rows are in their spill medium and not counted).
    pub fn held_bytes(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.bytes)
            + self
                .streams
                .values()
                .flat_map(|s| &s.messages)
                .map(|(_, _, m)| message_bytes(m))
                .sum::<usize>()
            + self.preceding.iter().map(message_bytes).sum::<usize>()
    }

    /// Nothing held: no transaction open, none streaming, no message waiting for one.
    pub fn is_idle(&self) -> bool {
        self.open.is_none()
            && self.chunk.is_none()
            && self.streams.is_empty()
            && self.preceding.is_empty()
    }

    /// Streamed transactions held: started, neither committed nor aborted yet.
    pub fn streams_in_progress(&self) -> usize {
        self.streams.len()
    }

    /// Feed one message; returns the transaction its Commit or Stream Commit completed, if
    /// any.
    pub fn push(&mut self, message: LogicalMessage) -> Result<Option<Completed>, AssembleError> {
        match message {
            LogicalMessage::Begin { final_lsn, xid, .. } => {
                self.refuse_in_chunk("begin")?;
                if let Some(open) = &self.open {
                    return Err(AssembleError::NestedBegin {
                        xid,
                        open: open.xid,
                        open_lsn: open.final_lsn,
                    });
                }
                self.open = Some(OpenTransaction {
                    xid,
                    final_lsn,
                    changes: Vec::new(),
                    messages: Vec::new(),
                    bytes: 0,
                    spill: None,
                });
                Ok(None)
            }
            LogicalMessage::Commit {
                commit_lsn,
                end_lsn,
                commit_time,
                ..
            } => {
                self.refuse_in_chunk("commit")?;
                let open = self.take_open("commit")?;
                if open.final_lsn != commit_lsn {
                    return Err(AssembleError::CommitMismatch {
                        xid: open.xid,
                        final_lsn: open.final_lsn,
                        commit_lsn,
                    });
                }
                self.last_commit = commit_lsn;
                self.commit_whole(open, end_lsn, commit_time).map(Some)
            }
            LogicalMessage::Insert {
                xid, relation, new, ..
            } => self.change(Op::Insert, xid, relation, Some(&new), None),
            LogicalMessage::Update {
                xid,
                relation,
                old,
                new,
            } => {
                let old = old.as_ref().map(|o| o.tuple());
                self.change(Op::Update, xid, relation, Some(&new), old)
            }
            LogicalMessage::Delete { xid, relation, old } => {
                self.change(Op::Delete, xid, relation, None, Some(old.tuple()))
            }
            LogicalMessage::Truncate { xid, relations, .. } => {
                for relation in relations {
                    self.change(Op::Truncate, xid, relation, None, None)?;
                }
                Ok(None)
            }
            // The decoder keeps the relation cache; origins and types need nothing here.
            LogicalMessage::Relation { .. }
            | LogicalMessage::Type { .. }
            | LogicalMessage::Origin { .. } => Ok(None),
            LogicalMessage::Message {
                xid,
                transactional,
                lsn,
                prefix,
                content,
            } => {
                let message = Message {
                    prefix,
                    content: content.to_vec(),
                    lsn,
                    before_seq: 0,
                };
                if transactional {
                    self.transactional_message(xid, message)?;
                } else {
                    self.preceding.push(message);
                }
                Ok(None)
            }
            LogicalMessage::StreamStart { xid, first_segment } => {
                self.stream_start(xid, first_segment)
            }
            LogicalMessage::StreamStop => {
                self.chunk.take().ok_or(AssembleError::StopOutsideChunk)?;
                Ok(None)
            }
            LogicalMessage::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_time,
                ..
            } => self.stream_commit(xid, commit_lsn, end_lsn, commit_time),
            LogicalMessage::StreamAbort { xid, subxid, .. } => self.stream_abort(xid, subxid),
            // The pipeline does not ask for two_phase: a prepared transaction then arrives
            // whole (or streamed) at COMMIT PREPARED, like any other.
            LogicalMessage::BeginPrepare { xid, gid, .. } => {
                Err(two_phase("begin prepare", xid, gid))
            }
            LogicalMessage::Prepare { xid, gid, .. } => Err(two_phase("prepare", xid, gid)),
            LogicalMessage::StreamPrepare { xid, gid, .. } => {
                Err(two_phase("stream prepare", xid, gid))
            }
            LogicalMessage::CommitPrepared { xid, gid, .. } => {
                Err(two_phase("commit prepared", xid, gid))
            }
            LogicalMessage::RollbackPrepared { xid, gid, .. } => {
                Err(two_phase("rollback prepared", xid, gid))
            }
        }
    }

    fn commit_whole(
        &mut self,
        open: OpenTransaction,
        end_lsn: Lsn,
        commit_time: i64,
    ) -> Result<Completed, AssembleError> {
        let commit_lsn = open.final_lsn;
        let Some(spill) = open.spill else {
            let transaction = Transaction {
                xid: open.xid,
                commit_lsn,
                end_lsn,
                commit_time,
                changes: open.changes,
                messages: open.messages,
                load: false,
            };
            return Ok(Completed::Whole(self.assembled(transaction, open.bytes)));
        };
        let spilled_bytes = spill.written();
        let reader = self.finish_spill(spill, open.xid)?;
        let head_change_bytes = open.bytes / open.changes.len().max(1);
        Ok(Completed::Spilled(Spilled {
            xid: open.xid,
            commit_lsn,
            end_lsn,
            commit_time,
            preceding: std::mem::take(&mut self.preceding),
            spilled_bytes,
            head: open.changes.into_iter(),
            head_change_bytes,
            reader,
            aborted: HashSet::new(),
            messages: open
                .messages
                .into_iter()
                .map(|m| (u64::from(m.before_seq), m))
                .collect(),
            raw: 0,
            seq: 0,
            part_bytes: self.settings.part_bytes,
            finished: false,
        }))
    }

    fn stream_start(
        &mut self,
        xid: u32,
        first_segment: bool,
    ) -> Result<Option<Completed>, AssembleError> {
        self.refuse_in_chunk("stream start")?;
        self.refuse_in_transaction("stream start")?;
        match (first_segment, self.streams.contains_key(&xid)) {
            (true, true) => return Err(AssembleError::StreamRestarted { xid }),
            (false, false) => return Err(AssembleError::StreamNotStarted { xid }),
            (true, false) => {
                let spill = self.create_spill(xid)?;
                self.streams.insert(
                    xid,
                    StreamedTransaction {
                        spill,
                        aborted: HashSet::new(),
                        messages: Vec::new(),
                    },
                );
            }
            (false, true) => {}
        }
        self.chunk = Some(xid);
        Ok(None)
    }

    fn stream_commit(
        &mut self,
        xid: u32,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    ) -> Result<Option<Completed>, AssembleError> {
        self.refuse_in_chunk("stream commit")?;
        self.refuse_in_transaction("stream commit")?;
        let streamed = self
            .streams
            .remove(&xid)
            .ok_or(AssembleError::UnknownStreamCommit {
                xid,
                commit_lsn,
                after: self.last_commit,
            })?;
        self.last_commit = commit_lsn;
        let spilled_bytes = streamed.spill.written();
        let reader = self.finish_spill(streamed.spill, xid)?;
        // Subtransaction aborts may have left gaps: reading back numbers what survived, as a
        // replay that arrives whole would.
        Ok(Some(Completed::Spilled(Spilled {
            xid,
            commit_lsn,
            end_lsn,
            commit_time,
            preceding: std::mem::take(&mut self.preceding),
            spilled_bytes,
            head: Vec::new().into_iter(),
            head_change_bytes: 0,
            reader,
            aborted: streamed.aborted,
            messages: streamed
                .messages
                .into_iter()
                .map(|(_, at, m)| (at, m))
                .collect(),
            raw: 0,
            seq: 0,
            part_bytes: self.settings.part_bytes,
            finished: false,
        })))
    }

    fn create_spill(&self, xid: u32) -> Result<SpillWriter, AssembleError> {
        SpillWriter::create(&self.settings.media).map_err(|e| spill_error(&self.settings, xid, e))
    }

    fn finish_spill(&self, spill: SpillWriter, xid: u32) -> Result<SpillReader, AssembleError> {
        spill
            .finish()
            .map_err(|e| spill_error(&self.settings, xid, e))
    }

    /// A completed transaction, with the non-transactional messages that preceded it.
    fn assembled(&mut self, transaction: Transaction, bytes: usize) -> Assembled {
        let preceding = std::mem::take(&mut self.preceding);
        Assembled {
            bytes: bytes + preceding.iter().map(message_bytes).sum::<usize>(),
            transaction,
            preceding,
        }
    }

    /// A transactional message goes where the next row message would, placed after the
    /// changes already held.
    fn transactional_message(
        &mut self,
        xid: Option<u32>,
        mut message: Message,
    ) -> Result<(), AssembleError> {
        match self.target("logical decoding message", xid)?.0 {
            Target::Whole(open) => {
                message.before_seq = open.raw_changes() as u32;
                open.bytes += message_bytes(&message);
                open.messages.push(message);
            }
            Target::Streamed {
                own, transaction, ..
            } => {
                let at = transaction.spill.records();
                transaction.messages.push((own, at, message));
            }
        }
        Ok(())
    }

    /// Drops the whole transaction (`subxid == xid`) or one subtransaction's changes. An abort
    /// of something not held drops nothing: the server also aborts subtransactions whose
    /// changes it never streamed.
    fn stream_abort(&mut self, xid: u32, subxid: u32) -> Result<Option<Completed>, AssembleError> {
        self.refuse_in_chunk("stream abort")?;
        self.refuse_in_transaction("stream abort")?;
        if subxid == xid {
            // Dropping the spill file removes it.
            self.streams.remove(&xid);
        } else if let Some(streamed) = self.streams.get_mut(&xid) {
            streamed.aborted.insert(subxid);
            streamed.messages.retain(|(own, _, _)| *own != subxid);
        }
        Ok(None)
    }

    fn refuse_in_chunk(&self, message: &'static str) -> Result<(), AssembleError> {
        match self.chunk {
            Some(stream) => Err(AssembleError::ChunkOpen { message, stream }),
            None => Ok(()),
        }
    }

    fn refuse_in_transaction(&self, message: &'static str) -> Result<(), AssembleError> {
        match &self.open {
            Some(open) => Err(AssembleError::TransactionOpen {
                message,
                open: open.xid,
                open_lsn: open.final_lsn,
            }),
            None => Ok(()),
        }
    }

    fn take_open(&mut self, message: &'static str) -> Result<OpenTransaction, AssembleError> {
        self.open.take().ok_or(AssembleError::OutsideTransaction {
            message,
            after: self.last_commit,
        })
    }

    /// Where the next row message or transactional message goes, borrowing only what it
    /// needs so the caller can still read the settings.
    fn target(
        &mut self,
        message: &'static str,
        xid: Option<u32>,
    ) -> Result<(Target<'_>, &SpillSettings), AssembleError> {
        let target =
            match self.chunk {
                Some(top) => Target::Streamed {
                    top,
                    own: xid.unwrap_or(top),
                    transaction: self
                        .streams
                        .get_mut(&top)
                        .ok_or(AssembleError::StreamNotStarted { xid: top })?,
                },
                None => Target::Whole(self.open.as_mut().ok_or(
                    AssembleError::OutsideTransaction {
                        message,
                        after: self.last_commit,
                    },
                )?),
            };
        Ok((target, &self.settings))
    }

    fn change(
        &mut self,
        op: Op,
        xid: Option<u32>,
        relation: Arc<Relation>,
        new: Option<&Tuple>,
        old: Option<&Tuple>,
    ) -> Result<Option<Completed>, AssembleError> {
        let (target, settings) = self.target(op.as_str(), xid)?;
        let spill_error = |xid: u32, e: std::io::Error| spill_error(settings, xid, e);
        match target {
            Target::Streamed {
                top,
                own,
                transaction,
            } => {
                transaction
                    .spill
                    .write(op, own, &relation, new, old)
                    .map_err(|e| spill_error(top, e))?;
            }
            Target::Whole(open) => {
                if let Some(spill) = &mut open.spill {
                    spill
                        .write(op, open.xid, &relation, new, old)
                        .map_err(|e| spill_error(open.xid, e))?;
                    return Ok(None);
                }
                let mut bytes = CHANGE_BYTES;
                let (new, old) = typed_change(&relation, new, old, &mut bytes)
                    .map_err(|e| e.at(&relation, open.xid, open.final_lsn))?;
                let seq = open.changes.len() as u32;
                open.changes.push(Change {
                    op,
                    relation,
                    seq,
                    new,
                    old,
                });
                open.bytes += bytes;
                if open.bytes >= settings.part_bytes {
                    // The rest of this transaction goes to a spill medium.
                    let spill = SpillWriter::create(&settings.media)
                        .map_err(|e| spill_error(open.xid, e))?;
                    open.spill = Some(spill);
                }
            }
        }
        Ok(None)
    }
}

fn spill_error(settings: &SpillSettings, xid: u32, error: std::io::Error) -> AssembleError {
    AssembleError::Spill {
        xid,
        place: settings.media.place().to_string(),
        reason: error.to_string(),
        remedy: settings.media.remedy().to_string(),
    }
}

fn two_phase(message: &'static str, xid: u32, gid: String) -> AssembleError {
    AssembleError::TwoPhase { message, xid, gid }
}

/// What a change costs in memory before its values: the change itself and its rows'
/// allocations. The decoded size of a batch, which budgets and batch limits count, should be
/// close to what it really occupies, or every budget over-admits.
pub(crate) const CHANGE_BYTES: usize = std::mem::size_of::<Change>() + 2 * 16;
/// What a value costs in memory beyond its text or binary form (the heap part of strings and
/// arrays, about as long as that form).
pub(crate) const VALUE_BYTES: usize = std::mem::size_of::<Value>();

/// Approximate decoded size of a logical decoding message.
fn message_bytes(message: &Message) -> usize {
    64 + message.prefix.len() + message.content.len()
}

/// A value that does not read as its column's type; the caller adds where it came from.
struct ValueError {
    column: String,
    reason: String,
}

impl ValueError {
    fn at(self, relation: &Relation, xid: u32, lsn: Lsn) -> AssembleError {
        AssembleError::Value {
            table: relation.qualified_name(),
            column: self.column,
            xid,
            lsn,
            reason: self.reason,
        }
    }
}

type NewAndOld = (Option<Vec<Value>>, Option<Vec<Value>>);

/// The typed new and old rows of a row message, with unchanged TOASTed values filled from the
/// old image where it has them; adds their approximate decoded size to `bytes`.
fn typed_change(
    relation: &Relation,
    new: Option<&Tuple>,
    old: Option<&Tuple>,
    bytes: &mut usize,
) -> Result<NewAndOld, ValueError> {
    let new = new.map(|t| typed_row(relation, t, bytes)).transpose()?;
    let old = old.map(|t| typed_row(relation, t, bytes)).transpose()?;
    let new = crate::stream::toast::fill_from_old_image(relation, new, old.as_deref());
    Ok((new, old))
}

fn typed_row(
    relation: &Relation,
    tuple: &Tuple,
    bytes: &mut usize,
) -> Result<Vec<Value>, ValueError> {
    // The decoder has already checked that the tuple has one value per relation column.
    let error = |column: &str, reason: String| ValueError {
        column: column.to_owned(),
        reason,
    };
    relation
        .columns
        .iter()
        .zip(&tuple.0)
        .map(|(column, value)| match value {
            TupleValue::Null => {
                *bytes += VALUE_BYTES;
                Ok(Value::Null)
            }
            TupleValue::UnchangedToast => {
                *bytes += VALUE_BYTES;
                Ok(Value::UnchangedToast)
            }
            TupleValue::Text(text) => {
                *bytes += VALUE_BYTES + text.len();
                pgtype::decode_text(&column.ty, text)
                    .map_err(|e| error(&column.name, e.to_string()))
            }
            TupleValue::Binary(data) => {
                *bytes += VALUE_BYTES + data.len();
                pgtype::decode_binary(&column.ty, data)
                    .map_err(|e| error(&column.name, e.to_string()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
