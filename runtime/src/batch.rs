//! Transaction assembly and batching, without IO.
//!
//! [`Assembler`] turns the decoder's message stream into whole [`Transaction`]s: Begin opens
//! one, row messages become typed [`Change`]s numbered by their ordinal in the transaction,
//! Commit closes it. [`Batcher`] collects committed transactions and says when a batch is due:
//! when it holds `max_rows` changes, `max_bytes` of decoded data, or its oldest transaction has
//! waited `max_delay`. Time is always passed in; nothing here reads a clock.
//!
//! A batch is the unit of a flush: it is transformed, encoded, uploaded and committed as one,
//! and holds whole transactions only, so the confirmed position always falls on a commit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Lsn;
use crate::change::{Batch, Change, Op, Transaction, Value};
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
        "pgoutput sent {message}, which needs a protocol feature this pipeline did not ask for"
    )]
    Unsupported { message: &'static str },
}

struct OpenTransaction {
    xid: u32,
    final_lsn: Lsn,
    changes: Vec<Change>,
    bytes: usize,
}

/// Builds whole transactions from decoded messages.
#[derive(Default)]
pub struct Assembler {
    open: Option<OpenTransaction>,
    last_commit: Lsn,
}

/// A committed transaction and the approximate size of its decoded data.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub transaction: Transaction,
    pub bytes: usize,
}

impl Assembler {
    pub fn new() -> Self {
        Assembler::default()
    }

    /// Feed one message; returns the transaction its Commit completed, if any.
    pub fn push(&mut self, message: LogicalMessage) -> Result<Option<Assembled>, BatchError> {
        match message {
            LogicalMessage::Begin { final_lsn, xid, .. } => {
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
                let open = self.take_open("commit")?;
                if open.final_lsn != commit_lsn {
                    return Err(BatchError::CommitMismatch {
                        xid: open.xid,
                        final_lsn: open.final_lsn,
                        commit_lsn,
                    });
                }
                self.last_commit = commit_lsn;
                Ok(Some(Assembled {
                    transaction: Transaction {
                        xid: open.xid,
                        commit_lsn,
                        end_lsn,
                        commit_time,
                        changes: open.changes,
                    },
                    bytes: open.bytes,
                }))
            }
            LogicalMessage::Insert { relation, new, .. } => {
                self.change(Op::Insert, relation, Some(&new), None)
            }
            LogicalMessage::Update {
                relation, old, new, ..
            } => {
                let old = old.as_ref().map(|o| o.tuple());
                self.change(Op::Update, relation, Some(&new), old)
            }
            LogicalMessage::Delete { relation, old, .. } => {
                self.change(Op::Delete, relation, None, Some(old.tuple()))
            }
            LogicalMessage::Truncate { relations, .. } => {
                for relation in relations {
                    self.change(Op::Truncate, relation, None, None)?;
                }
                Ok(None)
            }
            // The decoder keeps the relation cache; origins and types need nothing here.
            LogicalMessage::Relation { .. }
            | LogicalMessage::Type { .. }
            | LogicalMessage::Origin { .. } => Ok(None),
            // Logical decoding messages are not surfaced to transforms yet.
            LogicalMessage::Message { .. } => Ok(None),
            LogicalMessage::StreamStart { .. } => Err(unsupported("stream start")),
            LogicalMessage::StreamStop => Err(unsupported("stream stop")),
            LogicalMessage::StreamCommit { .. } => Err(unsupported("stream commit")),
            LogicalMessage::StreamAbort { .. } => Err(unsupported("stream abort")),
        }
    }

    fn take_open(&mut self, message: &'static str) -> Result<OpenTransaction, BatchError> {
        self.open.take().ok_or(BatchError::OutsideTransaction {
            message,
            after: self.last_commit,
        })
    }

    fn change(
        &mut self,
        op: Op,
        relation: Arc<Relation>,
        new: Option<&Tuple>,
        old: Option<&Tuple>,
    ) -> Result<Option<Assembled>, BatchError> {
        let after = self.last_commit;
        let open = self.open.as_mut().ok_or(BatchError::OutsideTransaction {
            message: op.as_str(),
            after,
        })?;
        let mut bytes = 64;
        let new = new
            .map(|t| typed_row(&relation, t, open, &mut bytes))
            .transpose()?;
        let old = old
            .map(|t| typed_row(&relation, t, open, &mut bytes))
            .transpose()?;
        let new = crate::toast::fill_from_old_image(&relation, new, old.as_deref());
        let seq = open.changes.len() as u32;
        open.changes.push(Change {
            op,
            relation,
            seq,
            new,
            old,
        });
        open.bytes += bytes;
        Ok(None)
    }
}

fn unsupported(message: &'static str) -> BatchError {
    BatchError::Unsupported { message }
}

fn typed_row(
    relation: &Relation,
    tuple: &Tuple,
    open: &OpenTransaction,
    bytes: &mut usize,
) -> Result<Vec<Value>, BatchError> {
    // The decoder has already checked that the tuple has one value per relation column.
    let error = |column: &str, reason: String| BatchError::Value {
        table: relation.qualified_name(),
        column: column.to_owned(),
        xid: open.xid,
        lsn: open.final_lsn,
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
                pgtype::decode_text(column.type_oid, column.type_modifier, text)
                    .map_err(|e| error(&column.name, e.to_string()))
            }
            TupleValue::Binary(_) => Err(error(
                &column.name,
                "binary tuple data arrived but the pipeline asked for text".into(),
            )),
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
    rows: usize,
    bytes: usize,
    oldest: Option<Instant>,
}

impl Batcher {
    pub fn new(limits: BatchLimits) -> Self {
        Batcher {
            limits,
            pending: Vec::new(),
            rows: 0,
            bytes: 0,
            oldest: None,
        }
    }

    pub fn push(&mut self, assembled: Assembled, now: Instant) {
        self.rows += assembled.transaction.changes.len();
        self.bytes += assembled.bytes;
        self.oldest.get_or_insert(now);
        self.pending.push(assembled.transaction);
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
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
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::pgoutput::{OldTuple, RelationColumn, ReplicaIdentity};

    fn relation() -> Arc<Relation> {
        Arc::new(Relation {
            id: 16384,
            namespace: "public".into(),
            name: "orders".into(),
            replica_identity: ReplicaIdentity::Default,
            columns: vec![
                RelationColumn {
                    name: "id".into(),
                    type_oid: 23,
                    type_modifier: -1,
                    key: true,
                },
                RelationColumn {
                    name: "note".into(),
                    type_oid: 25,
                    type_modifier: -1,
                    key: false,
                },
            ],
        })
    }

    fn tuple(id: &str, note: Option<&str>) -> Tuple {
        Tuple(vec![
            TupleValue::Text(Bytes::copy_from_slice(id.as_bytes())),
            note.map_or(TupleValue::Null, |n| {
                TupleValue::Text(Bytes::copy_from_slice(n.as_bytes()))
            }),
        ])
    }

    fn begin(xid: u32, lsn: u64) -> LogicalMessage {
        LogicalMessage::Begin {
            final_lsn: Lsn(lsn),
            commit_time: 1_000,
            xid,
        }
    }

    fn commit(lsn: u64) -> LogicalMessage {
        LogicalMessage::Commit {
            flags: 0,
            commit_lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
            commit_time: 1_000,
        }
    }

    fn insert(id: &str) -> LogicalMessage {
        LogicalMessage::Insert {
            xid: None,
            relation: relation(),
            new: tuple(id, Some("x")),
        }
    }

    #[test]
    fn assembles_a_transaction_with_ordinals() {
        let mut a = Assembler::new();
        assert_eq!(a.push(begin(7, 0x100)).unwrap(), None);
        a.push(insert("1")).unwrap();
        a.push(LogicalMessage::Update {
            xid: None,
            relation: relation(),
            old: Some(OldTuple::Key(tuple("1", None))),
            new: tuple("2", Some("y")),
        })
        .unwrap();
        a.push(LogicalMessage::Delete {
            xid: None,
            relation: relation(),
            old: OldTuple::Key(tuple("2", None)),
        })
        .unwrap();
        a.push(LogicalMessage::Truncate {
            xid: None,
            options: 0,
            relations: vec![relation()],
        })
        .unwrap();
        let done = a
            .push(commit(0x100))
            .unwrap()
            .expect("commit completes the transaction");
        let t = done.transaction;
        assert_eq!(
            (t.xid, t.commit_lsn, t.end_lsn),
            (7, Lsn(0x100), Lsn(0x108))
        );
        let ops: Vec<_> = t.changes.iter().map(|c| (c.op, c.seq)).collect();
        assert_eq!(
            ops,
            [
                (Op::Insert, 0),
                (Op::Update, 1),
                (Op::Delete, 2),
                (Op::Truncate, 3)
            ]
        );
        assert_eq!(t.changes[1].old.as_ref().unwrap()[1], Value::Null);
        assert!(t.changes[2].new.is_none() && t.changes[2].old.is_some());
        assert!(t.changes[3].new.is_none() && t.changes[3].old.is_none());
        assert!(done.bytes > 0);
    }

    #[test]
    fn refuses_rows_outside_a_transaction() {
        let mut a = Assembler::new();
        let err = a.push(insert("1")).unwrap_err();
        assert!(matches!(
            err,
            BatchError::OutsideTransaction {
                message: "insert",
                ..
            }
        ));
        assert!(matches!(
            a.push(commit(1)).unwrap_err(),
            BatchError::OutsideTransaction {
                message: "commit",
                ..
            }
        ));
    }

    #[test]
    fn refuses_nested_begin_and_mismatched_commit() {
        let mut a = Assembler::new();
        a.push(begin(1, 0x10)).unwrap();
        assert!(matches!(
            a.push(begin(2, 0x20)).unwrap_err(),
            BatchError::NestedBegin { .. }
        ));
        let err = a.push(commit(0x30)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "commit at 0/30 does not match the open transaction xid 1 that announced commit 0/10"
        );
    }

    #[test]
    fn batcher_cuts_on_rows_and_on_age() {
        let limits = BatchLimits {
            max_rows: 3,
            max_bytes: usize::MAX,
            max_delay: Duration::from_secs(1),
        };
        let mut b = Batcher::new(limits);
        let t0 = Instant::now();
        assert!(!b.is_due(t0) && b.deadline().is_none());

        let mut a = Assembler::new();
        let mut txn = |xid: u32, rows: usize| {
            a.push(begin(xid, u64::from(xid) * 0x100)).unwrap();
            for i in 0..rows {
                a.push(insert(&i.to_string())).unwrap();
            }
            a.push(commit(u64::from(xid) * 0x100)).unwrap().unwrap()
        };
        b.push(txn(1, 1), t0);
        assert!(!b.is_due(t0 + Duration::from_millis(999)));
        assert!(b.is_due(t0 + Duration::from_secs(1)), "age limit reached");
        b.push(txn(2, 2), t0 + Duration::from_millis(10));
        assert!(
            b.is_due(t0 + Duration::from_millis(10)),
            "row limit reached"
        );
        let batch = b.take().unwrap();
        assert_eq!(batch.transactions.len(), 2);
        assert_eq!(batch.lsn_range(), Some((Lsn(0x100), Lsn(0x200))));
        assert!(b.take().is_none() && b.deadline().is_none());
    }
}
