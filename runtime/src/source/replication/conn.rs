//! Opening a replication connection: socket, startup packet, authentication, and the simple
//! query protocol that replication commands use before streaming starts.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{ChannelBinding as BindingSetting, Host, TargetSessionAttrs};

use super::error::{ReplicationError, ServerError};
use super::frame::{Backend, parse_backend};
use super::{Confirmer, CreatedSlot, ReplicationStream, SystemIdentity, command};
use crate::Lsn;
use crate::source::connect::{ConnectError, PgConfig, SslMode, TlsContext, VerifyFailure, tls};

/// The byte stream under a replication connection: a TCP or Unix socket, or TLS over TCP.
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
    /// The TCP socket under a TLS `io`, for the stream's read pacing; `io` owns it.
    socket: Option<RawFd>,
    /// What TLS agreed, when the connection is encrypted.
    tls: Option<Agreed>,
    binding: BindingSetting,
    /// Whether SCRAM bound the session to the TLS channel.
    bound: bool,
}

/// A finished TLS handshake: what was agreed and the channel binding data it offers.
struct Agreed {
    /// "TLS 1.3 (TLS_AES_256_GCM_SHA384), verify-full against ca.pem".
    summary: String,
    end_point: Option<Vec<u8>>,
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
    /// Connects and authenticates (trust, password, md5 or scram-sha-256, with channel binding
    /// over TLS), trying each configured host in order until one accepts and fits
    /// `target_session_attrs`.
    pub async fn connect(config: &PgConfig) -> Result<Self, ReplicationError> {
        let pg = config.pg();
        let user = match pg.get_user() {
            Some(user) => user.to_owned(),
            None => std::env::var("USER")
                .or_else(|_| std::env::var("LOGNAME"))
                .map_err(|_| {
                    ReplicationError::Config(
                        "no user given; hint: put it in the URL (postgres://user@host/db)".into(),
                    )
                })?,
        };
        let dbname = pg.get_dbname().unwrap_or(&user).to_owned();

        let mut last_error = None;
        for target in targets(pg)? {
            let attempt = if config.ssl_mode() == SslMode::Allow {
                // libpq's allow: plain first, TLS only when the server turns plain away.
                match Self::attempt(config, &target, None, &user, &dbname).await {
                    Err(e) if e.code() == Some("28000") && config.tls().is_some() => {
                        Self::attempt(config, &target, config.tls(), &user, &dbname).await
                    }
                    other => other,
                }
            } else {
                Self::attempt(config, &target, config.tls(), &user, &dbname).await
            };
            match attempt {
                Ok(conn) => return Ok(conn),
                // Another host may be up, or be the primary; a refusal, a bad password or a
                // certificate problem would be the same anywhere.
                Err(
                    e @ (ReplicationError::Connect { .. }
                    | ReplicationError::Io(_)
                    | ReplicationError::Closed { .. }
                    | ReplicationError::SessionAttrs { .. }),
                ) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| ReplicationError::Config("no host given".into())))
    }

    /// One host: the socket, TLS as `tls` asks, the startup, and the session attributes.
    async fn attempt(
        config: &PgConfig,
        target: &Target,
        tls: Option<&TlsContext>,
        user: &str,
        dbname: &str,
    ) -> Result<Self, ReplicationError> {
        let pg = config.pg();
        let socket = open(target, pg.get_connect_timeout().copied())
            .await
            .map_err(|source| ReplicationError::Connect {
                addr: target.label.clone(),
                source,
            })?;
        let fd = match &socket {
            Socket::Tcp(stream, _) => Some(stream.as_raw_fd()),
            Socket::Unix(_) => None,
        };
        let (io, agreed) = match (socket, tls) {
            (Socket::Tcp(stream, host), Some(tls)) => {
                negotiate(stream, &host, &target.label, tls, config.ssl_mode()).await?
            }
            (Socket::Tcp(stream, _), None) => (Box::new(stream) as BoxTransport, None),
            (Socket::Unix(stream), _) => (Box::new(stream) as BoxTransport, None),
        };
        let binding = pg.get_channel_binding();
        if binding == BindingSetting::Require && agreed.is_none() {
            return Err(ConnectError::BindingWithoutTls {
                host: target.label.clone(),
            }
            .into());
        }
        let mut conn = ReplicationConnection {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            user: user.to_owned(),
            dbname: dbname.to_owned(),
            parameters: HashMap::new(),
            backend_pid: None,
            // Paced only under TLS: there each wake-up costs a pass through rustls and the
            // walsender is the bottleneck; unencrypted, the queue a raised mark lets build up
            // cost the walsender more than the wake-ups saved (BENCHMARKS.md, W2).
            socket: fd.filter(|_| agreed.is_some()),
            tls: agreed,
            binding,
            bound: false,
        };
        conn.startup(pg, &target.label).await?;
        conn.check_session_attrs(pg.get_target_session_attrs(), &target.label)
            .await?;
        Ok(conn)
    }

    /// Refuses a server that does not fit `target_session_attrs`: a standby where
    /// `read-write` asks for the primary, or the other way round.
    async fn check_session_attrs(
        &mut self,
        wanted: TargetSessionAttrs,
        label: &str,
    ) -> Result<(), ReplicationError> {
        let wanted = match wanted {
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            _ => return Ok(()),
        };
        // PostgreSQL 14 and later report both at startup; before, ask.
        let read_only = match (
            self.parameter("in_hot_standby"),
            self.parameter("default_transaction_read_only"),
        ) {
            (Some(standby), Some(default)) => standby == "on" || default == "on",
            _ => {
                let rows = self.simple_query("SHOW transaction_read_only").await?;
                rows.first()
                    .and_then(|r| r.first().cloned().flatten())
                    .is_some_and(|v| v == "on")
            }
        };
        if read_only == (wanted == "read-write") {
            let what = if read_only {
                "read-only (a standby)"
            } else {
                "read-write"
            };
            return Err(ReplicationError::SessionAttrs {
                wanted,
                found: format!("{label} is {what}"),
            });
        }
        Ok(())
    }

    /// How this connection is protected, for `tributary check`: "TLS 1.3 (...), verify-full
    /// against ca.pem, channel binding", or "unencrypted".
    pub fn protection(&self) -> String {
        match &self.tls {
            None => "unencrypted".into(),
            Some(agreed) if self.bound => format!("{}, channel binding", agreed.summary),
            Some(agreed) => format!("{}, no channel binding", agreed.summary),
        }
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
            self.socket,
        ))
    }

    async fn startup(
        &mut self,
        config: &tokio_postgres::Config,
        label: &str,
    ) -> Result<(), ReplicationError> {
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

        self.authenticate(config.get_password(), label).await?;

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

    async fn authenticate(
        &mut self,
        password: Option<&[u8]>,
        label: &str,
    ) -> Result<(), ReplicationError> {
        let mut out = BytesMut::new();
        let message = self.read_message("authenticating").await?;
        if self.binding == BindingSetting::Require {
            let method = match &message {
                Backend::Message(Message::AuthenticationOk) => Some("trust"),
                Backend::Message(Message::AuthenticationCleartextPassword) => Some("password"),
                Backend::Message(Message::AuthenticationMd5Password(_)) => Some("md5"),
                _ => None,
            };
            if let Some(method) = method {
                return Err(ConnectError::BindingNotUsed {
                    host: label.to_owned(),
                    method: method.into(),
                }
                .into());
            }
        }
        match message {
            Backend::Message(Message::AuthenticationOk) => return Ok(()),
            Backend::Message(Message::AuthenticationCleartextPassword) => {
                let password = self.require_password(password, label)?;
                frontend::password_message(password, &mut out).map_err(|e| self.auth_failed(e))?;
            }
            Backend::Message(Message::AuthenticationMd5Password(body)) => {
                let password = self.require_password(password, label)?;
                let hash = md5_hash(self.user.as_bytes(), password, body.salt());
                frontend::password_message(hash.as_bytes(), &mut out)
                    .map_err(|e| self.auth_failed(e))?;
            }
            Backend::Message(Message::AuthenticationSasl(body)) => {
                let password = self.require_password(password, label)?;
                return self.scram(body.mechanisms(), password, label).await;
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
        label: &str,
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
        let plus = offered.iter().any(|m| m == sasl::SCRAM_SHA_256_PLUS);
        let end_point = self.tls.as_ref().and_then(|t| t.end_point.clone());
        let (mechanism, binding) = match (self.binding, end_point) {
            (BindingSetting::Disable, _) => (sasl::SCRAM_SHA_256, ChannelBinding::unsupported()),
            (_, Some(data)) if plus => (
                sasl::SCRAM_SHA_256_PLUS,
                ChannelBinding::tls_server_end_point(data),
            ),
            (BindingSetting::Require, _) => {
                return Err(ConnectError::BindingNotUsed {
                    host: label.to_owned(),
                    method: "SCRAM-SHA-256 without PLUS (the server or its certificate offers no channel binding)".into(),
                }
                .into());
            }
            // We could bind, but the server does not offer it: say so, so that a man in the
            // middle that stripped the offer is detected by the server.
            (_, Some(_)) => (sasl::SCRAM_SHA_256, ChannelBinding::unrequested()),
            (_, None) => (sasl::SCRAM_SHA_256, ChannelBinding::unsupported()),
        };
        self.bound = mechanism == sasl::SCRAM_SHA_256_PLUS;
        let mut scram = ScramSha256::new(password, binding);
        let mut out = BytesMut::new();
        frontend::sasl_initial_response(mechanism, scram.message(), &mut out)
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
        label: &str,
    ) -> Result<&'a [u8], ReplicationError> {
        password.ok_or_else(|| {
            ConnectError::PasswordMissing {
                host: label.to_owned(),
                user: self.user.clone(),
            }
            .into()
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

/// An open socket, before any TLS.
enum Socket {
    /// With the host name the certificate is checked against.
    Tcp(TcpStream, String),
    Unix(UnixStream),
}

async fn open(target: &Target, timeout: Option<Duration>) -> std::io::Result<Socket> {
    let connect = async {
        Ok::<Socket, std::io::Error>(match &target.addr {
            Addr::Tcp(host, port) => {
                let stream = TcpStream::connect((host.as_str(), *port)).await?;
                // Status updates are tiny and must not wait for Nagle.
                stream.set_nodelay(true)?;
                Socket::Tcp(stream, host.clone())
            }
            Addr::Unix(path) => Socket::Unix(UnixStream::connect(path).await?),
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

/// Asks the server for TLS (or, with `sslnegotiation=direct`, starts it at once) and makes the
/// handshake; a server without TLS is refused when `mode` requires it.
async fn negotiate(
    mut stream: TcpStream,
    host: &str,
    label: &str,
    tls: &TlsContext,
    mode: SslMode,
) -> Result<(BoxTransport, Option<Agreed>), ReplicationError> {
    if !tls.direct {
        let mut out = BytesMut::new();
        frontend::ssl_request(&mut out);
        stream.write_all(&out).await?;
        // Exactly one byte: anything after it would be unencrypted bytes read as if
        // they came through TLS.
        match stream.read_u8().await? {
            b'S' => {}
            b'N' if mode.requires_tls() => {
                return Err(ConnectError::ServerWithoutTls {
                    host: label.to_owned(),
                    mode,
                }
                .into());
            }
            b'N' => return Ok((Box::new(stream), None)),
            other => {
                return Err(ReplicationError::Protocol(format!(
                    "the server answered the TLS request with {:?} instead of S or N",
                    other as char
                )));
            }
        }
    }
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|_| {
        ConnectError::Handshake {
            host: label.to_owned(),
            reason: format!("{host:?} is not a host name or address TLS can check"),
        }
    })?;
    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
    // rustls reads at most 4 KiB per call: under it, one socket read serves a whole chunk.
    let stream = BufReader::with_capacity(READ_CHUNK, stream);
    let stream = connector.connect(name, stream).await.map_err(|e| {
        if let Some(failure) = VerifyFailure::find(&e) {
            return failure.to_error(label).into();
        }
        match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(rustls_error) => ConnectError::Handshake {
                host: label.to_owned(),
                reason: rustls_error.to_string(),
            }
            .into(),
            // The network, not TLS: worth another try.
            None => ReplicationError::Io(e),
        }
    })?;
    let (_, session) = stream.get_ref();
    let agreed = Agreed {
        summary: format!("{}, {}", tls::agreed(session), tls.checks),
        end_point: session
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| tls::server_end_point(cert)),
    };
    Ok((Box::new(stream), Some(agreed)))
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
    crate::source::connect::notice::log_notice(
        "replication",
        &notice.severity,
        &notice.code,
        &notice.message,
    );
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
}
