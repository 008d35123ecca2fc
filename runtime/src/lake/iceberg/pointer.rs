//! The sink's Iceberg catalog (`sink.catalog`) as the tables use it: a [`Catalog`] handle,
//! connected on first use (and again after a failed connect), that names each output's table
//! in its namespace and holds the pointer to its current metadata instead of storage.
//!
//! An output `schema.table` is the table `<namespace>.schema__table` (the dot, which would be
//! a namespace level, doubled into `__`); the table's location stays `<sink url>/<output>`.
//!
//! - SQL catalog: loading reads the row's `metadata_location` from the sink; a commit writes
//!   `metadata/<NNNNN>-<uuid>.metadata.json` put-if-absent, then moves the row from the base
//!   (or inserts it for a new table, creating the namespace when missing).
//! - REST catalog: loading is the catalog's load-table; a new table is created through
//!   create-table and planned again on what the catalog made of it; a commit sends what the
//!   planned metadata changes of its base, asserting the table's uuid and the `main` branch's
//!   snapshot. The catalog writes the metadata files itself.
//!
//! A commit whose outcome is unknown is looked up in a reload before it is called lost, so a
//! flush is never published twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;

use super::catalog::{CatalogError, RefType, Requirement, Secret, TableIdent, Update};
use super::metadata::TableMetadata;
use super::rest::{DEFAULT_SCOPE, LoadedTable, NewTable, RestAuth, RestCatalog, RestOptions};
use super::sql::{SqlCatalog, SqlOptions};
use super::table::{Current, IcebergError, Swap};
use crate::lake::sink::{Created, Sink};

/// The namespace the tables go in when `sink.catalog_namespace` names none.
pub const DEFAULT_NAMESPACE: &str = "tributary";

/// How the catalog is reached.
#[derive(Debug, Clone)]
pub enum CatalogConfig {
    Sql(SqlOptions),
    Rest(RestOptions),
}

/// The sink's catalog, shared by every table of a pipeline or a command.
#[derive(Debug, Clone)]
pub struct Catalog(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    config: CatalogConfig,
    namespace: Vec<String>,
    connected: tokio::sync::Mutex<Option<Connected>>,
}

#[derive(Debug, Clone)]
enum Connected {
    Sql(Arc<SqlCatalog>),
    Rest(Arc<RestCatalog>),
}

impl Catalog {
    pub fn new(config: CatalogConfig, namespace: Vec<String>) -> Catalog {
        Catalog(Arc::new(Inner {
            config,
            namespace,
            connected: tokio::sync::Mutex::new(None),
        }))
    }

    /// The catalog the sink's keys name (`sink.catalog`, checked when the pipeline file was
    /// read), not connected yet; `None` without.
    pub fn of_sink(sink: &crate::config::SinkConfig) -> Option<Catalog> {
        let url = sink.catalog.as_ref()?;
        let namespace = sink
            .catalog_namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE)
            .split('.')
            .map(str::to_owned)
            .collect();
        let config = if crate::config::is_sql_catalog(url) {
            CatalogConfig::Sql(SqlOptions {
                url: url.clone(),
                catalog_name: None,
                password: sink.catalog_password.clone(),
            })
        } else {
            let auth = match (&sink.catalog_token, &sink.catalog_client_id) {
                (Some(token), _) => RestAuth::Token(token.clone()),
                (None, Some(id)) => RestAuth::ClientCredentials {
                    client_id: id.clone(),
                    client_secret: sink
                        .catalog_client_secret
                        .clone()
                        .unwrap_or(Secret::new("")),
                    scope: sink
                        .catalog_scope
                        .clone()
                        .unwrap_or_else(|| DEFAULT_SCOPE.into()),
                    server_uri: None,
                },
                (None, None) => RestAuth::None,
            };
            CatalogConfig::Rest(RestOptions {
                uri: url.clone(),
                warehouse: sink.catalog_warehouse.clone(),
                auth,
            })
        };
        Some(Catalog::new(config, namespace))
    }

    pub fn is_rest(&self) -> bool {
        matches!(self.0.config, CatalogConfig::Rest(_))
    }

    pub fn namespace(&self) -> &[String] {
        &self.0.namespace
    }

    /// The table an output is in the catalog.
    pub fn ident(&self, output: &str) -> TableIdent {
        TableIdent {
            namespace: self.0.namespace.clone(),
            name: output.replace('.', "__"),
        }
    }

    /// Connects unless connected: the credentials are tried and, for a SQL catalog, its
    /// tables made. A failure is not kept: the next use tries again.
    pub async fn connect(&self) -> Result<(), CatalogError> {
        self.connected().await.map(drop)
    }

    async fn connected(&self) -> Result<Connected, CatalogError> {
        let mut held = self.0.connected.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let connected = match &self.0.config {
            CatalogConfig::Sql(o) => {
                Connected::Sql(Arc::new(SqlCatalog::connect(o.clone()).await?))
            }
            CatalogConfig::Rest(o) => {
                Connected::Rest(Arc::new(RestCatalog::connect(o.clone()).await?))
            }
        };
        *held = Some(connected.clone());
        Ok(connected)
    }

    async fn sql(&self) -> Result<Arc<SqlCatalog>, CatalogError> {
        match self.connected().await? {
            Connected::Sql(c) => Ok(c),
            Connected::Rest(_) => unreachable!("a REST catalog's tables have REST pointers"),
        }
    }

    async fn rest(&self) -> Result<Arc<RestCatalog>, CatalogError> {
        match self.connected().await? {
            Connected::Rest(c) => Ok(c),
            Connected::Sql(_) => unreachable!("a SQL catalog's tables have SQL pointers"),
        }
    }

    /// The outputs whose tables the catalog holds in the namespace, located in `sink`
    /// (another sink's tables in a shared namespace are not this pipeline's).
    pub async fn table_names(&self, sink: &Sink) -> Result<Vec<String>, CatalogError> {
        let namespace = &self.0.namespace;
        let (names, locations) = match self.connected().await? {
            Connected::Sql(c) => {
                let names = c.list_tables(namespace).await?;
                let mut locations = Vec::with_capacity(names.len());
                for name in &names {
                    let ident = TableIdent {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    };
                    locations.push(c.load(&ident).await?.metadata_location);
                }
                (names, locations)
            }
            Connected::Rest(c) => {
                let names = c.list_tables(namespace).await?;
                let mut locations = Vec::with_capacity(names.len());
                for name in &names {
                    let ident = TableIdent {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    };
                    locations.push(c.load_table(&ident).await?.metadata_location);
                }
                (names, locations)
            }
        };
        let root = format!("{}/", sink.url().trim_end_matches('/'));
        let mut outputs: Vec<String> = names
            .iter()
            .zip(&locations)
            .filter_map(|(_, location)| {
                let (folder, _) = location.strip_prefix(&root)?.rsplit_once("/metadata/")?;
                Some(folder.to_owned())
            })
            .collect();
        outputs.sort();
        Ok(outputs)
    }
}

/// The table's metadata as the SQL catalog points at it, read from the sink.
pub(super) async fn sql_latest(
    catalog: &Catalog,
    sink: &Sink,
    ident: &TableIdent,
) -> Result<Option<Current>, IcebergError> {
    let location = match catalog.sql().await?.load(ident).await {
        Ok(pointer) => pointer.metadata_location,
        Err(CatalogError::NoSuchTable { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let path = super::table::sink_path(sink, &location)?;
    let Some(bytes) = sink.get(&path).await? else {
        return Err(IcebergError::Corrupt {
            path: location,
            reason: "the catalog points at it, and it is not there".into(),
        });
    };
    let metadata = TableMetadata::from_json(&bytes).map_err(|reason| IcebergError::Corrupt {
        path: location.clone(),
        reason,
    })?;
    Ok(Some(Current { location, metadata }))
}

/// `N` of a metadata file named `<N>-<uuid>.metadata.json` (or `v<N>…`).
pub(super) fn sequence_of(location: &str) -> Option<u64> {
    let stem = location
        .rsplit('/')
        .next()?
        .strip_suffix(".metadata.json")?;
    let stem = stem.strip_prefix('v').unwrap_or(stem);
    stem.split('-').next()?.parse().ok()
}

/// Write `next` as the table's next metadata file and point the SQL catalog's row at it.
pub(super) async fn sql_swap(
    catalog: &Catalog,
    sink: &Sink,
    table: &str,
    ident: &TableIdent,
    current: Option<&str>,
    next: &TableMetadata,
) -> Result<Swap, IcebergError> {
    let sql = catalog.sql().await?;
    let version = match current {
        None => 0,
        Some(location) => sequence_of(location).map_or(next.metadata_log.len() as u64, |n| n + 1),
    };
    let uuid = super::metadata::new_table_uuid();
    let path = Path::from(format!(
        "{table}/metadata/{version:05}-{uuid}.metadata.json"
    ));
    if sink.create(&path, Bytes::from(next.to_json())).await? == Created::Existed {
        return Ok(Swap::Lost);
    }
    let location = super::table::uri(sink, path.as_ref());
    let moved = match current {
        None => create_sql_table(&sql, ident, &location).await,
        Some(base) => sql.swap(ident, base, &location).await,
    };
    let done = |location| {
        Swap::Done(Box::new(Current {
            location,
            metadata: next.clone(),
        }))
    };
    match moved {
        Ok(()) => Ok(done(location)),
        Err(e) if e.is_lost_race() || matches!(e, CatalogError::AlreadyExists { .. }) => {
            discard(sink, &path).await;
            Ok(Swap::Lost)
        }
        Err(CatalogError::CommitStateUnknown { .. }) => {
            // Applied or not, the reload says; the file stays either way (it may be the table's).
            let now = sql.load(ident).await?;
            Ok(if now.metadata_location == location {
                done(location)
            } else {
                Swap::Lost
            })
        }
        Err(e) => Err(e.into()),
    }
}

async fn create_sql_table(
    sql: &SqlCatalog,
    ident: &TableIdent,
    location: &str,
) -> Result<(), CatalogError> {
    if !sql.namespace_exists(&ident.namespace).await? {
        match sql
            .create_namespace(&ident.namespace, &Default::default())
            .await
        {
            Ok(()) | Err(CatalogError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    sql.create_table(ident, location).await
}

async fn discard(sink: &Sink, path: &Path) {
    if let Err(e) = sink.delete(path).await {
        tracing::warn!(path = %path, error = %e, "could not delete the metadata file of a lost commit; nothing reads it");
    }
}

/// The table's metadata as the REST catalog answers for it.
pub(super) async fn rest_latest(
    catalog: &Catalog,
    ident: &TableIdent,
) -> Result<Option<Current>, IcebergError> {
    match catalog.rest().await?.load_table(ident).await {
        Ok(loaded) => answered(loaded).map(Some),
        Err(CatalogError::NoSuchTable { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The table as a REST catalog answered a load or a commit.
fn answered(loaded: LoadedTable) -> Result<Current, IcebergError> {
    let bytes = serde_json::to_vec(&loaded.metadata).expect("JSON serializes");
    let metadata = TableMetadata::from_json(&bytes).map_err(|reason| IcebergError::Corrupt {
        path: loaded.metadata_location.clone(),
        reason,
    })?;
    Ok(Current {
        location: loaded.metadata_location,
        metadata,
    })
}

/// Commit `next`, planned on `base` (`None`: a new table, at `location`), to the REST
/// catalog. A new table is created and reported lost, for the commit to be planned again on
/// the catalog's own first metadata (which assigns the table's uuid and ids).
pub(super) async fn rest_swap(
    catalog: &Catalog,
    ident: &TableIdent,
    location: &str,
    base: Option<&TableMetadata>,
    next: &TableMetadata,
) -> Result<Swap, IcebergError> {
    let rest = catalog.rest().await?;
    let Some(base) = base else {
        create_rest_table(&rest, ident, location, next).await?;
        return Ok(Swap::Lost);
    };
    let (requirements, updates) = changes(base, next);
    match rest.commit(ident, &requirements, &updates).await {
        Ok(loaded) => Ok(Swap::Done(Box::new(answered(loaded)?))),
        Err(e) if e.is_lost_race() => Ok(Swap::Lost),
        Err(CatalogError::CommitStateUnknown { .. }) => {
            let now = rest_latest(catalog, ident).await?;
            let ids = |m: &TableMetadata| -> BTreeSet<i64> {
                m.snapshots.iter().map(|s| s.snapshot_id).collect()
            };
            Ok(match now {
                Some(now)
                    if now.metadata.current_snapshot_id == next.current_snapshot_id
                        && ids(&now.metadata) == ids(next) =>
                {
                    Swap::Done(Box::new(now))
                }
                _ => Swap::Lost,
            })
        }
        Err(e) => Err(e.into()),
    }
}

async fn create_rest_table(
    rest: &RestCatalog,
    ident: &TableIdent,
    location: &str,
    next: &TableMetadata,
) -> Result<(), CatalogError> {
    if !rest.namespace_exists(&ident.namespace).await? {
        match rest
            .create_namespace(&ident.namespace, &Default::default())
            .await
        {
            Ok(()) | Err(CatalogError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let new = NewTable {
        schema: json(&next.current_schema()),
        location: Some(location.to_owned()),
        partition_spec: next.default_spec().map(json),
        write_order: None,
        properties: next.properties.clone(),
    };
    match rest.create_table(ident, &new).await {
        Ok(_) | Err(CatalogError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a REST commit of `next` on `base` asserts and changes: the schemas, snapshots and
/// properties `next` adds or drops, the current schema and the `main` branch.
pub fn changes(base: &TableMetadata, next: &TableMetadata) -> (Vec<Requirement>, Vec<Update>) {
    let mut requirements = vec![
        Requirement::AssertTableUuid {
            uuid: base.table_uuid.clone(),
        },
        Requirement::AssertRefSnapshotId {
            r#ref: "main".into(),
            snapshot_id: base.current_snapshot_id,
        },
    ];
    let mut updates = Vec::new();
    let known: BTreeSet<i32> = base.schemas.iter().map(|s| s.schema_id).collect();
    let added: Vec<_> = next
        .schemas
        .iter()
        .filter(|s| !known.contains(&s.schema_id))
        .collect();
    if !added.is_empty() {
        requirements.push(Requirement::AssertLastAssignedFieldId {
            last_assigned_field_id: base.last_column_id,
        });
    }
    for schema in &added {
        updates.push(Update::AddSchema {
            schema: json(schema),
        });
    }
    if next.current_schema_id != base.current_schema_id {
        updates.push(Update::SetCurrentSchema {
            schema_id: next.current_schema_id,
        });
    }
    let had: BTreeSet<i64> = base.snapshots.iter().map(|s| s.snapshot_id).collect();
    let kept: BTreeSet<i64> = next.snapshots.iter().map(|s| s.snapshot_id).collect();
    for snapshot in next
        .snapshots
        .iter()
        .filter(|s| !had.contains(&s.snapshot_id))
    {
        updates.push(Update::AddSnapshot {
            snapshot: json(snapshot),
        });
    }
    if let Some(id) = next.current_snapshot_id
        && next.current_snapshot_id != base.current_snapshot_id
    {
        updates.push(Update::SetSnapshotRef {
            ref_name: "main".into(),
            r#type: RefType::Branch,
            snapshot_id: id,
            max_ref_age_ms: None,
            max_snapshot_age_ms: None,
            min_snapshots_to_keep: None,
        });
    }
    let removed: Vec<i64> = had.difference(&kept).copied().collect();
    if !removed.is_empty() {
        updates.push(Update::RemoveSnapshots {
            snapshot_ids: removed,
        });
    }
    let set: std::collections::BTreeMap<String, String> = next
        .properties
        .iter()
        .filter(|(k, v)| base.properties.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !set.is_empty() {
        updates.push(Update::SetProperties { updates: set });
    }
    let gone: Vec<String> = base
        .properties
        .keys()
        .filter(|k| !next.properties.contains_key(*k))
        .cloned()
        .collect();
    if !gone.is_empty() {
        updates.push(Update::RemoveProperties { removals: gone });
    }
    (requirements, updates)
}

/// A value as the metadata file spells it.
fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("JSON serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::iceberg::metadata::{Snapshot, new_table};
    use crate::lake::iceberg::{partition, schema};

    fn table() -> TableMetadata {
        let columns = arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "id",
            arrow_schema::DataType::Int32,
            true,
        )]);
        let (schema, last) = schema::fresh(&columns).unwrap();
        new_table(
            "memory://lake/t",
            schema,
            last,
            partition::unpartitioned(),
            1,
        )
    }

    fn snapshot(id: i64, parent: Option<i64>) -> Snapshot {
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: parent,
            sequence_number: id,
            timestamp_ms: id,
            manifest_list: format!("memory://lake/t/metadata/snap-{id}.avro"),
            summary: [("operation".to_owned(), "append".to_owned())].into(),
            schema_id: Some(0),
            extra: Default::default(),
        }
    }

    #[test]
    fn a_commit_tells_the_catalog_what_changed_and_asserts_its_base() {
        let base = table().with_snapshot(snapshot(1, None), None).0;
        let mut next = base.with_snapshot(snapshot(2, Some(1)), None).0;
        next.properties.insert("k".into(), "v".into());
        let (requirements, updates) = changes(&base, &next);
        assert_eq!(
            requirements,
            [
                Requirement::AssertTableUuid {
                    uuid: base.table_uuid.clone()
                },
                Requirement::AssertRefSnapshotId {
                    r#ref: "main".into(),
                    snapshot_id: Some(1)
                },
            ]
        );
        let actions: Vec<String> = updates
            .iter()
            .map(|u| serde_json::to_value(u).unwrap()["action"].to_string())
            .collect();
        assert_eq!(
            actions,
            [
                "\"add-snapshot\"",
                "\"set-snapshot-ref\"",
                "\"set-properties\""
            ]
        );
        // An expiry: the snapshot dropped, the branch where it was.
        let mut expired = next.clone();
        expired.snapshots.retain(|s| s.snapshot_id == 2);
        let (_, updates) = changes(&next, &expired);
        assert_eq!(
            updates,
            [Update::RemoveSnapshots {
                snapshot_ids: vec![1]
            }]
        );
    }

    #[test]
    fn metadata_files_are_numbered_as_catalogs_number_them() {
        assert_eq!(
            sequence_of("s3://b/t/metadata/00007-ab-cd.metadata.json"),
            Some(7)
        );
        assert_eq!(sequence_of("s3://b/t/metadata/v3.metadata.json"), Some(3));
        assert_eq!(sequence_of("s3://b/t/metadata/x.json"), None);
    }
}
