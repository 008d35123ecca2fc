//! The transform stage: the plugin chain on blocking threads, several batches side by side,
//! handed on in the order they came.
//!
//! A batch whose plugins are the busiest stage (a masker hashing two values per row, say)
//! would otherwise leave the other core idle while the reader and the encoders wait. So a
//! batch that arrives while every instance of the chain is busy gets another instance, up to
//! `flush.parallel_transforms`, made from the same compiled plugins (it starts with
//! `describe` and `init` at its first batch). The contract makes that safe: what a plugin
//! returns for a change depends only on the change, its transaction and its settings, never
//! on which instance ran it or what the instance saw before.
//!
//! The parts of one large transaction are the exception: they go, one at a time and in order,
//! to the instance that took its first part, which may keep what it needs between them. Hot
//! reload swaps every instance at a batch boundary (never between the parts of one
//! transaction); batches already running finish on the version they started with.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use tokio::sync::mpsc;

use super::budget::Share;
use super::error::PipelineError;
use super::messages::{Advance, Cut, Transformed};
use super::reload::{self, hangup_signal, next_hangup};
use crate::Lsn;
use crate::lake::commit::PluginRecord;
use crate::lake::flush::EncodedFlush;
use crate::stream::change::{Batch, OutputBatch};
use crate::stream::load::LoadState;
use crate::transform::{PluginInfo, Processed, Tallies, TransformChain, TransformError};

/// One instance of the chain, and the version of the plugins it runs.
struct Worker {
    chain: TransformChain,
    generation: u64,
}

/// A batch being transformed: its worker comes back with what it made (none for a batch the
/// plugins never see), and whether the worker holds a transaction whose parts go on.
type Running = BoxFuture<
    'static,
    Result<
        (
            Option<Worker>,
            bool,
            Result<Transformed, Box<TransformError>>,
        ),
        PipelineError,
    >,
>;

/// Run the stage until the reader's queue closes and every batch taken is handed on; returns
/// the most instances of one version of the chain that ran.
pub(super) async fn stage(
    chain: TransformChain,
    mut reloader: reload::Reloader,
    mut input: mpsc::Receiver<Cut>,
    output: mpsc::Sender<Transformed>,
    parallel: usize,
) -> Result<usize, PipelineError> {
    let parallel = parallel.max(1);
    let mut plugins = records(&chain);
    let has_plugins = !plugins.is_empty();
    // New instances are forked from this one, which never runs (so never holds an instance).
    let mut template = chain.fork();
    let mut generation = 0u64;
    let mut made = 1usize;
    let mut most = 1usize;
    let mut told = false;
    let mut idle = vec![Worker { chain, generation }];
    // The worker whose transaction's next part is still to come.
    let mut held: Option<Worker> = None;
    let mut mid_transaction = false;
    let mut running: FuturesOrdered<Running> = FuturesOrdered::new();
    let mut watch = tokio::time::interval(reload::WATCH_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut hangup = hangup_signal();
    let mut open = true;
    while open || !running.is_empty() {
        // The next part of a transaction waits for its worker; anything else for a free slot.
        let take = open
            && match mid_transaction {
                true => held.is_some(),
                false => running.len() < parallel,
            };
        tokio::select! {
            cut = input.recv(), if take => {
                let Some(cut) = cut else {
                    open = false;
                    continue;
                };
                if !mid_transaction && let Some(reloaded) = reloader.ready() {
                    let versions: Vec<String> = reloaded
                        .plugins()
                        .iter()
                        .map(|p| format!("{} {} ({})", p.name, p.version, &p.digest[..12]))
                        .collect();
                    tracing::info!(
                        "plugins reloaded; from this batch on: {}",
                        versions.join(", ")
                    );
                    plugins = records(&reloaded);
                    template = reloaded.fork();
                    generation += 1;
                    most = most.max(made);
                    made = 1;
                    idle.clear();
                    idle.push(Worker { chain: reloaded, generation });
                }
                mid_transaction = !cut.last;
                if let Some(advance) = cut.advance {
                    let transformed = Ok(advanced(cut, advance));
                    running.push_back(Box::pin(async move { Ok((None, false, transformed)) }));
                    continue;
                }
                let worker = match held.take() {
                    Some(worker) => worker,
                    None => match idle.pop() {
                        Some(worker) => worker,
                        None => {
                            made += 1;
                            if has_plugins && !told {
                                told = true;
                                tracing::info!(
                                    "the plugins are the busiest stage: a second instance of \
                                     them starts, to transform batches side by side \
                                     (flush.parallel_transforms = {parallel})"
                                );
                            }
                            Worker { chain: template.fork(), generation }
                        }
                    },
                };
                let holds = !cut.last;
                let plugins = plugins.clone();
                running.push_back(Box::pin(async move {
                    let (worker, transformed) = transform(worker, cut, plugins).await?;
                    Ok((Some(worker), holds, transformed))
                }));
            }
            Some(done) = running.next(), if !running.is_empty() => {
                let (worker, holds, transformed) = done?;
                if let Some(worker) = worker {
                    match holds {
                        true => held = Some(worker),
                        // An instance of plugins since reloaded is let go.
                        false if worker.generation == generation => idle.push(worker),
                        false => {}
                    }
                }
                if output.send(transformed.map_err(|e| *e)?).await.is_err() {
                    return Ok(most.max(made));
                }
            }
            _ = watch.tick(), if !reloader.is_empty() => reloader.poll_files(),
            _ = next_hangup(&mut hangup), if !reloader.is_empty() => {
                reloader.request("SIGHUP".to_owned());
            }
            else => {
                return Err(PipelineError::Task(format!(
                    "the transform stage has nothing to wait for ({} running, {made} instances)",
                    running.len()
                )));
            }
        }
    }
    Ok(most.max(made))
}

/// The plugins of `chain` as the commit entries of its flushes record them.
fn records(chain: &TransformChain) -> Arc<[PluginRecord]> {
    chain.plugins().iter().map(PluginRecord::from).collect()
}

/// Commit entries record the plugins that made a flush in a type of the lake's own, so that
/// the commit protocol never depends on the host.
impl From<&PluginInfo> for PluginRecord {
    fn from(info: &PluginInfo) -> Self {
        PluginRecord {
            name: info.name.clone(),
            version: info.version.clone(),
            path: info.path.clone(),
            digest: info.digest.clone(),
        }
    }
}

/// An advance as the next stages take it: no transactions, so nothing for the plugins and
/// nothing to encode.
fn advanced(cut: Cut, advance: Advance) -> Transformed {
    let flush = EncodedFlush {
        sequence: cut.sequence,
        part: cut.part,
        last: cut.last,
        advance: true,
        first_commit_lsn: advance.last_commit,
        last_commit_lsn: advance.last_commit,
        last_end_lsn: advance.end,
        transactions: 0,
        changes: 0,
        files: Vec::new(),
        dead_letters: 0,
        plugins: None,
        chunk: false,
        load: cut.state,
        tables: Vec::new(),
    };
    Transformed {
        flush,
        outputs: Vec::new(),
        share: cut.share,
        transform: Duration::ZERO,
        tallies: Tallies::new(),
    }
}

/// What `worker` makes of one cut of transactions: the plugins run on a blocking thread, and
/// a plugin that asks to retry is called again once its pause, waited out here, has passed.
async fn transform(
    worker: Worker,
    cut: Cut,
    plugins: Arc<[PluginRecord]>,
) -> Result<(Worker, Result<Transformed, Box<TransformError>>), PipelineError> {
    let started = Instant::now();
    let (mut worker, (made, mut processed)) = blocking(worker, move |chain| {
        let (batch, made) = Made::of(cut);
        let processed = match made.part == 0 && made.last {
            true => chain.process(batch),
            false => chain.process_part(batch, made.part, made.last),
        };
        (made, processed)
    })
    .await?;
    loop {
        let retry = match processed {
            Ok(Processed::Done(outputs)) => {
                let tallies = worker.chain.take_tallies();
                let transformed = made.transformed(outputs, tallies, plugins, started.elapsed());
                return Ok((worker, Ok(transformed)));
            }
            Ok(Processed::Retry(retry)) => retry,
            Err(error) => return Ok((worker, Err(Box::new(error)))),
        };
        tracing::warn!(plugin = %retry.plugin, attempt = retry.attempt, "{retry}");
        tokio::time::sleep_until(retry.due.into()).await;
        (worker, processed) = blocking(worker, move |chain| chain.resume(retry)).await?;
    }
}

/// `call` on the worker's chain, on a blocking thread: plugins compute for as long as they
/// take, and the WASI streams behind their output block the current runtime.
async fn blocking<T: Send + 'static>(
    mut worker: Worker,
    call: impl FnOnce(&mut TransformChain) -> T + Send + 'static,
) -> Result<(Worker, T), PipelineError> {
    tokio::task::spawn_blocking(move || {
        let made = call(&mut worker.chain);
        (worker, made)
    })
    .await
    .map_err(|e| PipelineError::Task(e.to_string()))
}

/// What a cut's flush says besides what the plugins make.
struct Made {
    sequence: u64,
    part: u32,
    last: bool,
    chunk: bool,
    first_lsn: Lsn,
    last_lsn: Lsn,
    last_end_lsn: Lsn,
    transactions: u64,
    changes: u64,
    state: Option<LoadState>,
    share: Share,
}

impl Made {
    fn of(cut: Cut) -> (Batch, Made) {
        let Cut {
            batch,
            sequence,
            part,
            last,
            load,
            state,
            share,
            ..
        } = cut;
        let (first_lsn, last_lsn) = batch.lsn_range().expect("batches are never empty");
        let last_end_lsn = batch
            .transactions
            .last()
            .map(|t| t.end_lsn)
            .unwrap_or_default();
        // A load's chunk is no transaction, and moves no position.
        let (first_lsn, last_lsn, last_end_lsn, transactions) = match &load {
            Some(l) => (l.last_commit, l.last_commit, l.end, u64::from(!last)),
            None => (
                first_lsn,
                last_lsn,
                last_end_lsn,
                batch.transactions.len() as u64,
            ),
        };
        let changes = batch.change_count() as u64;
        let made = Made {
            sequence,
            part,
            last,
            chunk: load.is_some(),
            first_lsn,
            last_lsn,
            last_end_lsn,
            transactions,
            changes,
            state,
            share,
        };
        (batch, made)
    }

    fn transformed(
        self,
        outputs: Vec<OutputBatch>,
        tallies: Tallies,
        plugins: Arc<[PluginRecord]>,
        transform: Duration,
    ) -> Transformed {
        let flush = EncodedFlush {
            sequence: self.sequence,
            part: self.part,
            last: self.last,
            advance: false,
            first_commit_lsn: self.first_lsn,
            last_commit_lsn: self.last_lsn,
            last_end_lsn: self.last_end_lsn,
            // A part that does not end its last transaction does not complete it.
            transactions: self.transactions - u64::from(!self.last),
            changes: self.changes,
            files: Vec::new(),
            dead_letters: outputs
                .iter()
                .filter(|o| o.output == crate::transform::DEAD_LETTERS)
                .map(|o| o.rows.len() as u64)
                .sum(),
            plugins: Some(plugins),
            chunk: self.chunk,
            load: self.state,
            tables: Vec::new(),
        };
        Transformed {
            flush,
            outputs,
            share: self.share,
            transform,
            tallies,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::stream::change::{Batch, Op, Value};
    use crate::transform::tests::{change, plugin, relation, tx};
    use crate::transform::{HostLimits, TransformChain, TransformSpec};

    use super::super::budget::Budget;
    use super::super::messages::Cut;
    use super::super::reload;
    use tokio::sync::mpsc;

    /// Run one-row batches with these texts through the `trap` plugin (`slow` takes half a
    /// second) at `parallel`; what came out, in order, and how many instances ran.
    async fn through_trap(parallel: usize, texts: &[&str]) -> (Vec<(u64, String)>, usize) {
        let spec = TransformSpec {
            plugin: plugin("trap"),
            ..Default::default()
        };
        let chain = TransformChain::load(&[(spec, HostLimits::default())]).unwrap();
        let notes = relation(
            1,
            "public",
            "notes",
            &[("id", 23, true), ("body", 25, false)],
        );
        let budget = Budget::new(64);
        let (cuts, input) = mpsc::channel(1);
        let (output, mut transformed) = mpsc::channel(texts.len());
        let stage = tokio::spawn(super::stage(
            chain,
            reload::Reloader::new(Vec::new()),
            input,
            output,
            parallel,
        ));
        for (i, text) in texts.iter().enumerate() {
            let row = vec![Value::Int4(i as i32), Value::Text((*text).to_owned())];
            let batch = Batch {
                transactions: vec![tx(
                    i as u32,
                    0x1000 + 0x100 * i as u64,
                    vec![change(Op::Insert, &notes, 0, Some(row), None)],
                )],
                messages: Vec::new(),
            };
            let cut = Cut {
                batch,
                sequence: i as u64,
                part: 0,
                last: true,
                advance: None,
                load: None,
                state: None,
                share: budget.take(1 << 10).await,
            };
            cuts.send(cut).await.unwrap();
        }
        drop(cuts);
        let mut out = Vec::new();
        while let Some(t) = transformed.recv().await {
            let rows = &t.outputs[0].rows;
            assert_eq!(rows.len(), 1);
            let text = match &rows[0].values[1] {
                Value::Text(text) => text.clone(),
                other => panic!("not text: {other:?}"),
            };
            out.push((t.flush.sequence, text));
        }
        let instances = stage.await.unwrap().unwrap();
        (out, instances)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_behind_a_slow_one_run_on_another_instance_and_come_out_in_order() {
        let texts = ["slow", "a", "b", "slow", "c"];
        let expected: Vec<(u64, String)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u64, (*t).to_owned()))
            .collect();
        let (out, instances) = through_trap(2, &texts).await;
        assert_eq!(out, expected);
        assert_eq!(instances, 2, "the batch behind the slow one waited for it");
        let (out, instances) = through_trap(1, &texts).await;
        assert_eq!(out, expected);
        assert_eq!(instances, 1);
    }
}
