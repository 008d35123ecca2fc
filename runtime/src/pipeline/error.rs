//! Why a pipeline stopped: every stage's error, and what a person can do about it.

use crate::Lsn;
use crate::lake::commit::CommitError;
use crate::lake::encode::EncodeError;
use crate::lake::sink::SinkError;
use crate::source::catalog::CatalogError;
use crate::source::provision::ProvisionError;
use crate::source::replication::ReplicationError;
use crate::stream::assemble::AssembleError;
use crate::transform::TransformError;
use crate::wire::pgoutput::DecodeError;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    /// The prerequisite check found several problems: all of them, each with its fix.
    #[error("{}", crate::source::prerequisites::describe_failures(.0))]
    Prerequisites(crate::source::prerequisites::Report),
    /// The preflight's one problem beyond the source (a plugin, the sink), in its own words.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("malformed pgoutput message at {lsn}: {source}")]
    Decode {
        lsn: Lsn,
        #[source]
        source: DecodeError,
    },
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("full load: {0}")]
    Load(#[from] crate::source::snapshot::SnapshotError),
    #[error(
        "source.binary = true needs pgoutput protocol 2 (PostgreSQL 14 or newer); this server speaks protocol {0}: set source.binary = false"
    )]
    BinaryUnsupported(u32),
    #[error(
        "flush.spill_dir {dir} cannot take a file: {reason}; large transactions are held there \
         until they commit: name a directory this user can write to"
    )]
    SpillDir { dir: String, reason: String },
    #[error(transparent)]
    Transform(#[from] TransformError),
    #[error("parquet encoder settings: {0}")]
    EncoderSettings(#[from] EncodeError),
    #[error("encoding flush {sequence} (commits {first}..{last}): {source}")]
    Encode {
        sequence: u64,
        first: Lsn,
        last: Lsn,
        #[source]
        source: EncodeError,
    },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(
        "stopped while {what} kept failing: nothing past {confirmed} was confirmed, and the unfinished flush is cleaned up and replayed at the next start"
    )]
    Interrupted { what: &'static str, confirmed: Lsn },
    /// The replication connection came back from another server, or from the same one on
    /// another timeline (a failover or a recovery), which start-up would have refused.
    #[error(
        "the replication connection came back to {now}, but the pipeline started on {was} (a \
         failover, a recovery or another server behind the same address), and cannot follow \
         the move by itself: {why}. Stopped before reading from it, nothing past {confirmed} \
         was confirmed. Start `tributary run` again: it checks the commit log against this \
         server and says how to accept the move if the lake may differ from it (the way back \
         otherwise is a resync into a new sink prefix); to follow a promotion by itself, set \
         source.failover = true (PostgreSQL 17) with a standby that synchronises the slot"
    )]
    ServerMoved {
        was: String,
        now: String,
        confirmed: Lsn,
        why: String,
    },
    /// The replication connection came back from a promoted standby whose history left the
    /// old timeline before the end of what the lake holds or is landing.
    #[error(
        "the replication connection came back to a promoted standby on timeline {to}, whose \
         history ends timeline {from} at {switch_point}, but the lake holds or is landing \
         changes up to {lake_end}: the changes between {switch_point} and {lake_end} are not \
         on the new primary (they had not reached the standby when it was promoted; \
         synchronized_standby_slots on the primary prevents that). Stopped before reading from \
         it. Resynchronise into a new sink prefix, or, to keep those changes in the lake and \
         go on from the new primary, start again with --accept-gap \"timeline {from}..{to}\""
    )]
    FailoverAhead {
        from: u32,
        to: u32,
        switch_point: Lsn,
        lake_end: Lsn,
    },
    #[error(
        "{what} kept failing for {failing_for_secs} s ({attempts} attempts), longer than \
         retry.limit_secs = {limit_secs} allows: {error}; stopped, nothing past {confirmed} was \
         confirmed, and the next start resumes there (remove retry.limit_secs to retry for as \
         long as a fault lasts)"
    )]
    GaveUp {
        what: &'static str,
        failing_for_secs: u64,
        attempts: u32,
        limit_secs: u64,
        error: String,
        confirmed: Lsn,
    },
    #[error(
        "stopped after the sink gave no answer for {seconds} s: nothing past {confirmed} was confirmed, and the unfinished flush is cleaned up and replayed at the next start"
    )]
    StopTimedOut { seconds: u64, confirmed: Lsn },
    #[error("a blocking task failed: {0}")]
    Task(String),
    #[error("{0}")]
    Failpoints(String),
}
