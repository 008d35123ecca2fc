//! Where landed files go: an object store named by URL.
//!
//! `s3://bucket/prefix` (credentials, region and endpoint from the standard `AWS_*`
//! environment variables, overridden by the pipeline file's `sink.options`), `file:///path`
//! (the directory is created with the first object written), or `memory://` (for tests of
//! pure logic). Every path the pipeline writes is relative to the URL's prefix.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    BackoffConfig, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

/// Files larger than this are uploaded in parts.
const MULTIPART_THRESHOLD: usize = 32 << 20;
const PART_SIZE: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("sink url {url:?} is not a URL: {reason}")]
    Url { url: String, reason: String },
    #[error(
        "sink url {url:?}: scheme {scheme:?} is not supported; use s3://bucket/prefix, file:///path or memory://"
    )]
    Scheme { url: String, scheme: String },
    #[error("sink option {key:?} is not an S3 setting (see object_store's AmazonS3ConfigKey)")]
    Option { key: String },
    #[error("sink {url}: {source}")]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
}

/// What [`Sink::create`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object is new: this call wrote it.
    New,
    /// An object was there already and was left as it was.
    Existed,
}

/// An opened sink: an object store rooted at the sink URL.
#[derive(Debug, Clone)]
pub struct Sink {
    store: Arc<dyn ObjectStore>,
    url: String,
}

impl Sink {
    pub fn open(url: &str, options: &BTreeMap<String, String>) -> Result<Sink, SinkError> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| SinkError::Url {
            url: url.to_owned(),
            reason: "expected scheme://...".into(),
        })?;
        let store: Arc<dyn ObjectStore> = match scheme {
            "file" => {
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
            "memory" => Arc::new(InMemory::new()),
            "s3" | "s3a" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(SinkError::Url {
                        url: url.to_owned(),
                        reason: "no bucket name".into(),
                    });
                }
                // Short request-level retries; the pipeline retries whole steps with its own
                // backoff for as long as an outage lasts.
                let retry = RetryConfig {
                    backoff: BackoffConfig::default(),
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(30),
                };
                let mut builder = AmazonS3Builder::from_env()
                    .with_url(format!("s3://{bucket}"))
                    .with_retry(retry);
                for (key, value) in options {
                    let key: AmazonS3ConfigKey = key
                        .parse()
                        .map_err(|_| SinkError::Option { key: key.clone() })?;
                    builder = builder.with_config(key, value);
                }
                let s3 = builder.build().map_err(|source| SinkError::Store {
                    url: url.to_owned(),
                    source,
                })?;
                let prefix = prefix.trim_matches('/');
                if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(PrefixStore::new(s3, prefix))
                }
            }
            other => {
                return Err(SinkError::Scheme {
                    url: url.to_owned(),
                    scheme: other.to_owned(),
                });
            }
        };
        Ok(Sink {
            store,
            url: url.to_owned(),
        })
    }

    /// A sink over an existing store (tests, embedding).
    pub fn from_store(store: Arc<dyn ObjectStore>, url: impl Into<String>) -> Sink {
        Sink {
            store,
            url: url.into(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub fn error(&self, source: object_store::Error) -> SinkError {
        SinkError::Store {
            url: self.url.clone(),
            source,
        }
    }

    /// Create an object unless one exists at `path`; a writer never replaces an object.
    ///
    /// Small objects are created with a conditional put (`If-None-Match: *` on S3, an atomic
    /// no-replace link on a file system). Objects larger than the multipart threshold go up in
    /// parts, which object stores cannot make conditional: for those the name itself must be
    /// one no other writer produces (data file names hold the writer's id), and an object
    /// already there is taken as an earlier attempt of the same upload.
    pub async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created, SinkError> {
        if bytes.len() <= MULTIPART_THRESHOLD {
            let options = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            return match self
                .store
                .put_opts(path, PutPayload::from(bytes), options)
                .await
            {
                Ok(_) => Ok(Created::New),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(Created::Existed),
                Err(e) => Err(self.error(e)),
            };
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

    /// Delete an object; deleting one that is not there is not an error.
    pub async fn delete(&self, path: &Path) -> Result<(), SinkError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// The names directly under `prefix` (objects only, not deeper folders).
    pub async fn list_names(&self, prefix: &Path) -> Result<Vec<String>, SinkError> {
        let listing = match self.store.list_with_delimiter(Some(prefix)).await {
            Ok(listing) => listing,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(self.error(e)),
        };
        Ok(listing
            .objects
            .into_iter()
            .filter_map(|o| o.location.filename().map(str::to_owned))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(err.contains("\"aws_bukket\" is not an S3 setting"), "{err}");
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
        sink.delete(&path).await.unwrap();
        sink.delete(&path).await.unwrap();
        assert!(sink.get(&path).await.unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
