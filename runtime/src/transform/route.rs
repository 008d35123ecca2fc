//! Routing one plugin's emits: each `keep`, `edit` and `row` resolved against the batch it
//! answers, checked against its output, and sent on: rows for a table's output become the
//! batch the next plugin sees, rows for a declared output go straight to the collector.

use std::collections::HashMap;
use std::sync::Arc;

use super::TransformError;
use super::convert::{self, Relations};
use super::host::wit;
use super::shape::{Edit, Emit, Replacements, Shape};
use crate::Lsn;
use crate::stream::change::{
    Batch, Change, Op, OutputBatch, OutputColumn, OutputRow, Transaction, Value,
};
use crate::wire::pgtype::ColumnType;

/// What routing one plugin's emits needs besides the emits and the batch.
pub(super) struct Context<'a> {
    /// The plugin's name, for errors.
    pub plugin: &'a str,
    /// The shape of the plugin's rows for each relation of the batch, by handle.
    pub shapes: Vec<Shape>,
    /// The outputs the plugin declared, with their columns.
    pub declared: &'a HashMap<String, Arc<[OutputColumn]>>,
    pub relations: &'a Relations,
    pub handles: &'a [u32],
    /// How many messages of the transaction the parts before this batch held: message rows
    /// number on from them (0 unless the batch is a later part of a large transaction).
    pub earlier_messages: u32,
}

impl Context<'_> {
    fn emit_error(
        &self,
        output: String,
        column: Option<String>,
        lsn: Lsn,
        message: String,
    ) -> TransformError {
        TransformError::Emit {
            plugin: self.plugin.to_owned(),
            output,
            column,
            lsn,
            message,
        }
    }

    /// The name of the output derived from relation `h`, as errors name it.
    fn shape_name(&self, h: u32) -> String {
        self.relations
            .outputs
            .get(h as usize)
            .map_or_else(|| format!("source({h})"), |(name, _)| name.clone())
    }
}

/// Output rows grouped per (output, columns), groups and rows in the order they first appear.
#[derive(Default)]
pub(super) struct Collector {
    pub batches: Vec<OutputBatch>,
    index: HashMap<(String, Arc<[OutputColumn]>), usize>,
}

impl Collector {
    pub fn group(&mut self, output: &str, columns: &Arc<[OutputColumn]>, old_image: bool) -> usize {
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

/// `(transaction, change, position in the batch's changes)` of a change of the batch.
type Place = (usize, usize, usize);

/// What a `row` takes from its origin: its transaction, its seq, the change it comes from
/// (none for a message), and its op.
struct RowAt {
    tx: usize,
    seq: u32,
    from: Option<Place>,
    op: Op,
}

/// The error for a row, from the column (if any) and what is wrong.
type Fail<'f> = &'f dyn Fn((Option<String>, String)) -> TransformError;

/// Finds changes and messages of a batch by their place in it.
pub(super) struct Resolver {
    /// Index of each transaction's first change in the batch's changes.
    offsets: Vec<usize>,
    counts: Vec<usize>,
}

impl Resolver {
    pub fn new(batch: &Batch, handles: &[u32]) -> Resolver {
        let mut offsets = Vec::with_capacity(batch.transactions.len());
        let mut counts = Vec::with_capacity(batch.transactions.len());
        let mut at = 0;
        for tx in &batch.transactions {
            offsets.push(at);
            counts.push(tx.changes.len());
            at += tx.changes.len();
        }
        debug_assert_eq!(at, handles.len());
        Resolver { offsets, counts }
    }

    /// Where a change-ref points, if it names a change of the batch.
    pub fn locate(&self, at: &wit::ChangeRef) -> Option<Place> {
        let (tx, change) = (at.transaction as usize, at.change as usize);
        (change < *self.counts.get(tx)?).then_some((tx, change, self.offsets[tx] + change))
    }

    /// Why a change-ref names no change of the batch.
    fn missing(&self, at: &wit::ChangeRef) -> String {
        match self.counts.get(at.transaction as usize) {
            None => format!(
                "it names transaction {} of a batch of {}",
                at.transaction,
                self.counts.len()
            ),
            Some(n) => format!(
                "it names change {} of transaction {}, which has {n}",
                at.change, at.transaction
            ),
        }
    }
}

/// Resolve, check and route every emit; declared rows go to the collector, and the `source`
/// rows come back as the batch the next plugin (or the identity) receives.
pub(super) fn route(
    context: &Context<'_>,
    emits: Vec<Emit>,
    batch: Batch,
    collector: &mut Collector,
) -> Result<Batch, TransformError> {
    let mut router = Router::new(context, &emits, batch, collector);
    for emit in emits {
        match emit {
            Emit::Keep(at) => router.keep(&at)?,
            Emit::Edit(edit) => router.edit(edit)?,
            Emit::Row(row) => router.row(*row)?,
        }
    }
    Ok(router.finish())
}

/// The change an emit comes from, if any.
fn origin_change(emit: &Emit) -> Option<&wit::ChangeRef> {
    match emit {
        Emit::Keep(at) => Some(at),
        Emit::Edit(edit) => Some(&edit.change),
        Emit::Row(row) => match &row.origin {
            wit::Origin::Change(at) => Some(at),
            _ => None,
        },
    }
}

/// One plugin's emits on their way: the batch they answer, and what they made of it so far.
struct Router<'r, 'a> {
    context: &'r Context<'a>,
    resolver: Resolver,
    /// How many emits still use each change of the batch: a change's values are moved out at
    /// their last use and cloned before it.
    uses: Vec<u32>,
    batch: Batch,
    /// The batch the next plugin receives, one transaction per transaction of `batch`.
    next: Vec<Transaction>,
    /// The collector's group of each declared output rows went to.
    declared_groups: HashMap<&'a str, usize>,
    collector: &'r mut Collector,
}

impl<'r, 'a> Router<'r, 'a> {
    fn new(
        context: &'r Context<'a>,
        emits: &[Emit],
        mut batch: Batch,
        collector: &'r mut Collector,
    ) -> Self {
        let resolver = Resolver::new(&batch, context.handles);
        let mut uses = vec![0u32; context.handles.len()];
        for emit in emits {
            if let Some(at) = origin_change(emit)
                && let Some((_, _, flat)) = resolver.locate(at)
            {
                uses[flat] += 1;
            }
        }
        let next = batch
            .transactions
            .iter_mut()
            .map(|t| Transaction {
                xid: t.xid,
                commit_lsn: t.commit_lsn,
                end_lsn: t.end_lsn,
                commit_time: t.commit_time,
                changes: Vec::new(),
                // Messages are not emitted: every plugin of the chain sees them all.
                messages: t.messages.clone(),
                load: t.load,
            })
            .collect();
        Router {
            context,
            resolver,
            uses,
            batch,
            next,
            declared_groups: HashMap::new(),
            collector,
        }
    }

    fn finish(mut self) -> Batch {
        Batch {
            transactions: self.next,
            messages: std::mem::take(&mut self.batch.messages),
        }
    }

    /// The place of the change `at` names, or the error for an emit bound for `output`.
    fn resolve(
        &self,
        at: &wit::ChangeRef,
        output: &dyn Fn() -> String,
    ) -> Result<Place, TransformError> {
        self.resolver.locate(at).ok_or_else(|| {
            let message = self.resolver.missing(at);
            self.context.emit_error(output(), None, Lsn(0), message)
        })
    }

    /// A change's rows for one use: moved out at its last use, cloned before.
    fn take(&mut self, (tx, change, flat): Place) -> (Option<Vec<Value>>, Option<Vec<Value>>) {
        self.uses[flat] = self.uses[flat].saturating_sub(1);
        let c = &mut self.batch.transactions[tx].changes[change];
        match self.uses[flat] {
            0 => (c.new.take(), c.old.take()),
            _ => (c.new.clone(), c.old.clone()),
        }
    }

    /// The op and seq of the change at `place`.
    fn op_seq(&self, (tx, change, _): Place) -> (Op, u32) {
        let c = &self.batch.transactions[tx].changes[change];
        (c.op, c.seq)
    }

    /// `keep`: the change as it came, in the plugin's shape of its table.
    fn keep(&mut self, at: &wit::ChangeRef) -> Result<(), TransformError> {
        let context = self.context;
        let place = self.resolve(at, &|| "(unknown: a keep names no change)".to_owned())?;
        let (tx, _, flat) = place;
        let handle = context.handles[flat];
        let shape = &context.shapes[handle as usize];
        let (op, seq) = self.op_seq(place);
        let (new, old) = self.take(place);
        let (new, old) = (new.map(|r| shape.widen(r)), old.map(|r| shape.widen(r)));
        let row = match op {
            Op::Delete => old.as_ref(),
            _ => new.as_ref(),
        };
        if let Some(column) = row.and_then(|r| shape.null_where_not_nullable(r)) {
            return Err(context.emit_error(
                context.shape_name(handle),
                Some(column.to_owned()),
                self.batch.transactions[tx].commit_lsn,
                null_in_added(column),
            ));
        }
        self.next[tx].changes.push(Change {
            op,
            relation: shape.relation.clone(),
            seq,
            new: new.map(|r| shape.project(r)),
            old: old.map(|r| shape.project(r)),
        });
        Ok(())
    }

    /// `edit`: the change with some of its values (and of its old image) replaced.
    fn edit(&mut self, edit: Edit) -> Result<(), TransformError> {
        let context = self.context;
        let place = self.resolve(&edit.change, &|| {
            "(unknown: an edit names no change)".to_owned()
        })?;
        let (tx, _, flat) = place;
        let handle = context.handles[flat];
        let shape = &context.shapes[handle as usize];
        let lsn = self.batch.transactions[tx].commit_lsn;
        let (op, seq) = self.op_seq(place);
        let (new, old) = self.take(place);
        let fail = |(column, message)| {
            context.emit_error(context.shape_name(handle), column, lsn, message)
        };
        let (new, old) = match op {
            Op::Delete => (
                None,
                edited(shape, old, edit.values, "the row").map_err(fail)?,
            ),
            _ => (
                edited(shape, new, edit.values, "the row").map_err(fail)?,
                edited(shape, old, edit.old, "the old image").map_err(fail)?,
            ),
        };
        self.next[tx].changes.push(Change {
            op,
            relation: shape.relation.clone(),
            seq,
            new,
            old,
        });
        Ok(())
    }

    /// `row`: a whole row, for a table's output or a declared one, with the identity of its
    /// origin.
    fn row(&mut self, row: wit::Row) -> Result<(), TransformError> {
        let context = self.context;
        let output = || match &row.target {
            wit::Target::Source(h) => context.shape_name(*h),
            wit::Target::Declared(name) => name.clone(),
        };
        let (tx, seq, from) = self.origin(&row.origin, &output)?;
        let lsn = self.batch.transactions[tx].commit_lsn;
        let op = match (
            convert::op_from_wit(row.op),
            self.batch.transactions[tx].load,
        ) {
            // A load chunk's truncate is its table's load marker.
            (Op::Truncate, true) => Op::Load,
            (op, _) => op,
        };
        let fail = |(column, message): (Option<String>, String)| {
            context.emit_error(output(), column, lsn, message)
        };
        let at = RowAt { tx, seq, from, op };
        match &row.target {
            wit::Target::Source(h) => {
                self.row_for_table(*h, row.sub, row.values, row.old, at, &fail)
            }
            wit::Target::Declared(name) => {
                self.row_for_declared(name, row.sub, row.values, at, &fail)
            }
        }
    }

    /// A `row` for the output derived from relation `h`: the next plugin's change.
    fn row_for_table(
        &mut self,
        h: u32,
        sub: u32,
        values: Vec<wit::Value>,
        old: Option<Vec<wit::Value>>,
        RowAt { tx, seq, from, op }: RowAt,
        fail: Fail<'_>,
    ) -> Result<(), TransformError> {
        let context = self.context;
        let Some(shape) = context.shapes.get(h as usize) else {
            return Err(fail((
                None,
                format!(
                    "the batch has no relation {h} (it has {}); use change.relation",
                    context.shapes.len()
                ),
            )));
        };
        let Some(place) = from else {
            return Err(fail((
                None,
                "a row for a table's output must come from a change (its origin); land rows \
                 for messages in a declared output"
                    .into(),
            )));
        };
        if sub != 0 {
            return Err(fail((
                None,
                format!(
                    "sub is {sub}: a table's output holds one row per change; fan out into a \
                     declared output"
                ),
            )));
        }
        let (own_new, own_old) = self.take(place);
        let same = h == context.handles[place.2];
        let own_row = own_new.or_else(|| own_old.clone());
        let values = wide_row(shape, values, own_row.filter(|_| same), true).map_err(fail)?;
        let old = match (op, old) {
            (Op::Update, Some(old)) => {
                Some(wide_row(shape, old, own_old.filter(|_| same), false).map_err(fail)?)
            }
            _ => None,
        };
        let (new, old) = match op {
            Op::Insert => (Some(values), None),
            Op::Update => (Some(values), old),
            Op::Delete => (None, Some(values)),
            // A truncate carries no row; its output row is all nulls anyway.
            Op::Truncate | Op::Load => (None, None),
        };
        self.next[tx].changes.push(Change {
            op,
            relation: shape.relation.clone(),
            seq,
            new,
            old,
        });
        Ok(())
    }

    /// A `row` for an output the plugin declared: straight to the collector.
    fn row_for_declared(
        &mut self,
        name: &str,
        sub: u32,
        values: Vec<wit::Value>,
        RowAt { tx, seq, from, op }: RowAt,
        fail: Fail<'_>,
    ) -> Result<(), TransformError> {
        let declared = self.context.declared;
        let Some((output_name, columns)) = declared.get_key_value(name) else {
            let mut names: Vec<&str> = declared.keys().map(String::as_str).collect();
            names.sort_unstable();
            return Err(fail((
                None,
                format!("the plugin did not declare it (declared: {names:?})"),
            )));
        };
        if let Some((_, _, flat)) = from {
            // The change's values are not needed, only counted.
            self.uses[flat] = self.uses[flat].saturating_sub(1);
        }
        let values = declared_row(columns, values).map_err(fail)?;
        let collector = &mut *self.collector;
        let group = *self
            .declared_groups
            .entry(output_name.as_str())
            .or_insert_with(|| collector.group(output_name, columns, false));
        let t = &self.batch.transactions[tx];
        collector.batches[group]
            .rows
            .push(OutputRow::of(t, op, seq, sub, values, None));
        Ok(())
    }

    /// The identity a row takes from its origin: its transaction, its seq, and the place of
    /// the change it comes from (none for a message).
    fn origin(
        &self,
        origin: &wit::Origin,
        output: &dyn Fn() -> String,
    ) -> Result<(usize, u32, Option<Place>), TransformError> {
        let batch = &self.batch;
        let fail = |lsn, message| self.context.emit_error(output(), None, lsn, message);
        match origin {
            wit::Origin::Change(at) => {
                let place = self.resolve(at, output)?;
                let seq = batch.transactions[place.0].changes[place.1].seq;
                Ok((place.0, seq, Some(place)))
            }
            wit::Origin::Message(at) => {
                let (tx, m) = (at.transaction as usize, at.message as usize);
                let count = batch.transactions.get(tx).map(|t| t.messages.len());
                if count.is_none_or(|n| m >= n) {
                    return Err(fail(
                        batch.transactions.get(tx).map_or(Lsn(0), |t| t.commit_lsn),
                        format!(
                            "its origin names message {m} of transaction {tx}, which the \
                             batch does not have (did the plugin ask for messages?)"
                        ),
                    ));
                }
                Ok((tx, self.context.earlier_messages + m as u32, None))
            }
            wit::Origin::BatchMessage(i) => {
                let i = *i as usize;
                let Some(message) = batch.messages.get(i) else {
                    return Err(fail(
                        Lsn(0),
                        format!(
                            "its origin names message {i} of the batch, which has {} (did the \
                             plugin ask for messages?)",
                            batch.messages.len()
                        ),
                    ));
                };
                let tx = message.before_seq as usize;
                let Some(t) = batch.transactions.get(tx) else {
                    return Err(fail(
                        Lsn(0),
                        format!(
                            "message {i} of the batch travels with no transaction of the \
                             batch; a row for it waits for a later batch"
                        ),
                    ));
                };
                let before = batch.messages[..i]
                    .iter()
                    .filter(|m| m.before_seq == message.before_seq)
                    .count();
                Ok((tx, (t.messages.len() + before) as u32, None))
            }
        }
    }
}

/// What is wrong with a row that leaves `column`, which its reshape adds as not nullable, null.
fn null_in_added(column: &str) -> String {
    format!(
        "the row leaves column {column} null, which the plugin's reshape adds as not nullable: \
         give it a value in every row (an edit or a row, not a keep), or declare it nullable"
    )
}

/// `row` (the change's row or old image, `what`) with `edits` applied at their wide positions,
/// each checked against its position's type; `None` when the change has no such row and the
/// edit replaces nothing in it.
fn edited(
    shape: &Shape,
    row: Option<Vec<Value>>,
    edits: Replacements,
    what: &str,
) -> Result<Option<Vec<Value>>, (Option<String>, String)> {
    let Some(row) = row else {
        return match edits.is_empty() {
            true => Ok(None),
            false => Err((
                None,
                format!("it edits {what}, which the change does not have"),
            )),
        };
    };
    let mut wide = shape.widen(row);
    for (position, value) in edits.into_values() {
        let p = position as usize;
        if p >= shape.width {
            return Err((
                None,
                format!(
                    "it edits position {p} of {what}, which has {} positions",
                    shape.width
                ),
            ));
        }
        let column = || Some(shape.names[p].clone());
        let Some(value) = value.map_err(|m| (column(), m))? else {
            continue;
        };
        if !convert::fits(&shape.types[p], &value) {
            return Err((column(), misfit(&value, &shape.types[p], what)));
        }
        wide[p] = value;
    }
    let row = what == "the row";
    if let Some(column) = shape.null_where_not_nullable(&wide).filter(|_| row) {
        return Err((Some(column.to_owned()), null_in_added(column)));
    }
    Ok(Some(shape.project(wide)))
}

/// A `row` bound for a table's output, as the output row: one value per wide position,
/// `absent` taking the change's own value, checked against the position's type and, for the
/// row itself (`is_row`, not an old image), against the nullability of added columns.
fn wide_row(
    shape: &Shape,
    values: Vec<wit::Value>,
    own: Option<Vec<Value>>,
    is_row: bool,
) -> Result<Vec<Value>, (Option<String>, String)> {
    if values.len() != shape.width {
        let added = shape.width - shape.names.len().min(shape.width);
        return Err((
            None,
            format!(
                "the row has {} values for {} positions{}",
                values.len(),
                shape.width,
                if added > 0 {
                    " (with added columns)"
                } else {
                    ""
                }
            ),
        ));
    }
    let mut own = own.map(|r| shape.widen(r));
    let mut wide = Vec::with_capacity(values.len());
    for (p, value) in values.into_iter().enumerate() {
        let column = || Some(shape.names[p].clone());
        match convert::value_from_wit(value).map_err(|m| (column(), m))? {
            Some(value) => {
                if !convert::fits(&shape.types[p], &value) {
                    return Err((column(), misfit(&value, &shape.types[p], "the row")));
                }
                wide.push(value);
            }
            None => match own.as_mut() {
                Some(own) => wide.push(std::mem::replace(&mut own[p], Value::Null)),
                None => {
                    return Err((
                        column(),
                        "the row has an absent value, but the change has no row of this \
                         table to take it from"
                            .into(),
                    ));
                }
            },
        }
    }
    if is_row && let Some(column) = shape.null_where_not_nullable(&wide) {
        return Err((Some(column.to_owned()), null_in_added(column)));
    }
    Ok(shape.project(wide))
}

/// A row bound for a declared output: one value per declared column, each of a kind its
/// column takes, no null where the column may not hold one.
fn declared_row(
    columns: &[OutputColumn],
    row: Vec<wit::Value>,
) -> Result<Vec<Value>, (Option<String>, String)> {
    if row.len() != columns.len() {
        let message = format!(
            "the row has {} values for {} columns",
            row.len(),
            columns.len()
        );
        return Err((None, message));
    }
    let mut values = Vec::with_capacity(row.len());
    for (column, value) in columns.iter().zip(row) {
        let name = || Some(column.name.clone());
        let Some(value) = convert::value_from_wit(value).map_err(|m| (name(), m))? else {
            return Err((
                name(),
                "absent has no meaning in a declared output; give a value or null".into(),
            ));
        };
        if !convert::fits(&column.ty, &value) {
            return Err((name(), misfit(&value, &column.ty, "the row")));
        }
        if !column.nullable && matches!(value, Value::Null | Value::UnchangedToast) {
            return Err((name(), "null in a column declared not nullable".into()));
        }
        values.push(value);
    }
    Ok(values)
}

fn misfit(value: &Value, ty: &ColumnType, what: &str) -> String {
    format!(
        "a {} value in {what} does not fit column type {}",
        value.kind(),
        ty.label()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::tests::relation;

    fn notes() -> Shape {
        Shape::unchanged(&relation(
            1,
            "public",
            "notes",
            &[("id", 23, true), ("body", 25, false)],
        ))
    }

    fn row() -> Vec<Value> {
        vec![Value::Int4(1), Value::Text("a".into())]
    }

    #[test]
    fn a_truncate_row_is_a_load_marker_in_a_load_chunk_only() {
        use crate::stream::load;

        let notes = relation(1, "public", "notes", &[("id", 23, true)]);
        let truncate = wit::Emit::Row(wit::Row {
            target: wit::Target::Source(0),
            origin: wit::Origin::Change(wit::ChangeRef {
                transaction: 0,
                change: 0,
            }),
            sub: 0,
            op: wit::Op::Truncate,
            values: vec![wit::Value::Null],
            old: None,
        });
        let declared = HashMap::new();
        for (is_load, expected) in [(true, Op::Load), (false, Op::Truncate)] {
            let mut tx = load::transaction(Lsn(0x100), 0, vec![load::marker(&notes)]);
            tx.load = is_load;
            let batch = Batch {
                transactions: vec![tx],
                messages: Vec::new(),
            };
            let (relations, handles) = Relations::of(&batch);
            let context = Context {
                plugin: "p",
                shapes: relations.relations.iter().map(Shape::unchanged).collect(),
                declared: &declared,
                relations: &relations,
                handles: &handles,
                earlier_messages: 0,
            };
            let emits = vec![Emit::from(truncate.clone())];
            let next = route(&context, emits, batch, &mut Collector::default()).unwrap();
            let change = &next.transactions[0].changes[0];
            assert_eq!(change.op, expected);
            assert_eq!((change.new.as_ref(), change.old.as_ref()), (None, None));
        }
    }

    #[test]
    fn an_edit_replaces_its_positions_and_keeps_the_rest() {
        let edits = Replacements::Native(vec![(1, Value::Text("b".into()))]);
        let edited = edited(&notes(), Some(row()), edits, "the row").unwrap();
        assert_eq!(edited, Some(vec![Value::Int4(1), Value::Text("b".into())]));
        let none = Replacements::Native(Vec::new());
        assert_eq!(edited_none(none), Ok(None));
    }

    fn edited_none(edits: Replacements) -> Result<Option<Vec<Value>>, (Option<String>, String)> {
        edited(&notes(), None, edits, "the old image")
    }

    #[test]
    fn an_edit_that_does_not_fit_names_what_is_wrong() {
        let edits = Replacements::Native(vec![(2, Value::Null)]);
        let (column, message) = edited(&notes(), Some(row()), edits, "the row").unwrap_err();
        assert_eq!(column, None);
        assert_eq!(
            message,
            "it edits position 2 of the row, which has 2 positions"
        );
        let edits = Replacements::Native(vec![(0, Value::Text("x".into()))]);
        let (column, message) = edited(&notes(), Some(row()), edits, "the row").unwrap_err();
        assert_eq!(column.as_deref(), Some("id"));
        assert!(
            message.starts_with("a text value in the row does not fit"),
            "{message}"
        );
        let edits = Replacements::Native(vec![(0, Value::Int4(2))]);
        let (column, message) = edited_none(edits).unwrap_err();
        assert_eq!(column, None);
        assert_eq!(
            message,
            "it edits the old image, which the change does not have"
        );
    }

    #[test]
    fn a_row_takes_absent_values_from_its_change() {
        let values = vec![wit::Value::Int4(7), wit::Value::Absent];
        let wide = wide_row(&notes(), values.clone(), Some(row()), true).unwrap();
        assert_eq!(wide, vec![Value::Int4(7), Value::Text("a".into())]);
        let (column, message) = wide_row(&notes(), values, None, true).unwrap_err();
        assert_eq!(column.as_deref(), Some("body"));
        assert!(
            message.contains("the change has no row of this table"),
            "{message}"
        );
        let (column, message) =
            wide_row(&notes(), vec![wit::Value::Int4(7)], None, true).unwrap_err();
        assert_eq!(column, None);
        assert_eq!(message, "the row has 1 values for 2 positions");
    }

    #[test]
    fn a_declared_row_has_one_value_per_column_and_no_null_where_refused() {
        let mut id = OutputColumn::builtin("id", crate::wire::pgtype::oid::INT4, -1);
        id.nullable = false;
        let columns = [id];
        let values = declared_row(&columns, vec![wit::Value::Int4(3)]).unwrap();
        assert_eq!(values, vec![Value::Int4(3)]);
        let refused = [
            (vec![], "the row has 0 values for 1 columns"),
            (
                vec![wit::Value::Null],
                "null in a column declared not nullable",
            ),
            (
                vec![wit::Value::Absent],
                "absent has no meaning in a declared output; give a value or null",
            ),
        ];
        for (values, expected) in refused {
            let (_, message) = declared_row(&columns, values).unwrap_err();
            assert_eq!(message, expected);
        }
    }
}
