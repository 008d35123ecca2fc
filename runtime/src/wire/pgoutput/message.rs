//! The messages of the pgoutput protocol, as typed values.

use std::sync::Arc;

use bytes::Bytes;

use crate::Lsn;
use crate::wire::pgtype::ColumnType;

/// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01 00:00:00 UTC).
pub const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

/// One column of a tuple as it came over the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TupleValue {
    Null,
    /// A TOASTed value the update did not change; PostgreSQL does not resend it.
    UnchangedToast,
    /// The type's text output (`'t'`).
    Text(Bytes),
    /// The type's binary send format (`'b'`, protocol 2+ with `binary 'true'`).
    Binary(Bytes),
}

/// The columns of one row, in relation column order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tuple(pub Vec<TupleValue>);

/// `REPLICA IDENTITY` of a relation: which old values updates and deletes carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// `d`: the primary key.
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: the whole old row.
    Full,
    /// `i`: the columns of a chosen unique index.
    Index,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    pub name: String,
    /// The declared type, as the server sent it: a domain's own OID, not its base type's.
    pub type_oid: u32,
    /// `atttypmod`: precision and scale of numeric, length of varchar, ...; -1 when none.
    pub type_modifier: i32,
    /// Part of the replica identity key.
    pub key: bool,
    /// What the type resolves to. The decoder knows built-in types only; the pipeline fills
    /// in user-defined types and array dimensions from the catalog
    /// ([`Decoder::resolve_types`](super::Decoder::resolve_types)).
    pub ty: ColumnType,
}

impl RelationColumn {
    /// A column whose type is resolved from the built-in types only.
    pub fn new(name: impl Into<String>, type_oid: u32, type_modifier: i32, key: bool) -> Self {
        RelationColumn {
            name: name.into(),
            type_oid,
            type_modifier,
            key,
            ty: ColumnType::builtin(type_oid, type_modifier),
        }
    }
}

/// A table as the server described it in a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID.
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub replica_identity: ReplicaIdentity,
    pub columns: Vec<RelationColumn>,
}

impl Relation {
    /// `schema.table`, the name outputs derived from this table carry.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }
}

/// One decoded pgoutput message.
///
/// Row messages (`Insert`, `Update`, `Delete`, `Truncate`) refer to their relations through
/// the decoder's cache. Inside a streamed chunk (protocol 2+), data messages carry an xid in
/// `xid`; otherwise it is `None`. That xid is the subtransaction's when a subtransaction made
/// the change, so it may differ from the `StreamStart` xid: attribute the message to the open
/// stream ([`Decoder::open_stream`](super::Decoder::open_stream)) and keep `xid` for matching a
/// later `StreamAbort` of that subtransaction.
#[derive(Debug, Clone, PartialEq)]
pub enum LogicalMessage {
    Begin {
        /// LSN of the commit record: the transaction's final position.
        final_lsn: Lsn,
        /// Commit time in microseconds since the Unix epoch.
        commit_time: i64,
        xid: u32,
    },
    Commit {
        flags: u8,
        /// LSN of the commit record.
        commit_lsn: Lsn,
        /// LSN just past the commit record; a consumer that has made the transaction durable
        /// confirms this position.
        end_lsn: Lsn,
        /// Commit time in microseconds since the Unix epoch.
        commit_time: i64,
    },
    Origin {
        commit_lsn: Lsn,
        name: String,
    },
    Relation {
        xid: Option<u32>,
        relation: Arc<Relation>,
    },
    Type {
        xid: Option<u32>,
        id: u32,
        namespace: String,
        name: String,
    },
    Insert {
        xid: Option<u32>,
        relation: Arc<Relation>,
        new: Tuple,
    },
    Update {
        xid: Option<u32>,
        relation: Arc<Relation>,
        /// The old key (`K`) or whole old row (`O`), when the replica identity sends one.
        old: Option<OldTuple>,
        new: Tuple,
    },
    Delete {
        xid: Option<u32>,
        relation: Arc<Relation>,
        old: OldTuple,
    },
    Truncate {
        xid: Option<u32>,
        /// Bit 1: CASCADE, bit 2: RESTART IDENTITY.
        options: u8,
        relations: Vec<Arc<Relation>>,
    },
    /// A logical decoding message (`pg_logical_emit_message`).
    Message {
        xid: Option<u32>,
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    StreamStart {
        xid: u32,
        first_segment: bool,
    },
    StreamStop,
    StreamCommit {
        xid: u32,
        flags: u8,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    },
    StreamAbort {
        xid: u32,
        subxid: u32,
        /// Protocol 4 with parallel streaming only.
        abort_lsn: Option<Lsn>,
        abort_time: Option<i64>,
    },
    /// Protocol 3+ with `two_phase`: a transaction was prepared (`PREPARE TRANSACTION`). Its
    /// row messages follow, then [`LogicalMessage::Prepare`]; whether it commits comes later,
    /// as [`LogicalMessage::CommitPrepared`] or [`LogicalMessage::RollbackPrepared`].
    BeginPrepare {
        /// LSN of the prepare record.
        prepare_lsn: Lsn,
        /// LSN just past the prepare record.
        end_lsn: Lsn,
        /// Prepare time in microseconds since the Unix epoch.
        prepare_time: i64,
        xid: u32,
        /// The global transaction identifier given to `PREPARE TRANSACTION`.
        gid: String,
    },
    /// Protocol 3+ with `two_phase`: the end of a prepared transaction's changes.
    Prepare {
        flags: u8,
        prepare_lsn: Lsn,
        end_lsn: Lsn,
        prepare_time: i64,
        xid: u32,
        gid: String,
    },
    /// Protocol 3+ with `two_phase`: `COMMIT PREPARED` of a transaction sent earlier.
    CommitPrepared {
        flags: u8,
        /// LSN of the commit record.
        commit_lsn: Lsn,
        /// LSN just past the commit record.
        end_lsn: Lsn,
        commit_time: i64,
        xid: u32,
        gid: String,
    },
    /// Protocol 3+ with `two_phase`: `ROLLBACK PREPARED` of a transaction sent earlier.
    RollbackPrepared {
        flags: u8,
        /// LSN just past the prepare record.
        prepare_end_lsn: Lsn,
        /// LSN just past the rollback record.
        rollback_end_lsn: Lsn,
        prepare_time: i64,
        rollback_time: i64,
        xid: u32,
        gid: String,
    },
    /// Protocol 3+ with `two_phase` and streaming: a streamed transaction was prepared. It
    /// takes the place of Stream Commit; the outcome comes later as for
    /// [`LogicalMessage::Prepare`].
    StreamPrepare {
        flags: u8,
        prepare_lsn: Lsn,
        end_lsn: Lsn,
        prepare_time: i64,
        xid: u32,
        gid: String,
    },
}

/// The old image an update or delete carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple {
    /// `K`: replica identity columns; other columns are null.
    Key(Tuple),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Full(Tuple),
}

impl OldTuple {
    pub fn tuple(&self) -> &Tuple {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }
}
