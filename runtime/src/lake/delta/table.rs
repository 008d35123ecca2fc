//! The Delta tables of a sink, read and appended to through the object store.
//!
//! Each output is a table at `<sink>/<output>/`, its log in `<output>/_delta_log/`. A commit
//! is created with put-if-absent, so two writers never both take a version; the loser reads
//! what won and, when that is not its own flush already, tries the next version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use object_store::path::Path;

use super::actions::{Action, commit_file, parse_commit};
use super::audit;
use super::checkpoint;
use super::state::{Appender, TableError, TableFile, TableState};
use crate::lake::commit::{CommitError, CommitLog, FileEntry, Writer};
use crate::lake::sink::{Created, Sink};

/// The object that holds version `version` of `output`'s log.
pub fn commit_path(output: &str, version: u64) -> Path {
    Path::from(format!("{output}/_delta_log/{version:020}.json"))
}

/// The application id of a pipeline's commits: its slot, on its database.
pub fn app_id(database: &str, slot: &str) -> String {
    format!("tributary:{database}/{slot}")
}

/// What a table whose `txn` is past the flush being appended means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Later {
    /// Another instance appended after this writer lost the pipeline: stop.
    TakenOver,
    /// The table holds the flush already. Every writer appends its flushes in order, and a
    /// start catches up before its first flush, so a table holding a later flush of the
    /// pipeline holds every earlier one. A catch-up meets such tables: an entry names through
    /// which flush the tables were up to date when it was written, and the writer before
    /// went on publishing the entries it had committed meanwhile.
    Holds,
}

/// The sink's Delta tables as one writer appends to them; what it last read of each table is
/// kept, so an append reads nothing when no one else wrote.
#[derive(Clone)]
pub struct Tables {
    sink: Sink,
    appender: Appender,
    writer: Writer,
    states: Arc<Mutex<BTreeMap<String, TableState>>>,
}

impl Tables {
    pub fn new(sink: Sink, app_id: String, writer: Writer) -> Tables {
        Tables {
            sink,
            appender: Appender {
                app_id,
                engine: format!("tributary {}", env!("CARGO_PKG_VERSION")),
            },
            writer,
            states: Arc::default(),
        }
    }

    pub fn app_id(&self) -> &str {
        &self.appender.app_id
    }

    /// `output`'s table as its log is now, read on from `from` (a state read earlier).
    pub async fn read(&self, output: &str, from: TableState) -> Result<TableState, CommitError> {
        read_table(&self.sink, output, from).await
    }

    /// Append the files of flush `sequence` to their outputs' tables, each table in one commit
    /// whose `txn` version is `sequence`. A table that holds `sequence` already (an attempt
    /// whose reply was lost, or another instance's catch-up) is left as it is; one that holds
    /// a later flush of this pipeline means another instance took over.
    pub async fn publish(&self, sequence: u64, files: &[TableFile]) -> Result<(), CommitError> {
        self.publish_as(sequence, files, Later::TakenOver).await
    }

    async fn publish_as(
        &self,
        sequence: u64,
        files: &[TableFile],
        later: Later,
    ) -> Result<(), CommitError> {
        let mut by_output: BTreeMap<&str, Vec<&TableFile>> = BTreeMap::new();
        for file in files {
            by_output.entry(&file.output).or_default().push(file);
        }
        let appends = by_output
            .into_iter()
            .map(|(output, files)| self.append(output, sequence, files, later));
        futures::future::try_join_all(appends).await?;
        Ok(())
    }

    async fn append(
        &self,
        output: &str,
        sequence: u64,
        files: Vec<&TableFile>,
        later: Later,
    ) -> Result<(), CommitError> {
        let cached = self
            .states
            .lock()
            .expect("not poisoned")
            .get(output)
            .cloned();
        let mut state = match cached {
            Some(state) => state,
            None => self.read(output, TableState::default()).await?,
        };
        loop {
            match state.txn(self.app_id()) {
                Some(v) if v == sequence => break,
                Some(theirs) if theirs > sequence && later == Later::Holds => break,
                Some(theirs) if theirs > sequence => {
                    return Err(CommitError::TableAhead {
                        output: output.to_owned(),
                        ours: sequence,
                        theirs,
                        writer: Box::new(self.writer.clone()),
                    });
                }
                _ => {}
            }
            let now_ms = crate::clock::unix_micros() / 1000;
            let actions = self
                .appender
                .append(&state, sequence, &files, output, now_ms, new_table_id)
                .map_err(|source| CommitError::Table {
                    output: output.to_owned(),
                    sequence,
                    source,
                })?;
            let version = state.next_version();
            let path = commit_path(output, version);
            match self.sink.create(&path, commit_file(&actions)).await? {
                Created::New => {
                    state
                        .apply(version, actions)
                        .map_err(|source| CommitError::Table {
                            output: output.to_owned(),
                            sequence,
                            source,
                        })?;
                    crate::failpoint::reached("delta.after-table").await;
                    if checkpoint::due(version) {
                        self.checkpoint(output, version, &state).await;
                    }
                    break;
                }
                // Someone else took the version (a compaction, another instance), or an
                // earlier attempt of ours did: read what is there and decide again.
                Created::Existed => state = self.read(output, state).await?,
            }
        }
        self.states
            .lock()
            .expect("not poisoned")
            .insert(output.to_owned(), state);
        Ok(())
    }
}

impl Tables {
    /// Write the checkpoint of `output` at `version` (the state after it) and point
    /// `_last_checkpoint` at it. A failure is told and otherwise ignored: readers replay the
    /// commits instead, and the next checkpoint covers them.
    async fn checkpoint(&self, output: &str, version: u64, state: &TableState) {
        let (bytes, size) = checkpoint::checkpoint(state);
        let path = Path::from(format!(
            "{output}/_delta_log/{version:020}.checkpoint.parquet"
        ));
        let last = Path::from(format!("{output}/_delta_log/_last_checkpoint"));
        let written = match self.sink.create(&path, bytes).await {
            Ok(_) => {
                self.sink
                    .replace(&last, checkpoint::last_checkpoint(version, size))
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::warn!(%output, version, error = %e, "could not write the Delta table's checkpoint; readers replay its commits instead");
        }
    }
}

/// Bring every table up to the commit log: publish the files of each entry after `through` up
/// to `upto` (reading their schemas from the files' footers), as the writer that wrote them
/// would have. Tables that hold an entry already are left as they are. Returns how many
/// entries had files.
pub async fn catch_up(
    log: &CommitLog,
    tables: &Tables,
    through: Option<u64>,
    upto: u64,
) -> Result<u64, CommitError> {
    let from = through.map_or(1, |t| t + 1);
    let mut published = 0;
    for sequence in from..=upto {
        let Some(entry) = log.read_entry(sequence).await? else {
            continue;
        };
        if entry.files.is_empty() {
            continue;
        }
        if through.is_none() {
            return Err(CommitError::NotTables { sequence });
        }
        if published == 0 {
            tracing::info!(
                from = sequence,
                to = upto,
                "bringing the Delta tables up to the commit log: the last run stopped between a commit entry and its tables"
            );
        }
        let sink = log.sink();
        let files = entry.files.iter().map(|f| file_from_footer(sink, f));
        let files = futures::future::try_join_all(files).await?;
        tables.publish_as(sequence, &files, Later::Holds).await?;
        published += 1;
    }
    Ok(published)
}

/// The outputs of the sink that are Delta tables (a folder with a `_delta_log`), by name.
pub async fn table_names(sink: &Sink) -> Result<Vec<String>, CommitError> {
    let mut names = Vec::new();
    for folder in sink.list_dir(None).await?.folders {
        if folder.starts_with(crate::lake::commit::STATE_PREFIX) {
            continue;
        }
        let inside = sink.list_dir(Some(&Path::from(folder.as_str()))).await?;
        if inside.folders.iter().any(|f| f == "_delta_log") {
            names.push(folder);
        }
    }
    names.sort();
    Ok(names)
}

/// Hold `output`'s table against the commit log: `entries` are the entries with files of the
/// output, each with its files' paths relative to the table (see [`audit::audit`]).
pub async fn audit_table(
    sink: &Sink,
    output: &str,
    app_id: &str,
    entries: &BTreeMap<u64, BTreeSet<String>>,
) -> Result<audit::TableAudit, CommitError> {
    let log_dir = Path::from(format!("{output}/_delta_log"));
    let mut listed: Vec<u64> = sink
        .list_names(&log_dir)
        .await?
        .iter()
        .filter_map(|n| n.strip_suffix(".json")?.parse().ok())
        .collect();
    listed.sort_unstable();
    let mut state = TableState::default();
    let mut read = Vec::new();
    loop {
        let version = state.next_version();
        let path = commit_path(output, version);
        let Some(bytes) = sink.get(&path).await? else {
            break;
        };
        let corrupt = |reason: String| CommitError::Corrupt {
            path: path.to_string(),
            reason,
        };
        let actions = parse_commit(&bytes).map_err(corrupt)?;
        let mut seen = audit::Version {
            version,
            txn: None,
            adds: BTreeSet::new(),
        };
        for action in &actions {
            match action {
                Action::Txn(t) if t.app_id == app_id => seen.txn = Some(t.version),
                Action::Add(a) if a.data_change => {
                    seen.adds.insert(a.path.clone());
                }
                _ => {}
            }
        }
        state
            .apply(version, actions)
            .map_err(|e: TableError| corrupt(e.to_string()))?;
        read.push(seen);
    }
    let present = sink
        .list_dir(Some(&Path::from(output)))
        .await?
        .objects
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let live = state.files.keys().cloned().collect();
    Ok(audit::audit(
        output, &listed, &read, &live, &present, entries,
    ))
}

/// Read `output`'s log on from `state`: each next version until one is missing.
pub async fn read_table(
    sink: &Sink,
    output: &str,
    mut state: TableState,
) -> Result<TableState, CommitError> {
    loop {
        let version = state.next_version();
        let path = commit_path(output, version);
        let Some(bytes) = sink.get(&path).await? else {
            return Ok(state);
        };
        let corrupt = |reason: String| CommitError::Corrupt {
            path: path.to_string(),
            reason,
        };
        let actions = parse_commit(&bytes).map_err(corrupt)?;
        state
            .apply(version, actions)
            .map_err(|e: TableError| corrupt(e.to_string()))?;
    }
}

/// What a landed data file brings to its table, read from its Parquet footer: for flushes
/// committed to the log but not yet to their tables when the writer stopped.
pub async fn file_from_footer(sink: &Sink, file: &FileEntry) -> Result<TableFile, CommitError> {
    let path = Path::from(file.path.as_str());
    let corrupt = |reason: String| CommitError::Corrupt {
        path: file.path.clone(),
        reason,
    };
    let size = file.bytes;
    if size < 12 {
        return Err(corrupt(format!("{size} bytes is too short for Parquet")));
    }
    let tail = sink.get_range(&path, size - 8..size).await?;
    let footer = u32::from_le_bytes(tail[..4].try_into().expect("four bytes")) as u64;
    if &tail[4..] != b"PAR1" || footer + 8 > size {
        return Err(corrupt("does not end in a Parquet footer".into()));
    }
    let metadata = sink.get_range(&path, size - 8 - footer..size - 8).await?;
    let metadata = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&metadata)
        .map_err(|e| corrupt(format!("its Parquet footer: {e}")))?;
    let meta = metadata.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(meta.schema_descr(), meta.key_value_metadata())
            .map_err(|e| corrupt(format!("its Parquet schema: {e}")))?;
    Ok(TableFile {
        output: file.output.clone(),
        path: file.path.clone(),
        size,
        rows: file.rows,
        schema: Arc::new(schema),
    })
}

/// A random (version 4) UUID, the id a new table's metadata takes.
fn new_table_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the system's random source");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};
    use object_store::memory::InMemory;

    use super::*;

    fn file(sequence: u64) -> TableFile {
        TableFile {
            output: "public.t".into(),
            path: format!("public.t/part-{sequence}.parquet"),
            size: 10,
            rows: 1,
            schema: Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)])),
        }
    }

    #[tokio::test]
    async fn appends_are_idempotent_per_flush_and_a_writer_behind_another_is_stopped() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let app = app_id("db", "slot");
        let first = Tables::new(sink.clone(), app.clone(), Writer::named("aaaa"));
        first.publish(1, &[file(1)]).await.unwrap();
        first.publish(1, &[file(1)]).await.unwrap();
        first.publish(2, &[file(2)]).await.unwrap();
        let state = read_table(&sink, "public.t", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.version, Some(1), "one version per flush");
        assert_eq!(state.txn(&app), Some(2));

        // A second instance, starting without a cache, catches up a flush already there and
        // appends the next one after the first instance's versions.
        let second = Tables::new(sink.clone(), app.clone(), Writer::named("bbbb"));
        second.publish(2, &[file(2)]).await.unwrap();
        second.publish(3, &[file(3)]).await.unwrap();
        second.publish(4, &[file(4)]).await.unwrap();
        // The first instance, fenced, had committed flush 3 to the commit log: the table holds
        // a later flush than that, so it stops instead of adding a version after them.
        let err = first.publish(3, &[file(3)]).await.unwrap_err();
        assert!(
            matches!(
                err,
                CommitError::TableAhead {
                    ours: 3,
                    theirs: 4,
                    ..
                }
            ),
            "{err}"
        );
        let state = read_table(&sink, "public.t", TableState::default())
            .await
            .unwrap();
        assert_eq!(state.version, Some(3));
        assert_eq!(state.files.len(), 4);
        assert!(new_table_id().chars().nth(14) == Some('4'));
    }

    async fn txn(sink: &Sink) -> Option<u64> {
        read_table(sink, "public.t", TableState::default())
            .await
            .unwrap()
            .txn(&app_id("db", "slot"))
    }

    /// The writer before went on publishing entries its last entry did not count as
    /// published: the next start's catch-up finds the table past them and leaves it as it
    /// is, where a live writer meeting a later flush stops.
    #[tokio::test]
    async fn a_catch_up_leaves_a_table_that_holds_later_flushes_and_a_live_writer_stops() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let before = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("a"));
        for sequence in [2, 3] {
            before.publish(sequence, &[file(sequence)]).await.unwrap();
        }
        let next = Tables::new(sink.clone(), app_id("db", "slot"), Writer::named("b"));
        next.publish_as(2, &[file(2)], Later::Holds).await.unwrap();
        assert_eq!(txn(&sink).await, Some(3));
        assert!(
            sink.get(&commit_path("public.t", 2))
                .await
                .unwrap()
                .is_none()
        );

        let err = next.publish(2, &[file(2)]).await.unwrap_err();
        assert!(
            matches!(
                err,
                CommitError::TableAhead {
                    ours: 2,
                    theirs: 3,
                    ..
                }
            ),
            "{err}"
        );
        next.publish(4, &[file(4)]).await.unwrap();
        assert_eq!(txn(&sink).await, Some(4));
    }
}
