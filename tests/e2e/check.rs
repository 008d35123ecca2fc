//! `tributary check` checks the whole pipeline, not only the source (issue 21): each case below
//! once passed the check ("ready", exit 0) and was then refused by `tributary run`. Now the
//! check exits 1 with a FAIL line that says exactly what the run's refusal says.

use std::path::Path;
use std::time::Duration;

use tributary::lake::commit::{FORMAT, PipelineIdentity, Writer};
use tributary_tests::pipeline::events_database;
use tributary_tests::plugin;
use tributary_tests::service::{Fixture, Service};

/// `tributary <command> --config <file>`: exit code, stdout, stderr.
async fn tributary(command: &str, file: &Path) -> (i32, String, String) {
    tributary_tests::service::command(command, file, &[], &[]).await
}

/// The check's one failure, which must also be the run's refusal: the check exits 1 with that
/// FAIL line and a summary of one problem, and the run stops with the same text as its error.
pub(crate) async fn refused_alike(file: &Path, dir: &Path) -> String {
    let (code, out, err) = tributary("check", file).await;
    assert_eq!(code, 1, "check passed what a run refuses:\n{out}{err}");
    let fails: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL  "))
        .collect();
    assert_eq!(fails.len(), 1, "{out}");
    assert!(out.ends_with("check: 1 problem to fix\n"), "{out}");
    assert!(!out.contains("is ready"), "{out}");
    let reason = fails[0].to_owned();

    let mut run = Service::spawn(file, &[], &dir.join("run.log"));
    let status = run.wait_exit(Duration::from_secs(120)).await;
    let log = run.log();
    assert!(!status.success(), "it started:\n{log}");
    let said = log
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error from the run:\n{log}"));
    assert_eq!(said, reason, "the check and the run give different reasons");
    reason
}

/// Make `fx`'s sink another pipeline's: one that reads slot `another_slot` of database
/// `database` on another server.
async fn claimed_by_another_pipeline(fx: &Fixture, database: &str) {
    let theirs = PipelineIdentity {
        format: FORMAT,
        system_identifier: "7000".into(),
        database: database.to_owned(),
        slot: "another_slot".into(),
        created_by: Writer::named("aaaa"),
        created_at: 1,
    };
    fx.log.claim_identity(&theirs).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_cannot_load_fails_the_check_as_it_fails_the_run() {
    let db = events_database("check_plugin").await;
    let mut fx = Fixture::new(&db.url, "check_plugin", &["public.events"]).await;
    let missing = fx.dir.join("missing.wasm");
    let notes = fx.dir.join("notes.wasm");
    std::fs::write(&notes, "these are notes, not a plugin\n").unwrap();

    fx.cfg.transforms = vec![missing.clone()];
    let reason = refused_alike(&fx.cfg.write(&fx.dir), &fx.dir).await;
    assert_eq!(
        reason,
        format!(
            "cannot read plugin {}: No such file or directory (os error 2)",
            missing.display()
        ),
        "the cause said once"
    );

    fx.cfg.transforms = vec![notes.clone()];
    let reason = refused_alike(&fx.cfg.write(&fx.dir), &fx.dir).await;
    assert!(
        reason.starts_with(&format!(
            "plugin {} is not a usable transform: not a WebAssembly file",
            notes.display()
        )),
        "{reason}"
    );

    // A plugin whose init refuses its settings: loaded and initialized as a run does.
    fx.cfg.transforms = Vec::new();
    let file = fx.cfg.write(&fx.dir);
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!(
        "\n[[transform]]\nplugin = {:?}\nconfig = {{ mode = \"scramble\", columns = \"body\" }}\n",
        plugin("mask").display().to_string()
    ));
    std::fs::write(&file, text).unwrap();
    let reason = refused_alike(&file, &fx.dir).await;
    assert!(
        reason.contains("refused its configuration")
            && reason.contains("mode = \"scramble\": expected hash or redact"),
        "{reason}"
    );

    // The same plugin with settings it takes passes, and the check names it.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"scramble\"", "\"redact\"");
    std::fs::write(&file, text).unwrap();
    let (code, out, err) = tributary("check", &file).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ok    plugin \"mask\"") && out.contains("its init accepted its settings"),
        "{out}"
    );
    assert!(
        out.ends_with("check: the pipeline is ready to run\n"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_of_another_pipeline_fails_the_check_as_it_fails_the_run() {
    let db = events_database("check_owner").await;
    let fx = Fixture::new(&db.url, "check_owner", &["public.events"]).await;
    // The sink already belongs to a pipeline reading another slot.
    claimed_by_another_pipeline(&fx, &db.name).await;
    let reason = refused_alike(&fx.file, &fx.dir).await;
    assert!(
        reason.starts_with("the sink belongs to another pipeline: slot \"another_slot\""),
        "{reason}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_url_that_is_a_path_fails_the_check_as_it_fails_the_run() {
    let db = events_database("check_path").await;
    let mut fx = Fixture::new(&db.url, "check_path", &["public.events"]).await;
    let lake = fx.dir.join("lake");
    fx.cfg.sink_url = lake.display().to_string();
    fx.cfg.sink_options = Vec::new();
    let reason = refused_alike(&fx.cfg.write(&fx.dir), &fx.dir).await;
    assert!(
        reason.starts_with(&format!(
            "sink url {:?} is not a URL",
            lake.display().to_string()
        )),
        "{reason}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// An S3 endpoint where nothing listens: one sentence naming the endpoint and what to do,
/// not the store client's error nested in itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_sink_is_one_sentence_in_the_check() {
    let db = events_database("check_s3").await;
    let mut fx = Fixture::new(&db.url, "check_s3", &["public.events"]).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    for option in &mut fx.cfg.sink_options {
        if option.0 == "aws_endpoint" {
            option.1 = endpoint.clone();
        }
    }
    let (code, out, err) = tributary("check", &fx.cfg.write(&fx.dir)).await;
    assert_eq!(code, 1, "{out}{err}");
    let fail = out
        .lines()
        .find_map(|l| l.strip_prefix("FAIL  "))
        .unwrap_or_else(|| panic!("no failure:\n{out}{err}"));
    assert!(
        fail.contains(&format!("cannot reach the S3 endpoint {endpoint}"))
            && fail.contains("aws_endpoint"),
        "{fail}"
    );
    assert!(fail.len() < 400, "{} bytes: {fail}", fail.len());
    assert_eq!(fail.matches(&endpoint).count(), 1, "{fail}");
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// The first check on an ordinary table (issue 21): a primary key, a `numeric(10,2)` and a
/// `varchar(20)` column, under the default `unchanged_toast = "refuse"`. Such values are
/// bounded far below the TOAST threshold and never stored out of line, so neither the check
/// nor the run refuses them; a `text` column still gets the refusal, by the check and by the
/// run alike, naming only that column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_columns_never_need_the_unchanged_toast_choice() {
    let db = tributary_tests::fresh_database("check_toast").await;
    db.client
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, amount numeric(10,2), code varchar(20))",
        )
        .await
        .unwrap();
    let fx = Fixture::new(&db.url, "check_toast", &["public.orders"]).await;
    // The default policy: the fixture's file chooses "null".
    let text = fx.cfg.toml().replace("unchanged_toast = \"null\"\n", "");
    assert!(!text.contains("unchanged_toast"), "{text}");
    std::fs::write(&fx.file, text).unwrap();

    let (code, out, err) = tributary("check", &fx.file).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ok    tables: 1 of 1 with a usable replica identity"),
        "{out}"
    );
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("bounded.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // While it runs, the check names who holds the slot, not only the walsender's pid.
    let (code, out, err) = tributary("check", &fx.file).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(", held by \"tributary ")
            && out.contains(" (walsender pid ")
            && out.contains("(a start waits for it)"),
        "{out}"
    );
    run.stop().await;

    db.client
        .batch_execute("ALTER TABLE orders ADD COLUMN note text")
        .await
        .unwrap();
    let reason = refused_alike(&fx.file, &fx.dir).await;
    assert!(
        reason.starts_with(
            "table public.orders has columns PostgreSQL may store out of line as TOAST (note)"
        ),
        "{reason}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// A pipeline file that is not there: could not check (exit 2), the cause said once.
#[tokio::test]
async fn a_missing_pipeline_file_is_said_once() {
    let missing = std::env::temp_dir().join(tributary_tests::unique_name("missing.toml"));
    let (code, out, err) = tributary("check", &missing).await;
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: cannot read pipeline file {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}

/// Several problems in different parts of the pipeline at once: a source table whose
/// unchanged TOAST values need a choice, a sink that is another pipeline's, a plugin that is
/// missing. The check lists each (the first does not hide the others: the replication
/// connection and the sink's owner are still looked at), and the run refuses with the same
/// list, before anything is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problems_of_the_source_the_sink_and_a_plugin_are_listed_together_by_check_and_run() {
    let db = events_database("check_several").await;
    let mut fx = Fixture::new(&db.url, "check_several", &["public.events"]).await;
    claimed_by_another_pipeline(&fx, &db.name).await;
    let missing = fx.dir.join("missing.wasm");
    fx.cfg.transforms = vec![missing.clone()];
    let file = fx.cfg.write(&fx.dir);
    // The default unchanged_toast = "refuse", which a text column of the default replica
    // identity fails.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("unchanged_toast = \"null\"\n", "")).unwrap();

    let (code, out, err) = tributary("check", &file).await;
    assert_eq!(code, 1, "{out}{err}");
    let fails: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL  "))
        .collect();
    assert_eq!(fails.len(), 3, "{out}");
    assert!(fails[0].contains("unchanged_toast"), "{out}");
    assert!(
        out.contains("ok    connection (replication)"),
        "the replication connection was not tried:\n{out}"
    );
    assert!(
        fails[1]
            == format!(
                "cannot read plugin {}: No such file or directory (os error 2)",
                missing.display()
            ),
        "{out}"
    );
    assert!(
        fails[2].starts_with("the sink belongs to another pipeline: slot \"another_slot\""),
        "{out}"
    );
    assert!(out.contains("check: 3 problems to fix"), "{out}");

    let mut run = Service::spawn(&file, &[], &fx.dir.join("run.log"));
    let status = run.wait_exit(Duration::from_secs(120)).await;
    let log = run.log();
    assert!(!status.success(), "it started:\n{log}");
    assert!(
        log.contains("this pipeline cannot start: 3 problems, each with its fix"),
        "{log}"
    );
    for (i, fail) in fails.iter().enumerate() {
        assert!(
            log.contains(&format!("{}. {fail}", i + 1)),
            "the run does not list {fail:?}:\n{log}"
        );
    }
    assert_eq!(
        tributary_tests::pipeline::slot_and_publication(&db, &fx.name).await,
        (false, false),
        "a refused start created something"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}
