//! Write Tributary transforms in Rust.
//!
//! A transform is a WebAssembly component of the `tributary:transform@1.0.0` world (in this
//! crate's `wit/` directory, which is the contract itself; read it first, and
//! `docs/plugins.md` for the reasoning). This crate runs `wit-bindgen` on that world once and
//! adds a little on top: a [`Transform`] trait with a default `init`, the
//! [`export_transform!`] macro, builders for what `init` declares, helpers for the common
//! moves (walk the changes of a batch, keep one, edit a column found by name, spell out a
//! row), and [`testing`], which runs a plugin natively on sample changes.
//!
//! The crate builds the world `transform` only: it does not offer the `columnar` interface
//! (`wit/columnar.wit`), which pays off for interpreted guests; a compiled Rust plugin costs
//! little at the typed boundary (see `BENCHMARKS.md`). With the feature `functions`, the module
//! `functions` imports the host's column functions (`tributary:functions/columns@1.0.0`,
//! `wit/deps/functions/columns.wit`; the world `columnar-functions` of `wit/functions.wit` is
//! the whole world of a columnar plugin that imports them).
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
//!     fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
//!         no_settings(&config)?;
//!         // It reads no values: the host sends none, and lands each change as it came.
//!         Ok(Setup::new().reads_columns(&[]).without_old_images())
//!     }
//!
//!     fn process(batch: Batch) -> Result<Processed, Error> {
//!         Ok(batch.changes().map(|c| c.keep()).collect())
//!     }
//! }
//!
//! export_transform!(Passthrough);
//! ```
//!
//! Build it as a `cdylib` for `wasm32-wasip2`; the result is a component the host loads:
//! `cargo build --target wasm32-wasip2 --release`.

#![allow(clippy::too_many_arguments)]

#[cfg(feature = "functions")]
pub mod functions;
pub mod testing;

/// The bindings `wit-bindgen` generates for the world, as they are.
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "transform",
        pub_export_macro: true,
        export_macro_name: "__export_transform_world",
        default_bindings_module: "tributary_guest::bindings",
        additional_derives: [PartialEq],
    });
}

use bindings::exports::tributary::transform::plugin::Guest;
pub use bindings::tributary::transform::host::Level;
pub use bindings::tributary::transform::types::{
    Batch, Change, ChangeRef, Column, Edit, Element, Emit, Error, Interest, Interval, Message,
    MessageRef, NumericSpec, Op, Origin, Output, OutputColumn, PgArray, PluginInfo, Processed,
    Rejection, Relation, Reshape, Row, ScalarType, Setup, Target, Timetz, Transaction, Value,
};

/// What a plugin implements. The generated `Guest` trait is implemented for every
/// `Transform`, so [`export_transform!`] accepts any of them.
pub trait Transform {
    /// Name and version; called once per instance, first.
    fn describe() -> PluginInfo;

    /// The plugin's settings from the pipeline file, and what it declares and reads. The
    /// default accepts no settings (so a typo in the pipeline file is an error instead of being
    /// ignored) and reads everything but messages.
    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        no_settings(&config)?;
        Ok(Setup::new())
    }

    /// Turn one batch into the rows to write.
    fn process(batch: Batch) -> Result<Processed, Error>;
}

impl<T: Transform> Guest for T {
    fn describe() -> PluginInfo {
        T::describe()
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        T::init(config)
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
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

/// Refuse any setting: for plugins that take none.
pub fn no_settings(config: &[(String, String)]) -> Result<(), String> {
    match config.first() {
        None => Ok(()),
        Some((key, _)) => Err(format!("unknown setting {key:?}: this plugin takes none")),
    }
}

/// The value of setting `key` in the configuration `init` received.
pub fn setting<'a>(config: &'a [(String, String)], key: &str) -> Option<&'a str> {
    config
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl PluginInfo {
    pub fn new(name: &str, version: &str) -> Self {
        PluginInfo {
            name: name.to_owned(),
            version: version.to_owned(),
        }
    }
}

impl Default for Setup {
    fn default() -> Self {
        Setup::new()
    }
}

impl Setup {
    /// No outputs of its own, no reshapes; reads every column and old images, no messages,
    /// transactions in parts.
    pub fn new() -> Self {
        Setup {
            outputs: Vec::new(),
            reshapes: Vec::new(),
            interest: Interest {
                columns: None,
                old_images: true,
                messages: false,
                whole_transactions: false,
            },
        }
    }

    /// Read only the columns named (in any table); the others arrive as [`Value::Absent`].
    pub fn reads_columns(mut self, names: &[&str]) -> Self {
        self.interest.columns = Some(names.iter().map(|n| (*n).to_owned()).collect());
        self
    }

    /// Do not read the old images of updates (a delete's row is sent either way).
    pub fn without_old_images(mut self) -> Self {
        self.interest.old_images = false;
        self
    }

    /// Read logical decoding messages.
    pub fn with_messages(mut self) -> Self {
        self.interest.messages = true;
        self
    }

    /// See every transaction in one call (the host then holds large transactions whole).
    pub fn whole_transactions(mut self) -> Self {
        self.interest.whole_transactions = true;
        self
    }

    /// Declare an output with columns of the plugin's own.
    pub fn output(mut self, name: &str, columns: Vec<OutputColumn>) -> Self {
        self.outputs.push(Output {
            name: name.to_owned(),
            columns,
        });
        self
    }

    /// Reshape the outputs of `tables` (`schema.table`; empty for all).
    pub fn reshape(mut self, reshape: Reshape) -> Self {
        self.reshapes.push(reshape);
        self
    }
}

impl Reshape {
    /// A reshape of the tables named (all when empty) that changes nothing yet.
    pub fn of(tables: &[&str]) -> Self {
        Reshape {
            tables: tables.iter().map(|t| (*t).to_owned()).collect(),
            drop: Vec::new(),
            rename: Vec::new(),
            add: Vec::new(),
        }
    }

    pub fn drop_column(mut self, column: &str) -> Self {
        self.drop.push(column.to_owned());
        self
    }

    pub fn rename_column(mut self, from: &str, to: &str) -> Self {
        self.rename.push((from.to_owned(), to.to_owned()));
        self
    }

    pub fn add_column(mut self, column: OutputColumn) -> Self {
        self.add.push(column);
        self
    }
}

impl OutputColumn {
    /// A nullable scalar column that is not part of the key.
    pub fn new(name: &str, ty: ScalarType) -> Self {
        OutputColumn {
            name: name.to_owned(),
            type_: ty,
            array: false,
            numeric: None,
            nullable: true,
            key: false,
        }
    }

    /// An array of the type.
    pub fn array(mut self) -> Self {
        self.array = true;
        self
    }

    /// `numeric(precision, scale)`.
    pub fn numeric(mut self, precision: u16, scale: u16) -> Self {
        self.numeric = Some(NumericSpec { precision, scale });
        self
    }

    pub fn not_null(mut self) -> Self {
        self.nullable = false;
        self
    }

    /// Part of the output's key (and so not null).
    pub fn key(mut self) -> Self {
        self.key = true;
        self.nullable = false;
        self
    }
}

impl Change {
    /// The row the change carries: the new row when there is one (insert, update), the old
    /// row otherwise (delete). `None` for a truncate, or a delete from a table whose replica
    /// identity sends nothing.
    pub fn row(&self) -> Option<&[Value]> {
        self.new.as_deref().or(self.old.as_deref())
    }
}

impl Relation {
    /// `schema.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// Position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<u32> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .map(|i| i as u32)
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
}

impl From<Vec<Emit>> for Processed {
    fn from(emits: Vec<Emit>) -> Self {
        Processed {
            emits,
            rejections: Vec::new(),
        }
    }
}

impl FromIterator<Emit> for Processed {
    fn from_iter<I: IntoIterator<Item = Emit>>(iter: I) -> Self {
        Processed::from(iter.into_iter().collect::<Vec<_>>())
    }
}

/// One change of a batch with where it is, its transaction and its relation.
#[derive(Debug, Clone, Copy)]
pub struct Changed<'a> {
    /// Its place in the batch, which emits name.
    pub at: ChangeRef,
    pub transaction: &'a Transaction,
    pub relation: &'a Relation,
    pub change: &'a Change,
}

impl<'a> Changed<'a> {
    pub fn op(&self) -> Op {
        self.change.op
    }

    /// The value of column `name` in [`Change::row`].
    pub fn column(&self, name: &str) -> Option<&'a Value> {
        let index = self.relation.column_index(name)?;
        self.change.row()?.get(index as usize)
    }

    /// The change as it came, to its table's output.
    pub fn keep(&self) -> Emit {
        Emit::Keep(self.at)
    }

    /// The change with values replaced: `(position, value)` pairs for the row, and for the
    /// old image of an update.
    pub fn edit(&self, values: Vec<(u32, Value)>, old: Vec<(u32, Value)>) -> Emit {
        Emit::Edit(Edit {
            change: self.at,
            values,
            old,
        })
    }

    /// `values` as a row of the declared output `output`, the `sub`-th this change gives.
    pub fn to_declared(&self, output: &str, sub: u32, values: Vec<Value>) -> Emit {
        Emit::Row(Row {
            target: Target::Declared(output.to_owned()),
            origin: Origin::Change(self.at),
            sub,
            op: self.change.op,
            values,
            old: None,
        })
    }

    /// A rejection of this change, for the pipeline's failure policy.
    pub fn reject(&self, class: &str, message: impl Into<String>) -> Rejection {
        Rejection {
            change: self.at,
            class: class.to_owned(),
            message: message.into(),
        }
    }
}

impl Batch {
    /// The relation a change or a `source` target refers to.
    pub fn relation(&self, index: u32) -> Option<&Relation> {
        self.relations.get(usize::try_from(index).ok()?)
    }

    /// Every change of the batch in commit order, with its place, transaction and relation.
    pub fn changes(&self) -> impl Iterator<Item = Changed<'_>> {
        self.transactions
            .iter()
            .enumerate()
            .flat_map(move |(t, transaction)| {
                transaction
                    .changes
                    .iter()
                    .enumerate()
                    .filter_map(move |(c, change)| {
                        let relation = self.relation(change.relation)?;
                        Some(Changed {
                            at: ChangeRef {
                                transaction: t as u32,
                                change: c as u32,
                            },
                            transaction,
                            relation,
                            change,
                        })
                    })
            })
    }
}

/// Log at `info` through the host.
pub fn info(message: &str) {
    log(Level::Info, message, &[]);
}

/// Log at `warn` through the host.
pub fn warn(message: &str) {
    log(Level::Warn, message, &[]);
}

/// Log through the host with structured fields. Inside a component this is the host's log;
/// in a plugin's native unit tests, stderr.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    #[cfg(target_arch = "wasm32")]
    {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        bindings::tributary::transform::host::log(level, message, &fields);
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{level:?}: {message} {fields:?}");
}

/// Add to one of the plugin's counters. Natively (in unit tests) it does nothing.
pub fn count(name: &str, delta: u64) {
    #[cfg(target_arch = "wasm32")]
    bindings::tributary::transform::host::count(name, delta);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (name, delta);
}
