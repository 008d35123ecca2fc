//! Where landed files go: an object store named by URL.
//!
//! `s3://bucket/prefix` (credentials, region and endpoint from the standard `AWS_*`
//! environment variables, overridden by the pipeline file's `sink.options`), `file:///path`
//! (created when missing), or `memory://` (for tests of pure logic). Every path the pipeline
//! writes is relative to the URL's prefix.

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
    #[error("cannot create sink directory {path}: {source}")]
    Directory {
        path: String,
        #[source]
        source: std::io::Error,
    },
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
                std::fs::create_dir_all(rest).map_err(|source| SinkError::Directory {
                    path: rest.to_owned(),
                    source,
                })?;
                let local =
                    LocalFileSystem::new_with_prefix(rest).map_err(|source| SinkError::Store {
                        url: url.to_owned(),
                        source,
                    })?;
                Arc::new(local)
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

    /// Write an object, replacing any previous one; large objects go up in parts.
    pub async fn put(&self, path: &Path, bytes: Bytes) -> Result<(), SinkError> {
        if bytes.len() <= MULTIPART_THRESHOLD {
            self.store
                .put(path, PutPayload::from(bytes))
                .await
                .map_err(|e| self.error(e))?;
            return Ok(());
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
        Ok(())
    }

    /// Write an object only if no object exists at `path`. `Ok(false)` when one does.
    pub async fn put_if_absent(&self, path: &Path, bytes: Bytes) -> Result<bool, SinkError> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
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
        let path = Path::from("_tributary/log/1.json");
        assert!(
            sink.put_if_absent(&path, Bytes::from_static(b"a"))
                .await
                .unwrap()
        );
        assert!(
            !sink
                .put_if_absent(&path, Bytes::from_static(b"b"))
                .await
                .unwrap()
        );
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
