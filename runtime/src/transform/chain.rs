//! Routing what plugins emit: checking rows against their outputs, feeding `source` rows to
//! the next plugin, and grouping everything into output batches.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use super::convert::{self, Relations};
use super::host::{Plugin, wit};
use super::{Call, TransformError};
use crate::Lsn;
use crate::change::{Batch, Change, Op, OutputBatch, OutputColumn, OutputRow, Transaction, Value};

/// A plugin with the outputs it declared.
pub(super) struct Stage {
    pub plugin: Plugin,
    declared: HashMap<String, Arc<[OutputColumn]>>,
}

impl Stage {
    pub fn new(plugin: Plugin) -> Result<Stage, TransformError> {
        let invalid = |message: String| TransformError::Invalid {
            path: plugin.path.clone(),
            message: format!("plugin {:?}: {message}", plugin.name),
        };
        let mut declared = HashMap::new();
        for output in &plugin.outputs {
            let name = &output.name;
            if name.is_empty() || name.contains('.') {
                return Err(invalid(format!(
                    "declared output {name:?} must be a non-empty name without '.', so it \
                     cannot be taken for a table's schema.table output"
                )));
            }
            let mut columns: Vec<OutputColumn> = Vec::with_capacity(output.columns.len());
            for column in &output.columns {
                if columns.iter().any(|c| c.name == column.name) {
                    return Err(invalid(format!(
                        "declared output {name:?} has two columns named {:?}",
                        column.name
                    )));
                }
                columns.push(OutputColumn::builtin(
                    column.name.clone(),
                    convert::column_type_oid(column.type_),
                    -1,
                ));
            }
            if declared.insert(name.clone(), columns.into()).is_some() {
                return Err(invalid(format!("declares output {name:?} twice")));
            }
        }
        Ok(Stage { plugin, declared })
    }

    pub fn declared_names(&self) -> impl Iterator<Item = &str> {
        self.declared.keys().map(String::as_str)
    }

    pub fn declares(&self, name: &str) -> bool {
        self.declared.contains_key(name)
    }
}

/// Output rows grouped per (output, columns), groups and rows in the order they first appear.
#[derive(Default)]
pub(super) struct Collector {
    batches: Vec<OutputBatch>,
    index: HashMap<(String, Arc<[OutputColumn]>), usize>,
}

impl Collector {
    fn group(&mut self, output: &str, columns: &Arc<[OutputColumn]>, old_image: bool) -> usize {
        let key = (output.to_owned(), columns.clone());
        *self.index.entry(key).or_insert_with(|| {
            self.batches.push(OutputBatch {
                output: output.to_owned(),
                columns: columns.clone(),
                rows: Vec::new(),
                old_image,
            });
            self.batches.len() - 1
        })
    }
}

pub(super) fn process(
    stages: &mut [Stage],
    batch: &Batch,
) -> Result<Vec<OutputBatch>, TransformError> {
    let call = Call::Batch(batch.lsn_range());
    let mut collector = Collector::default();
    let mut current = Cow::Borrowed(batch);
    for stage in stages.iter_mut() {
        let (relations, handles) = Relations::of(&current);
        let input = convert::batch_to_wit(&current, &relations, &handles);
        let emits = match stage.plugin.process(&input, call)? {
            Ok(emits) => emits,
            Err(wit::Error::Fatal(message)) => {
                return Err(TransformError::Fatal {
                    plugin: stage.plugin.name.clone(),
                    path: stage.plugin.path.clone(),
                    call,
                    message,
                });
            }
        };
        drop(input);
        current = Cow::Owned(route(stage, emits, &current, &relations, &mut collector)?);
    }
    identity(current, &mut collector);
    Ok(collector.batches)
}

/// Every change of `batch` as one row of the output derived from its relation.
fn identity(batch: Cow<'_, Batch>, collector: &mut Collector) {
    let (relations, handles) = Relations::of(&batch);
    let groups: Vec<usize> = relations
        .outputs
        .iter()
        .map(|(name, columns)| collector.group(name, columns, true))
        .collect();
    let mut handles = handles.into_iter();
    // The row of a change: new (insert, update), else old (delete), else nulls (truncate);
    // the old image goes along for updates and deletes.
    let mut push = |tx: &Transaction, change: &Change, row: Option<Vec<Value>>, old| {
        let handle = handles.next().unwrap_or_default() as usize;
        let values = row.unwrap_or_else(|| vec![Value::Null; change.relation.columns.len()]);
        // A delete's old image is the row it lands; only updates carry a separate one.
        let old = match change.op {
            Op::Update => old,
            Op::Delete => Some(values.clone()),
            Op::Insert | Op::Truncate => None,
        };
        collector.batches[groups[handle]].rows.push(OutputRow {
            op: change.op,
            commit_lsn: tx.commit_lsn,
            seq: change.seq,
            xid: tx.xid,
            commit_time: tx.commit_time,
            values,
            old,
        });
    };
    match batch {
        Cow::Borrowed(batch) => {
            for tx in &batch.transactions {
                for change in &tx.changes {
                    let row = change.new.as_ref().or(change.old.as_ref()).cloned();
                    push(tx, change, row, change.old.clone());
                }
            }
        }
        Cow::Owned(batch) => {
            for mut tx in batch.transactions {
                for mut change in std::mem::take(&mut tx.changes) {
                    let (row, old) = match change.new.take() {
                        Some(new) => (Some(new), change.old.take()),
                        None => (change.old.take(), None),
                    };
                    push(&tx, &change, row, old);
                }
            }
        }
    }
}

/// Check every emitted row; send declared rows to the collector and return the `source` rows
/// as the batch the next plugin (or the identity) receives.
pub(super) fn route(
    stage: &Stage,
    emits: Vec<wit::Emit>,
    batch: &Batch,
    relations: &Relations,
    collector: &mut Collector,
) -> Result<Batch, TransformError> {
    let plugin = &stage.plugin.name;
    let by_lsn: HashMap<u64, usize> = batch
        .transactions
        .iter()
        .enumerate()
        .map(|(i, t)| (t.commit_lsn.0, i))
        .collect();
    let mut next: Vec<Transaction> = batch
        .transactions
        .iter()
        .map(|t| Transaction {
            xid: t.xid,
            commit_lsn: t.commit_lsn,
            end_lsn: t.end_lsn,
            commit_time: t.commit_time,
            changes: Vec::new(),
            // Messages are not emitted: every plugin of the chain sees them all.
            messages: t.messages.clone(),
        })
        .collect();
    let mut declared_groups: HashMap<&str, usize> = HashMap::new();
    let mut last_tx = 0;
    for emit in emits {
        let lsn = Lsn(emit.commit_lsn);
        let output_name = || match &emit.target {
            wit::Target::Source(h) => relations
                .outputs
                .get(*h as usize)
                .map_or_else(|| format!("source({h})"), |(name, _)| name.clone()),
            wit::Target::Declared(name) => name.clone(),
        };
        let error = |column: Option<String>, message: String| TransformError::Emit {
            plugin: plugin.clone(),
            output: output_name(),
            column,
            lsn,
            message,
        };
        // Plugins usually emit in commit order, so the previous transaction is the best guess.
        let tx = if next.get(last_tx).is_some_and(|t| t.commit_lsn == lsn) {
            last_tx
        } else {
            *by_lsn.get(&emit.commit_lsn).ok_or_else(|| {
                let range = match batch.lsn_range() {
                    Some((first, last)) => format!("commits at {first} to {last}"),
                    None => "is empty".to_owned(),
                };
                error(
                    None,
                    format!("no transaction of the batch commits at {lsn} (the batch {range})"),
                )
            })?
        };
        last_tx = tx;
        let output = match &emit.target {
            wit::Target::Source(h) => relations.outputs.get(*h as usize).map(|(n, c)| (n, c)),
            wit::Target::Declared(name) => stage.declared.get_key_value(name.as_str()),
        };
        let Some((output, columns)) = output else {
            let message = match &emit.target {
                wit::Target::Source(h) => format!(
                    "the batch has no relation {h} (it has {}); use change.relation",
                    relations.relations.len()
                ),
                wit::Target::Declared(_) => {
                    let mut names: Vec<&str> = stage.declared_names().collect();
                    names.sort_unstable();
                    format!("the plugin did not declare it (declared: {names:?})")
                }
            };
            return Err(error(None, message));
        };
        let values = checked_row(columns, emit.values, "the row")
            .map_err(|(column, message)| error(column, message))?;
        let op = convert::op_from_wit(emit.op);
        let old_image = match (&emit.target, op, emit.old) {
            (wit::Target::Source(_), Op::Update, Some(old)) => Some(
                checked_row(columns, old, "the old image")
                    .map_err(|(column, message)| error(column, message))?,
            ),
            _ => None,
        };
        match emit.target {
            wit::Target::Source(h) => {
                let (new, old) = match op {
                    Op::Insert => (Some(values), None),
                    Op::Update => (Some(values), old_image),
                    Op::Delete => (None, Some(values)),
                    // A truncate carries no row; its output row is all nulls anyway.
                    Op::Truncate => (None, None),
                };
                let relation = relations.relations[h as usize].clone();
                next[tx].changes.push(Change {
                    op,
                    relation,
                    seq: emit.seq,
                    new,
                    old,
                });
            }
            wit::Target::Declared(_) => {
                let group = *declared_groups
                    .entry(output.as_str())
                    .or_insert_with(|| collector.group(output, columns, false));
                let t = &next[tx];
                collector.batches[group].rows.push(OutputRow {
                    op,
                    commit_lsn: t.commit_lsn,
                    seq: emit.seq,
                    xid: t.xid,
                    commit_time: t.commit_time,
                    values,
                    old: None,
                });
            }
        }
    }
    Ok(Batch {
        transactions: next,
        messages: batch.messages.clone(),
    })
}

/// An emitted row (`what`: the row, the old image) as values, checked against the output's
/// columns: one value per column, each of a kind its column takes. An error names the column
/// when one is at fault.
fn checked_row(
    columns: &[OutputColumn],
    row: Vec<wit::Value>,
    what: &str,
) -> Result<Vec<Value>, (Option<String>, String)> {
    let values: Vec<Value> = row.into_iter().map(convert::value_from_wit).collect();
    if values.len() != columns.len() {
        let message = format!(
            "{what} has {} values for {} columns",
            values.len(),
            columns.len()
        );
        return Err((None, message));
    }
    if let Some((column, value)) = columns
        .iter()
        .zip(&values)
        .find(|(c, v)| !convert::fits(&c.ty, v))
    {
        let message = format!(
            "a {} value in {what} does not fit column type {}",
            value.kind(),
            column.ty.label()
        );
        return Err((Some(column.name.clone()), message));
    }
    Ok(values)
}
