//! The pipeline's data model: typed values, changes, transactions, and the rows that
//! transforms emit into outputs.
//!
//! Everything after the decoder speaks these types; nothing here does IO.

use std::sync::Arc;

use crate::Lsn;
use crate::wire::pgoutput::Relation;
use crate::wire::pgtype::ColumnType;
// Typed values are the type module's: it reads them, everything after it carries them.
pub use crate::wire::pgtype::{Array, Value};

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Insert,
    Update,
    Delete,
    Truncate,
    /// The marker before a table's rows in a full load: readers empty their copy of the
    /// table (see [`crate::stream::load`]). Plugins see it as a truncate.
    Load,
}

impl Op {
    /// The value of the `_op` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Truncate => "truncate",
            Op::Load => "load",
        }
    }
}

/// One row-level change of a committed transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub op: Op,
    pub relation: Arc<Relation>,
    /// Ordinal of the change within its transaction, from 0. With the transaction's commit
    /// LSN it identifies the change: a replay produces the same pair.
    pub seq: u32,
    /// The new row (insert, update), in relation column order.
    pub new: Option<Vec<Value>>,
    /// The old row or old key (update, delete) when the replica identity sends one; columns
    /// outside the key are `Null` for a key-only image.
    pub old: Option<Vec<Value>>,
}

/// A committed transaction, whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    pub xid: u32,
    /// LSN of the commit record.
    pub commit_lsn: Lsn,
    /// LSN just past the commit record: what may be confirmed once this transaction is durable.
    pub end_lsn: Lsn,
    /// Microseconds since the Unix epoch.
    pub commit_time: i64,
    pub changes: Vec<Change>,
    /// The transaction's logical decoding messages (`pg_logical_emit_message(true, ...)`), in
    /// the order they were written; [`Message::before_seq`] places each among `changes`.
    pub messages: Vec<Message>,
    /// Set on a part of a full load's chunk, which is no committed transaction: a truncate in
    /// it is its table's load marker ([`Op::Load`]), which plugins see as a truncate.
    pub load: bool,
}

/// A logical decoding message: what `pg_logical_emit_message` wrote to the WAL.
///
/// Messages are not changes: they do not take a `seq`, so a change's identity is the same
/// whether or not messages were asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub prefix: String,
    pub content: Vec<u8>,
    /// LSN of the message's WAL record.
    pub lsn: Lsn,
    /// Where it falls among its neighbours: in [`Transaction::messages`], the number of the
    /// transaction's changes that precede it; in [`Batch::messages`], the number of the
    /// batch's transactions that precede it.
    pub before_seq: u32,
}

/// What one transform call receives: one or more whole transactions in commit order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub transactions: Vec<Transaction>,
    /// Non-transactional logical decoding messages (`pg_logical_emit_message(false, ...)`)
    /// written after the previous batch's last commit and before this batch's last commit, in
    /// WAL order. [`Message::before_seq`] counts the transactions that committed before each.
    pub messages: Vec<Message>,
}

impl Batch {
    pub fn change_count(&self) -> usize {
        self.transactions.iter().map(|t| t.changes.len()).sum()
    }

    /// Commit LSN of the first and last transaction.
    pub fn lsn_range(&self) -> Option<(Lsn, Lsn)> {
        Some((
            self.transactions.first()?.commit_lsn,
            self.transactions.last()?.commit_lsn,
        ))
    }
}

/// A column of an output: a name and the PostgreSQL type its values have.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutputColumn {
    pub name: String,
    /// The declared type.
    pub type_oid: u32,
    /// -1 when the type has no modifier.
    pub type_modifier: i32,
    /// What the declared type resolves to; decides the column's Arrow type.
    pub ty: ColumnType,
    /// Whether the column may hold null (every column of a table's output may).
    pub nullable: bool,
    /// Part of the output's key (recorded in the file's schema): as a plugin declared it, or,
    /// for a table's output, as the replica identity sends it (every column under
    /// `REPLICA IDENTITY FULL`).
    pub key: bool,
}

/// One row bound for an output, with the identity of the change it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputRow {
    pub op: Op,
    pub commit_lsn: Lsn,
    pub seq: u32,
    /// Tells apart the rows of a declared output that come from one change or message
    /// (`_sub`); 0 in a table's output, which holds one row per change.
    pub sub: u32,
    pub xid: u32,
    /// Microseconds since the Unix epoch.
    pub commit_time: i64,
    /// One value per output column, in column order.
    pub values: Vec<Value>,
    /// The row before an update or delete, as far as the replica identity sent it (key
    /// columns, or the whole row under `REPLICA IDENTITY FULL`); outputs derived from source
    /// tables land it in `_old`.
    pub old: Option<Vec<Value>>,
}

impl OutputRow {
    /// A row of transaction `tx`, its commit LSN, xid and commit time taken from it.
    pub fn of(
        tx: &Transaction,
        op: Op,
        seq: u32,
        sub: u32,
        values: Vec<Value>,
        old: Option<Vec<Value>>,
    ) -> OutputRow {
        OutputRow {
            op,
            commit_lsn: tx.commit_lsn,
            seq,
            sub,
            xid: tx.xid,
            commit_time: tx.commit_time,
            values,
            old,
        }
    }
}

/// Rows for one output that share one schema, in commit order.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputBatch {
    /// `schema.table` for outputs derived from a source table; the plugin's name otherwise.
    pub output: String,
    pub columns: Arc<[OutputColumn]>,
    pub rows: Vec<OutputRow>,
    /// Derived from a source table: the files carry an `_old` column with the old images.
    pub old_image: bool,
}

impl OutputColumn {
    /// A column of a built-in type.
    pub fn builtin(name: impl Into<String>, type_oid: u32, type_modifier: i32) -> OutputColumn {
        OutputColumn {
            name: name.into(),
            type_oid,
            type_modifier,
            ty: ColumnType::builtin(type_oid, type_modifier),
            nullable: true,
            key: false,
        }
    }

    /// The columns of an output derived from a source table.
    pub fn from_relation(relation: &Relation) -> Arc<[OutputColumn]> {
        relation
            .columns
            .iter()
            .map(|c| OutputColumn {
                name: c.name.clone(),
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
                ty: c.ty.clone(),
                nullable: true,
                key: c.key,
            })
            .collect()
    }
}
