//! Journal rows as the pgoutput messages a slot would have sent for them. No IO.
//!
//! The read machine and every stage after it take a slot's frames; trigger capture hands them
//! frames built from the journal, so decoding, the type map, batching and landing are the
//! slot mode's. A transaction becomes `Begin`, a `Relation` wherever a table's layout is new
//! to the stream, its rows as `Insert`, `Update`, `Delete` and `Truncate` with text tuples (the
//! journal holds each value's output text, the form pgoutput sends), and `Commit`, at the
//! position it is given. The old row is sent as pgoutput sends it: whole under
//! `REPLICA IDENTITY FULL`, as the key otherwise, on an update only when the key changed.

use std::collections::HashMap;

use bytes::Bytes;

use crate::Lsn;
use crate::stream::read::Frame;
use crate::wire::pgoutput::encode::{self, Col, ColumnDef};
use crate::wire::pgoutput::tag;

/// A table's columns as the capture function saw them, under the number journal rows carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub id: i32,
    pub rel: u32,
    pub namespace: String,
    pub name: String,
    /// `relreplident`: `d` (default: the primary key), `i` (an index), `f` (full), `n`.
    pub identity: u8,
    pub columns: Vec<LayoutColumn>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutColumn {
    pub name: String,
    pub type_oid: u32,
    pub modifier: i32,
    pub key: bool,
}

/// What a journal row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Op {
    /// The journal's `op` letter.
    pub fn from_letter(letter: u8) -> Option<Op> {
        match letter {
            b'I' => Some(Op::Insert),
            b'U' => Some(Op::Update),
            b'D' => Some(Op::Delete),
            b'T' => Some(Op::Truncate),
            _ => None,
        }
    }
}

/// One journal row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRow {
    pub seq: i64,
    pub rel: u32,
    pub op: Op,
    /// The columns `old` and `new` follow. The capture functions always name one; a truncate
    /// row without one is sent without a `Relation`.
    pub layout: Option<i32>,
    /// One text per column of the layout (`None`: SQL NULL, or not part of the key).
    pub old: Option<Vec<Option<String>>>,
    pub new: Option<Vec<Option<String>>>,
}

/// A finished transaction's journal rows, in `seq` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalTxn {
    /// `pg_current_xact_id()`: the epoch in the high 32 bits.
    pub xid: u64,
    pub rows: Vec<JournalRow>,
}

impl JournalTxn {
    /// The `seq` of its last row: transactions handed on in this order replay each key's
    /// changes in commit order (see docs/design.md, Capture without a slot).
    pub fn last_seq(&self) -> i64 {
        self.rows.iter().map(|r| r.seq).max().unwrap_or(i64::MIN)
    }
}

/// Why journal rows cannot be sent on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("journal row {seq} names layout {layout}, which the layouts table does not hold")]
    NoLayout { seq: i64, layout: i32 },
    #[error(
        "journal row {seq} holds {found} values for layout {layout}, which has {expected} columns"
    )]
    Width {
        seq: i64,
        layout: i32,
        found: usize,
        expected: usize,
    },
    #[error("journal row {seq} ({op:?}) names no layout")]
    Unlaid { seq: i64, op: Op },
    #[error("journal row {seq} ({op:?}) has no {image} row")]
    Missing {
        seq: i64,
        op: Op,
        image: &'static str,
    },
}

/// Turns transactions into frames, remembering which layout each relation was last sent with.
#[derive(Debug, Default)]
pub struct Synthesizer {
    sent: HashMap<u32, i32>,
}

impl Synthesizer {
    /// Forget what was sent: the next transaction sends each relation again (after the read
    /// machine starts afresh).
    pub fn reset(&mut self) {
        self.sent.clear();
    }

    /// The frames of `txn` committed at `position` at `pg_time` (microseconds since
    /// 2000-01-01), its layouts from `layouts`.
    pub fn frames(
        &mut self,
        txn: &JournalTxn,
        position: Lsn,
        pg_time: i64,
        layouts: &HashMap<i32, Layout>,
    ) -> Result<Vec<Frame>, JournalError> {
        let mut frames = vec![begin(txn.xid, position, pg_time)];
        for row in &txn.rows {
            self.row(row, position, layouts, &mut frames)?;
        }
        frames.push(commit(position, pg_time));
        Ok(frames)
    }

    /// The frames of one row of the transaction at `position` into `out`: its table's
    /// `Relation` first where its layout is new to the stream.
    pub fn row(
        &mut self,
        row: &JournalRow,
        position: Lsn,
        layouts: &HashMap<i32, Layout>,
        out: &mut Vec<Frame>,
    ) -> Result<(), JournalError> {
        let frame = |data: Vec<u8>| Frame {
            wal_start: position,
            data: Bytes::from(data),
        };
        let Some(id) = row.layout else {
            if row.op != Op::Truncate {
                return Err(JournalError::Unlaid {
                    seq: row.seq,
                    op: row.op,
                });
            }
            out.push(frame(encode::truncate(None, 0, &[row.rel])));
            return Ok(());
        };
        let layout = layouts.get(&id).ok_or(JournalError::NoLayout {
            seq: row.seq,
            layout: id,
        })?;
        if self.sent.get(&row.rel) != Some(&layout.id) {
            out.push(frame(relation(layout)));
            self.sent.insert(row.rel, layout.id);
        }
        out.push(frame(change(row, layout)?));
        Ok(())
    }
}

/// The `Begin` of transaction `xid` (its low 32 bits, as pgoutput sends it), committed at
/// `position` at `pg_time`.
pub fn begin(xid: u64, position: Lsn, pg_time: i64) -> Frame {
    Frame {
        wal_start: position,
        data: Bytes::from(encode::begin(position.0, pg_time, xid as u32)),
    }
}

/// The `Commit` of the transaction at `position`.
pub fn commit(position: Lsn, pg_time: i64) -> Frame {
    Frame {
        wal_start: position,
        data: Bytes::from(encode::commit(position.0, position.0, pg_time)),
    }
}

fn relation(layout: &Layout) -> Vec<u8> {
    let columns: Vec<ColumnDef<'_>> = layout
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_oid, c.modifier, c.key))
        .collect();
    encode::relation(
        None,
        layout.rel,
        &layout.namespace,
        &layout.name,
        layout.identity,
        &columns,
    )
}

fn tuple<'a>(
    row: &JournalRow,
    layout: &Layout,
    values: Option<&'a Vec<Option<String>>>,
    image: &'static str,
) -> Result<Vec<Col<'a>>, JournalError> {
    let values = values.ok_or(JournalError::Missing {
        seq: row.seq,
        op: row.op,
        image,
    })?;
    if values.len() != layout.columns.len() {
        return Err(JournalError::Width {
            seq: row.seq,
            layout: layout.id,
            found: values.len(),
            expected: layout.columns.len(),
        });
    }
    Ok(values
        .iter()
        .map(|v| match v {
            Some(text) => Col::Text(text),
            None => Col::Null,
        })
        .collect())
}

fn change(row: &JournalRow, layout: &Layout) -> Result<Vec<u8>, JournalError> {
    let full = layout.identity == b'f';
    let marker = match full {
        true => tag::TUPLE_OLD,
        false => tag::TUPLE_KEY,
    };
    Ok(match row.op {
        Op::Insert => encode::insert(None, row.rel, &tuple(row, layout, row.new.as_ref(), "new")?),
        Op::Delete => {
            let old = tuple(row, layout, row.old.as_ref(), "old")?;
            encode::delete(None, row.rel, marker, &old)
        }
        Op::Update => {
            let new = tuple(row, layout, row.new.as_ref(), "new")?;
            let old = tuple(row, layout, row.old.as_ref(), "old")?;
            let key_changed = layout.columns.iter().enumerate().any(|(i, c)| {
                c.key && !matches!((&old[i], &new[i]), (Col::Text(a), Col::Text(b)) if a == b)
            });
            let old = (full || key_changed).then_some((marker, &old[..]));
            encode::update(None, row.rel, old, &new)
        }
        Op::Truncate => encode::truncate(None, 0, &[row.rel]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pgoutput::{Decoder, LogicalMessage};

    fn layout(id: i32, identity: u8, columns: &[(&str, u32, bool)]) -> Layout {
        Layout {
            id,
            rel: 16384,
            namespace: "public".into(),
            name: "t".into(),
            identity,
            columns: columns
                .iter()
                .map(|&(name, type_oid, key)| LayoutColumn {
                    name: name.into(),
                    type_oid,
                    modifier: -1,
                    key,
                })
                .collect(),
        }
    }

    fn row(
        seq: i64,
        op: Op,
        layout: i32,
        old: &[Option<&str>],
        new: &[Option<&str>],
    ) -> JournalRow {
        let image = |v: &[Option<&str>]| {
            (!v.is_empty()).then(|| v.iter().map(|x| x.map(str::to_owned)).collect())
        };
        JournalRow {
            seq,
            rel: 16384,
            op,
            layout: Some(layout),
            old: image(old),
            new: image(new),
        }
    }

    fn decoded(frames: &[Frame]) -> Vec<LogicalMessage> {
        let mut decoder = Decoder::new(1);
        frames
            .iter()
            .map(|f| decoder.decode_bytes(f.data.clone()).unwrap())
            .collect()
    }

    #[test]
    fn a_transaction_decodes_as_the_messages_a_slot_sends_for_it() {
        let layouts =
            HashMap::from([(1, layout(1, b'd', &[("id", 23, true), ("name", 25, false)]))]);
        let txn = JournalTxn {
            xid: (3 << 32) | 77,
            rows: vec![
                row(1, Op::Insert, 1, &[], &[Some("1"), Some("a")]),
                // The key did not change: no old tuple, as pgoutput sends it.
                row(
                    2,
                    Op::Update,
                    1,
                    &[Some("1"), None],
                    &[Some("1"), Some("b")],
                ),
                // It did: the old key goes with it.
                row(3, Op::Update, 1, &[Some("1"), None], &[Some("2"), None]),
                row(4, Op::Delete, 1, &[Some("2"), None], &[]),
                JournalRow {
                    seq: 5,
                    rel: 16384,
                    op: Op::Truncate,
                    layout: None,
                    old: None,
                    new: None,
                },
            ],
        };
        let mut synth = Synthesizer::default();
        let frames = synth.frames(&txn, Lsn(40), 1_000, &layouts).unwrap();
        assert!(frames.iter().all(|f| f.wal_start == Lsn(40)));
        let messages = decoded(&frames);
        let kinds: Vec<String> = messages
            .iter()
            .map(|m| {
                format!("{m:?}")
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "Begin", "Relation", "Insert", "Update", "Update", "Delete", "Truncate", "Commit"
            ]
        );
        let text = format!("{messages:?}");
        assert!(text.contains("xid: 77"), "{text}");
        assert!(matches!(
            &messages[3],
            LogicalMessage::Update { old: None, .. }
        ));
        assert!(matches!(
            &messages[4],
            LogicalMessage::Update { old: Some(_), .. }
        ));
        // The relation is sent again only when its layout changes.
        let again = synth.frames(&txn, Lsn(41), 1_000, &layouts).unwrap();
        assert_eq!(again.len(), frames.len() - 1);
    }

    #[test]
    fn rows_that_do_not_fit_their_layout_are_named() {
        let layouts = HashMap::from([(1, layout(1, b'f', &[("id", 23, true)]))]);
        let bad = JournalTxn {
            xid: 1,
            rows: vec![row(9, Op::Insert, 1, &[], &[Some("1"), Some("2")])],
        };
        let error = Synthesizer::default()
            .frames(&bad, Lsn(1), 0, &layouts)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "journal row 9 holds 2 values for layout 1, which has 1 columns"
        );
        let missing = JournalTxn {
            xid: 1,
            rows: vec![row(4, Op::Insert, 2, &[], &[Some("1")])],
        };
        assert_eq!(
            Synthesizer::default()
                .frames(&missing, Lsn(1), 0, &layouts)
                .unwrap_err(),
            JournalError::NoLayout { seq: 4, layout: 2 }
        );
        let mut unlaid = row(5, Op::Insert, 1, &[], &[Some("1")]);
        unlaid.layout = None;
        let unlaid = JournalTxn {
            xid: 1,
            rows: vec![unlaid],
        };
        assert_eq!(
            Synthesizer::default()
                .frames(&unlaid, Lsn(1), 0, &layouts)
                .unwrap_err(),
            JournalError::Unlaid {
                seq: 5,
                op: Op::Insert
            }
        );
    }
}
