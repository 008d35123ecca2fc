//! The object stores a sink URL can name, and what differs between them: how each is built
//! from its URL, its environment and `sink.options`, and the words of its refusals (a missing
//! bucket or container, credentials refused, access denied) with the settings that fix them.
//!
//! - `s3://bucket/prefix` (`s3a://` too): the `AWS_*` variables, overridden by `aws_*` options.
//! - `az://container/prefix`, `abfss://container@account.dfs.core.windows.net/prefix`
//!   (`abfs://` too): the `AZURE_*` variables (account and key, a SAS token, a service
//!   principal, workload identity as AKS injects it, or the VM's managed identity), overridden
//!   by `azure_*` options.
//! - `gs://bucket/prefix`: a service-account file (`GOOGLE_APPLICATION_CREDENTIALS`),
//!   application default credentials, or the metadata server (GKE's workload identity),
//!   overridden by `google_*` options; through the JSON API ([`super::gcs`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};

use super::SinkError;

/// Which store a sink is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    S3,
    Azure,
    Gcs,
    Local,
    Memory,
}

impl Cloud {
    /// The store a URL scheme names.
    pub fn of_scheme(scheme: &str) -> Option<Cloud> {
        match scheme {
            "s3" | "s3a" => Some(Cloud::S3),
            "az" | "abfs" | "abfss" => Some(Cloud::Azure),
            "gs" => Some(Cloud::Gcs),
            "file" => Some(Cloud::Local),
            "memory" => Some(Cloud::Memory),
            _ => None,
        }
    }

    /// The store's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Cloud::S3 => "S3",
            Cloud::Azure => "Azure Blob Storage",
            Cloud::Gcs => "Google Cloud Storage",
            Cloud::Local => "the local file system",
            Cloud::Memory => "memory",
        }
    }

    /// What the URL's first part names.
    fn holder(self) -> &'static str {
        match self {
            Cloud::Azure => "container",
            _ => "bucket",
        }
    }

    /// The error codes of a missing bucket or container.
    fn missing(self) -> &'static [&'static str] {
        match self {
            Cloud::S3 => &["NoSuchBucket"],
            Cloud::Azure => &["ContainerNotFound"],
            // A listing or an upload finds no bucket (fake-gcs-server says "Not Found").
            Cloud::Gcs => &["notFound", "Not Found"],
            _ => &[],
        }
    }

    /// The error codes of credentials the store does not accept.
    fn bad_credentials(self) -> &'static [&'static str] {
        match self {
            Cloud::S3 => &[
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "ExpiredToken",
                "InvalidToken",
            ],
            Cloud::Azure => &["AuthenticationFailed", "InvalidAuthenticationInfo"],
            Cloud::Gcs => &["authError", "required"],
            _ => &[],
        }
    }

    /// The error codes of credentials accepted but not allowed.
    fn denied(self) -> &'static [&'static str] {
        match self {
            Cloud::S3 => &["AccessDenied", "AllAccessDisabled", "AccountProblem"],
            Cloud::Azure => &[
                "AuthorizationFailure",
                "AuthorizationPermissionMismatch",
                "AuthorizationResourceTypeMismatch",
                "InsufficientAccountPermissions",
            ],
            Cloud::Gcs => &["forbidden"],
            _ => &[],
        }
    }

    /// Where the credentials are set.
    pub(super) fn credentials_hint(self) -> &'static str {
        match self {
            Cloud::S3 => {
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the sink.options keys)"
            }
            Cloud::Azure => {
                "check AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or \
                 AZURE_STORAGE_SAS_TOKEN (or sink.options azure_storage_account_key, \
                 azure_storage_sas_key), or the identity's AZURE_CLIENT_ID and AZURE_TENANT_ID"
            }
            Cloud::Gcs => {
                "check GOOGLE_APPLICATION_CREDENTIALS (a service-account JSON file) or \
                 sink.options google_service_account_path / google_service_account_key, or the \
                 workload identity's service account"
            }
            _ => "check the sink's credentials",
        }
    }

    fn denied_hint(self) -> &'static str {
        match self {
            Cloud::S3 => {
                "give these credentials s3:GetObject, s3:PutObject, s3:DeleteObject and \
                 s3:ListBucket on the sink prefix"
            }
            // Azure answers AuthorizationFailure to a key or SAS it cannot match as well as to
            // an identity without the role (Azurite to a wrong key), so both are named.
            Cloud::Azure => {
                "check the account key or SAS token (AZURE_STORAGE_ACCOUNT_KEY, \
                 AZURE_STORAGE_SAS_TOKEN, or the sink.options keys), and give the identity the \
                 Storage Blob Data Contributor role on the container (a SAS token: read, add, \
                 create, write, delete and list)"
            }
            Cloud::Gcs => {
                "give the service account roles/storage.objectUser on the bucket (read, create, \
                 delete and list objects)"
            }
            _ => "give these credentials read, write, delete and list rights on the sink",
        }
    }

    /// What is said when none of the ways to credentials gave any and the store fell back to
    /// the instance's metadata endpoint, which answered nothing.
    pub(super) fn no_credentials(self) -> (&'static str, &'static str) {
        match self {
            Cloud::Azure => (
                "no Azure credentials: none were configured and the managed identity endpoint \
                 gave none",
                "set AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN (or sink.options \
                 azure_storage_account_key or azure_storage_sas_key), or run with a workload or \
                 managed identity",
            ),
            Cloud::Gcs => (
                "no Google Cloud credentials: none were configured and the metadata server gave \
                 none",
                "set GOOGLE_APPLICATION_CREDENTIALS to a service-account JSON file (or \
                 sink.options google_service_account_path), or run with a workload identity",
            ),
            _ => (
                "no S3 credentials: none were configured and the instance metadata service gave \
                 none",
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or sink.options \
                 aws_access_key_id and aws_secret_access_key)",
            ),
        }
    }

    /// The setting that says where the store listens.
    pub(super) fn endpoint_setting(self) -> &'static str {
        match self {
            Cloud::Azure => {
                "sink.options azure_storage_endpoint (or the variable AZURE_STORAGE_ENDPOINT)"
            }
            Cloud::Gcs => "sink.options google_base_url (or the variable GOOGLE_BASE_URL)",
            _ => "sink.options aws_endpoint (or the variable AWS_ENDPOINT or AWS_ENDPOINT_URL)",
        }
    }

    /// The refusal a store's error code names, if it is one of this store's.
    pub(super) fn refusal(self, url: &str, code: &str) -> Option<(String, &'static str)> {
        if self.missing().contains(&code) {
            let holder = self.holder();
            return Some((
                format!("the {holder} {:?} does not exist", holder_of(url)),
                "create it, or fix sink.url",
            ));
        }
        if self.bad_credentials().contains(&code) {
            return Some((
                format!("the {} credentials were refused ({code})", self.name()),
                self.credentials_hint(),
            ));
        }
        if self.denied().contains(&code) {
            return Some((format!("access denied ({code})"), self.denied_hint()));
        }
        None
    }
}

/// The bucket or container a URL names (`abfss://container@account...` too).
fn holder_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let first = rest.split('/').next().unwrap_or(rest);
    first.split('@').next().unwrap_or(first)
}

/// Short request-level retries; the pipeline retries whole steps with its own backoff for as
/// long as an outage lasts.
fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: Duration::from_secs(30),
    }
}

/// The store of a cloud URL (`scheme://rest`), rooted at its prefix.
pub(super) fn open(
    cloud: Cloud,
    url: &str,
    scheme: &str,
    rest: &str,
    options: &BTreeMap<String, String>,
) -> Result<Arc<dyn ObjectStore>, SinkError> {
    let (holder, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if holder.is_empty() || holder.starts_with('@') {
        return Err(SinkError::Url {
            url: url.to_owned(),
            reason: format!("no {} name", cloud.holder()),
        });
    }
    let built = match cloud {
        Cloud::Azure => azure(url, &format!("{scheme}://{holder}"), options)?,
        Cloud::Gcs => gcs(url, holder, options)?,
        _ => s3(url, holder, options)?,
    };
    let prefix = prefix.trim_matches('/');
    Ok(if prefix.is_empty() {
        built
    } else {
        Arc::new(PrefixStore::new(built, prefix))
    })
}

fn s3(
    url: &str,
    bucket: &str,
    options: &BTreeMap<String, String>,
) -> Result<Arc<dyn ObjectStore>, SinkError> {
    let mut builder = AmazonS3Builder::from_env()
        .with_url(format!("s3://{bucket}"))
        .with_retry(retry());
    for (key, value) in options {
        let key: AmazonS3ConfigKey = key.parse().map_err(|_| SinkError::Option {
            key: key.clone(),
            store: Cloud::S3.name(),
            keys: "AmazonS3ConfigKey",
        })?;
        builder = builder.with_config(key, value);
    }
    let store = builder.build().map_err(|e| unbuilt(url, Cloud::S3, e))?;
    Ok(Arc::new(store))
}

fn azure(
    url: &str,
    root: &str,
    options: &BTreeMap<String, String>,
) -> Result<Arc<dyn ObjectStore>, SinkError> {
    let mut builder = MicrosoftAzureBuilder::from_env()
        .with_url(root)
        .with_retry(retry());
    for (key, value) in options {
        let key: AzureConfigKey = key.parse().map_err(|_| SinkError::Option {
            key: key.clone(),
            store: Cloud::Azure.name(),
            keys: "AzureConfigKey",
        })?;
        builder = builder.with_config(key, value);
    }
    let store = builder.build().map_err(|e| unbuilt(url, Cloud::Azure, e))?;
    Ok(Arc::new(store))
}

/// Where GCS's JSON API is, unless `google_base_url` names another (an emulator).
const GCS_BASE: &str = "https://storage.googleapis.com";

fn gcs(
    url: &str,
    bucket: &str,
    options: &BTreeMap<String, String>,
) -> Result<Arc<dyn ObjectStore>, SinkError> {
    let mut builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
    for (key, value) in options {
        let key: GoogleConfigKey = key.parse().map_err(|_| SinkError::Option {
            key: key.clone(),
            store: Cloud::Gcs.name(),
            keys: "GoogleConfigKey",
        })?;
        builder = builder.with_config(key, value);
    }
    let base = builder
        .get_config_value(&GoogleConfigKey::BaseUrl)
        .unwrap_or_else(|| GCS_BASE.to_owned());
    let unsigned = builder
        .get_config_value(&GoogleConfigKey::SkipSignature)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    // object_store's client is built for its credential providers only.
    let credentials = builder
        .build()
        .map_err(|e| unbuilt(url, Cloud::Gcs, e))?
        .credentials()
        .clone();
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| SinkError::Refused {
            url: url.to_owned(),
            reason: format!("building the HTTP client: {}", crate::error_chain(&e)),
            hint: "check the system's TLS roots",
        })?;
    let credentials = (!unsigned).then_some(credentials);
    Ok(Arc::new(super::gcs::Gcs::new(
        http,
        &base,
        bucket,
        credentials,
    )))
}

/// A store its settings cannot make (no account, a malformed key, a URL it does not read):
/// nothing to wait for.
fn unbuilt(url: &str, cloud: Cloud, source: object_store::Error) -> SinkError {
    SinkError::Refused {
        url: url.to_owned(),
        reason: format!(
            "{} cannot be reached with these settings: {}",
            cloud.name(),
            crate::error_chain(&source)
        ),
        hint: cloud.credentials_hint(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_read_from_every_url_form() {
        assert_eq!(holder_of("s3://lake/shop"), "lake");
        assert_eq!(holder_of("az://lake/shop"), "lake");
        assert_eq!(holder_of("gs://lake/shop"), "lake");
        assert_eq!(
            holder_of("abfss://lake@acct.dfs.core.windows.net/shop"),
            "lake"
        );
    }
}
