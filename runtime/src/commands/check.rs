//! `tributary check`: everything a start would refuse, found without starting, in one report:
//! the preflight a start makes first ([`crate::pipeline::preflight`]), printed.

use crate::config::PipelineConfig;
use crate::pipeline::preflight::{self, Purpose};
use crate::source::prerequisites::Report;
use crate::source::provision::ProvisionError;

/// The whole check: a report of every finding, or why it could not be made (the source
/// unreachable). `accept_gap` judges the start as `tributary run --accept-gap` with the same
/// text would.
pub async fn check(
    config: &PipelineConfig,
    accept_gap: Option<&str>,
) -> Result<Report, ProvisionError> {
    preflight::gather(config, Purpose::Check { accept_gap }).await
}
