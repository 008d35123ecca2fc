//! Against a real server: `TRIBUTARY_TEST_PG_URL` names a superuser (or a replication role that
//! may create tables and publications) on a cluster with `wal_level=logical`.
//! `TRIBUTARY_TEST_PG_AUTH_URLS` (space-separated) adds roles that must each connect, one per
//! authentication method; those with a password must also be refused with a wrong one.
//! `TRIBUTARY_TEST_PG_NOREPL_URL` names a role without `REPLICATION`, which must be refused.
//!
//! Run with `cargo test -p tributary --lib replication::live_tests -- --ignored`.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use super::*;

const TABLE: &str = "tributary_live_orders";
const PUBLICATION: &str = "tributary_live_pub";

fn config(url: &str) -> crate::source::connect::PgConfig {
    url.parse()
        .unwrap_or_else(|e| panic!("bad URL {url:?}: {e}"))
}

async fn sql_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("SQL connection");
    tokio::spawn(connection);
    client
}

async fn confirmed_flush(client: &tokio_postgres::Client, slot: &str) -> Option<Lsn> {
    let row = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.get::<_, Option<String>>(0)
        .map(|text| text.parse().unwrap())
}

#[tokio::test]
#[ignore = "needs a PostgreSQL server: set TRIBUTARY_TEST_PG_URL"]
async fn streams_a_committed_transaction_and_confirms_it() {
    let url = std::env::var("TRIBUTARY_TEST_PG_URL").expect("TRIBUTARY_TEST_PG_URL");
    let main = config(&url);

    // Every authentication method connects; a wrong password is refused with the server's code.
    let auth_urls = std::env::var("TRIBUTARY_TEST_PG_AUTH_URLS").unwrap_or_default();
    for auth_url in auth_urls.split_whitespace() {
        let mut cfg = config(auth_url);
        let mut conn = ReplicationConnection::connect(&cfg)
            .await
            .unwrap_or_else(|e| panic!("connect as {:?}: {e}", cfg.pg().get_user()));
        let identity = conn.identify_system().await.unwrap();
        assert_eq!(identity.dbname.as_deref(), cfg.pg().get_dbname());
        if cfg.pg().get_password().is_some() {
            cfg.pg_mut().password("certainly not the password");
            let error = ReplicationConnection::connect(&cfg)
                .await
                .err()
                .expect("wrong password accepted");
            assert_eq!(error.code(), Some("28P01"), "{error}");
            assert!(
                error
                    .to_string()
                    .starts_with("server refused replication connection to db"),
                "{error}"
            );
        }
    }
    if let Ok(norepl) = std::env::var("TRIBUTARY_TEST_PG_NOREPL_URL") {
        let error = ReplicationConnection::connect(&config(&norepl))
            .await
            .err()
            .expect("role without REPLICATION accepted");
        assert_eq!(error.code(), Some("42501"), "{error}");
    }
    let mut missing_db = main.clone();
    missing_db.pg_mut().dbname("tributary_no_such_db");
    let error = ReplicationConnection::connect(&missing_db)
        .await
        .err()
        .expect("missing database accepted");
    assert_eq!(error.code(), Some("3D000"), "{error}");

    // The session settings that pgoutput's text output depends on are in force.
    let mut conn = ReplicationConnection::connect(&main).await.unwrap();
    for (setting, expected) in [
        ("TimeZone", "UTC"),
        ("bytea_output", "hex"),
        ("application_name", "tributary"),
    ] {
        let rows = conn.simple_query(&format!("SHOW {setting}")).await.unwrap();
        assert_eq!(rows, vec![vec![Some(expected.to_owned())]], "{setting}");
    }
    assert!(conn.server_version_num().unwrap() >= 100_000);
    let identity = conn.identify_system().await.unwrap();
    assert!(identity.xlog_pos > Lsn::ZERO);
    assert!(identity.timeline >= 1);

    let sql = sql_client(&url).await;
    sql.batch_execute(&format!(
        "DROP PUBLICATION IF EXISTS {PUBLICATION};
         DROP TABLE IF EXISTS {TABLE};
         CREATE TABLE {TABLE} (id int PRIMARY KEY, note text);
         CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE};"
    ))
    .await
    .unwrap();

    let slot = format!("tributary_live_{}", std::process::id());
    let created = conn.create_logical_slot(&slot).await.unwrap();
    assert_eq!(created.slot_name, slot);
    assert!(created.consistent_point >= identity.xlog_pos);
    assert_eq!(created.snapshot_name, None);
    let duplicate = conn.create_logical_slot(&slot).await.unwrap_err();
    assert_eq!(duplicate.code(), Some("42710"), "{duplicate}");

    let publications = format!("\"{PUBLICATION}\"");
    let options = [
        ("proto_version", "1"),
        ("publication_names", publications.as_str()),
    ];
    let mut stream = conn
        .start_logical(
            &slot,
            created.consistent_point,
            &options,
            Duration::from_secs(1),
        )
        .await
        .unwrap();

    sql.batch_execute(&format!(
        "BEGIN; INSERT INTO {TABLE} VALUES (1, 'a'), (2, 'b'), (3, 'it''s'); COMMIT;"
    ))
    .await
    .unwrap();

    // Relation ('R') precedes the first insert of a table; the rest is Begin, Insert x3, Commit.
    let mut frames = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while frames
        .last()
        .is_none_or(|f: &XLogData| f.data.first() != Some(&b'C'))
    {
        assert!(
            Instant::now() < deadline,
            "no Commit within 10s: {frames:?}"
        );
        let n = tokio::time::timeout(Duration::from_secs(10), stream.recv_many(&mut frames, 100))
            .await
            .expect("no frames")
            .unwrap();
        assert!(n > 0, "stream ended early");
    }
    let tags: Vec<u8> = frames
        .iter()
        .filter_map(|f| f.data.first().copied())
        .filter(|t| *t != b'R')
        .collect();
    assert_eq!(tags, b"BIIIC", "message tags");
    let commit = &frames.last().unwrap().data;
    let end_lsn = Lsn(u64::from_be_bytes(commit[10..18].try_into().unwrap()));
    assert!(end_lsn > created.consistent_point);

    stream.confirm(end_lsn);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let flushed = confirmed_flush(&sql, &slot).await;
        if flushed.is_some_and(|lsn| lsn >= end_lsn) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "confirmed_flush_lsn {flushed:?} never reached {end_lsn}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Idle now: the server's keepalives tell us where WAL ends.
    let deadline = Instant::now() + Duration::from_secs(15);
    while stream.server_wal_end() < end_lsn {
        assert!(Instant::now() < deadline, "no keepalive with the WAL end");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stream.shutdown().await.unwrap();

    let mut conn = ReplicationConnection::connect(&main).await.unwrap();
    conn.drop_slot(&slot).await.unwrap();
    let missing = conn.drop_slot(&slot).await.unwrap_err();
    assert_eq!(missing.code(), Some("42704"), "{missing}");
    sql.batch_execute(&format!(
        "DROP PUBLICATION {PUBLICATION}; DROP TABLE {TABLE};"
    ))
    .await
    .unwrap();
}
