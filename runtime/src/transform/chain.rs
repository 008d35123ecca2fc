//! The chain of plugins: each plugin called on the batch the one before it made, its
//! rejections handled by its failure policy, its emits routed (`route.rs`), and what is left
//! after the last one landed in the outputs derived from its tables.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::columnar;
use super::convert::{self, Relations, View};
use super::host::{Plugin, wit};
use super::retry::RetrySchedule;
use super::route::{self, Collector, Context, Resolver};
use super::shape::{Emit, Shape};
use super::{Call, DEAD_LETTERS, FailurePolicy, Processed, Rejected, Retry, TransformError};
use crate::clock::unix_micros;
use crate::stream::change::{
    Batch, Change, Message, Op, OutputColumn, OutputRow, Transaction, Value,
};
use crate::wire::pgoutput::{Relation, RelationColumn};

/// A plugin with what it declared at `init`.
pub(super) struct Stage {
    pub plugin: Plugin,
    declared: HashMap<String, Arc<[OutputColumn]>>,
    reshapes: Vec<Reshape>,
    policy: FailurePolicy,
    /// What the plugin counted since the chain's tallies were last taken.
    pub tally: super::PluginTally,
}

/// One `reshape` of the plugin's setup, its added columns typed.
#[derive(Clone)]
struct Reshape {
    tables: Vec<String>,
    drop: Vec<String>,
    rename: Vec<(String, String)>,
    add: Vec<OutputColumn>,
}

impl Stage {
    pub fn new(plugin: Plugin, policy: FailurePolicy) -> Result<Stage, TransformError> {
        let invalid = |message: String| TransformError::Invalid {
            path: plugin.path.clone(),
            message: format!("plugin {:?}: {message}", plugin.name),
        };
        let columns = |what: &str, list: &[wit::OutputColumn]| {
            let mut columns: Vec<OutputColumn> = Vec::with_capacity(list.len());
            for column in list {
                if columns.iter().any(|c| c.name == column.name) {
                    return Err(invalid(format!(
                        "{what} has two columns named {:?}",
                        column.name
                    )));
                }
                let column = convert::output_column(column)
                    .map_err(|message| invalid(format!("{what}: {message}")))?;
                columns.push(column);
            }
            Ok(columns)
        };
        let mut declared = HashMap::new();
        for output in &plugin.setup.outputs {
            let name = &output.name;
            if name.is_empty() || name.contains('.') || name.starts_with('_') {
                return Err(invalid(format!(
                    "declared output {name:?} must be a non-empty name without '.', so it \
                     cannot be taken for a table's schema.table output, and must not start \
                     with '_' (names like {DEAD_LETTERS} are Tributary's own)"
                )));
            }
            let list = columns(&format!("declared output {name:?}"), &output.columns)?;
            if declared.insert(name.clone(), list.into()).is_some() {
                return Err(invalid(format!("declares output {name:?} twice")));
            }
        }
        let mut reshapes = Vec::with_capacity(plugin.setup.reshapes.len());
        for reshape in &plugin.setup.reshapes {
            let add = columns("a reshape", &reshape.add)?;
            reshapes.push(Reshape {
                tables: reshape.tables.clone(),
                drop: reshape.drop.clone(),
                rename: reshape.rename.clone(),
                add,
            });
        }
        Ok(Stage {
            plugin,
            declared,
            reshapes,
            policy,
            tally: Default::default(),
        })
    }

    /// The same stage on another instance of its plugin, with nothing counted yet.
    pub fn fork(&self) -> Stage {
        Stage {
            plugin: self.plugin.fork(),
            declared: self.declared.clone(),
            reshapes: self.reshapes.clone(),
            policy: self.policy,
            tally: Default::default(),
        }
    }

    pub fn summary(&self) -> super::PluginSummary {
        let plugin = &self.plugin;
        let interest = &plugin.setup.interest;
        let mut outputs: Vec<(String, Vec<OutputColumn>)> = self
            .declared
            .iter()
            .map(|(name, columns)| (name.clone(), columns.to_vec()))
            .collect();
        outputs.sort_by(|a, b| a.0.cmp(&b.0));
        let reshapes = self
            .reshapes
            .iter()
            .map(|r| {
                let tables = match r.tables.is_empty() {
                    true => "every table".to_owned(),
                    false => r.tables.join(", "),
                };
                let mut moves = Vec::new();
                if !r.drop.is_empty() {
                    moves.push(format!("drop {}", r.drop.join(", ")));
                }
                for (from, to) in &r.rename {
                    moves.push(format!("rename {from} to {to}"));
                }
                for column in &r.add {
                    moves.push(format!("add {} {}", column.name, column.ty.label()));
                }
                format!("{tables}: {}", moves.join("; "))
            })
            .collect();
        super::PluginSummary {
            info: super::PluginInfo {
                name: plugin.name.clone(),
                version: plugin.version.clone(),
                path: plugin.path.display().to_string(),
                digest: plugin.digest.clone(),
            },
            contract: match plugin.is_columnar() {
                true => format!("{}, {}", super::host::CONTRACT, super::host::COLUMNAR),
                false => super::host::CONTRACT.to_owned(),
            },
            outputs,
            reshapes,
            reads_columns: interest.columns.clone(),
            reads_old_images: interest.old_images,
            reads_messages: interest.messages,
            whole_transactions: interest.whole_transactions,
        }
    }

    pub fn declared_names(&self) -> impl Iterator<Item = &str> {
        self.declared.keys().map(String::as_str)
    }

    pub fn declares(&self, name: &str) -> bool {
        self.declared.contains_key(name)
    }

    /// What routing this plugin's emits on a batch of these relations needs.
    pub fn context<'a>(
        &'a self,
        relations: &'a Relations,
        handles: &'a [u32],
        parts: Parts,
    ) -> Context<'a> {
        Context {
            plugin: &self.plugin.name,
            shapes: relations.relations.iter().map(|r| self.shape(r)).collect(),
            declared: &self.declared,
            relations,
            handles,
            earlier_messages: match parts.part {
                Some(_) => parts.earlier_messages,
                None => 0,
            },
        }
    }

    /// The shape of this plugin's rows for a table: reshaped by the first reshape naming it.
    fn shape(&self, relation: &Arc<Relation>) -> Shape {
        let name = relation.qualified_name();
        let Some(reshape) = self
            .reshapes
            .iter()
            .find(|r| r.tables.is_empty() || r.tables.contains(&name))
        else {
            return Shape::unchanged(relation);
        };
        let width = relation.columns.len() + reshape.add.len();
        let mut picks = Vec::with_capacity(width);
        let mut columns = Vec::with_capacity(width);
        for (i, column) in relation.columns.iter().enumerate() {
            if reshape.drop.contains(&column.name) {
                continue;
            }
            let mut column = column.clone();
            if let Some((_, to)) = reshape.rename.iter().find(|(from, _)| *from == column.name) {
                column.name = to.clone();
            }
            picks.push(i);
            columns.push(column);
        }
        for (k, added) in reshape.add.iter().enumerate() {
            picks.push(relation.columns.len() + k);
            columns.push(RelationColumn {
                name: added.name.clone(),
                type_oid: added.type_oid,
                type_modifier: added.type_modifier,
                key: false,
                ty: added.ty.clone(),
            });
        }
        let (types, names) = relation
            .columns
            .iter()
            .map(|c| (c.ty.clone(), c.name.clone()))
            .chain(reshape.add.iter().map(|c| (c.ty.clone(), c.name.clone())))
            .unzip();
        let nullable = std::iter::repeat_n(true, relation.columns.len())
            .chain(reshape.add.iter().map(|c| c.nullable))
            .collect();
        Shape {
            relation: Arc::new(Relation {
                columns,
                ..(**relation).clone()
            }),
            picks: Some(picks),
            width,
            types,
            names,
            nullable,
        }
    }
}

/// Where a batch is within its transaction when it is one part of a large one, and how many
/// messages of that transaction the parts before it held (message rows number on from them).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Parts {
    pub part: Option<(u32, bool)>,
    pub earlier_messages: u32,
}

/// A batch on its way through the chain: where it is, and what the plugins before made of it.
/// A plugin that asks to retry hands it back to the caller, which waits and resumes it, so
/// nothing here sleeps.
pub(super) struct Run {
    parts: Parts,
    collector: Collector,
    /// The stage the batch is at.
    at: usize,
    work: Work,
    /// The retries of the call that asked, until a call of the stage answers.
    retry: Option<RetrySchedule>,
}

/// What the stage the batch is at has still to do.
enum Work {
    /// The batch as the plugin before made it.
    Whole(Batch),
    /// The batch made the plugin trap: one change at a time.
    Apart(Isolation),
}

/// A plugin's call that asked to retry, and when that call began.
struct Asked {
    call: Call,
    message: String,
    started: Instant,
}

/// One call of a plugin: what it returned, or that it asks to be called again.
enum Called<T> {
    Done(T),
    Retry(Asked),
}

impl<T> Called<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Called<U> {
        match self {
            Called::Done(done) => Called::Done(f(done)),
            Called::Retry(asked) => Called::Retry(asked),
        }
    }
}

/// What one plugin made of a batch.
enum Staged {
    /// The batch the next plugin receives.
    Done(Batch),
    /// The plugin asks to be called again on the batch, which comes back as it was.
    Retry(Batch, Asked),
    /// Under the dead-letter policy, the plugin trapped (or hit a limit) on the batch.
    Trapped(Batch, TransformError),
}

pub(super) fn process(
    stages: &mut [Stage],
    batch: Batch,
    parts: Parts,
) -> Result<Processed, TransformError> {
    let run = Run {
        parts,
        collector: Collector::default(),
        at: 0,
        work: Work::Whole(batch),
        retry: None,
    };
    run.go(stages)
}

/// Carry on with a run a plugin asked to retry: that plugin's call again, then the rest.
pub(super) fn resume(stages: &mut [Stage], run: Box<Run>) -> Result<Processed, TransformError> {
    run.go(stages)
}

impl Run {
    fn go(mut self, stages: &mut [Stage]) -> Result<Processed, TransformError> {
        while let Some(stage) = stages.get_mut(self.at) {
            let work = std::mem::replace(&mut self.work, Work::Whole(Batch::default()));
            let asked = match work {
                Work::Whole(batch) => {
                    match run_stage(stage, batch, self.parts, &mut self.collector)? {
                        Staged::Done(next) => {
                            self.next_stage(next);
                            continue;
                        }
                        Staged::Retry(batch, asked) => {
                            self.work = Work::Whole(batch);
                            asked
                        }
                        Staged::Trapped(batch, error) => {
                            self.retry = None;
                            tracing::warn!(
                                plugin = %stage.plugin.name,
                                "{error}; taking the batch apart to find the changes it fails on"
                            );
                            self.work = Work::Apart(Isolation::new(batch));
                            continue;
                        }
                    }
                }
                Work::Apart(mut apart) => {
                    let collector = &mut self.collector;
                    match apart.go(stage, self.parts, collector, &mut self.retry)? {
                        Some(asked) => {
                            self.work = Work::Apart(apart);
                            asked
                        }
                        None => {
                            let next = apart.finish(stage, collector);
                            self.next_stage(next);
                            continue;
                        }
                    }
                }
            };
            return self.retry_later(stage, asked);
        }
        let Work::Whole(batch) = self.work else {
            unreachable!("a batch is whole again when its stage is done");
        };
        identity(batch, &mut self.collector);
        Ok(Processed::Done(self.collector.batches))
    }

    fn next_stage(&mut self, batch: Batch) {
        self.retry = None;
        self.at += 1;
        self.work = Work::Whole(batch);
    }

    /// The run handed back to wait before `stage` is called again, or the error once the
    /// plugin has asked to retry for long enough.
    fn retry_later(mut self, stage: &Stage, asked: Asked) -> Result<Processed, TransformError> {
        let now = Instant::now();
        let schedule = self
            .retry
            .get_or_insert_with(|| RetrySchedule::new(asked.started));
        let Some(due) = schedule.next(now) else {
            return Err(TransformError::Fatal {
                plugin: stage.plugin.name.clone(),
                path: stage.plugin.path.clone(),
                call: asked.call,
                message: format!(
                    "still asking to retry after {} s: {}",
                    schedule.elapsed(now).as_secs(),
                    asked.message
                ),
            });
        };
        let attempt = schedule.attempts();
        Ok(Processed::Retry(Retry {
            plugin: stage.plugin.name.clone(),
            call: asked.call,
            message: asked.message,
            attempt,
            pause: due - now,
            due,
            run: Box::new(self),
        }))
    }
}

/// What a plugin answered for a batch: its emits and the changes it rejected.
type Answer = (Vec<Emit>, Vec<wit::Rejection>);

/// One plugin on one batch: its emits routed, its rejections handled by its policy.
fn run_stage(
    stage: &mut Stage,
    current: Batch,
    parts: Parts,
    collector: &mut Collector,
) -> Result<Staged, TransformError> {
    let call = Call::Batch(current.lsn_range());
    let (relations, handles) = Relations::of(&current);
    let view = View::new(&stage.plugin.setup.interest, &relations, parts.part);
    let called = match stage.plugin.is_columnar() {
        true => call_columnar(stage, &current, &relations, &handles, &view, call),
        false => {
            let input = convert::batch_to_wit(&current, &relations, &handles, &view);
            call_once(stage, call, |plugin| plugin.process(&input, call)).map(|called| {
                called.map(|processed| {
                    let emits = processed.emits.into_iter().map(Emit::from).collect();
                    (emits, processed.rejections)
                })
            })
        }
    };
    let (emits, rejections) = match called {
        Ok(Called::Done(called)) => called,
        Ok(Called::Retry(asked)) => return Ok(Staged::Retry(current, asked)),
        // The dead-letter policy can find the changes it fails on.
        Err(error) if stage.policy == FailurePolicy::DeadLetter && traps(&error) => {
            return Ok(Staged::Trapped(current, error));
        }
        Err(error) => return Err(error),
    };
    match stage.policy {
        FailurePolicy::Stop => {
            if let Some(rejection) = rejections.first() {
                return Err(rejected(
                    stage, &current, &relations, &handles, rejection, call,
                ));
            }
        }
        FailurePolicy::DeadLetter => {
            let letters = dead_letters(stage, &current, &handles, &rejections);
            stage.tally.dead_letters += letters.len() as u64;
            if !letters.is_empty() {
                let group = collector.group(DEAD_LETTERS, &dead_letter_columns(), false);
                collector.batches[group].rows.extend(letters);
            }
        }
    }
    let context = stage.context(&relations, &handles, parts);
    route::route(&context, emits, current, collector).map(Staged::Done)
}

/// `process-columns` on the batch by column, and what it returned as emits and rejections.
fn call_columnar(
    stage: &mut Stage,
    batch: &Batch,
    relations: &Relations,
    handles: &[u32],
    view: &View,
    call: Call,
) -> Result<Called<Answer>, TransformError> {
    let name = stage.plugin.name.clone();
    let input = columnar::batch_to_columns(&name, batch, relations, handles, view)?;
    let output = match call_once(stage, call, |plugin| plugin.process_columns(&input, call))? {
        Called::Done(output) => output,
        Called::Retry(asked) => return Ok(Called::Retry(asked)),
    };
    drop(input);
    let shapes: Vec<Shape> = relations.relations.iter().map(|r| stage.shape(r)).collect();
    columnar::output_to_emits(&name, batch, relations, &shapes, handles, output).map(Called::Done)
}

/// Whether an error is the plugin failing on its input (a trap, the time limit, the memory
/// cap), which the dead-letter policy can isolate, rather than a fatal error it chose.
fn traps(error: &TransformError) -> bool {
    matches!(
        error,
        TransformError::Trap { .. }
            | TransformError::Timeout { .. }
            | TransformError::MemoryLimit { .. }
            | TransformError::StackLimit { .. }
    )
}

/// A batch that made the plugin trap, again one change at a time (each transaction's messages
/// with its first change, the batch's with the first change of all): the changes that trap
/// alone land as dead letters, the others as the plugin makes them.
struct Isolation {
    /// The changes still to run, each alone in a batch, with the transaction it belongs to.
    singles: VecDeque<(usize, Batch)>,
    /// Each transaction with its messages and the changes made of its changes so far.
    out: Vec<Transaction>,
    /// The batch's messages, on to the next plugin whole.
    messages: Vec<Message>,
    letters: Vec<OutputRow>,
    /// When the dead letters were first seen.
    now: i64,
}

impl Isolation {
    fn new(batch: Batch) -> Isolation {
        let Batch {
            transactions,
            messages,
        } = batch;
        // The batch's messages go with the first change.
        let mut batch_messages = messages.clone();
        let mut out: Vec<Transaction> = Vec::with_capacity(transactions.len());
        let mut singles = VecDeque::new();
        for mut tx in transactions {
            let changes = std::mem::take(&mut tx.changes);
            let mut tx_messages = std::mem::take(&mut tx.messages);
            out.push(Transaction {
                changes: Vec::new(),
                messages: tx_messages.clone(),
                ..tx.clone()
            });
            for change in changes {
                let single = Batch {
                    transactions: vec![Transaction {
                        changes: vec![change],
                        messages: std::mem::take(&mut tx_messages),
                        ..tx.clone()
                    }],
                    messages: std::mem::take(&mut batch_messages),
                };
                singles.push_back((out.len() - 1, single));
            }
        }
        Isolation {
            singles,
            out,
            messages,
            letters: Vec::new(),
            now: unix_micros(),
        }
    }

    /// Run the changes left, until one asks to retry (it stays first).
    fn go(
        &mut self,
        stage: &mut Stage,
        parts: Parts,
        collector: &mut Collector,
        retry: &mut Option<RetrySchedule>,
    ) -> Result<Option<Asked>, TransformError> {
        while let Some((tx, single)) = self.singles.pop_front() {
            // The change is kept for its dead letter.
            let change = single.transactions[0].changes[0].clone();
            match run_stage(stage, single, parts, collector)? {
                Staged::Done(mut made) => {
                    if let Some(t) = made.transactions.pop() {
                        self.out[tx].changes.extend(t.changes);
                    }
                }
                Staged::Retry(single, asked) => {
                    self.singles.push_front((tx, single));
                    return Ok(Some(asked));
                }
                Staged::Trapped(_, error) => {
                    let class = match &error {
                        TransformError::Timeout { .. } => "timeout",
                        TransformError::MemoryLimit { .. } => "memory",
                        TransformError::StackLimit { .. } => "stack",
                        _ => "trap",
                    };
                    let message = error.to_string();
                    let letter = letter(stage, &self.out[tx], &change, class, &message, self.now);
                    self.letters.push(letter);
                }
            }
            *retry = None;
        }
        Ok(None)
    }

    /// The batch for the next plugin, the dead letters collected.
    fn finish(self, stage: &mut Stage, collector: &mut Collector) -> Batch {
        stage.tally.dead_letters += self.letters.len() as u64;
        if !self.letters.is_empty() {
            let group = collector.group(DEAD_LETTERS, &dead_letter_columns(), false);
            collector.batches[group].rows.extend(self.letters);
        }
        Batch {
            transactions: self.out,
            messages: self.messages,
        }
    }
}

/// `process` (or `process-columns`) called once, its counters taken; a plugin's fatal error
/// as the chain's.
fn call_once<T>(
    stage: &mut Stage,
    call: Call,
    process: impl FnOnce(&mut Plugin) -> Result<Result<T, wit::Error>, TransformError>,
) -> Result<Called<T>, TransformError> {
    let started = Instant::now();
    let result = process(&mut stage.plugin);
    stage.tally.calls += 1;
    for (name, delta) in stage.plugin.take_counters() {
        *stage.tally.counters.entry(name).or_default() += delta;
    }
    match result? {
        Ok(output) => Ok(Called::Done(output)),
        Err(wit::Error::Fatal(message)) => Err(TransformError::Fatal {
            plugin: stage.plugin.name.clone(),
            path: stage.plugin.path.clone(),
            call,
            message,
        }),
        Err(wit::Error::Retry(message)) => Ok(Called::Retry(Asked {
            call,
            message,
            started,
        })),
    }
}

/// The error for a change the plugin rejected, named by its identity.
fn rejected(
    stage: &Stage,
    batch: &Batch,
    relations: &Relations,
    handles: &[u32],
    rejection: &wit::Rejection,
    call: Call,
) -> TransformError {
    let at = Resolver::new(batch, handles).locate(&rejection.change);
    let (lsn, seq, table) = match at {
        Some((tx, change, flat)) => (
            Some(batch.transactions[tx].commit_lsn),
            Some(batch.transactions[tx].changes[change].seq),
            relations
                .relations
                .get(handles[flat] as usize)
                .map(|r| r.qualified_name()),
        ),
        None => (None, None, None),
    };
    TransformError::Rejected(Box::new(Rejected {
        plugin: stage.plugin.name.clone(),
        path: stage.plugin.path.clone(),
        call,
        commit_lsn: lsn,
        seq,
        table,
        class: rejection.class.clone(),
        message: rejection.message.clone(),
    }))
}

/// The columns of the dead-letter output.
fn dead_letter_columns() -> Arc<[OutputColumn]> {
    static COLUMNS: std::sync::OnceLock<Arc<[OutputColumn]>> = std::sync::OnceLock::new();
    COLUMNS
        .get_or_init(|| {
            let column = |name: &str, oid, nullable| {
                let mut column = OutputColumn::builtin(name, oid, -1);
                column.nullable = nullable;
                column
            };
            let text = |name: &str| column(name, crate::wire::pgtype::oid::TEXT, false);
            vec![
                text("table"),
                text("plugin"),
                text("plugin_version"),
                text("plugin_digest"),
                text("class"),
                text("message"),
                column("first_seen", crate::wire::pgtype::oid::TIMESTAMPTZ, false),
                column("row", crate::wire::pgtype::oid::JSON, true),
            ]
            .into()
        })
        .clone()
}

/// The rows of the dead-letter output for the changes `processed` rejects: the change's
/// identity, table and values, the plugin, and why. A change rejected twice lands once.
fn dead_letters(
    stage: &Stage,
    batch: &Batch,
    handles: &[u32],
    rejections: &[wit::Rejection],
) -> Vec<OutputRow> {
    let resolver = Resolver::new(batch, handles);
    let now = unix_micros();
    let plugin = &stage.plugin;
    let mut seen = std::collections::HashSet::new();
    let mut rows = Vec::new();
    for rejection in rejections {
        let Some((tx, change, flat)) = resolver.locate(&rejection.change) else {
            tracing::warn!(
                plugin = %plugin.name,
                "rejected change {} of transaction {}, which the batch does not have: {} ({})",
                rejection.change.change,
                rejection.change.transaction,
                rejection.message,
                rejection.class
            );
            continue;
        };
        if !seen.insert(flat) {
            continue;
        }
        let t = &batch.transactions[tx];
        rows.push(letter(
            stage,
            t,
            &t.changes[change],
            &rejection.class,
            &rejection.message,
            now,
        ));
    }
    if let Some(first) = rejections.first() {
        tracing::warn!(
            plugin = %plugin.name,
            dead_letters = rows.len(),
            "changes rejected and landed in {DEAD_LETTERS}, the first: {} ({})",
            first.message,
            first.class
        );
    }
    rows
}

/// The dead-letter row of `change`: its identity, table and row, the plugin, and why.
fn letter(
    stage: &Stage,
    tx: &Transaction,
    change: &Change,
    class: &str,
    message: &str,
    now: i64,
) -> OutputRow {
    let plugin = &stage.plugin;
    let text = |s: &str| Value::Text(s.to_owned());
    let row = change
        .new
        .as_ref()
        .or(change.old.as_ref())
        .map_or(Value::Null, |r| Value::Json(row_json(&change.relation, r)));
    let values = vec![
        text(&change.relation.qualified_name()),
        text(&plugin.name),
        text(&plugin.version),
        text(&plugin.digest),
        text(class),
        text(message),
        Value::TimestampTz(now),
        row,
    ];
    OutputRow::of(tx, change.op, change.seq, 0, values, None)
}

/// A row as a JSON object by column name: numbers and booleans as JSON, other values in text.
fn row_json(relation: &Relation, row: &[Value]) -> String {
    let object: serde_json::Map<String, serde_json::Value> = relation
        .columns
        .iter()
        .zip(row)
        .map(|(column, value)| {
            let json = match value {
                Value::Null => serde_json::Value::Null,
                Value::Bool(b) => serde_json::Value::Bool(*b),
                Value::Int2(v) => (*v).into(),
                Value::Int4(v) => (*v).into(),
                Value::Int8(v) => (*v).into(),
                Value::Text(s) | Value::Numeric(s) | Value::Json(s) | Value::Other(s) => {
                    s.clone().into()
                }
                other => format!("{other:?}").into(),
            };
            (column.name.clone(), json)
        })
        .collect();
    serde_json::Value::Object(object).to_string()
}

/// Every change of `batch` as one row of the output derived from its relation.
fn identity(batch: Batch, collector: &mut Collector) {
    let (relations, handles) = Relations::of(&batch);
    let groups: Vec<usize> = relations
        .outputs
        .iter()
        .map(|(name, columns)| collector.group(name, columns, true))
        .collect();
    let mut handles = handles.into_iter();
    for mut tx in batch.transactions {
        for mut change in std::mem::take(&mut tx.changes) {
            let handle = handles.next().unwrap_or_default() as usize;
            // The row of a change: new (insert, update), else old (delete), else nulls
            // (truncate); a delete's old image is the row it lands, only updates carry a
            // separate one.
            let (row, old) = match change.new.take() {
                Some(new) => (Some(new), change.old.take()),
                None => (change.old.take(), None),
            };
            let values = row.unwrap_or_else(|| vec![Value::Null; change.relation.columns.len()]);
            let old = match change.op {
                Op::Update => old,
                Op::Delete => Some(values.clone()),
                Op::Insert | Op::Truncate | Op::Load => None,
            };
            collector.batches[groups[handle]]
                .rows
                .push(OutputRow::of(&tx, change.op, change.seq, 0, values, old));
        }
    }
}
