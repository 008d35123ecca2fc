//! Trigger capture on the ordinary paths around a pipeline: its journal removed and installed
//! again while the application writes, and several pipelines capturing one database.

use std::collections::BTreeSet;
use std::time::Duration;

use tributary::lake::commit::AcceptedGap;
use tributary_tests::chaos::assert_lake_equals_source;
use tributary_tests::connect;
use tributary_tests::lake::committed_rows;
use tributary_tests::service::{Fixture, Service, command};

use super::triggers::replica_server;

/// A pipeline capturing `public.t` through triggers, in `schema` when one is named.
async fn trigger_fixture(url: &str, hint: &str, schema: Option<&str>) -> Fixture {
    let mut fx = Fixture::new(url, hint, &["public.t"]).await;
    fx.cfg.source = vec![("capture".into(), "\"trigger\"".into())];
    if let Some(schema) = schema {
        fx.cfg
            .source
            .push(("trigger_schema".into(), format!("{schema:?}")));
    }
    fx.file = fx.cfg.write(&fx.dir);
    fx
}

/// The ids of `public.t`'s rows landed in `fx`'s sink.
async fn landed_ids(fx: &Fixture) -> BTreeSet<i64> {
    committed_rows(&fx.sink, "public.t")
        .await
        .iter()
        .map(|r| r.values["id"].as_deref().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_removed_and_installed_again_is_refused_until_the_gap_is_named() {
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let fx = trigger_fixture(&url, "journal_gap", None).await;
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("run.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    app.batch_execute("INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g")
        .await
        .unwrap();
    run.wait_for_landed(&fx.log, 100, Duration::from_secs(60))
        .await;
    run.stop().await;
    let landed = fx.log.latest().await.unwrap().unwrap().last_end_lsn;

    // Removed while the application goes on writing: these changes reach no journal.
    let (code, out, err) = command("teardown", &fx.file, &["--yes"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    app.batch_execute("INSERT INTO t SELECT g, 'unseen' FROM generate_series(101, 150) g")
        .await
        .unwrap();

    // `check` and `run` refuse in one sentence, naming the gap to accept; nothing is installed.
    let token = format!("{}..new journal", landed.0);
    let sentence = format!(
        "the trigger journal in schema \"tributary\" does not exist but the sink already holds changes up to position {}",
        landed.0
    );
    let accept = format!("--accept-gap \"{token}\"");
    let (code, report, err) = command("check", &fx.file, &[], &[]).await;
    assert_eq!(code, 1, "{report}{err}");
    assert!(
        report.contains(&sentence) && report.contains(&accept),
        "{report}"
    );
    let (code, out, err) = command("run", &fx.file, &[], &[]).await;
    let said = format!("{out}{err}");
    assert!(
        code != 0 && said.contains(&sentence) && said.contains(&accept),
        "exit {code}: {said}"
    );
    let installed: bool = app
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'tributary')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!installed, "a refused start installed capture");

    // Named, the gap is taken and stated: in the log and in the commit log.
    let mut run = Service::spawn(
        &fx.file,
        &["--accept-gap", &token],
        &fx.dir.join("accepted.log"),
    );
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    app.batch_execute("INSERT INTO t SELECT g, 'after' FROM generate_series(151, 160) g")
        .await
        .unwrap();
    run.wait_for_landed(&fx.log, 110, Duration::from_secs(60))
        .await;
    let log = run.stop().await;
    assert!(
        log.contains("accepting the gap named by --accept-gap") && log.contains(&token),
        "{log}"
    );
    let latest = fx.log.latest().await.unwrap().unwrap().sequence;
    let mut gaps = Vec::new();
    for sequence in 1..=latest {
        if let Some(gap) = fx
            .log
            .read_entry(sequence)
            .await
            .unwrap()
            .and_then(|e| e.accepted_gap)
        {
            gaps.push(gap);
        }
    }
    assert_eq!(
        gaps,
        [AcceptedGap {
            from: landed,
            to: landed
        }]
    );
    let expected: BTreeSet<i64> = (1..=100).chain(151..=160).collect();
    assert_eq!(landed_ids(&fx).await, expected);

    // A restart reads on from the journal it claimed: no refusal, no gap.
    let mut run = Service::spawn(&fx.file, &[], &fx.dir.join("again.log"));
    run.wait_for_log("streaming", Duration::from_secs(120))
        .await;
    app.batch_execute("INSERT INTO t VALUES (161, 'again')")
        .await
        .unwrap();
    run.wait_for_landed(&fx.log, 111, Duration::from_secs(60))
        .await;
    let log = run.stop().await;
    assert!(
        log.contains("resuming after position") && !log.contains("accepting the gap"),
        "{log}"
    );
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_trigger_pipelines_in_one_database_capture_into_schemas_of_their_own() {
    let (cluster, url) = replica_server().await;
    let app = connect(&url).await;
    app.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let a = trigger_fixture(&url, "two_a", None).await;
    let b = trigger_fixture(&url, "two_b", Some("tributary_b")).await;
    let mut run_a = Service::spawn(&a.file, &[], &a.dir.join("run.log"));
    run_a
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let mut run_b = Service::spawn(&b.file, &[], &b.dir.join("run.log"));
    run_b
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    app.batch_execute(
        "INSERT INTO t SELECT g, 'both' FROM generate_series(1, 200) g;
         UPDATE t SET v = 'changed' WHERE id <= 10;
         DELETE FROM t WHERE id > 190;",
    )
    .await
    .unwrap();
    for (fx, run) in [(&a, &run_a), (&b, &run_b)] {
        run.wait_for_landed(&fx.log, 220, Duration::from_secs(60))
            .await;
        let figures = assert_lake_equals_source(&app, &fx.sink, &[("public.t", "id")]).await;
        assert_eq!(figures[0].changes, 220, "{figures:?}");
    }

    // A third pipeline on the first one's schema: `check` and `run` refuse in one sentence,
    // naming the sink the journal captures for.
    let c = trigger_fixture(&url, "two_c", None).await;
    let sentence = format!("captures for another sink, {}", a.cfg.sink_url);
    let (code, report, err) = command("check", &c.file, &[], &[]).await;
    assert!(
        code == 1 && report.contains(&sentence) && report.contains("source.trigger_schema"),
        "exit {code}: {report}{err}"
    );
    let (code, out, err) = command("run", &c.file, &[], &[]).await;
    assert!(
        code != 0 && format!("{out}{err}").contains(&sentence),
        "exit {code}: {out}{err}"
    );

    // Removing the second pipeline leaves the first one capturing.
    run_b.stop().await;
    let (code, out, err) = command("teardown", &b.file, &["--yes"], &[]).await;
    assert!(
        code == 0
            && out.contains(
                "removed trigger capture in schema \"tributary_b\": 4 triggers on 1 tables"
            ),
        "{out}{err}"
    );
    let (code, out, err) = command("teardown", &c.file, &["--yes"], &[]).await;
    assert!(code == 0 && out.contains("nothing to drop"), "{out}{err}");
    let triggers: Vec<String> = app
        .query(
            "SELECT tgname::text FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        triggers,
        [
            "tributary_capture_delete",
            "tributary_capture_insert",
            "tributary_capture_truncate",
            "tributary_capture_update"
        ]
    );
    app.batch_execute("INSERT INTO t SELECT g, 'after' FROM generate_series(1001, 1010) g")
        .await
        .unwrap();
    run_a
        .wait_for_landed(&a.log, 230, Duration::from_secs(60))
        .await;
    let figures = assert_lake_equals_source(&app, &a.sink, &[("public.t", "id")]).await;
    assert_eq!(figures[0].changes, 230, "{figures:?}");
    run_a.stop().await;
    assert_eq!(
        tributary_tests::lake::landed_changes(&b.log).await,
        220,
        "the removed pipeline's lake keeps what it landed"
    );
    drop(cluster);
}
