//! The connection factory: every connection Tributary opens to the source starts here, an
//! ordinary SQL session ([`sql`]) or a replication connection ([`replication`]), both from a
//! configuration [`parse_url`] read the way libpq reads it.

use std::str::FromStr;

use tokio_postgres::{Client, NoTls};

use crate::source::provision::ProvisionError;
use crate::source::replication::{ReplicationConnection, ReplicationError};

/// Parse the source URL the way libpq would.
pub fn parse_url(url: &str) -> Result<tokio_postgres::Config, ProvisionError> {
    tokio_postgres::Config::from_str(url).map_err(ProvisionError::Url)
}

/// An ordinary SQL session to the source; the connection runs on its own task.
pub async fn sql(config: &tokio_postgres::Config) -> Result<Client, ProvisionError> {
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

/// A replication connection to the source (`replication=database`), authenticated and ready
/// for replication commands.
pub async fn replication(
    config: &tokio_postgres::Config,
) -> Result<ReplicationConnection, ReplicationError> {
    ReplicationConnection::connect(config).await
}
