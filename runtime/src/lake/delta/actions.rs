//! Delta log actions as the protocol spells them: one JSON object per line of a commit file
//! (`_delta_log/<version>.json`), each naming its kind (`add`, `remove`, `metaData`,
//! `protocol`, `txn`, `commitInfo`). Kinds this writer never needs (`cdc`, `domainMetadata`,
//! ...) are read past.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub min_reader_version: u32,
    pub min_writer_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_features: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_features: Option<Vec<String>>,
}

impl Protocol {
    /// The least protocol that holds a table with these columns: reader 1 and writer 2, or
    /// table features (reader 3, writer 7) when a column is a `timestamp_ntz`.
    pub fn needed(ntz: bool) -> Protocol {
        match ntz {
            false => Protocol {
                min_reader_version: 1,
                min_writer_version: 2,
                reader_features: None,
                writer_features: None,
            },
            true => Protocol {
                min_reader_version: 3,
                min_writer_version: 7,
                reader_features: Some(vec!["timestampNtz".into()]),
                writer_features: Some(vec!["timestampNtz".into()]),
            },
        }
    }

    /// Whether this writer can append to a table of this protocol: it writes plain Parquet
    /// files and knows no feature but `timestampNtz` (and the ones writer version 2 implies,
    /// which constrain only what it never writes).
    pub fn writable(&self) -> Result<(), String> {
        if self.min_writer_version > 7 {
            return Err(format!(
                "writer version {} is newer than this build knows",
                self.min_writer_version
            ));
        }
        let known = [
            "timestampNtz",
            "appendOnly",
            "invariants",
            "checkpointProtection",
        ];
        let unknown: Vec<&str> = self
            .writer_features
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|f| !known.contains(f))
            .collect();
        match unknown.is_empty() {
            true => Ok(()),
            false => Err(format!(
                "the table uses writer features this build does not support: {}",
                unknown.join(", ")
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Format {
    pub provider: String,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub format: Format,
    pub schema_string: String,
    #[serde(default)]
    pub partition_columns: Vec<String>,
    #[serde(default)]
    pub created_time: Option<i64>,
    #[serde(default)]
    pub configuration: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Add {
    /// Relative to the table's root.
    pub path: String,
    #[serde(default)]
    pub partition_values: BTreeMap<String, Option<String>>,
    pub size: u64,
    pub modification_time: i64,
    pub data_change: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remove {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<i64>,
    pub data_change: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// An application's transaction version: what makes a streaming writer's commits idempotent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Txn {
    pub app_id: String,
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Protocol(Protocol),
    Metadata(Metadata),
    Add(Add),
    Remove(Remove),
    Txn(Txn),
    /// Free-form provenance; read past.
    CommitInfo(serde_json::Value),
}

/// The line of one action: `{"<kind>":{...}}`, fields in the protocol's order.
fn line(action: &Action) -> String {
    let (key, value) = match action {
        Action::Protocol(p) => ("protocol", serde_json::to_string(p)),
        Action::Metadata(m) => ("metaData", serde_json::to_string(m)),
        Action::Add(a) => ("add", serde_json::to_string(a)),
        Action::Remove(r) => ("remove", serde_json::to_string(r)),
        Action::Txn(t) => ("txn", serde_json::to_string(t)),
        Action::CommitInfo(c) => ("commitInfo", serde_json::to_string(c)),
    };
    format!(r#"{{"{key}":{}}}"#, value.expect("an action serializes"))
}

/// A commit file: one action per line.
pub fn commit_file(actions: &[Action]) -> Bytes {
    let mut text = String::new();
    for action in actions {
        text.push_str(&line(action));
        text.push('\n');
    }
    Bytes::from(text)
}

/// The actions of a commit file, in order, without the kinds this writer does not use.
pub fn parse_commit(bytes: &[u8]) -> Result<Vec<Action>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut actions = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |e: serde_json::Error| format!("line {}: {e}", n + 1);
        let object: BTreeMap<String, serde_json::Value> = serde_json::from_str(line).map_err(at)?;
        for (kind, value) in object {
            let action = match kind.as_str() {
                "protocol" => Action::Protocol(serde_json::from_value(value).map_err(at)?),
                "metaData" => Action::Metadata(serde_json::from_value(value).map_err(at)?),
                "add" => Action::Add(serde_json::from_value(value).map_err(at)?),
                "remove" => Action::Remove(serde_json::from_value(value).map_err(at)?),
                "txn" => Action::Txn(serde_json::from_value(value).map_err(at)?),
                "commitInfo" => Action::CommitInfo(value),
                _ => continue,
            };
            actions.push(action);
        }
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_file_reads_back_as_written_and_unknown_kinds_are_read_past() {
        let actions = vec![
            Action::CommitInfo(serde_json::json!({"operation": "WRITE"})),
            Action::Protocol(Protocol::needed(true)),
            Action::Add(Add {
                path: "part-1.parquet".into(),
                partition_values: BTreeMap::new(),
                size: 10,
                modification_time: 5,
                data_change: true,
                stats: Some(r#"{"numRecords":3}"#.into()),
            }),
            Action::Txn(Txn {
                app_id: "tributary".into(),
                version: 7,
                last_updated: Some(5),
            }),
        ];
        let file = commit_file(&actions);
        let text = std::str::from_utf8(&file).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert!(
            text.contains(r#"{"txn":{"appId":"tributary","version":7,"lastUpdated":5}}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""readerFeatures":["timestampNtz"]"#),
            "{text}"
        );
        let mut with_other = file.to_vec();
        with_other.extend_from_slice(b"{\"domainMetadata\":{\"domain\":\"x\"}}\n");
        assert_eq!(parse_commit(&with_other).unwrap(), actions);
        let err = parse_commit(b"{\"add\":{\"path\":1}}\n").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
    }

    #[test]
    fn a_table_with_features_this_build_does_not_know_is_not_appended_to() {
        assert!(Protocol::needed(false).writable().is_ok());
        let p = Protocol {
            writer_features: Some(vec!["deletionVectors".into(), "timestampNtz".into()]),
            ..Protocol::needed(true)
        };
        assert!(p.writable().unwrap_err().contains("deletionVectors"));
    }
}
