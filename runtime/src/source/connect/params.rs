//! Connection strings read the way libpq reads them, without IO: the URL form
//! (`postgres://user@host/db?sslmode=verify-full`) and the `key=value` form, the TLS keys that
//! tokio-postgres does not know (`sslrootcert`, `sslcert`, `sslkey`, `verify-ca`,
//! `verify-full`, ...), the `PG*` environment variables that fill what the string leaves out,
//! and the lines of a password file (`.pgpass`).
//!
//! The TLS keys are taken out of the string and every other key is handed to tokio-postgres
//! untouched, so nothing it understands is lost.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// libpq's `sslmode`, all six of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Plain first; TLS only if the server refuses a plain connection.
    Allow,
    /// TLS if the server offers it, plain otherwise; the certificate is not checked.
    Prefer,
    /// TLS or nothing; the certificate is checked only if a root certificate is at hand.
    Require,
    /// TLS, with the server's certificate chain checked against the root certificate.
    VerifyCa,
    /// TLS, with the chain checked and the host name matched against the certificate.
    VerifyFull,
}

impl SslMode {
    pub fn parse(text: &str) -> Option<SslMode> {
        Some(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a plain connection is refused.
    pub fn requires_tls(self) -> bool {
        self >= SslMode::Require
    }
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the certificates that may sign the server's come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// `sslrootcert=system`: the platform's trusted roots.
    System,
}

/// The lowest or highest TLS version allowed (`ssl_min_protocol_version`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// A value that must never be shown: its `Debug` says only that it is there.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The TLS half of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert`; `None` means libpq's default file, `~/.postgresql/root.crt`, if it exists.
    pub root_cert: Option<RootCert>,
    /// `sslcert`; `None` means `~/.postgresql/postgresql.crt`, if it exists.
    pub cert: Option<PathBuf>,
    /// `sslkey`; `None` means `~/.postgresql/postgresql.key`.
    pub key: Option<PathBuf>,
    /// `sslpassword`: the passphrase of an encrypted `sslkey`.
    pub key_password: Option<Secret>,
    /// `sslnegotiation=direct`: TLS from the first byte (PostgreSQL 17), no `SSLRequest`.
    pub direct: bool,
    /// `sslsni`: send the host name in the handshake (on unless `sslsni=0`).
    pub sni: bool,
    pub min_version: Option<TlsVersion>,
    pub max_version: Option<TlsVersion>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            mode: SslMode::Prefer,
            root_cert: None,
            cert: None,
            key: None,
            key_password: None,
            direct: false,
            sni: true,
            min_version: None,
            max_version: None,
        }
    }
}

/// A connection string split in two: the text tokio-postgres reads, and what Tributary reads
/// itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The string without the keys Tributary reads itself, in the form it came in.
    pub rest: String,
    pub tls: TlsSettings,
    /// Every key the string gave as a parameter, so that the environment fills only the others;
    /// the caller adds what a URL gives outside its parameters (user, host, port, ...).
    pub given: BTreeSet<String>,
}

/// What a connection string cannot mean. The text never repeats a value, which may be a
/// password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error(
        "invalid {key} {value:?}; libpq's values are {allowed}",
        value = .value
    )]
    InvalidValue {
        key: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error("{key} is not supported: {why}")]
    Unsupported { key: String, why: &'static str },
    #[error("the connection string is malformed: {0}")]
    Malformed(String),
}

/// The keys Tributary reads itself; tokio-postgres would refuse them or know too few values.
const TLS_KEYS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslsni",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslcertmode",
    "sslcompression",
];

/// Writes the kept pairs back in the form the string came in.
type Rebuild = Box<dyn Fn(&[(String, String)]) -> String>;

/// Splits a connection string, in either form, into what tokio-postgres reads and the TLS
/// settings.
pub fn split(conninfo: &str) -> Result<Split, ParamError> {
    let trimmed = conninfo.trim();
    let (pairs, rebuild): (Vec<(String, String)>, Rebuild) = if let Some((base, query)) =
        url_parts(trimmed)
    {
        let pairs = query
            .map(|q| {
                q.split('&')
                    .filter(|piece| !piece.is_empty())
                    .map(|piece| {
                        let (key, value) = piece.split_once('=').ok_or_else(|| {
                            ParamError::Malformed(format!(
                                "the URL parameter {:?} has no `=`",
                                percent_decode(piece)
                            ))
                        })?;
                        Ok((percent_decode(key), percent_decode(value)))
                    })
                    .collect::<Result<Vec<_>, ParamError>>()
            })
            .transpose()?
            .unwrap_or_default();
        let base = base.to_owned();
        (
            pairs,
            Box::new(move |kept: &[(String, String)]| {
                if kept.is_empty() {
                    return base.clone();
                }
                let query: Vec<String> = kept
                    .iter()
                    .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                    .collect();
                format!("{base}?{}", query.join("&"))
            }),
        )
    } else {
        (
            keywords(trimmed)?,
            Box::new(|kept: &[(String, String)]| {
                kept.iter()
                    .map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        )
    };

    let mut tls = TlsSettings::default();
    let mut given = BTreeSet::new();
    let mut kept = Vec::new();
    for (key, value) in pairs {
        given.insert(key.clone());
        if TLS_KEYS.contains(&key.as_str()) {
            apply_tls(&mut tls, &key, &value)?;
        } else {
            kept.push((key, value));
        }
    }
    Ok(Split {
        rest: rebuild(&kept),
        tls,
        given,
    })
}

/// Applies one TLS key's value.
pub fn apply_tls(tls: &mut TlsSettings, key: &str, value: &str) -> Result<(), ParamError> {
    match key {
        "sslmode" => {
            tls.mode = SslMode::parse(value).ok_or_else(|| ParamError::InvalidValue {
                key: "sslmode",
                value: value.into(),
                allowed: "disable, allow, prefer, require, verify-ca and verify-full",
            })?
        }
        "sslrootcert" => {
            tls.root_cert = Some(match value {
                "system" => RootCert::System,
                path => RootCert::File(PathBuf::from(path)),
            })
        }
        "sslcert" => tls.cert = Some(PathBuf::from(value)),
        "sslkey" => tls.key = Some(PathBuf::from(value)),
        "sslsni" => tls.sni = value != "0",
        "ssl_min_protocol_version" => {
            tls.min_version = tls_version("ssl_min_protocol_version", value)?
        }
        "ssl_max_protocol_version" => {
            tls.max_version = tls_version("ssl_max_protocol_version", value)?
        }
        "sslcompression" => {}
        "sslpassword" => tls.key_password = Some(Secret(value.into())),
        "sslcrl" | "sslcrldir" => {
            return Err(ParamError::Unsupported {
                key: key.into(),
                why: "certificate revocation lists are not checked; remove the key, and revoke by replacing the server's certificate and its CA file",
            });
        }
        "sslcertmode" => {
            if value != "allow" {
                return Err(ParamError::Unsupported {
                    key: key.into(),
                    why: "only the default, allow (send sslcert when the server asks), is supported",
                });
            }
        }
        _ => unreachable!("{key} is not a TLS key"),
    }
    Ok(())
}

fn tls_version(key: &'static str, value: &str) -> Result<Option<TlsVersion>, ParamError> {
    match value {
        "" => Ok(None),
        "TLSv1.2" => Ok(Some(TlsVersion::Tls12)),
        "TLSv1.3" => Ok(Some(TlsVersion::Tls13)),
        "TLSv1" | "TLSv1.1" => Err(ParamError::Unsupported {
            key: key.into(),
            why: "TLS 1.0 and 1.1 are not offered; TLSv1.2 is the lowest version",
        }),
        _ => Err(ParamError::InvalidValue {
            key,
            value: value.into(),
            allowed: "TLSv1.2 and TLSv1.3",
        }),
    }
}

/// `(everything before '?', the query)` for a `postgres://` or `postgresql://` URL.
fn url_parts(conninfo: &str) -> Option<(&str, Option<&str>)> {
    if !(conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://")) {
        return None;
    }
    Some(match conninfo.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (conninfo, None),
    })
}

/// The `key = value` form: values bare or single-quoted, `\` escaping the next character.
fn keywords(text: &str) -> Result<Vec<(String, String)>, ParamError> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(ParamError::Malformed(format!(
                "{key:?} is not followed by `=`; write key=value pairs separated by spaces, or a postgres:// URL"
            )));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => {
                        return Err(ParamError::Malformed(format!(
                            "the quoted value of {key} has no closing quote"
                        )));
                    }
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/:,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The libpq environment variables Tributary honours, and the key each stands for. A key the
/// connection string gives wins over its variable.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGCHANNELBINDING", "channel_binding"),
    ("PGSSLNEGOTIATION", "sslnegotiation"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGSSLSNI", "sslsni"),
    ("PGSSLMINPROTOCOLVERSION", "ssl_min_protocol_version"),
    ("PGSSLMAXPROTOCOLVERSION", "ssl_max_protocol_version"),
];

/// The pairs the environment adds: each variable that is set and whose key the connection
/// string left out. TLS keys are applied to `split.tls`; the others are returned.
pub fn from_environment(
    split: &mut Split,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(&'static str, String)>, ParamError> {
    let mut others = Vec::new();
    for &(name, key) in ENVIRONMENT {
        if split.given.contains(key) {
            continue;
        }
        let Some(value) = var(name).filter(|v| !v.is_empty()) else {
            continue;
        };
        if TLS_KEYS.contains(&key) {
            apply_tls(&mut split.tls, key, &value)?;
        } else {
            others.push((key, value));
        }
    }
    Ok(others)
}

/// The password a password file gives for a host, port, database and user: the first line
/// whose four fields match (`*` matches anything). `localhost` also matches a Unix socket.
/// Lines starting with `#` are comments; `\:` and `\\` escape.
pub fn pgpass_lookup(
    content: &str,
    host: &str,
    unix_socket: bool,
    port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    let port = port.to_string();
    for line in content.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = pgpass_fields(line);
        let [h, p, d, u, password] = fields.as_slice() else {
            continue;
        };
        let host_matches = h == "*" || h == host || (unix_socket && h == "localhost");
        if host_matches
            && (p == "*" || *p == port)
            && (d == "*" || d == dbname)
            && (u == "*" || u == user)
        {
            return Some(password.clone());
        }
    }
    None
}

/// A password-file line's fields; the fifth takes the rest of the line, colons included.
fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().unwrap().extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_every_other_key_and_hands_over_the_tls_ones() {
        let split = split(
            "postgres://cdc:p%40ss@db.example:6543/shop?sslmode=verify-full&sslrootcert=/etc/ca%20root.pem&application_name=x%20y&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            split.rest,
            "postgres://cdc:p%40ss@db.example:6543/shop?application_name=x%20y&target_session_attrs=read-write"
        );
        assert_eq!(split.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            split.tls.root_cert,
            Some(RootCert::File("/etc/ca root.pem".into()))
        );
        assert!(split.given.contains("sslmode") && split.given.contains("application_name"));
        let config: tokio_postgres::Config = split.rest.parse().unwrap();
        assert_eq!(config.get_application_name(), Some("x y"));
        assert_eq!(config.get_password(), Some(&b"p@ss"[..]));
    }

    #[test]
    fn a_url_without_tls_keys_is_unchanged() {
        let url = "postgres://u@h1:1,h2:2/db";
        assert_eq!(split(url).unwrap().rest, url);
    }

    #[test]
    fn the_keyword_form_quotes_and_escapes_like_libpq() {
        let split = split(
            r"host=h port = 5 user='o\'brien' password='a b\\c' sslmode=require sslcert=/c.pem sslkey=/k.pem dbname=d",
        )
        .unwrap();
        assert_eq!(split.tls.mode, SslMode::Require);
        assert_eq!(split.tls.cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(split.tls.key, Some(PathBuf::from("/k.pem")));
        let config: tokio_postgres::Config = split.rest.parse().unwrap();
        assert_eq!(config.get_user(), Some("o'brien"));
        assert_eq!(config.get_password(), Some(&br"a b\c"[..]));
        assert_eq!(config.get_dbname(), Some("d"));
        assert_eq!(config.get_ports(), [5]);
    }

    #[test]
    fn bad_values_name_the_key_and_the_choices() {
        let error = split("postgres://h/db?sslmode=verify_full").unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid sslmode \"verify_full\"; libpq's values are disable, allow, prefer, require, verify-ca and verify-full"
        );
        let split_key = split("host=h sslkey=/k.pem sslpassword='p w'").unwrap();
        assert_eq!(split_key.tls.key_password, Some(Secret("p w".into())));
        assert!(
            !format!("{split_key:?}").contains("p w"),
            "Debug hides the passphrase"
        );
        assert!(split("host=h sslcrl=/crl.pem").is_err());
        assert!(split("host=h user='unterminated").is_err());
        assert!(split("host").is_err());
        assert_eq!(
            split("host=h sslrootcert=system").unwrap().tls.root_cert,
            Some(RootCert::System)
        );
    }

    #[test]
    fn the_environment_fills_only_what_the_string_left_out() {
        let env = |name: &str| -> Option<String> {
            match name {
                "PGHOST" => Some("envhost".into()),
                "PGUSER" => Some("envuser".into()),
                "PGPASSWORD" => Some("envpass".into()),
                "PGSSLMODE" => Some("verify-ca".into()),
                "PGSSLROOTCERT" => Some("/env/ca.pem".into()),
                _ => None,
            }
        };
        let mut s = split("postgres://urluser@urlhost/db?sslmode=require").unwrap();
        // What the URL gives outside its parameters, as the caller marks it.
        s.given.extend(["host", "user", "dbname"].map(String::from));
        let added = from_environment(&mut s, &env).unwrap();
        assert_eq!(added, [("password", "envpass".to_string())]);
        assert_eq!(s.tls.mode, SslMode::Require, "the URL's sslmode wins");
        assert_eq!(s.tls.root_cert, Some(RootCert::File("/env/ca.pem".into())));

        let mut s = split("dbname=d").unwrap();
        let added = from_environment(&mut s, &env).unwrap();
        assert_eq!(
            added,
            [
                ("host", "envhost".to_string()),
                ("user", "envuser".to_string()),
                ("password", "envpass".to_string())
            ]
        );
        assert_eq!(s.tls.mode, SslMode::VerifyCa);
    }

    #[test]
    fn a_password_file_matches_like_libpq() {
        let file = "# comment\n\
                    other:5432:*:*:wrong\n\
                    db.example:5432:shop:cdc:pa\\:ss:word\n\
                    localhost:*:*:*:socket-secret\n\
                    *:*:*:cdc:fallback\n";
        assert_eq!(
            pgpass_lookup(file, "db.example", false, 5432, "shop", "cdc").as_deref(),
            Some("pa:ss:word")
        );
        assert_eq!(
            pgpass_lookup(file, "/run/postgresql", true, 5433, "x", "y").as_deref(),
            Some("socket-secret")
        );
        assert_eq!(
            pgpass_lookup(file, "db.example", false, 5433, "shop", "cdc").as_deref(),
            Some("fallback")
        );
        assert_eq!(
            pgpass_lookup(file, "db.example", false, 5433, "shop", "x"),
            None
        );
    }
}
