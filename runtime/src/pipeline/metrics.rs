//! Metrics of a running pipeline in the Prometheus text format (version 0.0.4), written with
//! the Prometheus project's client (`prometheus-client`) and served at `GET /metrics` when
//! `metrics.listen` is set (see [`super::http`]).
//!
//! Everything comes from the pipeline's [`Progress`]: what was committed (counters since the
//! process started), where the slot is confirmed, where the time went and how it is spread
//! (the latency histograms, see [`super::latency`]), whether the sink is failing, how far
//! behind the lake is, the slot's WAL figures, and what each plugin counted (`host.count`) and
//! sent to the dead-letter output, labelled with the plugin. Counts are taken at commit, so a
//! flush that never commits (a crash, a stop) counts nothing and the figures match what
//! landed. One figure is not the progress's: the requests sent to the Iceberg catalog, which
//! the catalog clients count as they send them, for the whole process
//! ([`crate::lake::iceberg::catalog::requests_sent`]).
//!
//! A scrape is one snapshot of the progress, read at one instant ([`Now`]): a collector holds
//! it and writes every family from it, with its HELP and TYPE, so the figures of one scrape
//! agree with each other.

use std::fmt;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric, prometheus_text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::health;
use crate::lake::commit::EntryKind;
use crate::pipeline::Progress;
use crate::source::slot_wal::WAL_STATUSES;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// What names the pipeline in every scrape.
#[derive(Debug, Clone)]
pub struct Identity {
    pub slot: String,
    pub version: &'static str,
}

/// What the endpoint answers with besides the progress.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub identity: Identity,
    /// `metrics.ready_after_failing_secs`.
    pub ready_after_failing: Duration,
}

/// The time an answer is given at, by both clocks: the monotonic one for how long steps have
/// failed, the wall clock for the age of the source's commits.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub instant: Instant,
    pub unix_micros: i64,
}

impl Now {
    pub fn read() -> Now {
        Now {
            instant: Instant::now(),
            unix_micros: crate::clock::unix_micros(),
        }
    }
}

/// The metrics of `progress` at `now` in the text exposition format. Fails only if the client
/// cannot format a figure, which no figure here gives it cause to.
pub fn render(progress: &Progress, endpoint: &Endpoint, now: Now) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        progress: progress.clone(),
        endpoint: endpoint.clone(),
        now,
    }));
    let mut text = String::new();
    prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

/// One scrape: the progress as it was, and when.
#[derive(Debug)]
struct Scrape {
    progress: Progress,
    endpoint: Endpoint,
    now: Now,
}

impl Collector for Scrape {
    fn encode(&self, mut out: DescriptorEncoder) -> fmt::Result {
        let (progress, out) = (&self.progress, &mut out);
        let identity = &self.endpoint.identity;
        family(
            out,
            "tributary_info",
            "The running pipeline, always 1.",
            MetricType::Gauge,
            [(
                [
                    ("slot", identity.slot.as_str()),
                    ("version", identity.version),
                ],
                ConstGauge::new(1u64),
            )],
        )?;
        gauge(
            out,
            "tributary_streaming",
            "1 while the slot is being read: every transaction committed from then on lands.",
            u64::from(progress.streaming),
        )?;
        // Declared without a sample unless source.failover and source.standby_url are set.
        family(
            out,
            "tributary_failover_ready",
            "1 while the standby of source.standby_url holds a persistent synchronised copy of the failover slot (a promotion keeps it); 0 otherwise, when a failover now would lose the slot.",
            MetricType::Gauge,
            progress.failover_ready.map(|ready| {
                (
                    Vec::<(&str, &str)>::new(),
                    ConstGauge::new(u64::from(ready)),
                )
            }),
        )?;
        totals(out, progress)?;
        counter(
            out,
            "tributary_catalog_requests",
            "Requests sent to the Iceberg catalog of sink.catalog since the process started (SQL statements, HTTP requests), answered or not; 0 without a catalog.",
            crate::lake::iceberg::catalog::requests_sent(),
        )?;
        counter(
            out,
            "tributary_accepted_gaps",
            "Gaps accepted with --accept-gap since the process started (a slot ahead of the lake or missing, a trigger journal new or installed again, another timeline): changes this lake will never hold; the commit log's open entry records which.",
            progress.accepted_gaps,
        )?;
        let ready = health::readiness(
            progress,
            self.now.instant,
            self.endpoint.ready_after_failing,
        );
        gauge(
            out,
            "tributary_ready",
            "1 while the pipeline is ready, as /readyz judges: streaming, and no sink or source step failing for longer than metrics.ready_after_failing_secs.",
            u64::from(ready.ok),
        )?;
        gauge(
            out,
            "tributary_lag_seconds",
            "With transactions read and not yet landed, seconds since the oldest of them committed; 0 when everything read has landed.",
            health::lag_seconds(progress, self.now.unix_micros),
        )?;
        slot_figures(out, progress)?;
        journal_figures(out, progress)?;
        gauge(
            out,
            "tributary_sink_failing",
            "1 while a sink step fails and is being retried (nothing new is confirmed meanwhile).",
            u64::from(progress.sink_failing),
        )?;
        last_entry(out, progress)?;
        stage_times(out, progress)?;
        plugin_tallies(out, progress)?;
        progress.latencies.encode(out)
    }
}

/// A counter without labels (the client names its sample `<name>_total`).
fn counter(out: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    ConstCounter::new(value).encode(out.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// A gauge without labels.
fn gauge(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    ConstGauge::new(value).encode(out.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A family of samples told apart by their labels; declared (HELP and TYPE) even without any.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = out.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// What landed since the process started.
fn totals(out: &mut DescriptorEncoder, progress: &Progress) -> fmt::Result {
    for (name, help, value) in [
        (
            "tributary_flushes",
            "Flushes committed to the commit log.",
            progress.flushes,
        ),
        (
            "tributary_transactions",
            "Source transactions landed.",
            progress.transactions,
        ),
        (
            "tributary_changes",
            "Source changes landed.",
            progress.changes,
        ),
        (
            "tributary_rows_written",
            "Rows written to data files, over all outputs.",
            progress.rows_written,
        ),
        (
            "tributary_files_written",
            "Data files committed.",
            progress.files_written,
        ),
        (
            "tributary_bytes_written",
            "Bytes of data files committed.",
            progress.bytes_written,
        ),
        (
            "tributary_replays_skipped",
            "Transactions the server sent again that had already landed, dropped.",
            progress.replays_skipped,
        ),
        (
            "tributary_sink_retries",
            "Failed attempts of sink steps (intents, uploads, commit entries) that were retried.",
            progress.sink_retries,
        ),
    ] {
        counter(out, name, help, value)?;
    }
    Ok(())
}

/// The slot's WAL figures as last sampled; nothing before the first sample, and no
/// `safe_wal_bytes` sample when the server keeps WAL for slots without limit.
fn slot_figures(out: &mut DescriptorEncoder, progress: &Progress) -> fmt::Result {
    let Some(slot) = &progress.slot else {
        return Ok(());
    };
    if let Some(retained) = slot.retained_bytes {
        gauge(
            out,
            "tributary_slot_retained_wal_bytes",
            "WAL the server keeps for the slot: its current WAL position minus the slot's restart_lsn.",
            retained,
        )?;
    }
    // Declared even without a sample, so that rules written against it find the name.
    family(
        out,
        "tributary_slot_safe_wal_bytes",
        "safe_wal_size of the slot: WAL that may still be written before the slot is in danger of being lost (max_slot_wal_keep_size); no sample while it is unlimited.",
        MetricType::Gauge,
        slot.safe_bytes
            .map(|safe| (Vec::<(&str, &str)>::new(), ConstGauge::new(safe))),
    )?;
    if let Some(status) = &slot.wal_status {
        family(
            out,
            "tributary_slot_wal_status",
            "wal_status of the slot, as a state set: 1 for the status it has, 0 for the others.",
            MetricType::Gauge,
            WAL_STATUSES.iter().map(|known| {
                (
                    [("status", *known)],
                    ConstGauge::new(u64::from(status == known)),
                )
            }),
        )?;
    }
    Ok(())
}

/// Trigger capture's journal as last sampled; nothing before the first sample.
fn journal_figures(out: &mut DescriptorEncoder, progress: &Progress) -> fmt::Result {
    let Some(journal) = &progress.journal else {
        return Ok(());
    };
    gauge(
        out,
        "tributary_journal_rows",
        "Rows in trigger capture's journal: changes not landed yet, or landed and not yet deleted.",
        journal.rows.max(0),
    )?;
    gauge(
        out,
        "tributary_journal_bytes",
        "The size of trigger capture's journal on the source, indexes and TOAST included.",
        journal.bytes.max(0),
    )
}

/// Where the commit log stands, from the last entry this process wrote or read at start.
fn last_entry(out: &mut DescriptorEncoder, progress: &Progress) -> fmt::Result {
    let Some(entry) = &progress.last_entry else {
        return Ok(());
    };
    gauge(
        out,
        "tributary_confirmed_lsn",
        "Where the slot is confirmed: the end of the last transaction the commit log holds.",
        entry.last_end_lsn.0,
    )?;
    gauge(
        out,
        "tributary_last_commit_lsn",
        "Commit LSN of the last source transaction landed.",
        entry.last_commit_lsn.0,
    )?;
    gauge(
        out,
        "tributary_last_entry_sequence",
        "Sequence number of the last commit entry this process wrote.",
        entry.sequence,
    )?;
    let kind = match entry.kind {
        EntryKind::Flush => "flush",
        EntryKind::Open => "open",
        EntryKind::Advance => "advance",
        EntryKind::Load => "load",
    };
    family(
        out,
        "tributary_last_entry_timestamp_seconds",
        "When the last commit entry was written, in seconds since the Unix epoch.",
        MetricType::Gauge,
        [(
            [("kind", kind)],
            ConstGauge::new(entry.committed_at as f64 / 1e6),
        )],
    )?;
    gauge(
        out,
        "tributary_dead_letters_committed",
        "Changes in the dead-letter output, as the last commit entry counts them (every run).",
        entry.dead_letters,
    )
}

/// Wall time summed per stage.
fn stage_times(out: &mut DescriptorEncoder, progress: &Progress) -> fmt::Result {
    let stages = &progress.stages;
    family(
        out,
        "tributary_stage_seconds",
        "Wall time spent in each stage of the pipeline.",
        MetricType::Counter,
        [
            ("decode", stages.decode),
            ("transform", stages.transform),
            ("encode", stages.encode),
            ("upload", stages.upload),
            ("commit", stages.commit),
        ]
        .map(|(stage, took)| ([("stage", stage)], ConstCounter::new(took.as_secs_f64()))),
    )
}

/// What each plugin did in committed flushes, labelled with the plugin; nothing without
/// plugins.
fn plugin_tallies(out: &mut DescriptorEncoder, progress: &Progress) -> fmt::Result {
    let plugins = &progress.plugins;
    if plugins.is_empty() {
        return Ok(());
    }
    family(
        out,
        "tributary_plugin_calls",
        "Calls of a plugin's process in committed flushes.",
        MetricType::Counter,
        plugins.iter().map(|(plugin, tally)| {
            (
                [("plugin", plugin.as_str())],
                ConstCounter::new(tally.calls),
            )
        }),
    )?;
    family(
        out,
        "tributary_dead_letters",
        "Changes a plugin rejected (or failed on) that landed in the dead-letter output.",
        MetricType::Counter,
        plugins.iter().map(|(plugin, tally)| {
            (
                [("plugin", plugin.as_str())],
                ConstCounter::new(tally.dead_letters),
            )
        }),
    )?;
    family(
        out,
        "tributary_plugin_counter",
        "What plugins counted through the host's count import, by plugin and counter name.",
        MetricType::Counter,
        plugins.iter().flat_map(|(plugin, tally)| {
            tally.counters.iter().map(move |(counter, value)| {
                (
                    [("plugin", plugin.as_str()), ("counter", counter.as_str())],
                    ConstCounter::new(*value),
                )
            })
        }),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::source::slot_wal::SlotWal;
    use crate::transform::PluginTally;

    /// An endpoint of pipeline `orders`, version 1.2.3 (the HTTP front's tests use it too).
    pub(in crate::pipeline) fn endpoint() -> Endpoint {
        Endpoint {
            identity: Identity {
                slot: "orders".into(),
                version: "1.2.3",
            },
            ready_after_failing: Duration::from_secs(60),
        }
    }

    fn now() -> Now {
        Now::read()
    }

    #[test]
    fn counters_and_plugin_tallies_render_with_their_labels() {
        let mut progress = Progress {
            flushes: 3,
            changes: 120,
            streaming: true,
            ..Progress::default()
        };
        let mut mask = PluginTally {
            dead_letters: 2,
            calls: 3,
            ..PluginTally::default()
        };
        mask.counters.insert("values_masked".into(), 240);
        mask.counters.insert("odd \"name\"\\".into(), 1);
        progress.plugins.insert("mask".into(), mask);
        progress.failover_ready = Some(false);
        progress.accepted_gaps = 1;
        let text = render(&progress, &endpoint(), now()).unwrap();
        for line in [
            "tributary_info{slot=\"orders\",version=\"1.2.3\"} 1",
            "# TYPE tributary_accepted_gaps_total counter",
            "tributary_accepted_gaps_total 1",
            "tributary_streaming 1",
            "# TYPE tributary_failover_ready gauge",
            "tributary_failover_ready 0",
            "tributary_ready 1",
            "tributary_lag_seconds 0.0",
            "tributary_flushes_total 3",
            "tributary_changes_total 120",
            "# TYPE tributary_changes_total counter",
            "# TYPE tributary_catalog_requests_total counter",
            "tributary_dead_letters_total{plugin=\"mask\"} 2",
            "tributary_plugin_calls_total{plugin=\"mask\"} 3",
            "tributary_plugin_counter_total{plugin=\"mask\",counter=\"values_masked\"} 240",
            "tributary_plugin_counter_total{plugin=\"mask\",counter=\"odd \\\"name\\\"\\\\\"} 1",
            "tributary_stage_seconds_total{stage=\"decode\"} 0.0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        every_sample_has_a_family(&text);
    }

    /// Every sample belongs to a family declared before it with HELP and TYPE (a histogram's
    /// samples are its `_bucket`, `_sum` and `_count`).
    fn every_sample_has_a_family(text: &str) {
        let mut helped = std::collections::HashSet::new();
        let mut declared = std::collections::HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                helped.insert(rest.split(' ').next().unwrap().to_owned());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(
                    helped.contains(name),
                    "{name} has no HELP line before its TYPE"
                );
                declared.insert(name.to_owned(), kind.to_owned());
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| {
                        let base = name.strip_suffix(suffix)?;
                        (declared.get(base)? == "histogram").then_some(base)
                    })
                    .unwrap_or(name);
                assert!(declared.contains_key(family), "{name} has no TYPE line");
            }
        }
    }

    #[test]
    fn a_pipeline_without_plugins_or_entries_leaves_those_families_out() {
        let text = render(&Progress::default(), &endpoint(), now()).unwrap();
        assert!(!text.contains("tributary_plugin"), "{text}");
        assert!(!text.contains("tributary_confirmed_lsn"), "{text}");
        assert!(!text.contains("tributary_slot_"), "{text}");
        assert!(!text.contains("tributary_journal_"), "{text}");
        assert!(text.contains("tributary_streaming 0"), "{text}");
        assert!(text.contains("tributary_ready 0"), "{text}");
        assert!(
            text.contains("\ntributary_accepted_gaps_total 0\n"),
            "{text}"
        );
    }

    #[test]
    fn the_journal_figures_render_as_gauges() {
        let progress = Progress {
            journal: Some(crate::source::trigger::capture::JournalSize {
                rows: 1200,
                bytes: 98_304,
            }),
            ..Progress::default()
        };
        let text = render(&progress, &endpoint(), now()).unwrap();
        for line in [
            "tributary_journal_rows 1200",
            "tributary_journal_bytes 98304",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
    }

    #[test]
    fn the_slot_figures_render_as_gauges_and_wal_status_as_a_state_set() {
        let mut progress = Progress {
            slot: Some(SlotWal {
                retained_bytes: Some(123_456),
                safe_bytes: Some(-4096),
                wal_status: Some("unreserved".into()),
            }),
            ..Progress::default()
        };
        let text = render(&progress, &endpoint(), now()).unwrap();
        for line in [
            "tributary_slot_retained_wal_bytes 123456",
            "tributary_slot_safe_wal_bytes -4096",
            "tributary_slot_wal_status{status=\"reserved\"} 0",
            "tributary_slot_wal_status{status=\"extended\"} 0",
            "tributary_slot_wal_status{status=\"unreserved\"} 1",
            "tributary_slot_wal_status{status=\"lost\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        every_sample_has_a_family(&text);
        // Unlimited (max_slot_wal_keep_size = -1): no safe size to speak of, no sample.
        progress.slot = Some(SlotWal {
            retained_bytes: Some(1),
            safe_bytes: None,
            wal_status: Some("reserved".into()),
        });
        let text = render(&progress, &endpoint(), now()).unwrap();
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("tributary_slot_safe_wal_bytes")),
            "{text}"
        );
        assert!(
            text.contains("\n# TYPE tributary_slot_safe_wal_bytes gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("\ntributary_slot_wal_status{status=\"reserved\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn the_lag_gauge_is_the_age_of_the_oldest_transaction_not_landed() {
        let mut progress = Progress::default();
        progress.backlog.gathering(Some(health::Pending {
            end: crate::Lsn(0x40),
            commit_time: 1_000_000,
        }));
        let at = Now {
            instant: Instant::now(),
            unix_micros: 3_500_000,
        };
        let text = render(&progress, &endpoint(), at).unwrap();
        assert!(text.contains("\ntributary_lag_seconds 2.5\n"), "{text}");
    }

    #[test]
    fn the_latency_histograms_are_declared_and_count_what_was_observed() {
        let progress = Progress::default();
        let text = render(&progress, &endpoint(), now()).unwrap();
        for name in ["flush", "upload", "commit"] {
            let family = format!("tributary_{name}_seconds");
            assert!(
                text.contains(&format!("\n# TYPE {family} histogram\n")),
                "{text}"
            );
            assert!(text.contains(&format!("\n{family}_count 0\n")), "{text}");
        }
        let latencies = progress.latencies.clone();
        latencies.upload(Duration::from_millis(30));
        latencies.upload(Duration::from_secs(3));
        latencies.commit(Duration::from_millis(4));
        latencies.flush(Duration::from_secs(90));
        // Observed through a copy: the progress sees it.
        let text = render(&progress, &endpoint(), now()).unwrap();
        for line in [
            "tributary_upload_seconds_bucket{le=\"0.025\"} 0",
            "tributary_upload_seconds_bucket{le=\"0.05\"} 1",
            "tributary_upload_seconds_bucket{le=\"2.5\"} 1",
            "tributary_upload_seconds_bucket{le=\"5\"} 2",
            "tributary_upload_seconds_bucket{le=\"+Inf\"} 2",
            "tributary_upload_seconds_sum 3.03",
            "tributary_upload_seconds_count 2",
            "tributary_commit_seconds_bucket{le=\"0.005\"} 1",
            "tributary_flush_seconds_bucket{le=\"60\"} 0",
            "tributary_flush_seconds_bucket{le=\"+Inf\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        every_sample_has_a_family(&text);
    }
}
