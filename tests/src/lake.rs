//! Reading back what a pipeline landed: every Parquet file of an output, as rows of text.
//!
//! Values are rendered to one canonical text per type so a test can compare them with what a
//! `SELECT` in PostgreSQL returns for the same row (see each arm of [`cell`]).

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal256Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tributary::lake::commit::{CommitEntry, CommitLog, Writer};
use tributary::lake::sink::Sink;

/// One landed row: the change metadata, then the output's columns by name.
#[derive(Debug, Clone, PartialEq)]
pub struct LandedRow {
    pub op: String,
    pub commit_lsn: u64,
    pub seq: u32,
    pub xid: u32,
    /// Microseconds since the Unix epoch.
    pub commit_time: i64,
    pub values: BTreeMap<String, Option<String>>,
    /// The fingerprint of the schema the row was written with (`_schema`).
    pub schema: String,
    /// Columns that held an unchanged TOAST value (`_unchanged_toast`), as `[a,b]`.
    pub unchanged_toast: Option<String>,
    /// The old image (`_old`) by column, for outputs derived from tables; `None` when the row
    /// has none.
    pub old: Option<BTreeMap<String, Option<String>>>,
    /// The file it came from.
    pub file: String,
}

/// Objects fetched side by side when reading a whole output or log: a lake that went through
/// hundreds of flushes holds many small files.
const READS_AT_ONCE: usize = 8;

/// Every row of every Parquet file under `<output>/`, sorted by (commit LSN, seq).
pub async fn read_output(store: &dyn ObjectStore, output: &str) -> Vec<LandedRow> {
    let prefix = Path::from(output);
    let mut files: Vec<Path> = store
        .list(Some(&prefix))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing {output}: {e}"));
    // Not the Delta log's checkpoints.
    files.retain(|p| p.extension() == Some("parquet") && !p.as_ref().contains("/_delta_log/"));
    files.sort();
    let mut rows = Vec::new();
    let mut fetched = futures::stream::iter(files)
        .map(|file| async move {
            let bytes = store.get(&file).await.unwrap().bytes().await.unwrap();
            (file, bytes)
        })
        .buffered(READS_AT_ONCE);
    while let Some((file, bytes)) = fetched.next().await {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap_or_else(|e| panic!("{file} is not Parquet: {e}"))
            .build()
            .unwrap();
        for batch in reader {
            rows.extend(rows_of(&batch.unwrap(), file.as_ref()));
        }
    }
    rows.sort_by_key(|r| (r.commit_lsn, r.seq));
    rows
}

/// Paths of the data files under `<output>/`.
pub async fn data_files(store: &dyn ObjectStore, output: &str) -> Vec<String> {
    object_names(store, output).await
}

/// Paths of every object under `prefix`, sorted.
pub async fn object_names(store: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = store
        .list(Some(&Path::from(prefix)))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    names
}

/// Changes over every entry of the commit log.
pub async fn landed_changes(log: &CommitLog) -> u64 {
    entries(log).await.iter().map(|e| e.changes).sum()
}

/// Every entry of the commit log, in order.
pub async fn entries(log: &CommitLog) -> Vec<CommitEntry> {
    futures::stream::iter(log.sequences().await.unwrap())
        .map(|sequence| async move { log.read_entry(sequence).await.unwrap().unwrap() })
        .buffered(READS_AT_ONCE)
        .collect()
        .await
}

/// The sequences of the log's entries with files of `output`, in order.
pub async fn entries_of(log: &CommitLog, output: &str) -> Vec<u64> {
    entries(log)
        .await
        .iter()
        .filter(|e| e.files.iter().any(|f| f.output == output))
        .map(|e| e.sequence)
        .collect()
}

/// Read an output through its commit log and check what exactly-once promises of it: every
/// file a flush entry names holds the bytes and rows the entry says, every data file under
/// `<output>/` is named by an entry, and no change identity (commit LSN, seq) appears twice.
/// Returns the rows, sorted by identity.
pub async fn committed_rows(sink: &Sink, output: &str) -> Vec<LandedRow> {
    let log = CommitLog::new(sink.clone(), Writer::named("audit"));
    let mut named = BTreeMap::new();
    for entry in entries(&log).await {
        let sequence = entry.sequence;
        for file in entry.files.into_iter().filter(|f| f.output == output) {
            named.insert(file.path.clone(), (sequence, file));
        }
    }
    let rows = read_output(sink.store().as_ref(), output).await;
    let mut rows_per_file: BTreeMap<&str, u64> = BTreeMap::new();
    for row in &rows {
        *rows_per_file.entry(row.file.as_str()).or_default() += 1;
    }
    // Sizes as the listing gives them: one request per thousand files, not one per file.
    let sizes: BTreeMap<String, u64> = sink
        .store()
        .list(Some(&Path::from(output)))
        .map_ok(|meta| (meta.location.to_string(), meta.size))
        .try_collect()
        .await
        .unwrap();
    // A table's own log (Delta's `_delta_log/`, Iceberg's `metadata/`) is no data file.
    let data =
        |p: &str| !p.contains("/_delta_log/") && !p.starts_with(&format!("{output}/metadata/"));
    for (path, size) in sizes.iter().filter(|(p, _)| data(p)) {
        let Some((sequence, file)) = named.get(path) else {
            panic!("{path} is in the sink but no commit entry names it");
        };
        assert_eq!(
            (
                *size,
                rows_per_file.get(path.as_str()).copied().unwrap_or(0)
            ),
            (file.bytes, file.rows),
            "{path}: the bytes and rows entry {sequence} names"
        );
    }
    for path in named.keys() {
        assert!(
            sizes.contains_key(path),
            "{path} is named by a commit entry but missing"
        );
    }
    let mut identities = std::collections::BTreeSet::new();
    for row in &rows {
        assert!(
            identities.insert((row.commit_lsn, row.seq)),
            "change ({}, {}) landed twice",
            row.commit_lsn,
            row.seq
        );
    }
    rows
}

fn rows_of(batch: &RecordBatch, file: &str) -> Vec<LandedRow> {
    let schema = batch.schema();
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("{file} has no column {name}"))
    };
    // A Delta table's files hold the identities as Int64 (Delta has no unsigned types).
    let unsigned = |name: &str, to: DataType| {
        arrow_cast::cast(column(name), &to).unwrap_or_else(|e| panic!("{file} {name}: {e}"))
    };
    let (op, lsn, seq, xid, time, fingerprint) = (
        column("_op"),
        unsigned("_commit_lsn", DataType::UInt64),
        unsigned("_seq", DataType::UInt32),
        unsigned("_xid", DataType::UInt32),
        column("_commit_time"),
        column("_schema"),
    );
    let unchanged = column("_unchanged_toast");
    let old = batch.column_by_name("_old").map(|a| a.as_struct().clone());
    (0..batch.num_rows())
        .map(|i| LandedRow {
            op: cell(op.as_ref(), i).expect("_op is never null"),
            commit_lsn: lsn.as_primitive::<UInt64Type>().value(i),
            seq: seq.as_primitive::<UInt32Type>().value(i),
            xid: xid.as_primitive::<UInt32Type>().value(i),
            commit_time: time.as_primitive::<TimestampMicrosecondType>().value(i),
            values: schema
                .fields()
                .iter()
                .zip(batch.columns())
                .filter(|(f, _)| !f.name().starts_with('_'))
                .map(|(f, a)| (f.name().clone(), cell(a.as_ref(), i)))
                .collect(),
            schema: cell(fingerprint.as_ref(), i).expect("_schema is never null"),
            unchanged_toast: cell(unchanged.as_ref(), i),
            old: old.as_ref().filter(|o| o.is_valid(i)).map(|o| {
                o.column_names()
                    .into_iter()
                    .zip(o.columns())
                    .map(|(name, a)| (name.to_owned(), cell(a.as_ref(), i)))
                    .collect()
            }),
            file: file.to_owned(),
        })
        .collect()
}

/// The canonical text of one value:
/// booleans `true`/`false`; integers and floats in Rust's shortest round-trip form; decimals
/// with exactly their scale's digits; binary and UUIDs as lower-case hex; dates as days since
/// 1970-01-01; times and timestamps as microseconds; strings as they are; lists as
/// `[a,null,b]`; structs as `{name:value,...}`.
pub fn cell(array: &dyn Array, i: usize) -> Option<String> {
    if array.is_null(i) {
        return None;
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    Some(match array.data_type() {
        DataType::Boolean => array.as_boolean().value(i).to_string(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(i).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(i).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(i).to_string(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(i).to_string(),
        DataType::Float32 => array.as_primitive::<Float32Type>().value(i).to_string(),
        DataType::Float64 => array.as_primitive::<Float64Type>().value(i).to_string(),
        DataType::Decimal128(_, scale) => {
            let v = array
                .as_primitive::<arrow_array::types::Decimal128Type>()
                .value(i);
            decimal_text(v, *scale)
        }
        DataType::Utf8 => array.as_string::<i32>().value(i).to_owned(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(i).to_owned(),
        DataType::Utf8View => array.as_string_view().value(i).to_owned(),
        DataType::Binary => hex(array.as_binary::<i32>().value(i)),
        DataType::LargeBinary => hex(array.as_binary::<i64>().value(i)),
        DataType::FixedSizeBinary(_) => hex(array.as_fixed_size_binary().value(i)),
        DataType::Date32 => array.as_primitive::<Date32Type>().value(i).to_string(),
        DataType::Time64(TimeUnit::Microsecond) => array
            .as_primitive::<Time64MicrosecondType>()
            .value(i)
            .to_string(),
        DataType::Decimal256(_, scale) => {
            let v = array.as_primitive::<Decimal256Type>().value(i);
            decimal_digits(v.to_string(), *scale)
        }
        DataType::List(_) => {
            let items = array.as_list::<i32>().value(i);
            let rendered: Vec<String> = (0..items.len())
                .map(|j| cell(items.as_ref(), j).unwrap_or_else(|| "null".to_owned()))
                .collect();
            format!("[{}]", rendered.join(","))
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let rendered: Vec<String> = fields
                .iter()
                .zip(s.columns())
                .map(|(f, c)| {
                    let v = cell(c.as_ref(), i).unwrap_or_else(|| "null".to_owned());
                    format!("{}:{v}", f.name())
                })
                .collect();
            format!("{{{}}}", rendered.join(","))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => array
            .as_primitive::<TimestampMicrosecondType>()
            .value(i)
            .to_string(),
        DataType::Dictionary(_, _) => {
            let dict = array.as_any_dictionary();
            let key = dict.normalized_keys()[i];
            cell(dict.values().as_ref(), key)?
        }
        other => panic!("the test reader does not render {other} yet"),
    })
}

fn decimal_text(value: i128, scale: i8) -> String {
    decimal_digits(value.to_string(), scale)
}

/// An unscaled integer's digits with the point put back `scale` digits from the right.
fn decimal_digits(unscaled: String, scale: i8) -> String {
    if scale <= 0 {
        return unscaled;
    }
    let scale = scale as usize;
    let (sign, digits) = match unscaled.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", unscaled.as_str()),
    };
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    format!("{sign}{int}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::decimal_text;

    #[test]
    fn decimals_keep_their_scale() {
        assert_eq!(decimal_text(12345, 2), "123.45");
        assert_eq!(decimal_text(-5, 2), "-0.05");
        assert_eq!(decimal_text(100, 0), "100");
    }
}

/// What DuckDB and pyarrow, reading the files themselves, make of landed Parquet.
#[derive(Debug)]
pub struct IndependentRead {
    /// Column to DuckDB type (`DESCRIBE`).
    pub duckdb_types: BTreeMap<String, String>,
    /// Key to column to value as DuckDB casts it to text (inserted rows only).
    pub duckdb_rows: BTreeMap<String, BTreeMap<String, Option<String>>>,
    /// Column to Arrow type as pyarrow prints it.
    pub pyarrow_types: BTreeMap<String, String>,
    /// Column to its `pg.type` field metadata.
    pub pg_types: BTreeMap<String, String>,
}

/// Read the Parquet files matching `pattern` with DuckDB and pyarrow through
/// `tests/readers/describe_parquet.py`, using the interpreter `TRIBUTARY_PYTHON` names (the test
/// script installs one with both), keyed by the column `key`.
pub fn read_independently(pattern: &str, key: &str) -> IndependentRead {
    let python = std::env::var("TRIBUTARY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("readers/describe_parquet.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .args([pattern, key])
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e} (run the tests through scripts/test.sh, which installs DuckDB and pyarrow)"));
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let strings = |v: &serde_json::Value| -> BTreeMap<String, String> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect()
    };
    IndependentRead {
        duckdb_types: strings(&doc["duckdb"]["types"]),
        duckdb_rows: doc["duckdb"]["rows"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, row)| {
                let row = row
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(c, v)| (c.clone(), v.as_str().map(str::to_owned)))
                    .collect();
                (k.clone(), row)
            })
            .collect(),
        pyarrow_types: strings(&doc["pyarrow"]["types"]),
        pg_types: strings(&doc["pyarrow"]["pg_types"]),
    }
}

/// The interpreter `TRIBUTARY_PYTHON` names and the reader script `name` of `tests/readers/`.
fn delta_reader(name: &str) -> (String, std::path::PathBuf) {
    let python = std::env::var("TRIBUTARY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("readers")
        .join(name);
    (python, script)
}

/// The sink's object_store settings as the readers take them: a JSON object.
fn options_json(options: &[(String, String)]) -> String {
    let options: serde_json::Map<String, serde_json::Value> = options
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(options).to_string()
}

/// A `deltalake` reader reading a table again and again while it is written to
/// (`tests/readers/poll_delta.py`), until [`finish`](Self::finish).
pub struct DeltaPoller {
    child: std::process::Child,
    stop: std::path::PathBuf,
}

/// What a [`DeltaPoller`] saw.
#[derive(Debug)]
pub struct Polled {
    pub reads: u64,
    /// The distinct versions read, in order.
    pub versions: Vec<u64>,
    /// The data files of each distinct version read.
    pub files: Vec<(u64, usize)>,
    /// One sentence per inconsistent read.
    pub problems: Vec<String>,
}

impl DeltaPoller {
    /// Start polling the table at `uri`; `dir` takes the stop file.
    pub fn start(uri: &str, options: &[(String, String)], dir: &std::path::Path) -> DeltaPoller {
        let (python, script) = delta_reader("poll_delta.py");
        let stop = dir.join("stop-polling");
        let child = std::process::Command::new(&python)
            .arg(&script)
            .args([uri, &options_json(options), &stop.to_string_lossy()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {python}: {e}"));
        DeltaPoller { child, stop }
    }

    /// Stop after one more read, and say what it saw.
    pub fn finish(self) -> Polled {
        std::fs::write(&self.stop, b"").unwrap();
        let output = self.child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "poll_delta.py failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let numbers = |v: &serde_json::Value| -> Vec<u64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        };
        Polled {
            reads: doc["reads"].as_u64().unwrap(),
            versions: numbers(&doc["versions"]),
            files: doc["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f[0].as_u64().unwrap(), f[1].as_u64().unwrap() as usize))
                .collect(),
            problems: doc["problems"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect(),
        }
    }
}

/// What the `deltalake` package (delta-rs) and pyarrow, reading a Delta table themselves, find.
#[derive(Debug)]
pub struct DeltaRead {
    pub version: u64,
    /// The data files a reader of the latest version reads.
    pub files: Vec<String>,
    /// Each column's name, Delta type and nullability, in order.
    pub schema: Vec<(String, String, bool)>,
    /// Every row, each column's value as text, in `(_commit_lsn, _seq)` order.
    pub rows: Vec<BTreeMap<String, Option<String>>>,
    /// The table's partition columns.
    pub partition_columns: Vec<String>,
}

/// Read the Delta table at `uri` (`s3://bucket/output`) through `tests/readers/read_delta.py`
/// with the interpreter `TRIBUTARY_PYTHON` names; `options` are the sink's object_store settings.
pub fn read_delta(uri: &str, options: &[(String, String)]) -> DeltaRead {
    read_delta_version(uri, options, None)
}

/// [`read_delta`] of the table as it was at `version` (the latest when `None`).
pub fn read_delta_version(
    uri: &str,
    options: &[(String, String)],
    version: Option<u64>,
) -> DeltaRead {
    let (python, script) = delta_reader("read_delta.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .args([uri, &options_json(options)])
        .args(version.map(|v| v.to_string()))
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e} (run the tests through scripts/test.sh, which installs deltalake)"));
    assert!(
        output.status.success(),
        "{} {uri} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let read = DeltaRead {
        version: doc["version"].as_u64().unwrap(),
        partition_columns: doc["partition_columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_owned())
            .collect(),
        files: doc["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect(),
        schema: doc["schema"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f[0].as_str().unwrap().to_owned(),
                    f[1].as_str().unwrap().to_owned(),
                    f[2].as_bool().unwrap(),
                )
            })
            .collect(),
        rows: doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_object()
                    .unwrap()
                    .iter()
                    .map(|(c, v)| (c.clone(), v.as_str().map(str::to_owned)))
                    .collect()
            })
            .collect(),
    };
    second_reader_agrees(uri, &read, &doc["duckdb"]);
    read
}

/// DuckDB's delta extension (delta-kernel), a second reader of the latest version, reads the
/// same changes as delta-rs: each row's `[_commit_lsn, _seq, _op]`, in order.
fn second_reader_agrees(uri: &str, read: &DeltaRead, duckdb: &serde_json::Value) {
    let Some(second) = duckdb.as_array() else {
        return;
    };
    let second: Vec<[Option<String>; 3]> = second
        .iter()
        .map(|r| [0, 1, 2].map(|i| r[i].as_str().map(str::to_owned)))
        .collect();
    let first: Vec<[Option<String>; 3]> = read
        .rows
        .iter()
        .map(|r| ["_commit_lsn", "_seq", "_op"].map(|c| r.get(c).cloned().flatten()))
        .collect();
    assert_eq!(
        second, first,
        "{uri}: DuckDB's delta extension reads other changes than delta-rs"
    );
}

/// The `txn` version of each commit of `output`'s Delta log in `sink`, in version order, as
/// the log's own JSON says: `None` for a version without one. Panics on a missing version.
pub async fn delta_txn_versions(sink: &Sink, output: &str) -> Vec<Option<u64>> {
    let names = object_names(sink.store().as_ref(), &format!("{output}/_delta_log")).await;
    let mut versions: Vec<u64> = names
        .iter()
        .filter_map(|n| n.rsplit('/').next()?.strip_suffix(".json")?.parse().ok())
        .collect();
    versions.sort_unstable();
    let mut txns = Vec::new();
    for (expected, version) in versions.iter().enumerate() {
        assert_eq!(
            *version, expected as u64,
            "{output}: a gap in the Delta log: {versions:?}"
        );
        let path =
            object_store::path::Path::from(format!("{output}/_delta_log/{version:020}.json"));
        let bytes = sink.get(&path).await.unwrap().unwrap();
        let txn = std::str::from_utf8(&bytes)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("txn").and_then(|t| t["version"].as_u64()))
            .next();
        txns.push(txn);
    }
    txns
}

/// An Iceberg table as pyiceberg and DuckDB read it (`tests/readers/read_iceberg.py`).
#[derive(Debug)]
pub struct IcebergRead {
    /// The current snapshot's summary (its operation under `operation`).
    pub snapshot: BTreeMap<String, String>,
    /// Every row as pyiceberg reads it, each value as text, in (`_commit_lsn`, `_seq`) order.
    pub rows: Vec<BTreeMap<String, Option<String>>>,
    /// The same, read by DuckDB's `iceberg_scan` through the version hint.
    pub duckdb: Vec<BTreeMap<String, Option<String>>>,
}

/// Read the Iceberg table at `folder` (a URI) whose current metadata file is `metadata`,
/// with the sink's object_store `options` (empty for a directory).
pub fn read_iceberg(folder: &str, metadata: &str, options: &[(String, String)]) -> IcebergRead {
    let doc = run_iceberg_reader(folder, metadata, &[&options_json(options)]);
    let rows = |key: &str| -> Vec<BTreeMap<String, Option<String>>> {
        serde_json::from_value(doc[key].clone()).unwrap()
    };
    IcebergRead {
        snapshot: serde_json::from_value(doc["snapshot"].clone()).unwrap(),
        rows: rows("pyiceberg"),
        duckdb: rows("duckdb"),
    }
}

/// Every row of an Iceberg table as pyiceberg alone reads it, in (`_commit_lsn`, `_seq`)
/// order: for stores DuckDB does not reach here (`abfss://` on Azurite, fake-gcs-server).
pub fn read_iceberg_with_pyiceberg(
    folder: &str,
    metadata: &str,
    options: &[(String, String)],
) -> Vec<BTreeMap<String, Option<String>>> {
    let doc = run_iceberg_reader(folder, metadata, &[&options_json(options), "pyiceberg"]);
    serde_json::from_value(doc["pyiceberg"].clone()).unwrap()
}

/// `tests/readers/read_iceberg.py` on a table with no row filter and `extra` arguments after
/// it; its JSON document.
fn run_iceberg_reader(folder: &str, metadata: &str, extra: &[&str]) -> serde_json::Value {
    let (python, script) = delta_reader("read_iceberg.py");
    let folder = folder.strip_prefix("file://").unwrap_or(folder);
    let output = std::process::Command::new(&python)
        .arg(&script)
        .args([folder, metadata, ""])
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e} (run the tests through scripts/test.sh, which installs pyiceberg and DuckDB)"));
    assert!(
        output.status.success(),
        "{} {folder} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// How many rows pyiceberg and DuckDB read from an Iceberg table, and a few rows each read that
/// the other did not (`None` when they agree as multisets): `read_iceberg` for a table too large
/// to bring here as text.
#[derive(Debug)]
pub struct IcebergCount {
    pub rows: usize,
    pub duckdb: usize,
    pub difference: Option<serde_json::Value>,
}

/// `read_iceberg`'s comparison made by the reader script itself, for a large table.
pub fn count_iceberg(folder: &str, metadata: &str, options: &[(String, String)]) -> IcebergCount {
    let doc = run_iceberg_reader(folder, metadata, &[&options_json(options), "counts"]);
    IcebergCount {
        rows: serde_json::from_value(doc["pyiceberg"].clone()).unwrap(),
        duckdb: serde_json::from_value(doc["duckdb"].clone()).unwrap(),
        difference: Some(doc["difference"].clone()).filter(|d| !d.is_null()),
    }
}
