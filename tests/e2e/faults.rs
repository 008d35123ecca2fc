//! Sink failures are sorted by whether trying again can help: a missing bucket and refused
//! credentials stop the pipeline at start with one sentence and the way out, before anything
//! is created; an unreachable sink at start is waited for, as one is while running; and a stop
//! request does not wait long for a sink that hangs.

use std::time::Duration;

use tributary::pipeline::{PipelineError, RunOptions};
use tributary_tests::pipeline::{
    RunningPipeline, config, confirmed_flush, events_database, slot_and_publication,
};
use tributary_tests::proxy::Proxy;
use tributary_tests::{S3Server, s3, unique_name};

async fn refused_at_start(hint: &str, sink_url: String, options: Vec<(String, String)>) -> String {
    let db = events_database(hint).await;
    let name = unique_name(hint);
    let cfg = config(&db.url, &name, &["public.events"], &sink_url, options, &[]);
    let err = RunningPipeline::start_failure(cfg, RunOptions::default()).await;
    assert!(
        // The preflight's refusal, in the sink's own words.
        matches!(
            &err,
            PipelineError::Refused(_) | PipelineError::Commit(_) | PipelineError::Sink(_)
        ),
        "{err:?}"
    );
    assert_eq!(
        slot_and_publication(&db, &name).await,
        (false, false),
        "a refused start creates nothing: {err}"
    );
    err.to_string()
}

/// A pipeline of the events table into a fresh bucket of an S3 server of its own, which the
/// test may stop.
struct PrivateSink {
    db: tributary_tests::TestDatabase,
    server: S3Server,
    bucket: String,
    /// Slot and publication.
    name: String,
    cfg: tributary::config::PipelineConfig,
}

async fn with_a_private_sink(hint: &str) -> PrivateSink {
    let db = events_database(hint).await;
    let server = S3Server::start();
    let bucket = server.fresh_bucket(&hint.replace('_', "-")).await;
    let name = unique_name(hint);
    let cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &server.bucket_url(&bucket),
        server.object_store_options(),
        &[],
    );
    PrivateSink {
        db,
        server,
        bucket,
        name,
        cfg,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_refused_at_start_in_one_sentence() {
    let server = s3();
    let bucket = format!("missing-{}", std::process::id());
    let err = refused_at_start(
        "no_bucket",
        server.bucket_url(&bucket),
        server.object_store_options(),
    )
    .await;
    assert_eq!(
        err,
        format!(
            "sink s3://{bucket}: the bucket \"{bucket}\" does not exist; create it, or fix sink.url"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_refused_at_start_in_one_sentence() {
    let server = s3();
    let bucket = server.fresh_bucket("bad-secret").await;
    let mut options = server.object_store_options();
    for (key, value) in &mut options {
        if key == "aws_secret_access_key" {
            *value = "not-the-secret".into();
        }
    }
    let err = refused_at_start("bad_secret", server.bucket_url(&bucket), options).await;
    assert!(
        err.starts_with(&format!(
            "sink s3://{bucket}: the S3 credentials were refused (SignatureDoesNotMatch)"
        )) && err.ends_with(
            "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the sink.options keys)"
        ) && !err.contains('<'),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_sink_at_start_is_waited_for() {
    let PrivateSink {
        db,
        mut server,
        name,
        cfg,
        ..
    } = with_a_private_sink("sink_down_at_start").await;
    server.stop();
    let starting = tokio::spawn(RunningPipeline::start(cfg));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!starting.is_finished(), "the start waits for the sink");
    assert_eq!(
        slot_and_publication(&db, &name).await,
        (false, false),
        "nothing is created while the sink is unreachable"
    );
    server.restart();
    let mut running = starting.await.unwrap();
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'a')")
        .await
        .unwrap();
    running.wait_for_changes(1, Duration::from_secs(60)).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_sink_hangs_ends_within_seconds() {
    let db = events_database("sink_hangs").await;
    let server = s3();
    let bucket = server.fresh_bucket("sink-hangs").await;
    let proxy = Proxy::start(&format!("127.0.0.1:{}", server.port())).await;
    let mut options = server.object_store_options();
    for (key, value) in &mut options {
        if key == "aws_endpoint" {
            *value = format!("http://127.0.0.1:{}", proxy.port());
        }
    }
    let name = unique_name("sink_hangs");
    let cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &server.bucket_url(&bucket),
        options,
        &[],
    );
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'a')")
        .await
        .unwrap();
    let progress = running.wait_for_changes(1, Duration::from_secs(60)).await;
    // The confirm of the landed flush reaches the server a moment after its commit entry.
    let end = progress.last_entry.expect("an entry").last_end_lsn;
    let landed = Some(tributary_tests::pipeline::wait_for_confirmed(&db.client, &name, end).await);

    // The sink stops answering (no error, no close): the next flush's requests hang.
    proxy.freeze();
    db.client
        .batch_execute("INSERT INTO events VALUES (2, 'b')")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = std::time::Instant::now();
    let err = running.stop_with_error().await.to_string();
    assert!(
        asked.elapsed() < Duration::from_secs(12),
        "the stop took {:?}",
        asked.elapsed()
    );
    assert!(
        err.starts_with("stopped after the sink gave no answer for 5 s: nothing past"),
        "{err}"
    );
    assert_eq!(confirmed_flush(&db.client, &name).await, landed);
}

/// With `retry.limit_secs`, a sink that stays down stops the pipeline once a step has failed
/// for that long, naming the step, the limit and the confirmed position; nothing past it is
/// confirmed, and the next start (without the limit) lands the change once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_limit_stops_a_pipeline_whose_sink_stays_down() {
    let PrivateSink {
        db,
        mut server,
        bucket,
        name,
        mut cfg,
    } = with_a_private_sink("retry_limit").await;
    cfg.retry.limit_secs = Some(3);
    let mut running = RunningPipeline::start(cfg.clone()).await;
    db.client
        .batch_execute("INSERT INTO events VALUES (1, 'a')")
        .await
        .unwrap();
    let progress = running.wait_for_changes(1, Duration::from_secs(60)).await;
    // The first flush's confirm reaches the server with the next status update.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let landed = progress.last_entry.unwrap().last_end_lsn;
    while confirmed_flush(&db.client, &name).await != Some(landed) {
        assert!(std::time::Instant::now() < deadline, "never confirmed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    server.stop();
    db.client
        .batch_execute("INSERT INTO events VALUES (2, 'b')")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = running.failure(Duration::from_secs(60)).await;
    let text = err.to_string();
    assert!(matches!(err, PipelineError::GaveUp { .. }), "{err:?}");
    assert!(started.elapsed() >= Duration::from_secs(3), "{text}");
    let (step, rest) = text
        .split_once(" kept failing for ")
        .expect("the step that failed");
    assert!(
        ["writing the intent", "uploading data files"].contains(&step),
        "{text}"
    );
    let seconds: u64 = rest.split(' ').next().unwrap().parse().unwrap();
    assert!((3..30).contains(&seconds), "{text}");
    assert!(
        text.contains(&format!(
            "longer than retry.limit_secs = 3 allows: sink s3://{bucket}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("nothing past {landed} was confirmed")),
        "{text}"
    );
    assert_eq!(confirmed_flush(&db.client, &name).await, Some(landed));

    server.restart();
    cfg.retry.limit_secs = None;
    let mut running = RunningPipeline::start(cfg).await;
    running.wait_for_changes(1, Duration::from_secs(60)).await;
    running.stop().await;
    let sink = tributary::lake::sink::Sink::open(
        &server.bucket_url(&bucket),
        &server.object_store_options().into_iter().collect(),
    )
    .unwrap();
    let ids: Vec<String> = tributary_tests::lake::committed_rows(&sink, "public.events")
        .await
        .iter()
        .map(|r| r.values["id"].clone().unwrap())
        .collect();
    assert_eq!(ids, ["1", "2"], "each change once");
}

/// A plugin that cannot be loaded (a missing file, a file that is not WebAssembly, a core
/// module rather than a component) is refused at start with what is wrong and what to do,
/// before the publication or the slot is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_plugin_is_refused_before_anything_is_created() {
    let dir = std::env::temp_dir().join(unique_name("bad-plugins"));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("notes.wasm");
    std::fs::write(&text, "these are notes, not a plugin\n").unwrap();
    let core = dir.join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let missing = dir.join("missing.wasm");
    for (plugin, expected) in [
        (
            &missing,
            format!(
                "cannot read plugin {}: No such file or directory",
                missing.display()
            ),
        ),
        (
            &text,
            format!(
                "plugin {} is not a usable transform: not a WebAssembly file (it does not start \
                 with the bytes \\0asm); point transform.plugin at the plugin's built .wasm \
                 component",
                text.display()
            ),
        ),
        (
            &core,
            format!(
                "plugin {} is not a usable transform: a core WebAssembly module, not a \
                 component; build the plugin for wasm32-wasip2, or turn the core module (a C \
                 build, say) into a component with `tributary plugin componentize`",
                core.display()
            ),
        ),
    ] {
        let db = events_database("bad_plugin").await;
        let name = unique_name("bad_plugin");
        let server = s3();
        let bucket = server.fresh_bucket("bad-plugin").await;
        let cfg = config(
            &db.url,
            &name,
            &["public.events"],
            &server.bucket_url(&bucket),
            server.object_store_options(),
            std::slice::from_ref(plugin),
        );
        let err = RunningPipeline::start_failure(cfg, RunOptions::default()).await;
        assert!(
            matches!(err, PipelineError::Refused(_) | PipelineError::Transform(_)),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with(&expected),
            "{err}\nexpected {expected}"
        );
        assert_eq!(
            slot_and_publication(&db, &name).await,
            (false, false),
            "a refused start creates nothing: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sink without any credentials is refused at start in one sentence naming what to set,
/// before anything is created, instead of the metadata service's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_credentials_are_refused_at_start_in_one_sentence() {
    let server = s3();
    let bucket = server.fresh_bucket("no-credentials").await;
    let options: Vec<(String, String)> = server
        .object_store_options()
        .into_iter()
        .filter(|(key, _)| !key.contains("access_key") && !key.contains("secret"))
        .collect();
    let err = refused_at_start("no_credentials", server.bucket_url(&bucket), options).await;
    assert!(
        err.starts_with(&format!("sink s3://{bucket}: no S3 credentials")),
        "{err}"
    );
    assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    assert!(!err.contains('\n'), "one sentence: {err}");
}
