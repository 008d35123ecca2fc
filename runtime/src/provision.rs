//! Source-side checks and set-up over an ordinary SQL connection: server settings, the
//! publication, and the slot's state as `pg_replication_slots` reports it.

use std::str::FromStr;

use tokio_postgres::{Client, NoTls};

use crate::Lsn;
use crate::config::SourceConfig;

#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("cannot connect to the source database: {0}")]
    Connect(#[source] tokio_postgres::Error),
    #[error("source url is not a valid connection string: {0}")]
    Url(#[source] tokio_postgres::Error),
    #[error("{what}: {source}")]
    Query {
        what: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error(
        "the source server runs with wal_level = {0}; logical replication needs wal_level = logical (set it in postgresql.conf and restart the server)"
    )]
    WalLevel(String),
    #[error(
        "publication {publication:?} does not exist; create it (CREATE PUBLICATION {publication} FOR TABLE ...) or set source.create_publication = true"
    )]
    NoPublication { publication: String },
    #[error(
        "publication {publication:?} does not publish {tables}; run: ALTER PUBLICATION {publication} ADD TABLE {tables}"
    )]
    NotPublished { publication: String, tables: String },
    #[error(
        "slot {slot:?} uses output plugin {plugin:?}; tributary reads pgoutput slots (drop it or choose another source.slot)"
    )]
    SlotPlugin { slot: String, plugin: String },
    #[error("slot {slot:?} belongs to database {database:?}, not {expected:?}")]
    SlotDatabase {
        slot: String,
        database: String,
        expected: String,
    },
    #[error(
        "slot {slot:?} is active for pid {pid}: another consumer is reading it; stop that consumer first"
    )]
    SlotActive { slot: String, pid: i32 },
    #[error("slot {slot:?} does not exist; create it or set source.create_slot = true")]
    NoSlot { slot: String },
}

/// A slot as `pg_replication_slots` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub plugin: String,
    pub database: String,
    pub active_pid: Option<i32>,
    pub confirmed_flush_lsn: Option<Lsn>,
    pub restart_lsn: Option<Lsn>,
    pub wal_status: Option<String>,
    pub safe_wal_size: Option<i64>,
}

/// Parse the source URL the way libpq would.
pub fn parse_url(url: &str) -> Result<tokio_postgres::Config, ProvisionError> {
    tokio_postgres::Config::from_str(url).map_err(ProvisionError::Url)
}

/// An ordinary SQL session to the source; the connection runs on its own task.
pub async fn connect(config: &tokio_postgres::Config) -> Result<Client, ProvisionError> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(ProvisionError::Connect)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "source SQL connection closed");
        }
    });
    Ok(client)
}

fn query_error(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> ProvisionError {
    let what = what.into();
    move |source| ProvisionError::Query { what, source }
}

/// Quote an identifier for SQL.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `schema.table` quoted part by part.
fn quote_table(table: &str) -> String {
    table
        .split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".")
}

pub async fn check_wal_level(client: &Client) -> Result<(), ProvisionError> {
    let row = client
        .query_one("SELECT current_setting('wal_level')", &[])
        .await
        .map_err(query_error("reading wal_level"))?;
    let level: String = row.get(0);
    if level != "logical" {
        return Err(ProvisionError::WalLevel(level));
    }
    Ok(())
}

/// Make sure the publication exists and publishes every configured table.
pub async fn ensure_publication(
    client: &Client,
    source: &SourceConfig,
) -> Result<(), ProvisionError> {
    let publication = &source.publication;
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(query_error(format!(
            "looking up publication {publication:?}"
        )))?
        .is_some();
    if !exists {
        if !source.create_publication {
            return Err(ProvisionError::NoPublication {
                publication: publication.clone(),
            });
        }
        let target = if source.tables.is_empty() {
            "ALL TABLES".to_owned()
        } else {
            let tables: Vec<_> = source.tables.iter().map(|t| quote_table(t)).collect();
            format!("TABLE {}", tables.join(", "))
        };
        let sql = format!(
            "CREATE PUBLICATION {} FOR {target}",
            quote_ident(publication)
        );
        client
            .batch_execute(&sql)
            .await
            .map_err(query_error(format!("creating publication {publication:?}")))?;
        tracing::info!(publication, "created publication");
        return Ok(());
    }
    let rows = client
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(query_error(format!(
            "listing tables of publication {publication:?}"
        )))?;
    let published: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let missing: Vec<&str> = source
        .tables
        .iter()
        .filter(|t| !published.contains(t))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(ProvisionError::NotPublished {
            publication: publication.clone(),
            tables: missing.join(", "),
        });
    }
    Ok(())
}

/// The slot's row in `pg_replication_slots`, `None` when there is no such slot.
pub async fn slot_state(client: &Client, slot: &str) -> Result<Option<SlotState>, ProvisionError> {
    let row = client
        .query_opt(
            "SELECT coalesce(plugin, ''), coalesce(database, ''), active_pid,
                    confirmed_flush_lsn::text, restart_lsn::text, wal_status, safe_wal_size
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query_error(format!("looking up slot {slot:?}")))?;
    Ok(row.map(|r| {
        let lsn = |i: usize| r.get::<_, Option<String>>(i).and_then(|s| s.parse().ok());
        SlotState {
            plugin: r.get(0),
            database: r.get(1),
            active_pid: r.get(2),
            confirmed_flush_lsn: lsn(3),
            restart_lsn: lsn(4),
            wal_status: r.get(5),
            safe_wal_size: r.get(6),
        }
    }))
}

/// Refuse a slot this pipeline cannot use.
pub fn check_slot(slot: &str, state: &SlotState, database: &str) -> Result<(), ProvisionError> {
    if state.plugin != "pgoutput" {
        return Err(ProvisionError::SlotPlugin {
            slot: slot.into(),
            plugin: state.plugin.clone(),
        });
    }
    if state.database != database {
        return Err(ProvisionError::SlotDatabase {
            slot: slot.into(),
            database: state.database.clone(),
            expected: database.into(),
        });
    }
    if let Some(pid) = state.active_pid {
        return Err(ProvisionError::SlotActive {
            slot: slot.into(),
            pid,
        });
    }
    Ok(())
}

pub async fn current_database(client: &Client) -> Result<String, ProvisionError> {
    let row = client
        .query_one("SELECT current_database()", &[])
        .await
        .map_err(query_error("reading the current database"))?;
    Ok(row.get(0))
}

pub async fn current_wal_lsn(client: &Client) -> Result<Lsn, ProvisionError> {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .map_err(query_error("reading the current WAL position"))?;
    let text: String = row.get(0);
    Ok(text.parse().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_part_by_part() {
        assert_eq!(quote_table("public.orders"), "\"public\".\"orders\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }

    fn state(plugin: &str, active_pid: Option<i32>) -> SlotState {
        SlotState {
            plugin: plugin.into(),
            database: "shop".into(),
            active_pid,
            confirmed_flush_lsn: None,
            restart_lsn: None,
            wal_status: None,
            safe_wal_size: None,
        }
    }

    #[test]
    fn unusable_slots_are_refused_with_the_reason() {
        check_slot("s", &state("pgoutput", None), "shop").unwrap();
        let err = check_slot("s", &state("wal2json", None), "shop")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"wal2json\""), "{err}");
        let err = check_slot("s", &state("pgoutput", Some(42)), "shop")
            .unwrap_err()
            .to_string();
        assert!(err.contains("active for pid 42"), "{err}");
        let err = check_slot("s", &state("pgoutput", None), "other")
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to database \"shop\""), "{err}");
    }
}
