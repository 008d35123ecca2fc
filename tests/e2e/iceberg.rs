//! Iceberg tables (`lake::iceberg`) written from real encoder files into a directory sink and
//! read back by pyiceberg and DuckDB (`tests/readers/read_iceberg.py`): two appends, the second
//! adding a column; a table partitioned by day and one by a column's value; a replace; and
//! the column statistics, through a filtered scan that pyiceberg plans to fewer files. Then
//! the pipeline itself into Iceberg tables, killed at points of the flush protocol.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use tributary::Lsn;
use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::encode::partition::Partition;
use tributary::lake::encode::{EncodeOptions, Encoder};
use tributary::lake::iceberg::metadata::Operation;
use tributary::lake::iceberg::table::{Published, Table};
use tributary::lake::sink::Sink;
use tributary::lake::tables::{TableFile, table_columns};
use tributary_tests::lake::{entries_of, read_iceberg};
use tributary_tests::service::{Fixture, Service, Verified, verify};
use tributary_tests::{TestDatabase, fresh_database};

use super::crash::{TABLES, create_tables, kill_at, transaction};
use tributary::stream::change::{Op, OutputBatch, OutputColumn, OutputRow, Value};
use tributary::wire::pgtype::oid;

const APP: &str = "tributary:db/slot";
const DAY: i64 = 86_400_000_000;
/// 2024-03-01T00:00:00Z in microseconds.
const MARCH_FIRST: i64 = 1_709_251_200_000_000;

fn columns(extra: bool) -> Arc<[OutputColumn]> {
    let mut id = OutputColumn::builtin("id", oid::INT4, -1);
    id.key = true;
    id.nullable = false;
    let mut columns = vec![
        id,
        OutputColumn::builtin("body", oid::TEXT, -1),
        OutputColumn::builtin("price", oid::NUMERIC, ((12 << 16) | 2) + 4),
        OutputColumn::builtin("u", oid::UUID, -1),
        OutputColumn::builtin("at", oid::TIMESTAMPTZ, -1),
        OutputColumn::builtin("d", oid::DATE, -1),
        OutputColumn::builtin("region", oid::TEXT, -1),
    ];
    if extra {
        columns.push(OutputColumn::builtin("extra", oid::TEXT, -1));
    }
    columns.into()
}

fn uuid(i: i32) -> [u8; 16] {
    let mut u = [0u8; 16];
    u[12..].copy_from_slice(&i.to_be_bytes());
    u
}

fn row(i: i32, commit_time: i64, extra: bool) -> OutputRow {
    let mut values = vec![
        Value::Int4(i),
        Value::Text(format!("row {i}")),
        Value::Numeric(format!("{i}.25")),
        Value::Uuid(uuid(i)),
        Value::TimestampTz(commit_time + 1),
        Value::Date(19_000 + i),
        Value::Text(if i % 2 == 0 { "east" } else { "west" }.into()),
    ];
    if extra {
        values.push(Value::Text(format!("x{i}")));
    }
    OutputRow {
        op: Op::Insert,
        commit_lsn: Lsn(0x1000 + i as u64),
        seq: 0,
        sub: 0,
        xid: 700 + i as u32,
        commit_time,
        values,
        old: None,
    }
}

/// Encode `rows` of `output` as the pipeline would, land the files in the sink, and return
/// them as the table seam hands them to a format.
async fn land(
    sink: &Sink,
    output: &str,
    partition: Option<&str>,
    rows: Vec<OutputRow>,
    extra: bool,
    name: &str,
) -> Vec<TableFile> {
    let mut options = EncodeOptions::default();
    if let Some(p) = partition {
        options
            .partitions
            .insert(output.to_owned(), Partition::parse(p).unwrap());
    }
    let batch = OutputBatch {
        output: output.into(),
        columns: columns(extra),
        rows,
        old_image: false,
    };
    let mut files = Vec::new();
    for (i, file) in Encoder::new(&options)
        .unwrap()
        .encode(&batch)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        let path = format!("{output}/{name}-{i}.parquet");
        let size = file.bytes.len() as u64;
        sink.create(&Path::from(path.as_str()), Bytes::from(file.bytes.to_vec()))
            .await
            .unwrap();
        files.push(TableFile {
            output: output.into(),
            path,
            size,
            rows: file.rows,
            schema: table_columns(file.columns.clone(), file.partition.as_ref()),
            partition: file.partition,
            footer: None,
        });
    }
    files
}

#[derive(Debug)]
struct IcebergRead {
    schema: Vec<(i64, String, String)>,
    snapshot: BTreeMap<String, String>,
    rows: Vec<BTreeMap<String, Option<String>>>,
    duckdb: Vec<BTreeMap<String, Option<String>>>,
    files: u64,
    filtered: Option<(u64, u64, u64)>,
}

/// Read the table through `tests/readers/read_iceberg.py` with the interpreter
/// `TRIBUTARY_PYTHON` names (scripts/lib.sh installs pyiceberg and DuckDB's extensions).
async fn read_table(table: &Table, filter: Option<&str>) -> IcebergRead {
    let current = table.load().await.unwrap().expect("a table");
    let folder = table.location().strip_prefix("file://").unwrap().to_owned();
    let python = std::env::var("TRIBUTARY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("readers/read_iceberg.py");
    let mut command = std::process::Command::new(&python);
    command.arg(&script).args([&folder, &current.location]);
    command.args(filter);
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e} (run the tests through scripts/test.sh, which installs pyiceberg and DuckDB)"));
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = |key: &str| -> Vec<BTreeMap<String, Option<String>>> {
        serde_json::from_value(v[key].clone()).unwrap()
    };
    IcebergRead {
        schema: v["schema"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f[0].as_i64().unwrap(),
                    f[1].as_str().unwrap().to_owned(),
                    f[2].as_str().unwrap().to_owned(),
                )
            })
            .collect(),
        snapshot: serde_json::from_value(v["snapshot"].clone()).unwrap(),
        rows: rows("pyiceberg"),
        duckdb: rows("duckdb"),
        files: v["files"].as_u64().unwrap(),
        filtered: v.get("filtered").map(|f| {
            (
                f["files"].as_u64().unwrap(),
                f["pyiceberg"].as_u64().unwrap(),
                f["duckdb"].as_u64().unwrap(),
            )
        }),
    }
}

fn column<'a>(read: &'a IcebergRead, name: &str) -> Vec<Option<&'a str>> {
    read.rows
        .iter()
        .map(|r| r.get(name).and_then(|v| v.as_deref()))
        .collect()
}

fn scratch(name: &str) -> (std::path::PathBuf, Sink) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("tributary-{name}-{}-{nanos}", std::process::id()));
    let sink = Sink::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
    (dir, sink)
}

#[tokio::test]
async fn iceberg_tables_read_back_by_pyiceberg_and_duckdb() {
    let (dir, sink) = scratch("iceberg");
    let output = "public.t";
    let table = Table::new(sink.clone(), output);

    // Two flushes, the second bringing a column.
    let first = land(
        &sink,
        output,
        None,
        (1..=50).map(|i| row(i, MARCH_FIRST, false)).collect(),
        false,
        "f1",
    )
    .await;
    assert!(matches!(
        table.publish(APP, 1, &first).await.unwrap(),
        Published::Appended { .. }
    ));
    let second = land(
        &sink,
        output,
        None,
        (51..=100).map(|i| row(i, MARCH_FIRST, true)).collect(),
        true,
        "f2",
    )
    .await;
    assert!(matches!(
        table.publish(APP, 2, &second).await.unwrap(),
        Published::Appended { .. }
    ));
    // Publishing a flush the table holds writes nothing.
    assert_eq!(
        table.publish(APP, 2, &second).await.unwrap(),
        Published::Held { position: 2 }
    );
    assert_eq!(table.position(APP).await.unwrap(), Some(2));

    let read = read_table(&table, Some("id >= 60")).await;
    let ids: Vec<Option<String>> = (1..=100).map(|i| Some(i.to_string())).collect();
    assert_eq!(
        column(&read, "id"),
        ids.iter().map(|s| s.as_deref()).collect::<Vec<_>>()
    );
    assert_eq!(
        read.rows, read.duckdb,
        "pyiceberg and DuckDB read the same rows"
    );
    assert_eq!(read.rows[0]["body"].as_deref(), Some("row 1"));
    assert_eq!(read.rows[0]["price"].as_deref(), Some("1.25"));
    assert_eq!(
        read.rows[6]["u"].as_deref(),
        Some("00000000-0000-0000-0000-000000000007")
    );
    assert_eq!(
        read.rows[0]["at"].as_deref(),
        Some("2024-03-01T00:00:00.000001+00:00")
    );
    assert_eq!(
        read.rows[0]["extra"], None,
        "a file before the column reads it as null"
    );
    assert_eq!(read.rows[99]["extra"].as_deref(), Some("x100"));
    let names: Vec<&str> = read.schema.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(names.last(), Some(&"extra"));
    let types: BTreeMap<&str, &str> = read
        .schema
        .iter()
        .map(|(_, n, t)| (n.as_str(), t.as_str()))
        .collect();
    assert_eq!(types["_commit_lsn"], "long");
    assert_eq!(types["price"], "decimal(12, 2)");
    assert_eq!(types["u"], "uuid");
    assert_eq!(types["at"], "timestamptz");
    assert_eq!(read.snapshot["tributary.sequence"], "2");
    assert_eq!(read.snapshot["total-records"], "100");
    assert_eq!(read.files, 2);
    assert_eq!(
        read.filtered,
        Some((1, 41, 41)),
        "the bounds on id leave the first file out"
    );

    // A compaction: both files rewritten as one, the rows unchanged.
    let all = land(
        &sink,
        output,
        None,
        (1..=100)
            .map(|i| {
                let mut r = row(i, MARCH_FIRST, true);
                if i <= 50 {
                    r.values[7] = Value::Null;
                }
                r
            })
            .collect(),
        true,
        "compacted",
    )
    .await;
    let removed: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|f| f.path.clone())
        .collect();
    table
        .replace(Operation::Replace, &removed, &all)
        .await
        .unwrap();
    let after = read_table(&table, None).await;
    assert_eq!(after.files, 1);
    // The rewritten file's rows were written with the later columns, so their `_schema`
    // fingerprint differs; every value does not.
    let values =
        |rows: &[BTreeMap<String, Option<String>>]| -> Vec<BTreeMap<String, Option<String>>> {
            rows.iter()
                .map(|r| {
                    r.iter()
                        .filter(|(k, _)| *k != "_schema")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .collect()
        };
    assert_eq!(
        values(&after.rows),
        values(&read.rows),
        "a replace changes no row"
    );
    assert_eq!(after.duckdb, after.rows);
    assert_eq!(after.snapshot["operation"], "replace");
    assert_eq!(
        table.position(APP).await.unwrap(),
        Some(2),
        "the position survives the compaction"
    );

    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn partitioned_iceberg_tables_prune_by_day_and_by_value() {
    let (dir, sink) = scratch("iceberg-partitioned");
    // By day of the commit time: rows of two days make two files, one partition each.
    let output = "public.by_day";
    let table = Table::new(sink.clone(), output);
    let rows = (1..=40)
        .map(|i| row(i, MARCH_FIRST + i64::from(i > 20) * DAY, false))
        .collect();
    let files = land(&sink, output, Some("day(_commit_time)"), rows, false, "f1").await;
    assert_eq!(files.len(), 2);
    table.publish(APP, 1, &files).await.unwrap();
    let read = read_table(&table, Some("_commit_time >= '2024-03-02T00:00:00+00:00'")).await;
    assert_eq!(read.rows.len(), 40);
    assert_eq!(read.rows, read.duckdb);
    assert!(
        !read.schema.iter().any(|(_, n, _)| n == "_commit_time_day"),
        "Iceberg derives the day; the table has no column for it"
    );
    assert_eq!(read.filtered, Some((1, 20, 20)));

    // By a column's value.
    let output = "public.by_region";
    let table = Table::new(sink.clone(), output);
    let rows = (1..=30).map(|i| row(i, MARCH_FIRST, false)).collect();
    let files = land(&sink, output, Some("region"), rows, false, "f1").await;
    assert_eq!(files.len(), 2);
    table.publish(APP, 7, &files).await.unwrap();
    let read = read_table(&table, Some("region = 'east'")).await;
    assert_eq!(read.rows.len(), 30);
    assert_eq!(read.rows, read.duckdb);
    assert_eq!(read.filtered, Some((1, 15, 15)));
    assert_eq!(table.position(APP).await.unwrap(), Some(7));

    std::fs::remove_dir_all(&dir).ok();
}

// The pipeline into Iceberg tables (`sink.format = "iceberg"`, no catalog): a real `tributary
// run` killed at a point of the flush protocol, started again, and every change read back
// once by pyiceberg and DuckDB, each table's snapshots one per flush with its position.

/// A fixture landing `tables` of `db` as Iceberg tables, in S3 or in a directory.
/// With more `[sink]` settings (a catalog's) given in `sink`.
pub(super) async fn iceberg_fixture_with(
    db: &TestDatabase,
    hint: &str,
    tables: &[&str],
    directory: bool,
    sink: &[(String, String)],
) -> Fixture {
    let mut fixture = Fixture::new(&db.url, hint, tables).await;
    fixture
        .cfg
        .sink
        .push(("format".into(), "\"iceberg\"".into()));
    fixture.cfg.sink.extend(sink.iter().cloned());
    if directory {
        let lake = fixture.dir.join("lake");
        std::fs::create_dir_all(&lake).unwrap();
        fixture.cfg.sink_url = format!("file://{}", lake.display());
        fixture.cfg.sink_options.clear();
        fixture.sink = Sink::open(&fixture.cfg.sink_url, &BTreeMap::new()).unwrap();
        fixture.log = CommitLog::new(fixture.sink.clone(), Writer::named("test"));
    }
    fixture.file = fixture.cfg.write(&fixture.dir);
    fixture
}

/// `table`'s Iceberg table in the fixture's sink (through `catalog`, when there is one) has one
/// snapshot of the pipeline per commit entry with files of the table, in order, none twice;
/// the table as loaded. `log` is the run's log, shown when it does not.
pub(super) async fn check_snapshots(
    fixture: &Fixture,
    table: &str,
    catalog: Option<&tributary::lake::tables::Catalog>,
    log: &str,
) -> tributary::lake::iceberg::table::Current {
    let current = Table::open(fixture.sink.clone(), table, catalog)
        .load()
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{table}: no Iceberg table: {log}"));
    let app = current
        .metadata
        .current_snapshot()
        .and_then(|s| s.summary.get("tributary.app").cloned())
        .expect("the pipeline's snapshot");
    let positions: Vec<u64> = current
        .metadata
        .snapshots
        .iter()
        .filter(|s| s.summary.get("tributary.app") == Some(&app))
        .map(|s| s.summary["tributary.sequence"].parse().unwrap())
        .collect();
    assert_eq!(
        positions,
        entries_of(&fixture.log, table).await,
        "{table}: a snapshot per commit entry with its files, once each: {log}"
    );
    current
}

/// Verify held `table`, an Iceberg table, against the commit log and found it intact.
pub(super) fn assert_audited(verified: &Verified, table: &str) {
    assert!(
        verified.stdout.lines().any(
            |l| l.starts_with(&format!("iceberg table {table}: version "))
                && l.ends_with(", intact")
        ),
        "{table}: {verified}"
    );
}

/// A catalog the tables go through: its `[sink]` settings, and pyiceberg's properties for it.
pub(super) struct Through {
    pub name: &'static str,
    pub sink: Vec<(String, String)>,
    pub pyiceberg: Vec<(String, String)>,
}

async fn crash_into_iceberg(point: &str, hit: u32, directory: bool) {
    crash_into_iceberg_through(point, hit, directory, None).await;
}

/// Killed at `point` (its `hit`th time), started again: every table has each flush once, and
/// is read whole (through `catalog`, when there is one, by pyiceberg too).
pub(super) async fn crash_into_iceberg_through(
    point: &str,
    hit: u32,
    directory: bool,
    catalog: Option<&Through>,
) {
    let suffix = catalog.map_or(String::new(), |c| format!("_{}", c.name));
    let hint = format!("iceberg_{}{suffix}", point.replace(['.', '-'], "_"));
    let db = fresh_database(&hint).await;
    create_tables(&db).await;
    let keys = catalog.map_or(&[][..], |c| &c.sink);
    let fixture = iceberg_fixture_with(&db, &hint, &TABLES, directory, keys).await;
    let handle = tributary::config::PipelineConfig::load(&fixture.file)
        .unwrap()
        .sink
        .catalog();
    kill_at(&db, &fixture, point, hit).await;

    let mut b = Service::spawn(&fixture.file, &[], &fixture.dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(120)).await;
    db.client.batch_execute(&transaction(21)).await.unwrap();
    let first = TABLES[0];
    db.client
        .batch_execute(&format!(
            "UPDATE {first} SET body = 'changed' WHERE id % 4 = 0; DELETE FROM {first} WHERE id % 7 = 0;"
        ))
        .await
        .unwrap();
    b.wait_for_landed(&fixture.log, 90 + 7 + 4, Duration::from_secs(60))
        .await;
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    for table in TABLES {
        assert_audited(&verified, table);
    }
    let b_log = b.stop().await;
    for table in TABLES {
        let current = check_snapshots(&fixture, table, handle.as_ref(), &b_log).await;
        let folder = format!("{}/{table}", fixture.cfg.sink_url);
        let read = read_iceberg(&folder, &current.location, &fixture.cfg.sink_options);
        let changes = if table == first { 30 + 7 + 4 } else { 30 };
        assert_eq!(
            read.rows.len(),
            changes,
            "{table}: every change once: {b_log}"
        );
        let inserted: BTreeSet<u32> = read
            .rows
            .iter()
            .filter(|r| r["_op"].as_deref() == Some("insert"))
            .map(|r| r["id"].as_deref().unwrap().parse().unwrap())
            .collect();
        assert_eq!(inserted, (1..=30).collect(), "{table}: every insert once");
        if let Some(through) = catalog {
            let name = format!("tributary.{}", table.replace('.', "__"));
            let seen = tributary_tests::catalog::pyiceberg_table(&through.pyiceberg, &name);
            assert_eq!(seen["metadata_location"], current.location.as_str());
            assert_eq!(
                seen["rows"], changes,
                "{table}: pyiceberg through the catalog"
            );
        }
        assert_eq!(
            read.duckdb, read.rows,
            "{table}: DuckDB reads what pyiceberg reads"
        );
    }
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_commit_entry_and_the_iceberg_tables_is_caught_up_at_the_next_start() {
    crash_into_iceberg("flush.after-commit", 2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_one_iceberg_table_of_three_has_the_flush_catches_up_the_other_two_once() {
    crash_into_iceberg("tables.after-table", 4, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_every_iceberg_table_in_a_directory_writes_no_snapshot_twice() {
    crash_into_iceberg("tables.after-publish", 2, true).await;
}

/// Key to the row's `columns` in `rows` (each value as text), one row per key.
fn by_id(
    rows: &[BTreeMap<String, Option<String>>],
    columns: &[&str],
) -> BTreeMap<String, Vec<Option<String>>> {
    let keyed: BTreeMap<String, Vec<Option<String>>> = rows
        .iter()
        .map(|r| {
            let values = columns
                .iter()
                .map(|c| r.get(*c).cloned().flatten())
                .collect();
            (r["id"].clone().expect("an id"), values)
        })
        .collect();
    assert_eq!(keyed.len(), rows.len(), "one row per key");
    keyed
}

/// A mixed workload into an output with an Iceberg current-state table: inserts, updates
/// and deletes, a column added mid-stream (which makes the pipeline load the table again,
/// its rows holding no value of it), and a SIGKILL between the change-log table and the
/// current-state table. After the restart the current-state table, read by pyiceberg and by
/// DuckDB, equals the source row for row; each of its snapshots is an `overwrite` (or the
/// first flush's) carrying the pipeline's position, and no delete files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iceberg_current_state_table_killed_before_a_flush_equals_the_source_after_a_restart() {
    let hint = "iceberg_current";
    let db = fresh_database(hint).await;
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(10,2))")
        .await
        .unwrap();
    let mut fixture = iceberg_fixture_with(&db, hint, &["public.t"], false, &[]).await;
    fixture
        .cfg
        .sections
        .push(super::delta::mirror_section("public.t"));
    fixture.file = fixture.cfg.write(&fixture.dir);

    // The first flush builds the table; the second is killed after the change log took it.
    let point = "iceberg.before-current";
    let mut a = Service::spawn_with(
        &fixture.file,
        &[],
        &fixture.dir.join("a.log"),
        &[("TRIBUTARY_FAILPOINTS", &format!("{point}@2"))],
    );
    a.wait_for_log("streaming", Duration::from_secs(120)).await;
    db.client
        .batch_execute(
            "INSERT INTO t SELECT g, 'name ' || g, g * 1.5 FROM generate_series(1, 20) g",
        )
        .await
        .unwrap();
    a.wait_for_landed(&fixture.log, 20, Duration::from_secs(60))
        .await;
    db.client
        .batch_execute(
            "UPDATE t SET name = name || '!' WHERE id % 3 = 0; DELETE FROM t WHERE id % 5 = 0;",
        )
        .await
        .unwrap();
    a.wait_for_log(
        &format!("failpoint {point} reached"),
        Duration::from_secs(60),
    )
    .await;
    a.kill().await;
    let current = Table::new(fixture.sink.clone(), "public.t__current");
    let log_table = Table::new(fixture.sink.clone(), "public.t");
    let killed = current
        .load()
        .await
        .unwrap()
        .expect("the first flush built it");
    let app = killed.metadata.current_snapshot().unwrap().summary["tributary.app"].clone();
    assert!(
        killed.metadata.position(&app) < log_table.position(&app).await.unwrap(),
        "the change log took the second flush, the current-state table not yet"
    );

    let mut b = Service::spawn(&fixture.file, &[], &fixture.dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(120)).await;
    let steps = [
        "ALTER TABLE t ADD COLUMN note text;",
        "INSERT INTO t (id, name, amount, note) SELECT g, 'late ' || g, g, 'note ' || g FROM generate_series(21, 30) g;
         UPDATE t SET note = 'n' || id WHERE id < 5;",
        "UPDATE t SET amount = amount + 1 WHERE id IN (1, 2, 21); DELETE FROM t WHERE id IN (3, 22);
         INSERT INTO t (id, name) SELECT g, 'last ' || g FROM generate_series(31, 35) g;",
    ];
    for step in steps {
        db.client.batch_execute(step).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // 20 + 10 before the kill; 10 + 4 and 3 + 2 + 5 after.
    b.wait_for_landed(&fixture.log, 54, Duration::from_secs(60))
        .await;
    // The column added came into a current-state table holding rows: the table is loaded
    // again, which fills the rows no change carried it in.
    super::delta::wait_for_load_of(&fixture, "public.t", Duration::from_secs(60)).await;
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    let compared = verified
        .stdout
        .lines()
        .find(|l| l.starts_with("current-state table public.t__current: version"))
        .unwrap_or_else(|| panic!("{verified}"));
    assert!(
        compared.ends_with("rows, equal to the source"),
        "{compared}"
    );
    assert_audited(&verified, "public.t");
    assert_audited(&verified, "public.t__current");
    let b_log = b.stop().await;

    let columns = ["id", "name", "amount", "note"];
    let source: BTreeMap<String, Vec<Option<String>>> = db
        .client
        .query("SELECT id::text, name, amount::text, note FROM t", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (0..4).map(|i| r.get(i)).collect()))
        .collect();
    assert_eq!(source.len(), 35 - 4 - 2, "the source's rows");
    let latest = current.load().await.unwrap().unwrap();
    let folder = format!("{}/public.t__current", fixture.cfg.sink_url);
    let read = read_iceberg(&folder, &latest.location, &fixture.cfg.sink_options);
    assert_eq!(by_id(&read.rows, &columns), source, "pyiceberg: {b_log}");
    assert_eq!(by_id(&read.duckdb, &columns), source, "DuckDB: {b_log}");

    // Each snapshot carries the pipeline's position, the flushes in order; no delete files.
    let positions: Vec<u64> = latest
        .metadata
        .snapshots
        .iter()
        .map(|s| {
            assert_eq!(s.summary.get("tributary.app"), Some(&app));
            assert_eq!(s.summary["total-delete-files"], "0");
            s.summary["tributary.sequence"].parse().unwrap()
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let log_position = log_table.position(&app).await.unwrap();
    assert_eq!(positions.last().copied(), log_position, "{b_log}");
    assert_eq!(read.snapshot["operation"], "overwrite");
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}
