//! A full load: the rows the tracked tables held at one snapshot, landed ahead of the changes
//! committed after it. No IO here: the plan, the identities of load rows, the batches they
//! travel in, and the progress the commit log records. [`crate::source::snapshot`] reads the rows;
//! the pipeline's load stage runs the plan.
//!
//! **Identity and order.** A load row is an insert whose `_commit_lsn` is the snapshot's
//! position `P` (its consistent point): transactions that committed before `P` are in the
//! snapshot, later ones are streamed, and no commit record lies at `P` itself (it is a
//! running-transactions record). So sorting by `(_commit_lsn, _seq)` puts a table's load
//! after every change it already holds and before every change that follows. `_seq` is the
//! row's place in the heap, `block * 291 + offset` (291 tuples fit an 8 KiB page at most), so
//! chunks read in parallel number their rows without talking to each other, and `_seq = 0`
//! is left for the table's **load marker**: one row with `_op = "load"` and every column null,
//! which tells a reader to empty its copy of the table before the rows that follow. `_xid`
//! is 0, the id no PostgreSQL transaction has. A table too large for that numbering (more than
//! 14.7M pages) or a partitioned one (whose partitions' heaps overlap) is read in one chunk
//! and numbered in the order it is read.
//!
//! **Plugins** see a load chunk as a transaction with `xid` 0 and `commit-lsn` `P`, its
//! marker as a `truncate` and its rows as inserts, in parts like any large transaction.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Lsn;
use crate::stream::change::{Change, Op, Transaction, Value};
use crate::wire::pgoutput::Relation;

/// Most tuples one heap page can hold (`MaxHeapTuplesPerPage` for 8 KiB pages).
pub const TUPLES_PER_PAGE: u32 = 291;
/// The id no PostgreSQL transaction has: a load chunk's rows land with it (what marks the chunk
/// is [`Transaction::load`]).
pub const LOAD_XID: u32 = 0;

/// The prefix of the logical decoding message `tributary resync` writes; its content is a
/// [`ResyncRequest`] as JSON.
pub const RESYNC_PREFIX: &str = "tributary.resync";

/// What `tributary resync` asks a running pipeline for: a new full load of `tables` (every
/// tracked table when empty), after the changes committed before the request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResyncRequest {
    pub tables: Vec<String>,
}

impl ResyncRequest {
    /// The request a message holds, if it is one.
    pub fn from_message(prefix: &str, content: &[u8]) -> Option<Result<Self, String>> {
        (prefix == RESYNC_PREFIX).then(|| {
            serde_json::from_slice(content)
                .map_err(|e| format!("a {RESYNC_PREFIX} message that is not a request: {e}"))
        })
    }

    /// The tables of `tracked` it names, and those it names that are not tracked.
    pub fn select(&self, tracked: &[String]) -> (Vec<String>, Vec<String>) {
        if self.tables.is_empty() {
            return (tracked.to_vec(), Vec::new());
        }
        let (known, unknown) = self
            .tables
            .iter()
            .cloned()
            .partition(|t| tracked.contains(t));
        (known, unknown)
    }
}

/// The progress of a load, as every commit entry written while it runs records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadState {
    pub tables: Vec<TableLoad>,
    /// A resync asked for while streaming (`tributary resync`), not a pipeline's first load:
    /// the other tables' changes go on from the stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resync: bool,
    /// Tables a resync asked for while they were being loaded at a snapshot taken before the
    /// request: loaded again once this load ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<String>,
}

/// One table's part of a load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableLoad {
    /// `schema.table`.
    pub table: String,
    /// The snapshot it is read at: its load rows' `_commit_lsn`.
    pub snapshot_lsn: Lsn,
    /// Chunks in its plan (`None` until it is planned), and how many of them, from the
    /// first, in order, have landed.
    pub chunks: Option<u32>,
    pub done: u32,
    /// Rows landed so far.
    pub rows: u64,
}

impl TableLoad {
    pub fn finished(&self) -> bool {
        self.chunks == Some(self.done)
    }

    /// A table not yet planned, to load.
    pub fn pending(table: impl Into<String>) -> TableLoad {
        TableLoad {
            table: table.into(),
            snapshot_lsn: Lsn::ZERO,
            chunks: None,
            done: 0,
            rows: 0,
        }
    }
}

impl LoadState {
    /// Every table `tables` names, to load.
    pub fn pending(tables: &[String], resync: bool) -> LoadState {
        LoadState {
            tables: tables.iter().map(TableLoad::pending).collect(),
            resync,
            queued: Vec::new(),
        }
    }

    /// Whether every table has landed all of its chunks and none waits to be loaded again.
    pub fn finished(&self) -> bool {
        self.queued.is_empty() && self.tables.iter().all(TableLoad::finished)
    }

    /// Make the tables queued to be loaded again pending, so that the next load reads them.
    pub fn requeue(&mut self) {
        for table in std::mem::take(&mut self.queued) {
            match self.tables.iter_mut().find(|t| t.table == table) {
                Some(t) => *t = TableLoad::pending(table),
                None => self.tables.push(TableLoad::pending(table)),
            }
        }
    }

    /// The tables still to load, by name.
    pub fn unfinished(&self) -> Vec<String> {
        self.tables
            .iter()
            .filter(|t| !t.finished())
            .map(|t| t.table.clone())
            .collect()
    }
}

/// A running load as people see it: per table, what has been read and handed on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LoadProgress {
    pub tables: Vec<TableProgress>,
    /// Milliseconds since the load started.
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableProgress {
    pub table: String,
    pub chunks: u32,
    /// Chunks handed on whole.
    pub chunks_read: u32,
    pub rows: u64,
    /// Decoded bytes read.
    pub bytes: u64,
}

impl LoadProgress {
    /// How far the load is, from 0 to 1, by chunks.
    pub fn fraction(&self) -> f64 {
        let (read, all) = self.tables.iter().fold((0u64, 0u64), |(r, a), t| {
            (r + u64::from(t.chunks_read), a + u64::from(t.chunks))
        });
        if all == 0 {
            1.0
        } else {
            read as f64 / all as f64
        }
    }

    fn secs(&self) -> f64 {
        self.elapsed_ms as f64 / 1000.0
    }

    /// Rows per second so far.
    pub fn rate(&self) -> f64 {
        self.tables.iter().map(|t| t.rows).sum::<u64>() as f64 / self.secs().max(0.001)
    }

    /// Seconds still to go, at the rate so far; `None` before the first chunk.
    pub fn eta_secs(&self) -> Option<f64> {
        let done = self.fraction();
        (done > 0.0).then(|| self.secs() * (1.0 - done) / done)
    }

    /// One line: every table's rows and chunks, the rate, the time left.
    pub fn line(&self) -> String {
        let tables: Vec<String> = self
            .tables
            .iter()
            .map(|t| {
                format!(
                    "{} {} rows {} ({}/{} chunks)",
                    t.table,
                    t.rows,
                    crate::units::human_bytes(t.bytes),
                    t.chunks_read,
                    t.chunks
                )
            })
            .collect();
        let eta = self
            .eta_secs()
            .map_or_else(|| "?".to_owned(), |s| format!("{s:.0} s"));
        format!(
            "loading {:.0}%: {}; {:.0} rows/s, {eta} left",
            self.fraction() * 100.0,
            tables.join(", "),
            self.rate()
        )
    }
}

/// Which rows of a table one chunk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// The whole table, rows numbered in the order read.
    All,
    /// Heap pages `from..to` (`None`: to the end), rows numbered by their place.
    Range { from: u32, to: Option<u32> },
}

/// The chunks of a table of `pages` heap pages, at most `chunk_pages` each. The last one is
/// open-ended: pages added after the size was read hold no row the snapshot sees, but reading
/// them costs nothing and a size read early can only be short.
pub fn plan(pages: u32, chunk_pages: u32, numbered_by_place: bool) -> Vec<Pages> {
    if !numbered_by_place || pages > u32::MAX / TUPLES_PER_PAGE - 1 {
        return vec![Pages::All];
    }
    let chunk_pages = chunk_pages.max(1);
    let mut chunks = Vec::new();
    let mut from = 0u32;
    loop {
        let to = from.saturating_add(chunk_pages);
        if to >= pages {
            chunks.push(Pages::Range { from, to: None });
            return chunks;
        }
        chunks.push(Pages::Range { from, to: Some(to) });
        from = to;
    }
}

/// The `_seq` of the row at heap position `(block, offset)`; offsets start at 1.
pub fn seq_of_place(block: u32, offset: u16) -> u32 {
    block * TUPLES_PER_PAGE + u32::from(offset)
}

/// The load marker of `relation`: `_seq` 0, every column null.
pub fn marker(relation: &Arc<Relation>) -> Change {
    Change {
        op: Op::Load,
        relation: relation.clone(),
        seq: 0,
        new: Some(vec![Value::Null; relation.columns.len()]),
        old: None,
    }
}

/// A load row.
pub fn row(relation: &Arc<Relation>, seq: u32, values: Vec<Value>) -> Change {
    Change {
        op: Op::Insert,
        relation: relation.clone(),
        seq,
        new: Some(values),
        old: None,
    }
}

/// The transaction a part of a load chunk travels in.
pub fn transaction(snapshot_lsn: Lsn, snapshot_time: i64, changes: Vec<Change>) -> Transaction {
    Transaction {
        xid: LOAD_XID,
        commit_lsn: snapshot_lsn,
        end_lsn: snapshot_lsn,
        commit_time: snapshot_time,
        changes,
        messages: Vec::new(),
        load: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_cut_into_page_ranges_the_last_open_ended() {
        assert_eq!(
            plan(10, 4, true),
            vec![
                Pages::Range {
                    from: 0,
                    to: Some(4)
                },
                Pages::Range {
                    from: 4,
                    to: Some(8)
                },
                Pages::Range { from: 8, to: None },
            ]
        );
        assert_eq!(plan(8, 4, true).len(), 2, "no empty chunk after a full one");
        assert_eq!(plan(0, 4, true), vec![Pages::Range { from: 0, to: None }]);
        assert_eq!(plan(10, 4, false), vec![Pages::All], "partitioned tables");
        assert_eq!(
            plan(15_000_000, 4096, true),
            vec![Pages::All],
            "past u32 places"
        );
    }

    #[test]
    fn progress_says_how_far_how_fast_and_how_long() {
        let mut p = LoadProgress {
            tables: vec![TableProgress {
                table: "public.a".into(),
                chunks: 4,
                chunks_read: 0,
                rows: 0,
                bytes: 0,
            }],
            elapsed_ms: 2000,
        };
        assert_eq!(p.eta_secs(), None);
        p.tables[0].chunks_read = 1;
        p.tables[0].rows = 1000;
        p.tables[0].bytes = 2048;
        assert_eq!(p.fraction(), 0.25);
        assert_eq!(p.rate(), 500.0);
        assert_eq!(p.eta_secs(), Some(6.0));
        assert_eq!(
            p.line(),
            "loading 25%: public.a 1000 rows 2.0 KiB (1/4 chunks); 500 rows/s, 6 s left"
        );
    }

    #[test]
    fn places_number_rows_uniquely_past_the_marker() {
        assert_eq!(seq_of_place(0, 1), 1, "0 is the marker's");
        assert_eq!(seq_of_place(1, 1), TUPLES_PER_PAGE + 1);
        assert!(seq_of_place(0, 291) < seq_of_place(1, 1));
        let last_block = u32::MAX / TUPLES_PER_PAGE - 2;
        assert!(seq_of_place(last_block, 291) > seq_of_place(last_block, 290));
    }

    #[test]
    fn progress_counts_tables_whose_chunks_all_landed() {
        let t = |table: &str, chunks, done| TableLoad {
            table: table.into(),
            snapshot_lsn: Lsn(0x10),
            chunks: Some(chunks),
            done,
            rows: 0,
        };
        let state = LoadState {
            tables: vec![
                t("public.a", 3, 3),
                t("public.b", 2, 1),
                TableLoad::pending("public.c"),
            ],
            resync: false,
            queued: Vec::new(),
        };
        assert!(!state.finished());
        assert_eq!(state.unfinished(), ["public.b", "public.c"]);
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(serde_json::from_str::<LoadState>(&json).unwrap(), state);
        assert!(!json.contains("resync"), "{json}");
        assert!(!json.contains("queued"), "{json}");
    }

    #[test]
    fn a_table_queued_again_keeps_the_load_unfinished_until_it_is_read_anew() {
        let mut state = LoadState::pending(&["public.a".to_owned()], true);
        state.tables[0] = TableLoad {
            table: "public.a".into(),
            snapshot_lsn: Lsn(0x10),
            chunks: Some(2),
            done: 2,
            rows: 7,
        };
        assert!(state.finished());
        state.queued = vec!["public.a".into(), "public.b".into()];
        assert!(!state.finished(), "a queued table is still to load");
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(serde_json::from_str::<LoadState>(&json).unwrap(), state);
        state.requeue();
        assert!(state.queued.is_empty());
        assert_eq!(state.unfinished(), ["public.a", "public.b"]);
        assert_eq!(state.tables[0], TableLoad::pending("public.a"));
    }

    #[test]
    fn a_resync_request_names_tracked_tables_or_every_one() {
        let tracked = ["public.a".to_owned(), "public.b".to_owned()];
        let all = ResyncRequest::from_message(RESYNC_PREFIX, br#"{"tables": []}"#)
            .unwrap()
            .unwrap();
        assert_eq!(all.select(&tracked), (tracked.to_vec(), vec![]));
        let some = ResyncRequest {
            tables: vec!["public.b".into(), "public.x".into()],
        };
        assert_eq!(
            some.select(&tracked),
            (vec!["public.b".to_owned()], vec!["public.x".to_owned()])
        );
        assert!(ResyncRequest::from_message("audit", b"{}").is_none());
        let bad = ResyncRequest::from_message(RESYNC_PREFIX, b"nope").unwrap();
        assert!(bad.unwrap_err().contains("not a request"));
    }
}
