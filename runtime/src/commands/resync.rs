//! `tributary resync`: ask the pipeline to load some tables (or all) again under a new
//! snapshot, while it keeps running.
//!
//! The request travels the way the pipeline's changes do: a transactional logical decoding
//! message (`pg_logical_emit_message(true, 'tributary.resync', '{"tables": [...]}')`) in the
//! source's WAL. The pipeline sees it in order, after every change committed before it, lands
//! the flush that holds it, and loads the tables then (see [`crate::stream::load`]); a pipeline that is
//! not running sees it at its next start. Nothing is written to the sink from here, so a
//! resync needs no access to the bucket and can never race the pipeline's writer.

use crate::Lsn;
use crate::config::PipelineConfig;
use crate::source::provision::{self, ProvisionError};

/// What `tributary resync` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    /// Where the request is in the WAL.
    pub lsn: Lsn,
    pub tables: Vec<String>,
    /// Whether a consumer holds the slot now (the pipeline is running).
    pub running: bool,
}

impl std::fmt::Display for Requested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "requested a new full load of {} at {}",
            self.tables.join(", "),
            self.lsn
        )?;
        match self.running {
            true => writeln!(
                f,
                "the running pipeline loads them once it has landed the changes committed before the request; its log says when the load is handed on"
            ),
            false => writeln!(
                f,
                "no pipeline holds the slot now: the next start loads them, after the changes committed before the request"
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResyncError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error("{table} is not a table this pipeline tracks; it tracks: {tracked}")]
    NotTracked { table: String, tracked: String },
    #[error(
        "the source runs PostgreSQL {0}; a resync reaches the pipeline as a logical decoding message, which pgoutput sends from PostgreSQL 14: restart the pipeline on an empty sink prefix to load again"
    )]
    TooOld(String),
}

/// Ask the pipeline of `config` to load `tables` again (every tracked table when empty).
pub async fn request(config: &PipelineConfig, tables: &[String]) -> Result<Requested, ResyncError> {
    let source = &config.source;
    // The request travels in the WAL, which a pipeline capturing through triggers never reads.
    if source.capture == crate::config::CaptureMode::Trigger {
        return Err(ProvisionError::TriggerResync.into());
    }
    let pg = crate::source::connect::parse_url(&source.url)?;
    let client = crate::source::connect::sql(&pg).await?;
    let query = provision::query_error;
    let version: (i32, String) = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version')",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .map_err(query("reading the server's version"))?;
    if version.0 < 140000 {
        return Err(ResyncError::TooOld(version.1));
    }
    let tracked = provision::tracked_tables(&client, source).await?;
    for table in tables {
        if !tracked.contains(table) {
            return Err(ResyncError::NotTracked {
                table: table.clone(),
                tracked: tracked.join(", "),
            });
        }
    }
    let lsn = crate::source::resync::request(&client, tables).await?;
    let running = provision::slot_state(&client, &source.slot)
        .await?
        .is_some_and(|s| s.holder.is_some());
    Ok(Requested {
        lsn,
        tables: match tables.is_empty() {
            true => tracked,
            false => tables.to_vec(),
        },
        running,
    })
}
