//! The metrics endpoint of a real `tributary run`: what landed, where the slot is confirmed,
//! and what each plugin counted and sent to the dead-letter output, labelled with the plugin;
//! and an address in use refused before the slot or the publication is created.

use std::time::Duration;

use tributary_tests::plugin;
use tributary_tests::service::{Fixture, Service, metric as sample, scrape};

const TABLE: &str = "public.signups";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_counters_and_dead_letters_reach_the_metrics_labelled_with_the_plugin() {
    let db = tributary_tests::fresh_database("metrics").await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE {TABLE} (id bigint PRIMARY KEY, email text, payload text)"
        ))
        .await
        .unwrap();
    let fixture = Fixture::new(&db.url, "metrics", &[TABLE]).await;
    // The mask counts what it masked; flatten rejects the row whose payload is not JSON.
    let mut text = fixture.cfg.toml();
    text.push_str(&format!(
        "\n[[transform]]\nplugin = {:?}\nconfig = {{ columns = \"email\" }}\n\
         \n[[transform]]\nplugin = {:?}\non_error = \"dead-letter\"\n\
         config = {{ column = \"payload\", fields = \"plan:text\", copy = \"id:int8\" }}\n\
         \n[metrics]\nlisten = \"127.0.0.1:0\"\n",
        plugin("mask").display().to_string(),
        plugin("flatten").display().to_string(),
    ));
    std::fs::write(&fixture.file, text).unwrap();
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let address = service.metrics_address();

    db.client
        .batch_execute(&format!(
            r#"INSERT INTO {TABLE} VALUES (1, 'ann@example.com', '{{"plan": "pro"}}'),
                                          (2, 'bob@example.com', '{{"plan": "free"}}'),
                                          (3, 'cy@example.com', '{{oops');
               INSERT INTO {TABLE} VALUES (4, 'di@example.com', '{{"plan": "pro"}}');"#
        ))
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 4, Duration::from_secs(60))
        .await;
    let metrics = scrape(&address).await;
    let entry = fixture.log.latest().await.unwrap().unwrap();

    assert_eq!(
        sample(&metrics, "tributary_changes_total"),
        Some(4),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "tributary_streaming"),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "tributary_confirmed_lsn"),
        Some(entry.last_end_lsn.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"tributary_plugin_counter_total{plugin="mask",counter="values_masked"}"#
        ),
        Some(4),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"tributary_dead_letters_total{plugin="flatten"}"#
        ),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, r#"tributary_dead_letters_total{plugin="mask"}"#),
        Some(0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "tributary_dead_letters_committed"),
        Some(1),
        "{metrics}"
    );
    let calls = sample(&metrics, r#"tributary_plugin_calls_total{plugin="mask"}"#).unwrap();
    assert!(calls >= 1, "{metrics}");

    // The counters are in the log too, with the plugin's name.
    let log = service.stop().await;
    assert!(log.contains("plugin counters so far: "), "{log}");
    assert!(log.contains("values_masked"), "{log}");
    let last = log
        .lines()
        .rfind(|l| l.contains("plugin counters: "))
        .unwrap_or_else(|| panic!("no final plugin counters in the log:\n{log}"));
    assert!(last.contains("flatten: "), "{last}");
    assert!(last.contains("1 dead letters"), "{last}");
    assert!(last.contains("values_masked 4"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_address_in_use_is_refused_before_the_slot_is_created() {
    let db = tributary_tests::fresh_database("metrics_busy").await;
    db.client
        .batch_execute(&format!("CREATE TABLE {TABLE} (id bigint PRIMARY KEY)"))
        .await
        .unwrap();
    let fixture = Fixture::new(&db.url, "metrics_busy", &[TABLE]).await;
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = held.local_addr().unwrap();
    let mut text = fixture.cfg.toml();
    text.push_str(&format!("\n[metrics]\nlisten = \"{address}\"\n"));
    std::fs::write(&fixture.file, text).unwrap();

    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    let status = service.wait_exit(Duration::from_secs(60)).await;
    assert!(!status.success());
    let log = service.log();
    assert!(
        log.contains(&format!(
            "metrics.listen = \"{address}\": cannot listen there; choose a free port, or stop what holds it"
        )),
        "{log}"
    );
    let slots = db
        .client
        .query(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&fixture.name],
        )
        .await
        .unwrap();
    assert!(slots.is_empty(), "a slot was created:\n{log}");
    let publications = db
        .client
        .query(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&fixture.name],
        )
        .await
        .unwrap();
    assert!(publications.is_empty(), "a publication was created:\n{log}");
    drop(held);
}
