//! Trigger capture against a server that cannot serve a slot (`wal_level = replica`) and a role
//! without `REPLICATION` that owns its tables: the installation, what the journal records for
//! each kind of statement, reading it in ticks, the frames the read machine would take, and a
//! removal that leaves nothing behind.

use std::collections::HashMap;
use std::time::Duration;

use tributary::Lsn;
use tributary::source::trigger::journal::{JournalTxn, Layout, Op, Synthesizer};
use tributary::source::trigger::{install, poll};
use tributary::stream::load::LOAD_XID;
use tributary::wire::pgoutput::{Decoder, LogicalMessage};
use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::chaos::assert_lake_equals_source;
use tributary_tests::connect;
use tributary_tests::lake::committed_rows;
use tributary_tests::service::{Fixture, Service, command, metric, peak_rss_mib, scrape, verify};

const SCHEMA: &str = "tributary";

/// An installation outside a pipeline: the journal left unclaimed.
fn unclaimed() -> install::Claiming<'static> {
    install::Claiming {
        sink: "",
        judged: None,
        claim: &tributary::source::trigger::owner::Claim::Keep,
    }
}

/// A `wal_level = replica` cluster with database `shop` owned by role `app`, which may log in
/// and nothing more; `app`'s URL.
pub(crate) async fn replica_server() -> (TempCluster, String) {
    let cluster = TempCluster::start(ClusterOptions::fast().setting("wal_level", "replica"))
        .expect("a PostgreSQL cluster");
    let admin = connect(&cluster.url("postgres")).await;
    for statement in [
        "CREATE ROLE app LOGIN",
        "CREATE ROLE clerk LOGIN",
        "CREATE DATABASE shop OWNER app",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    let url = format!("postgres://app@{}:{}/shop", cluster.host(), cluster.port());
    (cluster, url)
}

/// Each row of `txns` as `table op old new`, values joined by `|` (`-` for NULL).
fn rendered(txns: &[JournalTxn], layouts: &HashMap<i32, Layout>) -> Vec<Vec<String>> {
    let values = |v: &Option<Vec<Option<String>>>| match v {
        None => "()".to_owned(),
        Some(v) => v
            .iter()
            .map(|x| x.as_deref().unwrap_or("-"))
            .collect::<Vec<_>>()
            .join("|"),
    };
    txns.iter()
        .map(|t| {
            t.rows
                .iter()
                .map(|r| {
                    let layout = &layouts[&r.layout.expect("every row names its layout")];
                    let op = match r.op {
                        Op::Insert => "I",
                        Op::Update => "U",
                        Op::Delete => "D",
                        Op::Truncate => "T",
                    };
                    format!(
                        "{}.{} {op} {} {}",
                        layout.namespace,
                        layout.name,
                        values(&r.old),
                        values(&r.new)
                    )
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_capture_journals_every_statement_once_in_ticks_and_is_removed_without_a_trace() {
    let (cluster, url) = replica_server().await;
    let mut app = connect(&url).await;
    let facts = app
        .query_one(
            "SELECT current_setting('wal_level'), rolreplication FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (facts.get::<_, String>(0), facts.get::<_, bool>(1)),
        ("replica".to_owned(), false),
        "no slot can be had here"
    );
    app.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(10,2), at timestamptz, tags text[], b bytea);
         CREATE TABLE f (id int, v text);
         ALTER TABLE f REPLICA IDENTITY FULL;
         CREATE TABLE p (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
         CREATE TABLE p_eu PARTITION OF p FOR VALUES IN ('eu');
         CREATE TABLE p_us PARTITION OF p FOR VALUES IN ('us');
         GRANT INSERT ON t TO clerk;",
    )
    .await
    .unwrap();
    let tables: Vec<String> = ["public.t", "public.f", "public.p"]
        .map(str::to_owned)
        .to_vec();
    let installed = install::install(&mut app, SCHEMA, &tables, &unclaimed())
        .await
        .unwrap();
    assert_eq!(
        installed.tables,
        [
            "public.t",
            "public.f",
            "public.p",
            "public.p_eu",
            "public.p_us"
        ]
    );
    assert_eq!(
        installed.triggers, 20,
        "four events on each table and partition"
    );
    // A second start installs the same, replacing the function.
    let again = install::install(&mut app, SCHEMA, &tables, &unclaimed())
        .await
        .unwrap();
    assert_eq!(again, installed);

    // A transaction that starts first and commits last.
    let long = connect(&url).await;
    long.batch_execute("BEGIN; INSERT INTO t (id, name) VALUES (10, 'long')")
        .await
        .unwrap();

    // The writer's own settings do not change the text the journal keeps.
    app.batch_execute(
        "SET DateStyle = 'SQL, DMY'; SET TimeZone = 'America/New_York';
         INSERT INTO t VALUES (1, 'a', 1.50, '2026-12-03 10:00:00+00', '{x,\"y z\"}', '\\x0102'), (2, 'b', NULL, NULL, NULL, NULL)",
    )
    .await
    .unwrap();
    for statement in [
        "UPDATE t SET name = 'a2' WHERE id = 1",
        "UPDATE t SET id = 3 WHERE id = 2",
        "DELETE FROM t WHERE id = 1",
        "BEGIN; INSERT INTO t (id, name) VALUES (9, 'rolled back'); ROLLBACK",
        "INSERT INTO f VALUES (1, 'x'); UPDATE f SET v = 'y'; DELETE FROM f",
        "INSERT INTO p VALUES (1, 'eu', 1), (2, 'us', 2)",
        "INSERT INTO p_eu VALUES (3, 'eu', 3)",
        "UPDATE p SET region = 'us' WHERE id = 1",
        "TRUNCATE f",
    ] {
        app.batch_execute(statement).await.unwrap();
    }
    // Another role writes: it needs no privilege on the journal.
    let clerk = connect(&format!(
        "postgres://clerk@{}:{}/shop",
        cluster.host(),
        cluster.port()
    ))
    .await;
    clerk
        .batch_execute("INSERT INTO public.t (id, name) VALUES (4, 'by clerk')")
        .await
        .unwrap();

    let first = poll::take_tick(&app).await.unwrap();
    let batch = poll::read_batch(&app, SCHEMA, None, &first).await.unwrap();
    let layouts = poll::read_layouts(&app, SCHEMA, &poll::layout_ids(&batch))
        .await
        .unwrap();
    let t_row = "1|a|1.50|2026-12-03 10:00:00+00|{x,\"y z\"}|\\x0102";
    assert_eq!(
        rendered(&batch, &layouts),
        [
            vec![
                format!("public.t I () {t_row}"),
                "public.t I () 2|b|-|-|-|-".to_owned(),
            ],
            vec![format!(
                "public.t U 1|-|-|-|-|- {}",
                t_row.replacen("|a|", "|a2|", 1)
            )],
            vec!["public.t U 2|-|-|-|-|- 3|b|-|-|-|-".to_owned()],
            vec!["public.t D 1|-|-|-|-|- ()".to_owned()],
            // Under REPLICA IDENTITY FULL the old row is whole.
            vec![
                "public.f I () 1|x".to_owned(),
                "public.f U 1|x 1|y".to_owned(),
                "public.f D 1|y ()".to_owned(),
            ],
            // A partition's rows are its root's, whichever table the statement named.
            vec![
                "public.p I () 1|eu|1".to_owned(),
                "public.p I () 2|us|2".to_owned(),
            ],
            vec!["public.p I () 3|eu|3".to_owned()],
            vec!["public.p U 1|eu|- 1|us|1".to_owned()],
            vec!["public.f T () ()".to_owned()],
            vec!["public.t I () 4|by clerk|-|-|-|-".to_owned()],
        ]
    );
    let long_xid: i64 = long
        .query_one("SELECT pg_current_xact_id()::text::bigint", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        batch.iter().all(|t| t.xid != long_xid as u64),
        "a transaction still running is not read"
    );
    // Ordered by their last seq, rows by seq.
    let lasts: Vec<i64> = batch.iter().map(JournalTxn::last_seq).collect();
    assert!(lasts.windows(2).all(|w| w[0] < w[1]), "{lasts:?}");

    // The same two ticks give the same batch.
    let reread = poll::read_batch(&app, SCHEMA, None, &first).await.unwrap();
    assert_eq!(reread, batch);

    // The long transaction commits: the next tick reads it, and only it.
    long.batch_execute("COMMIT").await.unwrap();
    let second = poll::take_tick(&app).await.unwrap();
    let late = poll::read_batch(&app, SCHEMA, Some(&first), &second)
        .await
        .unwrap();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].xid, long_xid as u64);

    // Columns added and dropped after the capture function was written: it takes the general
    // path, and each row names the layout it was written with.
    for statement in [
        "ALTER TABLE t ADD COLUMN note text",
        "INSERT INTO t (id, name, note) VALUES (5, 'e', 'n5')",
        "ALTER TABLE t DROP COLUMN b",
        "INSERT INTO t (id, name, note) VALUES (6, 'f', 'n6')",
    ] {
        app.batch_execute(statement).await.unwrap();
    }
    let third = poll::take_tick(&app).await.unwrap();
    let changed = poll::read_batch(&app, SCHEMA, Some(&second), &third)
        .await
        .unwrap();
    let changed_layouts = poll::read_layouts(&app, SCHEMA, &poll::layout_ids(&changed))
        .await
        .unwrap();
    assert_eq!(
        rendered(&changed, &changed_layouts),
        [
            vec!["public.t I () 5|e|-|-|-|-|n5".to_owned()],
            vec!["public.t I () 6|f|-|-|-|n6".to_owned()],
        ]
    );
    let names: Vec<Vec<&str>> = changed
        .iter()
        .map(|t| {
            let layout = &changed_layouts[&t.rows[0].layout.unwrap()];
            layout.columns.iter().map(|c| c.name.as_str()).collect()
        })
        .collect();
    assert_eq!(names[1], ["id", "name", "amount", "at", "tags", "note"]);

    // Every transaction decodes as the messages a slot would have sent.
    let mut synth = Synthesizer::default();
    let mut decoder = Decoder::new(1);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (i, txn) in batch.iter().chain(&late).enumerate() {
        let frames = synth
            .frames(
                txn,
                Lsn(i as u64 + 1),
                0,
                &layouts_for(&app, txn, &layouts).await,
            )
            .unwrap();
        for frame in frames {
            let kind = match decoder.decode_bytes(frame.data).unwrap() {
                LogicalMessage::Begin { .. } => "begin",
                LogicalMessage::Commit { .. } => "commit",
                LogicalMessage::Relation { .. } => "relation",
                LogicalMessage::Insert { .. } => "insert",
                LogicalMessage::Update { .. } => "update",
                LogicalMessage::Delete { .. } => "delete",
                LogicalMessage::Truncate { .. } => "truncate",
                other => panic!("{other:?}"),
            };
            *counts.entry(kind).or_default() += 1;
        }
    }
    assert_eq!(counts["begin"], 11);
    assert_eq!(counts["commit"], 11);
    assert_eq!(counts["relation"], 3);
    assert_eq!(
        (
            counts["insert"],
            counts["update"],
            counts["delete"],
            counts["truncate"]
        ),
        (8, 4, 2, 1)
    );

    // Removal takes every trigger, the function and the schema, and nothing else.
    let removed = install::remove(&mut app, SCHEMA).await.unwrap();
    assert_eq!(
        (removed.triggers, removed.tables, removed.functions),
        (20, 5, 4)
    );
    assert_eq!(removed.journal_rows, 17);
    let left = app
        .query_one(
            "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1),
                    (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'tributary%'),
                    (SELECT count(*) FROM pg_proc WHERE proname LIKE 'capture%' OR proname = 'layout'),
                    (SELECT count(*) FROM pg_class WHERE relname IN ('journal', 'layouts', 'ticks')),
                    (SELECT count(*) FROM t)",
            &[&SCHEMA],
        )
        .await
        .unwrap();
    let left: Vec<i64> = (0..5).map(|i| left.get(i)).collect();
    assert_eq!(
        left,
        [0, 0, 0, 0, 5],
        "nothing of Tributary's, the user's rows kept"
    );
    let nothing = install::remove(&mut app, SCHEMA).await.unwrap();
    assert_eq!(nothing, install::Removed::default());
}

/// Whether each capture function of `client`'s capture schema checks its table's columns
/// per statement, by table oid order: `[(function, checks)]`.
async fn checking(client: &tokio_postgres::Client) -> Vec<(String, bool)> {
    client
        .query(
            "SELECT p.proname::text, p.prosrc LIKE '%pg_attribute%'
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = $1 AND p.proname LIKE 'capture%' ORDER BY p.oid",
            &[&SCHEMA],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// A superuser's installation puts the DDL watch in place: the capture functions check
/// nothing per statement. A statement that changes a captured table's columns replaces that
/// table's function with its checked form in its own transaction (a rollback takes the
/// replacement back too), so the rows written after it, in the same transaction or later,
/// carry the new columns; DDL under `session_replication_role = replica` is watched too. The
/// event trigger goes with the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_ddl_watch_a_capture_checks_nothing_until_its_table_changes() {
    let (cluster, _) = replica_server().await;
    let mut admin = connect(&cluster.url("shop")).await;
    admin
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, name text);
             CREATE TABLE u (id int PRIMARY KEY)",
        )
        .await
        .unwrap();
    let tables = ["public.t", "public.u"].map(str::to_owned).to_vec();
    let installed = install::install(&mut admin, SCHEMA, &tables, &unclaimed())
        .await
        .unwrap();
    assert!(installed.ddl_watch, "a superuser may create event triggers");
    let unchecked = checking(&admin).await;
    assert_eq!(unchecked.len(), 2);
    assert!(unchecked.iter().all(|(_, checks)| !checks), "{unchecked:?}");

    for statement in [
        "INSERT INTO t VALUES (1, 'a')",
        // Rolled back: the function stays as it was.
        "BEGIN; ALTER TABLE t ADD COLUMN gone int; INSERT INTO t VALUES (9, 'x', 9); ROLLBACK",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    assert_eq!(checking(&admin).await, unchecked);
    for statement in [
        "BEGIN; ALTER TABLE t ADD COLUMN note text; INSERT INTO t VALUES (2, 'b', 'n2'); COMMIT",
        "SET session_replication_role = replica; ALTER TABLE u ADD COLUMN v text; RESET session_replication_role",
        "INSERT INTO u VALUES (1, 'x')",
        // A statement on a table nobody captures changes nothing.
        "CREATE TABLE other (id int); ALTER TABLE other ADD COLUMN w int",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    let checked = checking(&admin).await;
    assert!(checked.iter().all(|(_, checks)| *checks), "{checked:?}");

    let tick = poll::take_tick(&admin).await.unwrap();
    let batch = poll::read_batch(&admin, SCHEMA, None, &tick).await.unwrap();
    let layouts = poll::read_layouts(&admin, SCHEMA, &poll::layout_ids(&batch))
        .await
        .unwrap();
    assert_eq!(
        rendered(&batch, &layouts),
        [
            vec!["public.t I () 1|a".to_owned()],
            vec!["public.t I () 2|b|n2".to_owned()],
            vec!["public.u I () 1|x".to_owned()],
        ]
    );

    let removed = install::remove(&mut admin, SCHEMA).await.unwrap();
    assert_eq!(
        removed.functions, 4,
        "two capture functions, the layout and the watch"
    );
    let watches: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'tributary%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(watches, 0, "the event trigger went with the schema");
    admin
        .batch_execute("ALTER TABLE t ADD COLUMN after_removal int")
        .await
        .unwrap();
}

/// An unchecked capture function sets, per call, only the settings its table's values' text
/// depends on (each is a save and a restore on every captured statement): the search path
/// alone for integers and text, and for dates, times, intervals, floats and bytea (met in an
/// array, a range, a domain or a geometric type too) the settings that fix their text. The
/// journal keeps the text pgoutput would send whatever the writing session set, and an update
/// leaves the session's `enable_nestloop` as it found it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchecked_capture_sets_only_what_its_columns_text_needs() {
    let (cluster, _) = replica_server().await;
    let mut admin = connect(&cluster.url("shop")).await;
    admin
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('calm', 'busy');
             CREATE DOMAIN stamp AS timestamptz;
             CREATE TABLE plain (id int PRIMARY KEY, name text, n numeric, m mood);
             CREATE TABLE dates (id int PRIMARY KEY, d date, s stamp);
             CREATE TABLE typed (id int PRIMARY KEY, d date, iv interval, f float8, b bytea,
                                 pt point, spans tstzrange[])",
        )
        .await
        .unwrap();
    let tables = ["public.plain", "public.dates", "public.typed"].map(str::to_owned);
    install::install(&mut admin, SCHEMA, &tables, &unclaimed())
        .await
        .unwrap();
    let set: Vec<(String, Vec<String>)> = admin
        .query(
            "SELECT c.relname::text, p.proconfig::text[]
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               JOIN pg_class c ON p.proname = 'capture_' || c.oid
              WHERE n.nspname = $1 ORDER BY c.relname",
            &[&SCHEMA],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let path = "search_path=pg_catalog, pg_temp";
    assert_eq!(
        set,
        [
            (
                "dates".to_owned(),
                vec![path, "DateStyle=ISO", "TimeZone=UTC"]
            ),
            ("plain".to_owned(), vec![path]),
            (
                "typed".to_owned(),
                vec![
                    path,
                    "DateStyle=ISO",
                    "TimeZone=UTC",
                    "IntervalStyle=postgres",
                    "extra_float_digits=3",
                    "bytea_output=hex"
                ]
            ),
        ]
        .map(|(table, settings)| (table, settings.into_iter().map(str::to_owned).collect()))
    );

    admin
        .batch_execute(
            "SET DateStyle = 'SQL, DMY'; SET TimeZone = 'America/New_York';
             SET IntervalStyle = 'sql_standard'; SET extra_float_digits = 0;
             SET bytea_output = 'escape'; SET enable_nestloop = off;
             INSERT INTO plain VALUES (1, 'a', 1.5, 'busy');
             INSERT INTO dates VALUES (1, '2026-12-03', '2026-12-03 10:00:00+00');
             INSERT INTO typed VALUES (1, '2026-12-03', '1 day 2 hours', 1.0 / 3, '\\x0102',
                                       point(1.0 / 3, 2), ARRAY[tstzrange('2026-12-03 10:00:00+00', NULL)]);
             UPDATE typed SET f = 2.0 / 3",
        )
        .await
        .unwrap();
    let nestloop: String = admin
        .query_one("SHOW enable_nestloop", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(nestloop, "off", "an update puts the session's setting back");
    admin.batch_execute("RESET enable_nestloop").await.unwrap();
    admin.batch_execute("UPDATE plain SET n = 2").await.unwrap();
    let nestloop: String = admin
        .query_one("SHOW enable_nestloop", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(nestloop, "on", "an update puts the session's setting back");

    let tick = poll::take_tick(&admin).await.unwrap();
    let batch = poll::read_batch(&admin, SCHEMA, None, &tick).await.unwrap();
    let layouts = poll::read_layouts(&admin, SCHEMA, &poll::layout_ids(&batch))
        .await
        .unwrap();
    let typed = "1|2026-12-03|1 day 02:00:00|0.3333333333333333|\\x0102|(0.3333333333333333,2)|{\"[\\\"2026-12-03 10:00:00+00\\\",)\"}";
    assert_eq!(
        rendered(&batch, &layouts).concat(),
        [
            "public.plain I () 1|a|1.5|busy".to_owned(),
            "public.dates I () 1|2026-12-03|2026-12-03 10:00:00+00".to_owned(),
            format!("public.typed I () {typed}"),
            format!(
                "public.typed U 1|-|-|-|-|-|- {}",
                typed.replace("|0.3333333333333333|\\", "|0.6666666666666666|\\")
            ),
            "public.plain U 1|-|-|- 1|a|2|busy".to_owned(),
        ]
    );
}

/// The layouts `txn` names, read again when the batch's did not hold them.
async fn layouts_for(
    client: &tokio_postgres::Client,
    txn: &JournalTxn,
    known: &HashMap<i32, Layout>,
) -> HashMap<i32, Layout> {
    let ids = poll::layout_ids(std::slice::from_ref(txn));
    if ids.iter().all(|id| known.contains_key(id)) {
        return known.clone();
    }
    poll::read_layouts(client, SCHEMA, &ids).await.unwrap()
}

/// The positions and the inserted `id`s of each transaction in `frames`.
fn transactions(
    decoder: &mut Decoder,
    frames: &[tributary::stream::read::Frame],
) -> Vec<(u64, Vec<String>)> {
    let mut out: Vec<(u64, Vec<String>)> = Vec::new();
    for frame in frames {
        match decoder.decode_bytes(frame.data.clone()).unwrap() {
            LogicalMessage::Begin { final_lsn, .. } => out.push((final_lsn.0, Vec::new())),
            LogicalMessage::Insert { new, .. } => {
                let id = format!("{:?}", new.0[0]);
                out.last_mut().unwrap().1.push(id);
            }
            _ => {}
        }
    }
    out
}

/// The frames of `capture`'s next batch, as the read stage receives them part by part.
async fn polled(
    capture: &mut tributary::source::trigger::capture::TriggerCapture,
) -> Vec<tributary::stream::read::Frame> {
    let (parts, mut received) = tokio::sync::mpsc::channel(1);
    let reading = async move {
        capture.poll(&parts, |frames| frames).await.unwrap();
    };
    let collecting = async {
        let mut all = Vec::new();
        while let Some(part) = received.recv().await {
            all.extend(part);
        }
        all
    };
    tokio::join!(reading, collecting).1
}

pub(crate) async fn journal_rows(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM tributary.journal", &[])
        .await
        .unwrap()
        .get(0)
}

/// Reading tick by tick: each batch's transactions take the positions after the last, a
/// start reads again every tick that did not land whole (at the same positions, which the read
/// machine drops as replays), and a confirmed position deletes the rows of the ticks that
/// landed whole. A transaction that commits late is read at the tick after it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_read_in_ticks_resumed_after_a_restart_and_deleted_once_landed() {
    use tributary::source::trigger::capture::TriggerCapture;
    let (_cluster, url) = replica_server().await;
    let mut app = connect(&url).await;
    app.batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    install::install(&mut app, SCHEMA, &["public.t".to_owned()], &unclaimed())
        .await
        .unwrap();
    let insert = |ids: &'static str| {
        let app = &app;
        async move {
            app.batch_execute(&format!("INSERT INTO t SELECT unnest('{{{ids}}}'::int[])"))
                .await
                .unwrap()
        }
    };
    // A decoder for each capture, as the read machine starts afresh with each stream.
    let mut capture = TriggerCapture::open(connect(&url).await, SCHEMA, 0)
        .await
        .unwrap();
    let mut decoder = Decoder::new(1);
    assert!(polled(&mut capture).await.is_empty(), "nothing yet");
    insert("1,2").await;
    let first = transactions(&mut decoder, &polled(&mut capture).await);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, 1);
    insert("3").await;
    app.batch_execute("BEGIN; INSERT INTO t VALUES (99); ROLLBACK")
        .await
        .unwrap();
    insert("4").await;
    let second = transactions(&mut decoder, &polled(&mut capture).await);
    assert_eq!(
        second.iter().map(|t| t.0).collect::<Vec<_>>(),
        [2, 3],
        "the rolled-back transaction left nothing"
    );

    // A restart after positions 1 and 2 landed: the first tick landed whole and its rows go;
    // the second is read again at the same positions.
    drop(capture);
    let mut capture = TriggerCapture::open(connect(&url).await, SCHEMA, 2)
        .await
        .unwrap();
    let mut decoder = Decoder::new(1);
    assert_eq!(journal_rows(&app).await, 2, "the rows of ids 1 and 2 went");
    let again = transactions(&mut decoder, &polled(&mut capture).await);
    assert_eq!(again, second, "the same batch at the same positions");

    // A transaction that began before id 5's and commits after it.
    let long = connect(&url).await;
    long.batch_execute("BEGIN; INSERT INTO t VALUES (10)")
        .await
        .unwrap();
    insert("5").await;
    let third = transactions(&mut decoder, &polled(&mut capture).await);
    assert_eq!(third.iter().map(|t| t.0).collect::<Vec<_>>(), [4]);
    assert!(third[0].1[0].contains('5'), "{third:?}");
    long.batch_execute("COMMIT").await.unwrap();
    let fourth = transactions(&mut decoder, &polled(&mut capture).await);
    assert_eq!(fourth.iter().map(|t| t.0).collect::<Vec<_>>(), [5]);
    assert!(fourth[0].1[0].contains("10"), "{fourth:?}");

    // Confirming position 4: the ticks through id 5's landed whole, and their rows go.
    assert_eq!(capture.confirm(4).await.unwrap(), 3);
    assert_eq!(journal_rows(&app).await, 1, "id 10 waits");
    assert_eq!(capture.confirm(4).await.unwrap(), 0);

    // A restart with everything landed: the last tick's end is recorded, so it landed whole,
    // its rows go, and nothing is read again.
    drop(capture);
    let mut capture = TriggerCapture::open(connect(&url).await, SCHEMA, 5)
        .await
        .unwrap();
    let mut decoder = Decoder::new(1);
    assert_eq!(
        journal_rows(&app).await,
        0,
        "id 10's tick landed whole: its rows went"
    );
    assert!(polled(&mut capture).await.is_empty());
    assert_eq!(capture.next_position(), 6);
    insert("6").await;
    let fifth = transactions(&mut decoder, &polled(&mut capture).await);
    assert_eq!(fifth.iter().map(|t| t.0).collect::<Vec<_>>(), [6]);
}

/// The tables of the pipeline tests: keyed by `id`.
const PIPELINE_TABLES: [(&str, &str); 3] = [
    ("public.accounts", "id"),
    ("public.notes", "id"),
    ("public.scratch", "id"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_capture_chooses_triggers_and_lands_a_mixed_workload_exactly_once() {
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, name text, balance numeric(12,2));
         CREATE TABLE notes (id int PRIMARY KEY, body text, tag varchar(20), at timestamptz);
         ALTER TABLE notes REPLICA IDENTITY FULL;
         CREATE TABLE scratch (id int PRIMARY KEY, v text);",
    )
    .await
    .unwrap();
    let tables: Vec<&str> = PIPELINE_TABLES.iter().map(|(t, _)| *t).collect();
    let mut fx = Fixture::new(&url, "trigger_auto", &tables).await;
    fx.cfg.source = vec![("capture".into(), "\"auto\"".into())];
    fx.file = fx.cfg.write(&fx.dir);
    // With the default `unchanged_toast = "refuse"`, which a slot's pipeline would refuse
    // accounts and scratch under (text columns, the default replica identity): triggers read
    // whole rows, so nothing is left out.
    let text = std::fs::read_to_string(&fx.file).unwrap();
    std::fs::write(&fx.file, text.replace("unchanged_toast = \"null\"\n", "")).unwrap();

    // `check` reports the mode auto chooses, and what a slot would need.
    let (code, report, err) = command("check", &fx.file, &[], &[]).await;
    assert_eq!(code, 0, "{report}{err}");
    for line in [
        "ok    capture: trigger (source.capture = \"auto\": no slot, since wal_level = replica",
        "note  capture from a slot would need: (1) the source server runs with wal_level = replica",
        "ALTER ROLE app REPLICATION",
        "ok    schema \"tributary\": missing, a start creates it",
        "ok    start: a first run (the sink's commit log is empty), from the tail",
        "check: the pipeline is ready to run",
    ] {
        assert!(report.contains(line), "{line}:\n{report}");
    }

    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let said = run.log();
    let chosen = said
        .lines()
        .find(|l| l.contains("capture mode chosen"))
        .unwrap_or_else(|| panic!("no line names the capture mode:\n{said}"));
    assert!(
        chosen.contains("capture=\"trigger\"")
            && chosen.contains(
                "no slot, since wal_level = replica and role \"app\" has no REPLICATION attribute"
            ),
        "{chosen}"
    );
    assert!(said.contains("trigger capture installed"), "{said}");

    // A transaction open across most of the workload, committed last.
    let long = connect(&url).await;
    long.batch_execute("BEGIN; INSERT INTO notes VALUES (1, 'long', 'l', now())")
        .await
        .unwrap();
    app.batch_execute(
        "INSERT INTO accounts SELECT i, 'account ' || i, i * 1.5 FROM generate_series(1, 1000) i;
         UPDATE accounts SET balance = balance + 1 WHERE id <= 100;
         UPDATE accounts SET id = id + 10000 WHERE id BETWEEN 101 AND 110;
         DELETE FROM accounts WHERE id BETWEEN 111 AND 130;",
    )
    .await
    .unwrap();
    app.batch_execute(
        "BEGIN; INSERT INTO accounts SELECT i, 'rolled back', 0 FROM generate_series(5000, 5100) i; ROLLBACK;",
    )
    .await
    .unwrap();
    app.batch_execute(
        "INSERT INTO scratch SELECT i, 'gone ' || i FROM generate_series(1, 10) i;
         TRUNCATE scratch;
         INSERT INTO scratch VALUES (1, 'after the truncate'), (2, 'kept');
         UPDATE notes SET body = 'never' WHERE false;",
    )
    .await
    .unwrap();
    // Concurrent writers in single-row transactions.
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let url = url.clone();
            tokio::spawn(async move {
                let client = connect(&url).await;
                for i in 0..50 {
                    let id = 100 + w * 100 + i;
                    client
                        .execute(
                            "INSERT INTO notes VALUES ($1, 'concurrent', 'c', now())",
                            &[&id],
                        )
                        .await
                        .unwrap();
                    if i % 5 == 0 {
                        client
                            .execute(
                                "UPDATE accounts SET balance = balance - 1 WHERE id = $1",
                                &[&(i + 1)],
                            )
                            .await
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    // One statement of 100,000 rows, then changes to some of them.
    app.batch_execute(
        "INSERT INTO notes SELECT i, md5(i::text), 't' || (i % 7), '2026-01-01'::timestamptz + i * interval '1 s'
           FROM generate_series(1000, 100999) i;
         UPDATE notes SET tag = 'changed' WHERE id BETWEEN 1000 AND 1999;
         DELETE FROM notes WHERE id BETWEEN 2000 AND 2499;",
    )
    .await
    .unwrap();
    long.batch_execute("UPDATE notes SET body = 'long, updated' WHERE id = 1; COMMIT")
        .await
        .unwrap();
    // Committed after every other: once it landed, everything did.
    app.batch_execute("INSERT INTO accounts VALUES (99999, 'the end', 0)")
        .await
        .unwrap();
    // accounts: 1000 + 100 + 10 + 20 + 20 (concurrent updates) + 1; notes: 1 + 1 (long) + 100
    // + 100,000 + 1000 + 500; scratch: 10 + truncate + 2.
    let expected = [1151, 101_602, 13];
    run.wait_for_landed(
        &fx.log,
        expected.iter().sum::<usize>() as u64,
        Duration::from_secs(240),
    )
    .await;

    let figures = assert_lake_equals_source(&app, &fx.sink, &PIPELINE_TABLES).await;
    let changes: Vec<usize> = figures.iter().map(|f| f.changes).collect();
    assert_eq!(changes, expected, "{figures:?}");
    let accounts = committed_rows(&fx.sink, "public.accounts").await;
    assert!(
        !accounts
            .iter()
            .any(|r| r.values["name"].as_deref() == Some("rolled back")),
        "a rolled-back row landed"
    );
    // The long transaction's changes land in one transaction, after the others it overlapped.
    let notes = committed_rows(&fx.sink, "public.notes").await;
    let long_rows: Vec<_> = notes
        .iter()
        .filter(|r| r.values["id"].as_deref() == Some("1"))
        .collect();
    assert_eq!(long_rows.len(), 2, "{long_rows:?}");
    assert_eq!(long_rows[0].commit_lsn, long_rows[1].commit_lsn);
    assert!(
        notes
            .iter()
            .all(|r| r.commit_lsn <= long_rows[0].commit_lsn),
        "the long transaction lands after every transaction it overlapped"
    );
    // Positions are numbered transactions: (_commit_lsn, _seq) is unique.
    let mut identities: Vec<(u64, u32)> = accounts
        .iter()
        .chain(&notes)
        .map(|r| (r.commit_lsn, r.seq))
        .collect();
    let all = identities.len();
    identities.sort_unstable();
    identities.dedup();
    assert_eq!(identities.len(), all, "an identity twice");

    // A stop confirms what landed: the journal is empty.
    run.stop().await;
    assert_eq!(
        journal_rows(&app).await,
        0,
        "journal rows left after everything landed"
    );
    let (code, shown, err) = command("status", &fx.file, &[], &[]).await;
    assert_eq!(code, 0, "{shown}{err}");
    assert!(
        shown.contains("trigger journal \"tributary\": 0 rows, ")
            && shown.contains("writer            stopped (nothing holds the journal)")
            && !shown.contains("slot \""),
        "{shown}"
    );
    let said = verify(&fx.file, &["--identities-only"]).await;
    assert_eq!(said.code, 0, "{said}");
    let said = verify(&fx.file, &[]).await;
    assert_eq!(said.code, 0, "{said}");
    assert!(
        said.last_line()
            .starts_with("verify: the lake equals the source at snapshot "),
        "{said}"
    );
    // A change that waits in the journal of a stopped pipeline: verify says so.
    app.batch_execute("INSERT INTO accounts VALUES (100000, 'after the restart', 0)")
        .await
        .unwrap();
    let said = verify(&fx.file, &[]).await;
    assert!(
        said.code != 0
            && said.to_string().contains(
                "the pipeline is not running: nothing has held the trigger journal in schema \"tributary\" for 15s, and 1 of its rows"
            ),
        "{said}"
    );

    // A restart goes on where the lake ends, without landing anything again.
    let run = Service::spawn(&fx.file, &[], &fx.dir.join("again.log"));
    run.wait_for_landed(
        &fx.log,
        expected.iter().sum::<usize>() as u64 + 1,
        Duration::from_secs(120),
    )
    .await;
    let figures = assert_lake_equals_source(&app, &fx.sink, &PIPELINE_TABLES).await;
    assert_eq!(figures[0].changes, 1152, "{figures:?}");
    let (_, shown, _) = command("status", &fx.file, &[], &[]).await;
    assert!(
        shown.contains("writer            running (it holds the journal)"),
        "{shown}"
    );
    let log = run.stop().await;
    assert!(log.contains("resuming after position"), "{log}");
    // The second start runs its installation's `IF NOT EXISTS` statements again; the server's
    // "already exists, skipping" notices are not news (issue 36).
    assert!(!log.contains("already exists, skipping"), "{log}");

    // Teardown removes what the start installed, and says how much.
    let (code, out, err) = command("teardown", &fx.file, &["--yes"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("will drop trigger capture \"tributary\"")
            && out.contains(
                "removed trigger capture in schema \"tributary\": 12 triggers on 3 tables, 4 functions"
            ),
        "{out}"
    );
    let left: i64 = app
        .query_one(
            "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'tributary')
                  + (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal)
                  + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                      WHERE n.nspname = 'tributary')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "objects of trigger capture left after teardown");
    let (_, out, _) = command("teardown", &fx.file, &["--yes"], &[]).await;
    assert!(out.contains("nothing to drop"), "{out}");
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_while_reading_after_an_upload_and_before_the_journal_delete_land_exactly_once() {
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text, n bigint)")
        .await
        .unwrap();
    let mut fx = Fixture::new(&url, "trigger_kills", &["public.t"]).await;
    fx.cfg.source = vec![("capture".into(), "\"trigger\"".into())];
    fx.file = fx.cfg.write(&fx.dir);
    let mut changes = 0u64;
    for (round, point) in [
        // A tick recorded, its batch not handed on.
        (1, "journal.after-tick@2"),
        // A flush's file uploaded, its commit entry not written.
        (2, "flush.after-file@2"),
        // The commit entry written, nothing confirmed.
        (3, "flush.after-commit@2"),
        // Confirmed, the journal rows of what landed not deleted.
        (4, "journal.before-delete@2"),
    ] {
        let log_file = fx.dir.join(format!("killed-{round}.log"));
        let mut run = Service::spawn_with(
            &fx.file,
            &["--wait"],
            &log_file,
            &[("TRIBUTARY_FAILPOINTS", point)],
        );
        run.wait_for_log("streaming", Duration::from_secs(120))
            .await;
        let name = point.split('@').next().unwrap();
        for i in 0..6 {
            let first = round * 1000 + i * 50;
            app.batch_execute(&format!(
                "INSERT INTO t SELECT g, 'round {round}', g FROM generate_series({first}, {first} + 49) g;
                 UPDATE t SET n = n + 1 WHERE id = {round} * 1000;"
            ))
            .await
            .unwrap();
            changes += 51;
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        run.wait_for_log(
            &format!("failpoint {name} reached"),
            Duration::from_secs(60),
        )
        .await;
        run.kill().await;
    }
    let run = Service::spawn(&fx.file, &["--wait"], &fx.dir.join("last.log"));
    run.wait_for_landed(&fx.log, changes, Duration::from_secs(120))
        .await;
    let figures = assert_lake_equals_source(&app, &fx.sink, &[("public.t", "id")]).await;
    assert_eq!(figures[0].changes as u64, changes, "{figures:?}");
    run.stop().await;
    assert_eq!(
        journal_rows(&app).await,
        0,
        "journal rows left after everything landed"
    );
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_capture_reads_on_after_the_source_restarts() {
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let mut fx = Fixture::new(&url, "trigger_restart", &["public.t"]).await;
    fx.cfg.source = vec![("capture".into(), "\"trigger\"".into())];
    fx.file = fx.cfg.write(&fx.dir);
    // Trigger capture needs neither a slot nor a publication in the pipeline file (issue 36).
    let text: String = std::fs::read_to_string(&fx.file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("slot = ") && !l.starts_with("publication = "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        !text.contains("slot") && !text.contains("publication"),
        "{text}"
    );
    std::fs::write(&fx.file, text).unwrap();
    // Before the first start, status and verify speak of the journal, not of a slot.
    let (code, shown, err) = command("status", &fx.file, &[], &[]).await;
    assert_eq!(code, 0, "{shown}{err}");
    assert!(
        shown.starts_with("trigger journal \"tributary\": not installed\n")
            && shown.contains("  nothing committed yet")
            && !shown.contains("slot"),
        "{shown}"
    );
    let said = verify(&fx.file, &[]).await;
    assert!(
        said.code == 2
            && said.stderr.contains(
                "the trigger journal in schema \"tributary\" is not installed, so no pipeline is landing this source"
            )
            && !said.stderr.contains("slot"),
        "{said}"
    );
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    app.batch_execute("INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g")
        .await
        .unwrap();
    run.wait_for_landed(&fx.log, 100, Duration::from_secs(60))
        .await;
    for mode in [
        tributary_cluster::StopMode::Fast,
        tributary_cluster::StopMode::Immediate,
    ] {
        cluster.stop_server(mode).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.start_again().unwrap();
    }
    let app = connect(&url).await;
    app.batch_execute(
        "INSERT INTO t SELECT g, 'after' FROM generate_series(101, 200) g;
         UPDATE t SET v = 'changed' WHERE id <= 10;",
    )
    .await
    .unwrap();
    run.wait_for_landed(&fx.log, 210, Duration::from_secs(120))
        .await;
    let figures = assert_lake_equals_source(&app, &fx.sink, &[("public.t", "id")]).await;
    assert_eq!(figures[0].changes, 210, "{figures:?}");
    let log = run.stop().await;
    assert!(
        log.contains("lost the connection to the source; reading the journal again")
            && log.contains("reading the journal again"),
        "{log}"
    );
    drop(cluster);
}

/// Rows each table holds before a full load: a few chunks of 1 MiB each.
const LOADED_ROWS: i64 = 20_000;

/// Transactions of exactly three changes until stopped: a new `accounts` row, an update of an
/// old one, the delete of a `notes` row; returns how many committed.
fn three_change_writes(
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<i64> {
    tokio::spawn(async move {
        let client = connect(&url).await;
        let mut i: i64 = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            i += 1;
            client
                .batch_execute(&format!(
                    "BEGIN;
                     INSERT INTO accounts VALUES ({fresh}, 'new', 1.00);
                     UPDATE accounts SET balance = balance + 1 WHERE id = {i};
                     DELETE FROM notes WHERE id = {gone};
                     COMMIT;",
                    fresh = LOADED_ROWS + i,
                    gone = LOADED_ROWS + 1 - i,
                ))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        i
    })
}

/// Wait until the journal is empty: its rows are deleted once they landed.
async fn wait_for_empty_journal(client: &tokio_postgres::Client) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while journal_rows(client).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the journal still holds rows"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_load_through_triggers_lands_each_transaction_in_the_load_or_the_journal_once() {
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute(&format!(
        "CREATE TABLE accounts (id int PRIMARY KEY, name text, balance numeric(12,2));
         CREATE TABLE notes (id int PRIMARY KEY, body text, tag varchar(20));
         INSERT INTO accounts SELECT i, 'account ' || i, i * 1.25 FROM generate_series(1, {LOADED_ROWS}) i;
         INSERT INTO notes SELECT i, md5(i::text) || repeat('n', i % 90), 't' || (i % 7)
           FROM generate_series(1, {LOADED_ROWS}) i;"
    ))
    .await
    .unwrap();
    let tables = [("public.accounts", "id"), ("public.notes", "id")];
    let mut fx = Fixture::new(&url, "trigger_load", &tables.map(|(t, _)| t)).await;
    fx.cfg.source = vec![
        ("capture".into(), "\"trigger\"".into()),
        ("start_from".into(), "\"full\"".into()),
    ];
    fx.cfg.load = vec![
        ("parallelism".into(), "2".into()),
        ("chunk_mib".into(), "1".into()),
    ];
    fx.cfg.flush = vec![("chunk_mib".into(), "1".into())];
    fx.file = fx.cfg.write(&fx.dir);
    let (code, report, err) = command("check", &fx.file, &[], &[]).await;
    assert_eq!(code, 0, "{report}{err}");
    assert!(
        report.contains(
            "ok    start: a first run (the sink's commit log is empty), with a full load"
        ),
        "{report}"
    );

    // Writes before, during and after each load; the first load is killed after its second
    // chunk landed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = three_change_writes(url.clone(), stop.clone());
    let mut run = Service::spawn_with(
        &fx.file,
        &[],
        &fx.dir.join("killed.log"),
        &[("TRIBUTARY_FAILPOINTS", "flush.after-commit@3")],
    );
    run.wait_for_log(
        "failpoint flush.after-commit reached",
        Duration::from_secs(120),
    )
    .await;
    let said = run.log();
    assert!(
        said.contains("full load: taking its snapshot")
            && said.contains("first run with a full load"),
        "{said}"
    );
    run.kill().await;
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("full load handed on", Duration::from_secs(120))
        .await;
    // Verify while the writer goes on: the lake at the snapshot verify takes is the source.
    let said = verify(&fx.file, &[]).await;
    assert_eq!(said.code, 0, "{said}");
    assert!(
        said.last_line()
            .contains("the lake equals the source at snapshot"),
        "{said}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let transactions = writer.await.unwrap();
    app.batch_execute("INSERT INTO accounts VALUES (999999, 'the end', 0)")
        .await
        .unwrap();
    wait_for_empty_journal(&app).await;
    assert_lake_equals_source(&app, &fx.sink, &tables).await;
    let log = run.stop().await;
    assert!(
        log.contains("loading the table again under a new snapshot"),
        "the second run loads every table again:\n{log}"
    );

    // Two loads: the second's markers after the first's, and every streamed change after both.
    let mut accounts = committed_rows(&fx.sink, "public.accounts").await;
    let notes = committed_rows(&fx.sink, "public.notes").await;
    let markers = |rows: &[tributary_tests::lake::LandedRow]| -> Vec<u64> {
        rows.iter()
            .filter(|r| r.op == "load")
            .map(|r| r.commit_lsn)
            .collect()
    };
    let first = markers(&accounts);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first[0] < first[1], "{first:?}");
    assert_eq!(markers(&notes).last(), first.last());
    let load_at = first[1];
    let loaded_ids: std::collections::HashSet<String> = accounts
        .iter()
        .filter(|r| r.xid == LOAD_XID && r.op == "insert" && r.commit_lsn == load_at)
        .map(|r| r.values["id"].clone().unwrap())
        .collect();
    accounts.extend(notes);
    let streamed: Vec<_> = accounts.iter().filter(|r| r.xid != LOAD_XID).collect();
    assert!(
        streamed.iter().all(|r| r.commit_lsn > load_at),
        "a change read from the journal lands at or before the load"
    );
    // Each writer transaction not in the load's snapshot lands whole, once, at one position.
    let mut by_position: std::collections::BTreeMap<u64, Vec<_>> = Default::default();
    for r in &streamed {
        by_position.entry(r.commit_lsn).or_default().push(*r);
    }
    let mut xids = std::collections::HashSet::new();
    for (position, rows) in &by_position {
        let xid = rows[0].xid;
        assert!(rows.iter().all(|r| r.xid == xid), "position {position}");
        assert!(
            xids.insert(xid),
            "transaction {xid} landed at two positions"
        );
        let end = rows
            .iter()
            .any(|r| r.values["id"].as_deref() == Some("999999"));
        assert_eq!(
            rows.len(),
            if end { 1 } else { 3 },
            "position {position}: {rows:?}"
        );
        // Never in the load and the journal both.
        for r in rows.iter().filter(|r| r.op == "insert") {
            assert!(
                !loaded_ids.contains(r.values["id"].as_deref().unwrap()),
                "row {:?} is in the load and read from the journal",
                r.values["id"]
            );
        }
    }
    assert!(
        by_position.len() > 10 && (by_position.len() as i64) < transactions + 1,
        "{} transactions from the journal of {transactions}",
        by_position.len()
    );
    assert_eq!(
        journal_rows(&app).await,
        0,
        "journal rows left after everything landed"
    );
    drop(cluster);
}

/// `tributary_journal_rows` from the metrics at `address`, once `wanted` holds for it.
async fn journal_gauge(address: &str, wanted: impl Fn(u64) -> bool) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = scrape(address).await;
        let rows = metric(&metrics, "tributary_journal_rows");
        if let Some(rows) = rows.filter(|&r| wanted(r)) {
            assert!(
                metric(&metrics, "tributary_journal_bytes").is_some(),
                "{metrics}"
            );
            return rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tributary_journal_rows is {rows:?}:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_row_journal_backlog_lands_within_the_memory_budget() {
    const IN_FLIGHT_MIB: u64 = 64;
    // The runtime, the encoder's buffers and allocator slack (no plugin).
    const FIXED_OVERHEAD_MIB: u64 = 96;
    const ROWS: i64 = 1_000_000;
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute("CREATE TABLE events (id int PRIMARY KEY, body text)")
        .await
        .unwrap();
    let mut fx = Fixture::new(&url, "trigger_backlog", &["public.events"]).await;
    fx.cfg.source = vec![
        ("capture".into(), "\"trigger\"".into()),
        ("status_interval_secs".into(), "1".into()),
    ];
    fx.cfg.flush = vec![
        ("in_flight_mib".into(), IN_FLIGHT_MIB.to_string()),
        ("chunk_mib".into(), "4".into()),
    ];
    fx.file = fx.cfg.write(&fx.dir);
    let mut text = fx.cfg.toml();
    text.push_str("\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
    std::fs::write(&fx.file, text).unwrap();
    // The first start installs the capture; the backlog gathers while it is stopped: one
    // transaction of a million rows, and a thousand small ones after it.
    let run = Service::spawn(&fx.file, &[], &fx.dir.join("install.log"));
    let mut run = run;
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    run.stop().await;
    app.batch_execute(&format!(
        "INSERT INTO events SELECT g, 'event number ' || g FROM generate_series(1, {ROWS}) g"
    ))
    .await
    .unwrap();
    for i in 1..=1000 {
        app.execute("UPDATE events SET body = 'updated' WHERE id = $1", &[&i])
            .await
            .unwrap();
    }
    // Past its first 10,000 rows the gauge is the statistics' estimate, which a writer's
    // backend reports within seconds; this one reports now.
    app.batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let idle = peak_rss_mib(run.pid());
    // The metrics show the backlog waiting in the journal, then the journal emptied.
    let address = run.metrics_address();
    let backlog = journal_gauge(&address, |rows| rows > 0).await;
    assert_eq!(backlog, ROWS as u64 + 1000);
    run.wait_for_landed(&fx.log, ROWS as u64 + 1000, Duration::from_secs(600))
        .await;
    journal_gauge(&address, |rows| rows == 0).await;
    let peak = peak_rss_mib(run.pid());
    let log = run.stop().await;
    assert!(
        log.contains("landing a large transaction from disk in parts"),
        "{log}"
    );
    let bound = IN_FLIGHT_MIB + FIXED_OVERHEAD_MIB;
    eprintln!("peak RSS {peak} MiB (bound {bound} MiB; {idle} MiB at the start)");
    assert!(
        peak <= bound,
        "peak RSS {peak} MiB over the {IN_FLIGHT_MIB} MiB budget + {FIXED_OVERHEAD_MIB} MiB overhead"
    );
    let figures = assert_lake_equals_source(&app, &fx.sink, &[("public.events", "id")]).await;
    assert_eq!(figures[0].changes as i64, ROWS + 1000);
    assert_eq!(journal_rows(&app).await, 0);
    drop(cluster);
}
