//! What both Iceberg catalogs share: a table's name, the secrets that reach a catalog, and the
//! errors a catalog answers with.
//!
//! A catalog holds one pointer per table, the location of its current metadata file, and moves
//! it only by compare-and-swap. So every commit is optimistic: a writer that lost the race gets
//! [`CatalogError::LostRace`], reloads the table and tries again on the new base, and a writer
//! whose commit may or may not have been applied gets [`CatalogError::CommitStateUnknown`] and
//! must reload before it decides anything. No other error means either.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests this process sent to Iceberg catalogs: SQL statements and HTTP requests, answered
/// or not, for `tributary_catalog_requests_total`.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// How many requests this process has sent to Iceberg catalogs so far, over every catalog:
/// each SQL statement (one round trip) and each HTTP request, token requests included.
pub fn requests_sent() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Counts one request about to be sent to a catalog.
pub(super) fn count_request() {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
}

/// A table's place in a catalog: its namespace (one level or more) and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableIdent {
    pub namespace: Vec<String>,
    pub name: String,
}

impl TableIdent {
    pub fn new(namespace: &[&str], name: &str) -> TableIdent {
        TableIdent {
            namespace: namespace.iter().map(|level| (*level).to_owned()).collect(),
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for TableIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for level in &self.namespace {
            write!(f, "{level}.")?;
        }
        f.write_str(&self.name)
    }
}

/// A token, a client secret or a password: readable only through [`Secret::expose`], and never
/// printed (`Debug` shows `"***"`), so it reaches no log, status or file by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// Reads a secret kept in a file (its content without the trailing newline), as a
    /// mounted secret is.
    pub fn read_file(path: &Path) -> Result<Secret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the secret file {}: {error}", path.display()))?;
        let value = text.trim_end_matches(['\n', '\r']);
        if value.is_empty() {
            return Err(format!(
                "the secret file {} is empty; write the secret into it",
                path.display()
            ));
        }
        Ok(Secret(value.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A secret written in the pipeline file (or through `${NAME}`) is read as it is.
impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// What a catalog refused or failed at. Each names the catalog (`catalog`: its URL without
/// credentials, or its name and database) and, where there is one, the table.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The table moved on since the commit's base was loaded (another writer committed first,
    /// or a requirement no longer holds). Nothing was applied: reload and commit again.
    #[error(
        "commit to table {table} in catalog {catalog} lost a race with another writer ({message}); reload the table and commit again on its new metadata"
    )]
    LostRace {
        catalog: String,
        table: String,
        message: String,
    },
    /// The commit may or may not have been applied (the catalog failed or the answer was lost
    /// after the request was sent). Reload the table and look for the commit before retrying.
    #[error(
        "commit to table {table} in catalog {catalog} may or may not have been applied ({message}); reload the table and check whether it holds the commit before committing again"
    )]
    CommitStateUnknown {
        catalog: String,
        table: String,
        message: String,
    },
    #[error(
        "catalog {catalog} refused the credentials ({message}); check the token or the OAuth2 client id and secret the sink gives it"
    )]
    CredentialsRefused { catalog: String, message: String },
    #[error("catalog {catalog} has no table {table}; create it first")]
    NoSuchTable { catalog: String, table: String },
    #[error("catalog {catalog} has no namespace {namespace}; create it first")]
    NoSuchNamespace { catalog: String, namespace: String },
    #[error("catalog {catalog} already has {what}; load it instead of creating it")]
    AlreadyExists { catalog: String, what: String },
    /// Anything else: the catalog unreachable, an error answer, an answer that is not what the
    /// protocol says.
    #[error("catalog {catalog}: {what} failed: {message}")]
    Failed {
        catalog: String,
        what: String,
        message: String,
    },
}

impl CatalogError {
    /// Whether the caller should reload the table and try its commit again.
    pub fn is_lost_race(&self) -> bool {
        matches!(self, CatalogError::LostRace { .. })
    }
}

/// What must still hold of a table for a commit to apply: the REST spec's
/// `TableRequirement`s, serialized exactly as the spec spells them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Requirement {
    /// The table must not exist yet.
    AssertCreate,
    AssertTableUuid {
        uuid: String,
    },
    /// The branch or tag `ref` must point at `snapshot_id`, or not exist when it is `None`
    /// (the spec wants `"snapshot-id": null` written out then).
    AssertRefSnapshotId {
        r#ref: String,
        snapshot_id: Option<i64>,
    },
    AssertLastAssignedFieldId {
        last_assigned_field_id: i32,
    },
    AssertCurrentSchemaId {
        current_schema_id: i32,
    },
    AssertLastAssignedPartitionId {
        last_assigned_partition_id: i32,
    },
    AssertDefaultSpecId {
        default_spec_id: i32,
    },
    AssertDefaultSortOrderId {
        default_sort_order_id: i32,
    },
}

/// A change a commit makes to a table's metadata: the REST spec's `TableUpdate`s. Schemas,
/// partition specs, sort orders and snapshots are carried as the metadata file spells them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(
    tag = "action",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Update {
    AssignUuid {
        uuid: String,
    },
    UpgradeFormatVersion {
        format_version: i32,
    },
    AddSchema {
        schema: serde_json::Value,
    },
    /// `-1` sets the schema this commit added last.
    SetCurrentSchema {
        schema_id: i32,
    },
    AddSpec {
        spec: serde_json::Value,
    },
    /// `-1` sets the spec this commit added last.
    SetDefaultSpec {
        spec_id: i32,
    },
    AddSortOrder {
        sort_order: serde_json::Value,
    },
    SetDefaultSortOrder {
        sort_order_id: i32,
    },
    AddSnapshot {
        snapshot: serde_json::Value,
    },
    SetSnapshotRef {
        ref_name: String,
        r#type: RefType,
        snapshot_id: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_ref_age_ms: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_snapshot_age_ms: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_snapshots_to_keep: Option<i32>,
    },
    RemoveSnapshots {
        snapshot_ids: Vec<i64>,
    },
    RemoveSnapshotRef {
        ref_name: String,
    },
    SetLocation {
        location: String,
    },
    SetProperties {
        updates: std::collections::BTreeMap<String, String>,
    },
    RemoveProperties {
        removals: Vec<String>,
    },
}

/// What a snapshot reference is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefType {
    Branch,
    Tag,
}

/// A namespace as the SQL catalogs store it and people read it: levels joined by dots.
pub fn dotted(namespace: &[String]) -> String {
    namespace.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "\"***\"");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn a_secret_file_loses_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cret\n").unwrap();
        assert_eq!(Secret::read_file(&path).unwrap().expose(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        let error = Secret::read_file(&path).unwrap_err();
        assert!(error.contains("is empty"), "{error}");
        let error = Secret::read_file(&dir.path().join("missing")).unwrap_err();
        assert!(error.contains("cannot read the secret file"), "{error}");
    }

    #[test]
    fn requirements_are_spelt_as_the_rest_spec_spells_them() {
        let json = serde_json::to_value([
            Requirement::AssertCreate,
            Requirement::AssertTableUuid {
                uuid: "9c12d441-03fe-4693-9a96-a0705ddf69c1".into(),
            },
            Requirement::AssertRefSnapshotId {
                r#ref: "main".into(),
                snapshot_id: None,
            },
            Requirement::AssertCurrentSchemaId {
                current_schema_id: 0,
            },
            Requirement::AssertLastAssignedFieldId {
                last_assigned_field_id: 3,
            },
            Requirement::AssertDefaultSpecId { default_spec_id: 0 },
        ])
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"type": "assert-create"},
                {"type": "assert-table-uuid", "uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1"},
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null},
                {"type": "assert-current-schema-id", "current-schema-id": 0},
                {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 3},
                {"type": "assert-default-spec-id", "default-spec-id": 0},
            ])
        );
    }

    #[test]
    fn updates_are_spelt_as_the_rest_spec_spells_them() {
        let json = serde_json::to_value([
            Update::AddSchema {
                schema: serde_json::json!({"type": "struct", "schema-id": 1, "fields": []}),
            },
            Update::SetCurrentSchema { schema_id: -1 },
            Update::SetSnapshotRef {
                ref_name: "main".into(),
                r#type: RefType::Branch,
                snapshot_id: 7,
                max_ref_age_ms: None,
                max_snapshot_age_ms: None,
                min_snapshots_to_keep: None,
            },
            Update::RemoveSnapshots {
                snapshot_ids: vec![5, 6],
            },
            Update::SetProperties {
                updates: [("owner".to_owned(), "tributary".to_owned())].into(),
            },
        ])
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": []}},
                {"action": "set-current-schema", "schema-id": -1},
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 7},
                {"action": "remove-snapshots", "snapshot-ids": [5, 6]},
                {"action": "set-properties", "updates": {"owner": "tributary"}},
            ])
        );
    }

    #[test]
    fn tables_print_with_their_namespace() {
        assert_eq!(
            TableIdent::new(&["shop", "eu"], "orders").to_string(),
            "shop.eu.orders"
        );
    }
}
