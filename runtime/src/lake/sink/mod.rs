//! Where landed files go: an object store named by URL.
//!
//! A cloud's bucket or container ([`clouds`]: `s3://bucket/prefix`, `az://container/prefix`,
//! `abfss://container@account.dfs.core.windows.net/prefix`, `gs://bucket/prefix` ([`gcs`]),
//! each with its cloud's usual
//! credentials, overridden by the pipeline file's `sink.options`), `file:///path` (the
//! directory is created with the first object written), or `memory://` (for tests of pure
//! logic). Every path the pipeline writes is relative to the URL's prefix.

mod clouds;
mod gcs;

use clouds::Cloud;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// Files larger than this are uploaded in parts.
const MULTIPART_THRESHOLD: usize = 32 << 20;
const PART_SIZE: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("sink url {url:?} is not a URL: {reason}")]
    Url { url: String, reason: String },
    #[error(
        "sink url {url:?}: scheme {scheme:?} is not supported; use s3://bucket/prefix, \
         az://container/prefix (or abfss://container@account.dfs.core.windows.net/prefix), \
         gs://bucket/prefix, file:///path or memory://"
    )]
    Scheme { url: String, scheme: String },
    #[error("sink option {key:?} is not a setting of {store} (see object_store's {keys})")]
    Option {
        key: String,
        store: &'static str,
        keys: &'static str,
    },
    /// A failure that may pass: the store unreachable, a timeout, a 5xx, throttling.
    #[error("sink {url}: {source}")]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// Nothing answered at the store's address (refused, no such host, timed out): one
    /// sentence, since the client's own text nests each cause in the next. It may pass.
    #[error(
        "sink {url}: cannot reach the {store} endpoint {endpoint} ({cause}); start the store, \
         or fix {setting} to name where it listens"
    )]
    Unreachable {
        url: String,
        store: &'static str,
        endpoint: String,
        cause: String,
        setting: &'static str,
    },
    /// The sink's Iceberg catalog (`sink.catalog`) unreachable or failing, or a commit to it
    /// of unknown outcome: it may pass, as the store's outages do.
    #[error("{message}")]
    Catalog { message: String },
    /// An outage met where only its text was kept (a current-state table's reads): it may
    /// pass, as the store's own do.
    #[error("{message}")]
    Outage { message: String },
    /// A failure that trying again cannot fix, said in a sentence with the way out.
    #[error("sink {url}: {reason}; {hint}")]
    Refused {
        url: String,
        reason: String,
        hint: &'static str,
    },
}

impl SinkError {
    /// Whether trying the same step again can succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SinkError::Store { .. }
                | SinkError::Unreachable { .. }
                | SinkError::Catalog { .. }
                | SinkError::Outage { .. }
        )
    }
}

/// Sort a store failure into one that may pass and one that will not, with what to do about
/// the latter. object_store reports 404, 403 and 401 as their own kinds and everything else,
/// transport failures and 5xx included, as `Generic`; the error code in the body (S3's and
/// Azure's `<Code>`) tells the rest apart.
fn classify(url: &str, cloud: Cloud, source: object_store::Error) -> SinkError {
    let text = crate::error_chain(&source);
    let refused = |reason: String, hint: &'static str| SinkError::Refused {
        url: url.to_owned(),
        reason,
        hint,
    };
    if let Some((reason, hint)) = error_code(&text).and_then(|code| cloud.refusal(url, code)) {
        return refused(reason, hint);
    }
    if text.contains("169.254.169.254") || text.contains("metadata.google.internal") {
        let (reason, hint) = cloud.no_credentials();
        return refused(reason.to_owned(), hint);
    }
    match &source {
        object_store::Error::PermissionDenied { .. } => refused(
            format!("access denied: {}", first_line(&text)),
            "give these credentials read, write, delete and list rights on the sink",
        ),
        object_store::Error::Unauthenticated { .. } => refused(
            format!("the credentials were refused: {}", first_line(&text)),
            cloud.credentials_hint(),
        ),
        object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented { .. } => {
            refused(
                format!(
                    "the store cannot do what the pipeline needs: {}",
                    first_line(&text)
                ),
                "tributary needs conditional puts (create-if-absent); use a store that supports them",
            )
        }
        _ if text.contains("error sending request") => SinkError::Unreachable {
            url: url.to_owned(),
            store: cloud.name(),
            endpoint: endpoint_of(&text).unwrap_or_else(|| url.to_owned()),
            cause: text
                .rsplit(": ")
                .next()
                .unwrap_or(&text)
                .trim()
                .chars()
                .take(200)
                .collect(),
            setting: cloud.endpoint_setting(),
        },
        _ if client_error(&text) => refused(
            format!("the store refused the request: {}", first_line(&text)),
            "check sink.url and sink.options",
        ),
        _ => SinkError::Store {
            url: url.to_owned(),
            source,
        },
    }
}

/// `scheme://host:port` of the first URL a store error names.
fn endpoint_of(text: &str) -> Option<String> {
    let start = text.find("http://").or_else(|| text.find("https://"))?;
    let rest = &text[start..];
    let host = rest.find("://")? + 3;
    let end = rest[host..]
        .find(|c: char| c == '/' || c == '?' || c.is_whitespace())
        .map_or(rest.len(), |i| host + i);
    Some(rest[..end].to_owned())
}

/// The `<Code>` of an S3 or Azure error body, or the first `"reason"` of a GCS one.
fn error_code(text: &str) -> Option<&str> {
    if let Some(at) = text.find("<Code>") {
        let start = at + "<Code>".len();
        let end = text[start..].find("</Code>")? + start;
        return Some(&text[start..end]);
    }
    let after = &text[text.find("\"reason\"")? + "\"reason\"".len()..];
    let start = after.find('"')? + 1;
    let end = after[start..].find('"')? + start;
    Some(&after[start..end])
}

/// A 4xx status that is not about timing (408 timeout, 429 throttling).
fn client_error(text: &str) -> bool {
    let Some(at) = text.find("status code: ") else {
        return false;
    };
    let code: u16 = text[at + 13..]
        .chars()
        .take(3)
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    (400..500).contains(&code) && code != 408 && code != 429
}

/// The message without a response body (an S3 error body is a page of XML).
fn first_line(text: &str) -> String {
    let cut = text.find(['<', '\n']).unwrap_or(text.len());
    text[..cut]
        .trim_end_matches([':', ' '])
        .chars()
        .take(300)
        .collect()
}

/// What [`Sink::create`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object is new: this call wrote it.
    New,
    /// An object was there already and was left as it was.
    Existed,
}

/// The folders and objects directly under a prefix of the sink.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub folders: Vec<String>,
    /// Name and size in bytes.
    pub objects: Vec<(String, u64)>,
}

/// An opened sink: an object store rooted at the sink URL.
#[derive(Debug, Clone)]
pub struct Sink {
    store: Arc<dyn ObjectStore>,
    url: String,
    cloud: Cloud,
}

impl Sink {
    pub fn open(url: &str, options: &BTreeMap<String, String>) -> Result<Sink, SinkError> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| SinkError::Url {
            url: url.to_owned(),
            reason: "expected scheme://...".into(),
        })?;
        let cloud = Cloud::of_scheme(scheme).ok_or_else(|| SinkError::Scheme {
            url: url.to_owned(),
            scheme: scheme.to_owned(),
        })?;
        let store: Arc<dyn ObjectStore> = match cloud {
            Cloud::Local => {
                if !rest.starts_with('/') {
                    return Err(SinkError::Url {
                        url: url.to_owned(),
                        reason: "a file URL needs an absolute path (file:///var/lake)".into(),
                    });
                }
                // Rooted at `/` with the directory as a prefix, so that opening a sink creates
                // nothing: the directory appears with the first object written (a refused start
                // leaves no trace), and objects are still created atomically.
                let prefix = rest.trim_matches('/');
                if prefix.is_empty() {
                    return Err(SinkError::Url {
                        url: url.to_owned(),
                        reason: "the file system root cannot be a sink; name a directory".into(),
                    });
                }
                Arc::new(PrefixStore::new(LocalFileSystem::new(), prefix))
            }
            Cloud::Memory => Arc::new(InMemory::new()),
            Cloud::S3 | Cloud::Azure | Cloud::Gcs => {
                clouds::open(cloud, url, scheme, rest, options)?
            }
        };
        Ok(Sink {
            store,
            url: url.to_owned(),
            cloud,
        })
    }

    /// A sink over an existing store (tests, embedding).
    pub fn from_store(store: Arc<dyn ObjectStore>, url: impl Into<String>) -> Sink {
        let url = url.into();
        let cloud = url
            .split_once("://")
            .and_then(|(scheme, _)| Cloud::of_scheme(scheme))
            .unwrap_or(Cloud::Memory);
        Sink { store, url, cloud }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// A store failure, sorted into one that may pass and one that will not.
    pub fn error(&self, source: object_store::Error) -> SinkError {
        classify(&self.url, self.cloud, source)
    }

    /// Create an object unless one exists at `path`; a writer never replaces an object.
    ///
    /// Small objects are created with a conditional put (`If-None-Match: *` on S3, an atomic
    /// no-replace link on a file system). Objects larger than the multipart threshold go up in
    /// parts, which object stores cannot make conditional: for those the name itself must be
    /// one no other writer produces (data file names hold the writer's id), and an object
    /// already there is taken as an earlier attempt of the same upload. A name writers race
    /// for goes through [`Sink::create_fence`].
    pub async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created, SinkError> {
        if bytes.len() <= MULTIPART_THRESHOLD {
            return self.create_fence(path, bytes).await;
        }
        if self.size(path).await?.is_some() {
            return Ok(Created::Existed);
        }
        let mut upload = self
            .store
            .put_multipart(path)
            .await
            .map_err(|e| self.error(e))?;
        for start in (0..bytes.len()).step_by(PART_SIZE) {
            let part = bytes.slice(start..(start + PART_SIZE).min(bytes.len()));
            if let Err(e) = upload.put_part(PutPayload::from(part)).await {
                let _ = upload.abort().await;
                return Err(self.error(e));
            }
        }
        upload.complete().await.map_err(|e| self.error(e))?;
        Ok(Created::New)
    }

    /// Create an object that writers race for (a commit log entry, a table's next version)
    /// unless one exists at `path`, with one conditional put whatever its size: of writers
    /// creating it at once exactly one is told [`Created::New`]. (One put takes up to 5 GiB on
    /// S3; a table's metadata grows toward tens of MiB only with a history that wants expiring.)
    pub async fn create_fence(&self, path: &Path, bytes: Bytes) -> Result<Created, SinkError> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes), options)
            .await
        {
            Ok(_) => Ok(Created::New),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Created::Existed),
            Err(e) => Err(self.error(e)),
        }
    }

    /// A warning when readers of `format`'s tables could not open their files by the URL the
    /// sink is named with. Iceberg manifests name every file by its absolute URL, and Spark,
    /// Trino and pyiceberg open Azure's files by the ADLS form (`abfss://`), not by `az://`
    /// (which DuckDB reads). Delta names files relative to the table; Parquet has no tables.
    pub fn table_location_advice(&self, format: crate::lake::TableFormat) -> Option<String> {
        let rest = self.url.strip_prefix("az://")?;
        if format != crate::lake::TableFormat::Iceberg {
            return None;
        }
        let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = match prefix.trim_matches('/') {
            "" => String::new(),
            prefix => format!("/{prefix}"),
        };
        Some(format!(
            "sink.url {}: Iceberg manifests name each file by this URL, which DuckDB reads but \
             Spark, Trino and pyiceberg do not; for them name the sink \
             abfss://{container}@<account>.dfs.core.windows.net{prefix} before its first \
             flush (the URL is written into every table)",
            self.url
        ))
    }

    /// Whether the store decides conditional puts, which every commit rests on: an object
    /// created under a fresh name must be refused when created again. The probe object
    /// (`_tributary/probe/<random>`) is deleted after. A store that ignores the condition
    /// would let a second writer replace a commit silently, so it is refused, never used.
    /// A directory's create is the file system's own no-replace link, and probing it would
    /// leave the directory behind a refused start: only the clouds' stores are probed.
    pub async fn probe_fence(&self) -> Result<(), SinkError> {
        if matches!(self.cloud, Cloud::Local | Cloud::Memory) {
            return Ok(());
        }
        let mut draw = [0u8; 8];
        let _ = getrandom::fill(&mut draw);
        let path = Path::from(format!(
            "_tributary/probe/{:016x}.json",
            u64::from_le_bytes(draw)
        ));
        let first = self.create_fence(&path, Bytes::from_static(b"{}")).await?;
        let second = self.create_fence(&path, Bytes::from_static(b"{ }")).await;
        let deleted = self.delete(&path).await;
        match (first, second?) {
            (Created::New, Created::Existed) => deleted,
            (_, Created::New) => Err(SinkError::Refused {
                url: self.url.clone(),
                reason: format!(
                    "{} does not honour conditional puts: a second create of {path} replaced \
                     the first",
                    self.cloud.name()
                ),
                hint: "tributary needs create-if-absent (If-None-Match: * on S3 and Azure) to \
                       keep two writers from replacing each other's commits; use a store (or a \
                       version of it) that supports conditional writes",
            }),
            (Created::Existed, _) => Err(SinkError::Refused {
                url: self.url.clone(),
                reason: format!("a fresh name, {path}, was found taken before it was created"),
                hint: "check that sink.url names a store no one else writes probe names to",
            }),
        }
    }

    /// The object's size, or `None` when there is none.
    pub async fn size(&self, path: &Path) -> Result<Option<u64>, SinkError> {
        match self.store.head(path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    /// The object's bytes, or `None` when there is none.
    pub async fn get(&self, path: &Path) -> Result<Option<Bytes>, SinkError> {
        match self.store.get(path).await {
            Ok(result) => Ok(Some(result.bytes().await.map_err(|e| self.error(e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Write an object, replacing one there: only for pointers that say where something
    /// else is (a Delta log's `_last_checkpoint`), never for what the pipeline lands.
    pub async fn replace(&self, path: &Path, bytes: Bytes) -> Result<(), SinkError> {
        self.store
            .put(path, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.error(e))
    }

    /// Bytes `range` of the object.
    pub async fn get_range(
        &self,
        path: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, SinkError> {
        self.store
            .get_range(path, range)
            .await
            .map_err(|e| self.error(e))
    }

    /// Delete an object; deleting one that is not there is not an error.
    pub async fn delete(&self, path: &Path) -> Result<(), SinkError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// The names directly under `prefix` (objects only, not deeper folders).
    pub async fn list_names(&self, prefix: &Path) -> Result<Vec<String>, SinkError> {
        Ok(self
            .list_dir(Some(prefix))
            .await?
            .objects
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// The objects directly under `prefix` (none when it is not there): name, size, and when each was last written
    /// (milliseconds since the epoch).
    pub async fn list_dated(&self, prefix: &Path) -> Result<Vec<(String, u64, i64)>, SinkError> {
        let Some(listing) = self.list_with_delimiter(Some(prefix)).await? else {
            return Ok(Vec::new());
        };
        Ok(listing
            .objects
            .into_iter()
            .filter_map(|o| {
                let name = o.location.filename()?.to_owned();
                Some((name, o.size, o.last_modified.timestamp_millis()))
            })
            .collect())
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> Result<Option<object_store::ListResult>, SinkError> {
        match self.store.list_with_delimiter(prefix).await {
            Ok(listing) => Ok(Some(listing)),
            // A directory not made yet; but a missing bucket is no empty sink.
            Err(e @ object_store::Error::NotFound { .. }) => match self.error(e) {
                refused @ SinkError::Refused { .. } => Err(refused),
                _ => Ok(None),
            },
            Err(e) => Err(self.error(e)),
        }
    }

    /// What lies directly under `prefix` (the sink's root for `None`): folders and objects
    /// with their sizes, by name.
    pub async fn list_dir(&self, prefix: Option<&Path>) -> Result<Listing, SinkError> {
        let Some(listing) = self.list_with_delimiter(prefix).await? else {
            return Ok(Listing::default());
        };
        Ok(Listing {
            folders: listing
                .common_prefixes
                .iter()
                .filter_map(|p| p.filename().map(str::to_owned))
                .collect(),
            objects: listing
                .objects
                .into_iter()
                .filter_map(|o| Some((o.location.filename()?.to_owned(), o.size)))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_owned().into(),
        }
    }

    #[test]
    fn an_unreachable_endpoint_is_one_sentence_naming_it() {
        let text = "Error performing list request: Error performing GET \
                    http://127.0.0.1:41323/lake?delimiter=%2F&list-type=2 in 567ms, after 3 \
                    retries, max_retries: 3, retry_timeout: 30s  - HTTP error: error sending \
                    request: client error (Connect): tcp connect error: Connection refused (os \
                    error 111)";
        let error = classify("s3://lake/shop", Cloud::S3, generic(text));
        assert!(error.is_transient());
        assert_eq!(
            error.to_string(),
            "sink s3://lake/shop: cannot reach the S3 endpoint http://127.0.0.1:41323 \
             (Connection refused (os error 111)); start the store, or fix sink.options \
             aws_endpoint (or the variable AWS_ENDPOINT or AWS_ENDPOINT_URL) to name where it \
             listens"
        );
    }

    /// The endpoint's names the error and the README give are the ones the S3 client reads
    /// from the environment (`AWS_*`, lower-cased) and from `sink.options`.
    #[test]
    fn both_endpoint_variables_name_the_endpoint() {
        for name in ["AWS_ENDPOINT", "AWS_ENDPOINT_URL"] {
            let key: object_store::aws::AmazonS3ConfigKey =
                name.to_ascii_lowercase().parse().unwrap();
            assert_eq!(
                key,
                object_store::aws::AmazonS3ConfigKey::Endpoint,
                "{name}"
            );
        }
    }

    #[test]
    fn failures_are_sorted_into_passing_and_refused() {
        let url = "s3://lake/shop";
        for transient in [
            "Error performing PUT http://127.0.0.1:9/lake/x: connection refused",
            "Server returned non-2xx status code: 503 Service Unavailable: <Error><Code>SlowDown</Code></Error>",
            "Server returned non-2xx status code: 429 Too Many Requests",
            "request timed out",
        ] {
            assert!(
                classify(url, Cloud::S3, generic(transient)).is_transient(),
                "{transient}"
            );
        }
        let refused = |source| classify(url, Cloud::S3, source).to_string();
        assert_eq!(
            refused(generic(
                "Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>"
            )),
            "sink s3://lake/shop: the bucket \"lake\" does not exist; create it, or fix sink.url"
        );
        let err = refused(generic(
            "Error performing PUT http://169.254.169.254/latest/api/token in 1ms - Server returned non-2xx status code: 403 Forbidden",
        ));
        assert!(
            err.contains("no S3 credentials") && err.contains("AWS_ACCESS_KEY_ID"),
            "{err}"
        );
        let err = refused(object_store::Error::PermissionDenied {
            path: "x".into(),
            source: "Server returned non-2xx status code: 403 Forbidden: <Error><Code>InvalidAccessKeyId</Code></Error>".into(),
        });
        assert!(
            err.contains("credentials were refused (InvalidAccessKeyId)"),
            "{err}"
        );
        let err = refused(object_store::Error::PermissionDenied {
            path: "x".into(),
            source: "Server returned non-2xx status code: 403 Forbidden: <Error><Code>AccessDenied</Code></Error>".into(),
        });
        assert!(
            err.contains("access denied (AccessDenied)") && err.contains("s3:PutObject"),
            "{err}"
        );
        let err = refused(generic(
            "Server returned non-2xx status code: 400 Bad Request: <Error>",
        ));
        assert!(
            err.starts_with("sink s3://lake/shop: the store refused the request: ")
                && !err.contains('<'),
            "no XML in the message: {err}"
        );
    }

    /// GCS's and Azure's refusals, in the bodies those services send (GCS: JSON with a
    /// `reason`; Azure: XML with a `<Code>`), are named with each cloud's own settings.
    #[test]
    fn gcs_and_azure_refusals_name_their_settings() {
        let gcs = |source| classify("gs://lake/shop", Cloud::Gcs, source).to_string();
        let body = |code: u16, status: &str, reason: &str, message: &str| {
            format!(
                "Server returned non-2xx status code: {code} {status}: {{\"error\": {{\"code\": \
                 {code}, \"message\": \"{message}\", \"errors\": [{{\"message\": \"{message}\", \
                 \"domain\": \"global\", \"reason\": \"{reason}\"}}]}}}}"
            )
        };
        let err = gcs(object_store::Error::Unauthenticated {
            path: "x".into(),
            source: body(401, "Unauthorized", "authError", "Invalid Credentials").into(),
        });
        assert!(
            err.contains("the Google Cloud Storage credentials were refused (authError)")
                && err.contains("GOOGLE_APPLICATION_CREDENTIALS"),
            "{err}"
        );
        let err = gcs(object_store::Error::PermissionDenied {
            path: "x".into(),
            source: body(
                403,
                "Forbidden",
                "forbidden",
                "sa@p.iam.gserviceaccount.com does not have storage.objects.create access",
            )
            .into(),
        });
        assert!(
            err.contains("access denied (forbidden)") && err.contains("roles/storage.objectUser"),
            "{err}"
        );
        let err = gcs(object_store::Error::NotFound {
            path: "x".into(),
            source: body(
                404,
                "Not Found",
                "notFound",
                "The specified bucket does not exist.",
            )
            .into(),
        });
        assert_eq!(
            err,
            "sink gs://lake/shop: the bucket \"lake\" does not exist; create it, or fix sink.url"
        );
        let err = classify(
            "az://lake/shop",
            Cloud::Azure,
            object_store::Error::Unauthenticated {
                path: "x".into(),
                source: "Server returned non-2xx status code: 403 Server failed to authenticate the request.: <?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code><Message>Server failed to authenticate the request.</Message></Error>".into(),
            },
        )
        .to_string();
        assert!(
            err.contains("the Azure Blob Storage credentials were refused (AuthenticationFailed)")
                && err.contains("AZURE_STORAGE_ACCOUNT_KEY"),
            "{err}"
        );
    }

    #[test]
    fn refuses_unknown_schemes_and_options() {
        let none = BTreeMap::new();
        let err = Sink::open("ftp://host/x", &none).unwrap_err().to_string();
        assert!(err.contains("scheme \"ftp\" is not supported"), "{err}");
        let err = Sink::open("lake/shop", &none).unwrap_err().to_string();
        assert!(err.contains("is not a URL"), "{err}");
        let err = Sink::open("file://relative", &none)
            .unwrap_err()
            .to_string();
        assert!(err.contains("absolute path"), "{err}");
        let options = BTreeMap::from([("aws_bukket".to_owned(), "x".to_owned())]);
        let err = Sink::open("s3://lake/shop", &options)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "\"aws_bukket\" is not a setting of S3 (see object_store's AmazonS3ConfigKey)"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn conditional_put_refuses_to_overwrite() {
        let dir = std::env::temp_dir().join(format!("tributary-sink-{}", std::process::id()));
        let sink = Sink::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
        assert!(!dir.exists(), "opening a sink creates nothing");
        assert!(
            sink.list_names(&Path::from("_tributary/log"))
                .await
                .unwrap()
                .is_empty()
        );
        let path = Path::from("_tributary/log/1.json");
        let create = |bytes: &'static [u8]| sink.create(&path, Bytes::from_static(bytes));
        assert_eq!(create(b"a").await.unwrap(), Created::New);
        assert_eq!(create(b"b").await.unwrap(), Created::Existed);
        assert_eq!(sink.size(&path).await.unwrap(), Some(1));
        assert_eq!(
            sink.get(&path).await.unwrap().unwrap(),
            Bytes::from_static(b"a")
        );
        assert_eq!(
            sink.list_names(&Path::from("_tributary/log"))
                .await
                .unwrap(),
            ["1.json"]
        );
        assert_eq!(
            sink.list_dir(None).await.unwrap(),
            Listing {
                folders: vec!["_tributary".into()],
                objects: vec![],
            }
        );
        let log = sink.list_dir(Some(&Path::from("_tributary/log"))).await;
        assert_eq!(log.unwrap().objects, [("1.json".to_owned(), 1)]);
        sink.delete(&path).await.unwrap();
        sink.delete(&path).await.unwrap();
        assert!(sink.get(&path).await.unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A store that takes every put as an overwrite, the condition ignored.
    #[derive(Debug)]
    struct Unconditional(InMemory);

    impl std::fmt::Display for Unconditional {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Unconditional")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Unconditional {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            _: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.0
                .put_opts(location, payload, PutOptions::default())
                .await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.0.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.0.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    /// Iceberg tables on `az://` are warned about, with the ADLS form that Spark and
    /// pyiceberg open; other formats and URLs are not.
    #[test]
    fn iceberg_on_az_urls_is_told_the_adls_form() {
        use crate::lake::TableFormat;
        let sink = Sink::from_store(Arc::new(InMemory::new()), "az://lake/cdc/shop/");
        let advice = sink.table_location_advice(TableFormat::Iceberg).unwrap();
        assert!(
            advice.contains("abfss://lake@<account>.dfs.core.windows.net/cdc/shop before"),
            "{advice}"
        );
        let bare = Sink::from_store(Arc::new(InMemory::new()), "az://lake");
        let advice = bare.table_location_advice(TableFormat::Iceberg).unwrap();
        assert!(advice.contains("abfss://lake@<account>.dfs.core.windows.net before"));
        assert_eq!(sink.table_location_advice(TableFormat::Delta), None);
        let adls = Sink::from_store(
            Arc::new(InMemory::new()),
            "abfss://lake@acct.dfs.core.windows.net/cdc",
        );
        assert_eq!(adls.table_location_advice(TableFormat::Iceberg), None);
        let gcs = Sink::from_store(Arc::new(InMemory::new()), "gs://lake/cdc");
        assert_eq!(gcs.table_location_advice(TableFormat::Iceberg), None);
    }

    /// The probe passes a store that decides the condition and leaves nothing behind; a
    /// cloud store that ignores it is refused, named, with the reason.
    #[tokio::test]
    async fn the_probe_refuses_a_store_that_ignores_conditional_puts() {
        let honest = Sink::from_store(Arc::new(InMemory::new()), "s3://lake/shop");
        honest.probe_fence().await.unwrap();
        assert_eq!(honest.list_dir(None).await.unwrap(), Listing::default());

        let careless = Sink::from_store(Arc::new(Unconditional(InMemory::new())), "az://lake/shop");
        let refused = careless.probe_fence().await.unwrap_err();
        assert!(!refused.is_transient());
        let text = refused.to_string();
        assert!(
            text.starts_with(
                "sink az://lake/shop: Azure Blob Storage does not honour conditional puts"
            ) && text.contains("If-None-Match"),
            "{text}"
        );
        let probes = careless.list_names(&Path::from("_tributary/probe")).await;
        assert_eq!(
            probes.unwrap(),
            Vec::<String>::new(),
            "the probe is deleted"
        );
    }
}
