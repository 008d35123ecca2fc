//! A Delta table as its log leaves it (version, protocol, schema, application transaction
//! versions, live files), and the commit that appends one flush's files to it.

use std::collections::BTreeMap;

use arrow_schema::SchemaRef;

use super::actions::{Action, Add, Format, Metadata, Protocol, Remove, Txn};
use super::schema::{SchemaError, StructType, evolve, table_schema};

pub use crate::lake::tables::file::TableFile;

/// Why a flush cannot be appended to a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error("{0}")]
    Protocol(String),
    #[error("its log is not a Delta log this build can read: {0}")]
    Corrupt(String),
    #[error("its current-state table: {0}")]
    Mirror(#[from] super::mirror::MirrorError),
    #[error(
        "the table is partitioned by {table:?} and this flush's files by {files:?}: a table's partitioning is chosen when it is created; set partition_by back, or land the new partitioning under a new sink prefix"
    )]
    Partitioning {
        table: Vec<String>,
        files: Vec<String>,
    },
    #[error("its current-state table: {path}: {reason}")]
    Data { path: String, reason: String },
}

/// A table after replaying its log up to `version`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableState {
    /// `None` until the table's first commit.
    pub version: Option<u64>,
    pub protocol: Option<Protocol>,
    pub metadata: Option<Metadata>,
    pub schema: Option<StructType>,
    /// The latest transaction version of each application.
    pub txns: BTreeMap<String, u64>,
    /// The files a reader of this version reads, by path.
    pub files: BTreeMap<String, Add>,
    /// The files a commit removed and none added again, by path: what `vacuum` may delete
    /// once their retention has passed.
    pub tombstones: BTreeMap<String, Remove>,
}

impl TableState {
    /// Apply commit `version`, which must be the next one.
    pub fn apply(&mut self, version: u64, actions: Vec<Action>) -> Result<(), TableError> {
        let expected = self.version.map_or(0, |v| v + 1);
        if version != expected {
            return Err(TableError::Corrupt(format!(
                "version {version} follows version {:?}",
                self.version
            )));
        }
        self.take(actions)?;
        self.version = Some(version);
        Ok(())
    }

    /// The table at `version` as its checkpoint holds it (`actions`, read from the checkpoint
    /// file): a reader goes on from there instead of replaying every commit before.
    pub fn checkpointed(version: u64, actions: Vec<Action>) -> Result<TableState, TableError> {
        let mut state = TableState::default();
        state.take(actions)?;
        if state.protocol.is_none() || state.metadata.is_none() {
            return Err(TableError::Corrupt(format!(
                "the checkpoint at version {version} holds no protocol or no metadata"
            )));
        }
        state.version = Some(version);
        Ok(state)
    }

    fn take(&mut self, actions: Vec<Action>) -> Result<(), TableError> {
        for action in actions {
            match action {
                Action::Protocol(p) => self.protocol = Some(p),
                Action::Metadata(m) => {
                    self.schema =
                        Some(StructType::from_json(&m.schema_string).map_err(TableError::Corrupt)?);
                    self.metadata = Some(m);
                }
                Action::Add(a) => {
                    self.tombstones.remove(&a.path);
                    self.files.insert(a.path.clone(), a);
                }
                Action::Remove(r) => {
                    self.files.remove(&r.path);
                    self.tombstones.insert(r.path.clone(), r);
                }
                Action::Txn(t) => {
                    self.txns.insert(t.app_id, t.version);
                }
                Action::CommitInfo(_) => {}
            }
        }
        Ok(())
    }

    /// The version the next commit takes.
    pub fn next_version(&self) -> u64 {
        self.version.map_or(0, |v| v + 1)
    }

    /// The latest transaction version `app_id` committed to the table.
    pub fn txn(&self, app_id: &str) -> Option<u64> {
        self.txns.get(app_id).copied()
    }
}

/// Who appends, to name in each commit.
#[derive(Debug, Clone)]
pub struct Appender {
    /// The pipeline's identity: the `txn` application id.
    pub app_id: String,
    /// `tributary <version>`.
    pub engine: String,
    /// What a column whose type changed does to its table.
    pub on_type_change: TypeChange,
}

pub use crate::lake::tables::file::TypeChange;

impl Appender {
    /// The actions of the commit that appends `files` (all of `output`, at paths relative to
    /// `table_root`) to the table in `state` as transaction version `sequence`: the protocol
    /// and metadata of a new table (whose id `table_id` gives), a new schema when a file adds
    /// columns, one `add` per file, the `txn`, and the provenance.
    pub fn append(
        &self,
        state: &TableState,
        sequence: u64,
        files: &[&TableFile],
        table_root: &str,
        now_ms: i64,
        table_id: impl FnOnce() -> String,
    ) -> Result<Vec<Action>, TableError> {
        let mut actions = vec![Action::CommitInfo(serde_json::json!({
            "timestamp": now_ms,
            "operation": "STREAMING UPDATE",
            "operationParameters": { "outputMode": "Append", "epochId": sequence.to_string() },
            "isBlindAppend": true,
            "engineInfo": self.engine,
            "operationMetrics": {
                "numAddedFiles": files.len().to_string(),
                "numOutputRows": files.iter().map(|f| f.rows).sum::<u64>().to_string(),
                "numOutputBytes": files.iter().map(|f| f.size).sum::<u64>().to_string(),
            },
        }))];
        let partitioning: Vec<String> = files
            .iter()
            .filter_map(|f| f.partition.as_ref().map(|p| p.column.clone()))
            .take(1)
            .collect();
        if let Some(m) = &state.metadata
            && m.partition_columns != partitioning
        {
            return Err(TableError::Partitioning {
                table: m.partition_columns.clone(),
                files: partitioning,
            });
        }
        let schemas = || files.iter().map(|f| &f.schema);
        let (mut created, replaced) = match schema_actions(state, schemas(), now_ms, table_id) {
            Err(TableError::Schema(SchemaError::TypeChange { column, from, to }))
                if self.on_type_change == TypeChange::NewVersion && state.metadata.is_some() =>
            {
                // The schema the files have, as if the table were new, under the same id.
                let fresh = TableState {
                    schema: None,
                    ..state.clone()
                };
                let created = schema_actions(&fresh, schemas(), now_ms, || {
                    unreachable!("the table has its id")
                })?;
                let reason = format!("column {column:?} changed type from {from} to {to}");
                (created, Some(reason))
            }
            other => (other?, None),
        };
        for action in &mut created {
            if let Action::Metadata(m) = action
                && state.metadata.is_none()
            {
                m.partition_columns = partitioning.clone();
            }
        }
        actions.extend(created);
        if let Some(reason) = &replaced {
            if let Action::CommitInfo(info) = &mut actions[0] {
                info["operationParameters"]["newVersion"] = serde_json::json!(reason);
                info["isBlindAppend"] = serde_json::json!(false);
            }
            actions.extend(state.files.values().map(|f| {
                Action::Remove(Remove {
                    path: f.path.clone(),
                    deletion_timestamp: Some(now_ms),
                    data_change: true,
                    size: Some(f.size),
                })
            }));
        }
        for file in files {
            let path = file
                .path
                .strip_prefix(table_root)
                .and_then(|p| p.strip_prefix('/'))
                .unwrap_or(&file.path);
            actions.push(Action::Add(Add {
                path: path.to_owned(),
                partition_values: file
                    .partition
                    .iter()
                    .map(|p| (p.column.clone(), p.value.clone()))
                    .collect(),
                size: file.size,
                modification_time: now_ms,
                data_change: true,
                stats: Some(format!(r#"{{"numRecords":{}}}"#, file.rows)),
            }));
        }
        actions.push(Action::Txn(Txn {
            app_id: self.app_id.clone(),
            version: sequence,
            last_updated: Some(now_ms),
        }));
        Ok(actions)
    }
}

/// The `protocol` and `metaData` actions a commit of files with `schemas` needs on the table
/// in `state`: those of a new table (whose id `table_id` gives), a schema that gains the
/// files' new columns, and the protocol a new column's type needs.
pub fn schema_actions<'a>(
    state: &TableState,
    schemas: impl IntoIterator<Item = &'a SchemaRef>,
    now_ms: i64,
    table_id: impl FnOnce() -> String,
) -> Result<Vec<Action>, TableError> {
    let mut actions = Vec::new();
    if let Some(protocol) = &state.protocol {
        protocol.writable().map_err(TableError::Protocol)?;
    }
    let mut schema = state.schema.clone();
    for file in schemas {
        let theirs = table_schema(file)?;
        schema = match schema {
            None => Some(theirs),
            Some(ours) => Some(evolve(&ours, &theirs)?.unwrap_or(ours)),
        };
    }
    let Some(schema) = schema else {
        return Ok(actions);
    };
    let needed = Protocol::needed(schema.needs_ntz());
    let protocol = match &state.protocol {
        None => Some(needed),
        // A table that has no features yet gains the one a new column needs.
        Some(p) if p.min_reader_version < needed.min_reader_version => Some(needed),
        Some(_) => None,
    };
    if let Some(protocol) = protocol {
        actions.push(Action::Protocol(protocol));
    }
    match &state.metadata {
        None => actions.push(Action::Metadata(Metadata {
            id: table_id(),
            name: None,
            description: None,
            format: Format {
                provider: "parquet".into(),
                options: BTreeMap::new(),
            },
            schema_string: schema.to_json(),
            partition_columns: Vec::new(),
            created_time: Some(now_ms),
            configuration: BTreeMap::new(),
        })),
        Some(m) if state.schema.as_ref() != Some(&schema) => {
            actions.push(Action::Metadata(Metadata {
                schema_string: schema.to_json(),
                ..m.clone()
            }));
        }
        Some(_) => {}
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema, TimeUnit};

    use super::*;

    fn file(path: &str, fields: Vec<Field>) -> TableFile {
        TableFile {
            output: "public.t".into(),
            path: format!("public.t/{path}"),
            size: 100,
            rows: 3,
            schema: Arc::new(Schema::new(fields)),
            partition: None,
            footer: None,
        }
    }

    fn appender() -> Appender {
        Appender {
            app_id: "tributary:db/slot".into(),
            engine: "tributary test".into(),
            on_type_change: TypeChange::Stop,
        }
    }

    fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::Protocol(_) => "protocol",
                Action::Metadata(_) => "metaData",
                Action::Add(_) => "add",
                Action::Remove(_) => "remove",
                Action::Txn(_) => "txn",
                Action::CommitInfo(_) => "commitInfo",
            })
            .collect()
    }

    #[test]
    fn a_new_table_then_appends_then_a_column_and_a_feature_added() {
        let a = Field::new("a", DataType::Int64, true);
        let first = file("part-1.parquet", vec![a.clone()]);
        let mut state = TableState::default();
        let actions = appender()
            .append(&state, 1, &[&first], "public.t", 10, || "id-1".into())
            .unwrap();
        assert_eq!(
            kinds(&actions),
            ["commitInfo", "protocol", "metaData", "add", "txn"]
        );
        let Action::Add(add) = &actions[3] else {
            unreachable!()
        };
        assert_eq!(add.path, "part-1.parquet", "relative to the table");
        assert_eq!(add.stats.as_deref(), Some(r#"{"numRecords":3}"#));
        state.apply(0, actions).unwrap();
        assert_eq!(state.txn("tributary:db/slot"), Some(1));
        assert_eq!(
            state.protocol.as_ref().unwrap().min_reader_version,
            1,
            "no feature needed yet"
        );

        let same = file("part-2.parquet", vec![a.clone()]);
        let actions = appender()
            .append(&state, 2, &[&same], "public.t", 11, || unreachable!())
            .unwrap();
        assert_eq!(kinds(&actions), ["commitInfo", "add", "txn"]);
        state.apply(1, actions).unwrap();

        let ts = Field::new("t", DataType::Timestamp(TimeUnit::Microsecond, None), true);
        let wider = file("part-3.parquet", vec![a, ts]);
        let actions = appender()
            .append(&state, 3, &[&wider], "public.t", 12, || unreachable!())
            .unwrap();
        assert_eq!(
            kinds(&actions),
            ["commitInfo", "protocol", "metaData", "add", "txn"]
        );
        state.apply(2, actions).unwrap();
        assert_eq!(state.metadata.as_ref().unwrap().id, "id-1", "same table");
        assert_eq!(state.schema.as_ref().unwrap().fields.len(), 2);
        assert_eq!(state.protocol.as_ref().unwrap().min_reader_version, 3);
        assert_eq!(state.files.len(), 3);
        assert_eq!(state.txn("tributary:db/slot"), Some(3));
    }

    #[test]
    fn a_type_change_stops_or_starts_a_new_version_of_the_table() {
        let first = file(
            "part-1.parquet",
            vec![Field::new("a", DataType::Int64, true)],
        );
        let mut state = TableState::default();
        let actions = appender()
            .append(&state, 1, &[&first], "public.t", 10, || "id-1".into())
            .unwrap();
        state.apply(0, actions).unwrap();
        let text = file(
            "part-2.parquet",
            vec![Field::new("a", DataType::Utf8, true)],
        );
        let err = appender()
            .append(&state, 2, &[&text], "public.t", 11, || unreachable!())
            .unwrap_err();
        assert!(
            err.to_string().contains("changed type from long to string"),
            "{err}"
        );

        let renewing = Appender {
            on_type_change: TypeChange::NewVersion,
            ..appender()
        };
        let actions = renewing
            .append(&state, 2, &[&text], "public.t", 11, || unreachable!())
            .unwrap();
        assert_eq!(
            kinds(&actions),
            ["commitInfo", "metaData", "remove", "add", "txn"]
        );
        let Action::CommitInfo(info) = &actions[0] else {
            unreachable!()
        };
        assert!(
            info["operationParameters"]["newVersion"]
                .as_str()
                .unwrap()
                .contains("column \"a\" changed type"),
            "{info}"
        );
        state.apply(1, actions).unwrap();
        assert_eq!(
            state.metadata.as_ref().unwrap().id,
            "id-1",
            "the same table"
        );
        assert_eq!(state.files.keys().collect::<Vec<_>>(), ["part-2.parquet"]);
        let schema = state.schema.as_ref().unwrap();
        assert_eq!(
            schema.to_json(),
            table_schema(&text.schema).unwrap().to_json()
        );
    }

    #[test]
    fn versions_apply_in_order_only() {
        let mut state = TableState::default();
        let err = state.apply(1, Vec::new()).unwrap_err();
        assert!(err.to_string().contains("version 1 follows"), "{err}");
        state.apply(0, Vec::new()).unwrap();
        assert_eq!(state.next_version(), 1);
    }
}
