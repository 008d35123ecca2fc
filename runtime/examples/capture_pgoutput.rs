//! Captures what pgoutput sends for fixed workloads, as golden files for the decoder tests
//! (`runtime/tests/golden.rs`) and seeds for the fuzz target.
//!
//! ```text
//! TRIBUTARY_PG_BIN=/path/to/postgresql/bin \
//!     cargo run -p tributary --example capture_pgoutput -- fuzz/seeds/pgoutput
//! ```
//!
//! Starts a throwaway cluster from `TRIBUTARY_PG_BIN` (or the binaries the tests find), runs
//! each workload its server version supports in a database of its own, reads the slot with
//! `pg_logical_slot_get_binary_changes` and writes one file per workload, named
//! `v<protocol>-pg<major>-<workload>`: one byte (protocol version - 1, the fuzz target's
//! `byte % 4 + 1`), then every message the server sent, each as a 2-byte big-endian length and
//! its bytes. The workloads, their SQL and their pgoutput options are the `WORKLOADS` below.
//! The cluster runs with `logical_decoding_work_mem = '64kB'`, so the large transactions
//! stream.

use std::path::PathBuf;

use anyhow::{Context, bail};
use tributary_cluster::{ClusterOptions, TempCluster};

/// A workload: its SQL, the server it needs and how the slot is read.
struct Workload {
    name: &'static str,
    /// The first major version that has every option.
    min_major: u32,
    /// Protocol version to ask for; the newest the server speaks when `None`.
    proto: Option<u32>,
    /// Create the slot with two-phase decoding.
    two_phase: bool,
    /// pgoutput options besides `proto_version` and `publication_names`.
    options: &'static [(&'static str, &'static str)],
    /// Statements separated by `;` (no `;` inside literals), sent one by one.
    sql: &'static str,
}

/// Tables of every common type, and a second one for key changes and truncates.
const SCHEMA: &str = "
CREATE TABLE t (id int PRIMARY KEY, b bool, i2 int2, i8 int8, f4 real, f8 float8,
  n numeric(10,2), txt text, raw bytea, d date, ts timestamp, tz timestamptz, u uuid,
  j jsonb, iv interval, arr int[]);
ALTER TABLE t REPLICA IDENTITY FULL;
CREATE TABLE k (id int PRIMARY KEY, note text);
CREATE PUBLICATION p FOR ALL TABLES;
";

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "changes",
        min_major: 16,
        proto: Some(4),
        two_phase: false,
        options: &[("messages", "true"), ("streaming", "parallel")],
        // The large transactions outgrow 64kB of decoding memory and stream: the first commits,
        // the second rolls back a savepoint (and a message in it), the third rolls back whole.
        // A rollback's WAL is not flushed at once, and logical decoding reads flushed WAL
        // only: the last commit flushes it.
        sql: "
INSERT INTO t VALUES (1, true, -2, 9000000000, 1.5, 'NaN', 12.34, 'héllo', '\\x00ff',
  '2024-02-29', '2000-01-01 00:00:00.5', '2026-11-30 12:00+05:30',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1, 2]}', '1 year 2 mons -3 days 04:05:06',
  '{1,NULL,3}');
UPDATE t SET txt = 'changed' WHERE id = 1;
INSERT INTO k VALUES (1, 'x'), (2, NULL);
UPDATE k SET id = 3 WHERE id = 1;
DELETE FROM k WHERE id = 2;
TRUNCATE k;
SELECT pg_logical_emit_message(true, 'audit', 'transactional message');
SELECT pg_logical_emit_message(false, 'audit', 'plain message');
BEGIN;
INSERT INTO k VALUES (10, 'with a message');
SELECT pg_logical_emit_message(true, 'audit', '\\x00ff'::bytea);
COMMIT;
SELECT pg_replication_origin_create('upstream');
SELECT pg_replication_origin_session_setup('upstream');
INSERT INTO k VALUES (20, 'from upstream');
SELECT pg_replication_origin_session_reset();
BEGIN;
INSERT INTO k VALUES (30, 'kept');
SAVEPOINT s;
SELECT pg_logical_emit_message(true, 'audit', 'in a savepoint rolled back');
INSERT INTO k VALUES (31, 'rolled back');
ROLLBACK TO s;
COMMIT;
BEGIN;
INSERT INTO k SELECT g, repeat('y', 20) FROM generate_series(1000, 1599) g;
SAVEPOINT a; INSERT INTO k VALUES (9999, 'gone'); ROLLBACK TO a;
COMMIT;
BEGIN;
INSERT INTO k SELECT g, 'kept' FROM generate_series(2000, 2399) g;
SAVEPOINT s;
SELECT pg_logical_emit_message(true, 'audit', 'inside the savepoint');
INSERT INTO k SELECT g, 'savepoint' FROM generate_series(2400, 2999) g;
ROLLBACK TO s;
SELECT pg_logical_emit_message(true, 'audit', 'after the savepoint');
INSERT INTO k VALUES (3000, 'last');
COMMIT;
BEGIN;
INSERT INTO k SELECT g, 'aborted' FROM generate_series(4000, 4599) g;
ROLLBACK;
INSERT INTO k VALUES (5000, 'flushes the rollback');
",
    },
    Workload {
        name: "two-phase",
        min_major: 16,
        proto: Some(4),
        two_phase: true,
        options: &[("two_phase", "true"), ("streaming", "parallel")],
        sql: "
BEGIN; INSERT INTO k VALUES (1, 'prepared'); PREPARE TRANSACTION 'small';
COMMIT PREPARED 'small';
BEGIN; INSERT INTO k VALUES (2, 'rolled back'); PREPARE TRANSACTION 'undone';
ROLLBACK PREPARED 'undone';
BEGIN;
INSERT INTO k SELECT g, repeat('z', 20) FROM generate_series(1000, 1599) g;
PREPARE TRANSACTION 'large';
COMMIT PREPARED 'large';
INSERT INTO k VALUES (3, 'plain commit');
",
    },
    Workload {
        name: "binary",
        min_major: 14,
        proto: None,
        two_phase: false,
        options: &[
            ("binary", "true"),
            ("messages", "true"),
            ("streaming", "on"),
        ],
        sql: "
INSERT INTO t VALUES (1, true, -2, 9000000000, 1.5, 'NaN', 12.34, 'héllo', '\\x00ff',
  '2024-02-29', '2000-01-01 00:00:00.5', '2026-11-30 12:00+05:30',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1, 2]}', '1 year 2 mons -3 days 04:05:06',
  '{1,NULL,3}');
INSERT INTO t (id, n, ts, tz, d) VALUES (2, 'NaN', 'infinity', '-infinity', 'infinity');
UPDATE t SET txt = 'changed', f4 = -0.0 WHERE id = 1;
DELETE FROM t WHERE id = 2;
INSERT INTO k VALUES (1, 'x'), (2, NULL);
UPDATE k SET id = 3 WHERE id = 1;
DELETE FROM k;
",
    },
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let Some(out) = std::env::args().nth(1).map(PathBuf::from) else {
        bail!("usage: capture_pgoutput OUT_DIR (the server comes from TRIBUTARY_PG_BIN)");
    };
    let options = ClusterOptions::fast()
        .setting("logical_decoding_work_mem", "'64kB'")
        .setting("max_prepared_transactions", "10");
    let cluster = TempCluster::start(options).context("starting the cluster")?;
    let version = cluster.server_version().to_owned();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .with_context(|| format!("server version {version:?}"))?;
    let newest_proto = match major {
        16.. => 4,
        15 => 3,
        14 => 2,
        _ => bail!("PostgreSQL {version} has no streaming; captures need 14 or later"),
    };
    std::fs::create_dir_all(&out)?;
    let admin = connect(&cluster.url("postgres")).await?;
    for workload in WORKLOADS.iter().filter(|w| major >= w.min_major) {
        let proto = workload.proto.unwrap_or(newest_proto);
        let database = format!("capture_{}", workload.name.replace('-', "_"));
        admin
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .await?;
        let client = connect(&cluster.url(&database)).await?;
        client.batch_execute(SCHEMA).await?;
        // Slot names are cluster-wide; the database name is unique.
        client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, $2)",
                &[&database, &workload.two_phase],
            )
            .await
            .context("creating the slot")?;
        // One statement at a time, as a client would send them: a string of several runs as
        // one implicit transaction, where COMMIT PREPARED may not.
        for statement in workload.sql.split(';').map(str::trim) {
            if statement.is_empty() {
                continue;
            }
            client
                .batch_execute(statement)
                .await
                .with_context(|| format!("workload {}: {statement}", workload.name))?;
        }
        let mut sql = format!(
            "SELECT data FROM pg_logical_slot_get_binary_changes('{database}', NULL, NULL, \
             'proto_version', '{proto}', 'publication_names', 'p'"
        );
        for (name, value) in workload.options {
            sql += &format!(", '{name}', '{value}'");
        }
        sql += ")";
        let rows = client.query(&sql, &[]).await?;
        let mut bytes = vec![(proto - 1) as u8];
        for row in &rows {
            let data: Vec<u8> = row.get(0);
            let len = u16::try_from(data.len()).context("a message longer than 64 KiB")?;
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&data);
        }
        let path = out.join(format!("v{proto}-pg{major}-{}", workload.name));
        std::fs::write(&path, &bytes)?;
        println!(
            "{}: {} messages, {} bytes",
            path.display(),
            rows.len(),
            bytes.len()
        );
    }
    cluster.stop()?;
    Ok(())
}

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
