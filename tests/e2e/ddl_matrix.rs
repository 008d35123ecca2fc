//! Schema changes in every combination, against the real server: each replica identity
//! (DEFAULT with a primary key, FULL with one, USING INDEX without one, and FULL without any
//! key) meets each change of its columns mid-stream (a column added, dropped, renamed, and a
//! type widened), captured from a slot and through triggers, landed as Parquet files, as Delta
//! tables, and as Delta tables with current-state tables. Every change lands once, the change
//! log replayed agrees with the source, and a current-state table equals the source row for
//! row; a combination the pipeline cannot keep (a current-state table of a table with no key)
//! is refused up front, by `check` and `run` in the same sentence. A column that comes into a
//! current-state table holding rows (added, with a default or without, or renamed) makes the
//! pipeline load the table again, which fills the rows no change touched since.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary_tests::chaos::source_rows;
use tributary_tests::fresh_database;
use tributary_tests::lake::{committed_rows, entries, read_delta};
use tributary_tests::service::{Fixture, Service, command};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Identity {
    /// DEFAULT, with a primary key.
    Primary,
    /// FULL, with a primary key.
    Full,
    /// USING INDEX, a unique index and no primary key.
    Index,
    /// FULL, without any key.
    Keyless,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ddl {
    Add,
    /// A column added with a default: the rows already there read it without a change.
    AddDefault,
    Drop,
    Rename,
    Widen,
}

const IDENTITIES: [Identity; 4] = [
    Identity::Primary,
    Identity::Full,
    Identity::Index,
    Identity::Keyless,
];
const DDLS: [Ddl; 5] = [
    Ddl::Add,
    Ddl::AddDefault,
    Ddl::Drop,
    Ddl::Rename,
    Ddl::Widen,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Parquet,
    Delta,
    Current,
}

/// Changes each table's workload makes: 10 inserts, 3 updates and a delete before the change
/// of its columns, 10 inserts, 2 updates and 2 deletes after.
const CHANGES: usize = 28;

/// The column a table's changes are keyed by: what its replica identity sends as the old key.
fn key(identity: Identity) -> &'static str {
    match identity {
        Identity::Index => "uid",
        _ => "id",
    }
}

fn table(identity: Identity, ddl: Ddl) -> String {
    format!("{identity:?}_{ddl:?}").to_lowercase()
}

fn create(identity: Identity, t: &str) -> String {
    let columns = "id int NOT NULL, uid int NOT NULL, v varchar(10), n int, note text";
    match identity {
        Identity::Primary => format!("CREATE TABLE {t} ({columns}, PRIMARY KEY (id));"),
        Identity::Full => format!(
            "CREATE TABLE {t} ({columns}, PRIMARY KEY (id)); ALTER TABLE {t} REPLICA IDENTITY FULL;"
        ),
        Identity::Index => format!(
            "CREATE TABLE {t} ({columns}); CREATE UNIQUE INDEX {t}_uid ON {t} (uid);
             ALTER TABLE {t} REPLICA IDENTITY USING INDEX {t}_uid;"
        ),
        Identity::Keyless => {
            format!("CREATE TABLE {t} ({columns}); ALTER TABLE {t} REPLICA IDENTITY FULL;")
        }
    }
}

/// The change of columns, and the statements after it: rows written with the new shape (a
/// value the old type could not hold, after the widening), and changes of old and new rows.
fn change_and_after(ddl: Ddl, t: &str) -> String {
    let long = "'a much longer value ' || g";
    let (change, insert, touched) = match ddl {
        Ddl::Add => (
            format!("ALTER TABLE {t} ADD COLUMN extra text"),
            format!("(id, uid, v, n, extra) SELECT g, g * 10, 'after', g, {long}"),
            "extra",
        ),
        Ddl::AddDefault => (
            format!("ALTER TABLE {t} ADD COLUMN flag text NOT NULL DEFAULT 'standing'"),
            format!("(id, uid, v, n, note, flag) SELECT g, g * 10, 'after', g, 'note', {long}"),
            "flag",
        ),
        Ddl::Drop => (
            format!("ALTER TABLE {t} DROP COLUMN note"),
            "(id, uid, v, n) SELECT g, g * 10, 'after', g".to_owned(),
            "v",
        ),
        Ddl::Rename => (
            format!("ALTER TABLE {t} RENAME COLUMN note TO remark"),
            format!("(id, uid, v, n, remark) SELECT g, g * 10, 'after', g, {long}"),
            "remark",
        ),
        Ddl::Widen => (
            format!("ALTER TABLE {t} ALTER COLUMN v TYPE varchar(40)"),
            format!("(id, uid, v, n, note) SELECT g, g * 10, {long}, g, 'note'"),
            "v",
        ),
    };
    format!(
        "{change};
         INSERT INTO {t} {insert} FROM generate_series(11, 20) g;
         UPDATE {t} SET {touched} = 'changed', n = n + 100 WHERE id IN (1, 11);
         DELETE FROM {t} WHERE id IN (2, 12);"
    )
}

fn before(t: &str) -> String {
    format!(
        "INSERT INTO {t} (id, uid, v, n, note) SELECT g, g * 10, 'v' || g, g, 'note ' || g FROM generate_series(1, 10) g;
         UPDATE {t} SET v = 'updated', note = 'updated' WHERE id <= 3;
         DELETE FROM {t} WHERE id = 10;"
    )
}

/// The tables a pipeline of `output` captures: every combination, but a current-state table
/// of a table without a key, which is refused (see [`keyless_current_state_is_refused`]).
fn cases(output: Output) -> Vec<(Identity, Ddl)> {
    IDENTITIES
        .iter()
        .flat_map(|&i| DDLS.iter().map(move |&d| (i, d)))
        .filter(|&(i, _)| !(output == Output::Current && i == Identity::Keyless))
        .collect()
}

/// Whether the table is loaded again: a column came into a current-state table holding rows
/// (from a slot, that table; through triggers, which load at a start, every table).
fn reloads(capture: &str, output: Output, ddl: Ddl) -> bool {
    output == Output::Current
        && (capture == "trigger" || matches!(ddl, Ddl::Add | Ddl::AddDefault | Ddl::Rename))
}

async fn matrix(capture: &str, output: Output) {
    let hint = format!("ddl_{capture}_{output:?}").to_lowercase();
    let db = fresh_database(&hint).await;
    let cases = cases(output);
    for &(identity, ddl) in &cases {
        db.client
            .batch_execute(&create(identity, &table(identity, ddl)))
            .await
            .unwrap();
    }
    let names: Vec<String> = cases
        .iter()
        .map(|&(i, d)| format!("public.{}", table(i, d)))
        .collect();
    let tables: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut fx = Fixture::new(&db.url, &hint, &tables).await;
    fx.cfg.source = vec![("capture".into(), format!("{capture:?}"))];
    if output != Output::Parquet {
        fx.cfg.sink.push(("format".into(), "\"delta\"".into()));
    }
    if output == Output::Current {
        for name in &names {
            fx.cfg
                .sections
                .push(format!("[outputs.\"{name}\"]\nmirror = true"));
        }
    }
    fx.file = fx.cfg.write(&fx.dir);
    let (code, report, err) = command("check", &fx.file, &[], &[]).await;
    assert_eq!(code, 0, "{report}{err}");

    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    for &(identity, ddl) in &cases {
        let t = table(identity, ddl);
        db.client.batch_execute(&before(&t)).await.unwrap();
    }
    for &(identity, ddl) in &cases {
        let t = table(identity, ddl);
        db.client
            .batch_execute(&change_and_after(ddl, &t))
            .await
            .unwrap();
    }
    run.wait_for_landed(
        &fx.log,
        (CHANGES * cases.len()) as u64,
        Duration::from_secs(240),
    )
    .await;
    // The loads a column brought, landed whole.
    let reloaded: Vec<&String> = cases
        .iter()
        .zip(&names)
        .filter(|((_, d), _)| reloads(capture, output, *d))
        .map(|(_, name)| name)
        .collect();
    // Twice, a moment apart: a column met after one load can ask for another.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    for round in 0..2 {
        if round > 0 {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        loop {
            // What the entries' load states say (the files are read once the pipeline stopped).
            let loads: Vec<_> = entries(&fx.log)
                .await
                .into_iter()
                .filter_map(|e| e.load)
                .collect();
            let waiting: Vec<&str> = reloaded
                .iter()
                .filter(|name| {
                    !loads
                        .iter()
                        .any(|l| l.tables.iter().any(|t| &t.table == **name && t.finished()))
                })
                .map(|name| name.as_str())
                .collect();
            if waiting.is_empty() && loads.last().is_none_or(|l| l.finished()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no load of {waiting:?} landed whole:\n{}",
                run.log()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let log = run.stop().await;

    let mut problems = Vec::new();
    for (&(identity, ddl), name) in cases.iter().zip(&names) {
        let case = format!("{capture}, {output:?}, {identity:?}, {ddl:?}");
        let key = key(identity);
        let (columns, source) = source_rows(&db.client, name, key).await;
        let source: BTreeMap<String, Vec<Option<String>>> = source.into_iter().collect();
        // Every change once, and the change log replayed agrees with the source on every
        // column the changes carried (a change before a rename carries the old name).
        let rows = committed_rows(&fx.sink, name).await;
        // A load's rows (and its marker) have no transaction. Through triggers a load at a
        // start takes in the journal's rows its snapshot sees: those changes land as its rows.
        let streamed = rows.iter().filter(|r| r.xid != 0).count();
        let loads = rows.iter().filter(|r| r.op == "load").count();
        let absorbed = capture == "trigger" && loads > 0 && streamed < CHANGES;
        if streamed != CHANGES && !absorbed {
            problems.push(format!("{case}: {streamed} changes landed, not {CHANGES}"));
        }
        let expected = match (reloads(capture, output, ddl), capture) {
            (false, _) => loads == 0,
            (true, "wal") => loads == 1,
            (true, _) => loads >= 1,
        };
        if !expected {
            problems.push(format!("{case}: {loads} loads of the table"));
        }
        let mut replayed: BTreeMap<String, BTreeMap<String, Option<String>>> = BTreeMap::new();
        for row in rows {
            if row.op == "load" {
                replayed.clear();
                continue;
            }
            let Some(id) = row.values[key].clone() else {
                problems.push(format!("{case}: a {} without its key {key}", row.op));
                continue;
            };
            match row.op.as_str() {
                "delete" => {
                    replayed.remove(&id);
                }
                _ => {
                    replayed.insert(id, row.values);
                }
            }
        }
        if !replayed.keys().eq(source.keys()) {
            problems.push(format!(
                "{case}: the change log leaves keys {:?}, the source has {:?}",
                replayed.keys().collect::<Vec<_>>(),
                source.keys().collect::<Vec<_>>()
            ));
        }
        for (id, values) in &source {
            let Some(landed) = replayed.get(id) else {
                continue;
            };
            for (column, value) in columns.iter().zip(values) {
                if let Some(found) = landed.get(column)
                    && found != value
                {
                    problems.push(format!(
                        "{case}: key {id} column {column}: the change log says {found:?}, the source {value:?}"
                    ));
                }
            }
        }
        if output != Output::Current {
            continue;
        }
        // The current-state table equals the source, row for row, column for column.
        let current = read_delta(
            &format!("{}/{name}__current", fx.cfg.sink_url),
            &fx.cfg.sink_options,
        );
        let read: BTreeMap<String, Vec<Option<String>>> = current
            .rows
            .iter()
            .map(|r| {
                let id = r[key].clone().unwrap_or_default();
                let values = columns
                    .iter()
                    .map(|c| r.get(c).cloned().flatten())
                    .collect();
                (id, values)
            })
            .collect();
        if current.rows.len() != read.len() {
            problems.push(format!("{case}: the current-state table holds a key twice"));
        }
        if read != source {
            problems.push(format!(
                "{case}: the current-state table differs from the source:\n    table  {read:?}\n    source {source:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n  {}\n--- log\n{log}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_from_a_slot_land_as_parquet() {
    matrix("wal", Output::Parquet).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_from_a_slot_land_as_delta_tables() {
    matrix("wal", Output::Delta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_from_a_slot_keep_current_state_tables_equal_to_the_source() {
    matrix("wal", Output::Current).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_through_triggers_land_as_parquet() {
    matrix("trigger", Output::Parquet).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_through_triggers_land_as_delta_tables() {
    matrix("trigger", Output::Delta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_through_triggers_keep_current_state_tables_equal_to_the_source() {
    matrix("trigger", Output::Current).await;
}

/// A current-state table of a table with neither a primary key nor a replica identity index:
/// `check` and `run` refuse it in the same sentence, in both capture modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_current_state_is_refused() {
    for capture in ["wal", "trigger"] {
        let db = fresh_database(&format!("ddl_keyless_{capture}")).await;
        db.client
            .batch_execute(&create(Identity::Keyless, "keyless"))
            .await
            .unwrap();
        let mut fx = Fixture::new(&db.url, "ddl_keyless", &["public.keyless"]).await;
        fx.cfg.source = vec![("capture".into(), format!("{capture:?}"))];
        fx.cfg.sink.push(("format".into(), "\"delta\"".into()));
        fx.cfg
            .sections
            .push("[outputs.\"public.keyless\"]\nmirror = true".into());
        fx.file = fx.cfg.write(&fx.dir);
        let sentence = "table public.keyless has no primary key and no replica identity index, which its current-state table (outputs.\"public.keyless\".mirror = true) keys rows by";
        let (code, report, err) = command("check", &fx.file, &[], &[]).await;
        assert!(
            code == 1 && report.contains(sentence),
            "{capture}: exit {code}\n{report}{err}"
        );
        let (code, out, err) = command("run", &fx.file, &[], &[]).await;
        assert!(
            code != 0 && format!("{out}{err}").contains(sentence),
            "{capture}: exit {code}\n{out}{err}"
        );
    }
}
