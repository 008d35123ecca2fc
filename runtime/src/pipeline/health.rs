//! Whether a running pipeline is alive and ready, and how far behind the lake is: the
//! judgements behind `GET /healthz`, `GET /readyz`, `tributary_ready` and
//! `tributary_lag_seconds`.
//!
//! They read only the pipeline's [`Progress`] and the time passed in, never a clock, so they
//! are unit-tested with made-up instants. Alive means the stages have not ended (a process
//! whose pipeline stopped is about to exit). Ready means the slot is being read and no sink or
//! source step has been failing for longer than `metrics.ready_after_failing_secs`: a short
//! outage is retried without telling the orchestrator, a long one takes the pipeline out of
//! service, and both answer with the reason in one line.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::messages::Progress;
use crate::Lsn;

/// A step that keeps failing and is being retried: since when, and what the latest attempt
/// said (naming the step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub since: Instant,
    pub error: String,
}

/// The steps failing now, by the side of the pipeline they belong to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// A sink step (an intent, an upload, a commit entry), retried by the landing stage.
    pub sink: Option<Failure>,
    /// Reopening the replication connection.
    pub source: Option<Failure>,
    /// Sampling the slot's WAL figures over SQL: it never stops the pipeline, but a source
    /// that cannot answer for long is a source that fails.
    pub slot_sample: Option<Failure>,
}

impl Faults {
    /// The sink's failure and the longer-failing of the source's two, with the side's name.
    fn sides(&self) -> impl Iterator<Item = (&'static str, &Failure)> {
        let source = match (&self.source, &self.slot_sample) {
            (Some(a), Some(b)) => Some(if a.since <= b.since { a } else { b }),
            (a, b) => a.as_ref().or(b.as_ref()),
        };
        [("sink", self.sink.as_ref()), ("source", source)]
            .into_iter()
            .filter_map(|(side, failure)| Some((side, failure?)))
    }
}

/// The first transaction of a flush on its way to the lake: where it ends and when it
/// committed (microseconds since the Unix epoch, by the source's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub end: Lsn,
    pub commit_time: i64,
}

/// Transactions read from the slot and not yet landed, kept as the first transaction of each
/// flush handed on (in order) and of the batch being gathered: the oldest of them is how far
/// behind the lake is. One entry per flush, so keeping it costs nothing per transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    handed_on: VecDeque<Pending>,
    gathering: Option<Pending>,
}

impl Backlog {
    /// A flush whose first transaction is `first` was handed on.
    pub fn handed_on(&mut self, first: Pending) {
        if self
            .handed_on
            .back()
            .is_none_or(|last| last.end < first.end)
        {
            self.handed_on.push_back(first);
        }
    }

    /// The batch being gathered starts with `first` (`None`: nothing is being gathered).
    pub fn gathering(&mut self, first: Option<Pending>) {
        self.gathering = first;
    }

    /// The lake now holds everything up to `end`; returns the oldest transaction that this
    /// landed, if it was waiting here.
    pub fn landed(&mut self, end: Lsn) -> Option<Pending> {
        let mut oldest = None;
        while let Some(first) = self.handed_on.front().copied() {
            if first.end > end {
                break;
            }
            oldest.get_or_insert(first);
            self.handed_on.pop_front();
        }
        if self.gathering.is_some_and(|g| g.end <= end) {
            oldest = oldest.or(self.gathering.take());
        }
        oldest
    }

    /// The oldest transaction read and not landed.
    pub fn oldest(&self) -> Option<Pending> {
        self.handed_on.front().copied().or(self.gathering)
    }
}

/// Seconds from `commit_time` to `unix_micros` (0 when the clocks disagree the other way).
pub fn seconds_since(commit_time: i64, unix_micros: i64) -> f64 {
    unix_micros.saturating_sub(commit_time).max(0) as f64 / 1e6
}

/// `tributary_lag_seconds`: with transactions read and not yet landed, the time since the
/// oldest of them committed (the lake holds everything that committed before it); 0 when
/// everything read has landed. Measured against the source's commit times, so a clock skew
/// between the two hosts shows in it.
pub fn lag_seconds(progress: &Progress, unix_micros: i64) -> f64 {
    progress
        .backlog
        .oldest()
        .map_or(0.0, |p| seconds_since(p.commit_time, unix_micros))
}

/// A probe's answer: 200 or 503, and the one line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ok: bool,
    pub reason: String,
}

impl Verdict {
    fn yes(reason: String) -> Verdict {
        Verdict { ok: true, reason }
    }

    fn no(reason: String) -> Verdict {
        Verdict { ok: false, reason }
    }
}

/// `/healthz`: alive until the pipeline's stages have ended.
pub fn liveness(progress: &Progress) -> Verdict {
    match &progress.ended {
        Some(why) => Verdict::no(format!("not alive: the pipeline stopped: {why}")),
        None if progress.streaming => Verdict::yes("alive: streaming".into()),
        None => Verdict::yes("alive: starting".into()),
    }
}

/// `/readyz` and `tributary_ready`: streaming, and no sink or source step failing for longer
/// than `ready_after_failing` at `now`. A failure within that time is named, and still ready.
pub fn readiness(progress: &Progress, now: Instant, ready_after_failing: Duration) -> Verdict {
    if let Some(why) = &progress.ended {
        return Verdict::no(format!("not ready: the pipeline stopped: {why}"));
    }
    if progress.stopping {
        return Verdict::no("not ready: stopping (finishing the flush in flight)".into());
    }
    if !progress.streaming {
        return Verdict::no("not ready: starting (the slot is not being read yet)".into());
    }
    let failing_for = |f: &Failure| now.saturating_duration_since(f.since);
    let longest = progress.faults.sides().max_by_key(|(_, f)| failing_for(f));
    if let Some((side, failure)) = longest
        && failing_for(failure) > ready_after_failing
    {
        return Verdict::no(format!(
            "not ready: the {side} has been failing for {} s: {}",
            failing_for(failure).as_secs(),
            one_line(&failure.error)
        ));
    }
    let mut reason = match &progress.last_entry {
        Some(entry) => format!("ready: streaming, confirmed {}", entry.last_end_lsn),
        None => "ready: streaming".to_owned(),
    };
    if let Some((side, failure)) = longest {
        reason.push_str(&format!(
            "; the {side} has been failing for {} s (not ready after {} s): {}",
            failing_for(failure).as_secs(),
            ready_after_failing.as_secs(),
            one_line(&failure.error)
        ));
    }
    Verdict::yes(reason)
}

/// `text` on one line: a probe's body and a log line are read line by line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::commit::{Checkpoint, Writer};

    const AFTER: Duration = Duration::from_secs(60);

    fn streaming() -> Progress {
        let entry =
            Checkpoint::default().open_entry(&Writer::named("w"), "s", Lsn(0x1A2B3C8), false, 1);
        Progress {
            streaming: true,
            last_entry: Some(entry),
            ..Progress::default()
        }
    }

    fn failing(since: Instant, error: &str) -> Option<Failure> {
        Some(Failure {
            since,
            error: error.into(),
        })
    }

    #[test]
    fn a_streaming_pipeline_is_ready_and_says_where_it_is_confirmed() {
        let verdict = readiness(&streaming(), Instant::now(), AFTER);
        assert_eq!(
            verdict,
            Verdict::yes("ready: streaming, confirmed 0/1A2B3C8".into())
        );
        assert_eq!(
            liveness(&streaming()),
            Verdict::yes("alive: streaming".into())
        );
    }

    #[test]
    fn starting_and_stopping_are_alive_but_not_ready() {
        let t0 = Instant::now();
        let starting = Progress::default();
        assert_eq!(
            readiness(&starting, t0, AFTER).reason,
            "not ready: starting (the slot is not being read yet)"
        );
        assert!(liveness(&starting).ok);
        let stopping = Progress {
            stopping: true,
            ..streaming()
        };
        assert!(!readiness(&stopping, t0, AFTER).ok);
        assert!(liveness(&stopping).ok);
    }

    #[test]
    fn a_pipeline_that_ended_is_neither_alive_nor_ready() {
        let ended = Progress {
            ended: Some("uploading data files gave up".into()),
            ..streaming()
        };
        assert_eq!(
            liveness(&ended),
            Verdict::no("not alive: the pipeline stopped: uploading data files gave up".into())
        );
        assert!(!readiness(&ended, Instant::now(), AFTER).ok);
    }

    #[test]
    fn a_sink_failure_turns_not_ready_only_past_the_threshold() {
        let t0 = Instant::now();
        let mut progress = streaming();
        progress.faults.sink = failing(t0, "uploading data files: connection\nrefused");
        let early = readiness(&progress, t0 + Duration::from_secs(59), AFTER);
        assert_eq!(
            early,
            Verdict::yes(
                "ready: streaming, confirmed 0/1A2B3C8; the sink has been failing for 59 s \
                 (not ready after 60 s): uploading data files: connection refused"
                    .into()
            )
        );
        // At the threshold itself it is still ready: not ready means failing for longer.
        assert!(readiness(&progress, t0 + AFTER, AFTER).ok);
        let late = readiness(&progress, t0 + Duration::from_secs(75), AFTER);
        assert_eq!(
            late,
            Verdict::no(
                "not ready: the sink has been failing for 75 s: uploading data files: \
                 connection refused"
                    .into()
            )
        );
        // Recovered: ready again at once.
        progress.faults.sink = None;
        assert!(readiness(&progress, t0 + Duration::from_secs(76), AFTER).ok);
    }

    #[test]
    fn the_longest_failing_side_is_the_one_named() {
        let t0 = Instant::now();
        let mut progress = streaming();
        progress.faults.sink = failing(t0 + Duration::from_secs(50), "sink down");
        progress.faults.slot_sample = failing(t0 + Duration::from_secs(5), "sampling slot");
        progress.faults.source = failing(t0 + Duration::from_secs(10), "reopening");
        let verdict = readiness(&progress, t0 + Duration::from_secs(70), AFTER);
        assert_eq!(
            verdict.reason,
            "not ready: the source has been failing for 65 s: sampling slot"
        );
    }

    fn pending(end: u64, commit_time: i64) -> Pending {
        Pending {
            end: Lsn(end),
            commit_time,
        }
    }

    #[test]
    fn lag_is_the_age_of_the_oldest_transaction_not_landed_and_zero_when_idle() {
        let mut progress = streaming();
        assert_eq!(lag_seconds(&progress, 10_000_000), 0.0);
        progress.backlog.gathering(Some(pending(0x30, 4_000_000)));
        assert_eq!(lag_seconds(&progress, 10_000_000), 6.0);
        // Cut and handed on; a second batch gathers behind it.
        progress.backlog.handed_on(pending(0x30, 4_000_000));
        progress.backlog.gathering(Some(pending(0x50, 7_000_000)));
        progress.backlog.handed_on(pending(0x50, 7_000_000));
        progress.backlog.gathering(Some(pending(0x70, 9_500_000)));
        assert_eq!(lag_seconds(&progress, 10_000_000), 6.0);
        // The first flush landed (it ended at 0x40): the second is now the oldest.
        assert_eq!(
            progress.backlog.landed(Lsn(0x40)),
            Some(pending(0x30, 4_000_000))
        );
        assert_eq!(lag_seconds(&progress, 10_000_000), 3.0);
        // Everything landed: idle, whatever the last commit's age.
        assert_eq!(
            progress.backlog.landed(Lsn(0x80)),
            Some(pending(0x50, 7_000_000))
        );
        assert_eq!(progress.backlog.oldest(), None);
        assert_eq!(lag_seconds(&progress, 99_000_000), 0.0);
    }

    #[test]
    fn a_flush_handed_on_again_after_a_reconnect_is_kept_once() {
        let mut backlog = Backlog::default();
        backlog.handed_on(pending(0x30, 1));
        backlog.handed_on(pending(0x30, 1));
        backlog.handed_on(pending(0x20, 1));
        assert_eq!(backlog.landed(Lsn(0x30)), Some(pending(0x30, 1)));
        assert_eq!(backlog.oldest(), None);
    }

    #[test]
    fn a_source_clock_ahead_of_ours_gives_no_negative_lag() {
        assert_eq!(seconds_since(5_000_000, 4_000_000), 0.0);
        assert_eq!(seconds_since(1_000_000, 2_500_000), 1.5);
    }
}
