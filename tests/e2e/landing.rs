//! Every change lands once, in commit order, with its values and metadata intact.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary::Lsn;
use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_tests::lake::{LandedRow, read_output};
use tributary_tests::pipeline::{RunningPipeline, config, wait_for_confirmed};
use tributary_tests::{fresh_database, plugin, s3, unique_name};

const TABLE: &str = "public.every_type";

const SCHEMA: &str = "
    CREATE TABLE every_type (
        id int PRIMARY KEY,
        b boolean, i2 smallint, i8 bigint, f4 real, f8 double precision,
        n numeric(12, 3), t text, v varchar(40), raw bytea, d date, ts timestamp,
        tz timestamptz, u uuid, j json, jb jsonb);
";

/// Row `id` at `version`: every column derived from both, nulls sprinkled in.
fn values_sql(id: &str, version: u32) -> String {
    format!(
        "{id} % 3 = {version} % 3,
         ({id} % 300)::smallint - 150,
         {id}::bigint * 1000003 * {version} - 4000000000,
         ({id} * 0.25 + {version})::real,
         ({id} * 1.5 - {version})::float8 / 3,
         round(({id} * 12.345 - {version})::numeric, 3),
         CASE WHEN {id} % 11 = 0 THEN NULL ELSE 'row ' || {id} || ' v{version} ü€' END,
         CASE WHEN {id} % 13 = 0 THEN '' ELSE 'v' || {id} END,
         decode(md5({id}::text || '{version}'), 'hex'),
         date '1999-12-31' + {id} - {version} * 400,
         timestamp '2000-01-01 00:00:00.000001' + {id} * interval '1 hour 1.5 seconds',
         timestamptz '2026-11-30 12:00:00+05:30' - {id} * interval '1 day 7 microseconds' + {version} * interval '1 second',
         md5({id}::text || 'u{version}')::uuid,
         json_build_object('id', {id}, 'v', {version}),
         jsonb_build_object('id', {id}, 'tags', jsonb_build_array('a', {version}))"
    )
}

/// The same columns as the Parquet reader renders them (see `tributary_tests::lake::cell`).
const CANONICAL: &str = "
    id::text, b::text, i2::text, i8::text, f4::text, f8::text, n::text, t, v,
    encode(raw, 'hex'), (d - date '1970-01-01')::text,
    (extract(epoch from ts) * 1000000)::bigint::text,
    (extract(epoch from tz) * 1000000)::bigint::text,
    replace(u::text, '-', ''), j::text, jb::text";

const COLUMNS: [&str; 16] = [
    "id", "b", "i2", "i8", "f4", "f8", "n", "t", "v", "raw", "d", "ts", "tz", "u", "j", "jb",
];

fn inserts_in(tx: u32) -> u32 {
    if tx == 0 { 100 } else { 80 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_lands_once_in_commit_order_in_s3() {
    let db = fresh_database("every_type").await;
    db.client.batch_execute(SCHEMA).await.unwrap();
    let server = s3();
    let bucket = server.fresh_bucket("every-type").await;
    let name = unique_name("every_type");
    let sink_url = format!("s3://{bucket}/shop");
    let mut running = RunningPipeline::start(config(
        &db.url,
        &name,
        &[TABLE],
        &sink_url,
        server.object_store_options(),
        &[plugin("passthrough")],
    ))
    .await;

    // 100 transactions of 100 changes: the first inserts 100 rows, each later one inserts 80,
    // then updates 15 and deletes 5 rows inserted earlier. Each transaction reports its xid.
    let mut xids = Vec::new();
    let mut next_id = 1;
    for tx in 0..100u32 {
        let mut sql = String::from("BEGIN;");
        for _ in 0..inserts_in(tx) {
            sql += &format!(
                "INSERT INTO every_type VALUES ({next_id}, {});",
                values_sql(&next_id.to_string(), 0)
            );
            next_id += 1;
        }
        let base = tx * 80;
        sql += &format!(
            "UPDATE every_type SET ({}) = ({}) WHERE id > {base} - 40 AND id <= {base} - 25;",
            COLUMNS[1..].join(", "),
            values_sql("id", tx + 1)
        );
        if tx > 0 {
            sql += &format!("DELETE FROM every_type WHERE id > {base} - 80 AND id <= {base} - 75;");
        }
        db.client.batch_execute(&sql).await.unwrap();
        let row = db
            .client
            .query_one("SELECT txid_current()::bigint", &[])
            .await
            .unwrap();
        xids.push(row.get::<_, i64>(0) as u32);
        db.client.batch_execute("COMMIT").await.unwrap();
    }
    let counts = db
        .client
        .query_one("SELECT count(*) FROM every_type", &[])
        .await
        .unwrap();
    let remaining: i64 = counts.get(0);

    let (inserts, updates, deletes) = (100 + 99 * 80, 99 * 15, 99 * 5);
    let expected = inserts + updates + deletes;
    assert_eq!(expected, 10_000);
    assert_eq!(remaining, (inserts - deletes) as i64);
    let landed = running
        .wait_for_changes(expected, Duration::from_secs(180))
        .await;
    assert_eq!(
        landed.changes, expected,
        "no change lands twice within a run"
    );
    let progress = running.stop().await;

    let store = server.object_store(&bucket);
    let prefixed = object_store::prefix::PrefixStore::new(store, "shop");
    let rows = read_output(&prefixed, TABLE).await;
    assert_eq!(
        rows.len() as u64,
        expected,
        "every change lands exactly once"
    );

    // Identity: (commit LSN, seq) is unique, seq counts 0.. within each transaction, and the
    // transactions arrive with the xids PostgreSQL gave them, in commit order.
    let mut transactions: Vec<(u64, Vec<&LandedRow>)> = Vec::new();
    for row in &rows {
        match transactions.last_mut() {
            Some((lsn, group)) if *lsn == row.commit_lsn => group.push(row),
            _ => transactions.push((row.commit_lsn, vec![row])),
        }
    }
    assert_eq!(transactions.len(), 100);
    for (i, (_, group)) in transactions.iter().enumerate() {
        let seqs: Vec<u32> = group.iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            (0..group.len() as u32).collect::<Vec<_>>(),
            "transaction {i}"
        );
        assert!(
            group.iter().all(|r| r.xid == xids[i]),
            "transaction {i} carries xid {}",
            xids[i]
        );
        let ops: Vec<&str> = group.iter().map(|r| r.op.as_str()).collect();
        let inserts = ops.iter().take_while(|o| **o == "insert").count();
        assert_eq!(
            inserts as u32,
            inserts_in(i as u32),
            "transaction {i} starts with its inserts"
        );
        assert_eq!(group.len(), 100, "transaction {i} has all its changes");
        assert!(
            group
                .windows(2)
                .all(|w| w[0].commit_time == w[1].commit_time)
        );
    }
    assert!(
        transactions
            .windows(2)
            .all(|w| w[0].1[0].commit_time <= w[1].1[0].commit_time)
    );

    // Replaying the landed changes in order rebuilds exactly the table PostgreSQL has.
    let mut state: BTreeMap<String, BTreeMap<String, Option<String>>> = BTreeMap::new();
    for row in &rows {
        let id = row.values["id"].clone().expect("id is never null");
        match row.op.as_str() {
            "insert" | "update" => {
                state.insert(id, row.values.clone());
            }
            "delete" => {
                assert!(
                    state.remove(&id).is_some(),
                    "delete of a row never inserted: {id}"
                );
            }
            other => panic!("unexpected op {other}"),
        }
    }
    let source = db
        .client
        .query(
            &format!("SELECT {CANONICAL} FROM every_type ORDER BY id"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(state.len(), source.len());
    for row in &source {
        let id: String = row.get(0);
        let landed = &state[&id];
        for (i, column) in COLUMNS.iter().enumerate() {
            let expected: Option<String> = row.get(i);
            let actual = &landed[*column];
            match *column {
                // Floats compare by value: PostgreSQL and Rust print shortest forms differently.
                "f4" | "f8" => assert_eq!(
                    expected.map(|s| s.parse::<f64>().unwrap()),
                    actual.as_ref().map(|s| s.parse::<f64>().unwrap()),
                    "row {id} column {column}"
                ),
                _ => assert_eq!(&expected, actual, "row {id} column {column}"),
            }
        }
    }

    // The commit log accounts for all of it, and the slot is confirmed to its last entry.
    let sink = Sink::open(
        &sink_url,
        &server.object_store_options().into_iter().collect(),
    )
    .unwrap();
    let latest = CommitLog::new(sink, Writer::named("test"))
        .latest_flush()
        .await
        .unwrap()
        .expect("a commit entry");
    assert_eq!(Some(&latest), progress.last_entry.as_ref());
    assert_eq!(latest.last_commit_lsn, Lsn(rows.last().unwrap().commit_lsn));
    let confirmed = wait_for_confirmed(&db.client, &name, latest.last_end_lsn).await;
    assert_eq!(confirmed, latest.last_end_lsn);
}
