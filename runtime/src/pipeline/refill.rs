//! A column that comes into a current-state table holding rows (a column renamed, or added,
//! with a default or without) has no value in the rows no change has touched since: no change
//! carries it. The pipeline then asks the source for the table's rows again, as
//! `tributary resync` does, before the flush that brings the column is applied to the table;
//! the load lands beside the stream and fills every row (docs/design.md, current-state tables).
//! Trigger capture loads only at a start (the journal is read from one snapshot): there the
//! request is a flag in the journal's schema, and the pipeline starts again to take it.

use futures::future::BoxFuture;

use crate::config::{CaptureMode, SourceConfig};
use crate::lake::tables::{Asked, Reload};
use crate::source::provision::{self, ProvisionError};

pub(super) struct AskSource {
    pub source: SourceConfig,
}

impl Reload for AskSource {
    fn request<'a>(
        &'a self,
        output: &'a str,
        columns: &'a [String],
    ) -> BoxFuture<'a, Result<Asked, String>> {
        Box::pin(async move {
            let columns = columns.join(", ");
            let table = crate::lake::tables::mirror_name(output);
            if self.source.capture == CaptureMode::Trigger {
                let asked = self.ask_at_start().await.map_err(|e| e.to_string())?;
                if asked == Asked::AtStart {
                    tracing::info!(%table, %columns, "columns came into a current-state table that holds rows, whose values in rows not changed since no change carries: trigger capture loads every table again at a start, so the pipeline starts again");
                }
                return Ok(asked);
            }
            let (tables, lsn) = self.ask(output).await.map_err(|e| e.to_string())?;
            tracing::info!(%table, %columns, %lsn, load = %tables, "columns came into a current-state table that holds rows, whose values in rows not changed since no change carries: asked for a new load of its rows, which fills them");
            Ok(Asked::Beside)
        })
    }
}

impl AskSource {
    /// A session of its own: a column arrives seldom, and the read stage's is busy.
    async fn connect(&self) -> Result<tokio_postgres::Client, ProvisionError> {
        let pg = crate::source::connect::parse_url(&self.source.url)?;
        crate::source::connect::sql(&pg).await
    }

    /// Trigger capture: flag a load of every table for the next start, unless one is due
    /// already (this start's catch-up meets the flush that asked).
    async fn ask_at_start(&self) -> Result<Asked, ProvisionError> {
        let client = self.connect().await?;
        let asked =
            crate::source::trigger::capture::ask_load(&client, &self.source.trigger_schema).await?;
        Ok(match asked {
            true => Asked::AtStart,
            false => Asked::Due,
        })
    }

    /// Ask for `output`'s table again (every tracked table when the output is not one).
    async fn ask(&self, output: &str) -> Result<(String, crate::Lsn), ProvisionError> {
        let client = self.connect().await?;
        let tracked = provision::tracked_tables(&client, &self.source).await?;
        let tables = match tracked.iter().any(|t| t == output) {
            true => vec![output.to_owned()],
            false => Vec::new(),
        };
        let lsn = crate::source::resync::request(&client, &tables).await?;
        let named = match tables.is_empty() {
            true => format!("every table ({output} is not one)"),
            false => output.to_owned(),
        };
        Ok((named, lsn))
    }
}
