//! Decoding of pgoutput message bytes.
//!
//! The decoder is the only state the protocol needs on the client side: the relation cache
//! (row messages name their table by OID and rely on an earlier Relation message for its
//! shape) and whether a streamed chunk is open (inside one, most messages carry a leading
//! xid). It changes that state only when a whole message decoded cleanly, so an error leaves
//! it as it was.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use bytes::Bytes;

use super::reader::Reader;
use super::tag;
use super::{
    LogicalMessage, OldTuple, PG_EPOCH_OFFSET_MICROS, Relation, RelationColumn, ReplicaIdentity,
    Tuple, TupleValue,
};
use crate::Lsn;

/// A pgoutput message that cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty pgoutput message: expected at least a tag byte")]
    Empty,

    #[error("unknown pgoutput message tag {}", show_byte(*.0))]
    UnknownTag(u8),

    #[error(
        "{message} message (tag {}) does not exist in protocol version {proto_version}; \
         {feature} needs proto_version {needs} or later",
        show_byte(*tag)
    )]
    NotInProtocol {
        tag: u8,
        message: &'static str,
        proto_version: u32,
        /// The protocol feature the message belongs to (`streaming`, `two-phase commit`).
        feature: &'static str,
        /// The first protocol version that has it.
        needs: u32,
    },

    #[error(
        "unexpected {message} message {}",
        if *stream_open { "while a streamed chunk is open" } else { "outside a streamed chunk" }
    )]
    StreamState {
        message: &'static str,
        stream_open: bool,
    },

    #[error(
        "truncated {message} message: reading the {what} needs {needed} bytes but {remaining} remain"
    )]
    Truncated {
        message: &'static str,
        what: &'static str,
        needed: usize,
        remaining: usize,
    },

    #[error("unterminated string in {message} message: no nul byte ends the {what}")]
    UnterminatedString {
        message: &'static str,
        what: &'static str,
    },

    #[error(
        "invalid utf-8 in {message} message reading the {what} (valid up to byte {valid_up_to})"
    )]
    InvalidUtf8 {
        message: &'static str,
        what: &'static str,
        valid_up_to: usize,
    },

    #[error("negative length {len} in {message} message reading the {what}")]
    NegativeLength {
        message: &'static str,
        what: &'static str,
        len: i32,
    },

    #[error("invalid {what} {} in {message} message", show_byte(*found))]
    UnexpectedByte {
        message: &'static str,
        what: &'static str,
        found: u8,
    },

    #[error(
        "{what} out of range in {message} message: {micros} microseconds since 2000-01-01 \
         does not fit in microseconds since 1970-01-01"
    )]
    TimestampOutOfRange {
        message: &'static str,
        what: &'static str,
        micros: i64,
    },

    #[error("{remaining} trailing bytes after a complete {message} message")]
    TrailingBytes {
        message: &'static str,
        remaining: usize,
    },

    #[error(
        "unknown relation id {id}: a relation message must precede its rows \
         (was the decoder recreated without replaying from the transaction start?)"
    )]
    UnknownRelation { id: u32 },

    #[error(
        "tuple arity mismatch for {relation}: its relation message declares {expected} \
         columns but the tuple has {actual}"
    )]
    ArityMismatch {
        relation: String,
        expected: usize,
        actual: usize,
    },
}

/// A byte as a quoted character when printable, else in hex.
fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", char::from(b))
    } else {
        format!("0x{b:02x}")
    }
}

/// Relation ids are OIDs: already well spread, so hashing them with SipHash on every row
/// message buys nothing. A multiplicative mix keeps nearby OIDs apart in the table.
#[derive(Default)]
struct OidHasher(u64);

impl Hasher for OidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type RelationCache = HashMap<u32, Arc<Relation>, BuildHasherDefault<OidHasher>>;

/// Stateful decoder: keeps the relation cache and whether a streamed chunk is open.
///
/// Feed it every message of the replication stream, in order, starting at a transaction
/// boundary. PostgreSQL sends a Relation message before the first row of each table in a
/// session (and again when the table changes), so a decoder created mid-session reports
/// [`DecodeError::UnknownRelation`] rather than guessing.
#[derive(Debug)]
pub struct Decoder {
    proto_version: u32,
    relations: RelationCache,
    /// The top-level xid of the streamed transaction whose chunk is open.
    open_stream: Option<u32>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(1)
    }
}

impl Decoder {
    /// A decoder for the negotiated `proto_version` (1 to 4).
    pub fn new(proto_version: u32) -> Self {
        Decoder {
            proto_version,
            relations: RelationCache::default(),
            open_stream: None,
        }
    }

    pub fn proto_version(&self) -> u32 {
        self.proto_version
    }

    /// Decodes one message (the payload of one `XLogData` frame), copying column values out
    /// of `data`.
    pub fn decode(&mut self, data: &[u8]) -> Result<LogicalMessage, DecodeError> {
        self.decode_with(Reader::new(data, None))
    }

    /// Like [`Decoder::decode`], but column values and message contents are views into
    /// `data` rather than copies. They keep the whole frame alive while any of them is.
    pub fn decode_bytes(&mut self, data: Bytes) -> Result<LogicalMessage, DecodeError> {
        self.decode_with(Reader::new(&data, Some(&data)))
    }

    /// The cached description of relation `id`, from the last Relation message for it.
    pub fn relation(&self, id: u32) -> Option<&Arc<Relation>> {
        self.relations.get(&id)
    }

    /// Replace the resolved column types of cached relation `id` (one per column, in order),
    /// so that the row messages decoded from now on carry them. Returns the updated relation,
    /// or `None` when the relation is not cached or the count does not match.
    pub fn resolve_types(
        &mut self,
        id: u32,
        types: Vec<crate::wire::pgtype::ColumnType>,
    ) -> Option<Arc<Relation>> {
        let cached = self.relations.get_mut(&id)?;
        if cached.columns.len() != types.len() {
            return None;
        }
        let mut relation = Relation::clone(cached);
        for (column, ty) in relation.columns.iter_mut().zip(types) {
            column.ty = ty;
        }
        *cached = Arc::new(relation);
        Some(Arc::clone(cached))
    }

    /// Flag `key`'s columns of relation `id` as its key instead of those the message flagged
    /// (see [`crate::source::catalog::Catalog::row_key`]). Ignored when the widths differ.
    pub fn resolve_key(&mut self, id: u32, key: &[bool]) -> Option<Arc<Relation>> {
        let cached = self.relations.get_mut(&id)?;
        if cached.columns.len() != key.len() {
            return None;
        }
        let mut relation = Relation::clone(cached);
        for (column, &is_key) in relation.columns.iter_mut().zip(key) {
            column.key = is_key;
        }
        *cached = Arc::new(relation);
        Some(Arc::clone(cached))
    }

    /// The xid of the streamed transaction whose chunk is open (between Stream Start and
    /// Stream Stop), if any.
    pub fn open_stream(&self) -> Option<u32> {
        self.open_stream
    }

    fn decode_with(&mut self, mut r: Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        if r.remaining() == 0 {
            return Err(DecodeError::Empty);
        }
        let tag = r.u8("message tag")?;
        let message = match tag {
            tag::BEGIN => self.begin(&mut r)?,
            tag::COMMIT => self.commit(&mut r)?,
            tag::ORIGIN => self.origin(&mut r)?,
            tag::RELATION => self.relation_message(&mut r)?,
            tag::TYPE => self.type_message(&mut r)?,
            tag::INSERT => self.insert(&mut r)?,
            tag::UPDATE => self.update(&mut r)?,
            tag::DELETE => self.delete(&mut r)?,
            tag::TRUNCATE => self.truncate(&mut r)?,
            tag::MESSAGE => self.logical_message(&mut r)?,
            tag::STREAM_START => self.stream_start(&mut r)?,
            tag::STREAM_STOP => self.stream_stop(&mut r)?,
            tag::STREAM_COMMIT => self.stream_commit(&mut r)?,
            tag::STREAM_ABORT => self.stream_abort(&mut r)?,
            tag::BEGIN_PREPARE => self.begin_prepare(&mut r)?,
            tag::PREPARE => self.prepare(&mut r, tag::PREPARE, "prepare")?,
            tag::COMMIT_PREPARED => self.commit_prepared(&mut r)?,
            tag::ROLLBACK_PREPARED => self.rollback_prepared(&mut r)?,
            tag::STREAM_PREPARE => self.prepare(&mut r, tag::STREAM_PREPARE, "stream prepare")?,
            other => return Err(DecodeError::UnknownTag(other)),
        };
        Ok(message)
    }

    fn begin(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("begin");
        let final_lsn = lsn(r, "final lsn")?;
        let commit_time = timestamp(r, "commit time")?;
        let xid = r.u32("xid")?;
        r.finish()?;
        Ok(LogicalMessage::Begin {
            final_lsn,
            commit_time,
            xid,
        })
    }

    fn commit(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("commit");
        let flags = r.u8("flags")?;
        let (commit_lsn, end_lsn, commit_time) = positions(r, COMMIT_POSITIONS)?;
        r.finish()?;
        Ok(LogicalMessage::Commit {
            flags,
            commit_lsn,
            end_lsn,
            commit_time,
        })
    }

    fn origin(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("origin");
        let commit_lsn = lsn(r, "commit lsn")?;
        let name = r.cstr("origin name")?.to_owned();
        r.finish()?;
        Ok(LogicalMessage::Origin { commit_lsn, name })
    }

    fn relation_message(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("relation");
        let xid = self.stream_xid(r)?;
        let id = r.u32("relation id")?;
        let namespace = r.cstr("namespace")?.to_owned();
        let name = r.cstr("relation name")?.to_owned();
        let replica_identity = match r.u8("replica identity")? {
            tag::IDENTITY_DEFAULT => ReplicaIdentity::Default,
            tag::IDENTITY_NOTHING => ReplicaIdentity::Nothing,
            tag::IDENTITY_FULL => ReplicaIdentity::Full,
            tag::IDENTITY_INDEX => ReplicaIdentity::Index,
            found => {
                return Err(DecodeError::UnexpectedByte {
                    message: r.message(),
                    what: "replica identity",
                    found,
                });
            }
        };
        let count = usize::from(r.u16("column count")?);
        // A hostile count must not reserve more than the message could possibly describe.
        let mut columns = Vec::with_capacity(count.min(r.remaining()));
        for _ in 0..count {
            let flags = r.u8("column flags")?;
            let name = r.cstr("column name")?.to_owned();
            let type_oid = r.u32("column type oid")?;
            let type_modifier = r.i32("column type modifier")?;
            columns.push(RelationColumn::new(
                name,
                type_oid,
                type_modifier,
                flags & tag::COLUMN_FLAG_KEY != 0,
            ));
        }
        r.finish()?;
        let relation = Arc::new(Relation {
            id,
            namespace,
            name,
            replica_identity,
            columns,
        });
        // Rows already decoded keep the Arc of the shape they were sent with.
        self.relations.insert(id, Arc::clone(&relation));
        Ok(LogicalMessage::Relation { xid, relation })
    }

    fn type_message(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("type");
        let xid = self.stream_xid(r)?;
        let id = r.u32("type oid")?;
        let namespace = r.cstr("namespace")?.to_owned();
        let name = r.cstr("type name")?.to_owned();
        r.finish()?;
        Ok(LogicalMessage::Type {
            xid,
            id,
            namespace,
            name,
        })
    }

    fn insert(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("insert");
        let xid = self.stream_xid(r)?;
        let relation = self.known_relation(r)?;
        expect_marker(r, tag::TUPLE_NEW, "new tuple marker")?;
        let new = tuple(r, &relation)?;
        r.finish()?;
        Ok(LogicalMessage::Insert { xid, relation, new })
    }

    fn update(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("update");
        let xid = self.stream_xid(r)?;
        let relation = self.known_relation(r)?;
        let old = match r.u8("tuple marker")? {
            tag::TUPLE_KEY => {
                let old = OldTuple::Key(tuple(r, &relation)?);
                expect_marker(r, tag::TUPLE_NEW, "new tuple marker")?;
                Some(old)
            }
            tag::TUPLE_OLD => {
                let old = OldTuple::Full(tuple(r, &relation)?);
                expect_marker(r, tag::TUPLE_NEW, "new tuple marker")?;
                Some(old)
            }
            tag::TUPLE_NEW => None,
            found => {
                return Err(DecodeError::UnexpectedByte {
                    message: r.message(),
                    what: "tuple marker",
                    found,
                });
            }
        };
        let new = tuple(r, &relation)?;
        r.finish()?;
        Ok(LogicalMessage::Update {
            xid,
            relation,
            old,
            new,
        })
    }

    fn delete(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("delete");
        let xid = self.stream_xid(r)?;
        let relation = self.known_relation(r)?;
        let old = match r.u8("old tuple marker")? {
            tag::TUPLE_KEY => OldTuple::Key(tuple(r, &relation)?),
            tag::TUPLE_OLD => OldTuple::Full(tuple(r, &relation)?),
            found => {
                return Err(DecodeError::UnexpectedByte {
                    message: r.message(),
                    what: "old tuple marker",
                    found,
                });
            }
        };
        r.finish()?;
        Ok(LogicalMessage::Delete { xid, relation, old })
    }

    fn truncate(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("truncate");
        let xid = self.stream_xid(r)?;
        let count = r.u32("relation count")?;
        let options = r.u8("options")?;
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let mut relations = Vec::with_capacity(count.min(r.remaining() / 4));
        for _ in 0..count {
            relations.push(self.known_relation(r)?);
        }
        r.finish()?;
        Ok(LogicalMessage::Truncate {
            xid,
            options,
            relations,
        })
    }

    fn logical_message(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        r.set_message("logical decoding");
        let xid = self.stream_xid(r)?;
        let flags = r.u8("flags")?;
        let lsn = lsn(r, "lsn")?;
        let prefix = r.cstr("prefix")?.to_owned();
        let len = r.len("content length")?;
        let content = r.bytes(len, "content")?;
        r.finish()?;
        Ok(LogicalMessage::Message {
            xid,
            transactional: flags & tag::MESSAGE_FLAG_TRANSACTIONAL != 0,
            lsn,
            prefix,
            content,
        })
    }

    fn begin_prepare(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.two_phase_message(r, tag::BEGIN_PREPARE, "begin prepare")?;
        let (prepare_lsn, end_lsn, prepare_time) = positions(r, PREPARE_POSITIONS)?;
        let (xid, gid) = prepared_transaction(r)?;
        Ok(LogicalMessage::BeginPrepare {
            prepare_lsn,
            end_lsn,
            prepare_time,
            xid,
            gid,
        })
    }

    /// Prepare and Stream Prepare share their layout.
    fn prepare(
        &mut self,
        r: &mut Reader<'_>,
        tag: u8,
        message: &'static str,
    ) -> Result<LogicalMessage, DecodeError> {
        self.two_phase_message(r, tag, message)?;
        let flags = r.u8("flags")?;
        let (prepare_lsn, end_lsn, prepare_time) = positions(r, PREPARE_POSITIONS)?;
        let (xid, gid) = prepared_transaction(r)?;
        Ok(if tag == tag::STREAM_PREPARE {
            LogicalMessage::StreamPrepare {
                flags,
                prepare_lsn,
                end_lsn,
                prepare_time,
                xid,
                gid,
            }
        } else {
            LogicalMessage::Prepare {
                flags,
                prepare_lsn,
                end_lsn,
                prepare_time,
                xid,
                gid,
            }
        })
    }

    fn commit_prepared(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.two_phase_message(r, tag::COMMIT_PREPARED, "commit prepared")?;
        let flags = r.u8("flags")?;
        let (commit_lsn, end_lsn, commit_time) = positions(r, COMMIT_POSITIONS)?;
        let (xid, gid) = prepared_transaction(r)?;
        Ok(LogicalMessage::CommitPrepared {
            flags,
            commit_lsn,
            end_lsn,
            commit_time,
            xid,
            gid,
        })
    }

    fn rollback_prepared(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.two_phase_message(r, tag::ROLLBACK_PREPARED, "rollback prepared")?;
        let flags = r.u8("flags")?;
        let (prepare_end_lsn, rollback_end_lsn, prepare_time) = positions(r, ROLLBACK_POSITIONS)?;
        let rollback_time = timestamp(r, "rollback time")?;
        let (xid, gid) = prepared_transaction(r)?;
        Ok(LogicalMessage::RollbackPrepared {
            flags,
            prepare_end_lsn,
            rollback_end_lsn,
            prepare_time,
            rollback_time,
            xid,
            gid,
        })
    }

    fn stream_start(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.streaming_message(r, tag::STREAM_START, "stream start", false)?;
        let xid = r.u32("xid")?;
        let flags = r.u8("flags")?;
        r.finish()?;
        self.open_stream = Some(xid);
        Ok(LogicalMessage::StreamStart {
            xid,
            first_segment: flags & tag::STREAM_FIRST_SEGMENT != 0,
        })
    }

    fn stream_stop(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.streaming_message(r, tag::STREAM_STOP, "stream stop", true)?;
        r.finish()?;
        self.open_stream = None;
        Ok(LogicalMessage::StreamStop)
    }

    fn stream_commit(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.streaming_message(r, tag::STREAM_COMMIT, "stream commit", false)?;
        let xid = r.u32("xid")?;
        let flags = r.u8("flags")?;
        let (commit_lsn, end_lsn, commit_time) = positions(r, COMMIT_POSITIONS)?;
        r.finish()?;
        Ok(LogicalMessage::StreamCommit {
            xid,
            flags,
            commit_lsn,
            end_lsn,
            commit_time,
        })
    }

    fn stream_abort(&mut self, r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
        self.streaming_message(r, tag::STREAM_ABORT, "stream abort", false)?;
        let xid = r.u32("xid")?;
        let subxid = r.u32("subtransaction xid")?;
        // Protocol 4 adds the abort position, but only under `streaming 'parallel'`, which
        // this decoder is not told about: the message length decides.
        let (abort_lsn, abort_time) = if self.proto_version >= 4 && r.remaining() > 0 {
            (
                Some(lsn(r, "abort lsn")?),
                Some(timestamp(r, "abort time")?),
            )
        } else {
            (None, None)
        };
        r.finish()?;
        Ok(LogicalMessage::StreamAbort {
            xid,
            subxid,
            abort_lsn,
            abort_time,
        })
    }

    /// Checks that a streaming control message may arrive now: the protocol has streaming,
    /// and a chunk is open exactly when `needs_open_stream` says it must be.
    fn streaming_message(
        &self,
        r: &mut Reader<'_>,
        tag: u8,
        message: &'static str,
        needs_open_stream: bool,
    ) -> Result<(), DecodeError> {
        self.control_message(r, tag, message, ("streaming", 2), needs_open_stream)
    }

    /// Checks that a two-phase message may arrive now: the protocol has two-phase commit, and
    /// no streamed chunk is open (Stream Prepare, like Stream Commit, follows the last chunk).
    fn two_phase_message(
        &self,
        r: &mut Reader<'_>,
        tag: u8,
        message: &'static str,
    ) -> Result<(), DecodeError> {
        self.control_message(r, tag, message, ("two-phase commit", 3), false)
    }

    fn control_message(
        &self,
        r: &mut Reader<'_>,
        tag: u8,
        message: &'static str,
        (feature, needs): (&'static str, u32),
        needs_open_stream: bool,
    ) -> Result<(), DecodeError> {
        r.set_message(message);
        if self.proto_version < needs {
            return Err(DecodeError::NotInProtocol {
                tag,
                message,
                proto_version: self.proto_version,
                feature,
                needs,
            });
        }
        let stream_open = self.open_stream.is_some();
        if stream_open != needs_open_stream {
            return Err(DecodeError::StreamState {
                message,
                stream_open,
            });
        }
        Ok(())
    }

    /// Inside a streamed chunk, data messages lead with the xid of the (sub)transaction that
    /// made them.
    #[inline]
    fn stream_xid(&self, r: &mut Reader<'_>) -> Result<Option<u32>, DecodeError> {
        match self.open_stream {
            Some(_) => r.u32("xid").map(Some),
            None => Ok(None),
        }
    }

    #[inline]
    fn known_relation(&self, r: &mut Reader<'_>) -> Result<Arc<Relation>, DecodeError> {
        let id = r.u32("relation id")?;
        self.relations
            .get(&id)
            .cloned()
            .ok_or(DecodeError::UnknownRelation { id })
    }
}

/// The names, for errors, of the two positions and the time that [`positions`] reads.
type PositionNames = [&'static str; 3];

const COMMIT_POSITIONS: PositionNames = ["commit lsn", "end lsn", "commit time"];
const PREPARE_POSITIONS: PositionNames = ["prepare lsn", "end lsn", "prepare time"];
const ROLLBACK_POSITIONS: PositionNames = ["prepare end lsn", "rollback end lsn", "prepare time"];

/// Two positions and a time, in this order: where a commit or prepare record is (or ends) and
/// where its transaction ends, then when it happened.
#[inline]
fn positions(
    r: &mut Reader<'_>,
    [first, end, time]: PositionNames,
) -> Result<(Lsn, Lsn, i64), DecodeError> {
    Ok((lsn(r, first)?, lsn(r, end)?, timestamp(r, time)?))
}

/// The xid and gid of a prepared transaction, which end every two-phase message.
fn prepared_transaction(r: &mut Reader<'_>) -> Result<(u32, String), DecodeError> {
    let xid = r.u32("xid")?;
    let gid = r.cstr("gid")?.to_owned();
    r.finish()?;
    Ok((xid, gid))
}

#[inline]
fn lsn(r: &mut Reader<'_>, what: &'static str) -> Result<Lsn, DecodeError> {
    r.u64(what).map(Lsn)
}

/// A wire timestamp (microseconds since 2000-01-01) as microseconds since the Unix epoch.
#[inline]
fn timestamp(r: &mut Reader<'_>, what: &'static str) -> Result<i64, DecodeError> {
    let micros = r.i64(what)?;
    micros
        .checked_add(PG_EPOCH_OFFSET_MICROS)
        .ok_or(DecodeError::TimestampOutOfRange {
            message: r.message(),
            what,
            micros,
        })
}

#[inline]
fn expect_marker(r: &mut Reader<'_>, marker: u8, what: &'static str) -> Result<(), DecodeError> {
    match r.u8(what)? {
        found if found == marker => Ok(()),
        found => Err(DecodeError::UnexpectedByte {
            message: r.message(),
            what,
            found,
        }),
    }
}

/// One `TupleData`, checked against the arity of `relation` before any column is read.
fn tuple(r: &mut Reader<'_>, relation: &Relation) -> Result<Tuple, DecodeError> {
    let actual = usize::from(r.u16("tuple column count")?);
    let expected = relation.columns.len();
    if actual != expected {
        return Err(DecodeError::ArityMismatch {
            relation: relation.qualified_name(),
            expected,
            actual,
        });
    }
    let mut values = Vec::with_capacity(actual);
    for _ in 0..actual {
        let value = match r.u8("column kind")? {
            tag::COLUMN_NULL => TupleValue::Null,
            tag::COLUMN_UNCHANGED_TOAST => TupleValue::UnchangedToast,
            tag::COLUMN_TEXT => {
                let len = r.len("text column length")?;
                TupleValue::Text(r.bytes(len, "text column value")?)
            }
            tag::COLUMN_BINARY => {
                let len = r.len("binary column length")?;
                TupleValue::Binary(r.bytes(len, "binary column value")?)
            }
            found => {
                return Err(DecodeError::UnexpectedByte {
                    message: r.message(),
                    what: "column kind",
                    found,
                });
            }
        };
        values.push(value);
    }
    Ok(Tuple(values))
}
