//! Which changes in an output's change-log table were committed after a load's snapshot
//! ([`Overtaken`] says why a chunk of the load needs them), found without reading the table's
//! history.
//!
//! The flush a data file belongs to is in its name (`part-<sequence>-…`), and the stream's
//! flushes land in commit order, so walking the files from the newest flush back, the first
//! streamed flush whose changes were all committed at or before the snapshot ends the walk:
//! every one before it was too. A file's footer says which it is (the largest `_commit_lsn`,
//! and an `_xid` of 0 throughout for a load's chunk, which the walk steps over), so the walk
//! reads two byte ranges per file, and whole only the files that hold later changes. Files
//! without a flush in their name (a compaction's) are judged by their footer alone. What was
//! read is remembered by path, since files never change: a load's chunks one after another
//! read each footer once.

use std::collections::HashMap;
use std::sync::Mutex;

use object_store::path::Path;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;

use super::current::{self, Logged, data};
use super::file::footer;
use super::keyed::{Change, MirrorError, Overtaken, mirror_schema};
use crate::lake::sink::Sink;

/// What the walks learnt of each file they read, by output and path (relative to the sink).
#[derive(Default)]
pub struct Seen(Mutex<HashMap<String, HashMap<String, Summary>>>);

#[derive(Clone)]
struct Summary {
    /// The largest `_commit_lsn` in the file (`None`: its footer does not say).
    last: Option<u64>,
    /// Every row has `_xid` 0: a load's chunk.
    load: bool,
    /// Its changes, once the file was read whole, with their positions.
    changes: Option<Vec<(u64, Change)>>,
}

/// The changes in `output`'s change-log table committed after `snapshot`; `files` are the
/// table's live data files (paths relative to it) with their sizes.
pub async fn overtaken(
    sink: &Sink,
    output: &str,
    files: &[(String, u64)],
    snapshot: u64,
    keys: &[String],
    seen: &Seen,
) -> Result<Overtaken, MirrorError> {
    let mut flushes: Vec<(u64, &str, u64)> = Vec::new();
    let mut unnumbered: Vec<(&str, u64)> = Vec::new();
    for (path, size) in files {
        match flush_of(path) {
            Some(flush) => flushes.push((flush, path, *size)),
            None => unnumbered.push((path, *size)),
        }
    }
    flushes.sort_unstable_by(|a, b| b.cmp(a));
    let mut known = seen
        .0
        .lock()
        .expect("not poisoned")
        .remove(output)
        .unwrap_or_default();
    let mut kept = HashMap::new();
    let mut found = Overtaken::default();
    let mut walk = Walk {
        sink,
        output,
        snapshot,
        keys,
        known: &mut known,
        kept: &mut kept,
        found: &mut found,
    };
    for (relative, size) in unnumbered {
        walk.visit(relative, size).await?;
    }
    for (_, relative, size) in flushes {
        if walk.visit(relative, size).await? == Visited::Before {
            break;
        }
    }
    seen.0
        .lock()
        .expect("not poisoned")
        .insert(output.to_owned(), kept);
    Ok(found)
}

#[derive(PartialEq)]
enum Visited {
    /// A load's chunk, or a file holding changes after the snapshot: the walk goes on.
    Passed,
    /// A streamed flush committed wholly at or before the snapshot: so was every earlier one.
    Before,
}

struct Walk<'a> {
    sink: &'a Sink,
    output: &'a str,
    snapshot: u64,
    keys: &'a [String],
    /// What earlier walks read, and what this one keeps for the next.
    known: &'a mut HashMap<String, Summary>,
    kept: &'a mut HashMap<String, Summary>,
    found: &'a mut Overtaken,
}

impl Walk<'_> {
    async fn visit(&mut self, relative: &str, size: u64) -> Result<Visited, MirrorError> {
        let path = format!("{}/{relative}", self.output);
        let mut summary = match self.known.remove(&path) {
            Some(summary) => summary,
            None => summarize(self.sink, &path, size).await?,
        };
        let visited = match summary.last {
            Some(last) if last <= self.snapshot && summary.load => Visited::Passed,
            Some(last) if last <= self.snapshot => Visited::Before,
            _ => {
                if summary.changes.is_none() {
                    summary.changes = Some(self.read(&path).await?);
                }
                for (lsn, change) in summary.changes.iter().flatten() {
                    if *lsn > self.snapshot {
                        self.found.note(change);
                    }
                }
                Visited::Passed
            }
        };
        self.kept.insert(path, summary);
        Ok(visited)
    }

    async fn read(&self, path: &str) -> Result<Vec<(u64, Change)>, MirrorError> {
        let batches = current::read_batches(self.sink, path).await?;
        let Some(first) = batches.first() else {
            return Ok(Vec::new());
        };
        let schema = mirror_schema(&first.schema());
        Ok(current::changes(&batches, self.keys, &schema)?
            .into_iter()
            .map(|Logged { change, lsn, .. }| (lsn, change))
            .collect())
    }
}

/// The flush a change-log data file belongs to, from its name.
pub fn flush_of(relative: &str) -> Option<u64> {
    let name = relative.rsplit('/').next()?;
    let digits = name.strip_prefix("part-")?.get(..20)?;
    digits.parse().ok()
}

async fn summarize(sink: &Sink, path: &str, size: u64) -> Result<Summary, MirrorError> {
    let metadata = footer(sink, &Path::from(path), size, None)
        .await
        .map_err(|e| data(path, e.to_string()))?;
    Ok(Summary {
        last: largest(&metadata, "_commit_lsn"),
        load: largest(&metadata, "_xid") == Some(u64::from(crate::stream::load::LOAD_XID)),
        changes: None,
    })
}

/// The largest value of the integer column `name` over the file's row groups, when every row
/// group's statistics say.
fn largest(metadata: &ParquetMetaData, name: &str) -> Option<u64> {
    let column = metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().string() == name)?;
    let mut largest = None;
    for group in metadata.row_groups() {
        let max = match group.column(column).statistics()? {
            Statistics::Int64(v) => *v.max_opt()? as u64,
            Statistics::Int32(v) => *v.max_opt()? as u32 as u64,
            _ => return None,
        };
        largest = largest.max(Some(max));
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_files_flush_is_in_its_name() {
        assert_eq!(
            flush_of("part-00000000000000000042-0a1b2c.parquet"),
            Some(42)
        );
        assert_eq!(
            flush_of("_commit_date=2026-12-05/part-00000000000000000007-x.parquet"),
            Some(7)
        );
        assert_eq!(flush_of("_compacted/0a1b2c.parquet"), None);
    }
}
