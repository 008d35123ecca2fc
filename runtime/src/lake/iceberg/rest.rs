//! An Iceberg REST catalog client (`catalog = "http(s)://…"`): the config endpoint, namespaces,
//! and table create, load and commit with requirements, as the REST spec defines them.
//!
//! [`RestCatalog::connect`] first gets a token when the catalog is given OAuth2 client
//! credentials (`POST {uri}/v1/oauth/tokens`, or the `oauth2-server-uri` given), then reads the
//! config endpoint: the server's `defaults`, the client's own properties and the server's
//! `overrides`, in that order, decide the `prefix` every later path carries. A `warehouse`
//! given is sent to the config endpoint, which may answer with a prefix for it.
//!
//! The token is renewed before it expires (at nine tenths of its `expires_in`), and once more
//! when the server answers 401: a server that refuses the fresh token too has refused the
//! credentials ([`CatalogError::CredentialsRefused`]). A static bearer token is sent as it is.
//!
//! A commit answered 409 lost a race ([`CatalogError::LostRace`]); one answered 5xx, or whose
//! answer was lost after the request went out, may or may not have been applied
//! ([`CatalogError::CommitStateUnknown`]).
//!
//! Not supported yet: vended storage credentials (a loaded table's `config` with `s3.*` keys
//! and the like, or `storage-credentials`): the sink writes with its own credentials, and a
//! server that offers some is told so in one warning. Nor is AWS SigV4 request signing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;

use super::catalog::{CatalogError, Requirement, Secret, TableIdent, Update, dotted};

/// The OAuth2 scope asked for when none is given (Apache Polaris's "all my roles").
pub const DEFAULT_SCOPE: &str = "PRINCIPAL_ROLE:ALL";

const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Separates the levels of a namespace in a URL path (the spec's unit separator).
const NAMESPACE_SEPARATOR: char = '\u{1f}';

/// How a REST catalog is reached.
#[derive(Debug, Clone)]
pub struct RestOptions {
    /// The catalog's base URL, without `/v1`.
    pub uri: String,
    /// The warehouse to ask the config endpoint for, if the server serves several.
    pub warehouse: Option<String>,
    pub auth: RestAuth,
}

/// How the client proves who it is.
#[derive(Debug, Clone)]
pub enum RestAuth {
    None,
    /// A bearer token sent with every request.
    Token(Secret),
    /// OAuth2 client credentials exchanged for a bearer token.
    ClientCredentials {
        client_id: String,
        client_secret: Secret,
        /// [`DEFAULT_SCOPE`] unless the sink says otherwise.
        scope: String,
        /// Where to ask for tokens (`oauth2-server-uri`); `{uri}/v1/oauth/tokens` when `None`.
        server_uri: Option<String>,
    },
}

/// A table as the catalog answered for it: where its current metadata file is, that file's
/// content, and the catalog's configuration for reading and writing it.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub metadata_location: String,
    pub metadata: serde_json::Value,
    pub config: BTreeMap<String, String>,
}

/// A table to create: the schema and, optionally, where it lives, how it is partitioned and
/// sorted, and its properties (partition spec and sort order as the metadata file spells them).
#[derive(Debug, Clone, Default)]
pub struct NewTable {
    pub schema: serde_json::Value,
    pub location: Option<String>,
    pub partition_spec: Option<serde_json::Value>,
    pub write_order: Option<serde_json::Value>,
    pub properties: BTreeMap<String, String>,
}

/// A connected REST catalog. Cheap to share behind an `Arc`; requests may run concurrently.
pub struct RestCatalog {
    http: reqwest::Client,
    /// The base URL without credentials or a trailing `/`: it names the catalog in errors.
    base: Url,
    prefix: Option<String>,
    auth: RestAuth,
    token: tokio::sync::Mutex<Option<Bearer>>,
    warned_vended: AtomicBool,
}

impl std::fmt::Debug for RestCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestCatalog")
            .field("base", &self.base.as_str())
            .field("prefix", &self.prefix)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

struct Bearer {
    token: Secret,
    renew_at: Option<Instant>,
}

/// What a request does, for the error that names it and for how its refusal is read.
#[derive(Debug, Clone, Copy)]
enum Op<'a> {
    Config,
    Token,
    NamespaceExists(&'a [String]),
    CreateNamespace(&'a [String]),
    TableExists(&'a TableIdent),
    CreateTable(&'a TableIdent),
    LoadTable(&'a TableIdent),
    Commit(&'a TableIdent),
    ListTables(&'a [String]),
}

impl Op<'_> {
    fn what(&self) -> String {
        match self {
            Op::Config => "reading the config endpoint".into(),
            Op::Token => "getting an OAuth2 token".into(),
            Op::NamespaceExists(ns) => format!("looking up namespace {}", dotted(ns)),
            Op::CreateNamespace(ns) => format!("creating namespace {}", dotted(ns)),
            Op::TableExists(table) => format!("looking up table {table}"),
            Op::CreateTable(table) => format!("creating table {table}"),
            Op::LoadTable(table) => format!("loading table {table}"),
            Op::Commit(table) => format!("committing to table {table}"),
            Op::ListTables(ns) => format!("listing the tables of namespace {}", dotted(ns)),
        }
    }

    fn table(&self) -> Option<&TableIdent> {
        match self {
            Op::TableExists(table)
            | Op::CreateTable(table)
            | Op::LoadTable(table)
            | Op::Commit(table) => Some(table),
            _ => None,
        }
    }
}

/// An answer: its status and body.
struct Answer {
    status: StatusCode,
    body: bytes::Bytes,
}

impl RestCatalog {
    /// Reaches the catalog: a token first (with client credentials), then the config endpoint.
    pub async fn connect(options: RestOptions) -> Result<RestCatalog, CatalogError> {
        let base = parse_base(&options.uri)?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|error| CatalogError::Failed {
                catalog: base.to_string(),
                what: "building the HTTP client".into(),
                message: crate::error_chain(&error),
            })?;
        let mut catalog = RestCatalog {
            http,
            base,
            prefix: None,
            auth: options.auth,
            token: tokio::sync::Mutex::new(None),
            warned_vended: AtomicBool::new(false),
        };
        let mut url = catalog.url(&["v1", "config"]);
        if let Some(warehouse) = &options.warehouse {
            url.query_pairs_mut().append_pair("warehouse", warehouse);
        }
        let answer = catalog.send(Op::Config, Method::GET, url, None).await?;
        let config: ConfigAnswer = catalog.parse(Op::Config, &answer)?;
        let mut merged = config.defaults;
        if let Some(warehouse) = options.warehouse {
            merged.insert("warehouse".into(), warehouse);
        }
        merged.extend(config.overrides);
        catalog.prefix = merged.remove("prefix").filter(|prefix| !prefix.is_empty());
        Ok(catalog)
    }

    /// The catalog's URL, as errors name it.
    pub fn name(&self) -> String {
        self.base.to_string()
    }

    pub async fn namespace_exists(&self, namespace: &[String]) -> Result<bool, CatalogError> {
        let op = Op::NamespaceExists(namespace);
        let url = self.namespace_url(namespace, &[]);
        self.exists(op, url).await
    }

    /// Creates a namespace with `properties`; [`CatalogError::AlreadyExists`] when it exists.
    pub async fn create_namespace(
        &self,
        namespace: &[String],
        properties: &BTreeMap<String, String>,
    ) -> Result<(), CatalogError> {
        let op = Op::CreateNamespace(namespace);
        let body = serde_json::json!({ "namespace": namespace, "properties": properties });
        let url = self.catalog_url(&["namespaces"]);
        let answer = self.send(op, Method::POST, url, Some(body)).await?;
        self.expect_success(op, &answer)
    }

    pub async fn table_exists(&self, table: &TableIdent) -> Result<bool, CatalogError> {
        let op = Op::TableExists(table);
        self.exists(op, self.table_url(table)).await
    }

    /// Creates a table: the server writes its first metadata file and answers with it.
    pub async fn create_table(
        &self,
        table: &TableIdent,
        new: &NewTable,
    ) -> Result<LoadedTable, CatalogError> {
        let op = Op::CreateTable(table);
        let mut body = serde_json::json!({
            "name": table.name,
            "schema": new.schema,
            "properties": new.properties,
        });
        for (key, value) in [
            (
                "location",
                new.location.clone().map(serde_json::Value::from),
            ),
            ("partition-spec", new.partition_spec.clone()),
            ("write-order", new.write_order.clone()),
        ] {
            if let Some(value) = value {
                body[key] = value;
            }
        }
        let url = self.namespace_url(&table.namespace, &["tables"]);
        let answer = self.send(op, Method::POST, url, Some(body)).await?;
        self.loaded(op, &answer)
    }

    /// The names of the tables in `namespace`, every page of them; none when the namespace
    /// does not exist.
    pub async fn list_tables(&self, namespace: &[String]) -> Result<Vec<String>, CatalogError> {
        let op = Op::ListTables(namespace);
        let mut names = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let mut url = self.namespace_url(namespace, &["tables"]);
            if let Some(token) = &page {
                url.query_pairs_mut().append_pair("pageToken", token);
            }
            let answer = self.send(op, Method::GET, url, None).await?;
            if answer.status == StatusCode::NOT_FOUND {
                return Ok(names);
            }
            let listed: ListAnswer = self.parse(op, &answer)?;
            names.extend(listed.identifiers.into_iter().map(|i| i.name));
            match listed.next_page_token {
                Some(token) if !token.is_empty() => page = Some(token),
                _ => return Ok(names),
            }
        }
    }

    pub async fn load_table(&self, table: &TableIdent) -> Result<LoadedTable, CatalogError> {
        let op = Op::LoadTable(table);
        let answer = self
            .send(op, Method::GET, self.table_url(table), None)
            .await?;
        self.loaded(op, &answer)
    }

    /// Commits `updates` if `requirements` still hold. The answer is the table's new metadata
    /// (its `config` is empty: a commit's answer has none).
    pub async fn commit(
        &self,
        table: &TableIdent,
        requirements: &[Requirement],
        updates: &[Update],
    ) -> Result<LoadedTable, CatalogError> {
        let op = Op::Commit(table);
        let body = serde_json::json!({
            "identifier": { "namespace": table.namespace, "name": table.name },
            "requirements": requirements,
            "updates": updates,
        });
        let answer = self
            .send(op, Method::POST, self.table_url(table), Some(body))
            .await?;
        self.loaded(op, &answer)
    }

    async fn exists(&self, op: Op<'_>, url: Url) -> Result<bool, CatalogError> {
        let answer = self.send(op, Method::HEAD, url, None).await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(false),
            status if status.is_success() => Ok(true),
            _ => Err(refusal(&self.name(), op, answer.status, &answer.body)),
        }
    }

    fn expect_success(&self, op: Op<'_>, answer: &Answer) -> Result<(), CatalogError> {
        if answer.status.is_success() {
            Ok(())
        } else {
            Err(refusal(&self.name(), op, answer.status, &answer.body))
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        op: Op<'_>,
        answer: &Answer,
    ) -> Result<T, CatalogError> {
        self.expect_success(op, answer)?;
        serde_json::from_slice(&answer.body).map_err(|error| CatalogError::Failed {
            catalog: self.name(),
            what: op.what(),
            message: format!("the answer is not what the REST spec says: {error}"),
        })
    }

    /// A table answer (create, load or commit): `metadata-location`, `metadata`, `config`.
    fn loaded(&self, op: Op<'_>, answer: &Answer) -> Result<LoadedTable, CatalogError> {
        let table: TableAnswer = self.parse(op, answer)?;
        let Some(metadata_location) = table.metadata_location else {
            return Err(CatalogError::Failed {
                catalog: self.name(),
                what: op.what(),
                message: "the answer has no metadata-location".into(),
            });
        };
        self.warn_vended(op, &table.config, table.storage_credentials.len());
        Ok(LoadedTable {
            metadata_location,
            metadata: table.metadata,
            config: table.config,
        })
    }

    /// Says once per catalog that the storage credentials it offers go unused.
    fn warn_vended(&self, op: Op<'_>, config: &BTreeMap<String, String>, credentials: usize) {
        let keys: Vec<&str> = config
            .keys()
            .map(String::as_str)
            .filter(|key| is_storage_key(key))
            .collect();
        if (keys.is_empty() && credentials == 0) || self.warned_vended.swap(true, Ordering::Relaxed)
        {
            return;
        }
        tracing::warn!(
            catalog = %self.name(),
            table = %op.table().map(ToString::to_string).unwrap_or_default(),
            offered = ?keys,
            storage_credentials = credentials,
            "the catalog offers vended storage credentials, which tributary does not support yet; \
             it writes the table's files with the sink's own storage credentials"
        );
    }

    /// Sends a request with the bearer token, renewing the token once if the server answers
    /// 401 to one the client got from client credentials.
    async fn send(
        &self,
        op: Op<'_>,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
    ) -> Result<Answer, CatalogError> {
        let mut renewed = false;
        loop {
            let mut request = self.http.request(method.clone(), url.clone());
            if let Some(token) = self.bearer(op, renewed).await? {
                request = request.bearer_auth(token.expose());
            }
            if let Some(body) = &body {
                request = request.json(body);
            }
            let answer = self.exchange(op, request).await?;
            let may_renew = matches!(self.auth, RestAuth::ClientCredentials { .. });
            if answer.status == StatusCode::UNAUTHORIZED && may_renew && !renewed {
                renewed = true;
                continue;
            }
            return Ok(answer);
        }
    }

    async fn exchange(
        &self,
        op: Op<'_>,
        request: reqwest::RequestBuilder,
    ) -> Result<Answer, CatalogError> {
        let lost = |error: reqwest::Error| self.lost(op, error);
        super::catalog::count_request();
        let response = request.send().await.map_err(lost)?;
        let status = response.status();
        let body = response.bytes().await.map_err(lost)?;
        Ok(Answer { status, body })
    }

    /// A request that got no answer. A commit that may have reached the server has an
    /// unknown outcome; one that never connected was not applied.
    fn lost(&self, op: Op<'_>, error: reqwest::Error) -> CatalogError {
        let message = crate::error_chain(&error);
        match op {
            Op::Commit(table) if !error.is_connect() => CatalogError::CommitStateUnknown {
                catalog: self.name(),
                table: table.to_string(),
                message,
            },
            _ => CatalogError::Failed {
                catalog: self.name(),
                what: op.what(),
                message,
            },
        }
    }

    /// The token to send, if any: renewed when it is due, or when `stale` (the server just
    /// refused it).
    async fn bearer(&self, op: Op<'_>, stale: bool) -> Result<Option<Secret>, CatalogError> {
        let (client_id, client_secret, scope, server_uri) = match &self.auth {
            RestAuth::None => return Ok(None),
            RestAuth::Token(token) => return Ok(Some(token.clone())),
            RestAuth::ClientCredentials {
                client_id,
                client_secret,
                scope,
                server_uri,
            } => (client_id, client_secret, scope, server_uri),
        };
        let mut held = self.token.lock().await;
        if let Some(bearer) = held.as_ref()
            && !stale
            && bearer.renew_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(Some(bearer.token.clone()));
        }
        let url = match server_uri {
            Some(uri) => Url::parse(uri).map_err(|error| CatalogError::Failed {
                catalog: self.name(),
                what: op.what(),
                message: format!("oauth2-server-uri {uri} is not a URL: {error}"),
            })?,
            None => self.url(&["v1", "oauth", "tokens"]),
        };
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", client_id.as_str()),
            ("client_secret", client_secret.expose()),
            ("scope", scope.as_str()),
        ];
        let request = self.http.post(url).form(&form);
        let answer = self.exchange(Op::Token, request).await?;
        let granted: TokenAnswer = self.parse(Op::Token, &answer)?;
        let renew_at = granted
            .expires_in
            .map(|seconds| Instant::now() + Duration::from_secs(seconds).mul_f64(0.9));
        let token = Secret::new(granted.access_token);
        *held = Some(Bearer {
            token: token.clone(),
            renew_at,
        });
        Ok(Some(token))
    }

    /// `{base}/{segments…}`, each segment escaped.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("parse_base keeps only URLs that have a path")
            .pop_if_empty()
            .extend(segments);
        url
    }

    /// `{base}/v1/{prefix}/{segments…}`.
    fn catalog_url(&self, segments: &[&str]) -> Url {
        let mut all = vec!["v1"];
        all.extend(self.prefix.as_deref());
        all.extend(segments);
        self.url(&all)
    }

    fn namespace_url(&self, namespace: &[String], rest: &[&str]) -> Url {
        let joined = namespace.join(&NAMESPACE_SEPARATOR.to_string());
        let mut segments = vec!["namespaces", joined.as_str()];
        segments.extend(rest);
        self.catalog_url(&segments)
    }

    fn table_url(&self, table: &TableIdent) -> Url {
        self.namespace_url(&table.namespace, &["tables", &table.name])
    }
}

/// The catalog's base URL, without credentials a person may have written into it.
fn parse_base(uri: &str) -> Result<Url, CatalogError> {
    let failed = |message: String| CatalogError::Failed {
        catalog: uri.split('@').next_back().unwrap_or(uri).to_owned(),
        what: "reading the catalog URL".into(),
        message,
    };
    let mut url = Url::parse(uri).map_err(|error| failed(format!("not a URL: {error}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(failed(
            "a REST catalog URL starts with http:// or https://".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(failed(
            "the URL holds credentials; give the token or the client secret as the sink's catalog secret instead".into(),
        ));
    }
    url.set_query(None);
    url.set_fragment(None);
    let trimmed = url.path().trim_end_matches('/').to_owned();
    url.set_path(&trimmed);
    Ok(url)
}

/// Whether a table config key carries storage credentials or storage settings the server
/// vends (`s3.access-key-id`, `gcs.oauth2.token`, `adls.sas-token.*`, ...).
fn is_storage_key(key: &str) -> bool {
    ["s3.", "gcs.", "adls.", "client."]
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

/// The error a refused request means, read from its status and the spec's error body.
fn refusal(catalog: &str, op: Op<'_>, status: StatusCode, body: &[u8]) -> CatalogError {
    let (kind, message) = error_body(status, body);
    let catalog = catalog.to_owned();
    match (op, status.as_u16()) {
        (_, 401 | 403) | (Op::Token, 400) => CatalogError::CredentialsRefused {
            catalog,
            message: format!("HTTP {status}: {message}"),
        },
        (Op::Commit(table), 409) => CatalogError::LostRace {
            catalog,
            table: table.to_string(),
            message,
        },
        (Op::Commit(table), 500..=599) => CatalogError::CommitStateUnknown {
            catalog,
            table: table.to_string(),
            message: format!("HTTP {status}: {kind}: {message}"),
        },
        (Op::CreateTable(table), 409) => CatalogError::AlreadyExists {
            catalog,
            what: format!("table {table}"),
        },
        (Op::CreateNamespace(namespace), 409) => CatalogError::AlreadyExists {
            catalog,
            what: format!("namespace {}", dotted(namespace)),
        },
        (_, 404) if kind == "NoSuchNamespaceException" => CatalogError::NoSuchNamespace {
            catalog,
            namespace: op
                .table()
                .map(|table| dotted(&table.namespace))
                .unwrap_or(message),
        },
        (_, 404) if kind == "NoSuchTableException" && op.table().is_some() => {
            CatalogError::NoSuchTable {
                catalog,
                table: op.table().map(ToString::to_string).unwrap_or_default(),
            }
        }
        _ => CatalogError::Failed {
            catalog,
            what: op.what(),
            message: format!("HTTP {status}: {kind}: {message}"),
        },
    }
}

/// The type and message of an error answer: the REST spec's `{"error": {"type", "message"}}`,
/// OAuth2's `{"error", "error_description"}`, or whatever text came.
fn error_body(status: StatusCode, body: &[u8]) -> (String, String) {
    #[derive(Deserialize)]
    struct Rest {
        error: RestError,
    }
    #[derive(Deserialize)]
    struct RestError {
        #[serde(default)]
        r#type: String,
        #[serde(default)]
        message: String,
    }
    #[derive(Deserialize)]
    struct OAuth {
        error: String,
        #[serde(default)]
        error_description: String,
    }
    if let Ok(rest) = serde_json::from_slice::<Rest>(body) {
        return (rest.error.r#type, rest.error.message);
    }
    if let Ok(oauth) = serde_json::from_slice::<OAuth>(body) {
        return (oauth.error, oauth.error_description);
    }
    let text = String::from_utf8_lossy(body);
    let text: String = text.trim().chars().take(300).collect();
    let reason = status.canonical_reason().unwrap_or("error").to_owned();
    (
        reason,
        if text.is_empty() {
            "(no body)".into()
        } else {
            text
        },
    )
}

#[derive(Deserialize)]
struct ConfigAnswer {
    #[serde(default)]
    defaults: BTreeMap<String, String>,
    #[serde(default)]
    overrides: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ListAnswer {
    #[serde(default)]
    identifiers: Vec<ListedTable>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct ListedTable {
    name: String,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct TableAnswer {
    #[serde(default)]
    metadata_location: Option<String>,
    metadata: serde_json::Value,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    storage_credentials: Vec<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "error": {"type": kind, "message": message, "code": 0}
        }))
        .unwrap()
    }

    #[test]
    fn a_refused_commit_is_a_lost_race_and_a_failed_one_an_unknown_state() {
        let table = TableIdent::new(&["shop"], "orders");
        let conflict = refusal(
            "http://cat",
            Op::Commit(&table),
            StatusCode::CONFLICT,
            &body("CommitFailedException", "schema changed"),
        );
        assert!(conflict.is_lost_race(), "{conflict}");
        assert!(conflict.to_string().contains("shop.orders"), "{conflict}");
        for status in [500, 502, 503, 504] {
            let status = StatusCode::from_u16(status).unwrap();
            let unknown = refusal(
                "http://cat",
                Op::Commit(&table),
                status,
                &body("CommitStateUnknownException", "lost the database"),
            );
            assert!(
                matches!(unknown, CatalogError::CommitStateUnknown { .. }),
                "{unknown}"
            );
        }
        let load = refusal(
            "http://cat",
            Op::LoadTable(&table),
            StatusCode::INTERNAL_SERVER_ERROR,
            &body("InternalServerError", "boom"),
        );
        assert!(matches!(load, CatalogError::Failed { .. }), "{load}");
    }

    #[test]
    fn refusals_name_what_is_missing_or_refused() {
        let table = TableIdent::new(&["shop"], "orders");
        let missing = refusal(
            "http://cat",
            Op::LoadTable(&table),
            StatusCode::NOT_FOUND,
            &body("NoSuchTableException", "no"),
        );
        assert!(
            matches!(missing, CatalogError::NoSuchTable { ref table, .. } if table == "shop.orders")
        );
        let no_namespace = refusal(
            "http://cat",
            Op::CreateTable(&table),
            StatusCode::NOT_FOUND,
            &body("NoSuchNamespaceException", "no"),
        );
        assert!(
            matches!(no_namespace, CatalogError::NoSuchNamespace { ref namespace, .. } if namespace == "shop")
        );
        let taken = refusal(
            "http://cat",
            Op::CreateTable(&table),
            StatusCode::CONFLICT,
            &body("AlreadyExistsException", "exists"),
        );
        assert!(matches!(taken, CatalogError::AlreadyExists { .. }));
        let oauth = serde_json::to_vec(&serde_json::json!({
            "error": "invalid_client", "error_description": "wrong secret"
        }))
        .unwrap();
        let refused = refusal("http://cat", Op::Token, StatusCode::UNAUTHORIZED, &oauth);
        let text = refused.to_string();
        assert!(
            text.contains("refused the credentials") && text.contains("wrong secret"),
            "{text}"
        );
    }

    #[test]
    fn an_error_without_the_spec_body_keeps_its_text() {
        let (kind, message) = error_body(StatusCode::BAD_GATEWAY, b"upstream down\n");
        assert_eq!(
            (kind.as_str(), message.as_str()),
            ("Bad Gateway", "upstream down")
        );
    }

    #[test]
    fn catalog_urls_keep_no_credentials_and_no_trailing_slash() {
        assert_eq!(
            parse_base("http://127.0.0.1:8181/api/catalog/")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8181/api/catalog"
        );
        let error = parse_base("https://user:pw@cat.example/").unwrap_err();
        let text = error.to_string();
        assert!(!text.contains("pw"), "{text}");
        assert!(text.contains("holds credentials"), "{text}");
        assert!(parse_base("postgresql://db/cat").is_err());
    }

    #[tokio::test]
    async fn paths_carry_the_prefix_and_escape_namespaces() {
        let catalog = RestCatalog {
            http: reqwest::Client::new(),
            base: parse_base("http://127.0.0.1:1/api").unwrap(),
            prefix: Some("wh 1".into()),
            auth: RestAuth::Token(Secret::new("t0ken")),
            token: tokio::sync::Mutex::new(None),
            warned_vended: AtomicBool::new(false),
        };
        let table = TableIdent::new(&["shop", "eu/west"], "order lines");
        assert_eq!(
            catalog.table_url(&table).as_str(),
            "http://127.0.0.1:1/api/v1/wh%201/namespaces/shop%1Feu%2Fwest/tables/order%20lines"
        );
        assert!(!format!("{catalog:?}").contains("t0ken"));
    }

    #[test]
    fn storage_settings_are_told_from_the_rest() {
        assert!(is_storage_key("s3.access-key-id"));
        assert!(is_storage_key("adls.sas-token.account"));
        assert!(!is_storage_key("write.format.default"));
    }
}
