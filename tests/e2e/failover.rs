//! Database failover on PostgreSQL 17: a primary and a physical standby that synchronises the
//! primary's failover slots (`sync_replication_slots`), the standby promoted while a pipeline
//! runs, and the pipeline following it without a new full load.
//!
//! PostgreSQL 17 comes from `ensure_postgres_major 17` in `scripts/lib.sh` (see
//! [`tributary_tests::postgres_bin`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use tributary::lake::commit::{CommitLog, Writer};
use tributary::lake::sink::Sink;
use tributary_cluster::{ClusterOptions, StopMode, TempCluster};
use tributary_tests::lake::landed_changes;
use tributary_tests::service::{Service, ServiceConfig, tributary_bin, verify};
use tributary_tests::{cluster_of, connect, postgres_bin, unique_name};

/// The physical slot the standby streams through, named in the primary's
/// `synchronized_standby_slots`.
const STANDBY_SLOT: &str = "standby";

/// A PostgreSQL 17 primary and its physical standby, both running.
pub(crate) fn primary_and_standby() -> (TempCluster, TempCluster) {
    let options = ClusterOptions {
        bin_dir: Some(postgres_bin(17)),
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

/// Whether the standby holds any copy of `slot`, temporary or not.
async fn copied_on(client: &tokio_postgres::Client, slot: &str) -> bool {
    client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .is_some()
}

/// Wait until the standby holds `slot`, synchronised and permanent.
///
/// The standby persists the slot once the primary's has moved past where the standby could
/// serve it from, which needs a running-transactions record after the pipeline confirmed (the
/// server writes one every 15 s; the test asks for one), and its slot sync worker looks less
/// often the longer nothing changes (up to every 30 s): turning it off and on wakes it. Only
/// while the standby has no copy at all: the worker drops its temporary copies when it stops,
/// and the copy it makes again must wait for a record after it, so waking it while it holds
/// one would undo what the pipeline's confirmation was about to finish.
async fn wait_until_synced(
    primary: &tokio_postgres::Client,
    standby: &tokio_postgres::Client,
    slot: &str,
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut round = 0;
    while !synced_on(standby, slot).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the standby did not synchronise slot {slot:?} within {timeout:?}"
        );
        primary
            .batch_execute("SELECT pg_log_standby_snapshot()")
            .await
            .unwrap();
        round += 1;
        if round % 5 == 0 && !copied_on(standby, slot).await {
            for statement in [
                "ALTER SYSTEM SET sync_replication_slots = off",
                "SELECT pg_reload_conf()",
                "SELECT pg_sleep(0.2)",
                "ALTER SYSTEM RESET sync_replication_slots",
                "SELECT pg_reload_conf()",
            ] {
                standby.batch_execute(statement).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A libpq URL naming both servers, the primary first, that connects to whichever accepts
/// writes: how an application finds the primary after a failover.
pub(crate) fn both(primary: &TempCluster, standby: &TempCluster) -> String {
    format!(
        "host={host},{host} port={},{} user=postgres dbname=postgres \
         target_session_attrs=read-write connect_timeout=5",
        primary.port(),
        standby.port(),
        host = primary.host(),
    )
}

/// A pipeline file landing `events` into a directory, with a failover slot, the standby named
/// for `tributary check`, and `url` as the source.
pub(crate) fn failover_pipeline(
    url: &str,
    standby: &TempCluster,
    dir: &Path,
) -> (String, std::path::PathBuf) {
    let name = unique_name("failover");
    let mut cfg = ServiceConfig::new(
        url,
        &name,
        &["public.events"],
        &format!("file://{}", dir.join("lake").display()),
    );
    cfg.source.push(("failover".into(), "true".into()));
    cfg.source.push((
        "standby_url".into(),
        format!("{:?}", standby.url("postgres")),
    ));
    let file = cfg.write(dir);
    (name, file)
}

pub(crate) async fn commit_log(dir: &Path) -> CommitLog {
    let lake = dir.join("lake");
    std::fs::create_dir_all(&lake).unwrap();
    let sink = Sink::open(&format!("file://{}", lake.display()), &Default::default()).unwrap();
    CommitLog::new(sink, Writer::new())
}

/// Inserts one row per transaction, numbered from 1, through `url` until `stop`; a failed
/// insert (the primary went away) is tried again on a new connection, which finds whichever
/// server accepts writes. `next` is the id the next insert takes.
fn workload(
    url: String,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicI32>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut client: Option<tokio_postgres::Client> = None;
        while !stop.load(Ordering::SeqCst) {
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                client = match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                    Ok((c, connection)) => {
                        tokio::spawn(connection);
                        Some(c)
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
            }
            let id = next.load(Ordering::SeqCst);
            let inserted = client
                .as_ref()
                .unwrap()
                .execute(
                    "INSERT INTO events VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                    &[&id, &format!("row {id}")],
                )
                .await;
            match inserted {
                Ok(_) => {
                    next.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(_) => {
                    client = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// `tributary check --config <file>`: its exit code and what it printed.
async fn check(file: &Path) -> (i32, String) {
    tributary("check", file).await
}

/// `tributary <command> --config <file>`: its exit code and what it printed.
pub(crate) async fn tributary(command: &str, file: &Path) -> (i32, String) {
    tributary_with(command, file, &[]).await
}

/// `tributary <command> --config <file> <args>`: its exit code and what it printed.
async fn tributary_with(command: &str, file: &Path, args: &[&str]) -> (i32, String) {
    let output = tokio::process::Command::new(tributary_bin())
        .args([command, "--config"])
        .arg(file)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code().unwrap_or(-1), printed)
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

/// The whole failover: a `tributary run` process reads a PostgreSQL 17 primary through a URL
/// naming the primary and its standby (`target_session_attrs=read-write`), with a failover slot
/// the standby synchronises. While rows keep being inserted, the primary stops and the standby
/// is promoted; the same process finds the new primary by itself, checks the switch point and
/// goes on without `--accept-gap` or a new full load, the commit log records the move, and
/// `tributary verify` finds the lake equal to the new primary: nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_pipeline_follows_a_promoted_standby() {
    let (primary, standby) = primary_and_standby();
    let on_primary = tributary_tests::pipeline::events_on(&primary).await;
    let url = both(&primary, &standby);
    let dir = std::env::temp_dir().join(unique_name("failover-run"));
    let (slot, file) = failover_pipeline(&url, &standby, &dir);
    let log = commit_log(&dir).await;

    let mut service = Service::spawn(&file, &[], &dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let failover: bool = on_primary
        .query_one(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    assert!(failover, "source.failover = true created a failover slot");

    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicI32::new(1));
    let writer = workload(url.clone(), stop.clone(), next.clone());
    service
        .wait_for_landed(&log, 50, Duration::from_secs(60))
        .await;
    let on_standby = connect(&standby.url("postgres")).await;
    wait_until_synced(&on_primary, &on_standby, &slot, Duration::from_secs(60)).await;
    drop(on_standby);

    // `tributary check` sees the failover slot, the primary waiting for its standby, and the
    // standby of source.standby_url synchronising the slot.
    let (code, said) = check(&file).await;
    assert_eq!(code, 0, "{said}");
    for line in [
        format!("ok    slot {slot:?}: a failover slot"),
        format!(
            "ok    synchronized_standby_slots = '{STANDBY_SLOT}': changes reach the pipeline \
             only once those standbys have them"
        ),
        format!(
            "ok    failover ready: the standby holds slot {slot:?} synchronised and persistent, \
             so a promotion keeps it"
        ),
    ] {
        assert!(
            said.lines().any(|l| l == line),
            "no line {line:?} in:\n{said}"
        );
    }
    // Pointed at the hot standby itself, it says whether decoding there works.
    let mut on_the_standby = ServiceConfig::new(
        &standby.url("postgres"),
        &slot,
        &["public.events"],
        "file:///unused",
    );
    on_the_standby.name = unique_name("on_standby");
    let (_, said) = check(&on_the_standby.write(&dir.join("standby"))).await;
    for line in [
        "ok    source.url is a hot standby: PostgreSQL 17.10 decodes on a standby",
        "ok    hot_standby_feedback = on: the primary keeps the catalog rows the slot needs",
    ] {
        assert!(
            said.lines().any(|l| l == line),
            "no line {line:?} in:\n{said}"
        );
    }

    // The failover, in the middle of the workload.
    primary.stop_server(StopMode::Fast).unwrap();
    standby.promote().unwrap();
    let promoted = connect(&standby.url("postgres")).await;
    assert_eq!(timeline(&promoted).await, 2);
    let switched_at = next.load(Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while next.load(Ordering::SeqCst) < switched_at + 50 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workload did not go on on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let rows: i64 = promoted
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    service
        .wait_for_landed(&log, rows as u64, Duration::from_secs(60))
        .await;
    assert!(
        service.exited().is_none(),
        "the process went on by itself:\n{}",
        service.log()
    );
    assert!(
        service.log().contains("going on from it"),
        "{}",
        service.log()
    );

    // The move is in the commit log, at the switch point the new primary's history names.
    let mut recorded = None;
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        if let Some(failover) = entry.failover {
            recorded = Some((failover, entry.timeline));
        }
    }
    let (failover, timeline_after) = recorded.expect("an entry records the failover");
    assert_eq!((failover.from, failover.to), (1, 2), "{failover:?}");
    assert!(failover.lake_end <= failover.switch_point, "{failover:?}");
    assert_eq!(timeline_after, Some(2));
    let latest = log.latest().await.unwrap().unwrap();
    assert_eq!(latest.timeline, Some(2), "{latest:?}");
    assert!(latest.accepted_timeline.is_none() && latest.accepted_gap.is_none());

    let verified = verify(&file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified
            .stdout
            .lines()
            .any(|l| l == format!("public.events: equal ({rows} rows)")),
        "{verified}"
    );
    assert!(
        verified.stdout.lines().any(|l| l == "duplicates: none"),
        "{verified}"
    );
    assert_eq!(
        landed_changes(&log).await,
        rows as u64,
        "no change landed twice"
    );
    service.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lake ahead of the switch point: the primary stops waiting for its standby
/// (`synchronized_standby_slots` emptied), the standby stops, and the pipeline lands rows the
/// standby never receives. Once the standby is promoted, the running process stops instead of
/// following, naming the switch point and the lake's end; a new start is refused the same way
/// with the commit entry and writes nothing, and `tributary check` refuses it in the same words;
/// `--accept-gap "timeline 1..2"` passes the check, keeps the lake's extra changes and goes on,
/// and the commit log records that acceptance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lake_ahead_of_the_switch_point_is_refused() {
    let (primary, standby) = primary_and_standby();
    let on_primary = tributary_tests::pipeline::events_on(&primary).await;
    let url = both(&primary, &standby);
    let dir = std::env::temp_dir().join(unique_name("failover-ahead"));
    let (slot, file) = failover_pipeline(&url, &standby, &dir);
    let log = commit_log(&dir).await;
    let mut service = Service::spawn(&file, &[], &dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    on_primary
        .batch_execute("INSERT INTO events SELECT g, 'both' FROM generate_series(1, 10) g")
        .await
        .unwrap();
    service
        .wait_for_landed(&log, 10, Duration::from_secs(60))
        .await;
    let on_standby = connect(&standby.url("postgres")).await;
    wait_until_synced(&on_primary, &on_standby, &slot, Duration::from_secs(60)).await;
    drop(on_standby);

    // Only the primary and the lake get these.
    for statement in [
        "ALTER SYSTEM SET synchronized_standby_slots = ''",
        "SELECT pg_reload_conf()",
    ] {
        on_primary.batch_execute(statement).await.unwrap();
    }
    standby.stop_server(StopMode::Fast).unwrap();
    on_primary
        .batch_execute("INSERT INTO events SELECT g, 'lake only' FROM generate_series(11, 15) g")
        .await
        .unwrap();
    service
        .wait_for_landed(&log, 15, Duration::from_secs(60))
        .await;
    primary.stop_server(StopMode::Fast).unwrap();
    standby.start_again().unwrap();
    standby.promote().unwrap();

    let status = service.wait_exit(Duration::from_secs(120)).await;
    assert!(!status.success());
    let said = service.log();
    let positions = |said: &str, before: &str, after: &str| -> tributary::Lsn {
        let from = said
            .find(before)
            .unwrap_or_else(|| panic!("no {before:?} in:\n{said}"))
            + before.len();
        let len = said[from..].find(after).unwrap();
        said[from..from + len].parse().unwrap()
    };
    let switch_point = positions(&said, "whose history ends timeline 1 at ", ", but");
    let lake_end = positions(&said, "is landing changes up to ", ": the changes");
    let latest = log.latest().await.unwrap().unwrap();
    assert!(switch_point < lake_end, "{said}");
    assert_eq!(lake_end, latest.last_end_lsn, "{said}");
    assert!(said.contains("--accept-gap \"timeline 1..2\""), "{said}");

    // A new start is refused before it writes anything.
    let sequences = log.sequences().await.unwrap();
    let mut again = Service::spawn(&file, &[], &dir.join("again.log"));
    assert!(!again.wait_exit(Duration::from_secs(60)).await.success());
    let refused = again.log();
    assert!(
        refused.contains(&format!(
            "the source server was promoted onto timeline 2, whose history ends timeline 1 at \
             {switch_point}, but this sink holds changes up to {lake_end} (commit entry {})",
            latest.sequence
        )),
        "{refused}"
    );
    assert_eq!(
        log.sequences().await.unwrap(),
        sequences,
        "a refused start writes nothing"
    );
    // `tributary check` refuses it in the run's words, and says ready once the move is named.
    let (code, said) = check(&file).await;
    assert_eq!(code, 1, "{said}");
    let fail = said
        .lines()
        .find_map(|l| l.strip_prefix("FAIL  the source server was promoted onto timeline 2"))
        .unwrap_or_else(|| panic!("no refusal of the move in:\n{said}"));
    assert!(
        refused.contains(&format!(
            "the source server was promoted onto timeline 2{fail}"
        )),
        "the check and the run give different reasons:\n{said}\n{refused}"
    );
    let (code, said) = tributary_with("check", &file, &["--accept-gap", "timeline 1..2"]).await;
    assert_eq!(code, 0, "{said}");
    let accepted = "ok    timeline: the server moved from the lake's timeline 1 to 2, and \
                    --accept-gap accepts that move (the commit log records it)";
    assert!(said.lines().any(|l| l == accepted), "{said}");

    // Keeping the lake's extra changes is the operator's call, and recorded.
    let accepted = Service::spawn(
        &file,
        &["--accept-gap", "timeline 1..2"],
        &dir.join("accepted.log"),
    );
    let mut accepted = accepted;
    accepted
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    accepted.stop().await;
    let opened = log.latest().await.unwrap().unwrap();
    assert_eq!(
        opened.accepted_timeline.map(|t| (t.from, t.to)),
        Some((1, 2)),
        "{opened:?}"
    );
    assert!(opened.failover.is_none(), "{opened:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The promotion happens while the pipeline is stopped: `tributary check` and the next start
/// find the lake on timeline 1 and the server on timeline 2, and the start follows the move
/// without `--accept-gap` (the open entry records it, with no accepted change), and lands
/// what the new primary committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_after_the_promotion_follows_it() {
    let (primary, standby) = primary_and_standby();
    let on_primary = tributary_tests::pipeline::events_on(&primary).await;
    let url = both(&primary, &standby);
    let dir = std::env::temp_dir().join(unique_name("failover-start"));
    let (slot, file) = failover_pipeline(&url, &standby, &dir);
    let log = commit_log(&dir).await;
    let mut first = Service::spawn(&file, &[], &dir.join("first.log"));
    first
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    on_primary
        .batch_execute("INSERT INTO events SELECT g, 'before' FROM generate_series(1, 10) g")
        .await
        .unwrap();
    first
        .wait_for_landed(&log, 10, Duration::from_secs(60))
        .await;
    let on_standby = connect(&standby.url("postgres")).await;
    wait_until_synced(&on_primary, &on_standby, &slot, Duration::from_secs(60)).await;
    drop(on_standby);
    first.stop().await;

    primary.stop_server(StopMode::Fast).unwrap();
    standby.promote().unwrap();
    let promoted = connect(&standby.url("postgres")).await;
    promoted
        .batch_execute("INSERT INTO events SELECT g, 'after' FROM generate_series(11, 15) g")
        .await
        .unwrap();

    // `tributary check` judges the move as the start does: a promotion it follows.
    let (code, said) = check(&file).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.lines().any(|l| l.starts_with(
            "ok    timeline: the server is a promoted standby on timeline 2 that synchronised \
             the failover slot, and the lake ends at "
        ) && l.ends_with(": a start follows the promotion")),
        "{said}"
    );

    let mut second = Service::spawn(&file, &[], &dir.join("second.log"));
    second
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    second
        .wait_for_landed(&log, 15, Duration::from_secs(60))
        .await;
    second.stop().await;
    let mut opens = Vec::new();
    for sequence in log.sequences().await.unwrap() {
        let entry = log.read_entry(sequence).await.unwrap().unwrap();
        if entry.kind == tributary::lake::commit::EntryKind::Open {
            opens.push(entry);
        }
    }
    let opened = opens.last().unwrap();
    let failover = opened
        .failover
        .expect("the open entry records the failover");
    assert_eq!((failover.from, failover.to), (1, 2));
    assert!(failover.lake_end <= failover.switch_point, "{failover:?}");
    assert_eq!(opened.timeline, Some(2));
    assert!(opened.accepted_timeline.is_none(), "{opened:?}");
    assert_eq!(
        landed_changes(&log).await,
        15,
        "nothing lost, nothing twice"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An existing slot that is not a failover slot: `tributary check` says so and how a start
/// changes it, and the start marks it (`ALTER_REPLICATION_SLOT ... (FAILOVER true)`) before it
/// holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_slot_becomes_a_failover_slot() {
    let cluster = cluster_of(17, ClusterOptions::fast());
    let client = tributary_tests::pipeline::events_on(&cluster).await;
    let dir = std::env::temp_dir().join(unique_name("failover-alter"));
    let name = unique_name("alter");
    client
        .query_one(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&name],
        )
        .await
        .unwrap();
    let mut cfg = ServiceConfig::new(
        &cluster.url("postgres"),
        &name,
        &["public.events"],
        &format!("file://{}", dir.join("lake").display()),
    );
    cfg.source.push(("failover".into(), "true".into()));
    let file = cfg.write(&dir);
    let (code, said) = check(&file).await;
    assert_eq!(code, 0, "a warning, not a problem:\n{said}");
    let line = format!(
        "warn  slot {name:?} is not a failover slot, and source.failover = true: a start makes \
         it one (ALTER_REPLICATION_SLOT {name} (FAILOVER true)) once no one streams from it"
    );
    assert!(
        said.lines().any(|l| l == line),
        "no line {line:?} in:\n{said}"
    );

    let mut service = Service::spawn(&file, &[], &dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(60))
        .await;
    assert!(service.log().contains("made the slot a failover slot"));
    let failover: bool = client
        .query_one(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(failover);
    service.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `source.failover = true` on a server before PostgreSQL 17 (the suite's shared cluster): the
/// check and a start refuse it by name, before anything is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_on_an_older_server_is_refused_by_name() {
    let db = tributary_tests::pipeline::events_database("failover_old").await;
    let version: i32 = db
        .client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .unwrap()
        .get(0);
    if version >= 170_000 {
        // The shared cluster is new enough: nothing to refuse.
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("failover-old"));
    let mut cfg = ServiceConfig::new(
        &db.url,
        &unique_name("old"),
        &["public.events"],
        &format!("file://{}", dir.join("lake").display()),
    );
    cfg.source.push(("failover".into(), "true".into()));
    let file = cfg.write(&dir);
    let (code, said) = check(&file).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.lines().any(|l| l.starts_with(
            "FAIL  source.failover = true needs PostgreSQL 17 or newer (failover slots)"
        )),
        "{said}"
    );
    let mut service = Service::spawn(&file, &[], &dir.join("run.log"));
    assert!(!service.wait_exit(Duration::from_secs(60)).await.success());
    assert!(
        service
            .log()
            .contains("source.failover = true needs PostgreSQL 17 or newer"),
        "{}",
        service.log()
    );
    let slots: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "nothing was created");
    let _ = std::fs::remove_dir_all(&dir);
}
