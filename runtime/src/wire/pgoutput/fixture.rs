//! pgoutput messages built byte by byte, laid out the way the server writes them.
//!
//! For tests of the decoder and of the stages that consume its messages. Timestamps are
//! given as the server sends them: microseconds since 2000-01-01.

use super::tag;

/// A column of a tuple on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Col<'a> {
    Null,
    UnchangedToast,
    Text(&'a str),
    Binary(&'a [u8]),
}

/// A relation column on the wire: name, type OID, type modifier, part of the key.
pub(crate) type ColumnDef<'a> = (&'a str, u32, i32, bool);

/// A message under construction.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wire(Vec<u8>);

impl Wire {
    pub(crate) fn tag(tag: u8) -> Self {
        Wire(vec![tag])
    }

    pub(crate) fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }

    pub(crate) fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Raw bytes, then a NUL: lets tests write strings that are not UTF-8.
    pub(crate) fn cstr_bytes(mut self, s: &[u8]) -> Self {
        self.0.extend_from_slice(s);
        self.0.push(0);
        self
    }

    pub(crate) fn cstr(self, s: &str) -> Self {
        self.cstr_bytes(s.as_bytes())
    }

    pub(crate) fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    /// The leading xid of a message inside a streamed chunk.
    pub(crate) fn xid(self, xid: Option<u32>) -> Self {
        match xid {
            Some(xid) => self.u32(xid),
            None => self,
        }
    }

    /// A `TupleData`.
    pub(crate) fn tuple(self, cols: &[Col<'_>]) -> Self {
        let count = u16::try_from(cols.len()).expect("test tuple has at most 65535 columns");
        cols.iter().fold(self.u16(count), |w, col| match *col {
            Col::Null => w.u8(tag::COLUMN_NULL),
            Col::UnchangedToast => w.u8(tag::COLUMN_UNCHANGED_TOAST),
            Col::Text(s) => w.u8(tag::COLUMN_TEXT).len(s.len()).raw(s.as_bytes()),
            Col::Binary(b) => w.u8(tag::COLUMN_BINARY).len(b.len()).raw(b),
        })
    }

    fn len(self, len: usize) -> Self {
        self.i32(i32::try_from(len).expect("test value is under 2 GiB"))
    }

    pub(crate) fn build(self) -> Vec<u8> {
        self.0
    }
}

pub(crate) fn begin(final_lsn: u64, pg_time: i64, xid: u32) -> Vec<u8> {
    Wire::tag(tag::BEGIN)
        .u64(final_lsn)
        .i64(pg_time)
        .u32(xid)
        .build()
}

pub(crate) fn commit(commit_lsn: u64, end_lsn: u64, pg_time: i64) -> Vec<u8> {
    Wire::tag(tag::COMMIT)
        .u8(0)
        .u64(commit_lsn)
        .u64(end_lsn)
        .i64(pg_time)
        .build()
}

pub(crate) fn origin(commit_lsn: u64, name: &str) -> Vec<u8> {
    Wire::tag(tag::ORIGIN).u64(commit_lsn).cstr(name).build()
}

pub(crate) fn relation(
    xid: Option<u32>,
    id: u32,
    namespace: &str,
    name: &str,
    identity: u8,
    columns: &[ColumnDef<'_>],
) -> Vec<u8> {
    let count = u16::try_from(columns.len()).expect("test relation has at most 65535 columns");
    let head = Wire::tag(tag::RELATION)
        .xid(xid)
        .u32(id)
        .cstr(namespace)
        .cstr(name)
        .u8(identity)
        .u16(count);
    columns
        .iter()
        .fold(head, |w, &(name, oid, typmod, key)| {
            w.u8(if key { tag::COLUMN_FLAG_KEY } else { 0 })
                .cstr(name)
                .u32(oid)
                .i32(typmod)
        })
        .build()
}

pub(crate) fn type_message(xid: Option<u32>, id: u32, namespace: &str, name: &str) -> Vec<u8> {
    Wire::tag(tag::TYPE)
        .xid(xid)
        .u32(id)
        .cstr(namespace)
        .cstr(name)
        .build()
}

pub(crate) fn insert(xid: Option<u32>, relation: u32, new: &[Col<'_>]) -> Vec<u8> {
    Wire::tag(tag::INSERT)
        .xid(xid)
        .u32(relation)
        .u8(tag::TUPLE_NEW)
        .tuple(new)
        .build()
}

/// `old` is the marker (`tag::TUPLE_KEY` or `tag::TUPLE_OLD`) and its tuple.
pub(crate) fn update(
    xid: Option<u32>,
    relation: u32,
    old: Option<(u8, &[Col<'_>])>,
    new: &[Col<'_>],
) -> Vec<u8> {
    let w = Wire::tag(tag::UPDATE).xid(xid).u32(relation);
    let w = match old {
        Some((marker, cols)) => w.u8(marker).tuple(cols),
        None => w,
    };
    w.u8(tag::TUPLE_NEW).tuple(new).build()
}

pub(crate) fn delete(xid: Option<u32>, relation: u32, marker: u8, old: &[Col<'_>]) -> Vec<u8> {
    Wire::tag(tag::DELETE)
        .xid(xid)
        .u32(relation)
        .u8(marker)
        .tuple(old)
        .build()
}

pub(crate) fn truncate(xid: Option<u32>, options: u8, relations: &[u32]) -> Vec<u8> {
    let count = u32::try_from(relations.len()).expect("few test relations");
    relations
        .iter()
        .fold(
            Wire::tag(tag::TRUNCATE).xid(xid).u32(count).u8(options),
            |w, &id| w.u32(id),
        )
        .build()
}

pub(crate) fn message(
    xid: Option<u32>,
    transactional: bool,
    lsn: u64,
    prefix: &str,
    content: &[u8],
) -> Vec<u8> {
    Wire::tag(tag::MESSAGE)
        .xid(xid)
        .u8(u8::from(transactional))
        .u64(lsn)
        .cstr(prefix)
        .len(content.len())
        .raw(content)
        .build()
}

pub(crate) fn stream_start(xid: u32, first_segment: bool) -> Vec<u8> {
    Wire::tag(tag::STREAM_START)
        .u32(xid)
        .u8(u8::from(first_segment))
        .build()
}

pub(crate) fn stream_stop() -> Vec<u8> {
    Wire::tag(tag::STREAM_STOP).build()
}

pub(crate) fn stream_commit(xid: u32, commit_lsn: u64, end_lsn: u64, pg_time: i64) -> Vec<u8> {
    Wire::tag(tag::STREAM_COMMIT)
        .u32(xid)
        .u8(0)
        .u64(commit_lsn)
        .u64(end_lsn)
        .i64(pg_time)
        .build()
}

/// `abort` is the protocol 4 (`streaming 'parallel'`) abort lsn and time.
pub(crate) fn stream_abort(xid: u32, subxid: u32, abort: Option<(u64, i64)>) -> Vec<u8> {
    let w = Wire::tag(tag::STREAM_ABORT).u32(xid).u32(subxid);
    match abort {
        Some((lsn, pg_time)) => w.u64(lsn).i64(pg_time),
        None => w,
    }
    .build()
}

/// Begin Prepare: prepare lsn, end lsn, prepare time, xid, gid.
pub(crate) fn begin_prepare(
    prepare_lsn: u64,
    end_lsn: u64,
    pg_time: i64,
    xid: u32,
    gid: &str,
) -> Vec<u8> {
    Wire::tag(tag::BEGIN_PREPARE)
        .u64(prepare_lsn)
        .u64(end_lsn)
        .i64(pg_time)
        .u32(xid)
        .cstr(gid)
        .build()
}

/// Prepare (`tag::PREPARE`) or Stream Prepare (`tag::STREAM_PREPARE`), which share a layout;
/// so does Commit Prepared (`tag::COMMIT_PREPARED`), with the commit's lsns and time.
pub(crate) fn prepare_like(
    tag: u8,
    lsn: u64,
    end_lsn: u64,
    pg_time: i64,
    xid: u32,
    gid: &str,
) -> Vec<u8> {
    Wire::tag(tag)
        .u8(0)
        .u64(lsn)
        .u64(end_lsn)
        .i64(pg_time)
        .u32(xid)
        .cstr(gid)
        .build()
}

pub(crate) fn rollback_prepared(
    prepare_end_lsn: u64,
    rollback_end_lsn: u64,
    (prepare_time, rollback_time): (i64, i64),
    xid: u32,
    gid: &str,
) -> Vec<u8> {
    Wire::tag(tag::ROLLBACK_PREPARED)
        .u8(0)
        .u64(prepare_end_lsn)
        .u64(rollback_end_lsn)
        .i64(prepare_time)
        .i64(rollback_time)
        .u32(xid)
        .cstr(gid)
        .build()
}
