//! A throwaway PostgreSQL cluster for `tributary demo` and the test suite.
//!
//! [`TempCluster::start`] finds the server binaries, makes a private data directory under the
//! system temp dir, runs `initdb`, configures the server for logical replication on a free
//! TCP port of `127.0.0.1` (and a Unix socket in its own directory, so it never collides with a
//! system cluster), and starts it with `pg_ctl -w start`. Dropping the value stops the server
//! (`pg_ctl -m fast stop`) and removes the directory unless [`ClusterOptions::keep`] is set.
//!
//! `initdb` and `postgres` refuse to run as root. When the effective uid is 0 every server
//! command runs as the `postgres` system user, and the directory is handed to that user; the
//! directory lives under the temp dir rather than a home directory so that user can reach it.
//!
//! For failover, [`TempCluster::start_standby`] makes a physical standby of a cluster from a
//! cold copy of its data directory, set up to synchronise the primary's failover slots
//! (PostgreSQL 17 and later), and [`TempCluster::promote`] turns it into the new primary.
//!
//! The API is synchronous (it runs child processes and waits for them): async callers use
//! `spawn_blocking`.
//!
//! A process that dies without dropping its cluster (killed by a timeout, say) leaves a
//! postmaster and a directory behind. Each start reaps such leftovers: directories whose owning
//! process is gone are stopped and removed.

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The address the cluster listens on.
pub const HOST: &str = "127.0.0.1";

/// Prefix of the directories this module creates under the temp dir.
const DIR_PREFIX: &str = "tributary-pg-";

/// Directories of clusters started with [`ClusterOptions::keep`] carry this after the prefix,
/// so the reaper leaves them alone.
const KEPT_MARK: &str = "kept-";

/// How many times a start is retried when another process takes the chosen port first.
const PORT_ATTEMPTS: usize = 5;

/// How many trailing lines of a log or of a command's output an error carries.
const TAIL_LINES: usize = 20;

/// How [`TempCluster::stop_server`] stops the server (`pg_ctl stop -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Disconnect every client and shut down cleanly, with a checkpoint.
    Fast,
    /// Quit at once, as a crash would; the next start recovers from the WAL.
    Immediate,
}

impl StopMode {
    fn as_str(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// How to start a [`TempCluster`].
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Turn off `fsync` and `full_page_writes`: a crash of the machine may lose the cluster,
    /// which is what a throwaway cluster is for, and everything runs faster.
    pub fast: bool,
    /// Leave the data directory in place after the cluster stops (for a post-mortem).
    pub keep: bool,
    /// The directory holding `initdb`, `pg_ctl` and `postgres`; searched for when `None`.
    pub bin_dir: Option<PathBuf>,
    /// Extra `postgresql.conf` settings, applied after the defaults (so they win).
    pub settings: Vec<(String, String)>,
    /// Extra `pg_hba.conf` lines, placed before the trust-everything defaults (the first
    /// matching line wins), e.g. to make one role authenticate with SCRAM.
    pub hba: Vec<String>,
    /// Files written into the data directory before the server starts, readable by the
    /// server's user alone (mode 0600): a TLS certificate and key that `ssl_cert_file` and
    /// `ssl_key_file` name relative to the data directory, say.
    pub files: Vec<(String, Vec<u8>)>,
}

impl ClusterOptions {
    /// Options for tests and the demo: fast, removed afterwards.
    pub fn fast() -> Self {
        Self {
            fast: true,
            ..Self::default()
        }
    }

    /// Adds a `pg_hba.conf` line that is matched before the defaults.
    pub fn hba_rule(mut self, line: impl Into<String>) -> Self {
        self.hba.push(line.into());
        self
    }

    /// Adds a file to the data directory (see [`ClusterOptions::files`]).
    pub fn file(mut self, name: impl Into<String>, content: impl Into<Vec<u8>>) -> Self {
        self.files.push((name.into(), content.into()));
        self
    }

    /// Adds a `postgresql.conf` setting; later settings win over earlier ones and the defaults.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }
}

/// What went wrong while starting or stopping a [`TempCluster`].
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries found (searched {searched}); install them, e.g. \
         `apt-get install postgresql-15`, or set TRIBUTARY_PG_BIN to the directory that holds \
         initdb and postgres"
    )]
    BinariesNotFound { searched: String },

    #[error(
        "initdb and postgres refuse to run as root, and there is no `postgres` system user to \
         run them as; create one (`useradd --system --user-group postgres`) or run as an \
         ordinary user"
    )]
    NoPostgresUser,

    #[error("could not find a free TCP port on {HOST}")]
    NoFreePort { source: io::Error },

    #[error("could not {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error("could not run {}", program.display())]
    Spawn { program: PathBuf, source: io::Error },

    #[error("{step} failed ({status}){}", tail_suffix(output))]
    Command {
        step: &'static str,
        status: ExitStatus,
        /// The tail of the command's stderr and stdout, and of the server log where relevant.
        output: String,
    },

    #[error("could not make sense of the server version {output:?} from {}", program.display())]
    Version { program: PathBuf, output: String },
}

fn tail_suffix(output: &str) -> String {
    if output.trim().is_empty() {
        String::new()
    } else {
        format!(":\n{}", output.trim_end())
    }
}

/// A running throwaway PostgreSQL cluster; stopped (and its directory removed) on drop.
#[derive(Debug)]
pub struct TempCluster {
    bin_dir: PathBuf,
    /// The directory this cluster owns: it holds `data/`, the socket and the log.
    base_dir: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    version: String,
    run_as: Option<RunAs>,
    keep: bool,
    stopped: AtomicBool,
}

/// The system user that server commands run as when we are root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

impl TempCluster {
    /// Creates, configures and starts a cluster; blocks until it accepts connections.
    pub fn start(options: ClusterOptions) -> Result<TempCluster, ClusterError> {
        let bin_dir = match &options.bin_dir {
            Some(dir) => {
                if !has_server_binaries(dir) {
                    return Err(ClusterError::BinariesNotFound {
                        searched: dir.display().to_string(),
                    });
                }
                dir.clone()
            }
            None => find_bin_dir()?,
        };
        let version = server_version_of(&bin_dir)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user()?)
        } else {
            None
        };

        let temp = base_temp_dir(run_as.is_some());
        reap_abandoned(&temp);
        let base_dir = make_base_dir(&temp, options.keep)?;
        let mut cluster = TempCluster {
            data_dir: base_dir.join("data"),
            log_path: base_dir.join("postgres.log"),
            base_dir,
            bin_dir,
            port: 0,
            version,
            run_as,
            keep: options.keep,
            // Nothing to stop until the server has started; drop still removes the directory.
            stopped: AtomicBool::new(true),
        };
        if let Some(user) = run_as {
            chown(&cluster.base_dir, user)?;
        }
        cluster.init()?;

        let mut attempt = 0;
        loop {
            attempt += 1;
            cluster.port = free_port()?;
            cluster.configure(&options)?;
            match cluster.pg_ctl_start() {
                Ok(()) => break,
                Err(_) if attempt < PORT_ATTEMPTS && cluster.lost_port_race() => continue,
                Err(error) => return Err(error),
            }
        }
        cluster.stopped.store(false, Ordering::SeqCst);
        Ok(cluster)
    }

    /// The TCP port the server listens on (on [`HOST`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address the server listens on: `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        HOST
    }

    /// The directory holding the server's Unix socket (for `host=` in a libpq connection string).
    pub fn socket_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A connection URL for `dbname` as the superuser `postgres` (trust authentication).
    pub fn url(&self, dbname: &str) -> String {
        format!("postgres://postgres@{HOST}:{}/{dbname}", self.port)
    }

    /// The directory the server binaries were taken from.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The server version, e.g. `15.18`.
    pub fn server_version(&self) -> &str {
        &self.version
    }

    /// The server's log file (`pg_ctl -l`).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Stops the server with `pg_ctl stop -m <mode>`, keeping its directory, so that
    /// [`start_again`](Self::start_again) brings it back: a restart, as operators do one
    /// (`Fast`) or as a crash does (`Immediate`, recovered from the WAL at the next start).
    pub fn stop_server(&self, mode: StopMode) -> Result<(), ClusterError> {
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", mode.as_str(), "-w", "-t", "60", "stop"]);
        let output = run(&mut pg_ctl, self.program("pg_ctl"))?;
        check("pg_ctl stop", &output, Some(&self.log_path))?;
        self.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Starts a server [`stop_server`](Self::stop_server) stopped, on the same port; blocks
    /// until it accepts connections (after crash recovery, if it needs one).
    pub fn start_again(&self) -> Result<(), ClusterError> {
        self.pg_ctl_start()?;
        self.stopped.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Makes a physical standby of this cluster, which must be PostgreSQL 17 or later, and
    /// starts it; blocks until it accepts (read-only) connections.
    ///
    /// The standby is a cold copy: this cluster stops cleanly (`pg_ctl -m fast stop`, so the
    /// copy is consistent without a base backup tool), a physical slot named `slot` is created
    /// in it (single-user mode, reserving WAL from now), its data directory is copied, and it
    /// starts again with `synchronized_standby_slots = 'slot'`: logical walsenders send a
    /// failover slot's changes only once the standby has them. The copy loses the physical slot,
    /// gets `standby.signal` and streams from this cluster through that slot
    /// (`primary_slot_name`, `primary_conninfo` naming a database), with
    /// `hot_standby_feedback = on` and `sync_replication_slots = on`, so the server keeps
    /// failover slots synchronised on it. `options` are the standby's own (its `settings`
    /// win); `bin_dir` is ignored, the standby runs this cluster's binaries.
    pub fn start_standby(
        &self,
        slot: &str,
        options: ClusterOptions,
    ) -> Result<TempCluster, ClusterError> {
        self.stop_server(StopMode::Fast)?;
        self.single_user(&format!(
            "SELECT pg_create_physical_replication_slot({}, true);",
            quote(slot)
        ))?;

        let temp = base_temp_dir(self.run_as.is_some());
        let base_dir = make_base_dir(&temp, options.keep)?;
        let mut standby = TempCluster {
            data_dir: base_dir.join("data"),
            log_path: base_dir.join("postgres.log"),
            base_dir,
            bin_dir: self.bin_dir.clone(),
            port: 0,
            version: self.version.clone(),
            run_as: self.run_as,
            keep: options.keep,
            stopped: AtomicBool::new(true),
        };
        if let Some(user) = self.run_as {
            chown(&standby.base_dir, user)?;
        }
        let mut cp = Command::new("cp");
        cp.arg("-a").arg(&self.data_dir).arg(&standby.data_dir);
        if let Some(user) = self.run_as {
            cp.uid(user.uid).gid(user.gid);
        }
        let output = run(&mut cp, PathBuf::from("cp"))?;
        check("copying the data directory", &output, None)?;
        // The slot is the primary's, for this standby; the copy must not keep WAL for it.
        let copied_slot = standby.data_dir.join("pg_replslot").join(slot);
        fs::remove_dir_all(&copied_slot).map_err(io_error("remove", &copied_slot))?;
        let signal = standby.data_dir.join("standby.signal");
        fs::write(&signal, "").map_err(io_error("write", &signal))?;
        if let Some(user) = self.run_as {
            chown(&signal, user)?;
        }

        let auto = self.data_dir.join("postgresql.auto.conf");
        let mut text = fs::read_to_string(&auto).map_err(io_error("read", &auto))?;
        let _ = writeln!(text, "synchronized_standby_slots = {}", quote(slot));
        fs::write(&auto, text).map_err(io_error("write", &auto))?;
        self.start_again()?;

        let primary_conninfo = format!(
            "host={HOST} port={} user=postgres dbname=postgres application_name={slot}",
            self.port
        );
        let mut standby_options = options.clone();
        standby_options.settings = vec![
            ("primary_conninfo".into(), quote(&primary_conninfo)),
            ("primary_slot_name".into(), quote(slot)),
            ("hot_standby".into(), "on".into()),
            ("hot_standby_feedback".into(), "on".into()),
            ("sync_replication_slots".into(), "on".into()),
        ];
        standby_options.settings.extend(options.settings);
        let mut attempt = 0;
        loop {
            attempt += 1;
            standby.port = free_port()?;
            standby.configure(&standby_options)?;
            match standby.pg_ctl_start() {
                Ok(()) => break,
                Err(_) if attempt < PORT_ATTEMPTS && standby.lost_port_race() => continue,
                Err(error) => return Err(error),
            }
        }
        standby.stopped.store(false, Ordering::SeqCst);
        Ok(standby)
    }

    /// Promotes a standby to a primary (`pg_ctl promote -w`): it ends recovery on a new
    /// timeline and accepts writes when this returns.
    pub fn promote(&self) -> Result<(), ClusterError> {
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-w", "-t", "60", "promote"]);
        let output = run(&mut pg_ctl, self.program("pg_ctl"))?;
        check("pg_ctl promote", &output, Some(&self.log_path))
    }

    /// Runs `sql` in single-user mode on the stopped server.
    fn single_user(&self, sql: &str) -> Result<(), ClusterError> {
        let mut postgres = self.command("postgres");
        postgres
            .arg("--single")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("postgres")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let program = self.program("postgres");
        let mut child = postgres.spawn().map_err(|source| ClusterError::Spawn {
            program: program.clone(),
            source,
        })?;
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().expect("stdin is piped");
            stdin
                .write_all(format!("{sql}\n").as_bytes())
                .map_err(|source| ClusterError::Spawn {
                    program: program.clone(),
                    source,
                })?;
        }
        let output = child
            .wait_with_output()
            .map_err(|source| ClusterError::Spawn { program, source })?;
        check("postgres --single", &output, None)?;
        let said = String::from_utf8_lossy(&output.stderr);
        if said.contains("ERROR:") {
            return Err(ClusterError::Command {
                step: "postgres --single",
                status: output.status,
                output: tail(&said, TAIL_LINES),
            });
        }
        Ok(())
    }

    /// Stops the server and removes its directory (unless kept).
    pub fn stop(self) -> Result<(), ClusterError> {
        self.shutdown()
    }

    /// Stops the server and removes its directory (unless kept), through a shared reference:
    /// for a cluster held in a `static`, which is never dropped. Later calls do nothing, and
    /// neither does the drop that follows.
    pub fn shutdown(&self) -> Result<(), ClusterError> {
        let result = if self.stopped.swap(true, Ordering::SeqCst) {
            Ok(())
        } else {
            self.pg_ctl_stop()
        };
        if !self.keep {
            // A server that refused to stop still holds the directory: killing it first keeps
            // the removal from racing its writes.
            if result.is_err() {
                kill_postmaster(&self.data_dir);
            }
            let _ = fs::remove_dir_all(&self.base_dir);
        }
        result
    }

    fn init(&self) -> Result<(), ClusterError> {
        let mut initdb = self.command("initdb");
        initdb
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .arg("--no-instructions");
        let output = run(&mut initdb, self.program("initdb"))?;
        check("initdb", &output, None)
    }

    /// Writes the settings (all of them, so a retry on another port simply rewrites them) and
    /// the authentication rules.
    fn configure(&self, options: &ClusterOptions) -> Result<(), ClusterError> {
        let conf = self.data_dir.join("postgresql.conf");
        let include = "include_if_exists = 'tributary.conf'\n";
        let current = fs::read_to_string(&conf).map_err(io_error("read", &conf))?;
        if !current.contains(include) {
            fs::write(&conf, format!("{current}\n{include}")).map_err(io_error("write", &conf))?;
        }
        let settings = render_settings(&settings_for(options, self.port, &self.base_dir));
        let ours = self.data_dir.join("tributary.conf");
        fs::write(&ours, settings).map_err(io_error("write", &ours))?;

        let hba = self.data_dir.join("pg_hba.conf");
        let mut rules: String = options.hba.iter().map(|l| format!("{l}\n")).collect();
        rules.push_str(HBA);
        fs::write(&hba, rules).map_err(io_error("write", &hba))?;
        if let Some(user) = self.run_as {
            chown(&ours, user)?;
            chown(&hba, user)?;
        }
        for (name, content) in &options.files {
            use std::os::unix::fs::PermissionsExt;
            let path = self.data_dir.join(name);
            fs::write(&path, content).map_err(io_error("write", &path))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                .map_err(io_error("set the mode of", &path))?;
            if let Some(user) = self.run_as {
                chown(&path, user)?;
            }
        }
        Ok(())
    }

    fn pg_ctl_start(&self) -> Result<(), ClusterError> {
        // A fresh log per attempt, so a retry judges only its own failure.
        let _ = fs::remove_file(&self.log_path);
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(&self.log_path)
            .args(["-w", "-t", "60", "start"]);
        let output = run(&mut pg_ctl, self.program("pg_ctl"))?;
        check("pg_ctl start", &output, Some(&self.log_path))
    }

    fn pg_ctl_stop(&self) -> Result<(), ClusterError> {
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", "fast", "-w", "-t", "60", "stop"]);
        let output = run(&mut pg_ctl, self.program("pg_ctl"))?;
        check("pg_ctl stop", &output, Some(&self.log_path))
    }

    /// Whether the last failed start failed because another process bound our port first.
    fn lost_port_race(&self) -> bool {
        fs::read_to_string(&self.log_path)
            .map(|log| log.contains("Address already in use"))
            .unwrap_or(false)
    }

    fn program(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// A server command, run as the `postgres` user when we are root, from a directory that
    /// user can enter (the server resolves its working directory at start).
    fn command(&self, name: &str) -> Command {
        let mut command = Command::new(self.program(name));
        command
            .current_dir(&self.base_dir)
            .stdin(Stdio::null())
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST");
        if let Some(user) = self.run_as {
            // std drops supplementary groups when it changes the uid of a root process.
            command.uid(user.uid).gid(user.gid);
        }
        command
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

const HBA: &str = "\
# Throwaway cluster: trust everything local, including replication connections.
local   all             all                     trust
local   replication     all                     trust
host    all             all     127.0.0.1/32    trust
host    replication     all     127.0.0.1/32    trust
";

/// The settings a cluster runs with, in order; later entries win.
fn settings_for(options: &ClusterOptions, port: u16, socket_dir: &Path) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> = vec![
        ("listen_addresses".into(), quote(HOST)),
        ("port".into(), port.to_string()),
        (
            "unix_socket_directories".into(),
            quote(&socket_dir.to_string_lossy()),
        ),
        ("wal_level".into(), "logical".into()),
        ("max_wal_senders".into(), "20".into()),
        ("max_replication_slots".into(), "20".into()),
        ("logging_collector".into(), "off".into()),
    ];
    if options.fast {
        // `synchronous_commit` stays on: with `fsync` off a commit's flush costs a write(2),
        // while turning it off would hold each commit back from logical decoding (which only
        // reads flushed WAL) until the WAL writer's next round, up to `wal_writer_delay`.
        for name in ["fsync", "full_page_writes"] {
            settings.push((name.into(), "off".into()));
        }
    }
    settings.extend(options.settings.iter().cloned());
    settings
}

fn render_settings(settings: &[(String, String)]) -> String {
    let mut out = String::from("# Written by tributary for a throwaway cluster.\n");
    for (name, value) in settings {
        let _ = writeln!(out, "{name} = {value}");
    }
    out
}

/// A single-quoted `postgresql.conf` string (SQL quotes strings the same way).
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Finds the directory that holds `initdb`, `pg_ctl` and `postgres`.
fn find_bin_dir() -> Result<PathBuf, ClusterError> {
    let mut searched = Vec::new();
    if let Some(dir) = std::env::var_os("TRIBUTARY_PG_BIN") {
        let dir = PathBuf::from(dir);
        if has_server_binaries(&dir) {
            return Ok(dir);
        }
        searched.push(format!("TRIBUTARY_PG_BIN={}", dir.display()));
    }
    searched.push("`pg_config --bindir`".into());
    if let Some(dir) = pg_config_bindir()
        && has_server_binaries(&dir)
    {
        return Ok(dir);
    }
    searched.push("/usr/lib/postgresql/*/bin".into());
    if let Some(dir) = newest_debian_bin_dir(Path::new("/usr/lib/postgresql")) {
        return Ok(dir);
    }
    Err(ClusterError::BinariesNotFound {
        searched: searched.join(", "),
    })
}

fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|name| dir.join(name).is_file())
}

fn pg_config_bindir() -> Option<PathBuf> {
    let output = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = String::from_utf8(output.stdout).ok()?;
    let dir = dir.trim();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The highest version's `bin` under Debian's `/usr/lib/postgresql/<version>/bin` layout.
fn newest_debian_bin_dir(root: &Path) -> Option<PathBuf> {
    let entries = fs::read_dir(root).ok()?;
    let mut versions: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = parse_version(entry.file_name().to_str()?)?;
            let bin = entry.path().join("bin");
            has_server_binaries(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Parses a dotted version such as `15` or `9.6` into its numeric parts.
fn parse_version(text: &str) -> Option<Vec<u32>> {
    text.split('.').map(|part| part.parse().ok()).collect()
}

fn server_version_of(bin_dir: &Path) -> Result<String, ClusterError> {
    let program = bin_dir.join("postgres");
    let output = run(Command::new(&program).arg("--version"), program.clone())?;
    check("postgres --version", &output, None)?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    version_from_banner(&text)
        .map(str::to_owned)
        .ok_or(ClusterError::Version {
            program,
            output: text.trim().to_owned(),
        })
}

/// Picks the version out of `postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`.
fn version_from_banner(banner: &str) -> Option<&str> {
    let rest = banner.split_once("(PostgreSQL)")?.1;
    let version = rest.split_whitespace().next()?;
    version
        .starts_with(|c: char| c.is_ascii_digit())
        .then_some(version)
}

/// Looks up the `postgres` system user.
fn postgres_user() -> Result<RunAs, ClusterError> {
    let name = CString::new("postgres").expect("no interior nul");
    // SAFETY: `name` is a valid C string; getpwnam returns null or a pointer to a static
    // record that stays valid until the next getpw* call, and we copy out of it at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(ClusterError::NoPostgresUser);
    }
    // SAFETY: non-null, see above.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok(RunAs { uid, gid })
}

/// The temp dir, or `/tmp` when we hand the cluster to another user and that user could not
/// reach the temp dir (a `TMPDIR` inside root's home, say).
fn base_temp_dir(other_user: bool) -> PathBuf {
    let temp = std::env::temp_dir();
    if other_user && !world_traversable(&temp) {
        PathBuf::from("/tmp")
    } else {
        temp
    }
}

fn world_traversable(dir: &Path) -> bool {
    dir.ancestors().all(|dir| {
        fs::metadata(dir)
            .map(|meta| meta.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    })
}

/// Creates `<temp>/tributary-pg-[kept-]<pid>-<n>`, a fresh directory only we use.
fn make_base_dir(temp: &Path, keep: bool) -> Result<PathBuf, ClusterError> {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let kept = if keep { KEPT_MARK } else { "" };
    loop {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let dir = temp.join(format!("{DIR_PREFIX}{kept}{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(io_error("set permissions of", &dir))?;
                return Ok(dir);
            }
            // Left by an earlier process that had our pid.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(io_error("create", &dir)(error)),
        }
    }
}

/// The pid encoded in a directory name made by [`make_base_dir`] without `keep`.
fn owner_pid(dir_name: &str) -> Option<i32> {
    let rest = dir_name.strip_prefix(DIR_PREFIX)?;
    if rest.starts_with(KEPT_MARK) {
        return None;
    }
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok().filter(|pid| *pid > 0)
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Stops and removes clusters whose owning process died without stopping them.
fn reap_abandoned(temp: &Path) {
    let Ok(entries) = fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if pid as u32 == std::process::id() || process_alive(pid) {
            continue;
        }
        let dir = entry.path();
        kill_postmaster(&dir.join("data"));
        let _ = fs::remove_dir_all(&dir);
    }
}

/// Sends an immediate-shutdown signal to the postmaster of `data_dir`, if one runs, after
/// checking that the pid in `postmaster.pid` really is that postmaster (pids get reused).
fn kill_postmaster(data_dir: &Path) {
    let Ok(pidfile) = fs::read_to_string(data_dir.join("postmaster.pid")) else {
        return;
    };
    let Some(pid) = pidfile
        .lines()
        .next()
        .and_then(|line| line.trim().parse::<i32>().ok())
    else {
        return;
    };
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return;
    };
    let data = data_dir.as_os_str().as_bytes();
    let ours = cmdline.split(|byte| *byte == 0).any(|arg| arg == data);
    if ours {
        // SAFETY: plain signal delivery to a process we verified.
        unsafe { libc::kill(pid, libc::SIGQUIT) };
        for _ in 0..100 {
            if !process_alive(pid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

fn free_port() -> Result<u16, ClusterError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|source| ClusterError::NoFreePort { source })?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|source| ClusterError::NoFreePort { source })
}

fn chown(path: &Path, user: RunAs) -> Result<(), ClusterError> {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
        .map_err(io_error("change the owner of", path))
}

fn run(command: &mut Command, program: PathBuf) -> Result<Output, ClusterError> {
    command
        .output()
        .map_err(|source| ClusterError::Spawn { program, source })
}

/// Turns a failed command into an error carrying its output and, when given, the log's tail.
fn check(step: &'static str, output: &Output, log: Option<&Path>) -> Result<(), ClusterError> {
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::new();
    for stream in [&output.stderr, &output.stdout] {
        let stream = String::from_utf8_lossy(stream);
        text.push_str(&tail(&stream, TAIL_LINES));
    }
    if let Some(log) = log
        && let Ok(contents) = fs::read_to_string(log)
    {
        let _ = write!(
            text,
            "--- {} ---\n{}",
            log.display(),
            tail(&contents, TAIL_LINES)
        );
    }
    Err(ClusterError::Command {
        step,
        status: output.status,
        output: text,
    })
}

/// The last `lines` lines of `text`, each ending in a newline.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..]
        .iter()
        .map(|line| format!("{line}\n"))
        .collect()
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ClusterError {
    let path = path.to_path_buf();
    move |source| ClusterError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_versions_are_read() {
        assert_eq!(
            version_from_banner("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n"),
            Some("15.18")
        );
        assert_eq!(
            version_from_banner("postgres (PostgreSQL) 17.2\n"),
            Some("17.2")
        );
        assert_eq!(version_from_banner("postgres (PostgreSQL) \n"), None);
        assert_eq!(version_from_banner("something else"), None);
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(parse_version("10").unwrap() > parse_version("9.6").unwrap());
        assert!(parse_version("15").unwrap() > parse_version("9").unwrap());
        assert_eq!(parse_version("15.x"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn newest_debian_version_wins() {
        let root =
            std::env::temp_dir().join(format!("tributary-cluster-test-{}", std::process::id()));
        for version in ["9.6", "15", "10", "notaversion"] {
            let bin = root.join(version).join("bin");
            fs::create_dir_all(&bin).unwrap();
            for name in ["initdb", "pg_ctl", "postgres"] {
                fs::write(bin.join(name), "").unwrap();
            }
        }
        // A newer version without server binaries (client package only) is skipped.
        fs::create_dir_all(root.join("16").join("bin")).unwrap();
        let found = newest_debian_bin_dir(&root);
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, Some(root.join("15").join("bin")));
    }

    #[test]
    fn settings_enable_logical_replication_and_let_options_win() {
        let options = ClusterOptions::fast().setting("max_replication_slots", "64");
        let settings = settings_for(&options, 54321, Path::new("/tmp/x'y"));
        let text = render_settings(&settings);
        assert!(text.contains("wal_level = logical\n"));
        assert!(text.contains("port = 54321\n"));
        assert!(text.contains("listen_addresses = '127.0.0.1'\n"));
        assert!(text.contains("unix_socket_directories = '/tmp/x''y'\n"));
        assert!(text.contains("fsync = off\n"));
        assert!(
            !text.contains("synchronous_commit"),
            "async commits would delay decoding"
        );
        let slots = text.find("max_replication_slots = 20").unwrap();
        let ours = text.find("max_replication_slots = 64").unwrap();
        assert!(
            ours > slots,
            "a later setting overrides an earlier one in postgresql.conf"
        );

        let durable = render_settings(&settings_for(
            &ClusterOptions::default(),
            1,
            Path::new("/t"),
        ));
        assert!(!durable.contains("fsync"));
    }

    #[test]
    fn owner_pids_come_from_directory_names() {
        assert_eq!(owner_pid("tributary-pg-1234-0"), Some(1234));
        assert_eq!(owner_pid("tributary-pg-kept-1234-0"), None);
        assert_eq!(owner_pid("tributary-pg-1234"), None);
        assert_eq!(owner_pid("tributary-pg-x-1"), None);
        assert_eq!(owner_pid("other-1234-0"), None);
        assert_eq!(owner_pid("tributary-pg-0-1"), None);
    }

    #[test]
    fn tails_keep_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail("a", 5), "a\n");
        assert_eq!(tail("", 5), "");
    }

    #[test]
    fn errors_say_what_to_install() {
        let error = ClusterError::BinariesNotFound {
            searched: "/usr/lib/postgresql/*/bin".into(),
        };
        let message = error.to_string();
        assert!(
            message.contains("apt-get install postgresql-15"),
            "{message}"
        );
        assert!(message.contains("TRIBUTARY_PG_BIN"), "{message}");
    }
}
