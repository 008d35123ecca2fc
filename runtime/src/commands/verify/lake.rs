//! The lake as the sink holds it, read through the [`Sink`](crate::lake::sink::Sink) and
//! [`CommitLog`] the pipeline writes with: the data files present, the intents, the commit
//! entries and the files they name, and what those files hold; with tables, each output's
//! tables held against those entries ([`audit_tables`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;

use super::VerifyError;
use super::digest::Shape;
use super::read::{self, IdentityFile, ReadError, TableFile};
use super::replay::{self, ChangeId, Duplicate, Landed, RowAt};
use super::report::{Committed, Files};
use crate::lake::commit::{CommitEntry, CommitError, CommitLog, STATE_PREFIX};
use crate::lake::sink::SinkError;
use crate::lake::tables::{COMPACTED, MIRROR_SUFFIX, TableAudit, TableSet, TableView};

/// How many entries or files are fetched at once.
pub(super) const FETCH_AHEAD: usize = 8;

/// What the sink holds, read in the order that keeps a running pipeline from making a file
/// look orphaned: tables first, then data files, then intents, then entries. A file listed
/// before its flush commits is named by its intent (written before any data file) or, if the
/// intent is gone, by its entry (written before the intent is deleted).
///
/// An output's rows are read through its table, when it has one: the files a reader of its latest
/// version reads (a compaction's among them), and the files of entries the table does not
/// hold yet. The files a compaction replaced are not read again (their rows are in the files
/// that replaced them) and need not be there: `tributary vacuum` deletes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    pub entries: Vec<CommitEntry>,
    /// Every data file whose rows are read: the entries' files in log order (but those of
    /// entries a table holds), then each table's live files.
    pub committed: Vec<Committed>,
    /// Data files in the sink (`<output>/*.parquet`, and a table's
    /// `<output>/_compacted/*.parquet`), path to size.
    pub present: BTreeMap<String, u64>,
    /// Files intents name.
    pub intended: BTreeSet<String>,
    /// Files named by an entry that a table holds and no longer reads: replaced by a
    /// compaction, or dropped by a new version of the table.
    pub replaced: BTreeSet<String>,
}

impl Survey {
    /// Read the sink of `log`; only `output`'s files when it is given. Entries after `upto`
    /// (committed while the sink is read, by a pipeline that goes on running) are left out,
    /// their files counted as in flight: the listing, made first, may lack them. With `set`,
    /// outputs that are its tables are read through their tables.
    pub async fn read(
        log: &CommitLog,
        output: Option<&str>,
        upto: Option<u64>,
        set: Option<&TableSet>,
    ) -> Result<Survey, CommitError> {
        let sink = log.sink();
        let (names, tables) = match set {
            Some(set) => read_tables(set, output).await?,
            None => Default::default(),
        };
        let mut present = BTreeMap::new();
        for folder in sink.list_dir(None).await?.folders {
            if folder == STATE_PREFIX || output.is_some_and(|o| o != folder) {
                continue;
            }
            // A current-state table's files are its own, named by its table, not by commit
            // entries (the table's audit checks them).
            if folder.ends_with(MIRROR_SUFFIX) && names.contains(&folder) {
                continue;
            }
            let listing = sink.list_dir(Some(&Path::from(folder.as_str()))).await?;
            let mut objects = listing.objects;
            if tables.contains_key(&folder) {
                let compacted = Path::from(format!("{folder}/{COMPACTED}"));
                let listing = sink.list_dir(Some(&compacted)).await?;
                objects.extend(
                    listing
                        .objects
                        .into_iter()
                        .map(|(name, size)| (format!("{COMPACTED}/{name}"), size)),
                );
            }
            for (name, size) in objects {
                if name.ends_with(".parquet") {
                    present.insert(format!("{folder}/{name}"), size);
                }
            }
        }
        let mut intended: BTreeSet<String> = log
            .intents()
            .await?
            .into_iter()
            .flat_map(|i| i.files)
            .collect();
        let mut entries: Vec<CommitEntry> = futures::stream::iter(log.sequences().await?)
            .map(|sequence| log.read_entry(sequence))
            .buffered(FETCH_AHEAD)
            .try_filter_map(|entry| async move { Ok(entry) })
            .try_collect()
            .await?;
        // The entry that names each file, for reports (entries after `upto` included: a
        // table may hold them already).
        let named: HashMap<&str, u64> = entries
            .iter()
            .flat_map(|e| e.files.iter().map(move |f| (f.path.as_str(), e.sequence)))
            .collect();
        let held = |output: &str, sequence: u64| {
            tables
                .get(output)
                .is_some_and(|t| t.holds.is_some_and(|h| h >= sequence))
        };
        let mut committed = Vec::new();
        let mut replaced = BTreeSet::new();
        for e in &entries {
            for f in e
                .files
                .iter()
                .filter(|f| output.is_none_or(|o| f.output == o))
            {
                if held(&f.output, e.sequence) {
                    replaced.insert(f.path.clone());
                    continue;
                }
                if upto.is_some_and(|u| e.sequence > u) {
                    continue;
                }
                committed.push(Committed {
                    path: f.path.clone(),
                    output: f.output.clone(),
                    rows: f.rows,
                    bytes: f.bytes,
                    sequence: e.sequence,
                });
            }
        }
        for (name, table) in &tables {
            for (file, live) in &table.files {
                let path = format!("{name}/{file}");
                replaced.remove(&path);
                committed.push(Committed {
                    sequence: named
                        .get(path.as_str())
                        .copied()
                        .unwrap_or(table.holds.unwrap_or(0)),
                    path,
                    output: name.clone(),
                    rows: live.rows.unwrap_or(0),
                    bytes: live.bytes,
                });
            }
        }
        drop(named);
        if let Some(upto) = upto {
            let later = entries.iter().position(|e| e.sequence > upto);
            for entry in entries.drain(later.unwrap_or(entries.len())..) {
                intended.extend(entry.files.into_iter().map(|f| f.path));
            }
        }
        Ok(Survey {
            entries,
            committed,
            present,
            intended,
            replaced,
        })
    }

    /// Where a landed row is, for people: its file and row.
    pub fn location(&self, at: RowAt) -> String {
        let path = self
            .committed
            .get(at.file as usize)
            .map_or("?", |c| c.path.as_str());
        format!("{path} row {}", at.row)
    }

    /// The defects visible without reading a file: committed files missing or of another
    /// size, files named by no entry; and the files in flight.
    pub fn files(&self) -> Files {
        let named: BTreeSet<&str> = self
            .committed
            .iter()
            .map(|c| c.path.as_str())
            .chain(self.replaced.iter().map(String::as_str))
            .collect();
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
            // A compaction's file that is no longer read: replaced by a later compaction, or
            // left by one that did not commit. `tributary vacuum` deletes both.
            if named.contains(path.as_str()) || path.contains(&format!("/{COMPACTED}/")) {
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

/// The sink's tables by name, and the latest version of the outputs' tables (not
/// current-state tables), or only `output`'s.
async fn read_tables(
    set: &TableSet,
    output: Option<&str>,
) -> Result<(BTreeSet<String>, BTreeMap<String, TableView>), CommitError> {
    let names: BTreeSet<String> = set.names().await?.into_iter().collect();
    let mut tables = BTreeMap::new();
    for name in &names {
        if name.ends_with(MIRROR_SUFFIX) || output.is_some_and(|o| o != name) {
            continue;
        }
        tables.insert(name.clone(), set.latest(name).await?);
    }
    Ok((names, tables))
}

/// A file's bytes, `None` when it is not there.
pub async fn fetch(log: &CommitLog, path: &str) -> Result<Option<Bytes>, SinkError> {
    log.sink().get(&Path::from(path)).await
}

/// What the committed files held.
#[derive(Default)]
pub struct Lake {
    /// A compared table's landed changes, by table.
    pub tables: HashMap<String, Vec<Landed>>,
    /// Every other output's identities, by output.
    pub identities: HashMap<String, Vec<(ChangeId, RowAt)>>,
    /// Rows landed per output.
    pub rows: BTreeMap<String, u64>,
    /// Duplicates per output (filled by the replay for compared tables).
    pub duplicates: HashMap<String, Vec<Duplicate>>,
    pub files: Files,
}

enum FileRead {
    Table(TableFile),
    Ids(IdentityFile),
}

/// Read the committed files `files` (positions in the survey's list), at most
/// [`FETCH_AHEAD`] at once, parsing on blocking threads; `each` takes them in order.
/// `None`: the file was gone by the time it was read.
async fn read_files(
    log: &CommitLog,
    survey: &Survey,
    files: &[usize],
    shapes: &HashMap<String, Arc<Shape>>,
    toast: bool,
    mut each: impl FnMut(usize, Option<Result<FileRead, ReadError>>),
) -> Result<(), VerifyError> {
    let mut reads = futures::stream::iter(files.iter().copied())
        .map(|i| {
            let file = &survey.committed[i];
            let shape = shapes.get(&file.output).cloned();
            async move {
                let Some(bytes) = fetch(log, &file.path).await? else {
                    return Ok::<_, VerifyError>((i, None));
                };
                let read = tokio::task::spawn_blocking(move || match shape {
                    Some(shape) => {
                        read::table_file(bytes, &shape, i as u32, toast).map(FileRead::Table)
                    }
                    None => read::identity_file(bytes, i as u32).map(FileRead::Ids),
                })
                .await
                .map_err(|e| VerifyError::Task(e.to_string()))?;
                Ok((i, Some(read)))
            }
        })
        .buffered(FETCH_AHEAD);
    while let Some(done) = reads.next().await {
        let (i, read) = done?;
        each(i, read);
    }
    Ok(())
}

/// Read every committed file that is present: compared tables' files as changes, the rest as
/// identities; files that cannot be read or hold other rows than their entry says are
/// defects. A table whose lake holds unchanged TOAST values is read a second time, keeping
/// the digests of the cells that may be such values (a cost only such lakes pay).
pub async fn read_lake(
    log: &CommitLog,
    survey: &Survey,
    shapes: &HashMap<String, Arc<Shape>>,
) -> Result<Lake, VerifyError> {
    let mut lake = Lake {
        files: survey.files(),
        ..Lake::default()
    };
    let present: Vec<usize> = (0..survey.committed.len())
        .filter(|&i| survey.present.contains_key(&survey.committed[i].path))
        .collect();
    // Room for every change at once: a vector that doubles as it goes holds up to twice that.
    let mut expected: HashMap<&str, usize> = HashMap::new();
    for &i in &present {
        let file = &survey.committed[i];
        if shapes.contains_key(&file.output) {
            *expected.entry(&file.output).or_default() += file.rows as usize;
        }
    }
    for (output, rows) in expected {
        lake.tables
            .insert(output.to_owned(), Vec::with_capacity(rows));
    }
    let mut toasted = std::collections::BTreeSet::new();
    read_files(log, survey, &present, shapes, false, |i, read| {
        let file = &survey.committed[i];
        let rows = match read {
            None => {
                lake.files.missing.push(file.clone());
                return;
            }
            Some(Err(e)) => {
                lake.files.unreadable.push((file.clone(), e.to_string()));
                return;
            }
            Some(Ok(FileRead::Table(t))) => {
                if t.unchanged {
                    toasted.insert(file.output.clone());
                }
                let landed = lake.tables.entry(file.output.clone()).or_default();
                landed.extend(t.landed);
                t.rows
            }
            Some(Ok(FileRead::Ids(ids))) => {
                let seen = lake.identities.entry(file.output.clone()).or_default();
                seen.extend(ids.ids);
                ids.rows
            }
        };
        *lake.rows.entry(file.output.clone()).or_default() += rows;
        if rows != file.rows {
            lake.files.wrong_rows.push((file.clone(), rows));
        }
    })
    .await?;
    if !toasted.is_empty() {
        let again: Vec<usize> = present
            .iter()
            .copied()
            .filter(|&i| toasted.contains(&survey.committed[i].output))
            .collect();
        for output in &toasted {
            lake.tables.insert(output.clone(), Vec::new());
        }
        read_files(log, survey, &again, shapes, true, |i, read| {
            if let Some(Ok(FileRead::Table(t))) = read {
                let output = &survey.committed[i].output;
                let landed = lake.tables.entry(output.clone()).or_default();
                landed.extend(t.landed);
            }
        })
        .await?;
    }
    for (output, ids) in &mut lake.identities {
        let duplicates = replay::sort_and_find_duplicates(ids, |x| *x);
        lake.duplicates.insert(output.clone(), duplicates);
    }
    Ok(lake)
}

/// Each output's table held against the entries verify read. The entries a current-state
/// table the pipeline does not keep (`kept` says which outputs it keeps them of) lacks are not
/// called on their way: nothing publishes them.
pub(super) async fn audit_tables(
    set: &TableSet,
    survey: &Survey,
    only: Option<&str>,
    kept: impl Fn(&str) -> bool,
) -> Result<Vec<TableAudit>, VerifyError> {
    let mut outputs: BTreeMap<&str, BTreeMap<u64, BTreeSet<String>>> = BTreeMap::new();
    for entry in &survey.entries {
        for file in &entry.files {
            let relative = file
                .path
                .strip_prefix(&format!("{}/", file.output))
                .unwrap_or(&file.path)
                .to_owned();
            outputs
                .entry(file.output.as_str())
                .or_default()
                .entry(entry.sequence)
                .or_default()
                .insert(relative);
        }
    }
    let mut audits = Vec::new();
    for (output, entries) in outputs {
        if only.is_some_and(|o| o != output) {
            continue;
        }
        audits.extend(set.audit(output, &entries).await?);
        let sequences = entries.keys().copied().collect();
        if let Some(mut audit) = set.audit_current(output, &sequences).await? {
            if !kept(output) {
                audit.behind.clear();
            }
            audits.push(audit);
        }
    }
    Ok(audits)
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
                ("public.t/f.parquet".to_owned(), 10),
                ("public.t/_compacted/g.parquet".to_owned(), 10),
            ]),
            intended: BTreeSet::from(["public.t/e.parquet".to_owned()]),
            replaced: BTreeSet::from(["public.t/f.parquet".to_owned()]),
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
