//! Plugins written in Rust, Python, JavaScript and C, each built by its own language's
//! toolchain from `examples/plugins/` and the published WIT alone, run in a real pipeline:
//! the masker and then the passthrough of each language, chained, from PostgreSQL to S3.
//! Every row is checked: the masked column holds the keyed digest every implementation must
//! compute alike, in the row and in the old image, and the rest lands untouched, once.

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tributary_tests::lake::read_output;
use tributary_tests::pipeline::{RunningPipeline, config};
use tributary_tests::{fresh_database, guest_plugin, plugin, s3, unique_name};

const SALT: &str = "pepper";

/// What every masker lands for `text`: `sha256:` and the first 16 hex digits of
/// SHA-256(salt, 0, text).
fn digest(text: &str) -> String {
    let hash = Sha256::new()
        .chain_update(SALT)
        .chain_update([0])
        .chain_update(text)
        .finalize();
    hash[..8].iter().fold(String::from("sha256:"), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

async fn mask_then_passthrough(lang: &str, mask: PathBuf, passthrough: PathBuf) {
    let db = fresh_database(&format!("lang_{lang}")).await;
    db.client
        .batch_execute(
            "CREATE TABLE users (id int PRIMARY KEY, email text, note text);
             ALTER TABLE users REPLICA IDENTITY FULL;",
        )
        .await
        .unwrap();
    let server = s3();
    let bucket = server.fresh_bucket(&format!("lang-{lang}")).await;
    let name = unique_name(&format!("lang_{lang}"));
    let sink_url = format!("s3://{bucket}/lake");
    let mut cfg = config(
        &db.url,
        &name,
        &["public.users"],
        &sink_url,
        server.object_store_options(),
        &[mask, passthrough],
    );
    cfg.transforms[0].config = [("columns", "email"), ("salt", SALT)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    for transform in &mut cfg.transforms {
        // An interpreter's first call can take a while in a debug build.
        transform.timeout_ms = 60_000;
    }
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute(
            "INSERT INTO users VALUES (1, 'ann@example.com', 'first'), (2, NULL, 'no email'),
                                      (3, 'cé@exämple.org', 'unicode');
             UPDATE users SET email = 'ann@example.net' WHERE id = 1;
             DELETE FROM users WHERE id = 3;",
        )
        .await
        .unwrap();
    running.wait_for_changes(5, Duration::from_secs(120)).await;
    running.stop().await;

    let store = object_store::prefix::PrefixStore::new(server.object_store(&bucket), "lake");
    let rows = read_output(&store, "public.users").await;
    type Seen<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);
    let seen: Vec<Seen> = rows
        .iter()
        .map(|r| {
            let value = |c: &str| r.values.get(c).and_then(|v| v.as_deref());
            (r.op.as_str(), value("id"), value("email"), value("note"))
        })
        .collect();
    let (ann, ann2, ce) = (
        digest("ann@example.com"),
        digest("ann@example.net"),
        digest("cé@exämple.org"),
    );
    assert_eq!(
        seen,
        vec![
            ("insert", Some("1"), Some(ann.as_str()), Some("first")),
            ("insert", Some("2"), None, Some("no email")),
            ("insert", Some("3"), Some(ce.as_str()), Some("unicode")),
            ("update", Some("1"), Some(ann2.as_str()), Some("first")),
            ("delete", Some("3"), Some(ce.as_str()), Some("unicode")),
        ],
        "{lang}"
    );
    // The update's old image is masked too; nothing lands the address in clear.
    let old = rows[3].old.as_ref().expect("the update's old image");
    assert_eq!(old.get("email").cloned().flatten(), Some(ann), "{lang}");
    assert_eq!(old.get("note").cloned().flatten().as_deref(), Some("first"));
    for row in &rows {
        let text = format!("{:?} {:?}", row.values, row.old);
        assert!(
            !text.contains("@example"),
            "{lang} landed an address: {text}"
        );
    }
    // Every change once: identities are distinct and follow the source.
    let mut ids: Vec<(u64, u32)> = rows.iter().map(|r| (r.commit_lsn, r.seq)).collect();
    ids.dedup();
    assert_eq!(ids.len(), 5, "{lang}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_plugins_mask_and_pass_through() {
    mask_then_passthrough("rust", plugin("mask"), plugin("passthrough")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_plugins_mask_and_pass_through() {
    let (mask, passthrough) = (
        guest_plugin("python", "mask"),
        guest_plugin("python", "passthrough"),
    );
    mask_then_passthrough("python", mask, passthrough).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_plugins_mask_and_pass_through() {
    let (mask, passthrough) = (
        guest_plugin("js", "mask"),
        guest_plugin("js", "passthrough"),
    );
    mask_then_passthrough("js", mask, passthrough).await;
}

/// The columnar variants (`tributary:transform/columnar@1.0.0`, tables as Arrow IPC streams)
/// land exactly what the typed plugins land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_columnar_plugins_mask_and_pass_through() {
    let (mask, passthrough) = (
        guest_plugin("python", "mask-columnar"),
        guest_plugin("python", "passthrough-columnar"),
    );
    mask_then_passthrough("pycol", mask, passthrough).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_columnar_plugins_mask_and_pass_through() {
    let (mask, passthrough) = (
        guest_plugin("js", "mask-columnar"),
        guest_plugin("js", "passthrough-columnar"),
    );
    mask_then_passthrough("jscol", mask, passthrough).await;
}

/// The masks on the host's column functions (`tributary:functions/columns@1.0.0`: the host
/// computes the digests of a whole column in one call) land exactly what the Rust mask and the
/// pure-guest masks land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_host_function_mask_lands_the_rust_masks_digests() {
    let (mask, passthrough) = (
        guest_plugin("python", "mask-functions"),
        guest_plugin("python", "passthrough-columnar"),
    );
    mask_then_passthrough("pyfn", mask, passthrough).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_host_function_mask_lands_the_rust_masks_digests() {
    let (mask, passthrough) = (
        guest_plugin("js", "mask-functions"),
        guest_plugin("js", "passthrough-columnar"),
    );
    mask_then_passthrough("jsfn", mask, passthrough).await;
}

/// A columnar plugin whose columns do not fit its table's output (a column of another type, a
/// null in a column its reshape adds as not nullable) stops the pipeline with a message that
/// names the plugin, the table, the column and what to do; nothing is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columnar_output_that_does_not_fit_is_refused_naming_plugin_table_and_column() {
    for (wrong, column, says) in [
        (
            "type",
            "email",
            "it is Int32, but a text column is Utf8; return the column typed as it lands",
        ),
        (
            "null",
            "region",
            "row 0 is null, but the column is declared not nullable; give every row a value",
        ),
    ] {
        let stopped = python_sandbox_stopped(
            &format!("columnar_{wrong}"),
            "sandbox-columnar",
            ("wrong", wrong),
            |t| t.timeout_ms = 60_000,
        )
        .await;
        let error = &stopped.error;
        assert!(
            error.contains(&format!(
                "plugin \"sandbox-columnar-py\" returned columns for table public.users \
                 (column \"{column}\") that do not fit"
            )),
            "{error}"
        );
        assert!(error.contains(says), "{error}");
        assert_eq!(
            stopped.confirmed_after, stopped.confirmed_before,
            "nothing was confirmed: {error}"
        );
    }
}

/// Under `on_error = "dead-letter"` the rows a columnar plugin rejects land in
/// `_dead_letters` with its class and message, and not in their table; the other rows land, and
/// the commit log counts the letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_columnar_plugin_rejects_land_as_dead_letters() {
    use tributary::transform::{DEAD_LETTERS, FailurePolicy};

    let (db, dir, mut cfg, _) = users_through_python("columnar_letters", "sandbox-columnar").await;
    cfg.transforms[0].config = [("reject".to_owned(), "true".to_owned())].into();
    cfg.transforms[0].on_error = FailurePolicy::DeadLetter;
    cfg.transforms[0].timeout_ms = 60_000;
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute("INSERT INTO users SELECT g, 'a@x', 'n' FROM generate_series(1, 6) g")
        .await
        .unwrap();
    running.wait_for_changes(6, Duration::from_secs(120)).await;
    let progress = running.stop().await;

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let letters = read_output(&store, DEAD_LETTERS).await;
    let rejected: Vec<(u32, String, String)> = letters
        .iter()
        .map(|r| {
            let value = |c: &str| r.values[c].clone().unwrap_or_default();
            assert_eq!(value("plugin"), "sandbox-columnar-py");
            assert_eq!(value("table"), "public.users");
            (r.seq, value("class"), value("message"))
        })
        .collect();
    let why = |seq| (seq, "sandbox".to_owned(), "rejected by column".to_owned());
    assert_eq!(rejected, [why(1), why(3), why(5)]);
    let users = read_output(&store, "public.users").await;
    let landed: Vec<(u32, Option<String>)> = users
        .iter()
        .map(|r| (r.seq, r.values["region"].clone()))
        .collect();
    let eu = |seq| (seq, Some("eu".to_owned()));
    assert_eq!(landed, [eu(0), eu(2), eu(4)], "rejected rows do not land");
    let entry = progress.last_entry.expect("an entry was committed");
    assert_eq!(entry.dead_letters, 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_plugins_mask_and_pass_through() {
    let (mask, passthrough) = (guest_plugin("c", "mask"), guest_plugin("c", "passthrough"));
    mask_then_passthrough("c", mask, passthrough).await;
}

/// The 18 MB component of a Python plugin is compiled once: the first start of
/// `tributary run` says it is compiling and how long it took and keeps the result; the next
/// start loads it from the cache, compiles nothing, and lands as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_compiles_once_and_later_starts_load_it_from_the_cache() {
    use tributary_tests::service::{Fixture, Service};

    let db = fresh_database("compile_cache").await;
    db.client
        .batch_execute("CREATE TABLE users (id int PRIMARY KEY, email text, note text)")
        .await
        .unwrap();
    let mut fixture = Fixture::new(&db.url, "compile_cache", &["public.users"]).await;
    fixture.cfg.transforms = vec![guest_plugin("python", "passthrough")];
    let file = fixture.cfg.write(&fixture.dir);
    let cache = fixture.dir.join("plugin-cache");
    let cache_env = cache.display().to_string();
    let env = [("TRIBUTARY_PLUGIN_CACHE", cache_env.as_str())];
    let cached = || -> Vec<String> {
        std::fs::read_dir(&cache)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".cwasm"))
                    .collect()
            })
            .unwrap_or_default()
    };

    for (run, id) in [(1, 1), (2, 2)] {
        let log = fixture.dir.join(format!("run-{run}.log"));
        let mut service = Service::spawn_with(&file, &[], &log, &env);
        service
            .wait_for_log("streaming", Duration::from_secs(300))
            .await;
        db.client
            .execute("INSERT INTO users VALUES ($1, 'x', 'y')", &[&id])
            .await
            .unwrap();
        service
            .wait_for_landed(&fixture.log, id as u64, Duration::from_secs(60))
            .await;
        let text = service.stop().await;
        let compiling = text.contains("compiling the plugin");
        match run {
            1 => {
                assert!(compiling, "the first start says it compiles:\n{text}");
                assert!(text.contains("compiled the plugin in"), "{text}");
                assert_eq!(cached().len(), 1, "the compiled plugin is kept");
            }
            _ => {
                assert!(!compiling, "the second start compiles nothing:\n{text}");
                assert_eq!(cached().len(), 1);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

/// A Python plugin cannot read files, directories, the environment or the arguments, nor
/// open a connection or resolve a name: each attempt fails inside the plugin, which lands
/// what happened and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_reaches_no_file_environment_or_network() {
    let (db, dir, mut cfg, _) = users_through_python("sandbox_py", "sandbox").await;
    cfg.transforms[0].timeout_ms = 60_000;
    let mut running = RunningPipeline::start(cfg).await;
    db.client
        .batch_execute("INSERT INTO users VALUES (1, 'a@x', 'n')")
        .await
        .unwrap();
    running.wait_for_changes(1, Duration::from_secs(120)).await;
    running.stop().await;

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let attempts = read_output(&store, "attempts").await;
    let seen: Vec<(String, String)> = attempts
        .iter()
        .map(|r| {
            let value = |c: &str| r.values[c].clone().unwrap_or_default();
            (value("attempt"), value("outcome"))
        })
        .collect();
    assert_eq!(seen.len(), 6, "{seen:?}");
    for (attempt, outcome) in &seen {
        assert!(outcome.starts_with("denied"), "{attempt}: {outcome}");
    }
    // Denied by the sandbox itself, not by a module missing from the component.
    assert!(seen[4].1.contains("PermissionError"), "{:?}", seen[4]);
    assert!(seen[0].1.contains("No such file"), "{:?}", seen[0]);
    assert_eq!(read_output(&store, "public.users").await.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh database with the table `users (id, email, note)`, and a pipeline for it through
/// the Python example plugin `plugin`, landing in a lake directory of its own: the database,
/// that directory, the pipeline's configuration and its name (also its slot's).
async fn users_through_python(
    hint: &str,
    plugin: &str,
) -> (
    tributary_tests::TestDatabase,
    PathBuf,
    tributary::config::PipelineConfig,
    String,
) {
    let db = fresh_database(hint).await;
    db.client
        .batch_execute("CREATE TABLE users (id int PRIMARY KEY, email text, note text)")
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name(&format!("{hint}-lake")));
    let sink_url = format!("file://{}", dir.display());
    let name = unique_name(hint);
    let cfg = config(
        &db.url,
        &name,
        &["public.users"],
        &sink_url,
        vec![],
        &[guest_plugin("python", plugin)],
    );
    (db, dir, cfg, name)
}

/// How a Python sandbox plugin (`sandbox`, or `sandbox-columnar`), with its `setting` set to
/// `value` and its limits set by `limits`, stopped a real pipeline at the batch of one insert.
struct Stopped {
    error: String,
    /// The server's WAL position right after the insert committed.
    after_insert: tributary::Lsn,
    confirmed_before: Option<tributary::Lsn>,
    confirmed_after: Option<tributary::Lsn>,
}

async fn python_sandbox_stopped(
    hint: &str,
    sandbox: &str,
    (setting, value): (&str, &str),
    limits: impl FnOnce(&mut tributary::config::TransformConfig),
) -> Stopped {
    let (db, dir, mut cfg, name) = users_through_python(hint, sandbox).await;
    cfg.transforms[0].config = [(setting.to_owned(), value.to_owned())].into();
    limits(&mut cfg.transforms[0]);
    let running = RunningPipeline::start(cfg).await;
    let confirmed_before = tributary_tests::pipeline::confirmed_flush(&db.client, &name).await;
    db.client
        .batch_execute("INSERT INTO users VALUES (1, 'a@x', 'n')")
        .await
        .unwrap();
    let after_insert: String = db
        .client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let error = running.failure(Duration::from_secs(120)).await.to_string();
    let confirmed_after = tributary_tests::pipeline::confirmed_flush(&db.client, &name).await;
    let _ = std::fs::remove_dir_all(&dir);
    Stopped {
        error,
        after_insert: after_insert.parse().unwrap(),
        confirmed_before,
        confirmed_after,
    }
}

/// A Python plugin that loops is stopped at its time limit, with an error naming the plugin
/// and the limit, and nothing past the batch is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_python_plugin_is_stopped_at_its_time_limit() {
    let stopped = python_sandbox_stopped("spin_py", "sandbox", ("spin", "true"), |t| {
        t.timeout_ms = 1_500
    })
    .await;
    let error = &stopped.error;
    assert!(error.contains("sandbox-py"), "{error}");
    assert!(error.contains("time limit of 1500 ms"), "{error}");
    assert_eq!(
        stopped.confirmed_after, stopped.confirmed_before,
        "nothing was confirmed"
    );
}

/// A Python plugin that allocates without bound is stopped at its memory cap, with a message
/// naming the plugin, the limit and the batch; nothing is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_that_allocates_without_bound_is_stopped_at_its_memory_cap() {
    let stopped = python_sandbox_stopped("hog_py", "sandbox", ("hog", "true"), |t| {
        t.memory_limit_mib = 96;
        t.timeout_ms = 60_000;
    })
    .await;
    let error = &stopped.error;
    assert!(error.contains("\"sandbox-py\""), "{error}");
    assert!(
        error.contains(&format!("exceeded its memory limit of {} bytes", 96 << 20)),
        "{error}"
    );
    assert!(
        error.contains("processing the batch of commit lsn"),
        "{error}"
    );
    // The batch is the insert's: its commit record lies before the position read after it.
    let batch_lsn: tributary::Lsn = error
        .split("commit lsn ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        batch_lsn < stopped.after_insert,
        "{error} (after the insert: {})",
        stopped.after_insert
    );
    assert_eq!(
        stopped.confirmed_after, stopped.confirmed_before,
        "nothing was confirmed"
    );
}
