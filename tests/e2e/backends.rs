//! The sink's file operations and the commit log, with the same assertions on every backend a
//! pipeline can land in: the in-memory store, a local directory, the S3 server of the test
//! setup, Azurite (Azure Blob Storage) and fake-gcs-server (Google Cloud Storage). Exactly once rests on what each backend does with a create of a name that exists, a
//! listing and a delete; the commit log's unit tests run on the in-memory store, which cannot
//! tell whether a real store's answers (a 412 for a conditional put, a 404 listing a folder not
//! made yet, a delete of an object that is gone) reach the protocol as the same outcomes.
//!
//! Each case is a function of a fresh, empty [`Lake`]; `on_every_backend!` makes one test of it
//! per backend: `backends::memory::<case>`, `backends::local::<case>`, `backends::s3::<case>`,
//! `backends::azure::<case>`, `backends::gcs::<case>`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore as _, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use tributary::Lsn;
use tributary::lake::commit::{
    Checkpoint, CommitEntry, CommitError, CommitLog, EntryKind, FORMAT, FileEntry, PluginRecord,
    Recovery, StartedFrom, Writer, data_file_path,
};
use tributary::lake::flush::MAX_FLIGHTS;
use tributary::lake::sink::{Created, Listing, Sink};
use tributary_tests::unique_name;

/// One test per case on each backend.
macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        on_backend!(memory, $($case),+);
        on_backend!(local, $($case),+);
        on_backend!(s3, $($case),+);
        on_backend!(azure, $($case),+);
        on_backend!(gcs, $($case),+);
    };
}

macro_rules! on_backend {
    ($backend:ident, $($case:ident),+) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $case() {
                    let lake = super::Lake::$backend(stringify!($case)).await;
                    super::$case(&lake).await;
                }
            )+
        }
    };
}

on_every_backend!(
    create_refuses_a_second_writer_of_the_same_name,
    creates_racing_for_one_name_admit_exactly_one,
    a_large_fence_admits_one_of_racing_writers,
    list_returns_what_was_written_folder_by_folder,
    a_sink_under_a_prefix_sees_only_its_own_objects,
    delete_removes_the_object_and_nothing_else,
    the_commit_log_reads_back_what_was_appended,
    a_second_commit_of_a_sequence_is_a_conflict,
    recovery_removes_the_files_of_a_flush_that_never_committed,
);

/// A fresh, empty sink on one backend.
struct Lake {
    sink: Sink,
    backend: Backend,
}

enum Backend {
    Memory,
    /// The sink's directory, removed when the test ends.
    Local(PathBuf),
    /// S3 or Azure: the sink's URL and options.
    Cloud {
        url: String,
        options: BTreeMap<String, String>,
    },
}

impl Lake {
    async fn memory(_hint: &str) -> Lake {
        Lake {
            sink: Sink::open("memory://", &BTreeMap::new()).unwrap(),
            backend: Backend::Memory,
        }
    }

    async fn local(hint: &str) -> Lake {
        let dir = std::env::temp_dir().join(unique_name(hint));
        Lake {
            sink: Sink::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap(),
            backend: Backend::Local(dir),
        }
    }

    async fn s3(hint: &str) -> Lake {
        let server = tributary_tests::s3();
        let bucket = server.fresh_bucket(hint).await;
        Self::cloud(server.bucket_url(&bucket), server.object_store_options())
    }

    async fn gcs(hint: &str) -> Lake {
        let server = tributary_tests::fake_gcs();
        let bucket = server.fresh_bucket(hint).await;
        Self::cloud(server.bucket_url(&bucket), server.object_store_options())
    }

    async fn azure(hint: &str) -> Lake {
        let server = tributary_tests::azurite();
        let container = server.fresh_container(hint).await;
        Self::cloud(
            server.container_url(&container),
            server.object_store_options(),
        )
    }

    fn cloud(url: String, options: Vec<(String, String)>) -> Lake {
        let options: BTreeMap<String, String> = options.into_iter().collect();
        Lake {
            sink: Sink::open(&url, &options).unwrap(),
            backend: Backend::Cloud { url, options },
        }
    }

    /// The same storage as a sink whose URL ends in `prefix`, the way two pipelines share one
    /// bucket or directory.
    fn under(&self, prefix: &str) -> Sink {
        match &self.backend {
            // A memory URL names no store to share, so the prefix goes on the store itself.
            Backend::Memory => Sink::from_store(
                Arc::new(PrefixStore::new(self.sink.store().clone(), prefix)),
                format!("memory://{prefix}"),
            ),
            Backend::Local(dir) => Sink::open(
                &format!("file://{}/{prefix}", dir.display()),
                &BTreeMap::new(),
            )
            .unwrap(),
            Backend::Cloud { url, options } => {
                Sink::open(&format!("{url}/{prefix}"), options).unwrap()
            }
        }
    }
}

impl Drop for Lake {
    fn drop(&mut self) {
        if let Backend::Local(dir) = &self.backend {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn path(name: &str) -> Path {
    Path::from(name)
}

async fn put(sink: &Sink, name: &str, bytes: &'static [u8]) {
    assert_eq!(
        sink.create(&path(name), Bytes::from_static(bytes))
            .await
            .unwrap(),
        Created::New,
        "{name} is new"
    );
}

async fn read(sink: &Sink, name: &str) -> Option<Bytes> {
    sink.get(&path(name)).await.unwrap()
}

/// What lies under `prefix`, in name order: a listing's order is the store's own.
async fn listed(sink: &Sink, prefix: Option<&str>) -> Listing {
    let mut listing = sink.list_dir(prefix.map(path).as_ref()).await.unwrap();
    listing.folders.sort();
    listing.objects.sort();
    listing
}

async fn names(sink: &Sink, prefix: &str) -> Vec<String> {
    let mut names = sink.list_names(&path(prefix)).await.unwrap();
    names.sort();
    names
}

fn folders(names: &[&str]) -> Listing {
    Listing {
        folders: names.iter().map(|n| (*n).to_owned()).collect(),
        objects: Vec::new(),
    }
}

fn file_name(path: &str) -> String {
    path.rsplit_once('/')
        .map_or(path, |(_, name)| name)
        .to_owned()
}

/// The `n`th commit entry's object.
fn entry_path(sequence: u64) -> String {
    format!("_tributary/log/{sequence:020}.json")
}

fn intent_name(sequence: u64, writer: &str) -> String {
    format!("{sequence:020}-{writer}.json")
}

fn open_entry(latest: Option<&CommitEntry>, writer: &Writer) -> CommitEntry {
    Checkpoint::from_entry(latest).open_entry(writer, "shop", Lsn(0x1000), false, 1)
}

/// Flush `sequence` of `writer`, landing `files` made by one plugin.
fn flush_entry(sequence: u64, writer: &Writer, files: &[&str]) -> CommitEntry {
    let lsn = 0x1000 + sequence * 0x100;
    CommitEntry {
        format: FORMAT,
        kind: EntryKind::Flush,
        sequence,
        writer: writer.clone(),
        slot: "shop".into(),
        first_commit_lsn: Lsn(lsn),
        last_commit_lsn: Lsn(lsn + 0x40),
        last_end_lsn: Lsn(lsn + 0x70),
        transactions: 2,
        changes: 7,
        files: files
            .iter()
            .map(|file| FileEntry {
                path: (*file).to_owned(),
                output: file.split('/').next().unwrap().to_owned(),
                rows: 7,
                bytes: 4,
                schema: "c0ffee".into(),
            })
            .collect(),
        plugins: vec![PluginRecord {
            name: "mask".into(),
            version: "1.2.0".into(),
            path: "plugins/mask.wasm".into(),
            digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        }],
        committed_at: 1_700_000_000_000_000,
        accepted_gap: None,
        dead_letters: 1,
        timeline: Some(1),
        accepted_timeline: None,
        failover: None,
        started_from: None,
        load: None,
        tables_through: None,
    }
}

fn conflict(error: CommitError) -> (u64, String, String) {
    match error {
        CommitError::Conflict {
            sequence,
            holder,
            ours,
        } => (sequence, holder.id, ours.id),
        other => panic!("expected a conflict, got: {other}"),
    }
}

/// The fence: of two writers creating one name, the second finds the first's object and
/// leaves it as it was.
async fn create_refuses_a_second_writer_of_the_same_name(lake: &Lake) {
    let sink = &lake.sink;
    let entry = entry_path(1);
    assert_eq!(sink.size(&path(&entry)).await.unwrap(), None);
    put(sink, &entry, b"first").await;
    assert_eq!(
        sink.create(&path(&entry), Bytes::from_static(b"second writer"))
            .await
            .unwrap(),
        Created::Existed
    );
    assert_eq!(read(sink, &entry).await.as_deref(), Some(&b"first"[..]));
    assert_eq!(sink.size(&path(&entry)).await.unwrap(), Some(5));

    // The store's own refusal, which `create` turns into `Existed`.
    let refused = sink
        .store()
        .put_opts(
            &path(&entry),
            PutPayload::from_static(b"third"),
            PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, object_store::Error::AlreadyExists { .. }),
        "{refused}"
    );
    assert_eq!(read(sink, &entry).await.as_deref(), Some(&b"first"[..]));

    // An empty object holds its name like any other.
    put(sink, "_tributary/empty", b"").await;
    assert_eq!(
        sink.create(&path("_tributary/empty"), Bytes::from_static(b"x"))
            .await
            .unwrap(),
        Created::Existed
    );
    assert_eq!(sink.size(&path("_tributary/empty")).await.unwrap(), Some(0));
}

/// The fence under a race: writers creating one name at the same moment (a compaction's
/// table version beside a pipeline's) find exactly one of them made it, and the object is
/// that one's. A store that checks for the name and then writes admits two, and the one
/// written last replaces a commit its writer was told had landed.
async fn creates_racing_for_one_name_admit_exactly_one(lake: &Lake) {
    // Bodies large enough that a check-then-write server is mid-write when the next check
    // comes.
    let races = (0..24).map(|name| race(lake, format!("race/{name:03}.json"), 8, 256 << 10, false));
    futures::future::join_all(races).await;
}

/// The same for a fenced create larger than the multipart threshold (a table's metadata
/// with a long history): still one conditional put, where parts would let every writer in.
async fn a_large_fence_admits_one_of_racing_writers(lake: &Lake) {
    race(lake, "race/large.json".into(), 3, (32 << 20) + 1, true).await;
}

/// `writers` writers creating `entry` at once (with [`Sink::create_fence`] when `fenced`),
/// each with `size` bytes of its own letter: exactly one is told it made it, and the object
/// is its.
async fn race(lake: &Lake, entry: String, writers: u8, size: usize, fenced: bool) {
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let (sink, entry) = (lake.sink.clone(), path(&entry));
            let body = Bytes::from(vec![b'a' + writer; size]);
            tokio::spawn(async move {
                let created = match fenced {
                    true => sink.create_fence(&entry, body).await,
                    false => sink.create(&entry, body).await,
                };
                (writer, created.unwrap())
            })
        })
        .collect();
    let mut won = Vec::new();
    for task in tasks {
        if let (writer, Created::New) = task.await.unwrap() {
            won.push(writer);
        }
    }
    assert_eq!(
        won.len(),
        1,
        "{entry}: writers {won:?} were each told they created it"
    );
    let stored = read(&lake.sink, &entry).await.unwrap();
    assert!(
        stored.len() == size && stored.iter().all(|b| *b == b'a' + won[0]),
        "{entry} holds what its one creator wrote"
    );
}

async fn list_returns_what_was_written_folder_by_folder(lake: &Lake) {
    let sink = &lake.sink;
    // Nothing written yet: every listing is empty, none is an error.
    assert_eq!(listed(sink, None).await, Listing::default());
    assert_eq!(
        listed(sink, Some("_tributary/log")).await,
        Listing::default()
    );

    put(sink, &entry_path(1), b"1").await;
    put(sink, &entry_path(2), b"22").await;
    put(
        sink,
        "_tributary/intent/00000000000000000003-aaaa.json",
        b"333",
    )
    .await;
    put(sink, "public.orders/part-a.parquet", b"4444").await;
    put(sink, "public.orders/part-b.parquet", b"55555").await;
    // Starts like `public.orders` but is another folder.
    put(sink, "public.orders_old/part-c.parquet", b"666666").await;

    assert_eq!(
        listed(sink, None).await,
        folders(&["_tributary", "public.orders", "public.orders_old"])
    );
    assert_eq!(
        listed(sink, Some("_tributary")).await,
        folders(&["intent", "log"])
    );
    assert_eq!(
        listed(sink, Some("_tributary/log")).await.objects,
        [
            ("00000000000000000001.json".to_owned(), 1),
            ("00000000000000000002.json".to_owned(), 2)
        ]
    );
    assert_eq!(
        listed(sink, Some("public.orders")).await,
        Listing {
            folders: vec![],
            objects: vec![
                ("part-a.parquet".to_owned(), 4),
                ("part-b.parquet".to_owned(), 5)
            ],
        }
    );
    assert_eq!(
        names(sink, "_tributary/intent").await,
        ["00000000000000000003-aaaa.json"]
    );
    assert!(names(sink, "public.customers").await.is_empty());
}

async fn a_sink_under_a_prefix_sees_only_its_own_objects(lake: &Lake) {
    let (shop, crm) = (lake.under("lakes/shop"), lake.under("lakes/crm"));
    let entry = entry_path(1);
    // One name in two sinks is two objects.
    put(&shop, &entry, b"shop").await;
    put(&crm, &entry, b"crm").await;
    assert_eq!(read(&shop, &entry).await.as_deref(), Some(&b"shop"[..]));
    assert_eq!(read(&crm, &entry).await.as_deref(), Some(&b"crm"[..]));

    assert_eq!(listed(&lake.sink, None).await, folders(&["lakes"]));
    assert_eq!(
        listed(&lake.sink, Some("lakes")).await,
        folders(&["crm", "shop"])
    );
    assert_eq!(
        read(&lake.sink, &format!("lakes/shop/{entry}"))
            .await
            .as_deref(),
        Some(&b"shop"[..])
    );
    assert_eq!(listed(&shop, None).await, folders(&["_tributary"]));
    assert_eq!(
        names(&shop, "_tributary/log").await,
        ["00000000000000000001.json"]
    );

    shop.delete(&path(&entry)).await.unwrap();
    assert_eq!(read(&shop, &entry).await, None);
    assert_eq!(read(&crm, &entry).await.as_deref(), Some(&b"crm"[..]));
    assert!(
        names(&lake.sink, "lakes/shop/_tributary/log")
            .await
            .is_empty()
    );
}

async fn delete_removes_the_object_and_nothing_else(lake: &Lake) {
    let sink = &lake.sink;
    let (gone, kept) = (
        "public.t/part-00000000000000000003-aaaa-0000.parquet",
        "public.t/part-00000000000000000003-aaaa-0001.parquet",
    );
    put(sink, gone, b"gone").await;
    put(sink, kept, b"kept").await;

    sink.delete(&path(gone)).await.unwrap();
    assert_eq!(read(sink, gone).await, None);
    assert_eq!(sink.size(&path(gone)).await.unwrap(), None);
    let missing = sink.store().head(&path(gone)).await.unwrap_err();
    assert!(
        matches!(missing, object_store::Error::NotFound { .. }),
        "{missing}"
    );
    assert_eq!(read(sink, kept).await.as_deref(), Some(&b"kept"[..]));
    assert_eq!(names(sink, "public.t").await, [file_name(kept)]);

    // Deleting what is not there is done, not failed: a clean-up may run twice.
    sink.delete(&path(gone)).await.unwrap();
    sink.delete(&path("public.t/never-written.parquet"))
        .await
        .unwrap();
    assert_eq!(names(sink, "public.t").await, [file_name(kept)]);
}

/// Open, append, and read back the latest entry and the first, as a restart and `status` do.
async fn the_commit_log_reads_back_what_was_appended(lake: &Lake) {
    let log = CommitLog::new(lake.sink.clone(), Writer::named("aaaa"));
    assert_eq!(log.latest().await.unwrap(), None);
    assert_eq!(log.latest_flush().await.unwrap(), None);
    assert_eq!(log.read_entry(1).await.unwrap(), None);
    assert!(log.sequences().await.unwrap().is_empty());

    let open = open_entry(None, log.writer()).starting(StartedFrom {
        start_from: "tail".into(),
        lsn: Lsn(0x1000),
    });
    assert_eq!(open.sequence, 1);
    log.commit(&open).await.unwrap();
    let file = data_file_path("public.orders", 2, log.writer(), 0);
    put(&lake.sink, &file, b"PAR1").await;
    let flush = flush_entry(2, log.writer(), &[&file]);
    log.commit(&flush).await.unwrap();
    // A retry of a commit whose reply was lost finds its own entry.
    log.commit(&flush).await.unwrap();

    let reader = CommitLog::new(lake.sink.clone(), Writer::named("reader"));
    assert_eq!(reader.sequences().await.unwrap(), [1, 2]);
    assert_eq!(reader.read_entry(1).await.unwrap().as_ref(), Some(&open));
    assert_eq!(reader.latest().await.unwrap().as_ref(), Some(&flush));
    assert_eq!(reader.latest_flush().await.unwrap().as_ref(), Some(&flush));
    assert_eq!(reader.read_entry(3).await.unwrap(), None);
    assert_eq!(
        names(&lake.sink, "_tributary/log").await,
        ["00000000000000000001.json", "00000000000000000002.json"]
    );

    let bytes = read(&lake.sink, &entry_path(2)).await.unwrap();
    let mut written = serde_json::to_vec_pretty(&flush).unwrap();
    written.push(b'\n');
    assert_eq!(bytes, written);
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        json["plugins"],
        serde_json::json!([{
            "name": "mask",
            "version": "1.2.0",
            "path": "plugins/mask.wasm",
            "digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        }])
    );

    let restart = Checkpoint::from_entry(Some(&flush));
    assert_eq!(
        (restart.next_sequence(), restart.confirmed()),
        (3, Lsn(0x1270))
    );
}

async fn a_second_commit_of_a_sequence_is_a_conflict(lake: &Lake) {
    let a = CommitLog::new(lake.sink.clone(), Writer::named("aaaa"));
    let b = CommitLog::new(lake.sink.clone(), Writer::named("bbbb"));
    // Both read the empty log; A creates entry 1 first.
    let (open_a, open_b) = (open_entry(None, a.writer()), open_entry(None, b.writer()));
    a.commit(&open_a).await.unwrap();
    assert_eq!(
        conflict(b.commit(&open_b).await.unwrap_err()),
        (1, "aaaa".to_owned(), "bbbb".to_owned())
    );
    assert_eq!(b.latest().await.unwrap().as_ref(), Some(&open_a));

    // B reads again and opens after A, which fences A's next flush.
    let open_b = open_entry(Some(&open_a), b.writer());
    assert_eq!(open_b.sequence, 2);
    b.commit(&open_b).await.unwrap();
    assert_eq!(
        conflict(
            a.commit(&flush_entry(2, a.writer(), &[]))
                .await
                .unwrap_err()
        ),
        (2, "bbbb".to_owned(), "aaaa".to_owned())
    );
    assert_eq!(a.latest().await.unwrap().as_ref(), Some(&open_b));
}

/// What start-up does after its open entry: find the files of intents that can never commit
/// and delete them, leaving committed files and a later writer's flush alone.
async fn recovery_removes_the_files_of_a_flush_that_never_committed(lake: &Lake) {
    let sink = &lake.sink;
    let a = CommitLog::new(sink.clone(), Writer::named("aaaa"));
    let open_a = open_entry(None, a.writer());
    a.commit(&open_a).await.unwrap();
    let landed = data_file_path("public.t", 2, a.writer(), 0);
    a.write_intent(2, 0, std::slice::from_ref(&landed))
        .await
        .unwrap();
    put(sink, &landed, b"landed").await;
    a.commit(&flush_entry(2, a.writer(), &[&landed]))
        .await
        .unwrap();
    a.clear_intent(2, 1).await.unwrap();
    // A stops during flush 3: its intent and one of its two files are up, no entry.
    let mut lost = vec![
        data_file_path("public.t", 3, a.writer(), 0),
        data_file_path("public.u", 3, a.writer(), 0),
    ];
    lost.sort();
    a.write_intent(3, 0, &lost).await.unwrap();
    put(sink, &lost[0], b"lost").await;
    assert_eq!(
        names(sink, "_tributary/intent").await,
        [intent_name(3, "aaaa")]
    );

    // B takes over with entry 3, the number A's flush needed.
    let b = CommitLog::new(sink.clone(), Writer::named("bbbb"));
    let open_b = open_entry(b.latest().await.unwrap().as_ref(), b.writer());
    assert_eq!(open_b.sequence, 3);
    b.commit(&open_b).await.unwrap();
    // C started after B and has begun flush 4.
    let c = CommitLog::new(sink.clone(), Writer::named("cccc"));
    let newer = data_file_path("public.t", 4, c.writer(), 0);
    c.write_intent(4, 0, std::slice::from_ref(&newer))
        .await
        .unwrap();
    put(sink, &newer, b"newer").await;

    let recovery = b
        .recover(open_b.sequence, MAX_FLIGHTS as u64)
        .await
        .unwrap();
    assert_eq!(
        recovery,
        Recovery {
            opened: 3,
            orphaned: lost.clone(),
            intents: vec![path(&format!(
                "_tributary/intent/{}",
                intent_name(3, "aaaa")
            ))],
            newer: vec![4],
        }
    );
    assert_eq!(b.clean_up(&recovery).await.unwrap(), lost);

    let mut kept = vec![file_name(&landed), file_name(&newer)];
    kept.sort();
    assert_eq!(names(sink, "public.t").await, kept);
    assert!(names(sink, "public.u").await.is_empty());
    assert_eq!(read(sink, &landed).await.as_deref(), Some(&b"landed"[..]));
    assert_eq!(read(sink, &newer).await.as_deref(), Some(&b"newer"[..]));
    assert_eq!(
        names(sink, "_tributary/intent").await,
        [intent_name(4, "cccc")]
    );

    let again = b
        .recover(open_b.sequence, MAX_FLIGHTS as u64)
        .await
        .unwrap();
    assert_eq!(
        (again.orphaned, again.intents, again.newer),
        (vec![], vec![], vec![4])
    );
    // A, resuming, cannot commit the flush whose files are gone.
    assert_eq!(
        conflict(
            a.commit(&flush_entry(3, a.writer(), &[&lost[0]]))
                .await
                .unwrap_err()
        ),
        (3, "bbbb".to_owned(), "aaaa".to_owned())
    );
}
