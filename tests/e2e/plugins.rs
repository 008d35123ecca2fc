//! A failing plugin stops the pipeline with an error that names it and the LSN, and nothing
//! past the failed batch is confirmed.

use std::time::Duration;

use tributary::Lsn;
use tributary::commit::{CommitLog, Writer};
use tributary::sink::Sink;
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
    let after: Lsn = tributary::provision::current_wal_lsn(&db.client)
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
