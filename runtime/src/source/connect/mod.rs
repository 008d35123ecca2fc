//! The connection factory: every connection Tributary opens to the source starts here, an
//! ordinary SQL session ([`sql`]) or a replication connection ([`replication`]), both from a
//! [`PgConfig`] that [`parse_url`] reads the way libpq reads a connection string: the URL or
//! `key=value` form, TLS (`sslmode` through `verify-full`, `sslrootcert`, `sslcert`, `sslkey`,
//! `sslnegotiation`), the `PG*` environment variables, and the password file.
//!
//! The connection string is parsed here ([`params`], without IO), the certificates are read
//! and the rustls configuration built once ([`tls`]), and both connection kinds use that one
//! configuration.

mod error;
pub mod notice;
pub mod params;
pub mod tls;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::{ChannelBinding, Host, SslNegotiation, TargetSessionAttrs};
use tokio_postgres::{Client, NoTls};

pub use error::ConnectError;
pub(crate) use error::VerifyFailure;
pub use params::{SslMode, TlsSettings};
pub use tls::TlsContext;

use crate::source::provision::ProvisionError;
use crate::source::replication::{ReplicationConnection, ReplicationError};

const DEFAULT_PORT: u16 = 5432;
/// Where libpq builds look for a server's Unix socket when no host is given.
const SOCKET_DIRS: &[&str] = &["/var/run/postgresql", "/tmp"];

/// A source connection's settings: what tokio-postgres reads, and the TLS configuration both
/// connection kinds use. `Debug` never shows the password.
#[derive(Clone, Debug)]
pub struct PgConfig {
    pg: tokio_postgres::Config,
    settings: TlsSettings,
    tls: Option<TlsContext>,
}

impl PgConfig {
    /// Reads a connection string with the process's environment and home directory.
    pub fn from_env(conninfo: &str) -> Result<PgConfig, ConnectError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        PgConfig::parse(conninfo, &|name| std::env::var(name).ok(), home.as_deref())
    }

    /// Reads a connection string with the `PG*` variables `var` gives and libpq's files under
    /// `home` (`.pgpass`, `.postgresql/`).
    pub fn parse(
        conninfo: &str,
        var: &dyn Fn(&str) -> Option<String>,
        home: Option<&Path>,
    ) -> Result<PgConfig, ConnectError> {
        let mut split = params::split(conninfo)?;
        let mut pg = tokio_postgres::Config::from_str(&split.rest).map_err(|e| {
            ConnectError::Param(params::ParamError::Malformed(crate::error_chain(&e)))
        })?;
        for (key, given) in [
            (
                "host",
                !pg.get_hosts().is_empty() || !pg.get_hostaddrs().is_empty(),
            ),
            ("port", !pg.get_ports().is_empty()),
            ("user", pg.get_user().is_some()),
            ("password", pg.get_password().is_some()),
            ("dbname", pg.get_dbname().is_some()),
            ("options", pg.get_options().is_some()),
            ("application_name", pg.get_application_name().is_some()),
            ("connect_timeout", pg.get_connect_timeout().is_some()),
        ] {
            if given {
                split.given.insert(key.into());
            }
        }
        let sslmode_given = split.given.contains("sslmode") || var("PGSSLMODE").is_some();
        for (key, value) in params::from_environment(&mut split, var)? {
            apply(&mut pg, key, &value)?;
        }
        let mut settings = split.tls;
        if settings.root_cert == Some(params::RootCert::System) && !sslmode_given {
            // libpq: trusting the platform's roots makes verify-full the default.
            settings.mode = SslMode::VerifyFull;
        }
        settings.direct = pg.get_ssl_negotiation() == SslNegotiation::Direct;

        if pg.get_user().is_none()
            && let Some(user) = var("USER").or_else(|| var("LOGNAME"))
        {
            pg.user(user);
        }
        if pg.get_hosts().is_empty() && pg.get_hostaddrs().is_empty() {
            let port = pg.get_ports().first().copied().unwrap_or(DEFAULT_PORT);
            match SOCKET_DIRS
                .iter()
                .map(Path::new)
                .find(|dir| dir.join(format!(".s.PGSQL.{port}")).exists())
            {
                Some(dir) => pg.host_path(dir),
                None => pg.host("localhost"),
            };
        }
        if pg.get_password().is_none()
            && let Some(password) = password_file(&pg, var, home)
        {
            pg.password(password);
        }

        // libpq never uses TLS on a Unix socket, whatever sslmode says.
        let all_unix = pg.get_hostaddrs().is_empty()
            && pg.get_hosts().iter().all(|h| matches!(h, Host::Unix(_)));
        let tls = if all_unix {
            None
        } else {
            tls::context(&settings, home)?
        };
        pg.ssl_mode(match (&tls, settings.mode) {
            (None, _) => tokio_postgres::config::SslMode::Disable,
            (Some(_), mode) if mode.requires_tls() => tokio_postgres::config::SslMode::Require,
            (Some(_), _) => tokio_postgres::config::SslMode::Prefer,
        });
        Ok(PgConfig { pg, settings, tls })
    }

    /// The settings tokio-postgres reads (hosts, user, database, ...).
    pub fn pg(&self) -> &tokio_postgres::Config {
        &self.pg
    }

    /// The settings tokio-postgres reads, to change one that has nothing to do with TLS.
    pub fn pg_mut(&mut self) -> &mut tokio_postgres::Config {
        &mut self.pg
    }

    /// Sets the `application_name` the server shows for these connections.
    pub fn application_name(&mut self, name: &str) -> &mut PgConfig {
        self.pg.application_name(name);
        self
    }

    pub fn ssl_mode(&self) -> SslMode {
        self.settings.mode
    }

    /// The TLS configuration, unless the connection never uses TLS.
    pub fn tls(&self) -> Option<&TlsContext> {
        self.tls.as_ref()
    }

    /// The hosts, as errors name them: `db1:5432, db2:5432`.
    pub fn hosts(&self) -> String {
        let ports = self.pg.get_ports();
        let port = |i: usize| {
            ports
                .get(i)
                .or(ports.first())
                .copied()
                .unwrap_or(DEFAULT_PORT)
        };
        let mut names: Vec<String> = self
            .pg
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| match host {
                Host::Tcp(name) => format!("{name}:{}", port(i)),
                Host::Unix(dir) => dir
                    .join(format!(".s.PGSQL.{}", port(i)))
                    .display()
                    .to_string(),
            })
            .collect();
        if names.is_empty() {
            names = self
                .pg
                .get_hostaddrs()
                .iter()
                .enumerate()
                .map(|(i, addr)| format!("{addr}:{}", port(i)))
                .collect();
        }
        names.join(", ")
    }

    /// Whether every host is this machine (a Unix socket or a loopback address), where an
    /// unencrypted connection crosses no network.
    pub fn is_local(&self) -> bool {
        let local_name = |name: &str| {
            name == "localhost" || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        };
        self.pg.get_hostaddrs().iter().all(IpAddr::is_loopback)
            && self.pg.get_hosts().iter().all(|h| match h {
                Host::Unix(_) => true,
                Host::Tcp(name) => local_name(name),
            })
    }

    /// What `check` says of the settings before connecting: what TLS checks, or that there is
    /// none.
    pub fn intended(&self) -> String {
        match &self.tls {
            None if self.settings.mode == SslMode::Disable => {
                "unencrypted (sslmode=disable)".into()
            }
            None => "unencrypted (a Unix socket)".into(),
            Some(tls) => format!("sslmode={}, {}", self.settings.mode, tls.checks),
        }
    }
}

impl FromStr for PgConfig {
    type Err = ConnectError;

    /// A connection string with the process's environment, like [`PgConfig::from_env`].
    fn from_str(conninfo: &str) -> Result<PgConfig, ConnectError> {
        PgConfig::from_env(conninfo)
    }
}

/// Applies a setting the environment gave.
fn apply(pg: &mut tokio_postgres::Config, key: &str, value: &str) -> Result<(), ConnectError> {
    let invalid = |allowed: &'static str| {
        let variable = params::ENVIRONMENT
            .iter()
            .find(|(_, k)| *k == key)
            .map_or("a PG variable", |(name, _)| name);
        ConnectError::Param(params::ParamError::InvalidValue {
            key: variable,
            value: value.into(),
            allowed,
        })
    };
    match key {
        "host" => {
            for host in value.split(',') {
                pg.host(host);
            }
        }
        "hostaddr" => {
            for addr in value.split(',') {
                pg.hostaddr(addr.parse().map_err(|_| invalid("IP addresses"))?);
            }
        }
        "port" => {
            for port in value.split(',') {
                pg.port(port.parse().map_err(|_| invalid("port numbers"))?);
            }
        }
        "dbname" => {
            pg.dbname(value);
        }
        "user" => {
            pg.user(value);
        }
        "password" => {
            pg.password(value);
        }
        "options" => {
            pg.options(value);
        }
        "application_name" => {
            pg.application_name(value);
        }
        "connect_timeout" => {
            let seconds: i64 = value.parse().map_err(|_| invalid("whole seconds"))?;
            if seconds > 0 {
                pg.connect_timeout(Duration::from_secs(seconds as u64));
            }
        }
        "target_session_attrs" => {
            pg.target_session_attrs(match value {
                "any" => TargetSessionAttrs::Any,
                "read-write" => TargetSessionAttrs::ReadWrite,
                "read-only" => TargetSessionAttrs::ReadOnly,
                _ => return Err(invalid("any, read-write and read-only")),
            });
        }
        "channel_binding" => {
            pg.channel_binding(match value {
                "disable" => ChannelBinding::Disable,
                "prefer" => ChannelBinding::Prefer,
                "require" => ChannelBinding::Require,
                _ => return Err(invalid("disable, prefer and require")),
            });
        }
        "sslnegotiation" => {
            pg.ssl_negotiation(match value {
                "postgres" => SslNegotiation::Postgres,
                "direct" => SslNegotiation::Direct,
                _ => return Err(invalid("postgres and direct")),
            });
        }
        _ => {}
    }
    Ok(())
}

/// The password the password file (`PGPASSFILE`, or `~/.pgpass`) holds for the first host it
/// has one for. A file others may read is skipped with a warning, as libpq does.
fn password_file(
    pg: &tokio_postgres::Config,
    var: &dyn Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Option<String> {
    let path = match var("PGPASSFILE") {
        Some(path) => PathBuf::from(path),
        None => home?.join(".pgpass"),
    };
    let metadata = std::fs::metadata(&path).ok()?;
    {
        use std::os::unix::fs::MetadataExt;
        if metadata.is_file() && metadata.mode() & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                "the password file may be read by others, so it is not used (libpq does the same); run chmod 600 on it"
            );
            return None;
        }
    }
    let content = std::fs::read_to_string(&path).ok()?;
    let user = pg.get_user().unwrap_or_default();
    let dbname = pg.get_dbname().unwrap_or(user);
    let ports = pg.get_ports();
    pg.get_hosts().iter().enumerate().find_map(|(i, host)| {
        let port = ports
            .get(i)
            .or(ports.first())
            .copied()
            .unwrap_or(DEFAULT_PORT);
        let (name, unix) = match host {
            Host::Tcp(name) => (name.clone(), false),
            Host::Unix(dir) => (dir.display().to_string(), true),
        };
        params::pgpass_lookup(&content, &name, unix, port, dbname, user)
    })
}

/// Parse the source URL the way libpq would, with the process's `PG*` environment and files.
pub fn parse_url(url: &str) -> Result<PgConfig, ProvisionError> {
    Ok(PgConfig::from_env(url)?)
}

/// An ordinary SQL session to the source; the connection runs on its own task.
pub async fn sql(config: &PgConfig) -> Result<Client, ProvisionError> {
    Ok(sql_watched(config).await?.0)
}

/// [`sql`], and what ended the session once it ends: the SQLSTATE of the server's error
/// (`57P01` when the server is shutting down), `None` for any other end.
pub async fn sql_watched(config: &PgConfig) -> Result<(Client, Closed), ProvisionError> {
    if config.settings.mode == SslMode::Allow
        && let Some(tls) = &config.tls
    {
        // libpq's allow: plain first, TLS only when the server turns plain away.
        let mut plain = config.pg.clone();
        plain.ssl_mode(tokio_postgres::config::SslMode::Disable);
        match connect_with(config, &plain, None).await {
            Err(ProvisionError::Connect(e))
                if e.as_db_error()
                    .is_some_and(|db| db.code().code() == "28000") =>
            {
                let mut encrypted = config.pg.clone();
                encrypted.ssl_mode(tokio_postgres::config::SslMode::Require);
                return connect_with(config, &encrypted, Some(tls)).await;
            }
            other => return other,
        }
    }
    connect_with(config, &config.pg, config.tls.as_ref()).await
}

/// Resolves when an SQL session ends: to the SQLSTATE of the error the server ended it with,
/// `None` when it ended otherwise (closed by the client, or the network).
pub type Closed = tokio::sync::oneshot::Receiver<Option<String>>;

async fn connect_with(
    config: &PgConfig,
    pg: &tokio_postgres::Config,
    tls: Option<&TlsContext>,
) -> Result<(Client, Closed), ProvisionError> {
    let result = match tls {
        Some(tls) => {
            let connector = tokio_postgres_rustls::MakeRustlsConnect::new((*tls.config).clone());
            pg.connect(connector)
                .await
                .map(|(client, connection)| (client, spawn_connection(connection)))
        }
        None => pg
            .connect(NoTls)
            .await
            .map(|(client, connection)| (client, spawn_connection(connection))),
    };
    result.map_err(|e| explain(config, e))
}

/// Drive an SQL session's connection on a task of its own. Its notices are logged here at their
/// level ([`notice`]), not by the client library, which logs every one at INFO.
fn spawn_connection<S, T>(mut connection: tokio_postgres::Connection<S, T>) -> Closed
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (closed, ended) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let code = loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notice(db))) => {
                    let severity = db
                        .parsed_severity()
                        .map_or_else(|| db.severity().to_owned(), |s| s.to_string());
                    notice::log_notice("SQL", &severity, db.code().code(), db.message());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "source SQL connection closed");
                    break e.as_db_error().map(|db| db.code().code().to_owned());
                }
                None => break None,
            }
        };
        let _ = closed.send(code);
    });
    ended
}

/// Turns a failed SQL connection into the sentence that names its fix, where it is a TLS
/// matter.
fn explain(config: &PgConfig, error: tokio_postgres::Error) -> ProvisionError {
    let hosts = config.hosts();
    if let Some(failure) = VerifyFailure::find(&error) {
        return failure.to_error(&hosts).into();
    }
    let text = crate::error_chain(&error);
    if text.contains("password missing") {
        return ConnectError::PasswordMissing {
            host: hosts,
            user: config.pg.get_user().unwrap_or_default().to_owned(),
        }
        .into();
    }
    if text.contains("server does not support TLS") {
        return ConnectError::ServerWithoutTls {
            host: hosts,
            mode: config.settings.mode,
        }
        .into();
    }
    if config.pg.get_channel_binding() == ChannelBinding::Require
        && error.as_db_error().is_none()
        && (config.tls.is_none() || text.contains("channel binding"))
    {
        return if config.tls.is_none() {
            ConnectError::BindingWithoutTls { host: hosts }
        } else {
            ConnectError::BindingNotUsed {
                host: hosts,
                method: "a method without channel binding".into(),
            }
        }
        .into();
    }
    ProvisionError::Connect(error)
}

/// A replication connection to the source (`replication=database`), authenticated and ready
/// for replication commands.
pub async fn replication(config: &PgConfig) -> Result<ReplicationConnection, ReplicationError> {
    ReplicationConnection::connect(config).await
}

/// How an SQL session is protected, as the server sees it (`pg_stat_ssl`): "TLS 1.3
/// (TLS_AES_256_GCM_SHA384), verify-full against ca.pem", or "unencrypted".
pub async fn describe_sql(client: &Client, config: &PgConfig) -> Result<String, ProvisionError> {
    let row = client
        .query_opt(
            "SELECT ssl, version, cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|error| ProvisionError::Query {
            what: "cannot read pg_stat_ssl".into(),
            error,
        })?;
    let Some(row) = row.filter(|r| r.get::<_, bool>(0)) else {
        return Ok(format!("unencrypted (sslmode={})", config.settings.mode));
    };
    let version: Option<String> = row.get(1);
    let cipher: Option<String> = row.get(2);
    let version = version.unwrap_or_default().replace("TLSv", "TLS ");
    let mut text = format!("{version} ({})", cipher.unwrap_or_default());
    if let Some(tls) = &config.tls {
        text.push_str(&format!(", {}", tls.checks));
    }
    if config.pg.get_channel_binding() == ChannelBinding::Require {
        text.push_str(", channel binding required");
    }
    Ok(text)
}
