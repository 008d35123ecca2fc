//! What the routing of emits and the columnar path share: the shape of a plugin's rows for a
//! table (after its reshape), and the emits as the host reads them.

use std::sync::Arc;

use super::convert;
use super::host::wit;
use crate::stream::change::Value;
use crate::wire::pgoutput::Relation;
use crate::wire::pgtype::ColumnType;

/// How one plugin's rows for one input relation look. Positions in an emit count the input
/// relation's columns, then the columns the reshape adds ("wide" positions); the output row
/// picks from them.
pub(super) struct Shape {
    /// The relation of the rows this plugin emits for the table (what the next plugin sees).
    pub relation: Arc<Relation>,
    /// For each column of `relation`, the wide position it takes; `None` when unchanged.
    pub(super) picks: Option<Vec<usize>>,
    /// How many wide positions there are.
    pub(super) width: usize,
    /// The type and name of each wide position.
    pub(super) types: Vec<ColumnType>,
    pub(super) names: Vec<String>,
    /// Whether each wide position may hold null: a column a reshape adds may not.
    pub(super) nullable: Vec<bool>,
}

impl Shape {
    pub fn unchanged(relation: &Arc<Relation>) -> Shape {
        let (types, names) = relation
            .columns
            .iter()
            .map(|c| (c.ty.clone(), c.name.clone()))
            .unzip();
        Shape {
            relation: relation.clone(),
            picks: None,
            width: relation.columns.len(),
            types,
            names,
            nullable: vec![true; relation.columns.len()],
        }
    }

    /// The wide position of the `i`-th column of the output relation.
    pub fn wide_position(&self, i: usize) -> usize {
        self.picks.as_ref().map_or(i, |picks| picks[i])
    }

    /// Whether a wide position may hold null.
    pub fn nullable(&self, position: usize) -> bool {
        self.nullable.get(position).copied().unwrap_or(true)
    }

    /// The output row of a wide row.
    pub(super) fn project(&self, wide: Vec<Value>) -> Vec<Value> {
        match &self.picks {
            None => wide,
            Some(picks) => {
                let mut wide = wide;
                picks
                    .iter()
                    .map(|&p| {
                        wide.get_mut(p)
                            .map_or(Value::Null, |v| std::mem::replace(v, Value::Null))
                    })
                    .collect()
            }
        }
    }

    /// An input row widened with nulls for the added columns.
    pub(super) fn widen(&self, mut row: Vec<Value>) -> Vec<Value> {
        row.resize(self.width, Value::Null);
        row
    }

    /// The name of the first column a reshape adds as not nullable that `wide` leaves null.
    pub(super) fn null_where_not_nullable(&self, wide: &[Value]) -> Option<&str> {
        self.nullable
            .iter()
            .zip(wide)
            .position(|(&nullable, v)| {
                !nullable && matches!(v, Value::Null | Value::UnchangedToast)
            })
            .map(|p| self.names[p].as_str())
    }
}

/// One row a plugin emitted: a typed `emit`, or what a columnar plugin's output makes.
pub(super) enum Emit {
    Keep(wit::ChangeRef),
    Edit(Edit),
    Row(Box<wit::Row>),
}

/// A change with some values replaced: `types.edit`, with its values typed or already read.
pub(super) struct Edit {
    pub change: wit::ChangeRef,
    pub values: Replacements,
    pub old: Replacements,
}

/// `(wide position, value)` pairs: as the plugin sent them, or read from its columns.
pub(super) enum Replacements {
    Wit(Vec<(u32, wit::Value)>),
    Native(Vec<(u32, Value)>),
}

impl Replacements {
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Replacements::Wit(pairs) => pairs.is_empty(),
            Replacements::Native(pairs) => pairs.is_empty(),
        }
    }

    /// Each pair's value, `None` for `absent`, or why a typed value is not one.
    pub(super) fn into_values(self) -> Vec<(u32, Result<Option<Value>, String>)> {
        match self {
            Replacements::Wit(pairs) => pairs
                .into_iter()
                .map(|(p, v)| (p, convert::value_from_wit(v)))
                .collect(),
            Replacements::Native(pairs) => {
                pairs.into_iter().map(|(p, v)| (p, Ok(Some(v)))).collect()
            }
        }
    }
}

impl From<wit::Emit> for Emit {
    fn from(emit: wit::Emit) -> Emit {
        match emit {
            wit::Emit::Keep(at) => Emit::Keep(at),
            wit::Emit::Edit(edit) => Emit::Edit(Edit {
                change: edit.change,
                values: Replacements::Wit(edit.values),
                old: Replacements::Wit(edit.old),
            }),
            wit::Emit::Row(row) => Emit::Row(Box::new(row)),
        }
    }
}
