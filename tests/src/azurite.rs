//! Azurite, Microsoft's Azure Storage emulator (its blob service), for the tests of `az://`
//! sinks: a real Blob API with shared-key signatures checked and conditional puts
//! (`If-None-Match: *`) decided, on a private port and directory.
//!
//! `scripts/test.sh` installs it from npm (`ensure_azurite` in `scripts/lib.sh`). Containers
//! are created through the Blob API with a request signed here (object_store has no container
//! operations), with the emulator's well-known account.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::s3::{Emulator, bucket_name, http_exchange, process_wide};

/// The emulator's one account and its published key (the same in every Azurite).
pub const ACCOUNT: &str = "devstoreaccount1";
const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The Blob API version the container requests speak.
const API_VERSION: &str = "2021-08-06";
const DIR_PREFIX: &str = "tributary-azurite-";

/// The command that installs Azurite where the harness looks for it.
pub const INSTALL_COMMAND: &str =
    "npm install --prefix \"$HOME/.cache/tributary/tools/azurite\" azurite@3.35.0";

static SHARED: OnceLock<Result<Azurite, String>> = OnceLock::new();

/// The process-wide Azurite, started on first use and killed when the process exits. Tests
/// sharing it use containers of their own ([`Azurite::fresh_container`]).
pub fn azurite() -> &'static Azurite {
    process_wide(&SHARED, Azurite::start, |server| server.process.shut_down())
}

/// An `azurite-blob` child process serving a private directory on `127.0.0.1`.
#[derive(Debug)]
pub struct Azurite {
    process: Emulator,
}

impl Azurite {
    fn start() -> Result<Azurite, String> {
        let binary = find_binary()?;
        let process = Emulator::start(DIR_PREFIX, "azurite-blob", |root, port| {
            let mut command = Command::new(&binary);
            command
                .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .arg("--location")
                .arg(root)
                // object_store speaks a newer API version than a pinned emulator may know.
                .args(["--skipApiVersionCheck", "--silent"]);
            command
        })?;
        Ok(Azurite { process })
    }

    /// The account's endpoint, `http://127.0.0.1:<port>/devstoreaccount1`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}", self.process.port())
    }

    /// `sink.options` for this emulator, as `object_store`'s Azure keys.
    pub fn object_store_options(&self) -> Vec<(String, String)> {
        [
            ("azure_storage_account_name", ACCOUNT.to_owned()),
            ("azure_storage_account_key", ACCOUNT_KEY.to_owned()),
            ("azure_storage_endpoint", self.endpoint()),
            ("azure_allow_http", "true".to_owned()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }

    /// `az://<container>`, for a pipeline's sink URL.
    pub fn container_url(&self, container: &str) -> String {
        format!("az://{container}")
    }

    /// `abfss://<container>@devstoreaccount1.dfs.core.windows.net`: the same container named
    /// as ADLS names it (the endpoint option still sends every request to Azurite).
    pub fn abfss_url(&self, container: &str) -> String {
        format!("abfss://{container}@{ACCOUNT}.dfs.core.windows.net")
    }

    /// Creates a container no other test uses, named after `hint`, and returns its name.
    pub async fn fresh_container(&self, hint: &str) -> String {
        // Container names allow no two hyphens in a row.
        let mut name = bucket_name(hint);
        while name.contains("--") {
            name = name.replace("--", "-");
        }
        self.create_container(&name).await;
        name
    }

    /// Creates a container through the Blob API (Create Container, signed with the account's
    /// shared key).
    pub async fn create_container(&self, name: &str) {
        let date = httpdate(std::time::SystemTime::now());
        let path = format!("/{ACCOUNT}/{name}");
        let headers = [("x-ms-date", date.as_str()), ("x-ms-version", API_VERSION)];
        let signature = shared_key_signature("PUT", &path, &headers, &[("restype", "container")]);
        let request = format!(
            "PUT {path}?restype=container HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nx-ms-date: {date}\r\n\
             x-ms-version: {API_VERSION}\r\nAuthorization: SharedKey {ACCOUNT}:{signature}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            self.process.port()
        );
        let response = http_exchange(self.process.port(), &request)
            .await
            .unwrap_or_else(|error| panic!("Create Container {name}: {error}"));
        let status = response.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("201") {
            panic!(
                "Create Container {name} on {} failed: {response}",
                self.endpoint()
            );
        }
    }
}

/// `TRIBUTARY_AZURITE`, else the tools directory `scripts/test.sh` installs into.
fn find_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("TRIBUTARY_AZURITE") {
        return Ok(PathBuf::from(path));
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    let path =
        PathBuf::from(home).join(".cache/tributary/tools/azurite/node_modules/.bin/azurite-blob");
    if path.is_file() {
        return Ok(path);
    }
    Err(format!(
        "Azurite is not installed (searched {}); install it with `{INSTALL_COMMAND}` (or run \
         scripts/test.sh), or set TRIBUTARY_AZURITE to its azurite-blob",
        path.display()
    ))
}

/// The Shared Key signature of a request without a body: the string to sign is the verb, the
/// eleven standard headers (all empty here), the `x-ms-` headers sorted, and the resource
/// with its query parameters sorted.
fn shared_key_signature(
    verb: &str,
    path: &str,
    ms_headers: &[(&str, &str)],
    query: &[(&str, &str)],
) -> String {
    let mut headers: Vec<_> = ms_headers.to_vec();
    headers.sort();
    let mut query: Vec<_> = query.to_vec();
    query.sort();
    let mut text = format!("{verb}\n{}", "\n".repeat(11));
    for (name, value) in headers {
        text.push_str(&format!("{name}:{value}\n"));
    }
    text.push_str(&format!("/{ACCOUNT}{path}"));
    for (name, value) in query {
        text.push_str(&format!("\n{name}:{value}"));
    }
    let key = STANDARD
        .decode(ACCOUNT_KEY)
        .expect("the emulator's key is base64");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key");
    mac.update(text.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn httpdate(at: std::time::SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {h:02}:{m:02}:{s:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize]
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn http_dates_are_what_the_blob_service_reads() {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(httpdate(at), "Sun, 06 Nov 1994 08:49:37 GMT");
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_709_251_200);
        assert_eq!(httpdate(at), "Fri, 01 Mar 2024 00:00:00 GMT");
    }
}
