//! The shared PostgreSQL cluster and a fresh database per test.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use tributary_cluster::{ClusterOptions, TempCluster};

/// The shared cluster, or why it could not start (so every test reports the same cause
/// instead of each trying again).
static CLUSTER: OnceLock<Result<TempCluster, String>> = OnceLock::new();

/// Roles the cluster authenticates by password, and how: a test creates the role with a
/// password (`md5` needs `password_encryption = md5` when the password is set).
pub const AUTH_METHODS: [(&str, &str); 3] = [
    ("auth_password", "password"),
    ("auth_md5", "md5"),
    ("auth_scram", "scram-sha-256"),
];

/// The process-wide cluster, started on first use and stopped when the process exits.
///
/// Blocks while the cluster starts (a second or two), which is fine inside a test runtime.
pub fn postgres() -> &'static TempCluster {
    let cluster = CLUSTER.get_or_init(|| {
        // Every test takes a slot and a walsender of its own, all in this one cluster.
        let mut options = ClusterOptions::fast()
            .setting("max_replication_slots", "200")
            .setting("max_wal_senders", "100")
            .setting("max_connections", "300")
            // Two-phase commit tests prepare transactions.
            .setting("max_prepared_transactions", "20");
        // Roles that must prove a password, one per method (see `AUTH_METHODS`).
        for (role, method) in AUTH_METHODS {
            for database in ["all", "replication"] {
                options = options.hba_rule(format!("host {database} {role} 127.0.0.1/32 {method}"));
            }
        }
        let cluster = TempCluster::start(options).map_err(|error| format!("{error}"))?;
        register_exit_hook();
        Ok(cluster)
    });
    match cluster {
        Ok(cluster) => cluster,
        Err(error) => panic!("the test PostgreSQL cluster did not start: {error}"),
    }
}

fn register_exit_hook() {
    extern "C" fn stop_cluster() {
        if let Some(Ok(cluster)) = CLUSTER.get() {
            let _ = cluster.shutdown();
        }
    }
    // SAFETY: registers a plain function; atexit has no other preconditions.
    unsafe { libc::atexit(stop_cluster) };
}

/// The PostgreSQL majors the suite runs besides the system's: `ensure_tested_postgres_majors`
/// in `scripts/lib.sh` installs each, and `tests/e2e/versions.rs` runs a core subset on each.
pub const TESTED_MAJORS: [u32; 3] = [16, 17, 18];

/// The directory holding PostgreSQL `major`'s `initdb`, `pg_ctl` and `postgres`:
/// `TRIBUTARY_PG<major>_BIN`, else where `scripts/test.sh` installs it (`ensure_postgres_major`
/// in `scripts/lib.sh`): the tools directory, or `/opt/tributary/postgresql-<major>` when
/// root's tools directory is out of the postgres user's reach.
///
/// Panics, naming the install step, when none of them holds the binaries: a test that needs a
/// major fails without it rather than passing untested.
pub fn postgres_bin(major: u32) -> PathBuf {
    let variable = format!("TRIBUTARY_PG{major}_BIN");
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os(&variable) {
        candidates.push(PathBuf::from(dir));
    }
    let tools = std::env::var_os("TRIBUTARY_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tributary/tools")));
    let home = format!("postgresql-{major}");
    if let Some(tools) = tools {
        candidates.push(tools.join(&home).join("bin"));
    }
    candidates.push(Path::new("/opt/tributary").join(&home).join("bin"));
    let found = candidates.iter().find(|dir| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|name| dir.join(name).is_file())
    });
    match found {
        Some(dir) => dir.clone(),
        None => panic!(
            "PostgreSQL {major} server binaries not found (searched {}); run scripts/test.sh, \
             which installs them, or only this step: `bash -c 'source scripts/lib.sh && \
             ensure_postgres_major {major}'`; or set {variable} to the directory holding \
             PostgreSQL {major}'s initdb, pg_ctl and postgres",
            candidates
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A throwaway cluster of PostgreSQL `major` ([`postgres_bin`]) with `options` (which name no
/// `bin_dir`), checked to be that major. Panics when it cannot start or is another major.
pub fn cluster_of(major: u32, options: ClusterOptions) -> TempCluster {
    let options = ClusterOptions {
        bin_dir: Some(postgres_bin(major)),
        ..options
    };
    let cluster = TempCluster::start(options)
        .unwrap_or_else(|error| panic!("a PostgreSQL {major} cluster did not start: {error}"));
    assert!(
        cluster.server_version().starts_with(&format!("{major}.")),
        "{} holds PostgreSQL {}, not {major}; point TRIBUTARY_PG{major}_BIN at a build of \
         {major}",
        cluster.bin_dir().display(),
        cluster.server_version()
    );
    cluster
}

/// A database of its own for one test.
pub struct TestDatabase {
    /// The database name, unique in the cluster.
    pub name: String,
    /// A connection URL for it (superuser `postgres`, trust authentication).
    pub url: String,
    /// A connected client; its connection task runs on the test's runtime.
    pub client: tokio_postgres::Client,
}

impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A name no other test in this cluster uses: the hint (made identifier-safe), a counter and
/// the pid. Use it for databases, slots and publications.
pub fn unique_name(hint: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hint: String = hint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    // Identifiers stop at 63 bytes; leave room for the suffix.
    hint.truncate(40);
    format!("{hint}_{n}_{}", std::process::id())
}

/// Creates a new database for one test and connects to it.
///
/// Must be called inside a tokio runtime (the connection task is spawned on it).
pub async fn fresh_database(hint: &str) -> TestDatabase {
    database_on(postgres(), hint).await
}

/// Creates a new database in `cluster` (the shared one or a test's own) and connects to it.
///
/// Must be called inside a tokio runtime (the connection task is spawned on it).
pub async fn database_on(cluster: &TempCluster, hint: &str) -> TestDatabase {
    let name = unique_name(hint);
    let admin = connect(&cluster.url("postgres")).await;
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap_or_else(|error| panic!("could not create database {name}: {error}"));
    drop(admin);
    let url = cluster.url(&name);
    let client = connect(&url).await;
    TestDatabase { name, url, client }
}

/// A plain SQL connection (for a cluster of a test's own; [`fresh_database`] gives one).
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("could not connect to {url}: {error}"));
    tokio::spawn(async move {
        // The connection ends when the client is dropped; an error then is of no interest.
        let _ = connection.await;
    });
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_unique_and_safe_identifiers() {
        let a = unique_name("Replication Slot-Test");
        let b = unique_name("Replication Slot-Test");
        assert_ne!(a, b);
        assert!(a.starts_with("replication_slot_test_"), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        );
        let long = unique_name(&"x".repeat(200));
        assert!(long.len() <= 63, "{long}");
    }
}
