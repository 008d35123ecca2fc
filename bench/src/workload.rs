//! The scenarios: schema, what is loaded before the slots exist, and the captured workload.
//!
//! Every scenario's tables are emptied and preloaded before its slots are created, so a slot
//! sees exactly the workload, then one marker transaction whose commit tells a consumer it
//! has everything.

use std::fmt::Write as _;

use anyhow::Context;
use tokio_postgres::Client;
use tributary::Lsn;

pub const PUBLICATION: &str = "bench";
pub const TABLES: [&str; 3] = [
    "public.bench_rows",
    "public.bench_wide",
    "public.bench_marker",
];

/// Columns the masking plugin hashes, across the scenarios' tables.
pub const MASKED_COLUMNS: &str = "email,note,c31,c32,c33";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Inserts of ~200-byte rows in 100 transactions (1M rows; --quick 100k).
    Inserts,
    /// Single-row insert transactions (300k; --quick 20k).
    SmallTxns,
    /// One transaction of inserts (10M rows; --quick 200k).
    BigTxn,
    /// A 50-column table with text and jsonb, 10k rows per transaction (200k; --quick 20k).
    Wide,
    /// Transactions of 300 updates, 100 deletes and 100 inserts (500k changes; --quick 50k).
    Updates,
    /// Commit-to-visible latency at a steady 10k rows/s.
    Latency,
    /// A full load (`start_from = "full"`) of the inserts table (10M rows; --quick 200k) and
    /// the 50-column table (200k; --quick 20k), beside `psql` copying the same page ranges.
    FullLoad,
    /// Passthrough and mask plugins in Rust, Python, JavaScript and C on the inserts table
    /// (1M rows, 100k for Python and JavaScript; --quick a tenth). Not run unless named.
    Languages,
    /// Trigger capture's cost to the writer beside no capture and a slot (inserts, single-row
    /// transactions, the update mix, one UPDATE of 1M rows; --quick 100k), the journal's size
    /// while the pipeline is stopped, and its drain rate beside a slot's on the inserts. Not
    /// run unless named.
    Triggers,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Inserts => "inserts",
            Scenario::SmallTxns => "small-txns",
            Scenario::BigTxn => "big-txn",
            Scenario::Wide => "wide",
            Scenario::Updates => "updates",
            Scenario::Latency => "latency",
            Scenario::FullLoad => "full-load",
            Scenario::Languages => "languages",
            Scenario::Triggers => "triggers",
        }
    }

    pub const THROUGHPUT: [Scenario; 5] = [
        Scenario::Inserts,
        Scenario::SmallTxns,
        Scenario::BigTxn,
        Scenario::Wide,
        Scenario::Updates,
    ];
}

/// A throughput workload, sized.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Workload {
    pub scenario: Scenario,
    /// Changes the slot streams (the marker excluded).
    pub changes: u64,
    pub transactions: u64,
    /// Rows loaded before the slots exist (update mix only).
    pub preload: u64,
    pub description: String,
}

impl Workload {
    pub fn new(scenario: Scenario, quick: bool, scale: f64) -> Workload {
        let size = |full: u64, quick_size: u64| {
            let n = if quick { quick_size } else { full };
            ((n as f64 * scale).round() as u64).max(1)
        };
        let (changes, transactions, preload, description) = match scenario {
            Scenario::Inserts => {
                let rows = size(1_000_000, 100_000);
                let txns = 100.min(rows);
                (
                    rows,
                    txns,
                    0,
                    format!("{rows} inserts of ~200-byte rows in {txns} transactions"),
                )
            }
            Scenario::SmallTxns => {
                let rows = size(300_000, 20_000);
                (
                    rows,
                    rows,
                    0,
                    format!("{rows} single-row insert transactions"),
                )
            }
            Scenario::BigTxn => {
                let rows = size(10_000_000, 200_000);
                (rows, 1, 0, format!("one transaction of {rows} inserts"))
            }
            Scenario::Wide => {
                let rows = size(200_000, 20_000);
                let txns = rows.div_ceil(10_000);
                (
                    rows,
                    txns,
                    0,
                    format!(
                        "{rows} inserts into a 50-column table (text, jsonb, numeric, ...) in {txns} transactions"
                    ),
                )
            }
            Scenario::Updates => {
                let txns = size(1_000, 100);
                let preload = (txns * 100 * 2).max(2_000);
                (
                    txns * 500,
                    txns,
                    preload,
                    format!(
                        "{txns} transactions of 300 updates + 100 deletes + 100 inserts on {preload} preloaded rows"
                    ),
                )
            }
            Scenario::Latency => unreachable!("latency has no fixed workload"),
            Scenario::FullLoad => unreachable!("the full load sizes its own tables"),
            Scenario::Languages => unreachable!("languages sizes a workload per language"),
            Scenario::Triggers => unreachable!("triggers sizes a workload per kind of write"),
        };
        Workload {
            scenario,
            changes,
            transactions,
            preload,
            description,
        }
    }

    /// The languages scenario's inserts of ~200-byte rows: 1M rows (--quick 100k) for the
    /// consumers that run compiled code, a tenth of that for the interpreted ones (Python and
    /// JavaScript), which would take minutes per run at full size. Both sizes come in
    /// transactions of 10 000 rows, so only the number of rows differs.
    pub fn languages(quick: bool, scale: f64, interpreted: bool) -> Workload {
        let full = if quick { 100_000 } else { 1_000_000 };
        let rows = if interpreted { full / 10 } else { full };
        let rows = ((rows as f64 * scale).round() as u64).max(1);
        let txns = rows.div_ceil(LANGUAGES_ROWS_PER_TXN);
        Workload {
            scenario: Scenario::Languages,
            changes: rows,
            transactions: txns,
            preload: 0,
            description: format!(
                "{rows} inserts of ~200-byte rows in {txns} transaction{}",
                if txns == 1 { "" } else { "s" }
            ),
        }
    }
}

/// Rows per transaction of the languages scenario's inserts, as in the full-size inserts.
const LANGUAGES_ROWS_PER_TXN: u64 = 10_000;

/// Creates the tables and the publication, once per cluster.
pub async fn create_schema(client: &Client) -> anyhow::Result<()> {
    let mut wide = String::from("CREATE TABLE bench_wide (id bigint PRIMARY KEY");
    for (range, ty) in wide_columns() {
        for c in range {
            write!(wide, ", c{c:02} {ty}")?;
        }
    }
    wide.push(')');
    client
        .batch_execute(&format!(
            "CREATE TABLE bench_rows (
                 id bigint PRIMARY KEY,
                 account integer NOT NULL,
                 amount numeric(12,2) NOT NULL,
                 created_at timestamptz NOT NULL,
                 email text NOT NULL,
                 note text NOT NULL);
             {wide};
             CREATE TABLE bench_marker (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
             CREATE PUBLICATION {PUBLICATION} FOR TABLE {};",
            TABLES.join(", ")
        ))
        .await
        .context("creating the benchmark schema")
}

/// The 49 columns of `bench_wide` after its key, by type.
fn wide_columns() -> [(std::ops::RangeInclusive<u32>, &'static str); 8] {
    [
        (1..=12, "integer"),
        (13..=20, "bigint"),
        (21..=28, "double precision"),
        (29..=30, "numeric(12,2)"),
        (31..=40, "text"),
        (41..=44, "jsonb"),
        (45..=47, "timestamptz"),
        (48..=49, "boolean"),
    ]
}

fn wide_value(column: u32, ty: &str) -> String {
    match ty {
        "integer" => format!("(g * {column}) % 100000"),
        "bigint" => format!("g * {column}::bigint * 1000003"),
        "double precision" => format!("g / {column}.0"),
        "numeric(12,2)" => format!("(g % 1000000) / 100.0 + {column}"),
        "text" => format!("'v{column}-' || md5((g * {column})::text)"),
        "jsonb" => format!(
            "jsonb_build_object('id', g, 'col', {column}, 'tags', jsonb_build_array('a', 'b', g % 7), 'name', md5(g::text))"
        ),
        "timestamptz" => format!("timestamptz '2026-01-01' + (g + {column}) * interval '1 second'"),
        "boolean" => format!("(g + {column}) % 3 = 0"),
        other => unreachable!("no value for {other}"),
    }
}

/// An INSERT of `bench_rows` ids `first..=last`; ~200 bytes per row.
pub fn insert_rows(first: u64, last: u64) -> String {
    format!(
        "INSERT INTO bench_rows SELECT g, g % 1000, (g % 100000) / 100.0, \
         timestamptz '2026-01-01' + g * interval '1 second', 'user' || g || '@example.com', \
         repeat(md5(g::text), 4) FROM generate_series({first}, {last}) g"
    )
}

pub fn insert_wide(first: u64, last: u64) -> String {
    let mut sql = String::from("INSERT INTO bench_wide SELECT g");
    for (range, ty) in wide_columns() {
        for c in range {
            sql.push_str(", ");
            sql.push_str(&wide_value(c, ty));
        }
    }
    let _ = write!(sql, " FROM generate_series({first}, {last}) g");
    sql
}

/// Empties the tables and loads what the scenario needs before its slots are created.
pub async fn prepare(client: &Client, workload: &Workload) -> anyhow::Result<()> {
    client
        .batch_execute("TRUNCATE bench_rows, bench_wide, bench_marker")
        .await?;
    if workload.preload > 0 {
        client
            .batch_execute(&insert_rows(1, workload.preload))
            .await?;
    }
    client.batch_execute("VACUUM ANALYZE").await?;
    client.batch_execute("CHECKPOINT").await?;
    Ok(())
}

/// The WAL a workload wrote, and where its marker begins.
#[derive(Debug, Clone, Copy)]
pub struct Generated {
    pub wal_start: Lsn,
    /// Every workload commit lies before this; the marker transaction commits after it.
    pub marker: Lsn,
    pub seconds: f64,
}

impl Generated {
    pub fn wal_bytes(&self) -> u64 {
        self.marker.0.saturating_sub(self.wal_start.0)
    }
}

/// Runs the workload and the marker transaction.
pub async fn generate(client: &Client, workload: &Workload) -> anyhow::Result<Generated> {
    let wal_start = current_lsn(client).await?;
    let started = std::time::Instant::now();
    match workload.scenario {
        Scenario::Inserts | Scenario::BigTxn | Scenario::Languages => {
            let per = workload.changes.div_ceil(workload.transactions);
            let mut first = 1;
            while first <= workload.changes {
                let last = (first + per - 1).min(workload.changes);
                client.batch_execute(&insert_rows(first, last)).await?;
                first = last + 1;
            }
        }
        Scenario::Wide => {
            let per = workload.changes.div_ceil(workload.transactions);
            let mut first = 1;
            while first <= workload.changes {
                let last = (first + per - 1).min(workload.changes);
                client.batch_execute(&insert_wide(first, last)).await?;
                first = last + 1;
            }
        }
        Scenario::SmallTxns => {
            // One server-side loop, a commit per row: the client's round trips stay out of it.
            // Each statement on its own: a DO block may only commit outside a transaction.
            client.batch_execute("SET synchronous_commit = off").await?;
            client
                .batch_execute(&format!(
                    "DO $$ BEGIN
                       FOR g IN 1..{n} LOOP
                         INSERT INTO bench_rows VALUES (g, g % 1000, (g % 100000) / 100.0,
                           timestamptz '2026-01-01' + g * interval '1 second',
                           'user' || g || '@example.com', repeat(md5(g::text), 4));
                         COMMIT;
                       END LOOP;
                     END $$",
                    n = workload.changes
                ))
                .await?;
            client.batch_execute("RESET synchronous_commit").await?;
        }
        Scenario::Updates => {
            let half = workload.preload / 2;
            for t in 0..workload.transactions {
                let deleted = t * 100 + 1;
                let updated = half + 1 + (t * 300) % (half - 300);
                let inserted = workload.preload + t * 100 + 1;
                client
                    .batch_execute(&format!(
                        "BEGIN;
                         UPDATE bench_rows SET amount = amount + 1, note = md5(note)
                           WHERE id BETWEEN {updated} AND {};
                         DELETE FROM bench_rows WHERE id BETWEEN {deleted} AND {};
                         {};
                         COMMIT",
                        updated + 299,
                        deleted + 99,
                        insert_rows(inserted, inserted + 99)
                    ))
                    .await?;
            }
        }
        Scenario::Latency => unreachable!("latency generates its own load"),
        Scenario::FullLoad => unreachable!("the full load fills its own tables"),
        Scenario::Triggers => unreachable!("triggers writes its own one-statement update"),
    }
    let seconds = started.elapsed().as_secs_f64();
    let marker = write_marker(client).await?;
    Ok(Generated {
        wal_start,
        marker,
        seconds,
    })
}

/// Commits the marker transaction and returns an LSN between the workload and the marker's
/// commit: a consumer has everything once it sees a commit at or past it.
pub async fn write_marker(client: &Client) -> anyhow::Result<Lsn> {
    let marker = current_lsn(client).await?;
    client
        .batch_execute("INSERT INTO bench_marker DEFAULT VALUES")
        .await?;
    Ok(marker)
}

pub async fn current_lsn(client: &Client) -> anyhow::Result<Lsn> {
    let row = client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?;
    Ok(row.get::<_, String>(0).parse()?)
}

/// One INSERT of `rows` fresh rows, for the latency load.
pub fn insert_batch(first: u64, rows: u64) -> String {
    insert_rows(first, first + rows - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_table_has_fifty_columns() {
        let columns: usize = wide_columns().iter().map(|(r, _)| r.clone().count()).sum();
        assert_eq!(columns + 1, 50);
    }

    #[test]
    fn the_update_mix_stays_inside_the_preloaded_rows() {
        for quick in [true, false] {
            let w = Workload::new(Scenario::Updates, quick, 1.0);
            let half = w.preload / 2;
            // Deletes take ids from the bottom half, updates stay in the top half.
            assert!(w.transactions * 100 <= half);
            let highest_update = half + 1 + (half - 301) + 299;
            assert!(highest_update <= w.preload);
            assert_eq!(w.changes, w.transactions * 500);
        }
    }

    #[test]
    fn the_languages_workloads_differ_only_in_rows() {
        let compiled = Workload::languages(false, 1.0, false);
        let interpreted = Workload::languages(false, 1.0, true);
        assert_eq!((compiled.changes, compiled.transactions), (1_000_000, 100));
        assert_eq!(
            (interpreted.changes, interpreted.transactions),
            (100_000, 10)
        );
        let quick = Workload::languages(true, 1.0, true);
        assert_eq!((quick.changes, quick.transactions), (10_000, 1));
        // The languages scenario is opt-in: a run naming no scenario leaves it out.
        assert!(!Scenario::THROUGHPUT.contains(&Scenario::Languages));
    }
}
