//! Replica identity and unchanged TOAST values: tables whose updates and deletes would lose
//! data are refused before streaming, and large values an update left untouched land whole
//! (`REPLICA IDENTITY FULL`) or as null (`source.unchanged_toast = "null"`).

use std::time::Duration;

use tributary::config::{PipelineConfig, UnchangedToastPolicy};
use tributary::lake::sink::Sink;
use tributary::pipeline::{PipelineError, RunOptions};
use tributary::source::provision::ProvisionError;
use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::lake::{LandedRow, read_output};
use tributary_tests::pipeline::{RunningPipeline, config};
use tributary_tests::{TestDatabase, fresh_database, plugin, unique_name};

const BODY_LEN: usize = 100_000;

/// A pipeline with the default policy on every table of its publication (`tables = []`, so
/// the tracked tables come from `pg_publication_tables`).
fn default_policy(db: &TestDatabase, name: &str, sink_url: &str) -> PipelineConfig {
    let mut cfg = config(&db.url, name, &[], sink_url, vec![], &[]);
    cfg.source.unchanged_toast = UnchangedToastPolicy::Refuse;
    cfg
}

async fn refusal(hint: &str, schema: &str) -> String {
    let db = fresh_database(hint).await;
    db.client.batch_execute(schema).await.unwrap();
    let dir = std::env::temp_dir().join(unique_name(hint));
    let cfg = default_policy(
        &db,
        &unique_name(hint),
        &format!("file://{}", dir.display()),
    );
    let err = RunningPipeline::start_failure(cfg, RunOptions::default()).await;
    assert!(
        matches!(
            err,
            PipelineError::Provision(
                ProvisionError::NoReplicaIdentity { .. } | ProvisionError::UnchangedToast { .. }
            )
        ),
        "{err:?}"
    );
    assert!(!dir.exists(), "a refused start wrote to the sink");
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_a_primary_key_is_refused() {
    let err = refusal("no_pkey", "CREATE TABLE events (id int, n int)").await;
    assert_eq!(
        err,
        "table public.events has no usable replica identity (REPLICA IDENTITY DEFAULT without a \
         primary key), so its updates and deletes would carry no old key; run: ALTER TABLE \
         public.events ADD PRIMARY KEY (...), or: ALTER TABLE public.events REPLICA IDENTITY FULL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_replica_identity_nothing_is_refused() {
    let err = refusal(
        "identity_nothing",
        "CREATE TABLE events (id int PRIMARY KEY, n int);
         ALTER TABLE events REPLICA IDENTITY NOTHING",
    )
    .await;
    assert_eq!(
        err,
        "table public.events has no usable replica identity (REPLICA IDENTITY NOTHING), so its \
         updates and deletes would carry no old key; run: ALTER TABLE public.events ADD PRIMARY \
         KEY (...), or: ALTER TABLE public.events REPLICA IDENTITY FULL"
    );
}

/// Only `body` is named: a `varchar(80)` (324 bytes at most) in a row far below the TOAST
/// threshold is never stored out of line (issue 21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_column_without_full_identity_is_refused_by_default() {
    let err = refusal(
        "toast_refused",
        "CREATE TABLE docs (id int PRIMARY KEY, n int, title varchar(80), body text)",
    )
    .await;
    assert_eq!(
        err,
        "table public.docs has columns PostgreSQL may store out of line as TOAST (body), \
         and an update that leaves such a value untouched does not send it; run: ALTER TABLE \
         public.docs REPLICA IDENTITY FULL (the old row then carries it), or set \
         source.unchanged_toast = \"null\" to land those values as null, flagged in _unchanged_toast"
    );
}

/// Insert a row whose body is stored out of line, update another column, and read back what
/// landed: the insert and the update, in that order.
async fn land_an_update_beside_a_toasted_value(
    db: &TestDatabase,
    cfg: PipelineConfig,
    sink_url: &str,
) -> Vec<LandedRow> {
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(&format!(
            "INSERT INTO docs VALUES (1, 'draft', repeat('x', {BODY_LEN}))"
        ))
        .await
        .unwrap();
    // EXTERNAL storage keeps the value uncompressed, so it can only live in the TOAST table.
    let toast_bytes: i64 = db
        .client
        .query_one(
            "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'docs'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(toast_bytes >= BODY_LEN as i64, "body was not TOASTed");
    db.client
        .batch_execute("UPDATE docs SET title = 'final' WHERE id = 1")
        .await
        .unwrap();
    running.wait_for_changes(2, Duration::from_secs(60)).await;
    running.stop().await;
    let sink = Sink::open(sink_url, &Default::default()).unwrap();
    let rows = read_output(sink.store().as_ref(), "public.docs").await;
    let ops: Vec<&str> = rows.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["insert", "update"]);
    rows
}

const DOCS: &str = "CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
    ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_full_identity_an_untouched_toasted_value_lands_whole() {
    let db = fresh_database("toast_full").await;
    db.client
        .batch_execute(&format!("{DOCS} ALTER TABLE docs REPLICA IDENTITY FULL;"))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("toast-full-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("toast_full");
    // Through a plugin, so the filled value also crosses the transform boundary.
    let mut cfg = config(
        &db.url,
        &name,
        &["public.docs"],
        &sink_url,
        vec![],
        &[plugin("passthrough")],
    );
    cfg.source.unchanged_toast = UnchangedToastPolicy::Refuse;
    let rows = land_an_update_beside_a_toasted_value(&db, cfg, &sink_url).await;
    let update = &rows[1].values;
    assert_eq!(update["title"].as_deref(), Some("final"));
    assert_eq!(
        update["body"].as_deref(),
        Some("x".repeat(BODY_LEN).as_str())
    );
    assert_eq!(rows[1].unchanged_toast, None, "filled, so not flagged");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_null_policy_an_untouched_toasted_value_lands_as_null() {
    let db = fresh_database("toast_null").await;
    db.client.batch_execute(DOCS).await.unwrap();
    let dir = std::env::temp_dir().join(unique_name("toast-null-lake"));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name("toast_null");
    let mut cfg = config(&db.url, &name, &["public.docs"], &sink_url, vec![], &[]);
    cfg.source.unchanged_toast = UnchangedToastPolicy::Null;
    let rows = land_an_update_beside_a_toasted_value(&db, cfg, &sink_url).await;
    assert_eq!(
        rows[0].values["body"].as_deref(),
        Some("x".repeat(BODY_LEN).as_str())
    );
    assert_eq!(rows[0].unchanged_toast, None);
    let update = &rows[1].values;
    assert_eq!(update["title"].as_deref(), Some("final"));
    assert_eq!(update["body"], None);
    assert_eq!(rows[1].unchanged_toast.as_deref(), Some("[body]"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Land an insert, an update that changes the key, a plain update and a delete of `people`.
async fn land_old_images(db: &TestDatabase, cfg: PipelineConfig, sink_url: &str) -> Vec<LandedRow> {
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO people VALUES (1, 'ann@example.com', 'Ann');
             UPDATE people SET id = 2, email = 'ann@example.org' WHERE id = 1;
             UPDATE people SET name = 'Anne' WHERE id = 2;
             DELETE FROM people WHERE id = 2;",
        )
        .await
        .unwrap();
    running.wait_for_changes(4, Duration::from_secs(60)).await;
    running.stop().await;
    let sink = Sink::open(sink_url, &Default::default()).unwrap();
    let rows = read_output(sink.store().as_ref(), "public.people").await;
    let ops: Vec<&str> = rows.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["insert", "update", "update", "delete"]);
    rows
}

fn old(row: &LandedRow, column: &str) -> Option<String> {
    row.old.as_ref().expect("an old image")[column].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_deletes_carry_the_old_image_their_identity_sends() {
    let db = fresh_database("old_images").await;
    db.client
        .batch_execute("CREATE TABLE people (id int PRIMARY KEY, email text, name text)")
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("old-images-lake"));
    let sink_url = format!("file://{}", dir.display());
    let cfg = config(
        &db.url,
        &unique_name("old_images"),
        &["public.people"],
        &sink_url,
        vec![],
        &[],
    );
    let rows = land_old_images(&db, cfg, &sink_url).await;
    assert_eq!(rows[0].old, None, "an insert has no old image");
    // The key changed: the old key comes along, the other columns are not sent.
    assert_eq!(old(&rows[1], "id").as_deref(), Some("1"));
    assert_eq!(old(&rows[1], "email"), None);
    assert_eq!(
        rows[2].old, None,
        "an update that keeps the key sends no old row"
    );
    assert_eq!(old(&rows[3], "id").as_deref(), Some("2"));

    // Under REPLICA IDENTITY FULL every update carries the whole old row, and a masking
    // plugin masks it like the new one.
    let db = fresh_database("old_images_full").await;
    db.client
        .batch_execute(
            "CREATE TABLE people (id int PRIMARY KEY, email text, name text);
             ALTER TABLE people REPLICA IDENTITY FULL;",
        )
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("old-images-full-lake"));
    let sink_url = format!("file://{}", dir.display());
    let mut cfg = config(
        &db.url,
        &unique_name("old_images_full"),
        &["public.people"],
        &sink_url,
        vec![],
        &[plugin("mask")],
    );
    cfg.transforms[0]
        .config
        .insert("columns".into(), "email".into());
    cfg.transforms[0]
        .config
        .insert("salt".into(), "pepper".into());
    let rows = land_old_images(&db, cfg, &sink_url).await;
    let masked = |row: &LandedRow| row.values["email"].clone().unwrap();
    assert!(masked(&rows[0]).starts_with("sha256:"));
    assert_eq!(old(&rows[1], "id").as_deref(), Some("1"));
    assert_eq!(old(&rows[1], "name").as_deref(), Some("Ann"));
    assert_eq!(
        old(&rows[1], "email"),
        Some(masked(&rows[0])),
        "the old email is masked"
    );
    assert_eq!(old(&rows[2], "id").as_deref(), Some("2"));
    assert_eq!(old(&rows[2], "name").as_deref(), Some("Ann"));
    assert_eq!(rows[2].values["name"].as_deref(), Some("Anne"));
    assert_eq!(old(&rows[3], "name").as_deref(), Some("Anne"));
    for row in &rows {
        assert!(
            !format!("{row:?}").contains("@example"),
            "unmasked email in {row:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_logical_decoding_is_refused() {
    // A cluster of its own: the shared one runs with wal_level = logical.
    let cluster = tokio::task::spawn_blocking(|| {
        TempCluster::start(ClusterOptions::fast().setting("wal_level", "replica"))
    })
    .await
    .unwrap()
    .unwrap();
    let dir = std::env::temp_dir().join(unique_name("wal-level-lake"));
    let cfg = config(
        &cluster.url("postgres"),
        &unique_name("wal_level"),
        &[],
        &format!("file://{}", dir.display()),
        vec![],
        &[],
    );
    let err = RunningPipeline::start_failure(cfg, RunOptions::default()).await;
    assert_eq!(
        err.to_string(),
        "the source server runs with wal_level = replica; logical replication needs wal_level = \
         logical (set it in postgresql.conf and restart the server)"
    );
    assert!(!dir.exists(), "a refused start wrote to the sink");
}
