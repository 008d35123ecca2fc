//! pgoutput messages built byte by byte, laid out the way the server writes them.
//!
//! For tests of the decoder and of the stages that consume its messages. Timestamps are
//! given as the server sends them: microseconds since 2000-01-01.

pub(crate) use super::encode::{
    Col, ColumnDef, Wire, begin, commit, delete, insert, relation, truncate, update,
};
use super::tag;

pub(crate) fn origin(commit_lsn: u64, name: &str) -> Vec<u8> {
    Wire::tag(tag::ORIGIN).u64(commit_lsn).cstr(name).build()
}

pub(crate) fn type_message(xid: Option<u32>, id: u32, namespace: &str, name: &str) -> Vec<u8> {
    Wire::tag(tag::TYPE)
        .xid(xid)
        .u32(id)
        .cstr(namespace)
        .cstr(name)
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
