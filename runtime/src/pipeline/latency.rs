//! How long flushes, data file uploads and commit entries take, as Prometheus histograms
//! (`tributary_flush_seconds`, `tributary_upload_seconds`, `tributary_commit_seconds`).
//!
//! The stage timers of [`super::StageTimes`] sum the time each stage took; these say how it is
//! spread, so that a slow tail (an object store answering one upload in 20 s) shows beside a
//! healthy median. Landing observes them as its steps succeed (a failed attempt counts in
//! `tributary_sink_retries_total`); the metrics endpoint reads them.
//! They live in [`super::Progress`] as one shared handle: every copy of the progress observes
//! into, and reads, the same histograms.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds of the buckets, in seconds: from a few milliseconds (a commit entry on a
/// local directory) to a minute (a large file to a distant object store, a flush through a
/// slow plugin).
pub const BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The three latency histograms; cloning shares them.
#[derive(Clone)]
pub struct Latencies(Arc<Histograms>);

struct Histograms {
    flush: Histogram,
    upload: Histogram,
    commit: Histogram,
}

impl Default for Latencies {
    fn default() -> Self {
        let new = || Histogram::new(BUCKETS);
        Latencies(Arc::new(Histograms {
            flush: new(),
            upload: new(),
            commit: new(),
        }))
    }
}

impl Latencies {
    /// A committed flush, from when its first part reached the landing stage (encoded) to its
    /// landing: data files up, commit entry written, in its Delta tables, confirmed to the
    /// source. Advance entries (no data) are not flushes here, as in `tributary_flushes_total`.
    pub fn flush(&self, took: Duration) {
        self.0.flush.observe(took.as_secs_f64());
    }

    /// One data file uploaded (a failed attempt counts in `tributary_sink_retries_total`).
    pub fn upload(&self, took: Duration) {
        self.0.upload.observe(took.as_secs_f64());
    }

    /// One commit entry written (likewise).
    pub fn commit(&self, took: Duration) {
        self.0.commit.observe(took.as_secs_f64());
    }

    /// The three histograms with their HELP and TYPE, for a scrape.
    pub(super) fn encode(&self, out: &mut DescriptorEncoder) -> std::fmt::Result {
        for (name, help, histogram) in [
            (
                "tributary_flush_seconds",
                "Seconds from a flush reaching the landing stage, encoded, to its landing (files up, commit entry written, in its Delta tables, confirmed), per committed flush.",
                &self.0.flush,
            ),
            (
                "tributary_upload_seconds",
                "Seconds an upload of one data file took, per file uploaded.",
                &self.0.upload,
            ),
            (
                "tributary_commit_seconds",
                "Seconds writing one commit entry took, per entry written.",
                &self.0.commit,
            ),
        ] {
            histogram.encode(out.encode_descriptor(
                name,
                help,
                None,
                histogram.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Copies of one progress are equal in their latencies when they share the histograms.
impl PartialEq for Latencies {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Latencies {}

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latencies").finish_non_exhaustive()
    }
}
