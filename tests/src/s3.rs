//! A real S3 server for the tests: `tributary-test-s3` (`tests/s3-server`), which is `s3s-fs`
//! (objects on disk, request signatures checked) with conditional puts (`If-None-Match: *`)
//! decided atomically, the primitive the commit protocol relies on.
//!
//! A bucket is a directory under the server's root, so a server's data outlives the process:
//! a stopped and restarted server still has everything.

use std::fs;
use std::io::{self, Read as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::signer::{Method, Signer as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The exact command that builds the server binary where the harness looks for it.
pub const BUILD_COMMAND: &str = "cargo build --release -p tributary-test-s3";

/// The server's executable.
const BINARY: &str = "tributary-test-s3";

const ACCESS_KEY: &str = "tributary-test";
const SECRET_KEY: &str = "tributary-test-secret-key";
const REGION: &str = "us-east-1";
const DIR_PREFIX: &str = "tributary-s3-";
/// Azurite, a Node program, takes longer to start than the S3 server.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

static SHARED: OnceLock<Result<S3Server, String>> = OnceLock::new();

/// The process-wide S3 server, started on first use and killed when the process exits.
/// Tests sharing it use buckets of their own ([`S3Server::fresh_bucket`]).
pub fn s3() -> &'static S3Server {
    process_wide(&SHARED, S3Server::try_start, |server| {
        server.kill();
        let _ = fs::remove_dir_all(&server.base_dir);
    })
}

/// What the exit hook tears down: the process-wide servers, which are never dropped.
type Teardown = Box<dyn Fn() + Send>;
static AT_EXIT: Mutex<Vec<Teardown>> = Mutex::new(Vec::new());

/// The process-wide server kept in `cell`: started by `start` on first use (its error is
/// the panic of every test that asks for it), and `stop`ped when the process exits.
pub(crate) fn process_wide<T: Send + Sync>(
    cell: &'static OnceLock<Result<T, String>>,
    start: impl FnOnce() -> Result<T, String>,
    stop: fn(&T),
) -> &'static T {
    let server = cell.get_or_init(|| {
        let server = start()?;
        at_exit(Box::new(move || {
            if let Some(Ok(server)) = cell.get() {
                stop(server);
            }
        }));
        Ok(server)
    });
    server.as_ref().unwrap_or_else(|error| panic!("{error}"))
}

fn at_exit(teardown: Teardown) {
    extern "C" fn run_all() {
        let teardowns = AT_EXIT.lock().unwrap_or_else(|p| p.into_inner());
        for teardown in teardowns.iter() {
            teardown();
        }
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    AT_EXIT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(teardown);
    // SAFETY: registers a plain function, once; atexit has no other preconditions.
    HOOK.call_once(|| unsafe {
        libc::atexit(run_all);
    });
}

/// A `tributary-test-s3` child process serving a private root directory on `127.0.0.1`.
#[derive(Debug)]
pub struct S3Server {
    binary: PathBuf,
    /// Holds `data/` (the server's root) and the server's log.
    base_dir: PathBuf,
    port: u16,
    /// Behind a lock so the exit hook can kill the shared server through `&self`.
    child: Mutex<Option<Child>>,
}

impl S3Server {
    /// Starts a private server (for a test that stops and restarts it); panics with the
    /// install command when the binary is missing.
    pub fn start() -> S3Server {
        Self::try_start().unwrap_or_else(|error| panic!("{error}"))
    }

    fn try_start() -> Result<S3Server, String> {
        let binary = find_binary()?;
        let temp = std::env::temp_dir();
        reap_abandoned(&temp, DIR_PREFIX);
        let base_dir = make_base_dir(&temp, DIR_PREFIX)?;
        let root = base_dir.join("data");
        fs::create_dir(&root)
            .map_err(|error| format!("could not create {}: {error}", root.display()))?;
        let mut server = S3Server {
            binary,
            base_dir,
            port: 0,
            child: Mutex::new(None),
        };
        // Another process may take the port between our probe and the server's bind.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// Kills the server; its data stays for [`S3Server::restart`].
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Starts the server again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().unwrap_or_else(|error| panic!("{error}"));
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:39123`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn region(&self) -> &'static str {
        REGION
    }

    pub fn access_key(&self) -> &'static str {
        ACCESS_KEY
    }

    pub fn secret_key(&self) -> &'static str {
        SECRET_KEY
    }

    /// The server's root directory: one subdirectory per bucket.
    pub fn root(&self) -> PathBuf {
        self.base_dir.join("data")
    }

    /// The server's own log (its stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.base_dir.join("server.log")
    }

    /// `object_store` configuration for this server, as `AmazonS3ConfigKey` names and values:
    /// pass them to `AmazonS3Builder::with_config` or `object_store::parse_url_opts`.
    pub fn object_store_options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_access_key_id", ACCESS_KEY.to_owned()),
            ("aws_secret_access_key", SECRET_KEY.to_owned()),
            ("aws_region", REGION.to_owned()),
            ("aws_allow_http", "true".to_owned()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }

    /// An `object_store` client for `bucket` on this server.
    pub fn object_store(&self, bucket: &str) -> AmazonS3 {
        let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
        for (key, value) in self.object_store_options() {
            let key: AmazonS3ConfigKey = key.parse().expect("the harness uses known config keys");
            builder = builder.with_config(key, value);
        }
        builder.build().unwrap_or_else(|error| {
            panic!("could not configure object_store for {bucket}: {error}")
        })
    }

    /// Creates a bucket through the S3 API (a CreateBucket request, signed by object_store as
    /// a presigned URL, since object_store has no bucket operations).
    pub async fn create_bucket(&self, name: &str) {
        let url = self
            .object_store(name)
            .signed_url(Method::PUT, &ObjectPath::from(""), Duration::from_secs(300))
            .await
            .unwrap_or_else(|error| panic!("could not sign CreateBucket {name}: {error}"));
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let request = format!(
            "PUT {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        );
        let response = http_exchange(self.port, &request)
            .await
            .unwrap_or_else(|error| panic!("CreateBucket {name} on {}: {error}", self.endpoint()));
        let status = response.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            panic!(
                "CreateBucket {name} on {} failed: {response}",
                self.endpoint()
            );
        }
    }

    /// Creates a bucket no other test uses, named after `hint`, and returns its name.
    pub async fn fresh_bucket(&self, hint: &str) -> String {
        let name = bucket_name(hint);
        self.create_bucket(&name).await;
        name
    }

    /// `s3://<bucket>`, for a pipeline's sink URL.
    pub fn bucket_url(&self, bucket: &str) -> String {
        format!("s3://{bucket}")
    }

    fn spawn(&self) -> Result<(), String> {
        let mut command = Command::new(&self.binary);
        command
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(self.root());
        let child = spawn_listening(command, &self.base_dir, self.port, "the S3 server")?;
        *self
            .child
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(child);
        Ok(())
    }

    fn kill(&self) {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(mut child) = child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.base_dir);
    }
}

/// `TRIBUTARY_S3_SERVER`, else the build in the cargo target directory (`scripts/test.sh`
/// builds it there).
fn find_binary() -> Result<PathBuf, String> {
    let mut searched = Vec::new();
    if let Some(path) = std::env::var_os("TRIBUTARY_S3_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        searched.push(format!("TRIBUTARY_S3_SERVER={}", path.display()));
    }
    let target = crate::plugins::target_dir();
    for profile in ["release", "debug"] {
        let path = target.join(profile).join(BINARY);
        if path.is_file() {
            return Ok(path);
        }
        searched.push(path.display().to_string());
    }
    Err(format!(
        "the tests' S3 server is not built (searched {}); build it with `{BUILD_COMMAND}` \
         (or run scripts/test.sh), or set TRIBUTARY_S3_SERVER to its path",
        searched.join(", ")
    ))
}

/// An S3 bucket name (lowercase letters, digits, hyphens; at most 63) no other test uses.
pub(crate) fn bucket_name(hint: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hint: String = hint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_owned();
    hint.truncate(40);
    if hint.is_empty() {
        hint.push_str("test");
    }
    format!("{hint}-{n}-{}", std::process::id())
}

/// Sends one HTTP/1.1 request and reads the whole response (the request closes the
/// connection).
pub(crate) async fn http_exchange(port: u16, request: &str) -> io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

pub(crate) fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|error| format!("could not find a free port on 127.0.0.1: {error}"))
}

/// Creates `<temp>/<prefix><pid>-<n>` (`tributary-s3-<pid>-<n>`).
fn make_base_dir(temp: &Path, prefix: &str) -> Result<PathBuf, String> {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let dir = temp.join(format!("{prefix}{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(format!("could not create {}: {error}", dir.display())),
        }
    }
}

/// Kills servers and removes directories (`<prefix><pid>-<n>`, each with the server's pid in
/// `server.pid` and its root in `data/`) left by test processes that died without cleaning
/// up (killed by a timeout, say).
fn reap_abandoned(temp: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(owner) = entry
            .file_name()
            .to_str()
            .and_then(|n| owner_pid(n, prefix))
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(owner, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if owner as u32 == std::process::id() || alive {
            continue;
        }
        let dir = entry.path();
        if let Some(pid) = fs::read_to_string(dir.join("server.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok())
        {
            // Pids get reused: only kill the process if it serves this directory.
            let root = dir.join("data");
            let ours = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| {
                    cmdline
                        .split(|byte| *byte == 0)
                        .any(|arg| arg == root.as_os_str().as_encoded_bytes())
                })
                .unwrap_or(false);
            if ours {
                // SAFETY: plain signal delivery to a process we verified.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = fs::remove_dir_all(&dir);
    }
}

fn owner_pid(name: &str, prefix: &str) -> Option<i32> {
    let (pid, n) = name.strip_prefix(prefix)?.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok().filter(|pid| *pid > 0)
}

/// An emulator's process (Azurite, fake-gcs-server): a private directory (`data/` its root,
/// its log and pid beside) under `<temp>/<prefix><pid>-<n>`, and the child serving on a free
/// port of `127.0.0.1`. Dropping it (or [`Emulator::shut_down`]) kills the child and removes
/// the directory.
#[derive(Debug)]
pub(crate) struct Emulator {
    base_dir: PathBuf,
    port: u16,
    child: Mutex<Option<Child>>,
}

impl Emulator {
    /// Start `what`: `command` gives the command line for a root directory and a port; a port
    /// another process takes first is given up for another, five times.
    pub(crate) fn start(
        prefix: &str,
        what: &str,
        command: impl Fn(&Path, u16) -> Command,
    ) -> Result<Emulator, String> {
        let temp = std::env::temp_dir();
        reap_abandoned(&temp, prefix);
        let base_dir = make_base_dir(&temp, prefix)?;
        let root = base_dir.join("data");
        fs::create_dir(&root)
            .map_err(|error| format!("could not create {}: {error}", root.display()))?;
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            match spawn_listening(command(&root, port), &base_dir, port, what) {
                Ok(child) => {
                    return Ok(Emulator {
                        base_dir,
                        port,
                        child: Mutex::new(Some(child)),
                    });
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Kill the child and remove its directory (also what the process's exit hook does for a
    /// shared emulator, which is never dropped).
    pub(crate) fn shut_down(&self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.base_dir);
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Runs a test server with its output appended to `<base_dir>/server.log` and its pid in
/// `<base_dir>/server.pid`, and waits until it accepts connections on `port` (or says why it
/// did not, with what it logged).
fn spawn_listening(
    mut command: Command,
    base_dir: &Path,
    port: u16,
    what: &str,
) -> Result<Child, String> {
    let log_path = base_dir.join("server.log");
    let open = |path: &Path| {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|error| format!("could not open {}: {error}", path.display()))
    };
    let log = open(&log_path)?;
    let log_len = log.metadata().map(|meta| meta.len()).unwrap_or(0);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(open(&log_path)?)
        .spawn()
        .map_err(|error| format!("could not run {what}: {error}"))?;
    let _ = fs::write(base_dir.join("server.pid"), child.id().to_string());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{what} exited at start ({status}) on port {port}: {}",
                log_since(&log_path, log_len)
            ));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(child);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{what} did not accept connections on port {port} within {READY_TIMEOUT:?}: {}",
                log_since(&log_path, log_len)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the server logged since `offset`, for an error message.
fn log_since(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let start = usize::try_from(offset).unwrap_or(0).min(text.len());
    let new = text.get(start..).unwrap_or_default().trim();
    if new.is_empty() {
        "(no output)".to_owned()
    } else {
        new.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_are_valid_and_unique() {
        let a = bucket_name("Commit Log_Test");
        let b = bucket_name("Commit Log_Test");
        assert_ne!(a, b);
        assert!(a.starts_with("commit-log-test-"), "{a}");
        assert!(a.len() <= 63);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(bucket_name("__").starts_with("test-"));
    }

    #[test]
    fn owner_pids_come_from_directory_names() {
        assert_eq!(owner_pid("tributary-s3-42-7", DIR_PREFIX), Some(42));
        assert_eq!(owner_pid("tributary-s3-42", DIR_PREFIX), None);
        assert_eq!(owner_pid("tributary-pg-42-7", DIR_PREFIX), None);
    }
}
