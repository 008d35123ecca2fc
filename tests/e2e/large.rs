//! Transactions larger than memory, through a real `tributary run`: held on local disk until
//! they commit, landed as one flush in parts, visible at once. The process's peak resident
//! memory stays within the in-flight budget plus a fixed overhead whatever the transaction's
//! size; an aborted one leaves nothing in the sink; a crash between parts lands it once.

use std::collections::BTreeSet;
use std::time::Duration;

use object_store::path::Path;
use tributary::lake::commit::CommitLog;
use tributary::lake::sink::Sink;
use tributary_tests::lake::{committed_rows, landed_changes, object_names};
use tributary_tests::pipeline::{streaming_database, wait_for_confirmed};
use tributary_tests::service::{Fixture, Service, ServiceConfig, peak_rss_mib};
use tributary_tests::{TestDatabase, plugin};

const TABLE: &str = "public.events";

/// What the process may hold beyond its in-flight budget: the runtime with its compiled plugin
/// (about 75 MiB in the debug build before any change arrives), the plugin instance's memory
/// at its high-water mark for one part, the encoder's buffers, allocator slack.
const FIXED_OVERHEAD_MIB: u64 = 128;

fn insert(from: u32, to: u32) -> String {
    format!(
        "INSERT INTO events SELECT g, 'event number ' || g FROM generate_series({from}, {to}) g"
    )
}

async fn names(sink: &Sink, prefix: &str) -> Vec<String> {
    object_names(sink.store().as_ref(), prefix).await
}

fn ids(sink_rows: &[tributary_tests::lake::LandedRow]) -> Vec<u32> {
    sink_rows
        .iter()
        .map(|r| r.values["id"].as_deref().unwrap().parse().unwrap())
        .collect()
}

struct Setup {
    db: TestDatabase,
    name: String,
    sink: Sink,
    log: CommitLog,
    dir: std::path::PathBuf,
    cfg: ServiceConfig,
}

async fn setup(hint: &str, in_flight_mib: u32, chunk_mib: u32) -> Setup {
    let db = streaming_database(hint).await;
    let Fixture {
        name,
        mut cfg,
        sink,
        log,
        dir,
        ..
    } = Fixture::new(&db.url, hint, &[TABLE]).await;
    cfg.transforms = vec![plugin("passthrough")];
    cfg.flush = vec![
        ("in_flight_mib".into(), in_flight_mib.to_string()),
        ("chunk_mib".into(), chunk_mib.to_string()),
    ];
    Setup {
        db,
        name,
        sink,
        log,
        dir,
        cfg,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_million_row_transaction_lands_once_through_a_plugin_within_the_memory_budget() {
    const IN_FLIGHT_MIB: u32 = 64;
    let s = setup("large_2m", IN_FLIGHT_MIB, 4).await;
    let file = s.cfg.write(&s.dir);
    let mut service = Service::spawn(&file, &[], &s.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;

    // A million rows that roll back, then one row: only the row's file may appear.
    s.db.client.batch_execute("BEGIN").await.unwrap();
    s.db.client
        .batch_execute(&insert(3_000_001, 4_000_000))
        .await
        .unwrap();
    s.db.client.batch_execute("ROLLBACK").await.unwrap();
    s.db.client.batch_execute(&insert(0, 0)).await.unwrap();
    service
        .wait_for_landed(&s.log, 1, Duration::from_secs(120))
        .await;
    let idle = peak_rss_mib(service.pid());
    eprintln!("peak RSS before the large transaction: {idle} MiB");
    let files = names(&s.sink, TABLE).await;
    assert_eq!(
        files.len(),
        1,
        "the rolled-back transaction left files: {files:?}"
    );

    s.db.client
        .batch_execute(&insert(1, 2_000_000))
        .await
        .unwrap();
    service
        .wait_for_landed(&s.log, 2_000_001, Duration::from_secs(600))
        .await;
    let peak = peak_rss_mib(service.pid());
    let log = service.stop().await;
    assert!(
        log.contains("landing a large transaction from disk in parts"),
        "{log}"
    );
    let bound = u64::from(IN_FLIGHT_MIB) + FIXED_OVERHEAD_MIB;
    assert!(
        peak <= bound,
        "peak RSS {peak} MiB over the {IN_FLIGHT_MIB} MiB budget + {FIXED_OVERHEAD_MIB} MiB overhead"
    );
    eprintln!("peak RSS {peak} MiB (bound {bound} MiB; {idle} MiB before the large transaction)");

    let rows = committed_rows(&s.sink, TABLE).await;
    assert_eq!(rows.len(), 2_000_001);
    let big: Vec<_> = rows
        .iter()
        .filter(|r| r.values["id"].as_deref() != Some("0"))
        .collect();
    let lsns: BTreeSet<_> = big.iter().map(|r| r.commit_lsn).collect();
    assert_eq!(lsns.len(), 1, "one transaction, one commit");
    let seqs: Vec<u32> = big.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (0..2_000_000).collect::<Vec<u32>>());
    let mut landed = ids(&rows);
    landed.sort_unstable();
    assert_eq!(landed, (0..=2_000_000).collect::<Vec<u32>>());
    // Landed as one flush of several files, visible through one entry.
    let last = s.log.latest_flush().await.unwrap().unwrap();
    assert_eq!((last.transactions, last.changes), (1, 2_000_000));
    assert!(last.files.len() > 2, "{} files", last.files.len());
    assert_eq!(
        names(&s.sink, "_tributary/intent").await,
        Vec::<String>::new()
    );
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_parts_of_a_large_transaction_lands_it_once() {
    let s = setup("large_crash", 16, 1).await;
    let file = s.cfg.write(&s.dir);
    let armed = "flush.after-part@3";
    let mut a = Service::spawn_with(
        &file,
        &[],
        &s.dir.join("a.log"),
        &[("TRIBUTARY_FAILPOINTS", armed)],
    );
    a.wait_for_log("streaming", Duration::from_secs(120)).await;
    s.db.client
        .batch_execute(&insert(1, 300_000))
        .await
        .unwrap();
    a.wait_for_log(
        "failpoint flush.after-part reached",
        Duration::from_secs(120),
    )
    .await;
    // Three parts are up, named by their intents with the flush's own; no entry names them.
    // The parts after may have begun meanwhile, each with its intent written first (a busy
    // machine once showed two of them).
    let intents = names(&s.sink, "_tributary/intent").await;
    assert!((3..=5).contains(&intents.len()), "{intents:?}");
    let uploaded = names(&s.sink, TABLE).await;
    assert!(uploaded.len() >= 3, "{uploaded:?}");
    assert_eq!(landed_changes(&s.log).await, 0);
    a.kill().await;

    let mut b = Service::spawn(&file, &[], &s.dir.join("b.log"));
    b.wait_for_log("streaming", Duration::from_secs(120)).await;
    s.db.client
        .batch_execute(&insert(300_001, 300_010))
        .await
        .unwrap();
    b.wait_for_landed(&s.log, 300_010, Duration::from_secs(300))
        .await;
    let b_log = b.stop().await;

    // Every row once, no file of the crashed run left, the slot at the last entry.
    let rows = committed_rows(&s.sink, TABLE).await;
    let mut landed = ids(&rows);
    landed.sort_unstable();
    assert_eq!(landed, (1..=300_010).collect::<Vec<u32>>(), "{b_log}");
    for file in &uploaded {
        assert!(
            s.sink
                .size(&Path::from(file.as_str()))
                .await
                .unwrap()
                .is_none(),
            "{file} of the crashed run is still there"
        );
    }
    assert_eq!(
        names(&s.sink, "_tributary/intent").await,
        Vec::<String>::new()
    );
    let last = s.log.latest().await.unwrap().unwrap();
    assert_eq!(
        wait_for_confirmed(&s.db.client, &s.name, last.last_end_lsn).await,
        last.last_end_lsn
    );
    std::fs::remove_dir_all(&s.dir).unwrap();
}
