//! The replication connection: the only code that owns the replication socket. (Being written.)

use std::time::Duration;

use bytes::Bytes;

use crate::Lsn;

#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("replication connection: {0}")]
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemIdentity {
    pub system_id: String,
    pub timeline: u32,
    pub xlog_pos: Lsn,
    pub dbname: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedSlot {
    pub slot_name: String,
    pub consistent_point: Lsn,
    pub snapshot_name: Option<String>,
}

/// One `XLogData` frame: a pgoutput message and where it sits in the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogData {
    pub wal_start: Lsn,
    pub wal_end: Lsn,
    pub data: Bytes,
}

pub struct ReplicationConnection {}

impl ReplicationConnection {
    pub async fn connect(_config: &tokio_postgres::Config) -> Result<Self, ReplicationError> {
        todo!()
    }

    pub async fn identify_system(&mut self) -> Result<SystemIdentity, ReplicationError> {
        todo!()
    }

    pub async fn create_logical_slot(
        &mut self,
        _slot: &str,
    ) -> Result<CreatedSlot, ReplicationError> {
        todo!()
    }

    pub async fn start_logical(
        self,
        _slot: &str,
        _start: Lsn,
        _options: &[(&str, &str)],
        _status_interval: Duration,
    ) -> Result<ReplicationStream, ReplicationError> {
        todo!()
    }
}

pub struct ReplicationStream {}

impl ReplicationStream {
    /// Up to `limit` frames into `out`; 0 when the stream has ended.
    pub async fn recv_many(
        &mut self,
        _out: &mut Vec<XLogData>,
        _limit: usize,
    ) -> Result<usize, ReplicationError> {
        todo!()
    }

    /// Everything up to `lsn` is durable downstream: report it as flushed.
    pub fn confirm(&self, _lsn: Lsn) {}

    pub async fn shutdown(self) -> Result<(), ReplicationError> {
        Ok(())
    }
}
