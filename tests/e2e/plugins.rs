//! A failing plugin stops the pipeline with an error that names it and the LSN, and nothing
//! past the failed batch is confirmed.

use std::time::Duration;

use tributary::Lsn;
use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_tests::pipeline::{RunningPipeline, config, confirmed_flush, events_database};
use tributary_tests::{plugin, unique_name};

async fn failing_plugin_stops_the_pipeline(plugin_name: &str) -> String {
    let db = events_database(plugin_name).await;
    let dir = std::env::temp_dir().join(unique_name("failing-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name(plugin_name);
    let mut cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &sink_url,
        vec![],
        &[plugin(plugin_name)],
    );
    cfg.transforms[0].timeout_ms = 500;
    let running = RunningPipeline::start(cfg).await;

    // The slot exists once the pipeline streams; its position then is the baseline. The
    // trap plugin traps on the text `panic`; the spin plugin never returns.
    let before = confirmed_flush(&db.client, &name)
        .await
        .expect("the pipeline created its slot");
    db.client
        .batch_execute("INSERT INTO events SELECT g, 'panic' FROM generate_series(1, 10) g")
        .await
        .unwrap();
    let after: Lsn = tributary::source::provision::current_wal_lsn(&db.client)
        .await
        .unwrap();

    let error = format!(
        "{:#}",
        anyhow::Error::from(running.failure(Duration::from_secs(60)).await)
    );
    assert_eq!(
        confirmed_flush(&db.client, &name).await,
        Some(before),
        "nothing was confirmed"
    );
    let sink = Sink::open(&sink_url, &Default::default()).unwrap();
    let flushed = CommitLog::new(sink, Writer::named("test"))
        .latest_flush()
        .await
        .unwrap();
    assert_eq!(flushed, None, "no flush was committed");
    assert!(
        error.contains(plugin_name),
        "the error names the plugin: {error}"
    );
    // The error names the failed batch's commit LSN: after the slot's position, before the
    // WAL position read after the insert committed.
    let lsns: Vec<Lsn> = error
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '/'))
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        lsns.iter().any(|l| *l > before && *l <= after),
        "the error names an LSN between {before} and {after}: {error}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_plugin_stops_the_pipeline_naming_plugin_and_lsn() {
    let error = failing_plugin_stops_the_pipeline("trap").await;
    assert!(error.contains("trap"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_plugin_hits_its_deadline_naming_plugin_and_lsn() {
    let error = failing_plugin_stops_the_pipeline("spin").await;
    assert!(
        error.contains("time limit") || error.contains("deadline"),
        "{error}"
    );
}

/// Under `on_error = "dead-letter"` a change the plugin rejects lands in `_dead_letters`
/// with why, the rest lands as usual, the pipeline goes on, and the commit log counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_changes_land_in_the_dead_letter_output_and_the_pipeline_goes_on() {
    use tributary::transform::{DEAD_LETTERS, FailurePolicy};
    use tributary_tests::lake::read_output;

    let db = events_database("dead_letters").await;
    let dir = std::env::temp_dir().join(unique_name("dead-letter-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("dead_letters");
    let mut cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &sink_url,
        vec![],
        &[plugin("trap")],
    );
    cfg.transforms[0].on_error = FailurePolicy::DeadLetter;
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO events SELECT g, CASE WHEN g % 4 = 0 THEN 'reject' ELSE 'ok' END
               FROM generate_series(1, 20) g",
        )
        .await
        .unwrap();
    running.wait_for_changes(20, Duration::from_secs(60)).await;
    let progress = running.stop().await;

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let letters = read_output(&store, DEAD_LETTERS).await;
    let ids: Vec<String> = letters
        .iter()
        .map(|r| {
            let table = r.values["table"].as_deref().unwrap();
            let class = r.values["class"].as_deref().unwrap();
            let message = r.values["message"].as_deref().unwrap();
            assert_eq!(
                (table, class, message),
                ("public.events", "test", "asked to reject")
            );
            assert_eq!(r.values["plugin"].as_deref(), Some("trap"));
            let row = r.values["row"].as_deref().unwrap();
            let row: serde_json::Value = serde_json::from_str(row).unwrap();
            row["id"].to_string()
        })
        .collect();
    assert_eq!(ids, ["4", "8", "12", "16", "20"]);
    // The trap plugin lets every change through as well.
    assert_eq!(read_output(&store, "public.events").await.len(), 20);
    let entry = progress.last_entry.expect("an entry was committed");
    assert_eq!(entry.dead_letters, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replacing a plugin file loads the new version at the next batch boundary while changes
/// keep coming, without restarting replication: every change lands once, the commit entries
/// name the digest of the version that made their files, and a version that fails to `init`
/// leaves the running one in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_plugin_file_is_loaded_at_a_batch_boundary_with_changes_in_flight() {
    use tributary_tests::lake::landed_changes;

    let db = events_database("hot_reload").await;
    let dir = std::env::temp_dir().join(unique_name("reload-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("hot_reload");
    let plugin_dir = std::env::temp_dir().join(unique_name("reload-plugin"));
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let live = plugin_dir.join("live.wasm");
    // Replace the file the way a deploy does: write beside it, rename over it.
    let install = |from: &str| {
        let next = plugin_dir.join("next.wasm");
        std::fs::copy(plugin(from), &next).unwrap();
        std::fs::rename(&next, &live).unwrap();
    };
    let digest = |from: &str| {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(plugin(from)).unwrap();
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    install("passthrough");
    let mut cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &sink_url,
        vec![],
        std::slice::from_ref(&live),
    );
    cfg.flush.max_delay_ms = 100;
    let mut running = RunningPipeline::start(cfg).await;
    let slot_pid = || async {
        db.client
            .query_one(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get::<_, Option<i32>>(0)
    };
    let walsender = slot_pid().await;

    // Changes keep coming, one small transaction every 20 ms, across both replacements.
    let writer = {
        let url = db.url.clone();
        tokio::spawn(async move {
            let client = tributary_tests::connect(&url).await;
            for id in 1..=150 {
                client
                    .execute("INSERT INTO events VALUES ($1, 'x')", &[&id])
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    install("trap");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    // `mask` refuses to start without its `columns` setting: the trap version goes on.
    install("mask");
    writer.await.unwrap();
    running.wait_for_changes(150, Duration::from_secs(60)).await;
    assert!(walsender.is_some());
    assert_eq!(
        slot_pid().await,
        walsender,
        "one replication connection served the whole run"
    );
    let progress = running.stop().await;
    assert_eq!(progress.changes, 150);

    let log = CommitLog::new(
        Sink::open(&sink_url, &Default::default()).unwrap(),
        Writer::named("test"),
    );
    assert_eq!(landed_changes(&log).await, 150, "every change once");
    let mut versions = Vec::new();
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        if entry.files.is_empty() {
            continue;
        }
        let made_by = entry.plugins[0].digest.clone();
        if versions.last() != Some(&made_by) {
            versions.push(made_by);
        }
    }
    assert_eq!(
        versions,
        [digest("passthrough"), digest("trap")],
        "entries name the version that made their files, in order, and never the refused one"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&plugin_dir);
}

/// The router sends rows to several declared outputs by a column's value, each row with its
/// change's identity, and lets the rest land in the table's own output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_lands_rows_in_several_outputs_by_value() {
    use tributary_tests::lake::read_output;

    let db = tributary_tests::fresh_database("router").await;
    db.client
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, region text, amount numeric(10,2))",
        )
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("router-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("router");
    let mut cfg = config(
        &db.url,
        &name,
        &["public.orders"],
        &sink_url,
        vec![],
        &[plugin("router")],
    );
    cfg.transforms[0].config = [
        ("column", "region"),
        ("routes", "eu:orders_eu,us:orders_us"),
        ("columns", "id:int8,amount:numeric"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO orders SELECT g, (ARRAY['eu','us','apac'])[g % 3 + 1], g * 1.5
               FROM generate_series(1, 30) g;
             DELETE FROM orders WHERE id = 3;",
        )
        .await
        .unwrap();
    running.wait_for_changes(31, Duration::from_secs(60)).await;
    running.stop().await;

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let ids = |rows: &[tributary_tests::lake::LandedRow]| -> Vec<(String, String)> {
        rows.iter()
            .map(|r| (r.op.clone(), r.values["id"].clone().unwrap()))
            .collect()
    };
    let eu = read_output(&store, "orders_eu").await;
    let us = read_output(&store, "orders_us").await;
    let own = read_output(&store, "public.orders").await;
    let every = |rem: i64| -> Vec<(String, String)> {
        (1..=30)
            .filter(|g| g % 3 == rem)
            .map(|g| ("insert".to_owned(), g.to_string()))
            .collect()
    };
    // g % 3 = 0 → eu, 1 → us, 2 → apac (unrouted). The delete of id 3 carries its key only
    // (default replica identity), so its region is unknown: unmatched, in the table's output.
    assert_eq!(ids(&eu), every(0));
    assert_eq!(ids(&us), every(1));
    let mut own_expected = every(2);
    own_expected.push(("delete".to_owned(), "3".to_owned()));
    assert_eq!(ids(&own), own_expected);
    assert_eq!(eu[0].values["amount"].as_deref(), Some("4.50"));
    assert!(
        !eu[0].values.contains_key("region"),
        "only the declared columns"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The flatten plugin lands fields of a JSON column as typed columns of its own output; a
/// value that is not JSON is rejected, and under the dead-letter policy lands there instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_fields_land_as_typed_columns_and_bad_json_as_dead_letters() {
    use tributary::transform::{DEAD_LETTERS, FailurePolicy};
    use tributary_tests::lake::read_output;

    let db = tributary_tests::fresh_database("flatten").await;
    db.client
        .batch_execute("CREATE TABLE events (id bigint PRIMARY KEY, payload text)")
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("flatten-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("flatten");
    let mut cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &sink_url,
        vec![],
        &[plugin("flatten")],
    );
    cfg.transforms[0].on_error = FailurePolicy::DeadLetter;
    cfg.transforms[0].config = [
        ("column", "payload"),
        ("fields", "user.id:int8, user.plan:text"),
        ("copy", "id:int8"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            r#"INSERT INTO events VALUES (1, '{"user": {"id": 7, "plan": "pro"}}'),
                                         (2, '{"user": {"id": 8}}'),
                                         (3, '{oops');"#,
        )
        .await
        .unwrap();
    running.wait_for_changes(3, Duration::from_secs(60)).await;
    running.stop().await;

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let flat: Vec<Vec<Option<String>>> = read_output(&store, "flattened")
        .await
        .iter()
        .map(|r| {
            ["id", "user_id", "user_plan"]
                .iter()
                .map(|c| r.values[*c].clone())
                .collect()
        })
        .collect();
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        flat,
        [
            vec![some("1"), some("7"), some("pro")],
            vec![some("2"), some("8"), None]
        ]
    );
    let letters = read_output(&store, DEAD_LETTERS).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].values["class"].as_deref(), Some("parse"));
    assert!(
        letters[0].values["message"]
            .as_deref()
            .unwrap()
            .contains("payload is not JSON")
    );
    // `keep` is on by default: every change also lands in its table's output.
    assert_eq!(read_output(&store, "public.events").await.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SIGHUP` to a running `tributary run` loads the plugins again and swaps them in at the
/// next batch, on the same replication connection; nothing is lost or landed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_plugins_of_a_running_service() {
    use tributary_tests::service::{Fixture, Service};

    let db = events_database("sighup").await;
    let mut fixture = Fixture::new(&db.url, "sighup", &["public.events"]).await;
    fixture.cfg.transforms = vec![plugin("passthrough")];
    let file = fixture.cfg.write(&fixture.dir);
    let log = fixture.dir.join("run.log");
    let mut service = Service::spawn(&file, &[], &log);
    service
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'before')")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 1, Duration::from_secs(30))
        .await;
    service.signal(libc::SIGHUP);
    service
        .wait_for_log("SIGHUP: loading the plugins again", Duration::from_secs(30))
        .await;
    // The new chain takes over at the next batch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (2, 'after')")
        .await
        .unwrap();
    service
        .wait_for_log(
            "plugins reloaded; from this batch on: passthrough",
            Duration::from_secs(30),
        )
        .await;
    service
        .wait_for_landed(&fixture.log, 2, Duration::from_secs(30))
        .await;
    let text = service.stop().await;
    assert!(
        !text.contains("reconnect"),
        "replication never restarted:\n{text}"
    );
    assert_eq!(
        tributary_tests::lake::landed_changes(&fixture.log).await,
        2,
        "every change once"
    );
    let _ = std::fs::remove_dir_all(&fixture.dir);
}
