//! A PostgreSQL cluster that speaks TLS, with a certificate authority the test makes: its
//! server certificate names `localhost` only, it asks `tls_cert` for a client certificate
//! (`hostssl ... cert`) and `tls_scram` for a SCRAM password, and trusts everyone else.

use std::path::PathBuf;
use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use tributary_cluster::{ClusterOptions, TempCluster};

/// The role that authenticates with a client certificate.
pub const CERT_ROLE: &str = "tls_cert";
/// The role that authenticates with SCRAM-SHA-256, and its password.
pub const SCRAM_ROLE: &str = "tls_scram";
pub const SCRAM_PASSWORD: &str = "scram-pw-7f3a9c";
/// The passphrase of [`TlsServer::client_key_encrypted`].
pub const KEY_PASSPHRASE: &str = "key-pass-4e1d02";

/// The cluster and the files a client needs.
pub struct TlsServer {
    pub cluster: TempCluster,
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    /// `tls_cert`'s certificate and key (mode 0600).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The same key encrypted with [`KEY_PASSPHRASE`] (PKCS#8, PBES2 with AES-256-CBC).
    pub client_key_encrypted: PathBuf,
    /// Where the files are.
    pub dir: PathBuf,
}

impl TlsServer {
    /// A URL for `role` (with the SCRAM password for [`SCRAM_ROLE`]) at `host`, with `params`
    /// (`sslmode=verify-full&...`).
    pub fn url(&self, role: &str, host: &str, params: &str) -> String {
        let password = if role == SCRAM_ROLE {
            format!(":{SCRAM_PASSWORD}")
        } else {
            String::new()
        };
        format!(
            "postgres://{role}{password}@{host}:{}/postgres?{params}",
            self.cluster.port()
        )
    }
}

static SERVER: OnceLock<Result<TlsServer, String>> = OnceLock::new();
static SERVER17: OnceLock<Result<TlsServer, String>> = OnceLock::new();

/// The process-wide TLS cluster, started on first use.
pub fn tls_server() -> &'static TlsServer {
    match SERVER.get_or_init(|| start(None)) {
        Ok(server) => server,
        Err(error) => panic!("the TLS cluster did not start: {error}"),
    }
}

/// The same on PostgreSQL 17, which also takes TLS from the first byte
/// (`sslnegotiation=direct`).
pub fn tls_server17() -> &'static TlsServer {
    match SERVER17.get_or_init(|| start(Some(crate::postgres_bin(17)))) {
        Ok(server) => server,
        Err(error) => panic!("the PostgreSQL 17 TLS cluster did not start: {error}"),
    }
}

fn start(bin_dir: Option<PathBuf>) -> Result<TlsServer, String> {
    let dir = std::env::temp_dir().join(crate::unique_name("tls_files"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let ca = authority("Tributary test CA")?;
    let other = authority("Another CA")?;
    let (server_cert, server_key, _) = leaf(
        &ca,
        "localhost",
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (client_cert, client_key, client_key_der) =
        leaf(&ca, CERT_ROLE, &[], ExtendedKeyUsagePurpose::ClientAuth)?;
    let client_key_encrypted = encrypt(&client_key_der)?;

    let write = |name: &str, content: &str, mode: u32| -> Result<PathBuf, String> {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, content).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| e.to_string())?;
        Ok(path)
    };
    let ca_file = write("ca.pem", &ca.pem(), 0o644)?;
    let other_ca = write("other-ca.pem", &other.pem(), 0o644)?;
    let client_cert = write("client.crt", &client_cert, 0o644)?;
    let client_key = write("client.key", &client_key, 0o600)?;
    let client_key_encrypted = write("client-encrypted.key", &client_key_encrypted, 0o600)?;

    let mut options = ClusterOptions {
        bin_dir,
        ..ClusterOptions::fast()
    }
    .setting("ssl", "on")
    .setting("ssl_cert_file", "'server.crt'")
    .setting("ssl_key_file", "'server.key'")
    .setting("ssl_ca_file", "'ca.crt'")
    .setting("max_replication_slots", "20")
    .setting("max_wal_senders", "20")
    .file("server.crt", server_cert)
    .file("server.key", server_key)
    .file("ca.crt", ca.pem());
    for database in ["all", "replication"] {
        options = options
            .hba_rule(format!("hostssl {database} {CERT_ROLE} 127.0.0.1/32 cert"))
            .hba_rule(format!(
                "host {database} {SCRAM_ROLE} 127.0.0.1/32 scram-sha-256"
            ));
    }
    let cluster = TempCluster::start(options).map_err(|e| e.to_string())?;
    register_exit_hook();
    // The caller may be inside a runtime: the roles are made on a thread with one of its own.
    let url = cluster.url("postgres");
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(create_roles(&url))
    })
    .join()
    .map_err(|_| "creating the TLS test roles panicked".to_string())?;
    Ok(TlsServer {
        cluster,
        ca: ca_file,
        other_ca,
        client_cert,
        client_key,
        client_key_encrypted,
        dir,
    })
}

fn authority(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, String> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    CertifiedIssuer::self_signed(params, key).map_err(|e| e.to_string())
}

/// A PKCS#8 key (DER) encrypted with [`KEY_PASSPHRASE`], in PEM.
fn encrypt(der: &[u8]) -> Result<String, String> {
    let info = pkcs8::PrivateKeyInfo::try_from(der).map_err(|e| e.to_string())?;
    let params = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(
        2048,
        b"tributary tests.",
        &[7; 16],
    )
    .map_err(|e| e.to_string())?;
    let document = info
        .encrypt_with_params(params, KEY_PASSPHRASE)
        .map_err(|e| e.to_string())?;
    document
        .to_pem("ENCRYPTED PRIVATE KEY", pkcs8::LineEnding::LF)
        .map(|pem| pem.to_string())
        .map_err(|e| e.to_string())
}

/// A certificate for `common_name` signed by `ca`, and its key in PEM and DER.
fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    common_name: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Result<(String, String, Vec<u8>), String> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.signed_by(&key, ca).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem(), key.serialize_der()))
}

fn register_exit_hook() {
    extern "C" fn stop_cluster() {
        for server in [SERVER.get(), SERVER17.get()]
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = server.cluster.shutdown();
            let _ = std::fs::remove_dir_all(&server.dir);
        }
    }
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain function; atexit has no other preconditions.
    REGISTERED.call_once(|| unsafe {
        libc::atexit(stop_cluster);
    });
}

/// Creates the roles the rules above name.
async fn create_roles(url: &str) {
    let admin = crate::connect(url).await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {CERT_ROLE} LOGIN SUPERUSER REPLICATION;
             SET password_encryption = 'scram-sha-256';
             CREATE ROLE {SCRAM_ROLE} LOGIN SUPERUSER REPLICATION PASSWORD '{SCRAM_PASSWORD}';"
        ))
        .await
        .unwrap();
}
