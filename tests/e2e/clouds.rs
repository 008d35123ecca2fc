//! Sinks in a cloud's own object store other than S3, against its emulator: Azure Blob
//! Storage (`az://`, `abfss://`) on Azurite and Google Cloud Storage (`gs://`) on
//! fake-gcs-server. A real `tributary run` killed with SIGKILL mid-flush lands every change
//! once in each, as Parquet, as Delta and as Iceberg, and `tributary check` reaches the
//! container or bucket and names what is wrong. On Azurite delta-rs and DuckDB read the Delta
//! tables back; their GCS clients speak the XML API, which fake-gcs-server does not serve, so
//! there `verify` and the commit log hold the tables. pyiceberg reads the Iceberg tables on
//! both, on Azure named `abfss://` as Spark and pyiceberg need them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tributary_tests::fresh_database;
use tributary_tests::lake::{
    committed_rows, object_names, read_delta, read_iceberg_with_pyiceberg,
};
use tributary_tests::pipeline::wait_for_confirmed;
use tributary_tests::service::{Fixture, Service, command, verify};

use super::crash::{TABLES, create_tables, kill_at, transaction};

/// Which emulator a test lands in.
#[derive(Clone, Copy)]
enum Cloud {
    Azure,
    Gcs,
}

/// What the run lands besides the data files and the commit log.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    Parquet,
    Delta,
    Iceberg,
}

/// Kill a run at `point` (its `hit`-th pass, in the second flush), start again, land a third
/// transaction: each table holds ids 1..=30 once, verify finds the lake equal to the source,
/// the slot is confirmed to the last entry, and no intent is left. Delta tables have one
/// version per flush (read back by delta-rs and DuckDB on Azurite), Iceberg tables one
/// snapshot per flush, audited by verify and read back by pyiceberg.
async fn killed(cloud: Cloud, hint: &str, point: &str, hit: u32, format: Format) {
    let db = fresh_database(hint).await;
    create_tables(&db).await;
    let mut fixture = match (cloud, format) {
        // Iceberg manifests name files by the sink's URL: the form Spark and pyiceberg read.
        (Cloud::Azure, Format::Iceberg) => Fixture::on_azure_abfss(&db.url, hint, &TABLES).await,
        (Cloud::Azure, _) => Fixture::on_azure(&db.url, hint, &TABLES).await,
        (Cloud::Gcs, _) => Fixture::on_gcs(&db.url, hint, &TABLES).await,
    };
    match format {
        Format::Parquet => {}
        Format::Delta => fixture.cfg.sink.push(("format".into(), "\"delta\"".into())),
        Format::Iceberg => fixture
            .cfg
            .sink
            .push(("format".into(), "\"iceberg\"".into())),
    }
    fixture.file = fixture.cfg.write(&fixture.dir);
    kill_at(&db, &fixture, point, hit).await;
    let mut b = Service::spawn(&fixture.file, &[], &fixture.dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(120)).await;
    db.client.batch_execute(&transaction(21)).await.unwrap();
    b.wait_for_landed(&fixture.log, 90, Duration::from_secs(60))
        .await;
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    let b_log = b.stop().await;
    for table in TABLES {
        let folder = format!("{}/{table}", fixture.cfg.sink_url);
        match (format, cloud) {
            (Format::Parquet, _) => {}
            // Each table's log: no gap, one version per flush with its `txn`, none twice.
            (Format::Delta, Cloud::Gcs) => {
                super::delta::check_history(&fixture.sink, &fixture.log, table).await;
            }
            (Format::Delta, Cloud::Azure) => {
                super::delta::check_history(&fixture.sink, &fixture.log, table).await;
                // read_delta has DuckDB's delta extension read the table a second time and
                // agree.
                let read = read_delta(&folder, &fixture.cfg.sink_options);
                assert_every_id_once(&read.rows, table, "delta-rs");
            }
            (Format::Iceberg, _) => {
                super::iceberg::assert_audited(&verified, table);
                let current = super::iceberg::check_snapshots(&fixture, table, None, &b_log).await;
                // pyiceberg opens every file by the URL the manifests name.
                let rows = read_iceberg_with_pyiceberg(
                    &folder,
                    &current.location,
                    &fixture.cfg.sink_options,
                );
                assert_every_id_once(&rows, table, "pyiceberg");
            }
        }
        let ids: Vec<u32> = committed_rows(&fixture.sink, table)
            .await
            .iter()
            .map(|r| r.values["id"].as_ref().unwrap().parse().unwrap())
            .collect();
        assert_eq!(ids.len(), 30, "{table}: a change landed twice: {b_log}");
        assert_eq!(
            ids.iter().copied().collect::<BTreeSet<_>>(),
            (1..=30).collect(),
            "{table}: {b_log}"
        );
    }
    let last = fixture.log.latest().await.unwrap().unwrap();
    assert_eq!(
        wait_for_confirmed(&db.client, &fixture.name, last.last_end_lsn).await,
        last.last_end_lsn,
        "the slot is confirmed to the last entry"
    );
    assert_eq!(
        object_names(fixture.sink.store().as_ref(), "_tributary/intent").await,
        Vec::<String>::new(),
        "no intent is left"
    );
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// `reader` read ids 1..=30 of `table`, each once.
fn assert_every_id_once(rows: &[BTreeMap<String, Option<String>>], table: &str, reader: &str) {
    let ids: BTreeSet<u32> = rows
        .iter()
        .map(|r| r["id"].as_deref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(rows.len(), 30, "{table}: {reader} reads every change once");
    assert_eq!(ids, (1..=30).collect(), "{table}: {reader}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_mid_flush_on_azure_lands_every_change_once_as_parquet() {
    killed(
        Cloud::Azure,
        "azure_parquet",
        "flush.after-file",
        4,
        Format::Parquet,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_mid_flush_on_gcs_lands_every_change_once_as_parquet() {
    killed(
        Cloud::Gcs,
        "gcs_parquet",
        "flush.after-file",
        4,
        Format::Parquet,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_commit_and_the_tables_on_azure_lands_every_change_once_as_delta() {
    killed(
        Cloud::Azure,
        "azure_delta",
        "flush.after-commit",
        2,
        Format::Delta,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_commit_and_the_tables_on_gcs_lands_every_change_once_as_delta() {
    killed(
        Cloud::Gcs,
        "gcs_delta",
        "flush.after-commit",
        2,
        Format::Delta,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_one_iceberg_table_on_azure_lands_every_change_once() {
    killed(
        Cloud::Azure,
        "azure_iceberg",
        "tables.after-table",
        4,
        Format::Iceberg,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_one_iceberg_table_on_gcs_lands_every_change_once() {
    killed(
        Cloud::Gcs,
        "gcs_iceberg",
        "tables.after-table",
        4,
        Format::Iceberg,
    )
    .await;
}

/// `check` against Azurite: the container reached with conditional puts; a missing container
/// and a refused key each named, with the setting that fixes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reaches_the_container_and_names_what_is_wrong() {
    let db = fresh_database("azure_check").await;
    create_tables(&db).await;
    let mut fixture = Fixture::on_azure(&db.url, "azure_check", &TABLES).await;
    let (code, out, err) = command("check", &fixture.file, &[], &[]).await;
    let url = fixture.cfg.sink_url.clone();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "ok    sink {url}: writable with conditional puts, its commit log is empty"
        )),
        "{out}"
    );

    // Iceberg tables named by az:// are told the ADLS form their other readers need.
    fixture
        .cfg
        .sink
        .push(("format".into(), "\"iceberg\"".into()));
    fixture.file = fixture.cfg.write(&fixture.dir);
    let (code, out, err) = command("check", &fixture.file, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let container = url.strip_prefix("az://").unwrap();
    assert!(
        out.contains(&format!(
            "warn  sink.url {url}: Iceberg manifests name each file by this URL, which DuckDB reads but Spark, Trino and pyiceberg do not; for them name the sink abfss://{container}@<account>.dfs.core.windows.net before its first flush"
        )) && out.contains("the pipeline is ready to run, 1 warning"),
        "{out}"
    );
    fixture.cfg.sink.pop();

    fixture.cfg.sink_url = "az://no-such-container".into();
    fixture.file = fixture.cfg.write(&fixture.dir);
    let (code, out, _) = command("check", &fixture.file, &[], &[]).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains(
            "the container \"no-such-container\" does not exist; create it, or fix sink.url"
        ),
        "{out}"
    );

    fixture.cfg.sink_url = url.clone();
    for (key, value) in fixture.cfg.sink_options.iter_mut() {
        if key == "azure_storage_account_key" {
            // A well-formed key that is not the account's.
            *value = "AAAA".repeat(22);
        }
    }
    fixture.file = fixture.cfg.write(&fixture.dir);
    let (code, out, _) = command("check", &fixture.file, &[], &[]).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        // Azurite answers a wrong key as Azure answers some: AuthorizationFailure.
        out.contains(&format!(
            "FAIL  sink {url}: access denied (AuthorizationFailure); check the account key"
        )) && out.contains("AZURE_STORAGE_ACCOUNT_KEY"),
        "{out}"
    );
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// `check` against fake-gcs-server: the bucket reached with conditional creates, and a
/// missing bucket named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reaches_the_gcs_bucket_and_names_a_missing_one() {
    let db = fresh_database("gcs_check").await;
    create_tables(&db).await;
    let mut fixture = Fixture::on_gcs(&db.url, "gcs_check", &TABLES).await;
    let (code, out, err) = command("check", &fixture.file, &[], &[]).await;
    let url = fixture.cfg.sink_url.clone();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "ok    sink {url}: writable with conditional puts, its commit log is empty"
        )),
        "{out}"
    );
    fixture.cfg.sink_url = "gs://no-such-bucket".into();
    fixture.file = fixture.cfg.write(&fixture.dir);
    let (code, out, _) = command("check", &fixture.file, &[], &[]).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("the bucket \"no-such-bucket\" does not exist; create it, or fix sink.url"),
        "{out}"
    );
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}
