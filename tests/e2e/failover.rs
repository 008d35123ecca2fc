//! Database failover on PostgreSQL 17: a primary and a physical standby that synchronises the
//! primary's failover slots (`sync_replication_slots`), the standby promoted while a pipeline
//! runs, and the pipeline following it without a new full load.
//!
//! PostgreSQL 17 comes from `ensure_postgres17` in `scripts/lib.sh` (see
//! [`tributary_tests::postgres17_bin`]).

use std::time::Duration;

use tributary_cluster::{ClusterOptions, TempCluster};
use tributary_tests::{connect, postgres17_bin};

/// The physical slot the standby streams through, named in the primary's
/// `synchronized_standby_slots`.
const STANDBY_SLOT: &str = "standby";

/// A PostgreSQL 17 primary and its physical standby, both running.
fn primary_and_standby() -> (TempCluster, TempCluster) {
    let options = ClusterOptions {
        bin_dir: Some(postgres17_bin()),
        ..ClusterOptions::fast()
    }
    // A standby with hot_standby_feedback needs a walsender and a slot of its own.
    .setting("max_wal_senders", "10")
    .setting("max_replication_slots", "10");
    let primary = TempCluster::start(options.clone()).expect("a PostgreSQL 17 primary");
    assert!(
        primary.server_version().starts_with("17"),
        "{} holds PostgreSQL {}",
        primary.bin_dir().display(),
        primary.server_version()
    );
    let standby = primary
        .start_standby(STANDBY_SLOT, options)
        .expect("a standby of the primary");
    (primary, standby)
}

/// The standby's view of a slot: whether it exists there, synchronised from the primary and
/// no longer temporary (a synchronised slot is usable after a promotion only then).
async fn synced_on(client: &tokio_postgres::Client, slot: &str) -> bool {
    client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary",
            &[&slot],
        )
        .await
        .unwrap()
        .is_some()
}

/// The timeline a primary writes on, from the name of its current WAL file (the control
/// file's checkpoint says so only after the first checkpoint on the new timeline).
async fn timeline(client: &tokio_postgres::Client) -> u32 {
    let file: String = client
        .query_one("SELECT pg_walfile_name(pg_current_wal_lsn())", &[])
        .await
        .unwrap()
        .get(0);
    u32::from_str_radix(&file[..8], 16).unwrap()
}

/// The cluster support itself: the standby streams from the primary through its physical slot,
/// synchronises a logical failover slot, and once promoted is a primary on timeline 2 that
/// still holds that slot, marked as synchronised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_keeps_the_failover_slot_it_synchronised() {
    let (primary, standby) = primary_and_standby();
    let on_primary = connect(&primary.url("postgres")).await;
    let on_standby = connect(&standby.url("postgres")).await;
    let recovering: bool = on_standby
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(recovering, "the standby is in recovery");
    let physical: bool = on_primary
        .query_one(
            "SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'physical'",
            &[&STANDBY_SLOT],
        )
        .await
        .unwrap()
        .get(0);
    assert!(physical, "the standby streams through its physical slot");
    let standby_slots: String = on_primary
        .query_one("SHOW synchronized_standby_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(standby_slots, STANDBY_SLOT);

    on_primary
        .batch_execute(
            "SELECT pg_create_logical_replication_slot('moving', 'pgoutput', false, false, true);
             CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);",
        )
        .await
        .unwrap();
    // The standby persists a synchronised slot only once the primary's has moved past where
    // the standby can serve it from: a consumer confirms, here an advance.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !synced_on(&on_standby, "moving").await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the standby did not synchronise the slot"
        );
        on_primary
            .batch_execute(
                "INSERT INTO t SELECT max(id) + 1 FROM t; SELECT pg_log_standby_snapshot();
                 SELECT pg_replication_slot_advance('moving', pg_current_wal_lsn());",
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    primary
        .stop_server(tributary_cluster::StopMode::Fast)
        .unwrap();
    standby.promote().unwrap();
    drop(on_standby);
    let promoted = connect(&standby.url("postgres")).await;
    let recovering: bool = promoted
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!recovering);
    assert_eq!(timeline(&promoted).await, 2);
    assert!(synced_on(&promoted, "moving").await);
    let rows: i64 = promoted
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        rows >= 2,
        "what the primary committed is on the promoted standby"
    );
}
