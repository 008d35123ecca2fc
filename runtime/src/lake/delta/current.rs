//! The current-state tables (`<output>__current`) of a sink, kept through the object store:
//! after a flush's files are in an output's change-log table, the same flush is applied to
//! its current-state table by copy-on-write ([`crate::lake::tables::current`] rewrites the
//! files) in one Delta commit with the same `txn` version. A table that does not exist yet, or
//! that missed flushes (mirroring was off meanwhile), is built from the whole change log
//! instead.

use std::collections::BTreeMap;

use object_store::path::Path;

use super::actions::{Action, Add, Remove, Txn, commit_file, parse_commit};
use super::mirror::{self, mirror_name};
use super::state::{TableError, TableState, schema_actions};
use crate::lake::commit::CommitError;
use crate::lake::sink::{Created, Sink};
use crate::lake::tables::current::{Flush, Live, Target, rewrite};
use crate::lake::tables::keyed::reduce;
use crate::lake::tables::overtaken::{Seen, overtaken};

pub use crate::lake::tables::current::{Asked, Mirrors, Preceding, Reload, delete_written};

/// What applying a flush to a current-state table writes: its commit's actions, and the new
/// files (deleted again when the commit loses its version); and the columns some of its rows
/// have no value of ([`Reload`]).
pub(super) struct Applied {
    pub actions: Vec<Action>,
    pub written: Vec<Path>,
    pub arriving: Vec<String>,
}

/// The rows to apply: one flush's files of the output, or (a new or stale current-state
/// table) every file of its change-log table.
pub(super) enum Rows<'a> {
    /// A flush's files; the change-log table holding them, which a load's chunk reads for
    /// the changes after its snapshot ([`overtaken`]).
    Flush {
        paths: &'a [&'a str],
        log: &'a TableState,
        seen: &'a Seen,
    },
    Rebuild(Vec<String>),
}

/// Plan and write the commit that applies `rows` (change-log files, paths relative to the
/// sink) to `output`'s current-state table in `state`, as transaction `txn` of `app_id`.
pub(super) async fn apply(
    sink: &Sink,
    mirrors: &Mirrors,
    output: &str,
    state: &TableState,
    rows: Rows<'_>,
    (app_id, txn): (&str, u64),
    now_ms: i64,
) -> Result<Applied, TableError> {
    let name = mirror_name(output);
    let paths: Vec<String> = match &rows {
        Rows::Flush { paths, .. } => paths.iter().map(|p| (*p).to_owned()).collect(),
        Rows::Rebuild(paths) => paths.clone(),
    };
    let mut flush = Flush::read(sink, &paths).await?;
    let rebuild = matches!(rows, Rows::Rebuild(_));
    let held = match (&state.schema, state.files.is_empty()) {
        (Some(schema), false) => Some(schema.fields.iter().map(|f| f.name.clone()).collect()),
        _ => None,
    };
    let arriving = flush.arriving(held.filter(|_| !rebuild), rebuild);
    let (snapshot, width) = (flush.snapshot(), flush.width());
    let changes = flush.changes();
    let reduced = match (&rows, snapshot) {
        (Rows::Flush { log, seen, .. }, Some(snapshot)) => {
            let files: Vec<(String, u64)> = log
                .files
                .values()
                .map(|a| (a.path.clone(), a.size))
                .collect();
            overtaken(sink, output, &files, snapshot, &flush.keys, seen)
                .await?
                .reduce(changes, width)?
        }
        _ => reduce(changes, width)?,
    };
    let keys = flush.keys.clone();
    let live: Vec<&Add> = state.files.values().collect();
    let bounded: Vec<Live> = live
        .iter()
        .map(|a| Live {
            path: a.path.clone(),
            size: a.size,
            bounds: mirror::bounds(a, &keys),
        })
        .collect();
    let target = Target {
        sink,
        name: &name,
        folder: "",
        mirrors,
        sequence: txn,
    };
    let rewritten = rewrite(&target, &bounded, flush, reduced, rebuild).await?;
    let mut actions = vec![merge_info(output, txn, now_ms)];
    let schema_actions = schema_actions(
        state,
        [&rewritten.schema],
        now_ms,
        super::table::new_table_id,
    );
    match schema_actions {
        Ok(more) => actions.extend(more),
        Err(e) => {
            delete_written(sink, &rewritten.written).await;
            return Err(e);
        }
    }
    let removed: Vec<&Add> = rewritten.removed.iter().map(|&i| live[i]).collect();
    let adds = rewritten
        .added
        .into_iter()
        .map(|f| Add {
            path: f.path,
            partition_values: BTreeMap::new(),
            size: f.size,
            modification_time: now_ms,
            data_change: true,
            stats: Some(mirror::stats_json(&keys, &f.stats)),
        })
        .collect();
    actions.extend(closing(&removed, adds, (app_id, txn), now_ms));
    Ok(Applied {
        actions,
        written: rewritten.written,
        arriving,
    })
}

/// The commit's `commitInfo`: a merge of `output`'s flush `txn`.
fn merge_info(output: &str, txn: u64, now_ms: i64) -> Action {
    Action::CommitInfo(serde_json::json!({
        "timestamp": now_ms,
        "operation": "MERGE",
        "operationParameters": { "source": output, "epochId": txn.to_string() },
        "isBlindAppend": false,
        "engineInfo": format!("tributary {}", env!("CARGO_PKG_VERSION")),
    }))
}

/// The commit's last actions: the files it replaces removed, the new ones added, and the
/// application's transaction version.
fn closing(
    removed: &[&Add],
    adds: Vec<Add>,
    (app_id, txn): (&str, u64),
    now_ms: i64,
) -> Vec<Action> {
    let mut actions: Vec<Action> = removed
        .iter()
        .map(|add| {
            Action::Remove(Remove {
                path: add.path.clone(),
                deletion_timestamp: Some(now_ms),
                data_change: true,
                size: Some(add.size),
            })
        })
        .collect();
    actions.extend(adds.into_iter().map(Action::Add));
    actions.push(Action::Txn(Txn {
        app_id: app_id.to_owned(),
        version: txn,
        last_updated: Some(now_ms),
    }));
    actions
}

/// Commit `applied` at `state`'s next version of `output`'s current-state table: whether it
/// took the version.
pub(super) async fn commit(
    sink: &Sink,
    output: &str,
    state: &mut TableState,
    applied: Applied,
) -> Result<bool, CommitError> {
    let name = mirror_name(output);
    let version = state.next_version();
    let path = super::table::commit_path(&name, version);
    match sink
        .create_fence(&path, commit_file(&applied.actions))
        .await
    {
        Ok(Created::New) => {
            state
                .apply(version, applied.actions)
                .map_err(|e| CommitError::Corrupt {
                    path: path.to_string(),
                    reason: e.to_string(),
                })?;
            Ok(true)
        }
        Ok(Created::Existed) => {
            delete_written(sink, &applied.written).await;
            Ok(false)
        }
        Err(e) => {
            delete_written(sink, &applied.written).await;
            Err(e.into())
        }
    }
}

/// The flush of app `app_id` that `output`'s change-log table (`log`, as read after it held
/// flush `sequence`) held before `sequence`: the `txn` of the latest commit with one below
/// `sequence`. Each flush of the output is one commit of the change log whose `txn` version
/// is the flush, appended in flush order; a compaction's commit carries no `txn` and changes
/// no rows, so it is passed over, whichever files it merged. The commits are read from the
/// latest back, one read each: the flushes after `sequence` (a catch-up meets those), the flush
/// itself, the compactions since the flush before, and that one.
pub(super) async fn preceding_flush(
    sink: &Sink,
    output: &str,
    log: &TableState,
    app_id: &str,
    sequence: u64,
) -> Result<Preceding, CommitError> {
    let Some(latest) = log.version else {
        return Ok(Preceding::Flush(None));
    };
    for version in (0..=latest).rev() {
        let path = super::table::commit_path(output, version);
        let Some(bytes) = sink.get(&path).await? else {
            return Ok(Preceding::Gone(version));
        };
        let actions = parse_commit(&bytes).map_err(|reason| CommitError::Corrupt {
            path: path.to_string(),
            reason,
        })?;
        let flush = actions.iter().find_map(|a| match a {
            Action::Txn(t) if t.app_id == app_id => Some(t.version),
            _ => None,
        });
        if let Some(flush) = flush.filter(|&f| f < sequence) {
            return Ok(Preceding::Flush(Some(flush)));
        }
    }
    Ok(Preceding::Flush(None))
}

/// The sink paths of every file a change-log table's reader reads, oldest first.
pub(super) fn log_files(output: &str, log: &TableState) -> Vec<String> {
    let mut files: Vec<&Add> = log.files.values().collect();
    files.sort_by(|a, b| (a.modification_time, &a.path).cmp(&(b.modification_time, &b.path)));
    files
        .into_iter()
        .map(|a| format!("{output}/{}", a.path))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::lake::delta::table::commit_path;

    /// A change log whose commits carry these `txn` versions of app `a` (`None`: a
    /// compaction's commit), and its state.
    async fn log_of(sink: &Sink, txns: &[Option<u64>]) -> TableState {
        let mut state = TableState::default();
        for (version, txn) in txns.iter().enumerate() {
            let actions: Vec<Action> = match txn {
                Some(txn) => vec![Action::Txn(Txn {
                    app_id: "a".into(),
                    version: *txn,
                    last_updated: None,
                })],
                None => vec![Action::CommitInfo(
                    serde_json::json!({"operation": "OPTIMIZE"}),
                )],
            };
            let path = commit_path("public.t", version as u64);
            sink.create(&path, commit_file(&actions)).await.unwrap();
            state.apply(version as u64, actions).unwrap();
        }
        state
    }

    /// The flush before a given one is the latest `txn` below it, compactions passed over;
    /// a commit the walk needs that is gone leaves it untold, and the table is built again.
    #[tokio::test]
    async fn the_flush_before_is_read_back_from_the_change_logs_commits() {
        let sink = Sink::from_store(Arc::new(InMemory::new()), "memory://");
        let log = log_of(&sink, &[Some(1), Some(4), None, None, Some(6), Some(9)]).await;
        let before = |sequence| preceding_flush(&sink, "public.t", &log, "a", sequence);
        assert_eq!(before(9).await.unwrap(), Preceding::Flush(Some(6)));
        assert_eq!(
            before(6).await.unwrap(),
            Preceding::Flush(Some(4)),
            "past two compactions, and a later flush (a catch-up's)"
        );
        assert_eq!(before(1).await.unwrap(), Preceding::Flush(None));
        assert_eq!(
            preceding_flush(&sink, "public.t", &log, "b", 9)
                .await
                .unwrap(),
            Preceding::Flush(None),
            "another app's flushes are not this one's"
        );

        sink.delete(&commit_path("public.t", 1)).await.unwrap();
        assert_eq!(before(9).await.unwrap(), Preceding::Flush(Some(6)));
        assert_eq!(before(6).await.unwrap(), Preceding::Gone(1));

        assert_eq!(Preceding::Flush(Some(6)).missed_by(Some(6)), None);
        assert_eq!(Preceding::Flush(None).missed_by(None), None);
        let missed = Preceding::Flush(Some(6)).missed_by(Some(1)).unwrap();
        assert!(
            missed.contains("it holds flush 1 and the change log held flush 6 before this one"),
            "{missed}"
        );
        assert!(Preceding::Flush(Some(6)).missed_by(None).is_some());
        let untold = Preceding::Gone(1).missed_by(Some(6)).unwrap();
        assert!(
            untold.contains("version 1 of the change log, which would say, is gone"),
            "{untold}"
        );
    }
}
