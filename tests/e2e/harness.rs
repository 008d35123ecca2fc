//! The test parts themselves: the cluster replicates logically, databases are private, and the
//! S3 server stores, conditionally creates, lists and keeps objects across a restart.

use bytes::Bytes;
use futures::TryStreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use tributary_tests::{S3Server, fresh_database, postgres, s3};

#[tokio::test]
async fn cluster_runs_with_logical_wal() {
    let db = fresh_database("wal_level").await;
    let row = db.client.query_one("SHOW wal_level", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "logical");
    let version: String = db
        .client
        .query_one("SHOW server_version", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        version.starts_with(postgres().server_version()),
        "server says {version}, binaries say {}",
        postgres().server_version()
    );
}

#[tokio::test]
async fn fresh_databases_are_distinct() {
    let a = fresh_database("distinct").await;
    let b = fresh_database("distinct").await;
    assert_ne!(a.name, b.name);
    assert_ne!(a.url, b.url);
    a.client
        .batch_execute("CREATE TABLE only_in_a (id int)")
        .await
        .unwrap();
    let in_b: i64 = b
        .client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_b, 0);
    let current: String = b
        .client
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(current, b.name);
}

#[tokio::test]
async fn a_pgoutput_slot_decodes_a_committed_insert() {
    let db = fresh_database("slot").await;
    let slot = db.name.clone();
    db.client
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t",
        )
        .await
        .unwrap();
    let created = db
        .client
        .query_one(
            "SELECT slot_name::text, lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    assert_eq!(created.get::<_, String>(0), slot);
    db.client
        .batch_execute("INSERT INTO t VALUES (1, 'one')")
        .await
        .unwrap();
    // Peek at the slot through SQL: Begin, Relation, Insert, Commit.
    let messages = db
        .client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', 'p')",
            &[&slot],
        )
        .await
        .unwrap();
    let tags: Vec<u8> = messages
        .iter()
        .map(|row| row.get::<_, Vec<u8>>(0)[0])
        .collect();
    assert_eq!(tags, b"BRIC");
    let active: String = db
        .client
        .query_one(
            "SELECT plugin::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(active, "pgoutput");
}

#[tokio::test]
async fn s3_puts_read_back_byte_equal_and_list() {
    let server = s3();
    let bucket = server.fresh_bucket("roundtrip").await;
    let store = server.object_store(&bucket);
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    store
        .put(&Path::from("dir/a.bin"), PutPayload::from(data.clone()))
        .await
        .unwrap();
    store
        .put(&Path::from("dir/b.bin"), PutPayload::from_static(b"b"))
        .await
        .unwrap();
    store
        .put(&Path::from("other/c.bin"), PutPayload::from_static(b"c"))
        .await
        .unwrap();

    let read = store
        .get(&Path::from("dir/a.bin"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(read, Bytes::from(data));

    let mut listed: Vec<String> = store
        .list(Some(&Path::from("dir")))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap();
    listed.sort();
    assert_eq!(listed, ["dir/a.bin", "dir/b.bin"]);
}

#[tokio::test]
async fn s3_create_if_absent_refuses_an_existing_key() {
    let server = s3();
    let bucket = server.fresh_bucket("conditional").await;
    let store = server.object_store(&bucket);
    let key = Path::from("log/00000000000000000001.json");
    let create = || PutOptions::from(PutMode::Create);
    store
        .put_opts(&key, PutPayload::from_static(b"first"), create())
        .await
        .expect("the first create of a key succeeds");
    let second = store
        .put_opts(&key, PutPayload::from_static(b"second"), create())
        .await;
    assert!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "the S3 server must refuse a second PutMode::Create of the same key \
         (the commit protocol depends on it), got {second:?}"
    );
    let kept = store.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(kept, Bytes::from_static(b"first"));
}

#[tokio::test]
async fn s3_objects_survive_a_server_restart() {
    let mut server = S3Server::start();
    let bucket = server.fresh_bucket("restart").await;
    let key = Path::from("kept.txt");
    server
        .object_store(&bucket)
        .put(&key, PutPayload::from_static(b"still here"))
        .await
        .unwrap();

    server.stop();
    let down = server.object_store(&bucket).head(&key).await;
    assert!(down.is_err(), "a stopped server answers nothing: {down:?}");

    server.restart();
    let read = server
        .object_store(&bucket)
        .get(&key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(read, Bytes::from_static(b"still here"));
}

#[tokio::test]
async fn s3_buckets_created_through_the_api_are_directories_under_the_root() {
    let server = s3();
    let bucket = server.fresh_bucket("api-bucket").await;
    assert!(server.root().join(&bucket).is_dir());
    let listed: Vec<_> = server
        .object_store(&bucket)
        .list(None)
        .try_collect()
        .await
        .unwrap();
    assert!(listed.is_empty());
}
