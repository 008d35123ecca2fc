//! A real Iceberg REST catalog server for the tests: `tests/catalogs/iceberg_rest.py`, which
//! serves the REST routes over pyiceberg's own `SqlCatalog` (a SQLite file of its own), on
//! `127.0.0.1`, with the interpreter `TRIBUTARY_PYTHON` names.
//!
//! Each test starts a private one ([`RestCatalogServer::start`]): it costs a Python start-up,
//! and a test's tokens, lifetimes and warehouse stay its own. The server stops when it is
//! dropped, and by itself when the test process dies (its standard input closes).

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::S3Server;

pub const CLIENT_ID: &str = "tributary-test";
pub const CLIENT_SECRET: &str = "tributary-test-client-secret";
/// A bearer token the server accepts besides those it issues.
pub const STATIC_TOKEN: &str = "tributary-test-static-token";
/// The prefix the server's config endpoint hands out; every table path carries it.
pub const PREFIX: &str = "tributary-tests";

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A `[sink]` setting's value as TOML spells a string.
pub fn toml_text(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// The `[sink]` settings of `server` with OAuth2 client credentials, `secret` written to a
/// file in `dir`.
pub fn rest_sink(server: &RestCatalogServer, dir: &Path, secret: &str) -> Vec<(String, String)> {
    let file = dir.join("catalog-secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    vec![
        ("catalog".into(), toml_text(&server.uri())),
        ("catalog_warehouse".into(), toml_text(server.warehouse())),
        ("catalog_client_id".into(), toml_text(CLIENT_ID)),
        (
            "catalog_client_secret_file".into(),
            toml_text(&file.display().to_string()),
        ),
    ]
}

/// How to start a server.
#[derive(Debug, Clone, Default)]
pub struct RestServerOptions {
    /// Where new tables go, e.g. `s3://bucket/wh`.
    pub warehouse: String,
    /// pyiceberg FileIO properties (`s3.endpoint`, ...) for writing metadata files.
    pub io: Vec<(String, String)>,
    /// Seconds an issued token is good for (the server's default when `None`).
    pub token_ttl: Option<f64>,
    /// The `expires_in` told with a token, when it should differ from `token_ttl`.
    pub expires_in: Option<f64>,
    /// Keys answered in a loaded table's `config` (vended credentials, say).
    pub table_config: Vec<(String, String)>,
}

impl RestServerOptions {
    /// A warehouse in `bucket` of `s3`, written with its credentials.
    pub fn on_s3(s3: &S3Server, bucket: &str) -> RestServerOptions {
        RestServerOptions {
            warehouse: format!("s3://{bucket}/wh"),
            io: pyiceberg_s3_properties(s3),
            ..RestServerOptions::default()
        }
    }
}

/// pyiceberg's FileIO properties for `s3`.
pub fn pyiceberg_s3_properties(s3: &S3Server) -> Vec<(String, String)> {
    [
        ("s3.endpoint", s3.endpoint()),
        ("s3.access-key-id", s3.access_key().to_owned()),
        ("s3.secret-access-key", s3.secret_key().to_owned()),
        ("s3.region", s3.region().to_owned()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect()
}

/// A running server.
#[derive(Debug)]
pub struct RestCatalogServer {
    child: Child,
    /// Held open: the server stops when it closes.
    _stdin: ChildStdin,
    dir: tempfile::TempDir,
    port: u16,
    warehouse: String,
}

impl RestCatalogServer {
    /// Starts a server and waits until it listens; panics with its log when it does not.
    pub fn start(options: &RestServerOptions) -> RestCatalogServer {
        let dir = tempfile::Builder::new()
            .prefix("tributary-iceberg-rest-")
            .tempdir()
            .expect("a temporary directory for the catalog server");
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).expect("the catalog server's log file");
        let db = format!("sqlite:///{}", dir.path().join("catalog.db").display());
        let mut command = Command::new(python());
        command
            .arg(script())
            .args([
                "--port",
                "0",
                "--warehouse",
                &options.warehouse,
                "--db",
                &db,
            ])
            .args(["--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET])
            .args([
                "--token",
                STATIC_TOKEN,
                "--prefix",
                PREFIX,
                "--exit-on-stdin-eof",
            ]);
        for (key, value) in &options.io {
            command.arg("--io").arg(format!("{key}={value}"));
        }
        for (key, value) in &options.table_config {
            command.arg("--table-config").arg(format!("{key}={value}"));
        }
        if let Some(ttl) = options.token_ttl {
            command.args(["--token-ttl", &ttl.to_string()]);
        }
        if let Some(told) = options.expires_in {
            command.args(["--expires-in", &told.to_string()]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "could not run {} (run the tests through scripts/test.sh, which installs pyiceberg): {error}",
                    python()
                )
            });
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let port = rx
            .recv_timeout(READY_TIMEOUT)
            .ok()
            .and_then(|line| line.trim().parse::<u16>().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the Iceberg REST catalog server did not start within {READY_TIMEOUT:?}: {}",
                read_log(&log_path)
            );
        };
        RestCatalogServer {
            child,
            _stdin: stdin,
            dir,
            port,
            warehouse: options.warehouse.clone(),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }

    /// What the server logged (one line per request, and any traceback).
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("server.log"))
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The interpreter `TRIBUTARY_PYTHON` names (the tools' environment, with pyiceberg).
pub fn python() -> String {
    std::env::var("TRIBUTARY_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A script of `tests/catalogs/`.
pub fn catalog_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("catalogs")
        .join(name)
}

fn script() -> PathBuf {
    catalog_script("iceberg_rest.py")
}

fn read_log(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    if text.trim().is_empty() {
        "(no output)".to_owned()
    } else {
        text
    }
}

/// What pyiceberg sees of a table through a catalog: `tests/catalogs/read_table.py` run with
/// the catalog's properties (`type` = `rest` or `sql`, `uri`, credentials, FileIO).
pub fn pyiceberg_table(properties: &[(String, String)], table: &str) -> serde_json::Value {
    let properties: serde_json::Map<String, serde_json::Value> = properties
        .iter()
        .map(|(key, value)| (key.clone(), serde_json::Value::from(value.as_str())))
        .collect();
    let script = catalog_script("read_table.py");
    let output = Command::new(python())
        .arg(&script)
        .arg(serde_json::Value::Object(properties).to_string())
        .arg(table)
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", python()));
    assert!(
        output.status.success(),
        "{} {table} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("read_table.py prints JSON")
}
