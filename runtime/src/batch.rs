//! Transaction assembly and batching, without IO.
//!
//! [`Assembler`] turns the decoder's message stream into whole [`Transaction`]s. [`Batcher`]
//! collects committed transactions and says when a batch is due: when it holds `max_rows`
//! changes, `max_bytes` of decoded data, or its oldest transaction has waited `max_delay`.
//! Time is always passed in; nothing here reads a clock.
//!
//! Transactions reach the assembler in two shapes:
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
//!
//! A batch is the unit of a flush: it is transformed, encoded, uploaded and committed as one,
//! and holds whole transactions only, so the confirmed position always falls on a commit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Lsn;
use crate::change::{Batch, Change, Message, Op, Transaction, Value};
use crate::pgoutput::{LogicalMessage, Relation, Tuple, TupleValue};
use crate::pgtype;

/// The message stream does not form the transactions pgoutput promises, or a value does not
/// read as its column's type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
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
    #[error(
        "table {table} column {column:?} in streamed transaction {xid} (not yet committed): {reason}"
    )]
    StreamedValue {
        table: String,
        column: String,
        xid: u32,
        reason: String,
    },
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

/// A whole transaction between its Begin and Commit.
struct OpenTransaction {
    xid: u32,
    final_lsn: Lsn,
    changes: Vec<Change>,
    messages: Vec<Message>,
    bytes: usize,
}

/// A streamed transaction between its first chunk and its Stream Commit or Stream Abort.
#[derive(Default)]
struct StreamedTransaction {
    changes: Vec<StreamedChange>,
    /// Each with the (sub)transaction that wrote it; `before_seq` counts held changes.
    messages: Vec<(u32, Message)>,
    bytes: usize,
}

struct StreamedChange {
    /// The (sub)transaction that made the change, for a later subtransaction abort.
    xid: u32,
    bytes: usize,
    change: Change,
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

/// Builds whole transactions from decoded messages, whole or streamed.
#[derive(Default)]
pub struct Assembler {
    open: Option<OpenTransaction>,
    /// Streamed transactions that have neither committed nor aborted, by top-level xid.
    streams: HashMap<u32, StreamedTransaction>,
    /// The top-level xid of the streamed chunk being received.
    chunk: Option<u32>,
    /// Non-transactional messages since the last completed transaction.
    preceding: Vec<Message>,
    last_commit: Lsn,
}

/// A committed transaction and the approximate size of its decoded data.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub transaction: Transaction,
    /// Non-transactional messages that arrived after the previous completed transaction and
    /// before this one, in WAL order (their `before_seq` is not set yet: the batcher places them).
    pub preceding: Vec<Message>,
    pub bytes: usize,
}

impl Assembler {
    pub fn new() -> Self {
        Assembler::default()
    }

    /// Approximate decoded size of everything held for transactions that have not committed
    /// yet: the open whole transaction and every streamed one.
    pub fn held_bytes(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.bytes)
            + self.streams.values().map(|s| s.bytes).sum::<usize>()
            + self.preceding.iter().map(message_bytes).sum::<usize>()
    }

    /// Streamed transactions held: started, neither committed nor aborted yet.
    pub fn streams_in_progress(&self) -> usize {
        self.streams.len()
    }

    /// Feed one message; returns the transaction its Commit or Stream Commit completed, if
    /// any.
    pub fn push(&mut self, message: LogicalMessage) -> Result<Option<Assembled>, BatchError> {
        match message {
            LogicalMessage::Begin { final_lsn, xid, .. } => {
                self.refuse_in_chunk("begin")?;
                if let Some(open) = &self.open {
                    return Err(BatchError::NestedBegin {
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
                    return Err(BatchError::CommitMismatch {
                        xid: open.xid,
                        final_lsn: open.final_lsn,
                        commit_lsn,
                    });
                }
                self.last_commit = commit_lsn;
                Ok(Some(self.assembled(
                    Transaction {
                        xid: open.xid,
                        commit_lsn,
                        end_lsn,
                        commit_time,
                        changes: open.changes,
                        messages: open.messages,
                    },
                    open.bytes,
                )))
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
                self.chunk.take().ok_or(BatchError::StopOutsideChunk)?;
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

    fn stream_start(
        &mut self,
        xid: u32,
        first_segment: bool,
    ) -> Result<Option<Assembled>, BatchError> {
        self.refuse_in_chunk("stream start")?;
        self.refuse_in_transaction("stream start")?;
        match (first_segment, self.streams.contains_key(&xid)) {
            (true, true) => return Err(BatchError::StreamRestarted { xid }),
            (false, false) => return Err(BatchError::StreamNotStarted { xid }),
            (true, false) => {
                self.streams.insert(xid, StreamedTransaction::default());
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
    ) -> Result<Option<Assembled>, BatchError> {
        self.refuse_in_chunk("stream commit")?;
        self.refuse_in_transaction("stream commit")?;
        let streamed = self
            .streams
            .remove(&xid)
            .ok_or(BatchError::UnknownStreamCommit {
                xid,
                commit_lsn,
                after: self.last_commit,
            })?;
        self.last_commit = commit_lsn;
        let messages = streamed.messages.into_iter().map(|(_, m)| m).collect();
        // Subtransaction aborts may have left gaps: number what survived, as a replay that
        // arrives whole would.
        let changes = streamed
            .changes
            .into_iter()
            .enumerate()
            .map(|(seq, held)| Change {
                seq: seq as u32,
                ..held.change
            })
            .collect();
        Ok(Some(self.assembled(
            Transaction {
                xid,
                commit_lsn,
                end_lsn,
                commit_time,
                changes,
                messages,
            },
            streamed.bytes,
        )))
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
    ) -> Result<(), BatchError> {
        let bytes = message_bytes(&message);
        match self.target("logical decoding message", xid)? {
            Target::Whole(open) => {
                message.before_seq = open.changes.len() as u32;
                open.messages.push(message);
                open.bytes += bytes;
            }
            Target::Streamed {
                own, transaction, ..
            } => {
                message.before_seq = transaction.changes.len() as u32;
                transaction.messages.push((own, message));
                transaction.bytes += bytes;
            }
        }
        Ok(())
    }

    /// Drops the whole transaction (`subxid == xid`) or one subtransaction's changes. An abort
    /// of something not held drops nothing: the server also aborts subtransactions whose
    /// changes it never streamed.
    fn stream_abort(&mut self, xid: u32, subxid: u32) -> Result<Option<Assembled>, BatchError> {
        self.refuse_in_chunk("stream abort")?;
        self.refuse_in_transaction("stream abort")?;
        if subxid == xid {
            self.streams.remove(&xid);
        } else if let Some(streamed) = self.streams.get_mut(&xid) {
            let mut dropped = 0;
            // Positions of the dropped changes, ascending, to move the messages after them.
            let mut removed: Vec<u32> = Vec::new();
            let mut position = 0;
            streamed.changes.retain(|held| {
                let keep = held.xid != subxid;
                if !keep {
                    dropped += held.bytes;
                    removed.push(position);
                }
                position += 1;
                keep
            });
            streamed.messages.retain_mut(|(own, message)| {
                if *own == subxid {
                    dropped += message_bytes(message);
                    return false;
                }
                message.before_seq -= removed.partition_point(|&i| i < message.before_seq) as u32;
                true
            });
            streamed.bytes -= dropped;
        }
        Ok(None)
    }

    fn refuse_in_chunk(&self, message: &'static str) -> Result<(), BatchError> {
        match self.chunk {
            Some(stream) => Err(BatchError::ChunkOpen { message, stream }),
            None => Ok(()),
        }
    }

    fn refuse_in_transaction(&self, message: &'static str) -> Result<(), BatchError> {
        match &self.open {
            Some(open) => Err(BatchError::TransactionOpen {
                message,
                open: open.xid,
                open_lsn: open.final_lsn,
            }),
            None => Ok(()),
        }
    }

    fn take_open(&mut self, message: &'static str) -> Result<OpenTransaction, BatchError> {
        self.open.take().ok_or(BatchError::OutsideTransaction {
            message,
            after: self.last_commit,
        })
    }

    fn target(
        &mut self,
        message: &'static str,
        xid: Option<u32>,
    ) -> Result<Target<'_>, BatchError> {
        if let Some(top) = self.chunk {
            let transaction = self
                .streams
                .get_mut(&top)
                .ok_or(BatchError::StreamNotStarted { xid: top })?;
            return Ok(Target::Streamed {
                top,
                own: xid.unwrap_or(top),
                transaction,
            });
        }
        match self.open.as_mut() {
            Some(open) => Ok(Target::Whole(open)),
            None => Err(BatchError::OutsideTransaction {
                message,
                after: self.last_commit,
            }),
        }
    }

    fn change(
        &mut self,
        op: Op,
        xid: Option<u32>,
        relation: Arc<Relation>,
        new: Option<&Tuple>,
        old: Option<&Tuple>,
    ) -> Result<Option<Assembled>, BatchError> {
        let target = self.target(op.as_str(), xid)?;
        let mut bytes = 64;
        let rows = (|| {
            let new = new
                .map(|t| typed_row(&relation, t, &mut bytes))
                .transpose()?;
            let old = old
                .map(|t| typed_row(&relation, t, &mut bytes))
                .transpose()?;
            let new = crate::toast::fill_from_old_image(&relation, new, old.as_deref());
            Ok::<_, ValueError>((new, old))
        })();
        match target {
            Target::Whole(open) => {
                let (new, old) = rows.map_err(|e| BatchError::Value {
                    table: relation.qualified_name(),
                    column: e.column,
                    xid: open.xid,
                    lsn: open.final_lsn,
                    reason: e.reason,
                })?;
                let seq = open.changes.len() as u32;
                open.changes.push(Change {
                    op,
                    relation,
                    seq,
                    new,
                    old,
                });
                open.bytes += bytes;
            }
            Target::Streamed {
                top,
                own,
                transaction,
            } => {
                let (new, old) = rows.map_err(|e| BatchError::StreamedValue {
                    table: relation.qualified_name(),
                    column: e.column,
                    xid: top,
                    reason: e.reason,
                })?;
                // The final ordinal is only known at Stream Commit.
                let seq = transaction.changes.len() as u32;
                transaction.changes.push(StreamedChange {
                    xid: own,
                    bytes,
                    change: Change {
                        op,
                        relation,
                        seq,
                        new,
                        old,
                    },
                });
                transaction.bytes += bytes;
            }
        }
        Ok(None)
    }
}

fn two_phase(message: &'static str, xid: u32, gid: String) -> BatchError {
    BatchError::TwoPhase { message, xid, gid }
}

/// Approximate decoded size of a logical decoding message.
fn message_bytes(message: &Message) -> usize {
    64 + message.prefix.len() + message.content.len()
}

/// A value that does not read as its column's type; the caller adds where it came from.
struct ValueError {
    column: String,
    reason: String,
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
            TupleValue::Null => Ok(Value::Null),
            TupleValue::UnchangedToast => Ok(Value::UnchangedToast),
            TupleValue::Text(text) => {
                *bytes += text.len() + 16;
                pgtype::decode_text(&column.ty, text)
                    .map_err(|e| error(&column.name, e.to_string()))
            }
            TupleValue::Binary(data) => {
                *bytes += data.len() + 16;
                pgtype::decode_binary(&column.ty, data)
                    .map_err(|e| error(&column.name, e.to_string()))
            }
        })
        .collect()
}

/// When a batch is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub max_delay: Duration,
}

/// Collects committed transactions until a batch is due.
pub struct Batcher {
    limits: BatchLimits,
    pending: Vec<Transaction>,
    /// Non-transactional messages, placed among `pending`.
    messages: Vec<Message>,
    rows: usize,
    bytes: usize,
    oldest: Option<Instant>,
}

impl Batcher {
    pub fn new(limits: BatchLimits) -> Self {
        Batcher {
            limits,
            pending: Vec::new(),
            messages: Vec::new(),
            rows: 0,
            bytes: 0,
            oldest: None,
        }
    }

    pub fn push(&mut self, assembled: Assembled, now: Instant) {
        self.rows += assembled.transaction.changes.len();
        self.bytes += assembled.bytes;
        self.oldest.get_or_insert(now);
        let before = self.pending.len() as u32;
        self.messages
            .extend(assembled.preceding.into_iter().map(|message| Message {
                before_seq: before,
                ..message
            }));
        self.pending.push(assembled.transaction);
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Approximate decoded size of what is pending.
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// When the pending transactions must be flushed even if no more arrive.
    pub fn deadline(&self) -> Option<Instant> {
        self.oldest.map(|t| t + self.limits.max_delay)
    }

    /// A batch is due: a size limit is reached or the oldest transaction waited long enough.
    pub fn is_due(&self, now: Instant) -> bool {
        !self.pending.is_empty()
            && (self.rows >= self.limits.max_rows
                || self.bytes >= self.limits.max_bytes
                || self.deadline().is_some_and(|d| now >= d))
    }

    /// Everything pending, as one batch; `None` when nothing is pending.
    pub fn take(&mut self) -> Option<Batch> {
        if self.pending.is_empty() {
            return None;
        }
        self.rows = 0;
        self.bytes = 0;
        self.oldest = None;
        Some(Batch {
            transactions: std::mem::take(&mut self.pending),
            messages: std::mem::take(&mut self.messages),
        })
    }
}

#[cfg(test)]
mod tests;
