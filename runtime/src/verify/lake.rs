//! The lake as the sink holds it, read through the [`Sink`](crate::sink::Sink) and
//! [`CommitLog`] the pipeline writes with: the data files present, the intents, the commit
//! entries and the files they name.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;

use super::report::{Committed, Files};
use crate::commit::{CommitEntry, CommitError, CommitLog, STATE_PREFIX};
use crate::sink::SinkError;

/// How many entries or files are fetched at once.
pub(super) const FETCH_AHEAD: usize = 8;

/// What the sink holds, read in the order that keeps a running pipeline from making a file
/// look orphaned: data files first, then intents, then entries. A file listed before its
/// flush commits is named by its intent (written before any data file) or, if the intent is
/// gone, by its entry (written before the intent is deleted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    pub entries: Vec<CommitEntry>,
    /// Every data file the entries name, in log order.
    pub committed: Vec<Committed>,
    /// Data files in the sink (`<output>/*.parquet`), path to size.
    pub present: BTreeMap<String, u64>,
    /// Files intents name.
    pub intended: BTreeSet<String>,
}

impl Survey {
    /// Read the sink of `log`; only `output`'s files when it is given.
    pub async fn read(log: &CommitLog, output: Option<&str>) -> Result<Survey, CommitError> {
        let sink = log.sink();
        let mut present = BTreeMap::new();
        for folder in sink.list_dir(None).await?.folders {
            if folder == STATE_PREFIX || output.is_some_and(|o| o != folder) {
                continue;
            }
            let listing = sink.list_dir(Some(&Path::from(folder.as_str()))).await?;
            for (name, size) in listing.objects {
                if name.ends_with(".parquet") {
                    present.insert(format!("{folder}/{name}"), size);
                }
            }
        }
        let intended = log
            .intents()
            .await?
            .into_iter()
            .flat_map(|i| i.files)
            .collect();
        let entries: Vec<CommitEntry> = futures::stream::iter(log.sequences().await?)
            .map(|sequence| log.read_entry(sequence))
            .buffered(FETCH_AHEAD)
            .try_filter_map(|entry| async move { Ok(entry) })
            .try_collect()
            .await?;
        let committed = entries
            .iter()
            .flat_map(|e| {
                e.files
                    .iter()
                    .filter(|f| output.is_none_or(|o| f.output == o))
                    .map(|f| Committed {
                        path: f.path.clone(),
                        output: f.output.clone(),
                        rows: f.rows,
                        bytes: f.bytes,
                        sequence: e.sequence,
                    })
            })
            .collect();
        Ok(Survey {
            entries,
            committed,
            present,
            intended,
        })
    }

    /// The defects visible without reading a file: committed files missing or of another
    /// size, files named by no entry; and the files in flight.
    pub fn files(&self) -> Files {
        let named: BTreeSet<&str> = self.committed.iter().map(|c| c.path.as_str()).collect();
        let mut files = Files {
            committed: self.committed.len(),
            ..Files::default()
        };
        for c in &self.committed {
            match self.present.get(&c.path) {
                None => files.missing.push(c.clone()),
                Some(&size) if size != c.bytes => files.wrong_size.push((c.clone(), size)),
                Some(_) => {}
            }
        }
        for (path, &size) in &self.present {
            if named.contains(path.as_str()) {
                continue;
            }
            match self.intended.contains(path) {
                true => files.in_flight.push(path.clone()),
                false => files.unnamed.push((path.clone(), size)),
            }
        }
        files
    }
}

/// A file's bytes, `None` when it is not there.
pub async fn fetch(log: &CommitLog, path: &str) -> Result<Option<Bytes>, SinkError> {
    log.sink().get(&Path::from(path)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(path: &str, bytes: u64) -> Committed {
        Committed {
            path: path.into(),
            output: "public.t".into(),
            rows: 1,
            bytes,
            sequence: 2,
        }
    }

    #[test]
    fn files_are_sorted_into_intact_missing_damaged_unnamed_and_in_flight() {
        let survey = Survey {
            entries: vec![],
            committed: vec![
                committed("public.t/a.parquet", 10),
                committed("public.t/b.parquet", 10),
                committed("public.t/c.parquet", 10),
            ],
            present: BTreeMap::from([
                ("public.t/a.parquet".to_owned(), 10),
                ("public.t/c.parquet".to_owned(), 9),
                ("public.t/d.parquet".to_owned(), 10),
                ("public.t/e.parquet".to_owned(), 10),
            ]),
            intended: BTreeSet::from(["public.t/e.parquet".to_owned()]),
        };
        let files = survey.files();
        assert_eq!(files.committed, 3);
        assert_eq!(files.missing, [committed("public.t/b.parquet", 10)]);
        assert_eq!(files.wrong_size, [(committed("public.t/c.parquet", 10), 9)]);
        assert_eq!(files.unnamed, [("public.t/d.parquet".to_owned(), 10)]);
        assert_eq!(files.in_flight, ["public.t/e.parquet"]);
        assert_eq!(files.defects(), 3);
    }
}
