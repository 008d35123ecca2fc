//! pgoutput messages built byte by byte, laid out the way the server writes them: what the
//! trigger capture hands the read machine in place of a slot's stream, and what the decoder's
//! tests feed it. Timestamps are as the server sends them: microseconds since 2000-01-01.

use super::tag;

/// A column of a tuple on the wire.
#[derive(Debug, Clone, Copy)]
pub enum Col<'a> {
    Null,
    UnchangedToast,
    Text(&'a str),
    Binary(&'a [u8]),
}

/// A relation column on the wire: name, type OID, type modifier, part of the key.
pub type ColumnDef<'a> = (&'a str, u32, i32, bool);

/// A message under construction.
#[derive(Debug, Clone, Default)]
pub struct Wire(Vec<u8>);

impl Wire {
    pub fn tag(tag: u8) -> Self {
        Wire(vec![tag])
    }

    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }

    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Raw bytes, then a NUL (tests write strings that are not UTF-8 with it).
    pub fn cstr_bytes(mut self, s: &[u8]) -> Self {
        self.0.extend_from_slice(s);
        self.0.push(0);
        self
    }

    pub fn cstr(self, s: &str) -> Self {
        self.cstr_bytes(s.as_bytes())
    }

    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    /// The leading xid of a message inside a streamed chunk.
    pub fn xid(self, xid: Option<u32>) -> Self {
        match xid {
            Some(xid) => self.u32(xid),
            None => self,
        }
    }

    /// A `TupleData`.
    pub fn tuple(self, cols: &[Col<'_>]) -> Self {
        // PostgreSQL tables have at most 1600 columns.
        let count = u16::try_from(cols.len()).unwrap_or(u16::MAX);
        cols.iter().fold(self.u16(count), |w, col| match *col {
            Col::Null => w.u8(tag::COLUMN_NULL),
            Col::UnchangedToast => w.u8(tag::COLUMN_UNCHANGED_TOAST),
            Col::Text(s) => w.u8(tag::COLUMN_TEXT).len(s.len()).raw(s.as_bytes()),
            Col::Binary(b) => w.u8(tag::COLUMN_BINARY).len(b.len()).raw(b),
        })
    }

    pub fn len(self, len: usize) -> Self {
        // A value is at most 1 GiB.
        self.i32(i32::try_from(len).unwrap_or(i32::MAX))
    }

    pub fn build(self) -> Vec<u8> {
        self.0
    }
}

pub fn begin(final_lsn: u64, pg_time: i64, xid: u32) -> Vec<u8> {
    Wire::tag(tag::BEGIN)
        .u64(final_lsn)
        .i64(pg_time)
        .u32(xid)
        .build()
}

pub fn commit(commit_lsn: u64, end_lsn: u64, pg_time: i64) -> Vec<u8> {
    Wire::tag(tag::COMMIT)
        .u8(0)
        .u64(commit_lsn)
        .u64(end_lsn)
        .i64(pg_time)
        .build()
}

pub fn relation(
    xid: Option<u32>,
    id: u32,
    namespace: &str,
    name: &str,
    identity: u8,
    columns: &[ColumnDef<'_>],
) -> Vec<u8> {
    let count = u16::try_from(columns.len()).unwrap_or(u16::MAX);
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

pub fn insert(xid: Option<u32>, relation: u32, new: &[Col<'_>]) -> Vec<u8> {
    Wire::tag(tag::INSERT)
        .xid(xid)
        .u32(relation)
        .u8(tag::TUPLE_NEW)
        .tuple(new)
        .build()
}

/// `old` is the marker (`tag::TUPLE_KEY` or `tag::TUPLE_OLD`) and its tuple.
pub fn update(
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

pub fn delete(xid: Option<u32>, relation: u32, marker: u8, old: &[Col<'_>]) -> Vec<u8> {
    Wire::tag(tag::DELETE)
        .xid(xid)
        .u32(relation)
        .u8(marker)
        .tuple(old)
        .build()
}

pub fn truncate(xid: Option<u32>, options: u8, relations: &[u32]) -> Vec<u8> {
    let count = u32::try_from(relations.len()).unwrap_or(u32::MAX);
    relations
        .iter()
        .fold(
            Wire::tag(tag::TRUNCATE).xid(xid).u32(count).u8(options),
            |w, &id| w.u32(id),
        )
        .build()
}
