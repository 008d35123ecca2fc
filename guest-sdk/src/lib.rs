//! Write Tributary transforms in Rust.
//!
//! A transform is a WebAssembly component that implements the `tributary:transform` WIT world
//! (in this crate's `wit/` directory, which is the contract itself; read it first). This crate
//! runs `wit-bindgen` on that world once and adds a little ergonomics on top: a [`Transform`]
//! trait with a default `init`, the [`export_transform!`] macro, and helpers for the common
//! moves (walk the changes of a batch, pass a change through, find a column by name).
//!
//! A whole plugin:
//!
//! ```ignore
//! use tributary_guest::*;
//!
//! struct Passthrough;
//!
//! impl Transform for Passthrough {
//!     fn describe() -> PluginInfo {
//!         PluginInfo::new("passthrough", env!("CARGO_PKG_VERSION"))
//!     }
//!
//!     fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
//!         Ok(batch.changes().map(|c| c.passthrough()).collect())
//!     }
//! }
//!
//! export_transform!(Passthrough);
//! ```
//!
//! Build it as a `cdylib` for `wasm32-wasip2`; the result is a component the host loads:
//! `cargo build --target wasm32-wasip2 --release`.

#![allow(clippy::too_many_arguments)]

/// The bindings `wit-bindgen` generates for the world, as they are.
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "transform",
        pub_export_macro: true,
        export_macro_name: "__export_transform_world",
        default_bindings_module: "tributary_guest::bindings",
    });
}

use bindings::Guest;
pub use bindings::tributary::transform::host::{Level, log};
pub use bindings::tributary::transform::types::{
    Batch, Change, Column, ColumnType, Emit, Error, Interval, Message, Op, Output, OutputColumn,
    PluginInfo, Relation, Target, Transaction, Value,
};

/// What a plugin implements. The generated `Guest` trait is implemented for every
/// `Transform`, so [`export_transform!`] accepts any of them.
pub trait Transform {
    /// Name, version and declared outputs; called once per instance, first.
    fn describe() -> PluginInfo;

    /// The plugin's settings from the pipeline file. The default accepts no settings, so a
    /// typo in the pipeline file is an error instead of being ignored.
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        match config.first() {
            None => Ok(()),
            Some((key, _)) => Err(format!("unknown setting {key:?}: this plugin takes none")),
        }
    }

    /// Turn one batch into the rows to write.
    fn process(batch: Batch) -> Result<Vec<Emit>, Error>;
}

impl<T: Transform> Guest for T {
    fn describe() -> PluginInfo {
        T::describe()
    }

    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        T::init(config)
    }

    fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
        T::process(batch)
    }
}

/// Export a [`Transform`] as the component's implementation of the world. Use once per
/// plugin crate, at the crate root.
#[macro_export]
macro_rules! export_transform {
    ($ty:ident) => {
        $crate::bindings::__export_transform_world!($ty with_types_in $crate::bindings);
    };
}

impl PluginInfo {
    /// A plugin that declares no outputs of its own.
    pub fn new(name: &str, version: &str) -> Self {
        PluginInfo {
            name: name.to_owned(),
            version: version.to_owned(),
            outputs: Vec::new(),
        }
    }
}

impl Change {
    /// The row the change carries: the new row when there is one (insert, update), the old
    /// row otherwise (delete). `None` for a truncate, or a delete from a table whose replica
    /// identity sends nothing.
    pub fn row(&self) -> Option<&[Value]> {
        self.new.as_deref().or(self.old.as_deref())
    }

    /// Like [`Change::row`], but consumes the change instead of copying the row.
    pub fn into_row(self) -> Option<Vec<Value>> {
        self.new.or(self.old)
    }
}

impl Relation {
    /// `schema.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// Position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// A row of `null`s as wide as the relation.
    pub fn null_row(&self) -> Vec<Value> {
        vec![Value::Null; self.columns.len()]
    }
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The string of a `text` value.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A `uuid` value from its 16 bytes.
    pub fn uuid_from_bytes(bytes: [u8; 16]) -> Value {
        let (hi, lo) = bytes.split_at(8);
        let half = |b: &[u8]| b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
        Value::Uuid((half(hi), half(lo)))
    }
}

impl Emit {
    /// The row of `change` (see [`ChangeRef::values`]), bound for the output derived from
    /// its own relation, unchanged, with its old image.
    pub fn passthrough(change: &Change, commit_lsn: u64, relation: &Relation) -> Emit {
        let values = change
            .row()
            .map(<[Value]>::to_vec)
            .unwrap_or_else(|| relation.null_row());
        Emit::source(change, commit_lsn, values).with_old(change.old.clone())
    }

    /// `values` bound for the output derived from the change's relation, without an old
    /// image (add one with [`Emit::with_old`]).
    pub fn source(change: &Change, commit_lsn: u64, values: Vec<Value>) -> Emit {
        Emit {
            target: Target::Source(change.relation),
            commit_lsn,
            seq: change.seq,
            op: change.op,
            values,
            old: None,
        }
    }

    /// The same row with `old` as the old image an update lands in `_old`.
    pub fn with_old(mut self, old: Option<Vec<Value>>) -> Emit {
        self.old = old;
        self
    }

    /// `values` bound for the declared output `output`, with the identity of `change`.
    pub fn declared(output: &str, change: &Change, commit_lsn: u64, values: Vec<Value>) -> Emit {
        Emit {
            target: Target::Declared(output.to_owned()),
            commit_lsn,
            seq: change.seq,
            op: change.op,
            values,
            old: None,
        }
    }
}

/// One change of a batch with the transaction and relation it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct ChangeRef<'a> {
    pub transaction: &'a Transaction,
    pub relation: &'a Relation,
    pub change: &'a Change,
}

impl<'a> ChangeRef<'a> {
    pub fn op(&self) -> Op {
        self.change.op
    }

    /// The row the output derived from the relation gets for this change: the new row for an
    /// insert or update, the old row for a delete, all `null` for a truncate.
    pub fn values(&self) -> Vec<Value> {
        self.change
            .row()
            .map(<[Value]>::to_vec)
            .unwrap_or_else(|| self.relation.null_row())
    }

    /// The value of column `name` in [`Change::row`].
    pub fn column(&self, name: &str) -> Option<&'a Value> {
        let index = self.relation.column_index(name)?;
        self.change.row()?.get(index)
    }

    /// The change, unchanged, bound for the output derived from its relation, with its old
    /// image.
    pub fn passthrough(&self) -> Emit {
        Emit::source(self.change, self.transaction.commit_lsn, self.values())
            .with_old(self.change.old.clone())
    }

    /// `values` bound for the output derived from the change's relation.
    pub fn emit(&self, values: Vec<Value>) -> Emit {
        Emit::source(self.change, self.transaction.commit_lsn, values)
    }

    /// `values` bound for the declared output `output`.
    pub fn emit_declared(&self, output: &str, values: Vec<Value>) -> Emit {
        Emit::declared(output, self.change, self.transaction.commit_lsn, values)
    }
}

impl Batch {
    /// The relation a change or a `source` target refers to.
    pub fn relation(&self, index: u32) -> Option<&Relation> {
        self.relations.get(usize::try_from(index).ok()?)
    }

    /// Every change of the batch in commit order, with its transaction and relation. The
    /// host only sends changes whose relation is in the batch.
    pub fn changes(&self) -> impl Iterator<Item = ChangeRef<'_>> {
        self.transactions.iter().flat_map(move |transaction| {
            transaction.changes.iter().filter_map(move |change| {
                let relation = self.relation(change.relation)?;
                Some(ChangeRef {
                    transaction,
                    relation,
                    change,
                })
            })
        })
    }
}

/// The value of setting `key` in the configuration `init` received.
pub fn setting<'a>(config: &'a [(String, String)], key: &str) -> Option<&'a str> {
    config
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Log at `info` through the host.
pub fn info(message: &str) {
    host_log(Level::Info, message);
}

/// Log at `warn` through the host.
pub fn warn(message: &str) {
    host_log(Level::Warn, message);
}

/// The host import exists only inside a component; a plugin's own unit tests run natively,
/// where its messages go to stderr instead.
fn host_log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{level:?}: {message}");
}
