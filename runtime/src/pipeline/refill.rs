//! A column that comes into a current-state table holding rows (a column renamed, or added,
//! with a default or without) has no value in the rows no change has touched since: no change
//! carries it. The pipeline then asks the source for the table's rows again, as
//! `tributary resync` does, before the flush that brings the column is applied to the table;
//! the load lands beside the stream and fills every row (docs/design.md, current-state tables).

use futures::future::BoxFuture;

use crate::config::{CaptureMode, SourceConfig};
use crate::lake::delta::current::Reload;
use crate::source::provision::{self, ProvisionError};

pub(super) struct AskSource {
    pub source: SourceConfig,
}

impl Reload for AskSource {
    fn request<'a>(
        &'a self,
        output: &'a str,
        columns: &'a [String],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let columns = columns.join(", ");
            if self.source.capture == CaptureMode::Trigger {
                tracing::warn!(table = %format!("{output}__current"), %columns, "columns came into a current-state table that holds rows: its rows not changed since hold them as null, and trigger capture cannot load a table again while it runs (docs/design.md, Known limits)");
                return Ok(());
            }
            let (tables, lsn) = self.ask(output).await.map_err(|e| e.to_string())?;
            tracing::info!(table = %format!("{output}__current"), %columns, %lsn, load = %tables, "columns came into a current-state table that holds rows, whose values in rows not changed since no change carries: asked for a new load of its rows, which fills them");
            Ok(())
        })
    }
}

impl AskSource {
    /// Ask for `output`'s table again (every tracked table when the output is not one).
    async fn ask(&self, output: &str) -> Result<(String, crate::Lsn), ProvisionError> {
        let pg = crate::source::connect::parse_url(&self.source.url)?;
        let client = crate::source::connect::sql(&pg).await?;
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
