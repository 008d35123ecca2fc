//! Run a plugin natively, in a plain `cargo test`, on sample changes, and read the rows its
//! emits would land.
//!
//! ```ignore
//! use tributary_guest::testing::{Sample, run};
//!
//! let batch = Sample::new()
//!     .table("public.users", &[("id", "int4"), ("email", "text")])
//!     .insert("public.users", vec![Value::Int4(1), Value::Text("a@x".into())])
//!     .commit()
//!     .build();
//! let landed = run::<Mask>(&[("columns", "email")], batch).unwrap();
//! assert_eq!(landed.rows[0].values[1], Value::Text("sha256:...".into()));
//! ```
//!
//! [`run`] does what the host does around the plugin: `init` with the settings, the batch cut
//! down to what the plugin's interest reads, `process`, and the emits resolved into rows
//! (`keep` and `edit` against the change, `absent` values taken from it). Reshapes are not
//! applied: rows keep the input positions (added columns at the end).

use crate::{
    Batch, Change, Column, Emit, Interest, Op, Origin, Rejection, Relation, Target, Transaction,
    Transform, Value,
};

/// Builds a batch of sample transactions.
#[derive(Default)]
pub struct Sample {
    relations: Vec<Relation>,
    transactions: Vec<Transaction>,
    open: Vec<Change>,
}

impl Sample {
    pub fn new() -> Self {
        Sample::default()
    }

    /// A table (`schema.table`) with `(name, type name)` columns; the first is the key.
    pub fn table(mut self, name: &str, columns: &[(&str, &str)]) -> Self {
        let (schema, table) = name.split_once('.').unwrap_or(("public", name));
        self.relations.push(Relation {
            id: 16_384 + self.relations.len() as u32,
            schema: schema.to_owned(),
            table: table.to_owned(),
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, (name, type_name))| Column {
                    name: (*name).to_owned(),
                    type_oid: 0,
                    type_modifier: -1,
                    type_name: (*type_name).to_owned(),
                    key: i == 0,
                })
                .collect(),
        });
        self
    }

    fn change(
        mut self,
        table: &str,
        op: Op,
        new: Option<Vec<Value>>,
        old: Option<Vec<Value>>,
    ) -> Self {
        let relation = self
            .relations
            .iter()
            .position(|r| r.qualified_name() == table)
            .unwrap_or_else(|| panic!("add table {table} with Sample::table first"));
        let seq = self.open.len() as u32;
        self.open.push(Change {
            op,
            relation: relation as u32,
            seq,
            new,
            old,
        });
        self
    }

    pub fn insert(self, table: &str, values: Vec<Value>) -> Self {
        self.change(table, Op::Insert, Some(values), None)
    }

    pub fn update(self, table: &str, old: Option<Vec<Value>>, new: Vec<Value>) -> Self {
        self.change(table, Op::Update, Some(new), old)
    }

    pub fn delete(self, table: &str, old: Vec<Value>) -> Self {
        self.change(table, Op::Delete, None, Some(old))
    }

    /// Close the open transaction.
    pub fn commit(mut self) -> Self {
        let n = self.transactions.len() as u64;
        self.transactions.push(Transaction {
            xid: 700 + n as u32,
            commit_lsn: 0x1000 + n * 0x100,
            end_lsn: 0x1000 + n * 0x100 + 0x30,
            commit_time: 1_700_000_000_000_000 + n as i64,
            changes: std::mem::take(&mut self.open),
            messages: Vec::new(),
            part: 0,
            last_part: true,
        });
        self
    }

    pub fn build(mut self) -> Batch {
        if !self.open.is_empty() {
            self = self.commit();
        }
        Batch {
            relations: self.relations,
            transactions: self.transactions,
            messages: Vec::new(),
        }
    }
}

/// One row an emit would land.
#[derive(Debug, Clone, PartialEq)]
pub struct Landed {
    /// `schema.table` or the declared output's name.
    pub output: String,
    pub op: Op,
    pub commit_lsn: u64,
    pub seq: u32,
    pub sub: u32,
    pub values: Vec<Value>,
    pub old: Option<Vec<Value>>,
}

/// What a plugin made of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub rows: Vec<Landed>,
    pub rejections: Vec<Rejection>,
}

/// `init` the plugin with `config`, then `process` the batch as the host would send it.
pub fn run<T: Transform>(config: &[(&str, &str)], batch: Batch) -> Result<Outcome, String> {
    let config = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let setup = T::init(config)?;
    let seen = view(&batch, &setup.interest);
    let processed = T::process(seen).map_err(|e| format!("process failed: {e:?}"))?;
    let mut rows = Vec::with_capacity(processed.emits.len());
    for emit in processed.emits {
        rows.push(resolve(&batch, emit)?);
    }
    Ok(Outcome {
        rows,
        rejections: processed.rejections,
    })
}

/// The batch cut down to what `interest` reads.
fn view(batch: &Batch, interest: &Interest) -> Batch {
    let mut seen = batch.clone();
    for tx in &mut seen.transactions {
        if !interest.messages {
            tx.messages.clear();
        }
        for change in &mut tx.changes {
            if !interest.old_images && change.op != Op::Delete {
                change.old = None;
            }
            let relation = &batch.relations[change.relation as usize];
            if let Some(names) = &interest.columns {
                for row in [&mut change.new, &mut change.old].into_iter().flatten() {
                    for (value, column) in row.iter_mut().zip(&relation.columns) {
                        if !names.contains(&column.name) {
                            *value = Value::Absent;
                        }
                    }
                }
            }
        }
    }
    if !interest.messages {
        seen.messages.clear();
    }
    seen
}

fn resolve(batch: &Batch, emit: Emit) -> Result<Landed, String> {
    let change_at = |t: u32, c: u32| {
        let tx = batch
            .transactions
            .get(t as usize)
            .ok_or_else(|| format!("no transaction {t} in the batch"))?;
        let change = tx
            .changes
            .get(c as usize)
            .ok_or_else(|| format!("no change {c} in transaction {t}"))?;
        Ok::<_, String>((tx, change, &batch.relations[change.relation as usize]))
    };
    let row_of = |change: &Change, relation: &Relation| {
        change
            .row()
            .map(<[Value]>::to_vec)
            .unwrap_or_else(|| vec![Value::Null; relation.columns.len()])
    };
    let apply = |mut row: Vec<Value>, edits: Vec<(u32, Value)>| {
        for (p, value) in edits {
            let p = p as usize;
            if p >= row.len() {
                row.resize(p + 1, Value::Null);
            }
            row[p] = value;
        }
        row
    };
    match emit {
        Emit::Keep(at) => {
            let (tx, change, relation) = change_at(at.transaction, at.change)?;
            Ok(Landed {
                output: relation.qualified_name(),
                op: change.op,
                commit_lsn: tx.commit_lsn,
                seq: change.seq,
                sub: 0,
                values: row_of(change, relation),
                old: change.old.clone().filter(|_| change.op == Op::Update),
            })
        }
        Emit::Edit(edit) => {
            let (tx, change, relation) = change_at(edit.change.transaction, edit.change.change)?;
            let old = match change.op {
                Op::Update => change.old.clone().map(|old| apply(old, edit.old)),
                _ => None,
            };
            Ok(Landed {
                output: relation.qualified_name(),
                op: change.op,
                commit_lsn: tx.commit_lsn,
                seq: change.seq,
                sub: 0,
                values: apply(row_of(change, relation), edit.values),
                old,
            })
        }
        Emit::Row(row) => {
            let (commit_lsn, seq, own) = match &row.origin {
                Origin::Change(at) => {
                    let (tx, change, relation) = change_at(at.transaction, at.change)?;
                    (tx.commit_lsn, change.seq, Some(row_of(change, relation)))
                }
                Origin::Message(at) => {
                    let tx = &batch.transactions[at.transaction as usize];
                    (tx.commit_lsn, at.message, None)
                }
                Origin::BatchMessage(i) => {
                    let message = &batch.messages[*i as usize];
                    let tx = &batch.transactions[message.before_seq as usize];
                    (tx.commit_lsn, tx.messages.len() as u32 + i, None)
                }
            };
            let output = match &row.target {
                Target::Source(r) => batch.relations[*r as usize].qualified_name(),
                Target::Declared(name) => name.clone(),
            };
            let values = row
                .values
                .into_iter()
                .enumerate()
                .map(|(p, v)| match (v, &own) {
                    (Value::Absent, Some(own)) => own.get(p).cloned().unwrap_or(Value::Null),
                    (v, _) => v,
                })
                .collect();
            Ok(Landed {
                output,
                op: row.op,
                commit_lsn,
                seq,
                sub: row.sub,
                values,
                old: row.old,
            })
        }
    }
}
