//! The pipeline file: what to read, how to transform it, where to land it.
//!
//! ```toml
//! [source]
//! url = "postgres://replicator@db:5432/shop"   # TRIBUTARY_SOURCE_URL overrides
//! slot = "tributary_shop"
//! publication = "tributary_shop"
//! tables = ["public.orders", "public.customers"]
//!
//! [[transform]]                       # zero or more, applied in order
//! plugin = "plugins/mask_pii.wasm"     # relative to this file
//! config = { columns = "email,phone" }
//!
//! [sink]
//! url = "s3://lake/shop"              # or file:///var/lake/shop
//! format = "parquet"                  # or "delta": each output a Delta Lake table
//! ```
//!
//! Every other setting has a default. Unknown keys are errors that name the key and the file:
//! a misspelt setting silently ignored is a production incident waiting to happen.

mod expand;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::Lsn;
use crate::lake::tables::{Catalog, Secret};
use crate::transform::{FailurePolicy, HostLimits, TransformSpec};

/// The environment variable that overrides `source.url` (so passwords need not live in files).
pub const SOURCE_URL_ENV: &str = "TRIBUTARY_SOURCE_URL";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read pipeline file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pipeline file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// A libpq-style URL or key/value connection string.
    pub url: String,
    /// The logical replication slot; required unless `capture = "trigger"` (empty when left
    /// out).
    #[serde(default)]
    pub slot: String,
    /// The publication; required unless `capture = "trigger"`, where it may name the tables
    /// to capture instead of `tables` (empty when left out).
    #[serde(default)]
    pub publication: String,
    /// `schema.table` names; the publication is created for exactly these when missing.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Where a pipeline's first run starts reading; later runs resume from the commit log.
    #[serde(default)]
    pub start_from: StartFrom,
    /// `"create"` the slot when it is missing (the default), or `"reuse"` one that must exist.
    /// Read it through [`SourceConfig::slot_behavior`], which also honours `create_slot`.
    #[serde(default)]
    pub slot_behavior: Option<Provisioning>,
    /// The same for the publication; [`SourceConfig::publication_behavior`].
    #[serde(default)]
    pub publication_behavior: Option<Provisioning>,
    /// Deprecated spelling of `slot_behavior` (`true` = create, `false` = reuse).
    #[serde(default)]
    pub create_slot: Option<bool>,
    /// Deprecated spelling of `publication_behavior`.
    #[serde(default)]
    pub create_publication: Option<bool>,
    /// Seconds between standby status updates; well inside the server's `wal_sender_timeout`.
    #[serde(default = "default_status_interval")]
    pub status_interval_secs: u64,
    /// What to do with TOASTed values an update leaves untouched on tables whose updates do
    /// not carry the whole old row.
    #[serde(default)]
    pub unchanged_toast: UnchangedToastPolicy,
    /// Ask for column values in their binary send format (PostgreSQL 14+) instead of text.
    /// Saves the server formatting and Tributary parsing; tables with columns of types read
    /// only as text (composites, ranges, geometric and extension types) are refused.
    #[serde(default)]
    pub binary: bool,
    /// Create the slot as a failover slot (PostgreSQL 17+), which a physical standby with
    /// `sync_replication_slots = on` keeps synchronised: after that standby is promoted, the
    /// pipeline goes on from the new primary without a new full load.
    #[serde(default)]
    pub failover: bool,
    /// A standby of the source (optional): `tributary check` says whether it synchronises the
    /// failover slot.
    #[serde(default)]
    pub standby_url: Option<String>,
    /// How changes are captured: from the slot (`"wal"`, the default), from a journal that
    /// triggers write (`"trigger"`), or whichever the server and role allow (`"auto"`).
    #[serde(default)]
    pub capture: CaptureMode,
    /// The schema trigger capture installs its journal, functions and bookkeeping in.
    #[serde(default = "default_trigger_schema")]
    pub trigger_schema: String,
}

fn default_trigger_schema() -> String {
    "tributary".to_owned()
}

/// `source.capture`: where changes come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum CaptureMode {
    /// A logical replication slot (`wal_level = logical`, a role with `REPLICATION`).
    #[default]
    Wal,
    /// Triggers writing a journal in the database, for a server or role that cannot serve a
    /// slot; costs a write in each captured statement.
    Trigger,
    /// The slot where the server and role allow it, triggers otherwise.
    Auto,
}

impl CaptureMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CaptureMode::Wal => "wal",
            CaptureMode::Trigger => "trigger",
            CaptureMode::Auto => "auto",
        }
    }
}

impl TryFrom<String> for CaptureMode {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "wal" => Ok(CaptureMode::Wal),
            "trigger" => Ok(CaptureMode::Trigger),
            "auto" => Ok(CaptureMode::Auto),
            other => Err(format!(
                "{other:?} is not one of \"wal\", \"trigger\", \"auto\""
            )),
        }
    }
}

impl SourceConfig {
    /// A source with every optional setting at its default.
    pub fn new(url: &str, slot: &str, publication: &str, tables: &[&str]) -> Self {
        SourceConfig {
            url: url.to_owned(),
            slot: slot.to_owned(),
            publication: publication.to_owned(),
            tables: tables.iter().map(|t| (*t).to_owned()).collect(),
            start_from: StartFrom::default(),
            slot_behavior: None,
            publication_behavior: None,
            create_slot: None,
            create_publication: None,
            status_interval_secs: default_status_interval(),
            unchanged_toast: UnchangedToastPolicy::default(),
            binary: false,
            failover: false,
            standby_url: None,
            capture: CaptureMode::default(),
            trigger_schema: default_trigger_schema(),
        }
    }

    /// What to do about the slot: `source.slot_behavior`, or the deprecated `create_slot`.
    pub fn slot_behavior(&self) -> Provisioning {
        self.slot_behavior
            .or(self.create_slot.map(Provisioning::from_create))
            .unwrap_or_default()
    }

    /// The slot, publication and journal schema: names that can be quoted anywhere, and the
    /// slot and publication present unless capture is through triggers, which reads neither
    /// (a publication may still name the tables it captures).
    fn validate_names(&self) -> Result<(), String> {
        let trigger = self.capture == CaptureMode::Trigger;
        for (key, name, what) in [
            (
                "slot",
                &self.slot,
                "the logical replication slot the pipeline reads, e.g. slot = \"tributary_shop\"",
            ),
            (
                "publication",
                &self.publication,
                "the publication of the tracked tables, e.g. publication = \"tributary_shop\"",
            ),
        ] {
            if name.is_empty() && !trigger {
                let why = match self.capture {
                    CaptureMode::Auto => {
                        "source.capture = \"auto\" reads a slot through a publication where the \
                         server and role allow one"
                    }
                    _ => {
                        "source.capture = \"wal\" (the default) reads a slot through a publication"
                    }
                };
                return Err(format!(
                    "source.{key} is missing: name {what}; {why}, and only source.capture = \
                     \"trigger\" goes without"
                ));
            }
        }
        if trigger && self.tables.is_empty() && self.publication.is_empty() {
            return Err(
                "source.tables is empty and source.publication is not set: with source.capture = \
                 \"trigger\", name the tables to capture in source.tables (or a publication that \
                 publishes them in source.publication)"
                    .into(),
            );
        }
        for (key, name) in [
            ("source.slot", &self.slot),
            ("source.publication", &self.publication),
            ("source.trigger_schema", &self.trigger_schema),
        ] {
            if name.is_empty() && key != "source.trigger_schema" {
                continue;
            }
            check_identifier(name).map_err(|why| format!("{key} = {name:?}: {why}"))?;
        }
        if self.trigger_schema.len() > MAX_TRIGGER_SCHEMA {
            return Err(format!(
                "source.trigger_schema = {:?}: must be at most {MAX_TRIGGER_SCHEMA} characters (its name begins the names of the capture triggers, which PostgreSQL limits to 63)",
                self.trigger_schema
            ));
        }
        Ok(())
    }

    /// What to do about the publication: `source.publication_behavior`, or the deprecated
    /// `create_publication`.
    pub fn publication_behavior(&self) -> Provisioning {
        self.publication_behavior
            .or(self.create_publication.map(Provisioning::from_create))
            .unwrap_or_default()
    }

    /// One line for each deprecated key the file uses, naming its replacement.
    pub fn deprecations(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (old, new, value) in [
            ("create_slot", "slot_behavior", self.create_slot),
            (
                "create_publication",
                "publication_behavior",
                self.create_publication,
            ),
        ] {
            if let Some(value) = value {
                notes.push(format!(
                    "source.{old} is deprecated and will be removed: write source.{new} = \"{}\" instead",
                    Provisioning::from_create(value).as_str()
                ));
            }
        }
        notes
    }
}

/// `source.slot_behavior`, `source.publication_behavior`: whether Tributary may create the
/// object when it is missing. Tributary never drops anything by itself (`tributary teardown`
/// drops what it created, when asked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Provisioning {
    /// Create it when missing; an existing one that fits is used as it is.
    #[default]
    Create,
    /// It must exist: a missing one refuses the start.
    Reuse,
}

impl Provisioning {
    fn from_create(create: bool) -> Self {
        if create {
            Provisioning::Create
        } else {
            Provisioning::Reuse
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provisioning::Create => "create",
            Provisioning::Reuse => "reuse",
        }
    }
}

impl TryFrom<String> for Provisioning {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "create" => Ok(Provisioning::Create),
            "reuse" => Ok(Provisioning::Reuse),
            other => Err(format!("{other:?} is not one of \"create\", \"reuse\"")),
        }
    }
}

/// `source.start_from`: where a pipeline's first run starts. Later runs resume where the
/// commit log ends, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "StartFromValue")]
pub enum StartFrom {
    /// Changes committed after the start, and nothing the slot held before.
    #[default]
    Tail,
    /// Everything the slot still holds: from its confirmed position (a new slot holds
    /// nothing yet, so this is the tail).
    Head,
    /// Transactions whose commit record is at or after this position.
    Lsn(Lsn),
    /// The tables' rows from an exported snapshot, then the changes after it.
    Full,
}

/// How `start_from` may be written: a word, `"lsn:X/Y"`, or the position as an integer.
#[derive(Deserialize)]
#[serde(untagged)]
enum StartFromValue {
    Text(String),
    Number(u64),
}

impl TryFrom<StartFromValue> for StartFrom {
    type Error = String;

    fn try_from(value: StartFromValue) -> Result<Self, String> {
        match value {
            StartFromValue::Number(n) => Ok(StartFrom::Lsn(Lsn(n))),
            StartFromValue::Text(text) => text.parse(),
        }
    }
}

impl std::str::FromStr for StartFrom {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || {
            format!(
                "source.start_from = {text:?} is not one of \"tail\", \"head\", \"full\", \
                 \"lsn:<X/Y>\" (such as \"lsn:0/1A2B3C\") or a WAL position as an integer"
            )
        };
        match text {
            "tail" => Ok(StartFrom::Tail),
            "head" => Ok(StartFrom::Head),
            "full" => Ok(StartFrom::Full),
            _ => {
                let position = text.strip_prefix("lsn:").ok_or_else(invalid)?;
                position.parse().map(StartFrom::Lsn).map_err(|_| invalid())
            }
        }
    }
}

impl std::fmt::Display for StartFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartFrom::Tail => f.write_str("tail"),
            StartFrom::Head => f.write_str("head"),
            StartFrom::Lsn(lsn) => write!(f, "lsn:{lsn}"),
            StartFrom::Full => f.write_str("full"),
        }
    }
}

/// `source.unchanged_toast`: PostgreSQL does not resend a TOASTed value an update left
/// untouched. With `REPLICA IDENTITY FULL` the old row carries it and the pipeline fills it in;
/// for any other table this policy decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum UnchangedToastPolicy {
    /// Refuse to start while a tracked table could send such values.
    #[default]
    Refuse,
    /// Land them as null.
    Null,
}

impl UnchangedToastPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            UnchangedToastPolicy::Refuse => "refuse",
            UnchangedToastPolicy::Null => "null",
        }
    }
}

impl TryFrom<String> for UnchangedToastPolicy {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "refuse" => Ok(UnchangedToastPolicy::Refuse),
            "null" => Ok(UnchangedToastPolicy::Null),
            other => Err(format!(
                "source.unchanged_toast = {other:?} is not one of \"refuse\", \"null\""
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    pub plugin: PathBuf,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Memory a plugin instance may use, in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_limit_mib: usize,
    /// Longest one call may run, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// WebAssembly stack one call may use, in KiB.
    #[serde(default = "default_stack_kib")]
    pub stack_kib: usize,
    /// What becomes of a change the plugin rejects: `stop` the pipeline, or land it in the
    /// dead-letter output and go on.
    #[serde(default)]
    pub on_error: FailurePolicy,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `s3://bucket/prefix`, `file:///path`, or `memory://`.
    pub url: String,
    /// object_store settings (`aws_endpoint`, `aws_region`, `aws_allow_http`, ...). The
    /// standard `AWS_*` environment variables apply too; these win.
    #[serde(default, deserialize_with = "option_values")]
    pub options: BTreeMap<String, String>,
    /// How readers find what landed: `parquet` (data files and the commit log) or `delta`
    /// (each output a Delta Lake table).
    #[serde(default)]
    pub format: crate::lake::TableFormat,
    /// With Delta tables, what a column whose new type its table cannot hold beside the old
    /// one does: `stop` the pipeline (the default), or start a `new_version` of the table.
    #[serde(default)]
    pub on_type_change: crate::lake::tables::TypeChange,
    /// With Iceberg tables, the catalog that holds each table's pointer: `postgresql://…` (a
    /// SQL catalog) or `http(s)://…` (a REST catalog). None: the tables are found in storage.
    #[serde(default)]
    pub catalog: Option<String>,
    /// The namespace the tables go in (levels joined by dots); `tributary` when unset.
    #[serde(default)]
    pub catalog_namespace: Option<String>,
    /// REST: the warehouse to ask the catalog for.
    #[serde(default)]
    pub catalog_warehouse: Option<String>,
    /// REST: a bearer token, or the file that holds one.
    #[serde(default)]
    pub catalog_token: Option<Secret>,
    #[serde(default)]
    pub catalog_token_file: Option<PathBuf>,
    /// REST: OAuth2 client credentials, the secret written here or in a file, and the scope.
    #[serde(default)]
    pub catalog_client_id: Option<String>,
    #[serde(default)]
    pub catalog_client_secret: Option<Secret>,
    #[serde(default)]
    pub catalog_client_secret_file: Option<PathBuf>,
    #[serde(default)]
    pub catalog_scope: Option<String>,
    /// SQL: the file that holds the database password (else the URL's, or none).
    #[serde(default)]
    pub catalog_password_file: Option<PathBuf>,
    /// What `catalog_password_file` holds, read when the file is loaded.
    #[serde(skip)]
    pub catalog_password: Option<Secret>,
}

impl SinkConfig {
    /// The catalog the tables go through (`sink.catalog`), not connected yet; `None` without.
    pub fn catalog(&self) -> Option<Catalog> {
        Catalog::of_sink(self)
    }

    /// The catalog keys together: a catalog only for Iceberg tables, each kind with its own
    /// keys, a secret written once (in the file, or from a file).
    fn validate_catalog(&self) -> Result<(), String> {
        let Some(url) = &self.catalog else {
            let given = self.catalog_keys().into_iter().find(|(_, set)| *set);
            return match given {
                Some((key, _)) => Err(format!(
                    "sink.{key} is set but sink.catalog is not; name the catalog, or leave {key} out"
                )),
                None => Ok(()),
            };
        };
        if self.format != crate::lake::TableFormat::Iceberg {
            return Err(format!(
                "sink.catalog holds Iceberg tables' pointers, and sink.format is \"{}\"; set sink.format = \"iceberg\", or leave sink.catalog out",
                self.format.name().to_lowercase()
            ));
        }
        let rest = url.starts_with("http://") || url.starts_with("https://");
        if !rest && !is_sql_catalog(url) {
            return Err(
                "sink.catalog must be a postgresql:// URL (a SQL catalog) or an http(s):// URL (a REST catalog)"
                    .into(),
            );
        }
        let namespace = self.catalog_namespace.as_deref().unwrap_or("tributary");
        if namespace.split('.').any(str::is_empty) {
            return Err(format!(
                "sink.catalog_namespace = {namespace:?}: levels are joined by single dots, none empty"
            ));
        }
        for (key, set) in self.catalog_keys() {
            let sql_only = key == "catalog_password_file";
            if set && sql_only == rest {
                let kind = if rest { "a REST" } else { "a SQL" };
                return Err(format!(
                    "sink.{key} does not apply to {kind} catalog (sink.catalog); leave it out"
                ));
            }
        }
        for (written, file) in [
            (
                "catalog_token",
                self.catalog_token_file.is_some() && self.catalog_token.is_some(),
            ),
            (
                "catalog_client_secret",
                self.catalog_client_secret_file.is_some() && self.catalog_client_secret.is_some(),
            ),
        ] {
            if file {
                return Err(format!(
                    "sink.{written} and sink.{written}_file are both set; keep one"
                ));
            }
        }
        let token = self.catalog_token.is_some() || self.catalog_token_file.is_some();
        let secret =
            self.catalog_client_secret.is_some() || self.catalog_client_secret_file.is_some();
        let id = self.catalog_client_id.is_some();
        if token && (id || secret) {
            return Err(
                "sink.catalog_token and sink.catalog_client_id/catalog_client_secret are both set; a REST catalog takes a token or client credentials, keep one"
                    .into(),
            );
        }
        if id != secret {
            return Err(
                "sink.catalog_client_id and sink.catalog_client_secret (or catalog_client_secret_file) go together; set both, or neither"
                    .into(),
            );
        }
        Ok(())
    }

    fn catalog_keys(&self) -> [(&'static str, bool); 8] {
        [
            ("catalog_namespace", self.catalog_namespace.is_some()),
            ("catalog_warehouse", self.catalog_warehouse.is_some()),
            ("catalog_token", self.catalog_token.is_some()),
            ("catalog_token_file", self.catalog_token_file.is_some()),
            ("catalog_client_id", self.catalog_client_id.is_some()),
            (
                "catalog_client_secret",
                self.catalog_client_secret.is_some(),
            ),
            (
                "catalog_client_secret_file",
                self.catalog_client_secret_file.is_some(),
            ),
            (
                "catalog_password_file",
                self.catalog_password_file.is_some(),
            ),
        ]
    }

    /// Reads the secrets the `*_file` keys name into their places.
    fn read_secret_files(&mut self) -> Result<(), String> {
        let read = |key: &str, path: &Option<PathBuf>| -> Result<Option<Secret>, String> {
            path.as_deref()
                .map(|p| Secret::read_file(p).map_err(|why| format!("sink.{key}: {why}")))
                .transpose()
        };
        if let Some(token) = read("catalog_token_file", &self.catalog_token_file)? {
            self.catalog_token = Some(token);
        }
        if let Some(secret) = read(
            "catalog_client_secret_file",
            &self.catalog_client_secret_file,
        )? {
            self.catalog_client_secret = Some(secret);
        }
        self.catalog_password = read("catalog_password_file", &self.catalog_password_file)?;
        Ok(())
    }
}

/// Whether `sink.catalog` names a SQL catalog (else a REST one).
pub fn is_sql_catalog(url: &str) -> bool {
    url.starts_with("postgresql://") || url.starts_with("postgres://")
}

/// `sink.options` as object_store takes them, text: a TOML boolean or number
/// (`aws_allow_http = true`) is the text it spells.
fn option_values<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a string, a boolean or a number")]
    enum Value {
        Text(String),
        Flag(bool),
        Whole(i64),
        Real(f64),
    }
    let options = BTreeMap::<String, Value>::deserialize(deserializer)?;
    Ok(options
        .into_iter()
        .map(|(key, value)| {
            let text = match value {
                Value::Text(text) => text,
                Value::Flag(flag) => flag.to_string(),
                Value::Whole(n) => n.to_string(),
                Value::Real(x) => x.to_string(),
            };
            (key, text)
        })
        .collect())
}

/// When a flush is cut: whichever limit is reached first.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlushConfig {
    #[serde(default = "default_max_rows")]
    pub max_rows: usize,
    /// Approximate size of the decoded changes, in MiB.
    #[serde(default = "default_max_mib")]
    pub max_mib: usize,
    /// The longest a committed transaction waits before it is landed, in milliseconds.
    #[serde(default = "default_max_delay_ms")]
    pub max_delay_ms: u64,
    /// Memory the pipeline may hold for flushes between reading and landing them, in MiB: a
    /// batch counts twice its decoded size while it is transformed and encoded (the most it
    /// occupies at once), then the size of its files until they are uploaded, and reading the
    /// slot pauses while the budget is full. A single batch larger than the whole budget still
    /// goes through, alone.
    #[serde(default = "default_in_flight_mib")]
    pub in_flight_mib: usize,
    /// A transaction larger than this (decoded, in MiB) is held on local disk until it
    /// commits, and landed as one flush in parts of about this size; a transaction the server
    /// streams before its commit always goes to disk.
    #[serde(default = "default_chunk_mib")]
    pub chunk_mib: usize,
    /// Where large transactions are held until they commit; the system's temporary directory
    /// when unset. The files are unnamed: they vanish when the process ends, however it ends.
    #[serde(default)]
    pub spill_dir: Option<std::path::PathBuf>,
    /// Batches the plugins transform at once, each on its own instance of the plugin chain
    /// (another instance starts only when a batch would otherwise wait for a busy one); 1
    /// transforms one batch at a time.
    #[serde(default = "default_parallel_transforms")]
    pub parallel_transforms: usize,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            max_rows: default_max_rows(),
            max_mib: default_max_mib(),
            max_delay_ms: default_max_delay_ms(),
            in_flight_mib: default_in_flight_mib(),
            chunk_mib: default_chunk_mib(),
            spill_dir: None,
            parallel_transforms: default_parallel_transforms(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    pub source: SourceConfig,
    #[serde(default, rename = "transform")]
    pub transforms: Vec<TransformConfig>,
    pub sink: SinkConfig,
    #[serde(default)]
    pub flush: FlushConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub parquet: ParquetConfig,
    #[serde(default)]
    pub load: LoadConfig,
    /// Settings of single outputs, by output name (`schema.table`, or a plugin's output).
    #[serde(default)]
    pub outputs: BTreeMap<String, OutputConfig>,
}

/// What one output's table gets beyond its change log (`[outputs."schema.table"]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Keep `<output>__current` beside the change log: a Delta table with one row per key as
    /// of the last commit (`sink.format = "delta"` only).
    #[serde(default)]
    pub mirror: bool,
    /// Split the output's files by partition: `"day(_commit_time)"`, `"day(<column>)"` or a
    /// column's name (`sink.format = "delta"` only; chosen when its table is created).
    #[serde(default)]
    pub partition_by: Option<String>,
}

impl PipelineConfig {
    /// The outputs whose files each hold one partition, and how they are split.
    pub fn partitions(&self) -> BTreeMap<String, crate::lake::encode::partition::Partition> {
        self.outputs
            .iter()
            .filter_map(|(name, o)| {
                let spec = o.partition_by.as_deref()?;
                let partition = crate::lake::encode::partition::Partition::parse(spec).ok()?;
                Some((name.clone(), partition))
            })
            .collect()
    }

    /// The outputs that keep a current-state table.
    pub fn mirrored(&self) -> std::collections::BTreeSet<String> {
        self.outputs
            .iter()
            .filter(|(_, o)| o.mirror)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// How a full load (`source.start_from = "full"`) reads the tables.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadConfig {
    /// Connections reading at once, each inside the same snapshot.
    #[serde(default = "default_load_parallelism")]
    pub parallelism: usize,
    /// Heap read per chunk (a range of the table's pages): one commit entry, and what a
    /// resumed load reads again at most per connection.
    #[serde(default = "default_load_chunk_mib")]
    pub chunk_mib: usize,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            parallelism: default_load_parallelism(),
            chunk_mib: default_load_chunk_mib(),
        }
    }
}

fn default_load_parallelism() -> usize {
    2
}
fn default_load_chunk_mib() -> usize {
    64
}

/// How the Parquet files are written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetConfig {
    /// `"zstd"` (the default), `"snappy"` or `"none"`.
    #[serde(default)]
    pub compression: ParquetCompression,
    /// The zstd level, 1 (fastest) to 22 (smallest); only with `compression = "zstd"`.
    #[serde(default)]
    pub zstd_level: Option<i32>,
    /// Rows per row group: readers skip and parallelise by row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// The size a data file is cut at (a flush larger than this writes several files), and
    /// the size `tributary compact` packs smaller files of a Delta table into, in MiB.
    #[serde(default = "default_target_file_mb")]
    pub target_file_mb: u64,
}

fn default_target_file_mb() -> u64 {
    128
}

impl Default for ParquetConfig {
    fn default() -> Self {
        ParquetConfig {
            compression: ParquetCompression::default(),
            zstd_level: None,
            row_group_rows: default_row_group_rows(),
            target_file_mb: default_target_file_mb(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParquetCompression {
    #[default]
    Zstd,
    Snappy,
    None,
}

impl ParquetConfig {
    /// The encoder's options these settings give.
    pub fn encode_options(&self) -> crate::lake::encode::EncodeOptions {
        use crate::lake::encode::{Codec, DEFAULT_ZSTD_LEVEL, EncodeOptions};
        EncodeOptions {
            row_group_rows: self.row_group_rows,
            compression: match self.compression {
                ParquetCompression::Zstd => {
                    Codec::Zstd(self.zstd_level.unwrap_or(DEFAULT_ZSTD_LEVEL))
                }
                ParquetCompression::Snappy => Codec::Snappy,
                ParquetCompression::None => Codec::Uncompressed,
            },
            target_file_bytes: self.target_file_bytes() as usize,
            ..EncodeOptions::default()
        }
    }

    /// [`target_file_mb`](Self::target_file_mb) in bytes.
    pub fn target_file_bytes(&self) -> u64 {
        self.target_file_mb << 20
    }

    fn validate(&self) -> Result<(), String> {
        if self.row_group_rows == 0 {
            return Err("parquet.row_group_rows must be at least 1".into());
        }
        if !(1..=4096).contains(&self.target_file_mb) {
            return Err(format!(
                "parquet.target_file_mb = {}: a data file's target size runs from 1 to 4096 MiB",
                self.target_file_mb
            ));
        }
        match (self.compression, self.zstd_level) {
            (ParquetCompression::Zstd, Some(level)) if !(1..=22).contains(&level) => Err(format!(
                "parquet.zstd_level = {level}: zstd levels run from 1 (fastest) to 22 (smallest)"
            )),
            (ParquetCompression::Snappy | ParquetCompression::None, Some(_)) => {
                Err("parquet.zstd_level applies only with parquet.compression = \"zstd\"".into())
            }
            _ => Ok(()),
        }
    }
}

fn default_row_group_rows() -> usize {
    128 * 1024
}

/// How long passing faults (an unreachable sink or source, throttling, a restarting server)
/// are retried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Stop once one step has kept failing for this many seconds; unset: retry for as long as
    /// the fault lasts (nothing is confirmed meanwhile, so waiting loses nothing).
    #[serde(default)]
    pub limit_secs: Option<u64>,
}

impl RetryConfig {
    pub fn limit(&self) -> Option<std::time::Duration> {
        self.limit_secs.map(std::time::Duration::from_secs)
    }
}

/// The metrics endpoint (Prometheus text format at `GET /metrics`, and the probes `GET
/// /healthz` and `GET /readyz`); off unless `listen` is set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address and port to serve on, such as `"127.0.0.1:9187"` (`"0.0.0.0:9187"` for every
    /// interface).
    #[serde(default)]
    pub listen: Option<String>,
    /// How long a sink or source step may keep failing (and being retried) before `/readyz`
    /// says the pipeline is not ready: long enough to ride out a blip without an orchestrator
    /// taking notice.
    #[serde(default = "default_ready_after_failing")]
    pub ready_after_failing_secs: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: None,
            ready_after_failing_secs: default_ready_after_failing(),
        }
    }
}

fn default_ready_after_failing() -> u64 {
    60
}

impl MetricsConfig {
    /// How long a step may fail before the pipeline is not ready.
    pub fn ready_after_failing(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.ready_after_failing_secs)
    }

    /// The address to listen on, when set.
    pub fn address(&self) -> Result<Option<std::net::SocketAddr>, String> {
        self.listen
            .as_deref()
            .map(|text| {
                text.parse().map_err(|_| {
                    format!(
                        "metrics.listen = {text:?} is not an address and port such as \"127.0.0.1:9187\""
                    )
                })
            })
            .transpose()
    }
}

fn default_status_interval() -> u64 {
    10
}
fn default_memory_mib() -> usize {
    256
}
fn default_stack_kib() -> usize {
    512
}

fn default_timeout_ms() -> u64 {
    30_000
}
fn default_max_rows() -> usize {
    100_000
}
fn default_max_mib() -> usize {
    8
}
fn default_in_flight_mib() -> usize {
    96
}
fn default_parallel_transforms() -> usize {
    2
}
fn default_chunk_mib() -> usize {
    8
}

fn default_max_delay_ms() -> u64 {
    1_000
}

impl PipelineConfig {
    /// Read and check a pipeline file. Plugin paths are resolved against the file's directory;
    /// `TRIBUTARY_SOURCE_URL`, when set, replaces `source.url`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Self::parse(&text, path)?;
        if let Ok(url) = std::env::var(SOURCE_URL_ENV) {
            config.source.url = url;
        }
        let base = path.parent().unwrap_or(Path::new("."));
        for t in &mut config.transforms {
            if t.plugin.is_relative() {
                t.plugin = base.join(&t.plugin);
            }
        }
        Ok(config)
    }

    /// Parse pipeline file text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let config: PipelineConfig = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        // The file's shape is judged first, where errors can point at a line; then the
        // `${NAME}` references are replaced, and the file read again with their values.
        let config = if text.contains('$') {
            let mut value: toml::Value =
                toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
            expand::expand_value(&mut value, "", &|name| std::env::var(name).ok())
                .map_err(invalid)?;
            value
                .try_into::<PipelineConfig>()
                .map_err(|e| invalid(e.to_string()))?
        } else {
            config
        };
        config.validate().map_err(invalid)?;
        let mut config = config;
        config.sink.read_secret_files().map_err(invalid)?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        let s = &self.source;
        s.validate_names()?;
        for (old, new, both) in [
            (
                "create_slot",
                "slot_behavior",
                s.create_slot.is_some() && s.slot_behavior.is_some(),
            ),
            (
                "create_publication",
                "publication_behavior",
                s.create_publication.is_some() && s.publication_behavior.is_some(),
            ),
        ] {
            if both {
                return Err(format!(
                    "source.{old} is the deprecated spelling of source.{new}: keep only {new}"
                ));
            }
        }
        for table in &s.tables {
            if table.split('.').count() != 2 || table.split('.').any(str::is_empty) {
                return Err(format!(
                    "source.tables: {table:?} is not of the form \"schema.table\""
                ));
            }
        }
        if s.status_interval_secs == 0 {
            return Err("source.status_interval_secs must be at least 1".into());
        }
        if self.flush.max_rows == 0 || self.flush.max_mib == 0 {
            return Err("flush.max_rows and flush.max_mib must be at least 1".into());
        }
        self.metrics.address()?;
        if self.metrics.ready_after_failing_secs == 0 {
            return Err(
                "metrics.ready_after_failing_secs must be at least 1 (60 by default): a step that \
                 fails once and is retried at once is no reason to take the pipeline out of service"
                    .into(),
            );
        }
        self.parquet.validate()?;
        self.sink.validate_catalog()?;
        if self.sink.on_type_change != crate::lake::tables::TypeChange::Stop
            && self.sink.format != crate::lake::TableFormat::Delta
        {
            return Err(match self.sink.format {
                crate::lake::TableFormat::Iceberg => "sink.on_type_change applies to Delta tables (sink.format = \"delta\"); an Iceberg table widens a column as Iceberg allows (int to long, float to double, a wider decimal) and stops the pipeline at any other type change, naming the column; leave on_type_change out",
                _ => "sink.on_type_change applies to Delta tables (sink.format = \"delta\"); Parquet files start new files at a schema change by themselves",
            }
            .into());
        }
        for (name, output) in &self.outputs {
            if output.mirror && !self.sink.format.has_tables() {
                return Err(format!(
                    "outputs.{name:?}.mirror needs tables: the current-state table is a table \
                     beside the change log's, in the sink's format; set sink.format = \"delta\" or \"iceberg\", or leave mirror out"
                ));
            }
            if let Some(spec) = &output.partition_by {
                if !self.sink.format.has_tables() {
                    return Err(format!(
                        "outputs.{name:?}.partition_by needs tables, which record each file's partition; set sink.format = \"delta\" or \"iceberg\", or leave partition_by out"
                    ));
                }
                crate::lake::encode::partition::Partition::parse(spec)
                    .map_err(|why| format!("outputs.{name:?}.partition_by = {why}"))?;
            }
            if name.ends_with(crate::lake::tables::MIRROR_SUFFIX) || name.is_empty() {
                return Err(format!(
                    "outputs.{name:?}: not an output's name (`schema.table` or a plugin's output; names ending in {} are those of the current-state tables)",
                    crate::lake::tables::MIRROR_SUFFIX
                ));
            }
        }
        if !(1..=64).contains(&self.load.parallelism) || self.load.chunk_mib == 0 {
            return Err("load.parallelism must be 1 to 64 and load.chunk_mib at least 1".into());
        }
        if self.retry.limit_secs == Some(0) {
            return Err(
                "retry.limit_secs must be at least 1 (leave it out to retry for as long as a fault lasts)"
                    .into(),
            );
        }
        if !(1..=16).contains(&self.flush.parallel_transforms) {
            return Err(format!(
                "flush.parallel_transforms = {} must be 1 to 16 (2 by default; 1 transforms \
                 one batch at a time)",
                self.flush.parallel_transforms
            ));
        }
        if self.flush.in_flight_mib == 0 {
            return Err("flush.in_flight_mib must be at least 1".into());
        }
        if self.flush.chunk_mib == 0 || self.flush.chunk_mib > self.flush.in_flight_mib {
            return Err(format!(
                "flush.chunk_mib must be at least 1 and at most flush.in_flight_mib ({})",
                self.flush.in_flight_mib
            ));
        }
        for (i, t) in self.transforms.iter().enumerate() {
            if !(16..=crate::transform::MAX_STACK_BYTES >> 10).contains(&t.stack_kib) {
                return Err(format!(
                    "transform {} ({}): stack_kib must be 16 to {} (plugin calls run on \
                     threads with 2 MiB stacks)",
                    i + 1,
                    t.plugin.display(),
                    crate::transform::MAX_STACK_BYTES >> 10
                ));
            }
            if t.memory_limit_mib == 0 || t.timeout_ms == 0 {
                return Err(format!(
                    "transform {} ({}): memory_limit_mib and timeout_ms must be at least 1",
                    i + 1,
                    t.plugin.display()
                ));
            }
        }
        Ok(())
    }

    pub fn transform_specs(&self) -> Vec<(TransformSpec, HostLimits)> {
        self.transforms
            .iter()
            .map(|t| {
                let spec = TransformSpec {
                    plugin: t.plugin.clone(),
                    config: t
                        .config
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    on_error: t.on_error,
                };
                let limits = HostLimits {
                    memory_bytes: t.memory_limit_mib << 20,
                    call_timeout: Duration::from_millis(t.timeout_ms),
                    stack_bytes: t.stack_kib << 10,
                };
                (spec, limits)
            })
            .collect()
    }
}

/// Slot names allow lower-case letters, digits and underscores; we hold publications to the
/// same rule so both can be quoted safely everywhere.
/// The longest `source.trigger_schema`: the capture triggers are named after it
/// (`<schema>_capture_truncate`), within PostgreSQL's 63 characters.
const MAX_TRIGGER_SCHEMA: usize = 63 - "_capture_truncate".len();

fn check_identifier(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 63 {
        return Err("must be 1 to 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err("may contain only lower-case letters, digits and underscores");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [source]
        url = "postgres://replicator@db:5432/shop"
        slot = "tributary_shop"
        publication = "tributary_shop"
        tables = ["public.orders", "public.customers"]

        [[transform]]
        plugin = "plugins/mask_pii.wasm"
        config = { columns = "email,phone" }

        [sink]
        url = "s3://lake/shop"
    "#;

    fn parse(text: &str) -> Result<PipelineConfig, ConfigError> {
        PipelineConfig::parse(text, Path::new("pipeline.toml"))
    }

    #[test]
    fn on_type_change_is_refused_outside_delta_saying_what_each_format_does() {
        let sink = |extra: &str| parse(&format!("{MINIMAL}{extra}\n"));
        let err = sink("format = \"iceberg\"\non_type_change = \"new_version\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("an Iceberg table widens a column"), "{err}");
        let err = sink("on_type_change = \"new_version\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("Parquet files start new files"), "{err}");
        assert!(sink("format = \"delta\"\non_type_change = \"new_version\"").is_ok());
    }

    #[test]
    fn a_catalog_is_for_iceberg_tables_and_takes_its_own_keys() {
        let sink = |extra: &str| parse(&format!("{MINIMAL}{extra}\n"));
        let err = sink("catalog = \"postgresql://cat@db/lake\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sink.format is \"parquet\""), "{err}");
        let iceberg = "format = \"iceberg\"\n";
        let err = sink(&format!("{iceberg}catalog = \"thrift://hms:9083\""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sink.catalog must be a postgresql://"),
            "{err}"
        );
        let err = sink(&format!(
            "{iceberg}catalog = \"https://cat\"\ncatalog_client_id = \"me\""
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("go together"), "{err}");
        let err = sink(&format!(
            "{iceberg}catalog = \"postgresql://db/lake\"\ncatalog_token = \"t\""
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("sink.catalog_token does not apply to a SQL catalog"),
            "{err}"
        );
        let err = sink("catalog_namespace = \"x\"").unwrap_err().to_string();
        assert!(err.contains("sink.catalog is not"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "s3cret\n").unwrap();
        let config = sink(&format!(
            "{iceberg}catalog = \"https://cat\"\ncatalog_client_id = \"me\"\n\
             catalog_client_secret_file = {:?}\ncatalog_namespace = \"lake.shop\"",
            file.display()
        ))
        .unwrap();
        assert_eq!(
            config
                .sink
                .catalog_client_secret
                .as_ref()
                .map(Secret::expose),
            Some("s3cret")
        );
        assert!(!format!("{config:?}").contains("s3cret"));
        let catalog = config.sink.catalog().unwrap();
        assert!(catalog.is_rest());
        assert_eq!(
            catalog.ident("public.orders").to_string(),
            "lake.shop.public__orders"
        );
    }

    #[test]
    fn a_mirror_needs_tables_and_an_output_name() {
        let mirrored = format!("{MINIMAL}\n[outputs.\"public.orders\"]\nmirror = true\n");
        let err = parse(&mirrored).unwrap_err().to_string();
        assert!(
            err.contains("outputs.\"public.orders\".mirror needs tables"),
            "{err}"
        );
        let delta = mirrored.replace(
            "url = \"s3://lake/shop\"",
            "url = \"s3://lake/shop\"\nformat = \"delta\"",
        );
        let c = parse(&delta).unwrap();
        assert_eq!(c.mirrored(), ["public.orders".to_owned()].into());
        let iceberg = delta.replace("format = \"delta\"", "format = \"iceberg\"");
        assert_eq!(
            parse(&iceberg).unwrap().mirrored(),
            ["public.orders".to_owned()].into()
        );
        assert!(parse(MINIMAL).unwrap().mirrored().is_empty());
        let partitioned = delta.replace("mirror = true", "partition_by = \"day(_commit_time)\"");
        let c = parse(&partitioned).unwrap();
        assert_eq!(c.partitions()["public.orders"].column(), "_commit_time_day");
        let wrong = partitioned.replace("day(_commit_time)", "week(_commit_time)");
        let err = parse(&wrong).unwrap_err().to_string();
        assert!(
            err.contains("partition_by = \"week(_commit_time)\" is not a partitioning"),
            "{err}"
        );
        let named = delta.replace("public.orders\"]", "public.orders__current\"]");
        let err = parse(&named).unwrap_err().to_string();
        assert!(err.contains("not an output's name"), "{err}");
    }

    #[test]
    fn the_capture_mode_and_the_trigger_schema_are_read_and_checked() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.source.capture, CaptureMode::Wal);
        assert_eq!(c.source.trigger_schema, "tributary");
        let with = |extra: &str| {
            parse(&MINIMAL.replace("tables = [", &format!("{extra}\n        tables = [")))
        };
        let c = with("capture = \"auto\"\ntrigger_schema = \"cdc\"").unwrap();
        assert_eq!(
            (c.source.capture, c.source.trigger_schema.as_str()),
            (CaptureMode::Auto, "cdc")
        );
        assert_eq!(
            with("capture = \"trigger\"").unwrap().source.capture,
            CaptureMode::Trigger
        );
        let err = with("capture = \"logical\"").unwrap_err().to_string();
        assert!(
            err.contains("\"logical\" is not one of \"wal\", \"trigger\", \"auto\""),
            "{err}"
        );
        let err = with("trigger_schema = \"Bad-Name\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("source.trigger_schema = \"Bad-Name\""),
            "{err}"
        );
        let long = "s".repeat(47);
        let err = with(&format!("trigger_schema = \"{long}\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be at most 46 characters"), "{err}");
        assert!(with(&format!("trigger_schema = \"{}\"", &long[1..])).is_ok());
    }

    #[test]
    fn trigger_capture_needs_no_slot_or_publication_and_the_others_do() {
        let without = |capture: &str, drop: &[&str]| {
            let mut text = MINIMAL.replace(
                "tables = [",
                &format!("capture = \"{capture}\"\n        tables = ["),
            );
            for key in drop {
                text = text.replace(&format!("{key} = \"tributary_shop\""), "");
            }
            parse(&text)
        };
        let c = without("trigger", &["slot", "publication"]).unwrap();
        assert_eq!(
            (c.source.slot.as_str(), c.source.publication.as_str()),
            ("", "")
        );
        // A publication may still name the tables to capture.
        let named = MINIMAL
            .replace("slot = \"tributary_shop\"", "capture = \"trigger\"")
            .replace("tables = [\"public.orders\", \"public.customers\"]", "");
        assert_eq!(parse(&named).unwrap().source.publication, "tributary_shop");
        let neither = named.replace("publication = \"tributary_shop\"", "");
        let err = parse(&neither).unwrap_err().to_string();
        assert!(
            err.contains(
                "with source.capture = \"trigger\", name the tables to capture in source.tables"
            ),
            "{err}"
        );
        for (capture, key) in [("wal", "slot"), ("wal", "publication"), ("auto", "slot")] {
            let err = without(capture, &[key]).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!(
                    "pipeline file pipeline.toml: source.{key} is missing: name the "
                )) && err.contains(&format!("source.capture = \"{capture}\""))
                    && err.ends_with("only source.capture = \"trigger\" goes without"),
                "{err}"
            );
        }
        // Given, a slot's name is checked in trigger mode too.
        let bad = MINIMAL
            .replace(
                "tributary_shop\"\n        publication",
                "Bad-Slot\"\n        publication",
            )
            .replace("tables = [", "capture = \"trigger\"\n        tables = [");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.contains("source.slot = \"Bad-Slot\""), "{err}");
    }

    #[test]
    fn minimal_file_gets_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.source.tables, ["public.orders", "public.customers"]);
        assert_eq!(c.source.slot_behavior(), Provisioning::Create);
        assert_eq!(c.source.publication_behavior(), Provisioning::Create);
        assert_eq!(c.source.start_from, StartFrom::Tail);
        assert!(c.source.deprecations().is_empty());
        assert_eq!(c.source.unchanged_toast, UnchangedToastPolicy::Refuse);
        assert_eq!(c.transforms.len(), 1);
        assert_eq!(c.transforms[0].config["columns"], "email,phone");
        assert_eq!(c.transforms[0].memory_limit_mib, 256);
        assert_eq!(c.transforms[0].stack_kib, 512);
        assert_eq!(c.transforms[0].on_error, FailurePolicy::Stop);
        assert_eq!(c.flush, FlushConfig::default());
        assert_eq!(c.sink.url, "s3://lake/shop");
    }

    #[test]
    fn sink_options_take_booleans_and_numbers_as_text() {
        let text = format!(
            "{MINIMAL}\n[sink.options]\naws_allow_http = true\naws_endpoint = \"http://127.0.0.1:9000\"\naws_imdsv1_fallback = false\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.sink.options["aws_allow_http"], "true");
        assert_eq!(c.sink.options["aws_imdsv1_fallback"], "false");
        crate::lake::sink::Sink::open(&c.sink.url, &c.sink.options).unwrap();
        let err = parse(&format!(
            "{MINIMAL}\n[sink.options]\naws_region = [\"a\"]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("a string, a boolean or a number"), "{err}");
    }

    #[test]
    fn unknown_keys_name_the_key_and_the_file() {
        let text = MINIMAL.replace("[sink]", "[sink]\nbukket = \"x\"");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.starts_with("pipeline file pipeline.toml:"), "{err}");
        assert!(err.contains("bukket"), "{err}");

        let err = parse(&format!("{MINIMAL}\n[extra]\nx = 1\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("extra"), "{err}");
    }

    #[test]
    fn transform_limits_and_policy_are_read_and_checked() {
        let with = |extra: &str| {
            parse(&MINIMAL.replace(
                "config = { columns = \"email,phone\" }",
                &format!("config = {{ columns = \"email,phone\" }}\n{extra}"),
            ))
        };
        let c = with("stack_kib = 1024\non_error = \"dead-letter\"").unwrap();
        assert_eq!(c.transforms[0].stack_kib, 1024);
        assert_eq!(c.transforms[0].on_error, FailurePolicy::DeadLetter);
        assert_eq!(c.transform_specs()[0].1.stack_bytes, 1 << 20);
        let err = with("stack_kib = 4096").unwrap_err().to_string();
        assert!(err.contains("stack_kib must be 16 to 1024"), "{err}");
        let err = with("on_error = \"ignore\"").unwrap_err().to_string();
        assert!(err.contains("ignore"), "{err}");
    }

    #[test]
    fn the_metrics_endpoint_is_off_unless_an_address_is_given() {
        assert_eq!(parse(MINIMAL).unwrap().metrics.address(), Ok(None));
        let c = parse(&format!(
            "{MINIMAL}\n[metrics]\nlisten = \"0.0.0.0:9187\"\n"
        ))
        .unwrap();
        assert_eq!(
            c.metrics.address(),
            Ok(Some("0.0.0.0:9187".parse().unwrap()))
        );
        let err = parse(&format!("{MINIMAL}\n[metrics]\nlisten = \"localhost\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("metrics.listen = \"localhost\" is not an address and port"),
            "{err}"
        );
    }

    #[test]
    fn readiness_tolerates_a_minute_of_failing_steps_unless_told_otherwise() {
        let metrics = |extra: &str| parse(&format!("{MINIMAL}\n[metrics]\n{extra}\n"));
        assert_eq!(
            parse(MINIMAL).unwrap().metrics.ready_after_failing(),
            std::time::Duration::from_secs(60)
        );
        let c = metrics("ready_after_failing_secs = 5").unwrap();
        assert_eq!(c.metrics.ready_after_failing_secs, 5);
        let err = metrics("ready_after_failing_secs = 0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("metrics.ready_after_failing_secs must be at least 1"),
            "{err}"
        );
        let err = metrics("ready_after_failing_secs = -1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ready_after_failing_secs"), "{err}");
    }

    #[test]
    fn parquet_settings_pick_the_codec_and_refuse_what_does_not_fit() {
        use crate::lake::encode::{Codec, DEFAULT_ZSTD_LEVEL};
        let codec = |extra: &str| {
            parse(&format!("{MINIMAL}\n[parquet]\n{extra}\n"))
                .map(|c| c.parquet.encode_options().compression)
                .map_err(|e| e.to_string())
        };
        assert_eq!(codec(""), Ok(Codec::Zstd(DEFAULT_ZSTD_LEVEL)));
        assert_eq!(codec("zstd_level = 9"), Ok(Codec::Zstd(9)));
        assert_eq!(codec("compression = \"snappy\""), Ok(Codec::Snappy));
        assert_eq!(codec("compression = \"none\""), Ok(Codec::Uncompressed));
        let err = codec("zstd_level = 0").unwrap_err();
        assert!(
            err.contains("parquet.zstd_level = 0: zstd levels run from 1"),
            "{err}"
        );
        let err = codec("compression = \"snappy\"\nzstd_level = 3").unwrap_err();
        assert!(
            err.contains("applies only with parquet.compression = \"zstd\""),
            "{err}"
        );
        let err = codec("compression = \"lzo\"").unwrap_err();
        assert!(err.contains("lzo"), "{err}");
        let err = codec("row_group_rows = 0").unwrap_err();
        assert!(
            err.contains("parquet.row_group_rows must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn missing_sections_are_named() {
        let err = parse("[source]\nurl = \"x\"\nslot = \"s\"\npublication = \"p\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sink"), "{err}");
    }

    #[test]
    fn bad_names_are_refused() {
        let err = parse(&MINIMAL.replace("slot = \"tributary_shop\"", "slot = \"Shop-1\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("source.slot"), "{err}");
        let err = parse(&MINIMAL.replace("\"public.orders\",", "\"orders\","))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"orders\" is not of the form"), "{err}");
    }

    #[test]
    fn unchanged_toast_takes_one_of_its_policies() {
        for (text, policy) in [
            ("refuse", UnchangedToastPolicy::Refuse),
            ("null", UnchangedToastPolicy::Null),
        ] {
            let file = MINIMAL.replace(
                "[[transform]]",
                &format!("unchanged_toast = \"{text}\"\n\n[[transform]]"),
            );
            let c = parse(&file).unwrap();
            assert_eq!(c.source.unchanged_toast, policy);
            assert_eq!(policy.as_str(), text);
        }
    }

    #[test]
    fn an_unknown_unchanged_toast_policy_names_the_key_and_the_choices() {
        let file = MINIMAL.replace(
            "[[transform]]",
            "unchanged_toast = \"Null\"\n\n[[transform]]",
        );
        let err = parse(&file).unwrap_err().to_string();
        assert!(err.starts_with("pipeline file pipeline.toml:"), "{err}");
        assert!(
            err.contains("source.unchanged_toast = \"Null\" is not one of \"refuse\", \"null\""),
            "{err}"
        );
        let file = MINIMAL.replace("[[transform]]", "unchanged_toast = 1\n\n[[transform]]");
        let err = parse(&file).unwrap_err().to_string();
        assert!(err.contains("unchanged_toast"), "{err}");
    }

    fn with_source(lines: &str) -> Result<PipelineConfig, ConfigError> {
        parse(&MINIMAL.replace("[[transform]]", &format!("{lines}\n\n[[transform]]")))
    }

    #[test]
    fn start_from_takes_a_word_a_position_or_an_integer() {
        for (text, expected) in [
            ("\"tail\"", StartFrom::Tail),
            ("\"head\"", StartFrom::Head),
            ("\"full\"", StartFrom::Full),
            ("\"lsn:0/1A2B3C\"", StartFrom::Lsn(Lsn(0x1A2B3C))),
            ("\"lsn:16/B374D848\"", StartFrom::Lsn(Lsn(0x16_B374_D848))),
            ("1715004", StartFrom::Lsn(Lsn(1_715_004))),
        ] {
            let c = with_source(&format!("start_from = {text}")).unwrap();
            assert_eq!(c.source.start_from, expected, "{text}");
        }
        assert_eq!(StartFrom::Lsn(Lsn(0x1A2B3C)).to_string(), "lsn:0/1A2B3C");
        for bad in [
            "\"Tail\"",
            "\"lsn:\"",
            "\"0/1A2B3C\"",
            "\"lsn:0/xyz\"",
            "-1",
        ] {
            let err = with_source(&format!("start_from = {bad}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("start_from"), "{bad}: {err}");
        }
        let err = with_source("start_from = \"snapshot\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"snapshot\" is not one of \"tail\", \"head\", \"full\""),
            "{err}"
        );
    }

    #[test]
    fn the_old_create_flags_still_work_and_say_what_replaces_them() {
        let c = with_source("create_slot = false\ncreate_publication = true").unwrap();
        assert_eq!(c.source.slot_behavior(), Provisioning::Reuse);
        assert_eq!(c.source.publication_behavior(), Provisioning::Create);
        assert_eq!(
            c.source.deprecations(),
            [
                "source.create_slot is deprecated and will be removed: write source.slot_behavior = \"reuse\" instead",
                "source.create_publication is deprecated and will be removed: write source.publication_behavior = \"create\" instead",
            ]
        );
        let c = with_source("slot_behavior = \"reuse\"\npublication_behavior = \"reuse\"").unwrap();
        assert_eq!(c.source.slot_behavior(), Provisioning::Reuse);
        assert_eq!(c.source.publication_behavior(), Provisioning::Reuse);
        let err = with_source("create_slot = true\nslot_behavior = \"create\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("keep only slot_behavior"), "{err}");
        let err = with_source("slot_behavior = \"make\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"make\" is not one of \"create\", \"reuse\""),
            "{err}"
        );
    }

    #[test]
    fn the_example_pipeline_file_reads() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/shop.toml");
        let c = PipelineConfig::load(&file).unwrap();
        assert_eq!(c.source.start_from, StartFrom::Tail);
        assert_eq!(c.source.slot_behavior(), Provisioning::Create);
        assert!(c.source.deprecations().is_empty());
    }

    #[test]
    fn plugin_paths_resolve_against_the_file() {
        let dir = std::env::temp_dir().join(format!("tributary-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pipeline.toml");
        std::fs::write(&file, MINIMAL).unwrap();
        let c = PipelineConfig::load(&file).unwrap();
        assert_eq!(c.transforms[0].plugin, dir.join("plugins/mask_pii.wasm"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
