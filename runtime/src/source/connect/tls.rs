//! TLS to PostgreSQL with rustls: one client configuration, built from the connection
//! string's TLS settings the way libpq reads them, serves both connection kinds (the SQL
//! sessions through tokio-postgres, and the replication client's own socket).
//!
//! The certificate check follows `sslmode`: `verify-full` checks the chain and the host name,
//! `verify-ca` the chain alone, and `require`/`prefer`/`allow` the chain only when a root
//! certificate is at hand (libpq's rule for `~/.postgresql/root.crt`), never the name. The
//! handshake's signatures are always checked, so the session is bound to the certificate
//! shown, which is what SCRAM channel binding relies on.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use sha2::Digest;

use super::error::{ConnectError, VerifyFailure};
use super::params::{RootCert, SslMode, TlsSettings, TlsVersion};

/// The protocol name a PostgreSQL 17 server expects in ALPN (required with direct
/// negotiation, harmless otherwise).
const ALPN: &[u8] = b"postgresql";

/// A ready client configuration and what it checks.
#[derive(Clone)]
pub struct TlsContext {
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) mode: SslMode,
    pub(crate) direct: bool,
    /// What is checked, for `tributary check`: "verify-full against ca.pem", ...
    pub(crate) checks: String,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("mode", &self.mode)
            .field("checks", &self.checks)
            .finish()
    }
}

/// The client configuration for `settings`, or `None` under `sslmode=disable`. `home` is where
/// libpq's default files live (`~/.postgresql/root.crt`, `postgresql.crt`, `postgresql.key`).
pub fn context(
    settings: &TlsSettings,
    home: Option<&Path>,
) -> Result<Option<TlsContext>, ConnectError> {
    if settings.mode == SslMode::Disable {
        return Ok(None);
    }
    if settings.direct && !settings.mode.requires_tls() {
        return Err(ConnectError::DirectNeedsTls {
            mode: settings.mode,
        });
    }
    let default_file = |name: &str| home.map(|h| h.join(".postgresql").join(name));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());

    let (roots, roots_label) = match &settings.root_cert {
        Some(RootCert::System) => {
            if settings.mode != SslMode::VerifyFull {
                return Err(ConnectError::SystemRootsNeedVerifyFull {
                    mode: settings.mode,
                });
            }
            (
                Some(system_roots()?),
                "the platform's trusted roots".to_owned(),
            )
        }
        Some(RootCert::File(path)) => (Some(root_file(path)?), path.display().to_string()),
        None => match default_file("root.crt").filter(|p| p.exists()) {
            Some(path) => (Some(root_file(&path)?), path.display().to_string()),
            None if settings.mode >= SslMode::VerifyCa => {
                return Err(ConnectError::RootCertMissing {
                    mode: settings.mode,
                    path: default_file("root.crt")
                        .unwrap_or_else(|| PathBuf::from("~/.postgresql/root.crt")),
                });
            }
            None => (None, String::new()),
        },
    };

    let (chain, checks) = match roots {
        Some(roots) => {
            let chain =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| ConnectError::Empty {
                        what: "root certificate",
                        key: "sslrootcert",
                        path: PathBuf::from(&roots_label),
                        expected: match e {
                            rustls::client::VerifierBuilderError::NoRootAnchors => {
                                "usable CA certificate"
                            }
                            _ => "valid CA certificate",
                        },
                    })?;
            let what = if settings.mode == SslMode::VerifyFull {
                "verify-full"
            } else {
                "verify-ca"
            };
            (Some(chain), format!("{what} against {roots_label}"))
        }
        None => (
            None,
            format!("the certificate is not checked (sslmode={})", settings.mode),
        ),
    };
    let verifier = Arc::new(Verifier {
        chain,
        check_name: settings.mode == SslMode::VerifyFull,
        roots: roots_label,
        provider: provider.clone(),
    });

    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| settings.min_version.is_none_or(|min| *v >= min))
    .filter(|(v, _)| settings.max_version.is_none_or(|max| *v <= max))
    .map(|(_, version)| version)
    .collect();
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| ConnectError::Handshake {
            host: "any server".into(),
            reason: format!(
                "no TLS version fits ssl_min_protocol_version and ssl_max_protocol_version: {e}"
            ),
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier);

    let explicit_cert = settings.cert.is_some();
    let cert_path = settings
        .cert
        .clone()
        .or_else(|| default_file("postgresql.crt"));
    let mut config = match cert_path.filter(|p| explicit_cert || p.exists()) {
        Some(cert_path) => {
            let key_path = settings
                .key
                .clone()
                .or_else(|| default_file("postgresql.key"))
                .unwrap_or_else(|| PathBuf::from("postgresql.key"));
            let certs = client_certs(&cert_path)?;
            let key = client_key(
                &cert_path,
                &key_path,
                settings.key_password.as_ref().map(|p| p.0.as_str()),
            )?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| ConnectError::File {
                    what: "client key",
                    key: "sslkey",
                    path: key_path.clone(),
                    reason: format!(
                        "it does not fit the certificate {}: {e}",
                        cert_path.display()
                    ),
                })?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.enable_sni = settings.sni;
    Ok(Some(TlsContext {
        config: Arc::new(config),
        mode: settings.mode,
        direct: settings.direct,
        checks,
    }))
}

fn read_file(what: &'static str, key: &'static str, path: &Path) -> Result<Vec<u8>, ConnectError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| ConnectError::File {
            what,
            key,
            path: path.to_owned(),
            reason: io_reason(&e),
        })?;
    Ok(bytes)
}

/// An IO error's text without the "(os error N)" that the message's own words already say.
fn io_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "it does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.to_string(),
    }
}

fn pem_certs(
    what: &'static str,
    key: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ConnectError> {
    let bytes = read_file(what, key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConnectError::File {
            what,
            key,
            path: path.to_owned(),
            reason: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(ConnectError::Empty {
            what,
            key,
            path: path.to_owned(),
            expected: "certificate",
        });
    }
    Ok(certs)
}

fn root_file(path: &Path) -> Result<RootCertStore, ConnectError> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) =
        roots.add_parsable_certificates(pem_certs("root certificate", "sslrootcert", path)?);
    if added == 0 {
        return Err(ConnectError::Empty {
            what: "root certificate",
            key: "sslrootcert",
            path: path.to_owned(),
            expected: "usable CA certificate",
        });
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, ConnectError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let reasons: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
        return Err(ConnectError::SystemRoots(if reasons.is_empty() {
            "none were found".into()
        } else {
            reasons.join("; ")
        }));
    }
    Ok(roots)
}

fn client_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConnectError> {
    pem_certs("client certificate", "sslcert", path)
}

fn client_key(
    cert: &Path,
    path: &Path,
    password: Option<&str>,
) -> Result<PrivateKeyDer<'static>, ConnectError> {
    let metadata = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ConnectError::KeyMissing {
            cert: cert.to_owned(),
            key: path.to_owned(),
        },
        _ => ConnectError::File {
            what: "client key",
            key: "sslkey",
            path: path.to_owned(),
            reason: io_reason(&e),
        },
    })?;
    check_key_permissions(path, &metadata)?;
    let bytes = read_file("client key", "sslkey", path)?;
    if bytes
        .windows(30)
        .any(|w| w == b"BEGIN ENCRYPTED PRIVATE KEY---")
    {
        return decrypt_key(path, &bytes, password);
    }
    if bytes.windows(9).any(|w| w == b"ENCRYPTED") {
        // OpenSSL's older form, a PKCS#1 or SEC1 key with "Proc-Type: 4,ENCRYPTED".
        return Err(ConnectError::LegacyEncryptedKey {
            path: path.to_owned(),
        });
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| ConnectError::Empty {
        what: "client key",
        key: "sslkey",
        path: path.to_owned(),
        expected: "private key (PKCS#8, PKCS#1 or SEC1)",
    })
}

/// A PKCS#8 key encrypted with a passphrase (PBES2), opened with `sslpassword`.
fn decrypt_key(
    path: &Path,
    pem: &[u8],
    password: Option<&str>,
) -> Result<PrivateKeyDer<'static>, ConnectError> {
    let Some(password) = password else {
        return Err(ConnectError::EncryptedKey {
            path: path.to_owned(),
        });
    };
    let text = std::str::from_utf8(pem).map_err(|_| ConnectError::Empty {
        what: "client key",
        key: "sslkey",
        path: path.to_owned(),
        expected: "private key (PKCS#8, PKCS#1 or SEC1)",
    })?;
    let (_, document) = pkcs8::SecretDocument::from_pem(text).map_err(|e| ConnectError::File {
        what: "client key",
        key: "sslkey",
        path: path.to_owned(),
        reason: format!("not an encrypted PKCS#8 key: {e}"),
    })?;
    let encrypted = pkcs8::EncryptedPrivateKeyInfo::try_from(document.as_bytes()).map_err(|e| {
        ConnectError::File {
            what: "client key",
            key: "sslkey",
            path: path.to_owned(),
            reason: format!("not an encrypted PKCS#8 key: {e}"),
        }
    })?;
    let plain = encrypted
        .decrypt(password)
        .map_err(|_| ConnectError::KeyPassword {
            path: path.to_owned(),
        })?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

/// libpq's rule: a key owned by this user may be read by no one else (0600 or less); a key
/// owned by root may also be read by its group (0640 or less).
fn check_key_permissions(path: &Path, metadata: &std::fs::Metadata) -> Result<(), ConnectError> {
    use std::os::unix::fs::MetadataExt;
    if !metadata.is_file() {
        return Ok(());
    }
    let mode = metadata.mode() & 0o7777;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let too_open = if metadata.uid() == euid {
        mode & 0o077 != 0
    } else if metadata.uid() == 0 {
        mode & 0o037 != 0
    } else {
        false
    };
    if too_open {
        return Err(ConnectError::KeyPermissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Checks the server's certificate as `sslmode` asks, and explains a failure.
#[derive(Debug)]
struct Verifier {
    /// The chain check, when a root certificate is at hand.
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    roots: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Ok(verified) => Ok(verified),
            // The chain is checked before the name, so a name error means the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                presented,
                ..
            })) => Err(failure(VerifyFailure::NameMismatch {
                names: presented
                    .iter()
                    .map(|name| plain_name(name))
                    .collect::<Vec<_>>()
                    .join(", "),
            })),
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)) => {
                Err(failure(VerifyFailure::NameMismatch {
                    names: describe(end_entity).0,
                }))
            }
            Err(error) => {
                let (subject, issuer) = describe(end_entity);
                Err(failure(VerifyFailure::Untrusted {
                    subject,
                    issuer,
                    roots: self.roots.clone(),
                    reason: reason(&error),
                }))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `localhost` for rustls's `DnsName("localhost")`, `10.0.0.1` for `IpAddress(10.0.0.1)`.
fn plain_name(presented: &str) -> String {
    let inner = presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(presented);
    inner.trim_matches('"').to_owned()
}

fn failure(failure: VerifyFailure) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        failure,
    ))))
}

fn reason(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "it is not signed by a CA in that file".into()
        }
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "it has expired".into(),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "it is not valid yet".into(),
        other => other.to_string(),
    }
}

/// The certificate's subject and issuer, as `CN=...,O=...`.
fn describe(cert: &[u8]) -> (String, String) {
    use x509_cert::der::Decode;
    match x509_cert::Certificate::from_der(cert) {
        Ok(cert) => (
            cert.tbs_certificate.subject.to_string(),
            cert.tbs_certificate.issuer.to_string(),
        ),
        Err(_) => (
            "an unreadable subject".into(),
            "an unreadable issuer".into(),
        ),
    }
}

/// The `tls-server-end-point` channel binding data (RFC 5929) of the server's certificate: its
/// hash with the hash of its signature algorithm, SHA-256 for SHA-1 and MD5. `None` for an
/// algorithm without one (Ed25519), where SCRAM must go without binding.
pub(crate) fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    use x509_cert::der::Decode;
    let parsed = x509_cert::Certificate::from_der(cert).ok()?;
    let oid = parsed.signature_algorithm.oid.to_string();
    Some(match oid.as_str() {
        // md5, sha1 and sha256 with RSA; ecdsa with SHA-1 and SHA-256.
        "1.2.840.113549.1.1.4"
        | "1.2.840.113549.1.1.5"
        | "1.2.840.113549.1.1.11"
        | "1.2.840.10045.4.1"
        | "1.2.840.10045.4.3.2" => sha2::Sha256::digest(cert).to_vec(),
        "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => sha2::Sha384::digest(cert).to_vec(),
        "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => sha2::Sha512::digest(cert).to_vec(),
        _ => return None,
    })
}

/// What a finished handshake agreed: "TLS 1.3 (TLS13_AES_256_GCM_SHA384)".
pub(crate) fn agreed(connection: &rustls::ClientConnection) -> String {
    let version = match connection.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3".to_owned(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2".to_owned(),
        Some(other) => format!("{other:?}"),
        None => "TLS".to_owned(),
    };
    match connection.negotiated_cipher_suite() {
        // The IANA name, as the server's pg_stat_ssl shows it: TLS_AES_256_GCM_SHA384.
        Some(suite) => {
            let name = format!("{:?}", suite.suite());
            let name = name
                .strip_prefix("TLS13_")
                .map_or(name.clone(), |n| format!("TLS_{n}"));
            format!("{version} ({name})")
        }
        None => version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_modes_need_a_root_certificate() {
        let home = tempfile::tempdir().unwrap();
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            ..TlsSettings::default()
        };
        let error = context(&settings, Some(home.path()))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("sslmode=verify-full checks the server's certificate"),
            "{error}"
        );
        assert!(
            error.contains(".postgresql/root.crt does not exist"),
            "{error}"
        );

        let settings = TlsSettings {
            mode: SslMode::Require,
            ..TlsSettings::default()
        };
        let tls = context(&settings, Some(home.path())).unwrap().unwrap();
        assert_eq!(
            tls.checks,
            "the certificate is not checked (sslmode=require)"
        );
        assert!(
            context(
                &TlsSettings {
                    mode: SslMode::Disable,
                    ..settings
                },
                None
            )
            .unwrap()
            .is_none()
        );
    }

    #[test]
    fn certificate_files_that_cannot_serve_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let settings = TlsSettings {
            mode: SslMode::VerifyCa,
            root_cert: Some(RootCert::File(missing.clone())),
            ..TlsSettings::default()
        };
        let error = context(&settings, None).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "cannot read the root certificate file {} (sslrootcert): it does not exist; check the path and that this user may read it",
                missing.display()
            )
        );
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let settings = TlsSettings {
            root_cert: Some(RootCert::File(junk)),
            ..settings
        };
        let error = context(&settings, None).unwrap_err().to_string();
        assert!(
            error.contains("holds no certificate in PEM form"),
            "{error}"
        );

        let settings = TlsSettings {
            mode: SslMode::Require,
            root_cert: Some(RootCert::System),
            ..TlsSettings::default()
        };
        let error = context(&settings, None).unwrap_err().to_string();
        assert!(
            error.contains("use sslmode=verify-full (not require)"),
            "{error}"
        );

        let settings = TlsSettings {
            mode: SslMode::Prefer,
            direct: true,
            ..TlsSettings::default()
        };
        let error = context(&settings, None).unwrap_err().to_string();
        assert!(
            error.contains("needs sslmode=require or stricter (not prefer)"),
            "{error}"
        );
    }

    #[test]
    fn presented_names_read_plainly() {
        assert_eq!(plain_name("DnsName(\"db.example\")"), "db.example");
        assert_eq!(plain_name("IpAddress(10.0.0.1)"), "10.0.0.1");
        assert_eq!(plain_name("db.example"), "db.example");
    }

    #[test]
    fn a_client_key_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("client.key");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = check_key_permissions(&key, &std::fs::metadata(&key).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("may be read by others (mode 0644)"),
            "{error}"
        );
        assert!(error.contains("chmod 600"), "{error}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_key_permissions(&key, &std::fs::metadata(&key).unwrap()).unwrap();
    }
}
