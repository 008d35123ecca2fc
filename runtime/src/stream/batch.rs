//! Batching, without IO: [`Batcher`] collects committed transactions and says when a batch is
//! due: when it holds `max_rows` changes, `max_bytes` of decoded data, or its oldest
//! transaction has waited `max_delay`. Time is always passed in; nothing here reads a clock.
//!
//! A batch is the unit of a flush: it is transformed, encoded, uploaded and committed as one,
//! and holds whole transactions only, so the confirmed position always falls on a commit. (A
//! transaction too large for memory is a flush of its own, delivered in parts: see
//! [`crate::stream::assemble::Spilled`].)

use std::time::{Duration, Instant};

use crate::stream::assemble::Assembled;
use crate::stream::change::{Batch, Message, Transaction};

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

    /// The oldest transaction pending.
    pub fn first(&self) -> Option<&Transaction> {
        self.pending.first()
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
