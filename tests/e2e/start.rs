//! Where a pipeline starts, what it provisions, and what it checks first (issue 11): each
//! `source.start_from` lands exactly the changes it names, on a slot that already held some;
//! `slot_behavior = "reuse"` refuses a missing slot; `tributary check` reports every problem of
//! a source at once with its fix; `tributary teardown` drops only what Tributary created, and
//! asks first; one start-up line says how a run starts.

use std::path::Path;
use std::time::Duration;

use tributary_tests::lake::committed_rows;
use tributary_tests::pipeline::events_database;
use tributary_tests::service::{Fixture, Service, tributary_bin};
use tributary_tests::{TestDatabase, unique_name};

const TABLE: &str = "public.events";

/// A slot the operator made beside its publication, holding inserts `ids` written before any
/// pipeline ran. Returns the server's WAL position after them.
async fn slot_holding(db: &TestDatabase, name: &str, ids: &[i32]) -> String {
    // Two statements, not one batch: a slot cannot be created in a transaction that wrote.
    db.client
        .batch_execute(&format!("CREATE PUBLICATION {name} FOR TABLE events"))
        .await
        .unwrap();
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&name],
        )
        .await
        .unwrap();
    insert(db, ids).await;
    current_lsn(db).await
}

async fn insert(db: &TestDatabase, ids: &[i32]) {
    for id in ids {
        db.client
            .execute("INSERT INTO events VALUES ($1, 'x')", &[id])
            .await
            .unwrap();
    }
}

async fn current_lsn(db: &TestDatabase) -> String {
    db.client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0)
}

async fn landed_ids(fx: &Fixture) -> Vec<String> {
    committed_rows(&fx.sink, TABLE)
        .await
        .iter()
        .map(|r| r.values["id"].clone().unwrap())
        .collect()
}

/// Run the pipeline from the file as it is, insert `after` once it streams, wait for
/// `expected` changes in all, stop it; returns its log.
async fn run_once(
    fx: &Fixture,
    db: &TestDatabase,
    log_name: &str,
    after: &[i32],
    expected: u64,
) -> String {
    let file = fx.cfg.write(&fx.dir);
    let mut run = Service::spawn(&file, &[], &fx.dir.join(log_name));
    run.wait_for_log("streaming", Duration::from_secs(60)).await;
    insert(db, after).await;
    run.wait_for_landed(&fx.log, expected, Duration::from_secs(60))
        .await;
    run.stop().await
}

/// `tributary run` that must refuse; its log.
async fn refused(file: &Path, dir: &Path) -> String {
    let mut run = Service::spawn(file, &[], &dir.join("refused.log"));
    let status = run.wait_exit(Duration::from_secs(60)).await;
    assert!(!status.success(), "it started:\n{}", run.log());
    run.log()
}

fn reuse(fx: &mut Fixture, start_from: &str) {
    fx.cfg.source = vec![
        ("slot_behavior".into(), "\"reuse\"".into()),
        ("publication_behavior".into(), "\"reuse\"".into()),
        ("start_from".into(), format!("\"{start_from}\"")),
    ];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_on_a_reused_slot_lands_what_it_held_and_says_so_at_start() {
    let db = events_database("start_head").await;
    let mut fx = Fixture::new(&db.url, "start_head", &[TABLE]).await;
    slot_holding(&db, &fx.name, &[1, 2]).await;
    reuse(&mut fx, "head");
    let said = run_once(&fx, &db, "head.log", &[3], 3).await;
    assert_eq!(landed_ids(&fx).await, ["1", "2", "3"], "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("streaming") && l.contains("mode="))
        .unwrap_or_else(|| panic!("no start-up line:\n{said}"));
    for part in [
        "mode=\"first run from the head: everything the slot holds, from ".to_owned(),
        format!("slot={}", fx.name),
        format!("publication={}", fx.name),
        "tables=\"public.events\"".to_owned(),
        "plugins=\"none\"".to_owned(),
        "position=".to_owned(),
    ] {
        assert!(line.contains(&part), "{part:?} missing from {line}");
    }
    let first = fx.log.read_entry(1).await.unwrap().unwrap();
    assert_eq!(
        first.started_from.as_ref().map(|s| s.start_from.as_str()),
        Some("head"),
        "the first open entry records the start"
    );

    // A later run resumes, whatever start_from says now, and says that it ignores it; so does
    // the check.
    reuse(&mut fx, "tail");
    let (code, out, err) = tributary("check", &fx.cfg.write(&fx.dir), &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ok    start: resumes from the sink's commit log at ")
            && out.contains("warn  source.start_from = \"tail\" is ignored"),
        "{out}"
    );
    let said = run_once(&fx, &db, "again.log", &[4], 4).await;
    assert!(
        said.contains("mode=\"resuming from the commit log at"),
        "{said}"
    );
    assert!(
        said.contains(
            "source.start_from = \"tail\" is ignored: it applies to a pipeline's first run only"
        ) && said.contains("its first run started from \"head\" at"),
        "{said}"
    );
    assert_eq!(landed_ids(&fx).await, ["1", "2", "3", "4"]);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_on_a_reused_slot_skips_what_it_held_even_after_a_restart() {
    let db = events_database("start_tail").await;
    let mut fx = Fixture::new(&db.url, "start_tail", &[TABLE]).await;
    slot_holding(&db, &fx.name, &[1, 2]).await;
    reuse(&mut fx, "tail");
    let said = run_once(&fx, &db, "tail.log", &[3], 1).await;
    assert!(said.contains("mode=\"first run from the tail"), "{said}");
    assert_eq!(landed_ids(&fx).await, ["3"], "{said}");
    // The lake starts at the tail: a restart does not go back to what the slot held.
    let said = run_once(&fx, &db, "again.log", &[4], 2).await;
    assert_eq!(landed_ids(&fx).await, ["3", "4"], "{said}");
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_position_lands_from_there_and_one_behind_the_slot_is_refused() {
    let db = events_database("start_lsn").await;
    let mut fx = Fixture::new(&db.url, "start_lsn", &[TABLE]).await;
    let between = slot_holding(&db, &fx.name, &[1]).await;
    insert(&db, &[2]).await;
    reuse(&mut fx, &format!("lsn:{between}"));
    let said = run_once(&fx, &db, "lsn.log", &[3], 2).await;
    assert_eq!(landed_ids(&fx).await, ["2", "3"], "{said}");
    let first = fx.log.read_entry(1).await.unwrap().unwrap();
    let started = first
        .started_from
        .expect("the first open entry records the start");
    assert_eq!(started.start_from, format!("lsn:{between}"));
    assert_eq!(started.lsn.to_string(), between);

    // Another pipeline on a slot confirmed past the position it asks for.
    let db = events_database("start_lsn_behind").await;
    let mut fx = Fixture::new(&db.url, "start_lsn_behind", &[TABLE]).await;
    let behind = slot_holding(&db, &fx.name, &[1]).await;
    insert(&db, &[2]).await;
    let confirmed: String = db
        .client
        .query_one(
            "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())::text",
            &[&fx.name],
        )
        .await
        .unwrap()
        .get(0);
    let confirmed = confirmed
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .nth(1)
        .unwrap()
        .to_owned();
    reuse(&mut fx, &format!("lsn:{behind}"));
    let file = fx.cfg.write(&fx.dir);
    let refusal = format!(
        "source.start_from = \"lsn:{behind}\" is behind slot \"{}\"'s confirmed position {confirmed}",
        fx.name
    );
    let said = refused(&file, &fx.dir).await;
    assert!(said.contains(&refusal), "{said}");
    // The check says it too, before any run.
    let (code, out, _) = tributary("check", &file, &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("FAIL  {refusal}")), "{out}");
    assert!(
        fx.log.sequences().await.unwrap().is_empty(),
        "a refused start commits nothing"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusing_a_missing_slot_is_refused_before_anything_is_created() {
    let db = events_database("start_reuse_missing").await;
    let mut fx = Fixture::new(&db.url, "start_reuse_missing", &[TABLE]).await;
    fx.cfg.source = vec![("slot_behavior".into(), "\"reuse\"".into())];
    let said = refused(&fx.cfg.write(&fx.dir), &fx.dir).await;
    assert!(
        said.contains(&format!(
            "slot \"{0}\" does not exist and source.slot_behavior = \"reuse\" does not create it; \
             run: SELECT pg_create_logical_replication_slot('{0}', 'pgoutput'), or set \
             source.slot_behavior = \"create\"",
            fx.name
        )),
        "{said}"
    );
    let publications: i64 = db
        .client
        .query_one("SELECT count(*) FROM pg_publication", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(publications, 0, "the publication was created anyway");
    assert!(fx.log.sequences().await.unwrap().is_empty());

    // The old spelling still works, and says what replaces it.
    fx.cfg.source = vec![("create_slot".into(), "false".into())];
    let said = refused(&fx.cfg.write(&fx.dir), &fx.dir).await;
    assert!(
        said.contains("source.create_slot is deprecated and will be removed: write source.slot_behavior = \"reuse\" instead")
            && said.contains("does not exist and source.slot_behavior = \"reuse\""),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// `tributary <command> --config <file> <args>` with stdin not a terminal.
async fn tributary(command: &str, file: &Path, args: &[&str]) -> (i32, String, String) {
    tributary_tests::service::command(command, file, args, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_every_problem_at_once_with_its_fix() {
    let db = events_database("start_check").await;
    let role = unique_name("start_check_role");
    db.client
        .batch_execute(&format!(
            "CREATE TABLE bare (id int, n int);
             CREATE ROLE {role} LOGIN;"
        ))
        .await
        .unwrap();
    let mut fx = Fixture::new(&db.url, "start_check", &[TABLE, "public.bare"]).await;
    fx.cfg.source_url = db
        .url
        .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    let file = fx.cfg.write(&fx.dir);
    let (code, out, err) = tributary("check", &file, &[]).await;
    assert_eq!(code, 1, "{out}{err}");
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    let warns: Vec<&str> = out.lines().filter(|l| l.starts_with("warn")).collect();
    let has = |lines: &[&str], text: &str| lines.iter().any(|l| l.contains(text));
    assert!(
        has(&fails, &format!("run: ALTER ROLE {role} REPLICATION")),
        "{out}"
    );
    assert!(
        has(&fails, "table public.bare has no usable replica identity")
            && has(&fails, "run: ALTER TABLE public.bare ADD PRIMARY KEY"),
        "{out}"
    );
    assert!(
        has(
            &fails,
            &format!("publication \"{}\" does not exist, and role", fx.name)
        ) && has(
            &fails,
            &format!(
                "it lacks CREATE on database \"{}\", and it does not own public.events, public.bare",
                db.name
            )
        ),
        "{out}"
    );
    assert!(
        has(
            &warns,
            &format!("run: GRANT SELECT ON public.events TO {role}")
        ),
        "{out}"
    );
    assert!(out.contains("ok    wal_level = logical"), "{out}");
    assert!(
        out.ends_with("check: 3 problems to fix, 2 warnings\n"),
        "{out}"
    );

    // A full load needs SELECT: the warnings become failures.
    fx.cfg.source = vec![("start_from".into(), "\"full\"".into())];
    let file = fx.cfg.write(&fx.dir);
    let (code, out, _) = tributary("check", &file, &[]).await;
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!(
            "FAIL  role \"{role}\" cannot SELECT from table public.bare, which the full load"
        )),
        "{out}"
    );

    // A run refuses with the same whole report, before it creates anything.
    fx.cfg.source = Vec::new();
    let said = refused(&fx.cfg.write(&fx.dir), &fx.dir).await;
    assert!(
        said.contains("this pipeline cannot start: 3 problems, each with its fix")
            && said.contains("  1. role")
            && said.contains("  3. table public.bare"),
        "{said}"
    );

    // Fixed, the check passes.
    db.client
        .batch_execute(&format!(
            "ALTER ROLE {role} REPLICATION;
             ALTER TABLE bare ADD PRIMARY KEY (id);
             CREATE PUBLICATION {} FOR TABLE events, bare;
             GRANT SELECT ON events, bare TO {role};",
            fx.name
        ))
        .await
        .unwrap();
    let (code, out, err) = tributary("check", &file, &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.ends_with("check: the pipeline is ready to run\n"),
        "{out}"
    );

    // An unreachable source: could not check.
    fx.cfg.source_url = "postgres://postgres@127.0.0.1:1/none".into();
    let (code, _, err) = tributary("check", &fx.cfg.write(&fx.dir), &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot connect to the source database"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// `tributary teardown --config <file>` on a terminal (through `script`, which gives it a
/// pseudo-terminal), answering `answer`.
async fn teardown_on_a_terminal(file: &Path, answer: &str) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let command = format!(
        "'{}' teardown --config '{}'",
        tributary_bin().display(),
        file.display()
    );
    let mut child = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script(1) runs");
    let mut stdin = child.stdin.take().unwrap();
    // The question comes after the plan is read; answering early only waits in the terminal.
    stdin
        .write_all(format!("{answer}\n").as_bytes())
        .await
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("teardown finished")
        .unwrap();
    drop(stdin);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).replace('\r', ""),
    )
}

async fn exists(db: &TestDatabase, catalog: &str, column: &str, name: &str) -> bool {
    db.client
        .query_opt(
            &format!("SELECT 1 FROM {catalog} WHERE {column} = $1"),
            &[&name],
        )
        .await
        .unwrap()
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_drops_only_what_tributary_created_and_asks_first() {
    let db = events_database("start_teardown").await;
    let fx = Fixture::new(&db.url, "start_teardown", &[TABLE]).await;
    // The operator made the publication; Tributary makes the slot.
    db.client
        .batch_execute(&format!("CREATE PUBLICATION {} FOR TABLE events", fx.name))
        .await
        .unwrap();
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(60)).await;

    // Refused while the pipeline holds the slot.
    let (code, _, err) = tributary("teardown", &fx.file, &["--yes"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!("slot \"{}\" is held by \"tributary ", fx.name))
            && err.contains("(walsender pid ")
            && err.contains("stop the pipeline first"),
        "{err}"
    );
    run.stop().await;

    // Without a terminal it asks for --yes and drops nothing.
    let (code, out, err) = tributary("teardown", &fx.file, &[]).await;
    assert_ne!(code, 0);
    assert!(
        out.contains(&format!(
            "will drop slot \"{}\" (created by tributary",
            fx.name
        )) && out.contains(&format!(
            "left alone: publication \"{}\" exists but was not created by tributary",
            fx.name
        )),
        "{out}"
    );
    assert!(err.contains("pass --yes to drop without asking"), "{err}");
    assert!(exists(&db, "pg_replication_slots", "slot_name", &fx.name).await);
    // On a terminal it asks; anything but yes drops nothing.
    let (ok, out) = teardown_on_a_terminal(&fx.file, "n").await;
    assert!(
        !ok && out.contains("drop them? [y/N]") && out.contains("nothing dropped"),
        "{out}"
    );
    assert!(exists(&db, "pg_replication_slots", "slot_name", &fx.name).await);

    let (code, out, err) = tributary("teardown", &fx.file, &["--yes"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("dropped slot \"{}\"", fx.name)),
        "{out}"
    );
    assert!(!exists(&db, "pg_replication_slots", "slot_name", &fx.name).await);
    assert!(
        exists(&db, "pg_publication", "pubname", &fx.name).await,
        "the operator's publication was dropped"
    );
    // Nothing is left to drop.
    let (code, out, _) = tributary("teardown", &fx.file, &["--yes"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("nothing to drop"), "{out}");
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_drops_a_publication_tributary_created() {
    let db = events_database("start_teardown_pub").await;
    let fx = Fixture::new(&db.url, "start_teardown_pub", &[TABLE]).await;
    let said = run_once(&fx, &db, "run.log", &[1], 1).await;
    assert!(said.contains("created publication"), "{said}");
    let (ok, out) = teardown_on_a_terminal(&fx.file, "y").await;
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("dropped slot \"{}\"", fx.name))
            && out.contains(&format!("dropped publication \"{}\"", fx.name)),
        "{out}"
    );
    assert!(!exists(&db, "pg_publication", "pubname", &fx.name).await);
    assert!(!exists(&db, "pg_replication_slots", "slot_name", &fx.name).await);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// A stop asked for while a plugin compiles (half a minute for a Python plugin, in the
/// preflight that loads it first) is honoured at the next step: the process leaves the compile unfinished, exits cleanly and creates
/// nothing, instead of finishing the compile and starting to stream first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_a_plugin_compiles_ends_the_start_there() {
    let db = events_database("start_stop_compiling").await;
    let mut fx = Fixture::new(&db.url, "start_stop_compiling", &[TABLE]).await;
    fx.cfg.transforms = vec![tributary_tests::guest_plugin("python", "passthrough")];
    let file = fx.cfg.write(&fx.dir);
    // A cache of its own, so the plugin really compiles.
    let cache = fx.dir.join("plugin-cache");
    let mut service = Service::spawn_with(
        &file,
        &[],
        &fx.dir.join("run.log"),
        &[("TRIBUTARY_PLUGIN_CACHE", cache.to_str().unwrap())],
    );
    service
        .wait_for_log("compiling the plugin", Duration::from_secs(60))
        .await;
    service.signal(libc::SIGINT);
    let status = service.wait_exit(Duration::from_secs(60)).await;
    let log = service.log();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(
        log.contains("asked to stop during the preflight: stopping before anything is created"),
        "{log}"
    );
    assert!(
        !log.contains("compiled the plugin") && !log.contains("streaming"),
        "the start went on after the stop:\n{log}"
    );
    assert_eq!(
        tributary_tests::pipeline::slot_and_publication(&db, &fx.name).await,
        (false, false),
        "nothing was created"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}
