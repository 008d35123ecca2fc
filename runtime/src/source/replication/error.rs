//! What can go wrong on the replication connection, and the server's own words when it refuses.

use std::fmt;
use std::io;
use std::time::Duration;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorFields, ErrorResponseBody, NoticeResponseBody};

use super::frame::FrameError;

/// SQLSTATE `0A000`.
const FEATURE_NOT_SUPPORTED: &str = "0A000";

/// An `ErrorResponse` (or `NoticeResponse`) from the server, field by field.
///
/// Printed as `<message> (SQLSTATE <code>)`, followed by the detail and hint when the server gave
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerError {
    /// `ERROR`, `FATAL`, `PANIC` (never localized when the server sends the `V` field).
    pub severity: String,
    /// The SQLSTATE code, like `28P01` (invalid password) or `42704` (undefined object).
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl ServerError {
    /// Builds the error from `(field type, value)` pairs; unknown fields are ignored.
    pub(crate) fn from_fields(fields: impl IntoIterator<Item = (u8, String)>) -> Self {
        let mut error = ServerError::default();
        let mut localized_severity = String::new();
        for (kind, value) in fields {
            match kind {
                b'S' => localized_severity = value,
                b'V' => error.severity = value,
                b'C' => error.code = value,
                b'M' => error.message = value,
                b'D' => error.detail = Some(value),
                b'H' => error.hint = Some(value),
                _ => {}
            }
        }
        if error.severity.is_empty() {
            error.severity = localized_severity;
        }
        error
    }

    pub(crate) fn from_error_body(body: &ErrorResponseBody) -> Box<Self> {
        Box::new(Self::from_fields(collect_fields(body.fields())))
    }

    pub(crate) fn from_notice_body(body: &NoticeResponseBody) -> Self {
        Self::from_fields(collect_fields(body.fields()))
    }
}

/// A malformed body keeps whatever was read before the damage.
fn collect_fields(mut fields: ErrorFields<'_>) -> Vec<(u8, String)> {
    let mut pairs = Vec::new();
    while let Ok(Some(field)) = fields.next() {
        pairs.push((
            field.type_(),
            String::from_utf8_lossy(field.value_bytes()).into_owned(),
        ));
    }
    pairs
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)?;
        if let Some(detail) = &self.detail {
            write!(f, "; detail: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ServerError {}

#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The connection settings cannot work (no host, no user, an impossible combination).
    #[error("invalid replication connection settings: {0}")]
    Config(String),

    /// The connection string, a certificate file, the TLS handshake, or channel binding.
    #[error(transparent)]
    Connection(Box<crate::source::connect::ConnectError>),

    /// No host fits `target_session_attrs` (a standby where a primary is asked for, or the
    /// other way round).
    #[error(
        "no server fits target_session_attrs={wanted}: {found}; list the other server's host too (host=a,b), or wait for the failover to finish"
    )]
    SessionAttrs { wanted: &'static str, found: String },

    /// No socket could be opened to any of the configured hosts.
    #[error("cannot reach the server at {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },

    /// The server answered the startup or authentication with an error: wrong password, no
    /// `pg_hba.conf` entry, missing `REPLICATION` privilege, unknown database.
    #[error("server refused replication connection to db \"{db}\" as user \"{user}\": {error}")]
    Refused {
        db: String,
        user: String,
        error: Box<ServerError>,
    },

    #[error(
        "server asks for authentication method {method}, which is not supported (only trust, password, md5 and scram-sha-256 are)"
    )]
    UnsupportedAuth { method: String },

    #[error("authentication as user \"{user}\" failed: {reason}")]
    Auth { user: String, reason: String },

    /// A replication command (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`, `START_REPLICATION`,
    /// ...) failed on the server.
    #[error("replication command `{command}` failed: {error}")]
    Command {
        command: String,
        error: Box<ServerError>,
    },

    /// The server ended the stream with an error (slot dropped, walsender terminated, ...).
    #[error("server ended the replication stream with an error: {0}")]
    Stream(Box<ServerError>),

    /// The server sent something the protocol does not allow at this point.
    #[error("replication protocol violation: {0}")]
    Protocol(String),

    #[error("malformed replication frame: {0}")]
    Frame(#[from] FrameError),

    /// The server finished the replication command while streaming: it is shutting down.
    #[error("the server ended the replication stream: it is shutting down or restarting")]
    ServerEnded,

    /// Closed by this end: the server is shutting down while the pipeline was not reading.
    #[error(
        "the server is shutting down: closed the replication stream so that it need not wait for changes not yet landed (the slot sends them again)"
    )]
    ServerStopping,

    /// The server closed the socket without ending the conversation first.
    #[error("server closed the replication connection unexpectedly while {during}")]
    Closed { during: &'static str },

    #[error("replication connection i/o failed: {0}")]
    Io(#[from] io::Error),

    /// The server did not finish the stream within the wait after `CopyDone`; the socket was
    /// closed anyway, so anything not yet acknowledged will be replayed on the next start.
    #[error(
        "server did not end the replication stream within {waited:?} after the client's CopyDone; \
         the connection was closed anyway"
    )]
    ShutdownTimedOut { waited: Duration },

    #[error("replication connection: {0}")]
    Other(String),
}

impl From<crate::source::connect::ConnectError> for ReplicationError {
    fn from(error: crate::source::connect::ConnectError) -> Self {
        ReplicationError::Connection(Box::new(error))
    }
}

impl ReplicationError {
    /// The server's error, when the server is the one that said no.
    pub fn server_error(&self) -> Option<&ServerError> {
        match self {
            ReplicationError::Refused { error, .. }
            | ReplicationError::Command { error, .. }
            | ReplicationError::Stream(error) => Some(error),
            _ => None,
        }
    }

    /// The server's SQLSTATE, e.g. `42704` when a slot does not exist, `42710` when it already
    /// does, `55006` when another consumer is streaming from it.
    pub fn code(&self) -> Option<&str> {
        self.server_error().map(|e| e.code.as_str())
    }

    /// Whether reconnecting later could help (the network or the server went away), as opposed to
    /// a configuration or permission problem that needs a person.
    pub fn is_transient(&self) -> bool {
        match self {
            ReplicationError::Connect { .. }
            | ReplicationError::ServerEnded
            | ReplicationError::ServerStopping
            | ReplicationError::Closed { .. }
            | ReplicationError::Io(_)
            | ReplicationError::SessionAttrs { .. }
            | ReplicationError::ShutdownTimedOut { .. } => true,
            // 57P01..57P03: admin shutdown, crash shutdown, cannot connect now.
            other => {
                other
                    .code()
                    .is_some_and(|c| c.starts_with("57P") || c.starts_with("08"))
                    || other.in_recovery()
            }
        }
    }

    /// Whether the server refused logical decoding because it is in recovery: a server that
    /// came back as a standby, in a restart or a failover, before its promotion. Only a
    /// reconnect asks (a start on a standby is refused at once). The message is the server's
    /// English one; in another language the error is not retried.
    fn in_recovery(&self) -> bool {
        self.server_error().is_some_and(|e| {
            e.code == FEATURE_NOT_SUPPORTED && e.message.contains("while in recovery")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(u8, &str)]) -> Vec<(u8, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn refusal_reads_like_the_server_said_it() {
        let error = ServerError::from_fields(fields(&[
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "28P01"),
            (b'M', "password authentication failed for user \"bob\""),
            (b'R', "auth_failed"),
        ]));
        let refused = ReplicationError::Refused {
            db: "shop".into(),
            user: "bob".into(),
            error: Box::new(error),
        };
        assert_eq!(
            refused.to_string(),
            "server refused replication connection to db \"shop\" as user \"bob\": \
             password authentication failed for user \"bob\" (SQLSTATE 28P01)"
        );
        assert_eq!(refused.code(), Some("28P01"));
        assert!(!refused.is_transient());
    }

    #[test]
    fn detail_and_hint_follow_the_message() {
        let error = ServerError::from_fields(fields(&[
            (b'S', "ERREUR"),
            (b'C', "55006"),
            (b'M', "replication slot \"s\" is active for PID 42"),
            (b'D', "d"),
            (b'H', "h"),
        ]));
        assert_eq!(
            error.severity, "ERREUR",
            "falls back to the localized severity"
        );
        assert_eq!(
            error.to_string(),
            "replication slot \"s\" is active for PID 42 (SQLSTATE 55006); detail: d; hint: h"
        );
    }

    #[test]
    fn a_server_in_recovery_is_transient_and_another_unsupported_feature_is_not() {
        let error = |message: &str| {
            ReplicationError::Stream(Box::new(ServerError {
                code: "0A000".into(),
                message: message.into(),
                ..Default::default()
            }))
        };
        assert!(error("logical decoding cannot be used while in recovery").is_transient());
        assert!(
            !error("client sent proto_version=4 but server only supports protocol 3 or lower")
                .is_transient()
        );
    }

    #[test]
    fn admin_shutdown_is_transient() {
        let error = ServerError {
            code: "57P01".into(),
            ..Default::default()
        };
        assert!(ReplicationError::Stream(Box::new(error)).is_transient());
    }
}
