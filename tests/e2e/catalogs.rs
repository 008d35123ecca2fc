//! Iceberg catalogs: the REST client against a real REST catalog server (pyiceberg's catalog
//! behind the REST routes, `tests/catalogs/iceberg_rest.py`), and the SQL catalog client
//! against the test PostgreSQL; pyiceberg then loads what the Rust clients committed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::path::Path as ObjectPath;

use serde_json::{Value, json};
use tributary::lake::iceberg::catalog::{
    self, CatalogError, Requirement, Secret, TableIdent, Update,
};
use tributary::lake::iceberg::rest::{
    DEFAULT_SCOPE, LoadedTable, NewTable, RestAuth, RestCatalog, RestOptions,
};
use tributary::lake::iceberg::sql::{DEFAULT_CATALOG_NAME, SqlCatalog, SqlOptions};
use tributary::lake::sink::Sink;
use tributary_tests::catalog::{
    CLIENT_ID, CLIENT_SECRET, RestCatalogServer, RestServerOptions, STATIC_TOKEN,
    pyiceberg_s3_properties, pyiceberg_table, rest_sink, toml_text,
};
use tributary_tests::service::{Fixture, command};
use tributary_tests::{TestDatabase, fresh_database, s3};

use super::iceberg::{Through, crash_into_iceberg_through};

fn client_credentials(secret: &str) -> RestAuth {
    RestAuth::ClientCredentials {
        client_id: CLIENT_ID.into(),
        client_secret: Secret::new(secret),
        scope: DEFAULT_SCOPE.into(),
        server_uri: None,
    }
}

async fn connect(server: &RestCatalogServer, auth: RestAuth) -> Result<RestCatalog, CatalogError> {
    RestCatalog::connect(RestOptions {
        uri: server.uri(),
        warehouse: Some(server.warehouse().to_owned()),
        auth,
    })
    .await
}

/// A server with its warehouse in a fresh bucket of the shared S3 server.
async fn rest_server(
    hint: &str,
    configure: impl FnOnce(&mut RestServerOptions),
) -> RestCatalogServer {
    let bucket = s3().fresh_bucket(hint).await;
    let mut options = RestServerOptions::on_s3(s3(), &bucket);
    configure(&mut options);
    RestCatalogServer::start(&options)
}

/// `id long` (required) and `body string`: the schema the tables start with.
fn first_schema() -> Value {
    json!({
        "type": "struct",
        "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": true},
            {"id": 2, "name": "body", "type": "string", "required": false},
        ],
    })
}

/// The first schema and one more optional column.
fn schema_with(schema_id: i64, column: &str) -> Value {
    let mut schema = first_schema();
    schema["schema-id"] = json!(schema_id);
    schema["fields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": 3, "name": column, "type": "string", "required": false}));
    schema
}

/// The requirements a schema change from `base` states: the same table, schema and columns.
fn schema_requirements(base: &LoadedTable) -> Vec<Requirement> {
    vec![
        Requirement::AssertTableUuid {
            uuid: base.metadata["table-uuid"].as_str().unwrap().to_owned(),
        },
        Requirement::AssertCurrentSchemaId {
            current_schema_id: base.metadata["current-schema-id"].as_i64().unwrap() as i32,
        },
        Requirement::AssertLastAssignedFieldId {
            last_assigned_field_id: base.metadata["last-column-id"].as_i64().unwrap() as i32,
        },
    ]
}

fn add_column(base: &LoadedTable, column: &str) -> Vec<Update> {
    let next = base.metadata["current-schema-id"].as_i64().unwrap() + 1;
    vec![
        Update::AddSchema {
            schema: schema_with(next, column),
        },
        Update::SetCurrentSchema { schema_id: -1 },
    ]
}

fn rest_properties(server: &RestCatalogServer) -> Vec<(String, String)> {
    let mut properties = vec![
        ("type".to_owned(), "rest".to_owned()),
        ("uri".to_owned(), server.uri()),
        (
            "credential".to_owned(),
            format!("{CLIENT_ID}:{CLIENT_SECRET}"),
        ),
        ("warehouse".to_owned(), server.warehouse().to_owned()),
    ];
    properties.extend(pyiceberg_s3_properties(s3()));
    properties
}

fn field_names(table: &Value) -> Vec<&str> {
    table["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|field| field["name"].as_str().unwrap())
        .collect()
}

/// Through OAuth2 client credentials: a namespace and a table created, a schema change and a
/// property change committed with requirements, a second commit from the first one's base
/// refused as a lost race, and pyiceberg's own REST client sees the table as committed.
#[tokio::test(flavor = "multi_thread")]
async fn rest_catalog_commits_with_requirements_and_reports_a_lost_race() {
    let server = rest_server("iceberg-rest", |_| {}).await;
    let catalog = connect(&server, client_credentials(CLIENT_SECRET))
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", server.log()));
    let shop = vec!["shop".to_owned()];
    assert!(!catalog.namespace_exists(&shop).await.unwrap());
    catalog
        .create_namespace(&shop, &BTreeMap::new())
        .await
        .unwrap();
    assert!(catalog.namespace_exists(&shop).await.unwrap());
    let again = catalog.create_namespace(&shop, &BTreeMap::new()).await;
    assert!(
        matches!(again, Err(CatalogError::AlreadyExists { .. })),
        "{again:?}"
    );

    let orders = TableIdent::new(&["shop"], "orders");
    assert!(!catalog.table_exists(&orders).await.unwrap());
    let created = catalog
        .create_table(
            &orders,
            &NewTable {
                schema: first_schema(),
                ..NewTable::default()
            },
        )
        .await
        .unwrap();
    assert!(catalog.table_exists(&orders).await.unwrap());
    assert_eq!(created.metadata["format-version"], 2);
    assert!(
        created
            .metadata_location
            .starts_with(&format!("{}/shop", server.warehouse())),
        "{}",
        created.metadata_location
    );

    // Two writers load the same base; the first one's schema change lands, the second's loses.
    let base = catalog.load_table(&orders).await.unwrap();
    assert_eq!(base.metadata_location, created.metadata_location);
    let first = catalog
        .commit(
            &orders,
            &schema_requirements(&base),
            &add_column(&base, "note"),
        )
        .await
        .unwrap();
    assert_eq!(first.metadata["current-schema-id"], 1);
    assert_ne!(first.metadata_location, base.metadata_location);
    let second = catalog
        .commit(
            &orders,
            &schema_requirements(&base),
            &add_column(&base, "memo"),
        )
        .await
        .expect_err("a commit from a base another commit moved on from must be refused");
    assert!(second.is_lost_race(), "{second}");
    let text = second.to_string();
    assert!(
        text.contains(&server.uri()) && text.contains("shop.orders") && text.contains("reload"),
        "{text}"
    );

    // A change without a snapshot: properties, guarded by the table's identity.
    let reloaded = catalog.load_table(&orders).await.unwrap();
    assert_eq!(reloaded.metadata_location, first.metadata_location);
    let uuid = reloaded.metadata["table-uuid"].as_str().unwrap().to_owned();
    let properties = catalog
        .commit(
            &orders,
            &[Requirement::AssertTableUuid { uuid }],
            &[Update::SetProperties {
                updates: [("tributary.pipeline".to_owned(), "shop".to_owned())].into(),
            }],
        )
        .await
        .unwrap();

    let seen = pyiceberg_table(&rest_properties(&server), "shop.orders");
    assert_eq!(
        seen["metadata_location"],
        properties.metadata_location.as_str()
    );
    assert_eq!(field_names(&seen), ["id", "body", "note"]);
    assert_eq!(seen["schema_id"], 1);
    assert_eq!(seen["properties"]["tributary.pipeline"], "shop");
    assert_eq!(seen["snapshots"], 0);
    assert_eq!(seen["format_version"], 2);
}

/// A wrong client secret or a wrong token is refused, and the error names the catalog and
/// says the credentials were refused; the right static token works.
#[tokio::test(flavor = "multi_thread")]
async fn rest_catalog_refuses_wrong_credentials_by_name() {
    let server = rest_server("iceberg-rest-auth", |_| {}).await;
    for auth in [
        client_credentials("not-the-secret"),
        RestAuth::Token(Secret::new("not-the-token")),
        RestAuth::None,
    ] {
        let error = connect(&server, auth)
            .await
            .expect_err("wrong credentials must be refused");
        let text = error.to_string();
        assert!(
            matches!(error, CatalogError::CredentialsRefused { .. }),
            "{text}"
        );
        assert!(
            text.contains(&server.uri()) && text.contains("refused the credentials"),
            "{text}"
        );
        assert!(
            !text.contains("not-the-secret") && !text.contains("not-the-token"),
            "{text}"
        );
    }
    let catalog = connect(&server, RestAuth::Token(Secret::new(STATIC_TOKEN)))
        .await
        .unwrap();
    assert!(
        !catalog
            .namespace_exists(&["shop".to_owned()])
            .await
            .unwrap()
    );
    assert!(!format!("{catalog:?}").contains(STATIC_TOKEN));
}

/// Tokens run out: one renewed before it expires (at nine tenths of `expires_in`), and one the
/// server refuses before the client thought it would (a 401) renewed and the request sent again.
#[tokio::test(flavor = "multi_thread")]
async fn rest_catalog_renews_its_token() {
    let server = rest_server("iceberg-rest-renew", |options| {
        options.token_ttl = Some(1.0)
    })
    .await;
    let catalog = connect(&server, client_credentials(CLIENT_SECRET))
        .await
        .unwrap();
    let shop = vec!["shop".to_owned()];
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!catalog.namespace_exists(&shop).await.unwrap());

    let server = rest_server("iceberg-rest-401", |options| {
        options.token_ttl = Some(1.0);
        options.expires_in = Some(3600.0);
    })
    .await;
    let catalog = connect(&server, client_credentials(CLIENT_SECRET))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    catalog
        .create_namespace(&shop, &BTreeMap::new())
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", server.log()));
    let log = server.log();
    let tokens = log.matches("POST /v1/oauth/tokens").count();
    assert_eq!(
        tokens, 2,
        "one token at the start, one after the 401:\n{log}"
    );
    assert!(log.contains("\" 401 "), "{log}");
}

/// A server that offers vended credentials in a table's config: the client loads the table,
/// leaves them unused and says so in one warning, which names no secret.
#[tokio::test]
async fn rest_catalog_says_once_that_vended_credentials_go_unused() {
    let logged = Logged::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logged.clone())
        .with_ansi(false)
        .finish();
    // The test's runtime is current-thread, so the thread's subscriber sees every event.
    let _guard = tracing_subscriber::util::SubscriberInitExt::set_default(subscriber);
    let server = rest_server("iceberg-rest-vended", |options| {
        options.table_config = vec![
            ("s3.access-key-id".into(), "vended-key".into()),
            ("s3.secret-access-key".into(), "vended-secret".into()),
        ];
    })
    .await;
    let catalog = connect(&server, client_credentials(CLIENT_SECRET))
        .await
        .unwrap();
    let ns = vec!["vended".to_owned()];
    catalog
        .create_namespace(&ns, &BTreeMap::new())
        .await
        .unwrap();
    let table = TableIdent::new(&["vended"], "t");
    let new = NewTable {
        schema: first_schema(),
        ..NewTable::default()
    };
    catalog.create_table(&table, &new).await.unwrap();
    let loaded = catalog.load_table(&table).await.unwrap();
    assert_eq!(loaded.config["s3.access-key-id"], "vended-key");

    let text = logged.text();
    assert_eq!(
        text.matches("vended storage credentials").count(),
        1,
        "{text}"
    );
    assert!(text.contains("s3.secret-access-key"), "{text}");
    assert!(
        !text.contains("vended-secret") && !text.contains(CLIENT_SECRET),
        "{text}"
    );
}

/// What a test's subscriber wrote.
#[derive(Clone, Default)]
struct Logged(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logged {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logged {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logged {
    type Writer = Logged;

    fn make_writer(&'a self) -> Logged {
        self.clone()
    }
}

/// The SQL catalog in the test PostgreSQL: a namespace and a table registered over a
/// metadata file the test writes to S3, the pointer swapped from the base it was loaded at, a
/// second swap from the same base refused as a lost race, and pyiceberg's `SqlCatalog`, given
/// the same catalog name, loads the table as it was committed.
#[tokio::test(flavor = "multi_thread")]
async fn sql_catalog_swaps_pointers_and_reports_a_lost_race() {
    let db = fresh_database("iceberg_sql").await;
    let bucket = s3().fresh_bucket("iceberg-sql").await;
    let sink = Sink::open(&s3().bucket_url(&bucket), &s3_options()).unwrap();
    let catalog = SqlCatalog::connect(SqlOptions {
        url: format!("{}?catalog_name=lake", db.url),
        catalog_name: None,
        password: None,
    })
    .await
    .unwrap();
    assert!(
        catalog
            .name()
            .starts_with("\"lake\" in postgresql://postgres@"),
        "{catalog:?}"
    );

    let shop = vec!["shop".to_owned()];
    assert!(!catalog.namespace_exists(&shop).await.unwrap());
    catalog
        .create_namespace(&shop, &BTreeMap::new())
        .await
        .unwrap();
    assert!(catalog.namespace_exists(&shop).await.unwrap());
    let again = catalog.create_namespace(&shop, &BTreeMap::new()).await;
    assert!(
        matches!(again, Err(CatalogError::AlreadyExists { .. })),
        "{again:?}"
    );
    let row: String = db
        .client
        .query_one(
            "SELECT property_value FROM iceberg_namespace_properties
             WHERE catalog_name = 'lake' AND namespace = 'shop' AND property_key = 'exists'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(row, "true");

    let orders = TableIdent::new(&["shop"], "orders");
    let location = format!("s3://{bucket}/wh/shop/orders");
    let uuid = table_uuid();
    let first = write_metadata(&sink, &location, 0, &uuid, &BTreeMap::new(), None).await;
    catalog.create_table(&orders, &first).await.unwrap();
    let twice = catalog.create_table(&orders, &first).await;
    assert!(
        matches!(twice, Err(CatalogError::AlreadyExists { .. })),
        "{twice:?}"
    );
    let base = catalog.load(&orders).await.unwrap();
    assert_eq!(base.metadata_location, first);
    assert_eq!(base.previous_metadata_location, None);

    let properties = BTreeMap::from([("tributary.pipeline".to_owned(), "shop".to_owned())]);
    let second = write_metadata(&sink, &location, 1, &uuid, &properties, Some(&first)).await;
    // Each statement is counted for tributary_catalog_requests_total (other tests in this
    // process may add theirs meanwhile).
    let sent = catalog::requests_sent();
    catalog
        .swap(&orders, &base.metadata_location, &second)
        .await
        .unwrap();
    assert!(catalog::requests_sent() > sent);
    let rival = write_metadata(&sink, &location, 2, &uuid, &BTreeMap::new(), Some(&first)).await;
    let lost = catalog
        .swap(&orders, &base.metadata_location, &rival)
        .await
        .expect_err("a swap from a base the pointer has left must be refused");
    assert!(lost.is_lost_race(), "{lost}");
    let text = lost.to_string();
    assert!(
        text.contains("\"lake\"") && text.contains("shop.orders"),
        "{text}"
    );
    let now = catalog.load(&orders).await.unwrap();
    assert_eq!(now.metadata_location, second);
    assert_eq!(
        now.previous_metadata_location.as_deref(),
        Some(first.as_str())
    );

    // Another catalog name in the same database sees none of it.
    let other = SqlCatalog::connect(SqlOptions {
        url: db.url.clone(),
        catalog_name: Some("other".into()),
        password: None,
    })
    .await
    .unwrap();
    assert!(!other.table_exists(&orders).await.unwrap());
    assert!(!other.namespace_exists(&shop).await.unwrap());

    let seen = pyiceberg_table(&sql_properties(&db, "lake"), "shop.orders");
    assert_eq!(seen["metadata_location"], second.as_str());
    assert_eq!(seen["table_uuid"], uuid.as_str());
    assert_eq!(field_names(&seen), ["id", "body"]);
    assert_eq!(seen["properties"]["tributary.pipeline"], "shop");
    assert_eq!(seen["namespaces"], json!(["shop"]));
}

/// A catalog database of JdbcCatalog's V0 layout (no `iceberg_type` column) is used as it is,
/// and pyiceberg reads the table registered in it.
#[tokio::test(flavor = "multi_thread")]
async fn sql_catalog_uses_a_v0_layout_as_it_is() {
    let db = fresh_database("iceberg_sql_v0").await;
    db.client
        .batch_execute(
            "CREATE TABLE iceberg_tables (
                 catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL,
                 table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000),
                 previous_metadata_location VARCHAR(1000),
                 PRIMARY KEY (catalog_name, table_namespace, table_name));
             CREATE TABLE iceberg_namespace_properties (
                 catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL,
                 property_key VARCHAR(255), property_value VARCHAR(1000),
                 PRIMARY KEY (catalog_name, namespace, property_key));",
        )
        .await
        .unwrap();
    let bucket = s3().fresh_bucket("iceberg-sql-v0").await;
    let sink = Sink::open(&s3().bucket_url(&bucket), &s3_options()).unwrap();
    let catalog = SqlCatalog::connect(SqlOptions {
        url: db.url.clone(),
        catalog_name: None,
        password: None,
    })
    .await
    .unwrap();
    let table = TableIdent::new(&["shop", "eu"], "orders");
    catalog
        .create_namespace(&table.namespace, &BTreeMap::new())
        .await
        .unwrap();
    let location = format!("s3://{bucket}/wh/shop.eu/orders");
    let first = write_metadata(&sink, &location, 0, &table_uuid(), &BTreeMap::new(), None).await;
    catalog.create_table(&table, &first).await.unwrap();
    let columns: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'iceberg_tables'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(columns, 5, "the V0 layout is left as it is");

    let seen = pyiceberg_table(&sql_properties(&db, DEFAULT_CATALOG_NAME), "shop.eu.orders");
    assert_eq!(seen["metadata_location"], first.as_str());
}

fn s3_options() -> BTreeMap<String, String> {
    s3().object_store_options().into_iter().collect()
}

/// pyiceberg's properties for a SQL catalog named `name` in `db`, reading files from S3.
fn sql_properties(db: &TestDatabase, name: &str) -> Vec<(String, String)> {
    let uri = db.url.replacen("postgres://", "postgresql+psycopg2://", 1);
    let mut properties = vec![
        ("type".to_owned(), "sql".to_owned()),
        ("uri".to_owned(), uri),
        ("catalog-name".to_owned(), name.to_owned()),
    ];
    properties.extend(pyiceberg_s3_properties(s3()));
    properties
}

/// A table UUID no other test uses.
fn table_uuid() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let a = nanos ^ u64::from(std::process::id()).rotate_left(32);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        n & 0xfff,
        nanos & 0xffff_ffff_ffff
    )
}

/// Writes metadata file `version` of a v2 table without snapshots (schema `first_schema`,
/// unpartitioned, unsorted) under `location`, as a writer would before a commit, and returns
/// its URL.
async fn write_metadata(
    sink: &Sink,
    location: &str,
    version: u32,
    uuid: &str,
    properties: &BTreeMap<String, String>,
    previous: Option<&str>,
) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let log: Vec<Value> = previous
        .map(|file| json!({"metadata-file": file, "timestamp-ms": now - 1}))
        .into_iter()
        .collect();
    let metadata = json!({
        "format-version": 2,
        "table-uuid": uuid,
        "location": location,
        "last-sequence-number": 0,
        "last-updated-ms": now,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [first_schema()],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": properties,
        "snapshots": [],
        "snapshot-log": [],
        "metadata-log": log,
        "refs": {},
    });
    let name = format!("{version:05}-{}.metadata.json", table_uuid());
    let bucket_url = sink.url().trim_end_matches('/');
    let key = format!(
        "{}/metadata/{name}",
        location
            .strip_prefix(bucket_url)
            .unwrap()
            .trim_start_matches('/')
    );
    sink.create(
        &ObjectPath::from(key.as_str()),
        serde_json::to_vec(&metadata).unwrap().into(),
    )
    .await
    .unwrap();
    format!("{location}/metadata/{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_commits_through_a_sql_catalog_and_a_crash_publishes_nothing_twice() {
    let catalog_db = fresh_database("iceberg_pipeline_sql_catalog").await;
    let through = Through {
        name: "sql",
        sink: vec![("catalog".into(), toml_text(&catalog_db.url))],
        pyiceberg: sql_properties(&catalog_db, DEFAULT_CATALOG_NAME),
    };
    crash_into_iceberg_through("flush.after-commit", 2, false, Some(&through)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_commits_through_a_rest_catalog_and_a_crash_publishes_nothing_twice() {
    let server = rest_server("iceberg-pipeline-rest", |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let through = Through {
        name: "rest",
        sink: rest_sink(&server, dir.path(), CLIENT_SECRET),
        pyiceberg: rest_properties(&server),
    };
    crash_into_iceberg_through("flush.after-commit", 2, false, Some(&through)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_catalog_secret_fails_the_check_by_the_catalogs_name_and_prints_no_secret() {
    let server = rest_server("iceberg-wrong-secret", |_| {}).await;
    let db = fresh_database("iceberg_wrong_secret").await;
    let dir = tempfile::tempdir().unwrap();
    let wrong = "not-the-secret-9f31c2";
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let mut fixture = Fixture::new(&db.url, "iceberg_wrong_secret", &["public.t"]).await;
    fixture
        .cfg
        .sink
        .push(("format".into(), "\"iceberg\"".into()));
    fixture
        .cfg
        .sink
        .extend(rest_sink(&server, dir.path(), wrong));
    let file = fixture.cfg.write(&fixture.dir);
    let (code, stdout, stderr) = command("check", &file, &[], &[]).await;
    let text = format!("{stdout}{stderr}");
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains(&server.uri()) && text.contains("refused the credentials"),
        "{text}"
    );
    assert!(!text.contains(wrong), "the secret is never printed: {text}");
}
