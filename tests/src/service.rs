//! `tributary run` as a child process, the way an operator runs it: a pipeline file on disk,
//! signals to stop, pause or kill it, and its log to read.
//!
//! The binary is the one `cargo test` builds beside this test executable
//! (`target/<profile>/tributary`), or `TRIBUTARY_BIN`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `tributary` binary the tests run.
pub fn tributary_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("TRIBUTARY_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/e2e-<hash> → target/<profile>/tributary
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("tributary"))
        .expect("the test executable lives in target/<profile>/deps");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p tributary-cli` (a plain `cargo test` at the workspace root builds it)",
        bin.display()
    );
    bin
}

/// What a pipeline file says, for tests that run the real service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub source_url: String,
    /// Slot and publication name.
    pub name: String,
    pub tables: Vec<String>,
    pub sink_url: String,
    pub sink_options: Vec<(String, String)>,
    pub max_delay_ms: u64,
    pub max_rows: usize,
    /// Plugins, applied in order.
    pub transforms: Vec<PathBuf>,
    /// More `[flush]` settings, as TOML values (`("chunk_mib", "1")`).
    pub flush: Vec<(String, String)>,
    /// More `[source]` settings, as TOML values (`("start_from", "\"head\"")`).
    pub source: Vec<(String, String)>,
    /// `[load]` settings, as TOML values (`("parallelism", "2")`).
    pub load: Vec<(String, String)>,
    /// More `[sink]` settings, as TOML values (`("format", "\"delta\"")`).
    pub sink: Vec<(String, String)>,
    /// Whole sections at the end of the file (`[outputs."public.t"]\nmirror = true`).
    pub sections: Vec<String>,
}

impl ServiceConfig {
    pub fn new(source_url: &str, name: &str, tables: &[&str], sink_url: &str) -> Self {
        ServiceConfig {
            source_url: source_url.to_owned(),
            name: name.to_owned(),
            tables: tables.iter().map(|t| (*t).to_owned()).collect(),
            sink_url: sink_url.to_owned(),
            sink_options: Vec::new(),
            max_delay_ms: 100,
            max_rows: 2_000,
            transforms: Vec::new(),
            flush: Vec::new(),
            source: Vec::new(),
            load: Vec::new(),
            sink: Vec::new(),
            sections: Vec::new(),
        }
    }

    /// The pipeline file's text.
    pub fn toml(&self) -> String {
        let quoted = |s: &str| format!("{s:?}");
        let tables: Vec<String> = self.tables.iter().map(|t| quoted(t)).collect();
        let mut text = format!(
            "[source]\nurl = {}\nslot = {}\npublication = {}\ntables = [{}]\nunchanged_toast = \"null\"\n\n[sink]\nurl = {}\n",
            quoted(&self.source_url),
            quoted(&self.name),
            quoted(&self.name),
            tables.join(", "),
            quoted(&self.sink_url),
        );
        if !self.source.is_empty() {
            let extra: String = self
                .source
                .iter()
                .map(|(key, value)| format!("{key} = {value}\n"))
                .collect();
            text = text.replacen("\n\n[sink]", &format!("\n{extra}\n[sink]"), 1);
        }
        for (key, value) in &self.sink {
            text.push_str(&format!("{key} = {value}\n"));
        }
        for plugin in &self.transforms {
            text.push_str(&format!(
                "\n[[transform]]\nplugin = {}\n",
                quoted(&plugin.display().to_string())
            ));
        }
        if !self.sink_options.is_empty() {
            text.push_str("\n[sink.options]\n");
            for (key, value) in &self.sink_options {
                text.push_str(&format!("{key} = {}\n", quoted(value)));
            }
        }
        text.push_str(&format!(
            "\n[flush]\nmax_delay_ms = {}\nmax_rows = {}\n",
            self.max_delay_ms, self.max_rows
        ));
        for (key, value) in &self.flush {
            text.push_str(&format!("{key} = {value}\n"));
        }
        if !self.load.is_empty() {
            text.push_str("\n[load]\n");
            for (key, value) in &self.load {
                text.push_str(&format!("{key} = {value}\n"));
            }
        }
        for section in &self.sections {
            text.push_str(&format!("\n{section}\n"));
        }
        text
    }

    /// Write the pipeline file into `dir`.
    pub fn write(&self, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join(format!("{}.toml", self.name));
        std::fs::write(&file, self.toml()).unwrap();
        file
    }
}

/// What most service tests start from: a pipeline file landing `tables` of a source in a fresh
/// bucket of the shared S3 server, the sink and its commit log to read back, and a directory of
/// the test's own for the file and the services' logs.
pub struct Fixture {
    /// Slot and publication name.
    pub name: String,
    pub cfg: ServiceConfig,
    pub sink: tributary::lake::sink::Sink,
    pub log: tributary::lake::commit::CommitLog,
    pub dir: PathBuf,
    /// The pipeline file, as `cfg` was at the start (write `cfg` again after changing it).
    pub file: PathBuf,
}

impl Fixture {
    pub async fn new(source_url: &str, hint: &str, tables: &[&str]) -> Fixture {
        let server = crate::s3();
        let bucket = server.fresh_bucket(&hint.replace('_', "-")).await;
        let url = server.bucket_url(&bucket);
        Self::on(
            source_url,
            hint,
            tables,
            &url,
            server.object_store_options(),
        )
    }

    /// The same in a container of its own on the shared Azurite (`az://<container>`).
    pub async fn on_azure(source_url: &str, hint: &str, tables: &[&str]) -> Fixture {
        Self::on_azurite(source_url, hint, tables, false).await
    }

    /// The same with the sink named in the ADLS form Spark and pyiceberg resolve
    /// (`abfss://<container>@devstoreaccount1.dfs.core.windows.net`).
    pub async fn on_azure_abfss(source_url: &str, hint: &str, tables: &[&str]) -> Fixture {
        Self::on_azurite(source_url, hint, tables, true).await
    }

    async fn on_azurite(source_url: &str, hint: &str, tables: &[&str], abfss: bool) -> Fixture {
        let server = crate::azurite();
        let container = server.fresh_container(hint).await;
        let url = match abfss {
            false => server.container_url(&container),
            true => server.abfss_url(&container),
        };
        Self::on(
            source_url,
            hint,
            tables,
            &url,
            server.object_store_options(),
        )
    }

    /// The same in a bucket of its own on the shared fake-gcs-server (`gs://<bucket>`).
    pub async fn on_gcs(source_url: &str, hint: &str, tables: &[&str]) -> Fixture {
        let server = crate::fake_gcs();
        let bucket = server.fresh_bucket(hint).await;
        let url = server.bucket_url(&bucket);
        Self::on(
            source_url,
            hint,
            tables,
            &url,
            server.object_store_options(),
        )
    }

    fn on(
        source_url: &str,
        hint: &str,
        tables: &[&str],
        sink_url: &str,
        options: Vec<(String, String)>,
    ) -> Fixture {
        let name = crate::unique_name(hint);
        let mut cfg = ServiceConfig::new(source_url, &name, tables, sink_url);
        cfg.sink_options = options;
        let sink = tributary::lake::sink::Sink::open(
            &cfg.sink_url,
            &cfg.sink_options.iter().cloned().collect(),
        )
        .unwrap();
        let log = tributary::lake::commit::CommitLog::new(
            sink.clone(),
            tributary::lake::commit::Writer::named("test"),
        );
        let dir = std::env::temp_dir().join(crate::unique_name(hint));
        Fixture {
            file: cfg.write(&dir),
            dir,
            name,
            cfg,
            sink,
            log,
        }
    }
}

/// A running `tributary run` child. Its log (stderr) goes to a file; dropping it kills it.
pub struct Service {
    child: Child,
    log: PathBuf,
    exit: Option<ExitStatus>,
}

impl Service {
    /// `tributary run --config <file> <extra args>`, logging to `<log>`.
    pub fn spawn(file: &Path, extra: &[&str], log: &Path) -> Service {
        Self::spawn_with(file, extra, log, &[])
    }

    /// The same, with extra environment variables (`TRIBUTARY_FAILPOINTS`, ...).
    pub fn spawn_with(file: &Path, extra: &[&str], log: &Path, env: &[(&str, &str)]) -> Service {
        let stderr = std::fs::File::create(log).unwrap();
        let child = Command::new(tributary_bin())
            .args(["run", "--config"])
            .arg(file)
            .args(extra)
            .env("RUST_LOG", "info,wasmtime=warn,cranelift=warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("tributary starts");
        Service {
            child,
            log: log.to_owned(),
            exit: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address of the metrics endpoint (`metrics.listen`) the service logged.
    pub fn metrics_address(&self) -> String {
        let log = self.log();
        log.split("metrics at http://")
            .nth(1)
            .and_then(|rest| rest.split("/metrics").next())
            .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"))
            .to_owned()
    }

    /// Wait until the commit log holds `changes` changes; panics with the service's log if it
    /// takes longer.
    pub async fn wait_for_landed(
        &self,
        log: &tributary::lake::commit::CommitLog,
        changes: u64,
        timeout: Duration,
    ) {
        let deadline = Instant::now() + timeout;
        while crate::lake::landed_changes(log).await < changes {
            assert!(
                Instant::now() < deadline,
                "{changes} changes did not land within {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Wait until its log contains `text`; panics with the log if it exits or takes longer.
    pub async fn wait_for_log(&mut self, text: &str, timeout: Duration) {
        self.wait_for_logged(text, 1, timeout).await;
    }

    /// Wait until its log contains `text` `times` times; panics with the log if it exits or
    /// takes longer.
    pub async fn wait_for_logged(&mut self, text: &str, times: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().matches(text).count() >= times {
                return;
            }
            if let Some(status) = self.exited() {
                panic!(
                    "tributary exited ({status}) before logging {text:?} {times} time(s):\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "tributary did not log {text:?} {times} time(s) within {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped while `self` lives.
        let sent = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(sent, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// How it exited, if it has (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().unwrap();
        }
        self.exit
    }

    /// Wait for it to exit by itself; panics with the log after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "tributary did not exit within {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then wait for a clean exit.
    pub async fn stop(mut self) -> String {
        self.signal(libc::SIGTERM);
        let status = self.wait_exit(Duration::from_secs(60)).await;
        let log = self.log();
        assert!(status.success(), "exit {status} after SIGTERM:\n{log}");
        log
    }

    /// SIGKILL, and reap it.
    pub async fn kill(mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit(Duration::from_secs(10)).await;
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What one `tributary verify` said.
pub struct Verified {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Verified {
    pub fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

/// Run `tributary verify --config <file> <args>`.
pub async fn verify(file: &Path, args: &[&str]) -> Verified {
    let run = tokio::process::Command::new(tributary_bin())
        .arg("verify")
        .arg("--config")
        .arg(file)
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("tributary verify finished within 4 minutes")
        .expect("tributary verify ran");
    Verified {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `tributary <command> --config <file> <args>` with `RUST_LOG=info` and `env` on top: its exit
/// code, stdout and stderr.
pub async fn command(
    command: &str,
    file: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let output = tokio::process::Command::new(tributary_bin())
        .arg(command)
        .arg("--config")
        .arg(file)
        .args(args)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Status code and body of `GET <path>` at `address` (`host:port`), asked the way a probe
/// asks: one HTTP/1.1 request, read to the end.
pub async fn get(address: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: tributary\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3)?.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP/1.1 status line in {head}"));
    (code, body.to_owned())
}

/// The body of `GET /metrics` at `address` (`host:port`), asserting a 200 answer.
pub async fn scrape(address: &str) -> String {
    let (code, body) = get(address, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    body
}

/// The value of the sample named exactly `series` (name and labels) in a scrape.
pub fn metric(metrics: &str, series: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The peak resident set of a live process, from `/proc/<pid>/status`, in MiB.
pub fn peak_rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib / 1024
}
