//! What stops a connection before any query: the connection string, the certificate files, the
//! TLS handshake, channel binding. Each message names the setting or the file and says what
//! fixes it; none repeats a password.

use std::path::PathBuf;

use super::params::{ParamError, SslMode};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("source url: {0}")]
    Param(#[from] ParamError),

    #[error(
        "sslmode={mode} checks the server's certificate against a root certificate, and {} does not exist; give sslrootcert=<file> (the CA certificate that signed the server's), or sslrootcert=system for the platform's trusted roots",
        .path.display()
    )]
    RootCertMissing { mode: SslMode, path: PathBuf },

    #[error("cannot read the {what} file {} ({key}): {reason}; check the path and that this user may read it", .path.display())]
    File {
        what: &'static str,
        key: &'static str,
        path: PathBuf,
        reason: String,
    },

    #[error("the {what} file {} ({key}) holds no {expected} in PEM form", .path.display())]
    Empty {
        what: &'static str,
        key: &'static str,
        path: PathBuf,
        expected: &'static str,
    },

    #[error(
        "the client key {} (sslkey) is encrypted: give its passphrase as sslpassword (in the pipeline file, sslpassword=${{NAME}} takes it from the environment)",
        .path.display()
    )]
    EncryptedKey { path: PathBuf },

    #[error(
        "the client key {} (sslkey) could not be decrypted with the sslpassword given: check the passphrase",
        .path.display()
    )]
    KeyPassword { path: PathBuf },

    #[error(
        "the client key {} (sslkey) is encrypted in OpenSSL's older form, which cannot be read; convert it once to PKCS#8: openssl pkcs8 -topk8 -v2 aes-256-cbc -in <key> -out <new key>, and give the new file as sslkey",
        .path.display()
    )]
    LegacyEncryptedKey { path: PathBuf },

    #[error(
        "the client key {} (sslkey) may be read by others (mode {mode:04o}); like libpq, tributary refuses such a key: run chmod 600 {} (or 640 if root owns it)",
        .path.display(), .path.display()
    )]
    KeyPermissions { path: PathBuf, mode: u32 },

    #[error(
        "a client certificate ({}) needs its private key, and {} does not exist; give sslkey=<file>",
        .cert.display(), .key.display()
    )]
    KeyMissing { cert: PathBuf, key: PathBuf },

    #[error(
        "sslrootcert=system trusts every public CA, so it needs the host name checked too: use sslmode=verify-full (not {mode})"
    )]
    SystemRootsNeedVerifyFull { mode: SslMode },

    #[error(
        "the platform's trusted roots (sslrootcert=system) could not be loaded: {0}; install the CA certificates package, or give sslrootcert=<file>"
    )]
    SystemRoots(String),

    #[error(
        "sslnegotiation=direct starts TLS without asking, so it needs sslmode=require or stricter (not {mode})"
    )]
    DirectNeedsTls { mode: SslMode },

    #[error(
        "the server at {host} does not offer TLS, and sslmode={mode} requires it; turn TLS on in the server's postgresql.conf (ssl = on, with ssl_cert_file and ssl_key_file), or lower sslmode on a network you trust"
    )]
    ServerWithoutTls { host: String, mode: SslMode },

    #[error(
        "the server at {host} presented a certificate for {subject}, issued by {issuer}, that does not verify against {roots} ({reason}); give sslrootcert the CA certificate that signed the server's"
    )]
    Untrusted {
        host: String,
        subject: String,
        issuer: String,
        roots: String,
        reason: String,
    },

    #[error(
        "the server's certificate is for {names}, not for {host} (sslmode=verify-full checks the name); connect by a name the certificate carries, or use sslmode=verify-ca to check the CA alone"
    )]
    NameMismatch { host: String, names: String },

    #[error(
        "the server at {host} asks user \"{user}\" for a password, and none was given; put it in PGPASSWORD, in a password file (~/.pgpass, or the file PGPASSFILE names), or in the URL (a pipeline file may take it from the environment: postgres://{user}:${{NAME}}@...)"
    )]
    PasswordMissing { host: String, user: String },

    #[error("TLS handshake with the server at {host} failed: {reason}")]
    Handshake { host: String, reason: String },

    #[error(
        "channel_binding=require, but the connection to {host} is not encrypted; use sslmode=require or stricter, or lower channel_binding"
    )]
    BindingWithoutTls { host: String },

    #[error(
        "channel_binding=require, but the server at {host} authenticated with {method}, not SCRAM-SHA-256-PLUS; set the role's password with password_encryption = 'scram-sha-256' and use scram-sha-256 in pg_hba.conf, or lower channel_binding"
    )]
    BindingNotUsed { host: String, method: String },
}

/// Why a certificate did not verify, carried through rustls and tokio-postgres to the place
/// that turns it into a [`ConnectError`].
#[derive(Debug, Clone)]
pub(crate) enum VerifyFailure {
    Untrusted {
        subject: String,
        issuer: String,
        roots: String,
        reason: String,
    },
    NameMismatch {
        names: String,
    },
}

impl std::fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyFailure::Untrusted {
                subject, reason, ..
            } => write!(f, "the certificate for {subject} does not verify: {reason}"),
            VerifyFailure::NameMismatch { names } => {
                write!(f, "the certificate is for {names}")
            }
        }
    }
}

impl std::error::Error for VerifyFailure {}

impl VerifyFailure {
    pub(crate) fn to_error(&self, host: &str) -> ConnectError {
        let host = host.to_owned();
        match self.clone() {
            VerifyFailure::Untrusted {
                subject,
                issuer,
                roots,
                reason,
            } => ConnectError::Untrusted {
                host,
                subject,
                issuer,
                roots,
                reason,
            },
            VerifyFailure::NameMismatch { names } => ConnectError::NameMismatch { host, names },
        }
    }

    /// The failure somewhere in an error's chain, if a certificate check is what failed.
    pub(crate) fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Self> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(failure) = e.downcast_ref::<VerifyFailure>() {
                return Some(failure);
            }
            if let Some(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))) =
                e.downcast_ref::<rustls::Error>()
                && let Some(failure) = other.0.downcast_ref::<VerifyFailure>()
            {
                return Some(failure);
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && let Some(inner) = io.get_ref()
            {
                let inner: &(dyn std::error::Error + 'static) = inner;
                if let Some(found) = Self::find(inner) {
                    return Some(found);
                }
            }
            next = e.source();
        }
        None
    }
}
