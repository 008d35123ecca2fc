//! Google Cloud Storage through its JSON API: an [`ObjectStore`] for `gs://bucket/prefix`.
//!
//! object_store's own GCS client speaks the XML API, which no emulator installable from the
//! package registries serves, so a GCS sink through it could be tested against nothing real
//! (docs/design.md, Object stores). This client speaks the JSON API, which GCS and
//! fake-gcs-server both serve, and takes its token from object_store's GCS credential
//! providers (a service-account file, application default credentials, or the metadata
//! server, which GKE's workload identity answers).
//!
//! - A create is one `uploadType=multipart` request with `ifGenerationMatch=0`: GCS decides
//!   the condition and the write as one step (fake-gcs-server too, on this upload type only).
//! - An upload in parts is gathered and sent as one `uploadType=media` request at its
//!   completion (its parts are already in memory, as the sink holds the whole file).
//! - A read asks for the object's metadata, then its bytes (`alt=media`) with a `Range`.
//! - A listing pages through the JSON listing, with `delimiter=/` for one level.

use std::fmt;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::gcp::GcpCredentialProvider;
use object_store::path::Path;
use object_store::{
    Attributes, CopyMode, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, Result, UploadPart,
};
use serde::Deserialize;

const STORE: &str = "GCS";

/// One bucket through the JSON API.
#[derive(Clone)]
pub(super) struct Gcs {
    http: reqwest::Client,
    /// `https://storage.googleapis.com`, or an emulator's address.
    base: String,
    bucket: String,
    /// `None` when requests go unsigned (`google_skip_signature`, an emulator).
    credentials: Option<GcpCredentialProvider>,
}

impl fmt::Debug for Gcs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gcs({}/{})", self.base, self.bucket)
    }
}

impl fmt::Display for Gcs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gs://{}", self.bucket)
    }
}

/// An object as the JSON API describes it.
#[derive(Debug, Deserialize)]
struct Described {
    name: String,
    #[serde(default)]
    size: Option<String>,
    #[serde(default)]
    updated: Option<String>,
    #[serde(default)]
    etag: Option<String>,
    #[serde(default)]
    generation: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Deserialize)]
struct Page {
    #[serde(default)]
    items: Vec<Described>,
    #[serde(default)]
    prefixes: Vec<String>,
    #[serde(rename = "nextPageToken", default)]
    next: Option<String>,
}

impl Gcs {
    pub(super) fn new(
        http: reqwest::Client,
        base: &str,
        bucket: &str,
        credentials: Option<GcpCredentialProvider>,
    ) -> Gcs {
        Gcs {
            http,
            base: base.trim_end_matches('/').to_owned(),
            bucket: bucket.to_owned(),
            credentials,
        }
    }

    fn object_url(&self, path: &Path) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.base,
            self.bucket,
            encode(path.as_ref())
        )
    }

    fn upload_url(&self) -> String {
        format!("{}/upload/storage/v1/b/{}/o", self.base, self.bucket)
    }

    /// A request with the bearer token, when there is one.
    async fn request(&self, method: reqwest::Method, url: &str) -> Result<reqwest::RequestBuilder> {
        let builder = self.http.request(method, url);
        match &self.credentials {
            None => Ok(builder),
            Some(provider) => {
                let token = provider.get_credential().await?;
                Ok(builder.bearer_auth(&token.bearer))
            }
        }
    }

    /// Send a request; a status that is not a success becomes object_store's error of that
    /// kind, its text keeping the status and the JSON body (the reason GCS gives).
    async fn send(
        &self,
        path: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response> {
        let response = request.send().await.map_err(|e| generic(path, &e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        let text = format!("Server returned non-2xx status code: {status}: {body}");
        let path = path.to_owned();
        let source = text.into();
        Err(match status.as_u16() {
            404 => object_store::Error::NotFound { path, source },
            412 => object_store::Error::Precondition { path, source },
            401 => object_store::Error::Unauthenticated { path, source },
            403 => object_store::Error::PermissionDenied { path, source },
            _ => object_store::Error::Generic {
                store: STORE,
                source,
            },
        })
    }

    async fn describe(&self, path: &Path) -> Result<ObjectMeta> {
        let request = self
            .request(reqwest::Method::GET, &self.object_url(path))
            .await?;
        let response = self.send(path.as_ref(), request).await?;
        let described: Described = response
            .json()
            .await
            .map_err(|e| generic(path.as_ref(), &e))?;
        meta(described)
    }

    /// Upload `body` as the object at `path` in one request: `multipart` (framed by
    /// `boundary`, the object's name in its metadata part) when a condition goes with it,
    /// else `media`.
    async fn upload(
        &self,
        path: &Path,
        body: reqwest::Body,
        condition: Option<(&str, &str)>,
    ) -> Result<PutResult> {
        let mut query = vec![("name", path.as_ref().to_owned())];
        let request = match condition {
            Some((generation, boundary)) => {
                query.push(("uploadType", "multipart".into()));
                query.push(("ifGenerationMatch", generation.to_owned()));
                self.request(reqwest::Method::POST, &self.upload_url())
                    .await?
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        format!("multipart/related; boundary={boundary}"),
                    )
            }
            None => {
                query.push(("uploadType", "media".into()));
                self.request(reqwest::Method::POST, &self.upload_url())
                    .await?
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            }
        };
        let response = self
            .send(path.as_ref(), request.query(&query).body(body))
            .await
            .map_err(no_bucket)?;
        let described: Described = response
            .json()
            .await
            .map_err(|e| generic(path.as_ref(), &e))?;
        Ok(PutResult {
            e_tag: described.etag,
            version: described.generation,
            extensions: Default::default(),
        })
    }

    /// One page of the listing under `prefix` (with `delimiter=/` when `folders`).
    async fn page(&self, prefix: &str, folders: bool, token: Option<&str>) -> Result<Page> {
        let url = format!("{}/storage/v1/b/{}/o", self.base, self.bucket);
        let mut query = vec![("prefix", prefix.to_owned())];
        if folders {
            query.push(("delimiter", "/".into()));
        }
        if let Some(token) = token {
            query.push(("pageToken", token.to_owned()));
        }
        let request = self
            .request(reqwest::Method::GET, &url)
            .await?
            .query(&query);
        let response = self.send(prefix, request).await.map_err(no_bucket)?;
        response.json().await.map_err(|e| generic(prefix, &e))
    }
}

/// A boundary for one multipart upload: drawn at random, so no object's bytes hold it.
fn boundary() -> String {
    let mut draw = [0u8; 16];
    let _ = getrandom::fill(&mut draw);
    format!("tributary-{:032x}", u128::from_le_bytes(draw))
}

/// The body of a `multipart` upload: the object's metadata, then its bytes.
fn multipart_body(boundary: &str, name: &str, bytes: Bytes) -> Bytes {
    let metadata = serde_json::json!({ "name": name }).to_string();
    let head = format!(
        "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{metadata}\r\n\
         --{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    let mut body = Vec::with_capacity(head.len() + bytes.len() + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.extend_from_slice(&bytes);
    body.extend_from_slice(tail.as_bytes());
    Bytes::from(body)
}

/// An object name as one path segment of a URL.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A 404 to a listing or an upload, which name no object that could be missing: the bucket
/// is, and the error says so as GCS itself does (`"reason": "notFound"`), also for an
/// emulator that answers with an empty body.
fn no_bucket(error: object_store::Error) -> object_store::Error {
    match error {
        object_store::Error::NotFound { path, source }
            if !source.to_string().contains("\"reason\"") =>
        {
            object_store::Error::NotFound {
                path,
                source: format!("{source} (the bucket does not exist: \"reason\": \"notFound\")")
                    .into(),
            }
        }
        other => other,
    }
}

fn generic(path: &str, error: &dyn std::error::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: format!("{path}: {}", crate::error_chain(error)).into(),
    }
}

fn meta(described: Described) -> Result<ObjectMeta> {
    let size = described
        .size
        .as_deref()
        .unwrap_or("0")
        .parse()
        .map_err(|e| generic(&described.name, &e))?;
    let last_modified = match described.updated.as_deref() {
        Some(at) => chrono::DateTime::parse_from_rfc3339(at)
            .map_err(|e| generic(&described.name, &e))?
            .to_utc(),
        None => chrono::DateTime::UNIX_EPOCH,
    };
    Ok(ObjectMeta {
        location: Path::from(described.name),
        last_modified,
        size,
        e_tag: described.etag,
        version: described.generation,
    })
}

/// The JSON listing's prefix for a path: `a/b/` for `a/b`, nothing for the root.
fn list_prefix(prefix: Option<&Path>) -> String {
    match prefix {
        Some(p) if !p.as_ref().is_empty() => format!("{}/", p.as_ref()),
        _ => String::new(),
    }
}

#[async_trait::async_trait]
impl ObjectStore for Gcs {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let bytes = Bytes::from(payload);
        match opts.mode {
            PutMode::Overwrite => self.upload(location, bytes.into(), None).await,
            PutMode::Create => {
                let boundary = boundary();
                let body = multipart_body(&boundary, location.as_ref(), bytes);
                match self
                    .upload(location, body.into(), Some(("0", &boundary)))
                    .await
                {
                    Err(object_store::Error::Precondition { path, source }) => {
                        Err(object_store::Error::AlreadyExists { path, source })
                    }
                    other => other,
                }
            }
            PutMode::Update(_) => Err(object_store::Error::NotImplemented {
                operation: "put with PutMode::Update".into(),
                implementer: STORE.into(),
            }),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        Ok(Box::new(Gathered {
            store: self.clone(),
            location: location.clone(),
            parts: Vec::new(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let meta = self.describe(location).await?;
        let range = match &options.range {
            Some(range) => range
                .as_range(meta.size)
                .map_err(|e| generic(location.as_ref(), &e))?,
            None => 0..meta.size,
        };
        let payload = if options.head || range.is_empty() {
            futures::stream::empty().boxed()
        } else {
            let request = self
                .request(reqwest::Method::GET, &self.object_url(location))
                .await?
                .query(&[("alt", "media")])
                .header(
                    reqwest::header::RANGE,
                    format!("bytes={}-{}", range.start, range.end - 1),
                );
            let response = self.send(location.as_ref(), request).await?;
            let path = location.to_string();
            let bytes = response.bytes().await.map_err(|e| generic(&path, &e))?;
            futures::stream::once(async move { Ok(bytes) }).boxed()
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta,
            range,
            attributes: Attributes::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let store = self.clone();
        locations
            .then(move |location| {
                let store = store.clone();
                async move {
                    let location = location?;
                    let request = store
                        .request(reqwest::Method::DELETE, &store.object_url(&location))
                        .await?;
                    store.send(location.as_ref(), request).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let store = self.clone();
        let prefix = list_prefix(prefix);
        futures::stream::try_unfold(Some(None::<String>), move |token| {
            let (store, prefix) = (store.clone(), prefix.clone());
            async move {
                let Some(token) = token else {
                    return Ok::<_, object_store::Error>(None);
                };
                let page = store.page(&prefix, false, token.as_deref()).await?;
                let items: Vec<Result<ObjectMeta>> = page.items.into_iter().map(meta).collect();
                Ok(Some((futures::stream::iter(items), page.next.map(Some))))
            }
        })
        .try_flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let prefix = list_prefix(prefix);
        let (mut common_prefixes, mut objects, mut token) = (Vec::new(), Vec::new(), None);
        loop {
            let page = self.page(&prefix, true, token.as_deref()).await?;
            common_prefixes.extend(
                page.prefixes
                    .iter()
                    .map(|p| Path::from(p.trim_end_matches('/'))),
            );
            for item in page.items {
                objects.push(meta(item)?);
            }
            match page.next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        Ok(ListResult {
            common_prefixes,
            objects,
            extensions: Default::default(),
        })
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let url = format!(
            "{}/storage/v1/b/{bucket}/o/{}/rewriteTo/b/{bucket}/o/{}",
            self.base,
            encode(from.as_ref()),
            encode(to.as_ref()),
            bucket = self.bucket
        );
        let mut request = self.request(reqwest::Method::POST, &url).await?;
        if matches!(options.mode, CopyMode::Create) {
            request = request.query(&[("ifGenerationMatch", "0")]);
        }
        match self.send(to.as_ref(), request).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::Precondition { path, source }) => {
                Err(object_store::Error::AlreadyExists { path, source })
            }
            Err(e) => Err(e),
        }
    }
}

/// An upload in parts, sent whole at its completion (without a condition: its name is one no
/// other writer produces).
#[derive(Debug)]
struct Gathered {
    store: Gcs,
    location: Path,
    parts: Vec<PutPayload>,
}

#[async_trait::async_trait]
impl MultipartUpload for Gathered {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.parts.push(data);
        Box::pin(async { Ok(()) })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let chunks: Vec<Bytes> = std::mem::take(&mut self.parts)
            .into_iter()
            .flat_map(|part| part.into_iter().collect::<Vec<_>>())
            .collect();
        let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        self.store
            .upload(&self.location, reqwest::Body::wrap_stream(stream), None)
            .await
    }

    async fn abort(&mut self) -> Result<()> {
        self.parts.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_url_segment() {
        assert_eq!(encode("a/b c.json"), "a%2Fb%20c.json");
        assert_eq!(
            encode("public.t1/part-1.parquet"),
            "public.t1%2Fpart-1.parquet"
        );
    }

    #[test]
    fn a_multipart_body_names_the_object_then_holds_its_bytes() {
        let boundary = boundary();
        assert_ne!(boundary, super::boundary(), "each upload draws its own");
        let body = multipart_body(
            &boundary,
            "_tributary/log/1.json",
            Bytes::from_static(b"{}"),
        );
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("{\"name\":\"_tributary/log/1.json\"}"));
        assert!(text.ends_with(&format!("\r\n\r\n{{}}\r\n--{boundary}--\r\n")));
    }

    #[test]
    fn listing_prefixes_end_in_a_slash_except_the_root() {
        assert_eq!(list_prefix(None), "");
        assert_eq!(
            list_prefix(Some(&Path::from("_tributary/log"))),
            "_tributary/log/"
        );
    }
}
