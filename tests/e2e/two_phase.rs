//! Two-phase commit: a prepared transaction lands when COMMIT PREPARED is decoded and never
//! when it is rolled back, and a slot that decodes two-phase commit is refused before it sends
//! a prepared transaction early.

use std::time::Duration;

use tributary::pipeline::{PipelineError, RunOptions};
use tributary::source::provision::ProvisionError;
use tributary_tests::lake::read_output;
use tributary_tests::pipeline::{RunningPipeline, config, events_database};
use tributary_tests::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_transaction_lands_at_commit_prepared_and_not_when_rolled_back() {
    let db = events_database("prepared").await;
    let dir = std::env::temp_dir().join(unique_name("prepared-lake"));
    let name = unique_name("prepared");
    let mut running = RunningPipeline::start(config(
        &db.url,
        &name,
        &["public.events"],
        &format!("file://{}", dir.display()),
        vec![],
        &[],
    ))
    .await;
    // COMMIT PREPARED may not run inside a transaction block: one statement at a time.
    for statement in [
        "BEGIN",
        "INSERT INTO events VALUES (1, 'prepared, then committed')",
        "PREPARE TRANSACTION 'kept'",
        "BEGIN",
        "INSERT INTO events VALUES (2, 'prepared, then rolled back')",
        "PREPARE TRANSACTION 'undone'",
        "INSERT INTO events VALUES (3, 'committed while the others were prepared')",
        "ROLLBACK PREPARED 'undone'",
        "COMMIT PREPARED 'kept'",
    ] {
        db.client.batch_execute(statement).await.unwrap();
    }
    running.wait_for_changes(2, Duration::from_secs(60)).await;
    let progress = running.stop().await;
    assert_eq!(progress.changes, 2);

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let rows = read_output(&store, "public.events").await;
    // In commit order: the prepared transaction commits last.
    let ids: Vec<Option<&str>> = rows.iter().map(|r| r.values["id"].as_deref()).collect();
    assert_eq!(ids, [Some("3"), Some("1")]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_that_decodes_two_phase_commit_is_refused() {
    let db = events_database("two_phase_slot").await;
    let name = unique_name("two_phase_slot");
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, true)",
            &[&name],
        )
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("two-phase-lake"));
    let cfg = config(
        &db.url,
        &name,
        &["public.events"],
        &format!("file://{}", dir.display()),
        vec![],
        &[],
    );
    let err = RunningPipeline::start_failure(cfg, RunOptions::default()).await;
    assert!(
        matches!(
            &err,
            PipelineError::Provision(ProvisionError::SlotTwoPhase { slot }) if *slot == name
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("drop the slot"), "{err}");
    assert!(
        !dir.join("_tributary/log").exists(),
        "a refused start committed nothing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
