//! Opening a replication connection: socket, startup packet, authentication, and the simple
//! query protocol that replication commands use before streaming starts.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{Host, SslMode};

use super::error::{ReplicationError, ServerError};
use super::frame::{Backend, parse_backend};
use super::{Confirmer, CreatedSlot, ReplicationStream, SystemIdentity, command};
use crate::Lsn;

/// The byte stream under a replication connection: a TCP or Unix socket today, a TLS stream
/// tomorrow.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Transport for T {}

pub(crate) type BoxTransport = Box<dyn Transport>;

const DEFAULT_PORT: u16 = 5432;
const DEFAULT_APPLICATION_NAME: &str = "tributary";
const READ_CHUNK: usize = 64 * 1024;

/// Session settings sent in the startup packet so that pgoutput's text output has one spelling
/// whatever the server's or role's defaults are.
const SESSION_SETTINGS: [(&str, &str); 6] = [
    ("DateStyle", "ISO"),
    ("TimeZone", "UTC"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
    ("client_encoding", "UTF8"),
];

/// A logical replication connection (`replication=database`) before streaming starts.
///
/// Run replication commands on it ([`identify_system`](Self::identify_system),
/// [`create_logical_slot`](Self::create_logical_slot), ...), then turn it into a stream with
/// [`start_logical`](Self::start_logical).
pub struct ReplicationConnection {
    io: BoxTransport,
    buf: BytesMut,
    user: String,
    dbname: String,
    parameters: HashMap<String, String>,
    backend_pid: Option<i32>,
}

struct Target {
    label: String,
    addr: Addr,
}

enum Addr {
    Tcp(String, u16),
    Unix(std::path::PathBuf),
}

impl ReplicationConnection {
    /// Connects and authenticates (trust, password, md5 or scram-sha-256), trying each configured
    /// host in order until one accepts.
    pub async fn connect(config: &tokio_postgres::Config) -> Result<Self, ReplicationError> {
        check_tls(config)?;
        let user = match config.get_user() {
            Some(user) => user.to_owned(),
            None => std::env::var("USER")
                .or_else(|_| std::env::var("LOGNAME"))
                .map_err(|_| {
                    ReplicationError::Config(
                        "no user given; hint: put it in the URL (postgres://user@host/db)".into(),
                    )
                })?,
        };
        let dbname = config.get_dbname().unwrap_or(&user).to_owned();
        let connect_timeout = config.get_connect_timeout().copied();

        let mut last_error = None;
        for target in targets(config)? {
            let io = match open(&target, connect_timeout).await {
                Ok(io) => io,
                Err(source) => {
                    last_error = Some(ReplicationError::Connect {
                        addr: target.label,
                        source,
                    });
                    continue;
                }
            };
            let mut conn = ReplicationConnection {
                io,
                buf: BytesMut::with_capacity(READ_CHUNK),
                user: user.clone(),
                dbname: dbname.clone(),
                parameters: HashMap::new(),
                backend_pid: None,
            };
            match conn.startup(config).await {
                // A standby, when the URL asks for the server that accepts writes: try the next.
                Ok(()) if conn.refuses_writes(config).await? => {
                    last_error = Some(ReplicationError::Connect {
                        addr: target.label,
                        source: std::io::Error::other(
                            "a server in recovery, and target_session_attrs=read-write asks for the primary",
                        ),
                    });
                }
                Ok(()) => return Ok(conn),
                // Another host may be up; a refusal or a bad password would be the same anywhere.
                Err(e @ (ReplicationError::Io(_) | ReplicationError::Closed { .. })) => {
                    last_error = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| ReplicationError::Config("no host given".into())))
    }

    /// A run-time parameter the server reported at startup (`server_version`, `TimeZone`, ...).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name).map(String::as_str)
    }

    /// The walsender's process id, as `pg_stat_replication.pid` shows it.
    pub fn backend_pid(&self) -> Option<i32> {
        self.backend_pid
    }

    /// The server's numeric version, e.g. 150004 for 15.4, from `server_version`.
    pub fn server_version_num(&self) -> Option<u32> {
        let version = self.parameter("server_version")?;
        let numeric: String = version
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = numeric.split('.').map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        Some(major * 10_000 + minor)
    }

    pub async fn identify_system(&mut self) -> Result<SystemIdentity, ReplicationError> {
        let command = "IDENTIFY_SYSTEM";
        let rows = self.simple_query(command).await?;
        let row = single_row(command, &rows, 4)?;
        let field = |i: usize| {
            row[i]
                .as_deref()
                .ok_or_else(|| unexpected(command, "a NULL field"))
        };
        Ok(SystemIdentity {
            system_id: field(0)?.to_owned(),
            timeline: field(1)?
                .parse()
                .map_err(|_| unexpected(command, "a non-numeric timeline"))?,
            xlog_pos: parse_lsn(command, field(2)?)?,
            dbname: row[3].clone(),
        })
    }

    /// Creates a logical slot for pgoutput without exporting a snapshot.
    pub async fn create_logical_slot(
        &mut self,
        slot: &str,
    ) -> Result<CreatedSlot, ReplicationError> {
        self.create_slot(slot, false, false).await
    }

    /// Creates a logical slot and exports the snapshot it starts from, for an initial copy with
    /// `SET TRANSACTION SNAPSHOT` on another connection. The snapshot lives only until the next
    /// command on this connection.
    pub async fn create_logical_slot_exporting_snapshot(
        &mut self,
        slot: &str,
    ) -> Result<CreatedSlot, ReplicationError> {
        self.create_slot(slot, false, true).await
    }

    /// Creates a temporary logical slot, which the server drops when this connection ends
    /// (however it ends), and exports the snapshot it starts from: the source exactly as it
    /// was at the slot's consistent point, for `SET TRANSACTION SNAPSHOT` on another
    /// connection. The snapshot lives only until the next command on this connection.
    pub async fn create_temporary_slot_exporting_snapshot(
        &mut self,
        slot: &str,
    ) -> Result<CreatedSlot, ReplicationError> {
        self.create_slot(slot, true, true).await
    }

    async fn create_slot(
        &mut self,
        slot: &str,
        temporary: bool,
        export_snapshot: bool,
    ) -> Result<CreatedSlot, ReplicationError> {
        let command = command::create_logical_slot(slot, temporary, export_snapshot);
        let rows = self.simple_query(&command).await?;
        let row = single_row(&command, &rows, 3)?;
        let consistent_point = row[1]
            .as_deref()
            .ok_or_else(|| unexpected(&command, "no consistent point"))?;
        Ok(CreatedSlot {
            slot_name: row[0].clone().unwrap_or_else(|| slot.to_owned()),
            consistent_point: parse_lsn(&command, consistent_point)?,
            snapshot_name: row[2].clone(),
        })
    }

    /// Drops a slot that no one is streaming from. A missing slot is an error with SQLSTATE
    /// `42704`; an active one `55006`.
    pub async fn drop_slot(&mut self, slot: &str) -> Result<(), ReplicationError> {
        self.simple_query(&command::drop_slot(slot))
            .await
            .map(|_| ())
    }

    /// Runs one command with the simple query protocol and returns its rows as text.
    pub async fn simple_query(
        &mut self,
        query: &str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        let mut out = BytesMut::new();
        frontend::query(query, &mut out)
            .map_err(|e| ReplicationError::Config(format!("cannot send command `{query}`: {e}")))?;
        self.io.write_all(&out).await?;
        self.io.flush().await?;

        let mut rows = Vec::new();
        let mut failure = None;
        loop {
            match self.read_message("running a command").await? {
                Backend::Message(Message::DataRow(row)) => {
                    let buffer = row.buffer();
                    let fields = row
                        .ranges()
                        .map(|range| {
                            Ok(range.map(|r| String::from_utf8_lossy(&buffer[r]).into_owned()))
                        })
                        .collect()
                        .map_err(|e| {
                            ReplicationError::Protocol(format!("malformed data row: {e}"))
                        })?;
                    rows.push(fields);
                }
                Backend::Message(Message::ErrorResponse(body)) => {
                    failure = Some(ServerError::from_error_body(&body));
                }
                Backend::Message(Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(Message::ReadyForQuery(_)) => break,
                Backend::Message(
                    Message::RowDescription(_)
                    | Message::CommandComplete(_)
                    | Message::EmptyQueryResponse
                    | Message::ParameterStatus(_),
                ) => {}
                other => return Err(unexpected_message(query, &other)),
            }
        }
        match failure {
            Some(error) => Err(ReplicationError::Command {
                command: query.to_owned(),
                error,
            }),
            None => Ok(rows),
        }
    }

    /// Starts streaming from `slot` at `start` with pgoutput `options` (name/value pairs, such
    /// as `("proto_version", "1")` and `("publication_names", "\"pub\"")`), and hands the socket
    /// to a driver task. See [`ReplicationStream`] for what the driver does.
    pub async fn start_logical(
        self,
        slot: &str,
        start: Lsn,
        options: &[(&str, &str)],
        status_interval: Duration,
    ) -> Result<ReplicationStream, ReplicationError> {
        self.resume_logical(slot, start, options, status_interval, Confirmer::default())
            .await
    }

    /// [`start_logical`](Self::start_logical) for a consumer that streamed before: the new
    /// stream reports the position `confirmer` holds and goes on confirming through it.
    pub async fn resume_logical(
        mut self,
        slot: &str,
        start: Lsn,
        options: &[(&str, &str)],
        status_interval: Duration,
        confirmer: Confirmer,
    ) -> Result<ReplicationStream, ReplicationError> {
        let command = command::start_logical(slot, start, options);
        let mut out = BytesMut::new();
        frontend::query(&command, &mut out).map_err(|e| {
            ReplicationError::Config(format!("cannot send command `{command}`: {e}"))
        })?;
        self.io.write_all(&out).await?;
        self.io.flush().await?;
        loop {
            match self.read_message("starting replication").await? {
                Backend::CopyBothResponse => break,
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Err(ReplicationError::Command {
                        command,
                        error: ServerError::from_error_body(&body),
                    });
                }
                Backend::Message(Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(Message::ParameterStatus(_)) => {}
                other => return Err(unexpected_message(&command, &other)),
            }
        }
        tracing::debug!(slot, %start, "replication stream started");
        // Whatever followed CopyBothResponse in the last read is already stream data.
        Ok(ReplicationStream::spawn(
            self.io,
            self.buf,
            status_interval,
            confirmer,
        ))
    }

    async fn startup(&mut self, config: &tokio_postgres::Config) -> Result<(), ReplicationError> {
        let application_name = config
            .get_application_name()
            .unwrap_or(DEFAULT_APPLICATION_NAME);
        let mut params: Vec<(&str, &str)> = vec![
            ("user", &self.user),
            ("database", &self.dbname),
            ("replication", "database"),
            ("application_name", application_name),
        ];
        params.extend(SESSION_SETTINGS);
        if let Some(options) = config.get_options() {
            params.push(("options", options));
        }
        let mut out = BytesMut::new();
        frontend::startup_message(params, &mut out)
            .map_err(|e| ReplicationError::Config(format!("invalid startup parameter: {e}")))?;
        self.io.write_all(&out).await?;
        self.io.flush().await?;

        self.authenticate(config.get_password()).await?;

        loop {
            match self.read_message("starting the session").await? {
                Backend::Message(Message::ReadyForQuery(_)) => return Ok(()),
                Backend::Message(Message::ParameterStatus(status)) => {
                    if let (Ok(name), Ok(value)) = (status.name(), status.value()) {
                        self.parameters.insert(name.to_owned(), value.to_owned());
                    }
                }
                Backend::Message(Message::BackendKeyData(key)) => {
                    self.backend_pid = Some(key.process_id())
                }
                Backend::Message(Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(Message::ErrorResponse(body)) => return Err(self.refused(&body)),
                other => return Err(unexpected_message("startup", &other)),
            }
        }
    }

    async fn authenticate(&mut self, password: Option<&[u8]>) -> Result<(), ReplicationError> {
        let mut out = BytesMut::new();
        match self.read_message("authenticating").await? {
            Backend::Message(Message::AuthenticationOk) => return Ok(()),
            Backend::Message(Message::AuthenticationCleartextPassword) => {
                let password = self.require_password(password)?;
                frontend::password_message(password, &mut out).map_err(|e| self.auth_failed(e))?;
            }
            Backend::Message(Message::AuthenticationMd5Password(body)) => {
                let password = self.require_password(password)?;
                let hash = md5_hash(self.user.as_bytes(), password, body.salt());
                frontend::password_message(hash.as_bytes(), &mut out)
                    .map_err(|e| self.auth_failed(e))?;
            }
            Backend::Message(Message::AuthenticationSasl(body)) => {
                let password = self.require_password(password)?;
                return self.scram(body.mechanisms(), password).await;
            }
            Backend::Message(Message::ErrorResponse(body)) => return Err(self.refused(&body)),
            Backend::Message(message) => {
                let method = match message {
                    Message::AuthenticationKerberosV5 => "kerberos v5",
                    Message::AuthenticationScmCredential => "scm credential",
                    Message::AuthenticationGss | Message::AuthenticationGssContinue(_) => "gss",
                    Message::AuthenticationSspi => "sspi",
                    _ => {
                        return Err(unexpected_message(
                            "authentication",
                            &Backend::Message(message),
                        ));
                    }
                };
                return Err(ReplicationError::UnsupportedAuth {
                    method: method.into(),
                });
            }
            other => return Err(unexpected_message("authentication", &other)),
        }
        self.io.write_all(&out).await?;
        self.io.flush().await?;
        self.expect_auth_ok().await
    }

    async fn scram(
        &mut self,
        mut mechanisms: postgres_protocol::message::backend::SaslMechanisms<'_>,
        password: &[u8],
    ) -> Result<(), ReplicationError> {
        let mut offered = Vec::new();
        while let Some(mechanism) = mechanisms.next().map_err(|e| self.auth_failed(e))? {
            offered.push(mechanism.to_owned());
        }
        if !offered.iter().any(|m| m == sasl::SCRAM_SHA_256) {
            return Err(ReplicationError::UnsupportedAuth {
                method: format!("SASL ({})", offered.join(", ")),
            });
        }
        // Without TLS there is no channel to bind to.
        let mut scram = ScramSha256::new(password, ChannelBinding::unsupported());
        let mut out = BytesMut::new();
        frontend::sasl_initial_response(sasl::SCRAM_SHA_256, scram.message(), &mut out)
            .map_err(|e| self.auth_failed(e))?;
        self.io.write_all(&out).await?;
        self.io.flush().await?;

        match self.read_message("authenticating").await? {
            Backend::Message(Message::AuthenticationSaslContinue(body)) => {
                scram.update(body.data()).map_err(|e| self.auth_failed(e))?;
            }
            Backend::Message(Message::ErrorResponse(body)) => return Err(self.refused(&body)),
            other => return Err(unexpected_message("SCRAM authentication", &other)),
        }
        out.clear();
        frontend::sasl_response(scram.message(), &mut out).map_err(|e| self.auth_failed(e))?;
        self.io.write_all(&out).await?;
        self.io.flush().await?;

        match self.read_message("authenticating").await? {
            Backend::Message(Message::AuthenticationSaslFinal(body)) => {
                // Proves the server knew the password too, not just that it let us in.
                scram.finish(body.data()).map_err(|e| self.auth_failed(e))?;
            }
            Backend::Message(Message::ErrorResponse(body)) => return Err(self.refused(&body)),
            other => return Err(unexpected_message("SCRAM authentication", &other)),
        }
        self.expect_auth_ok().await
    }

    async fn expect_auth_ok(&mut self) -> Result<(), ReplicationError> {
        match self.read_message("authenticating").await? {
            Backend::Message(Message::AuthenticationOk) => Ok(()),
            Backend::Message(Message::ErrorResponse(body)) => Err(self.refused(&body)),
            other => Err(unexpected_message("authentication", &other)),
        }
    }

    fn require_password<'a>(
        &self,
        password: Option<&'a [u8]>,
    ) -> Result<&'a [u8], ReplicationError> {
        password.ok_or_else(|| ReplicationError::PasswordMissing {
            user: self.user.clone(),
        })
    }

    fn refused(
        &self,
        body: &postgres_protocol::message::backend::ErrorResponseBody,
    ) -> ReplicationError {
        ReplicationError::Refused {
            db: self.dbname.clone(),
            user: self.user.clone(),
            error: ServerError::from_error_body(body),
        }
    }

    fn auth_failed(&self, error: std::io::Error) -> ReplicationError {
        ReplicationError::Auth {
            user: self.user.clone(),
            reason: error.to_string(),
        }
    }

    async fn read_message(&mut self, during: &'static str) -> Result<Backend, ReplicationError> {
        loop {
            if let Some(message) = parse_backend(&mut self.buf)? {
                return Ok(message);
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
                self.buf.reserve(READ_CHUNK);
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Err(ReplicationError::Closed { during });
            }
        }
    }
}

fn check_tls(config: &tokio_postgres::Config) -> Result<(), ReplicationError> {
    match config.get_ssl_mode() {
        // Prefer falls back to plain text, which is all there is for now.
        SslMode::Disable | SslMode::Prefer => {}
        other => {
            let mode = format!("{other:?}").to_lowercase();
            return Err(ReplicationError::TlsUnsupported { mode });
        }
    }
    if config.get_channel_binding() == tokio_postgres::config::ChannelBinding::Require {
        return Err(ReplicationError::TlsUnsupported {
            mode: "prefer with channel_binding=require".into(),
        });
    }
    Ok(())
}

/// Hosts paired with ports the way libpq pairs them: one port for all, or one per host.
fn targets(config: &tokio_postgres::Config) -> Result<Vec<Target>, ReplicationError> {
    let hosts = config.get_hosts();
    let hostaddrs = config.get_hostaddrs();
    let ports = config.get_ports();
    let count = hosts.len().max(hostaddrs.len());
    if count == 0 {
        return Err(ReplicationError::Config(
            "no host given; hint: postgres://user@host:port/db or host=/path/to/socket/dir".into(),
        ));
    }
    if !hostaddrs.is_empty() && !hosts.is_empty() && hostaddrs.len() != hosts.len() {
        return Err(ReplicationError::Config(format!(
            "{} hosts but {} hostaddrs; give one hostaddr per host",
            hosts.len(),
            hostaddrs.len()
        )));
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(ReplicationError::Config(format!(
            "{count} hosts but {} ports; give one port, or one per host",
            ports.len()
        )));
    }
    let mut targets = Vec::with_capacity(count);
    for i in 0..count {
        let port = ports
            .get(i)
            .or(ports.first())
            .copied()
            .unwrap_or(DEFAULT_PORT);
        let addr = match (hostaddrs.get(i), hosts.get(i)) {
            (Some(ip), _) => Addr::Tcp(ip.to_string(), port),
            (None, Some(Host::Tcp(host))) => Addr::Tcp(host.clone(), port),
            (None, Some(Host::Unix(dir))) => Addr::Unix(socket_path(dir, port)),
            (None, None) => continue,
        };
        let label = match &addr {
            Addr::Tcp(host, port) => format!("{host}:{port}"),
            Addr::Unix(path) => path.display().to_string(),
        };
        targets.push(Target { label, addr });
    }
    Ok(targets)
}

fn socket_path(dir: &Path, port: u16) -> std::path::PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

async fn open(target: &Target, timeout: Option<Duration>) -> std::io::Result<BoxTransport> {
    let connect = async {
        Ok::<BoxTransport, std::io::Error>(match &target.addr {
            Addr::Tcp(host, port) => {
                let stream = TcpStream::connect((host.as_str(), *port)).await?;
                // Status updates are tiny and must not wait for Nagle.
                stream.set_nodelay(true)?;
                Box::new(stream)
            }
            Addr::Unix(path) => Box::new(UnixStream::connect(path).await?),
        })
    };
    match timeout {
        Some(limit) => tokio::time::timeout(limit, connect).await.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {limit:?}"),
            )
        })?,
        None => connect.await,
    }
}

fn single_row<'a>(
    command: &str,
    rows: &'a [Vec<Option<String>>],
    min_columns: usize,
) -> Result<&'a [Option<String>], ReplicationError> {
    match rows {
        [row] if row.len() >= min_columns => Ok(row),
        _ => Err(unexpected(
            command,
            &format!(
                "{} rows instead of one with {min_columns}+ columns",
                rows.len()
            ),
        )),
    }
}

fn parse_lsn(command: &str, text: &str) -> Result<Lsn, ReplicationError> {
    text.parse()
        .map_err(|_| unexpected(command, &format!("an invalid LSN {text:?}")))
}

fn unexpected(command: &str, what: &str) -> ReplicationError {
    ReplicationError::Protocol(format!("`{command}` returned {what}"))
}

fn unexpected_message(context: &str, message: &Backend) -> ReplicationError {
    ReplicationError::Protocol(format!(
        "unexpected {} message during {context}",
        message.name()
    ))
}

pub(crate) fn log_notice(body: &postgres_protocol::message::backend::NoticeResponseBody) {
    let notice = ServerError::from_notice_body(body);
    tracing::info!(severity = %notice.severity, code = %notice.code, "server notice: {}", notice.message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_pair_with_ports_like_libpq() {
        let config: tokio_postgres::Config = "host=/tmp/sock,db1,db2 port=5433,5434,5435 user=u"
            .parse()
            .unwrap();
        let labels: Vec<_> = targets(&config)
            .unwrap()
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(labels, ["/tmp/sock/.s.PGSQL.5433", "db1:5434", "db2:5435"]);

        let config: tokio_postgres::Config = "postgres://u@h1:6000,h2/db".parse().unwrap();
        let labels: Vec<_> = targets(&config)
            .unwrap()
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(labels, ["h1:6000", "h2:5432"]);

        let config: tokio_postgres::Config = "host=h1,h2 port=7000 user=u".parse().unwrap();
        let labels: Vec<_> = targets(&config)
            .unwrap()
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(labels, ["h1:7000", "h2:7000"], "one port serves every host");

        let config: tokio_postgres::Config = "host=h user=u".parse().unwrap();
        assert_eq!(targets(&config).unwrap()[0].label, "h:5432");
    }

    #[test]
    fn impossible_host_settings_are_config_errors() {
        let config: tokio_postgres::Config = "user=u".parse().unwrap();
        assert!(matches!(targets(&config), Err(ReplicationError::Config(_))));
        let config: tokio_postgres::Config = "host=a,b,c port=1,2 user=u".parse().unwrap();
        assert!(matches!(targets(&config), Err(ReplicationError::Config(_))));
    }

    #[test]
    fn sslmode_require_is_refused_clearly() {
        let config: tokio_postgres::Config = "postgres://u@h/db?sslmode=require".parse().unwrap();
        let error = check_tls(&config).unwrap_err();
        assert!(
            error.to_string().starts_with("TLS is not supported yet"),
            "{error}"
        );
        let config: tokio_postgres::Config = "postgres://u@h/db?sslmode=prefer".parse().unwrap();
        assert!(check_tls(&config).is_ok());
    }

    #[tokio::test]
    async fn sslmode_require_fails_before_any_network() {
        let config: tokio_postgres::Config = "postgres://u@127.0.0.1:1/db?sslmode=require"
            .parse()
            .unwrap();
        let error = ReplicationConnection::connect(&config).await.err().unwrap();
        assert!(
            matches!(error, ReplicationError::TlsUnsupported { .. }),
            "{error}"
        );
    }
}
