//! What the commands ask of a sink's tables, whatever their format: read one back (`status`,
//! `verify`), hold it against the commit log (the audit), rewrite its small files (`compact`)
//! and delete what no version reads any more (`vacuum`). [`TableSet`] answers in these types
//! for every format.

use std::collections::BTreeMap;

use crate::lake::commit::CommitError;

/// The folder under a table where compactions write, in every format.
pub const COMPACTED: &str = "_compacted";

/// How long `vacuum` keeps what a table's versions stopped reading, unless told: seven days,
/// Delta's `delta.deletedFileRetentionDuration`.
pub const DEFAULT_RETENTION_MS: i64 = 7 * DAY_MS;
pub(crate) const DAY_MS: i64 = 24 * 3600 * 1000;

/// The least age of a file that no version of its table references (a compaction's, or a
/// commit's that stopped before its swap) before `vacuum` counts it as left over: a
/// compaction or commit still running keeps its files.
pub const ORPHAN_GRACE_MS: i64 = DAY_MS;

/// What a vacuum at `now_ms` keeping `retention_ms` may delete: files a version stopped
/// reading at or before the first cutoff, and files no version references written at or
/// before the second (the retention, and at least [`ORPHAN_GRACE_MS`]).
pub fn cutoffs(now_ms: i64, retention_ms: i64) -> (i64, i64) {
    (
        now_ms.saturating_sub(retention_ms.max(0)),
        now_ms.saturating_sub(retention_ms.max(ORPHAN_GRACE_MS)),
    )
}

/// The application id of a pipeline in its tables' commits: its slot (or journal), on its
/// database. A table says how far it holds the commit log under this id.
pub fn app_id(database: &str, slot: &str) -> String {
    format!("tributary:{database}/{slot}")
}

/// A table as a reader of its latest version finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableView {
    /// The latest version; `None` before the table's first commit.
    pub version: Option<u64>,
    /// The latest commit entry of the pipeline the table holds.
    pub holds: Option<u64>,
    /// The data files a reader reads, by path relative to the table.
    pub files: BTreeMap<String, LiveFile>,
}

/// A data file a table's version reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveFile {
    pub bytes: u64,
    /// Its rows, when the table's metadata says.
    pub rows: Option<u64>,
}

/// What verify says of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableAudit {
    pub output: String,
    /// The latest version; `None` when the table has no log.
    pub version: Option<u64>,
    /// The latest commit entry the table holds.
    pub holds: Option<u64>,
    /// Entries with files of the output that are past what the table holds: flushes a running
    /// pipeline is still publishing (or that a stopped one left for its next start).
    pub behind: Vec<u64>,
    /// Defects, one sentence each.
    pub problems: Vec<String>,
    /// The checkpoint the audit started from, when the commits before it are gone.
    pub base: Option<u64>,
}

/// What compacting one table did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    pub output: String,
    /// The version of the compaction's commit; `None` when there was nothing to compact.
    pub version: Option<u64>,
    pub replaced: usize,
    pub replaced_bytes: u64,
    pub written: usize,
    pub written_bytes: u64,
    pub rows: u64,
    /// Why the table was left alone, when it was.
    pub left_alone: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error("compacting {output}: {path}: {reason}")]
    File {
        output: String,
        path: String,
        reason: String,
    },
    #[error(
        "compacting {output}: another compaction committed meanwhile (the table is at version {version}) and replaced {path}, which this one rewrote: nothing of this compaction was committed; run tributary compact again if files are left to compact"
    )]
    Concurrent {
        output: String,
        version: u64,
        path: String,
    },
}

/// A file in a table's folder, as the store lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Present {
    pub size: u64,
    /// When it was written, in milliseconds since the epoch.
    pub modified_ms: i64,
}

/// What a vacuum of one table does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Files to delete (relative to the table) and their sizes: removed ones, then left-over
    /// ones of compactions.
    pub delete: Vec<(String, u64)>,
    /// How many of them no commit named (a compaction's that did not commit).
    pub orphans: usize,
    /// Removed files still within the retention, and their bytes.
    pub waiting: usize,
    pub waiting_bytes: u64,
}

/// A table a vacuum read: what it would delete, and the commit entry its latest version
/// holds; or why it must be left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vacuumable {
    Plan { plan: Plan, holds: Option<u64> },
    LeftAlone(String),
}

/// A retention written for people: a whole number and a unit, `s`, `m`, `h` or `d`
/// (`7d`, `168h`, `0s`), in milliseconds.
pub fn parse_retention(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| {
        format!(
            "{text:?} is not a retention: write a whole number and a unit, such as 7d, 168h or 30m"
        )
    })?;
    let unit_ms = match unit.trim() {
        "s" => 1000,
        "m" => 60 * 1000,
        "h" => 3600 * 1000,
        "d" => DAY_MS,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use s, m, h or d, such as 7d or 168h)"
            ));
        }
    };
    number
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long a retention"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_read_like_people_write_them() {
        assert_eq!(parse_retention("7d"), Ok(DEFAULT_RETENTION_MS));
        assert_eq!(parse_retention("168h"), Ok(DEFAULT_RETENTION_MS));
        assert_eq!(parse_retention("0s"), Ok(0));
        assert_eq!(parse_retention("30m"), Ok(1_800_000));
        assert!(parse_retention("7").unwrap_err().contains("unknown unit"));
        assert!(parse_retention("d").unwrap_err().contains("whole number"));
        assert!(parse_retention("2w").unwrap_err().contains("unknown unit"));
    }
}
