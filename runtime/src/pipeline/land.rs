//! The landing stage: the one IO task that carries out the flush machine's actions against the
//! sink and the slot (see [`crate::lake::flush`]).

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use object_store::path::Path;
use tokio::sync::{mpsc, watch};

use super::budget::Share;
use super::error::PipelineError;
use super::health::{Failure, seconds_since};
use super::messages::{Encoded, Progress, Shutdown};
use super::retry::TELL_EVERY;
use super::sleep_until;
use crate::failpoint;
use crate::lake::commit::{CommitError, CommitLog, EntryKind, Failover, unix_micros};
use crate::lake::flush::{Action, ActionId, EncodedFlush, FlushMachine, Step, Stopped};
use crate::lake::sink::{Created, Sink};
use crate::lake::tables::Tables;
use crate::source::replication::Confirmer;
use crate::transform::{Tallies, add_tallies, describe_tallies};

/// After a stop request, the longest landing waits for the sink to answer anything; a
/// healthy sink answers every request well within it, a hanging one is given up on.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// Actions being carried out: each yields its result and how long it took.
type Running = FuturesUnordered<BoxFuture<'static, (ActionId, Result<(), CommitError>, Duration)>>;

/// Where flushes land: the commit log, and with `sink.format = "delta"` the outputs' tables.
pub(super) struct Lake {
    pub log: CommitLog,
    pub tables: Option<Tables>,
}

/// Land what arrives on `input` until it closes and everything has landed, or landing stops.
pub(super) async fn land(
    mut machine: FlushMachine,
    mut input: mpsc::Receiver<Encoded>,
    Lake { log, tables }: Lake,
    confirmer: Confirmer,
    mut shutdown: Shutdown,
    progress: watch::Sender<Progress>,
    mut followed: watch::Receiver<Option<Failover>>,
) -> Result<(), PipelineError> {
    let sink = log.sink().clone();
    let retry_limit = machine.retry_limit();
    let mut running: Running = FuturesUnordered::new();
    let mut books = Books {
        failing: Failing {
            limit: retry_limit,
            ..Failing::default()
        },
        ..Books::default()
    };
    let mut open = true;
    let mut stop_seen = false;
    // After a stop request, how long landing waits for a sink request that gives no answer.
    let mut patience: Option<tokio::time::Instant> = None;
    loop {
        // The reader followed a promotion: the next entry records it.
        if followed.has_changed().unwrap_or(false)
            && let Some(failover) = *followed.borrow_and_update()
        {
            machine.followed(failover);
        }
        while let Some(action) = machine.poll_action(Instant::now(), unix_micros()) {
            let confirmed = machine.confirmed();
            if let Some(request) = books.settle(action, confirmed, &confirmer, &progress).await {
                running.push(execute(request, &log, &sink, tables.as_ref()));
            }
        }
        if machine.is_stopped() && machine.is_idle() && running.is_empty() {
            break;
        }
        if !open && machine.is_idle() && running.is_empty() {
            break;
        }
        let retry_at = machine.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            biased;
            changed = shutdown.changed(), if !stop_seen => {
                if changed.is_err() || *shutdown.borrow() {
                    stop_seen = true;
                    patience = Some(tokio::time::Instant::now() + STOP_PATIENCE);
                    machine.stop();
                }
            }
            _ = sleep_until(patience), if stop_seen && !running.is_empty() => {
                // The sink hangs: what is in flight is not confirmed and is replayed next time.
                return Err(PipelineError::StopTimedOut {
                    seconds: STOP_PATIENCE.as_secs(),
                    confirmed: machine.confirmed(),
                });
            }
            Some((id, result, took)) = running.next(), if !running.is_empty() => {
                if stop_seen {
                    patience = Some(tokio::time::Instant::now() + STOP_PATIENCE);
                }
                timed(&progress, id.step, result.is_ok(), took);
                machine.handle(id, result, Instant::now());
            }
            _ = sleep_until(retry_at) => {}
            received = input.recv(), if open && !machine.is_stopped() && machine.accepts() => match received {
                Some(encoded) => machine.push(books.receive(encoded)),
                None => open = false,
            },
        }
    }
    match machine.take_stopped() {
        None => Ok(()),
        Some(Stopped::Failed(error)) => Err(error.into()),
        Some(Stopped::Interrupted { what, confirmed }) => {
            Err(PipelineError::Interrupted { what, confirmed })
        }
        Some(Stopped::GaveUp {
            what,
            failing_for,
            attempts,
            error,
            confirmed,
        }) => Err(PipelineError::GaveUp {
            what,
            failing_for_secs: failing_for.as_secs(),
            attempts,
            limit_secs: retry_limit.map_or(0, |l| l.as_secs()),
            error,
            confirmed,
        }),
    }
}

/// A sink request's time, in its stage's timer and, for a data file or a commit entry that
/// succeeded, in its latency histogram.
fn timed(progress: &watch::Sender<Progress>, step: Step, succeeded: bool, took: Duration) {
    progress.send_if_modified(|p| {
        match step {
            Step::Intent(_) | Step::Upload(_) => p.stages.upload += took,
            _ => p.stages.commit += took,
        }
        match step {
            Step::Upload(_) if succeeded => p.latencies.upload(took),
            Step::Commit if succeeded => p.latencies.commit(took),
            _ => {}
        }
        false
    });
}

/// What landing keeps beside the machine, which holds the flushes themselves: the budget
/// shares of parts whose files are not all up, what each flush in flight took so far and what
/// its plugins counted, the sink steps failing now, and when the plugins' counters were last
/// logged.
#[derive(Default)]
struct Books {
    budgets: Vec<((u64, u32), Share)>,
    held: Vec<(u64, Held)>,
    failing: Failing,
    told_tallies: Option<Instant>,
}

impl Books {
    /// Keep what landing needs of an encoded part beside the machine; the flush part itself
    /// goes to the machine.
    fn receive(&mut self, encoded: Encoded) -> EncodedFlush {
        let Encoded {
            flush,
            _budget,
            transform,
            encode,
            tallies,
        } = encoded;
        self.budgets.push(((flush.sequence, flush.part), _budget));
        match self.held.iter_mut().find(|(n, _)| *n == flush.sequence) {
            Some((_, kept)) => {
                kept.transform += transform;
                kept.encode += encode;
                add_tallies(&mut kept.tallies, &tallies);
            }
            None => self.held.push((
                flush.sequence,
                Held {
                    arrived: Instant::now(),
                    transform,
                    encode,
                    tallies,
                },
            )),
        }
        flush
    }

    /// Carry out an action that asks nothing of the sink, and hand back one that does.
    async fn settle(
        &mut self,
        action: Action,
        confirmed: crate::Lsn,
        confirmer: &Confirmer,
        progress: &watch::Sender<Progress>,
    ) -> Option<Action> {
        match action {
            Action::PartUploaded {
                sequence,
                part,
                last,
            } => {
                self.budgets.retain(|(key, _)| *key != (sequence, part));
                if !last {
                    failpoint::reached("flush.after-part").await;
                }
            }
            Action::Confirm { lsn } => confirmer.confirm(lsn),
            Action::Landed { entry } => {
                let index = self.held.iter().position(|(n, _)| *n == entry.sequence);
                let done = index.map(|i| self.held.remove(i).1);
                let counted = done.as_ref().is_some_and(|d| !d.tallies.is_empty());
                report(progress, &entry, done.as_ref());
                if counted
                    && self
                        .told_tallies
                        .is_none_or(|t| t.elapsed() >= TALLIES_EVERY)
                {
                    self.told_tallies = Some(Instant::now());
                    let line = describe_tallies(&progress.borrow().plugins);
                    tracing::info!("plugin counters so far: {line}");
                }
            }
            Action::Retrying {
                what,
                sequence,
                attempts,
                retry_in,
                error,
            } => {
                let now = Instant::now();
                let told = self
                    .failing
                    .retrying(what, sequence, attempts, retry_in, &error, confirmed, now);
                if let Some(message) = told {
                    tracing::warn!("{message}");
                }
                let failure = self.failing.failure();
                progress.send_modify(|p| {
                    p.sink_retries += 1;
                    p.sink_failing = true;
                    p.faults.sink = failure;
                });
            }
            Action::Recovered { what, attempts } => {
                if let Some(message) = self.failing.recovered(what, attempts, Instant::now()) {
                    tracing::info!("{message}");
                }
                let (still, failure) = (self.failing.any(), self.failing.failure());
                progress.send_modify(|p| {
                    p.sink_failing = still;
                    p.faults.sink = failure;
                });
            }
            Action::Warning { message } => tracing::warn!("{message}"),
            request => return Some(request),
        }
        None
    }
}

/// Sink steps failing now, by what they do: when they began failing, when the log last said
/// so, and what the latest attempt said. An outage is told once when it begins, then every
/// [`TELL_EVERY`], and once when it ends, not once per attempt of every upload. Returns what to
/// log; time is passed in.
#[derive(Default)]
struct Failing {
    steps: Vec<FailingStep>,
    /// `retry.limit_secs`, for the log.
    limit: Option<Duration>,
}

struct FailingStep {
    what: &'static str,
    since: Instant,
    told: Instant,
    error: String,
}

impl Failing {
    #[allow(clippy::too_many_arguments)]
    fn retrying(
        &mut self,
        what: &'static str,
        sequence: u64,
        attempts: u32,
        retry_in: Duration,
        error: &str,
        confirmed: crate::Lsn,
        now: Instant,
    ) -> Option<String> {
        match self.steps.iter_mut().find(|s| s.what == what) {
            None => {
                self.steps.push(FailingStep {
                    what,
                    since: now,
                    told: now,
                    error: error.to_owned(),
                });
                Some(format!(
                    "{what} failed (flush {sequence}): {error}; retrying with backoff {}, next in {retry_in:?}; nothing past {confirmed} is confirmed meanwhile",
                    match self.limit {
                        None => "for as long as it fails".to_owned(),
                        Some(limit) =>
                            format!("for up to {} s (retry.limit_secs)", limit.as_secs()),
                    }
                ))
            }
            Some(step) => {
                error.clone_into(&mut step.error);
                if now.duration_since(step.told) < TELL_EVERY {
                    return None;
                }
                step.told = now;
                Some(format!(
                    "{what} still failing after {:?} and {attempts} attempts (flush {sequence}): {error}; next attempt in {retry_in:?}; nothing past {confirmed} is confirmed",
                    now.duration_since(step.since)
                ))
            }
        }
    }

    /// Whether some step is failing.
    fn any(&self) -> bool {
        !self.steps.is_empty()
    }

    /// The step failing longest, for the readiness probe: since when, and what it said last.
    fn failure(&self) -> Option<Failure> {
        self.steps.iter().min_by_key(|s| s.since).map(|s| Failure {
            since: s.since,
            error: format!("{}: {}", s.what, s.error),
        })
    }

    fn recovered(&mut self, what: &'static str, attempts: u32, now: Instant) -> Option<String> {
        let i = self.steps.iter().position(|s| s.what == what)?;
        let since = self.steps.remove(i).since;
        Some(format!(
            "{what}: the sink is reachable again after {:?} ({attempts} attempts)",
            now.duration_since(since)
        ))
    }
}

/// What landing keeps of a flush beside the machine, for the progress report: when its first
/// part reached landing, its stage times and what the plugins counted making it (reported
/// once it is committed).
struct Held {
    arrived: Instant,
    transform: Duration,
    encode: Duration,
    tallies: Tallies,
}

fn execute(
    action: Action,
    log: &CommitLog,
    sink: &Sink,
    tables: Option<&Tables>,
) -> BoxFuture<'static, (ActionId, Result<(), CommitError>, Duration)> {
    let (log, sink, tables) = (log.clone(), sink.clone(), tables.cloned());
    Box::pin(async move {
        let started = Instant::now();
        let (id, result) = match action {
            Action::WriteIntent { id, files } => {
                let Step::Intent(part) = id.step else {
                    unreachable!("an intent action is an intent step")
                };
                let result = log.write_intent(id.sequence, part, &files).await;
                if result.is_ok() {
                    failpoint::reached("flush.after-intent").await;
                }
                (id, result)
            }
            Action::Upload {
                id,
                path,
                bytes,
                size,
            } => {
                let result = upload(&sink, &path, bytes, size).await;
                if result.is_ok() {
                    failpoint::reached("flush.after-file").await;
                }
                (id, result)
            }
            Action::Commit { id, entry } => {
                failpoint::reached("flush.before-commit").await;
                let result = log.commit(&entry).await;
                if result.is_ok() {
                    failpoint::reached("flush.after-commit").await;
                }
                (id, result)
            }
            Action::Publish { id, files } => {
                let tables = tables.expect("only a pipeline with Delta tables publishes");
                failpoint::reached("tables.before-publish").await;
                let result = tables.publish(id.sequence, &files).await;
                if result.is_ok() {
                    failpoint::reached("tables.after-publish").await;
                }
                (id, result)
            }
            Action::ClearIntent { id, parts } => {
                // The confirm went out just before this was issued.
                failpoint::reached("flush.after-confirm").await;
                (id, log.clear_intent(id.sequence, parts).await)
            }
            Action::Abandon { id, files, parts } => {
                let result = log.abandon(id.sequence, &files, parts).await;
                if let Err(e) = &result {
                    tracing::warn!(sequence = id.sequence, error = %e, "could not remove this flush's files after losing the pipeline; the instance that took over removes them at its next start");
                }
                (id, result)
            }
            other => unreachable!("{other:?} is carried out in the landing loop"),
        };
        (id, result, started.elapsed())
    })
}

/// Create one data file. A file already there under its name (which only this writer
/// produces) is an earlier attempt of the same upload whose reply was lost; its size must
/// match.
async fn upload(
    sink: &Sink,
    path: &str,
    bytes: bytes::Bytes,
    size: u64,
) -> Result<(), CommitError> {
    let object = Path::from(path);
    if sink.create(&object, bytes).await? == Created::Existed {
        let found = sink.size(&object).await?;
        if found != Some(size) {
            return Err(CommitError::Corrupt {
                path: path.to_owned(),
                reason: format!(
                    "this writer's own file name already holds {found:?} bytes, not the {size} it uploads"
                ),
            });
        }
    }
    Ok(())
}

/// How often the plugins' running totals are written to the log (also at the first commit
/// they counted in).
const TALLIES_EVERY: Duration = Duration::from_secs(60);

fn report(
    progress: &watch::Sender<Progress>,
    entry: &crate::lake::commit::CommitEntry,
    done: Option<&Held>,
) {
    if entry.kind == EntryKind::Advance {
        tracing::info!(
            sequence = entry.sequence,
            confirmed = %entry.last_end_lsn,
            "nothing to land for a while; confirmed where the server's WAL moved on"
        );
        progress.send_modify(|p| {
            p.backlog.landed(entry.last_end_lsn);
            p.last_entry = Some(entry.clone());
        });
        return;
    }
    let rows: u64 = entry.files.iter().map(|f| f.rows).sum();
    let bytes: u64 = entry.files.iter().map(|f| f.bytes).sum();
    // How far behind the lake was until now: the age of the oldest transaction this commit
    // made visible (a load chunk has none).
    let mut oldest = None;
    progress.send_if_modified(|p| {
        oldest = p.backlog.landed(entry.last_end_lsn);
        false
    });
    let lag_seconds =
        oldest.map(|o| (seconds_since(o.commit_time, unix_micros()) * 1e3).round() / 1e3);
    tracing::info!(
        sequence = entry.sequence,
        transactions = entry.transactions,
        changes = entry.changes,
        files = entry.files.len(),
        bytes,
        lag_seconds,
        confirmed = %entry.last_end_lsn,
        "committed"
    );
    progress.send_modify(|p| {
        p.flushes += 1;
        p.transactions += entry.transactions;
        p.changes += entry.changes;
        p.rows_written += rows;
        p.files_written += entry.files.len() as u64;
        p.bytes_written += bytes;
        p.last_entry = Some(entry.clone());
        if let Some(done) = done {
            p.latencies.flush(done.arrived.elapsed());
            p.stages.transform += done.transform;
            p.stages.encode += done.encode;
            add_tallies(&mut p.plugins, &done.tallies);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_told_when_it_begins_every_half_minute_and_when_it_ends() {
        let t0 = Instant::now();
        let mut f = Failing::default();
        let upload = |f: &mut Failing, attempts, at| {
            f.retrying(
                "uploading data files",
                7,
                attempts,
                Duration::from_secs(2),
                "connection refused",
                crate::Lsn(0x10),
                at,
            )
        };
        let first = upload(&mut f, 1, t0).expect("the first failure is told");
        assert!(
            first.contains("connection refused") && first.contains("0/10"),
            "{first}"
        );
        // Four uploads failing at once, and their retries: silent for half a minute.
        for (n, s) in [(1, 0), (1, 0), (2, 1), (3, 10)] {
            assert_eq!(upload(&mut f, n, t0 + Duration::from_secs(s)), None);
        }
        let again = upload(&mut f, 6, t0 + TELL_EVERY).expect("told again");
        assert!(
            again.contains("still failing after 30s and 6 attempts"),
            "{again}"
        );
        let back = f
            .recovered("uploading data files", 7, t0 + Duration::from_secs(41))
            .expect("the end is told");
        assert!(back.contains("after 41s (7 attempts)"), "{back}");
        // The other uploads that recover with it say nothing more.
        assert_eq!(f.recovered("uploading data files", 1, t0), None);
    }

    #[test]
    fn the_step_failing_longest_is_the_one_readiness_hears_of_with_its_latest_error() {
        let t0 = Instant::now();
        let mut f = Failing::default();
        assert_eq!(f.failure(), None);
        let lsn = crate::Lsn(0x10);
        let secs = Duration::from_secs;
        f.retrying("uploading data files", 7, 1, secs(1), "refused", lsn, t0);
        f.retrying(
            "writing the intent",
            8,
            1,
            secs(1),
            "timed out",
            lsn,
            t0 + secs(3),
        );
        f.retrying(
            "uploading data files",
            7,
            2,
            secs(2),
            "reset",
            lsn,
            t0 + secs(4),
        );
        assert_eq!(
            f.failure(),
            Some(Failure {
                since: t0,
                error: "uploading data files: reset".into()
            })
        );
        f.recovered("uploading data files", 2, t0 + secs(5));
        assert_eq!(
            f.failure(),
            Some(Failure {
                since: t0 + secs(3),
                error: "writing the intent: timed out".into()
            })
        );
    }
}
