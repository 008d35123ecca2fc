//! Metrics of a running pipeline in the Prometheus text format (version 0.0.4), served over
//! plain HTTP at `GET /metrics` when `metrics.listen` is set, beside the probes an orchestrator
//! asks: `GET /healthz` (alive) and `GET /readyz` (ready), each answering 200 or 503 with one
//! line that says why (see [`super::health`]).
//!
//! Everything comes from the pipeline's [`Progress`]: what was committed (counters since the
//! process started), where the slot is confirmed, where the time went, whether the sink is
//! failing, how far behind the lake is, the slot's WAL figures, and what each plugin counted
//! (`host.count`) and sent to the dead-letter output, labelled with the plugin. Counts are
//! taken at commit, so a flush that never commits (a crash, a stop) counts nothing and the
//! figures match what landed.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::health;
use crate::lake::commit::EntryKind;
use crate::pipeline::Progress;
use crate::source::slot_wal::WAL_STATUSES;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of the probes' and the errors' one line.
const TEXT: &str = "text/plain; charset=utf-8";

/// The longest a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a request that is read: a scrape's request line and headers.
const REQUEST_LIMIT: usize = 8 * 1024;

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

/// The metrics of `progress` at `now` in the text exposition format.
pub fn render(progress: &Progress, endpoint: &Endpoint, now: Now) -> String {
    let identity = &endpoint.identity;
    let mut out = Text::default();
    out.family("tributary_info", "gauge", "The running pipeline, always 1.");
    out.sample(
        "tributary_info",
        &[("slot", &identity.slot), ("version", identity.version)],
        1,
    );
    out.single(
        "tributary_streaming",
        "gauge",
        "1 while the slot is being read: every transaction committed from then on lands.",
        u64::from(progress.streaming),
    );
    for (name, help, value) in [
        (
            "tributary_flushes_total",
            "Flushes committed to the commit log.",
            progress.flushes,
        ),
        (
            "tributary_transactions_total",
            "Source transactions landed.",
            progress.transactions,
        ),
        (
            "tributary_changes_total",
            "Source changes landed.",
            progress.changes,
        ),
        (
            "tributary_rows_written_total",
            "Rows written to data files, over all outputs.",
            progress.rows_written,
        ),
        (
            "tributary_files_written_total",
            "Data files committed.",
            progress.files_written,
        ),
        (
            "tributary_bytes_written_total",
            "Bytes of data files committed.",
            progress.bytes_written,
        ),
        (
            "tributary_replays_skipped_total",
            "Transactions the server sent again that had already landed, dropped.",
            progress.replays_skipped,
        ),
        (
            "tributary_sink_retries_total",
            "Failed attempts of sink steps (intents, uploads, commit entries) that were retried.",
            progress.sink_retries,
        ),
    ] {
        out.single(name, "counter", help, value);
    }
    out.single(
        "tributary_ready",
        "gauge",
        "1 while the pipeline is ready, as /readyz judges: streaming, and no sink or source step failing for longer than metrics.ready_after_failing_secs.",
        u64::from(health::readiness(progress, now.instant, endpoint.ready_after_failing).ok),
    );
    out.family(
        "tributary_lag_seconds",
        "gauge",
        "With transactions read and not yet landed, seconds since the oldest of them committed; 0 when everything read has landed.",
    );
    out.sample_float(
        "tributary_lag_seconds",
        &[],
        health::lag_seconds(progress, now.unix_micros),
    );
    slot_figures(&mut out, progress);
    journal_figures(&mut out, progress);
    out.single(
        "tributary_sink_failing",
        "gauge",
        "1 while a sink step fails and is being retried (nothing new is confirmed meanwhile).",
        u64::from(progress.sink_failing),
    );
    if let Some(entry) = &progress.last_entry {
        out.single(
            "tributary_confirmed_lsn",
            "gauge",
            "Where the slot is confirmed: the end of the last transaction the commit log holds.",
            entry.last_end_lsn.0,
        );
        out.single(
            "tributary_last_commit_lsn",
            "gauge",
            "Commit LSN of the last source transaction landed.",
            entry.last_commit_lsn.0,
        );
        out.single(
            "tributary_last_entry_sequence",
            "gauge",
            "Sequence number of the last commit entry this process wrote.",
            entry.sequence,
        );
        out.family(
            "tributary_last_entry_timestamp_seconds",
            "gauge",
            "When the last commit entry was written, in seconds since the Unix epoch.",
        );
        out.sample_float(
            "tributary_last_entry_timestamp_seconds",
            &[(
                "kind",
                match entry.kind {
                    EntryKind::Flush => "flush",
                    EntryKind::Open => "open",
                    EntryKind::Advance => "advance",
                    EntryKind::Load => "load",
                },
            )],
            entry.committed_at as f64 / 1e6,
        );
        out.single(
            "tributary_dead_letters_committed",
            "gauge",
            "Changes in the dead-letter output, as the last commit entry counts them (every run).",
            entry.dead_letters,
        );
    }
    out.family(
        "tributary_stage_seconds_total",
        "counter",
        "Wall time spent in each stage of the pipeline.",
    );
    let stages = &progress.stages;
    for (stage, took) in [
        ("decode", stages.decode),
        ("transform", stages.transform),
        ("encode", stages.encode),
        ("upload", stages.upload),
        ("commit", stages.commit),
    ] {
        out.sample_float(
            "tributary_stage_seconds_total",
            &[("stage", stage)],
            took.as_secs_f64(),
        );
    }
    if !progress.plugins.is_empty() {
        out.family(
            "tributary_plugin_calls_total",
            "counter",
            "Calls of a plugin's process in committed flushes.",
        );
        for (plugin, tally) in &progress.plugins {
            out.sample(
                "tributary_plugin_calls_total",
                &[("plugin", plugin)],
                tally.calls,
            );
        }
        out.family(
            "tributary_dead_letters_total",
            "counter",
            "Changes a plugin rejected (or failed on) that landed in the dead-letter output.",
        );
        for (plugin, tally) in &progress.plugins {
            out.sample(
                "tributary_dead_letters_total",
                &[("plugin", plugin)],
                tally.dead_letters,
            );
        }
        out.family(
            "tributary_plugin_counter_total",
            "counter",
            "What plugins counted through the host's count import, by plugin and counter name.",
        );
        for (plugin, tally) in &progress.plugins {
            for (counter, value) in &tally.counters {
                out.sample(
                    "tributary_plugin_counter_total",
                    &[("plugin", plugin), ("counter", counter)],
                    *value,
                );
            }
        }
    }
    out.0
}

/// The slot's WAL figures as last sampled; nothing before the first sample, and no
/// `safe_wal_bytes` when the server keeps WAL for slots without limit.
fn slot_figures(out: &mut Text, progress: &Progress) {
    let Some(slot) = &progress.slot else {
        return;
    };
    if let Some(retained) = slot.retained_bytes {
        out.single(
            "tributary_slot_retained_wal_bytes",
            "gauge",
            "WAL the server keeps for the slot: its current WAL position minus the slot's restart_lsn.",
            retained,
        );
    }
    // Declared even without a sample, so that rules written against it find the name.
    out.family(
        "tributary_slot_safe_wal_bytes",
        "gauge",
        "safe_wal_size of the slot: WAL that may still be written before the slot is in danger of being lost (max_slot_wal_keep_size); no sample while it is unlimited.",
    );
    if let Some(safe) = slot.safe_bytes {
        out.labels("tributary_slot_safe_wal_bytes", &[]);
        let _ = writeln!(out.0, " {safe}");
    }
    if let Some(status) = &slot.wal_status {
        out.family(
            "tributary_slot_wal_status",
            "gauge",
            "wal_status of the slot, as a state set: 1 for the status it has, 0 for the others.",
        );
        for known in WAL_STATUSES {
            out.sample(
                "tributary_slot_wal_status",
                &[("status", known)],
                u64::from(status == known),
            );
        }
    }
}

/// Trigger capture's journal as last sampled; nothing before the first sample.
fn journal_figures(out: &mut Text, progress: &Progress) {
    let Some(journal) = &progress.journal else {
        return;
    };
    out.single(
        "tributary_journal_rows",
        "gauge",
        "Rows in trigger capture's journal: changes not landed yet, or landed and not yet deleted.",
        u64::try_from(journal.rows).unwrap_or(0),
    );
    out.single(
        "tributary_journal_bytes",
        "gauge",
        "The size of trigger capture's journal on the source, indexes and TOAST included.",
        u64::try_from(journal.bytes).unwrap_or(0),
    );
}

/// Text exposition being written.
#[derive(Default)]
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.labels(name, labels);
        let _ = writeln!(self.0, " {value}");
    }

    fn sample_float(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.labels(name, labels);
        let _ = writeln!(self.0, " {value}");
    }

    fn labels(&mut self, name: &str, labels: &[(&str, &str)]) {
        self.0.push_str(name);
        if labels.is_empty() {
            return;
        }
        self.0.push('{');
        for (i, (label, value)) in labels.iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            let _ = write!(self.0, "{label}=\"");
            for c in value.chars() {
                match c {
                    '\\' => self.0.push_str("\\\\"),
                    '"' => self.0.push_str("\\\""),
                    '\n' => self.0.push_str("\\n"),
                    c => self.0.push(c),
                }
            }
            self.0.push('"');
        }
        self.0.push('}');
    }
}

/// Answer scrapes and probes on `listener` until the process ends, from the latest progress.
/// One connection at a time is plenty for a scraper and a prober; a client that says nothing
/// is dropped after a few seconds.
pub async fn serve(listener: TcpListener, progress: watch::Receiver<Progress>, endpoint: Endpoint) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &progress, &endpoint)).await;
    }
}

/// A response: status line, content type and body.
#[derive(Debug, PartialEq, Eq)]
struct Response {
    status: &'static str,
    content_type: &'static str,
    body: String,
}

/// The response to `method` `path`, from `progress` at `now`.
fn respond(
    method: &str,
    path: &str,
    progress: &Progress,
    endpoint: &Endpoint,
    now: Now,
) -> Response {
    let probe = |verdict: health::Verdict| Response {
        status: if verdict.ok {
            "200 OK"
        } else {
            "503 Service Unavailable"
        },
        content_type: TEXT,
        body: format!("{}\n", verdict.reason),
    };
    match (method, path) {
        ("GET", "/metrics") => Response {
            status: "200 OK",
            content_type: CONTENT_TYPE,
            body: render(progress, endpoint, now),
        },
        ("GET", "/healthz") => probe(health::liveness(progress)),
        ("GET", "/readyz") => probe(health::readiness(
            progress,
            now.instant,
            endpoint.ready_after_failing,
        )),
        ("GET", _) => Response {
            status: "404 Not Found",
            content_type: TEXT,
            body: "not found: the metrics are at /metrics, the probes at /healthz and /readyz\n"
                .to_owned(),
        },
        _ => Response {
            status: "405 Method Not Allowed",
            content_type: TEXT,
            body: "only GET is answered\n".to_owned(),
        },
    }
}

async fn answer(
    mut stream: TcpStream,
    progress: &watch::Receiver<Progress>,
    endpoint: &Endpoint,
) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < REQUEST_LIMIT {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    // The answer is made before anything is written: the progress is not held meanwhile.
    let response = respond(method, path, &progress.borrow(), endpoint, Now::read());
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(response.body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::slot_wal::SlotWal;
    use crate::transform::PluginTally;

    fn endpoint() -> Endpoint {
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
        let text = render(&progress, &endpoint(), now());
        for line in [
            "tributary_info{slot=\"orders\",version=\"1.2.3\"} 1",
            "tributary_streaming 1",
            "tributary_ready 1",
            "tributary_lag_seconds 0",
            "tributary_flushes_total 3",
            "tributary_changes_total 120",
            "# TYPE tributary_changes_total counter",
            "tributary_dead_letters_total{plugin=\"mask\"} 2",
            "tributary_plugin_calls_total{plugin=\"mask\"} 3",
            "tributary_plugin_counter_total{plugin=\"mask\",counter=\"values_masked\"} 240",
            "tributary_plugin_counter_total{plugin=\"mask\",counter=\"odd \\\"name\\\"\\\\\"} 1",
            "tributary_stage_seconds_total{stage=\"decode\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        every_sample_has_a_family(&text);
    }

    /// Every sample belongs to a family declared before it.
    fn every_sample_has_a_family(text: &str) {
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.contains(name), "{name} has no TYPE line");
            }
        }
    }

    #[test]
    fn a_pipeline_without_plugins_or_entries_leaves_those_families_out() {
        let text = render(&Progress::default(), &endpoint(), now());
        assert!(!text.contains("tributary_plugin"), "{text}");
        assert!(!text.contains("tributary_confirmed_lsn"), "{text}");
        assert!(!text.contains("tributary_slot_"), "{text}");
        assert!(!text.contains("tributary_journal_"), "{text}");
        assert!(text.contains("tributary_streaming 0"), "{text}");
        assert!(text.contains("tributary_ready 0"), "{text}");
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
        let text = render(&progress, &endpoint(), now());
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
        let text = render(&progress, &endpoint(), now());
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
        let text = render(&progress, &endpoint(), now());
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
        let text = render(&progress, &endpoint(), at);
        assert!(text.contains("\ntributary_lag_seconds 2.5\n"), "{text}");
    }

    #[test]
    fn probes_answer_200_or_503_with_one_line() {
        let at = now();
        let starting = Progress::default();
        let ready = respond("GET", "/readyz", &starting, &endpoint(), at);
        assert_eq!(
            ready,
            Response {
                status: "503 Service Unavailable",
                content_type: TEXT,
                body: "not ready: starting (the slot is not being read yet)\n".into()
            }
        );
        let alive = respond("GET", "/healthz", &starting, &endpoint(), at);
        assert_eq!(
            (alive.status, alive.body.as_str()),
            ("200 OK", "alive: starting\n")
        );
        let streaming = Progress {
            streaming: true,
            ..Progress::default()
        };
        let ready = respond("GET", "/readyz", &streaming, &endpoint(), at);
        assert_eq!(
            (ready.status, ready.body.as_str()),
            ("200 OK", "ready: streaming\n")
        );
        let ended = Progress {
            ended: Some("the sink refused".into()),
            ..streaming
        };
        let alive = respond("GET", "/healthz", &ended, &endpoint(), at);
        assert_eq!(alive.status, "503 Service Unavailable");
        assert_eq!(alive.body.lines().count(), 1);
        assert_eq!(
            respond("GET", "/health", &ended, &endpoint(), at).status,
            "404 Not Found"
        );
        assert_eq!(
            respond("POST", "/readyz", &ended, &endpoint(), at).status,
            "405 Method Not Allowed"
        );
    }

    #[tokio::test]
    async fn a_scrape_gets_the_latest_progress_and_other_paths_a_404() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (sender, receiver) = watch::channel(Progress::default());
        tokio::spawn(serve(listener, receiver, endpoint()));
        sender.send_modify(|p| p.changes = 7);
        let get = |path: &'static str| async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response
        };
        let metrics = get("/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
        assert!(metrics.contains(CONTENT_TYPE), "{metrics}");
        assert!(
            metrics.contains("\ntributary_changes_total 7\n"),
            "{metrics}"
        );
        let other = get("/").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        sender.send_modify(|p| p.streaming = true);
        let ready = get("/readyz?verbose").await;
        assert!(
            ready.starts_with("HTTP/1.1 200 OK\r\n")
                && ready.ends_with("\r\n\r\nready: streaming\n"),
            "{ready}"
        );
    }
}
