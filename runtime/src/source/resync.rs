//! Asking a pipeline to load tables again (`tributary resync`, or the pipeline itself when a
//! current-state table gains a column): a transactional logical decoding message in the
//! source's WAL, which the pipeline reads in order, after every change committed before it
//! (see [`crate::stream::load`]).

use crate::Lsn;
use crate::source::provision::{ProvisionError, query_error};
use crate::stream::load::{RESYNC_PREFIX, ResyncRequest};

/// Write the request for a new load of `tables` (every tracked table when empty); returns
/// where it is in the WAL.
pub async fn request(
    client: &tokio_postgres::Client,
    tables: &[String],
) -> Result<Lsn, ProvisionError> {
    let content = serde_json::to_string(&ResyncRequest {
        tables: tables.to_vec(),
    })
    .expect("a request serialises");
    let lsn: String = client
        .query_one(
            "SELECT pg_logical_emit_message(true, $1, $2)::text",
            &[&RESYNC_PREFIX, &content],
        )
        .await
        .map_err(query_error("writing the resync request into the WAL"))?
        .get(0);
    Ok(lsn.parse().unwrap_or_default())
}
