//! The current-state tables (`<output>__current`) of a sink as Iceberg tables: after a
//! flush's files are in an output's change-log table, the same flush is applied to its
//! current-state table by copy-on-write ([`crate::lake::tables::current`] rewrites the files)
//! as one `overwrite` snapshot carrying the pipeline's position, as the change log's append
//! does. The files a flush's keys may be in are chosen by the key columns' lower and upper
//! bounds in the table's manifests; the new files go under `<output>__current/data/`.
//!
//! No equality or position delete files: a copy-on-write table is read as its data files
//! alone, by every engine, where delete files need a reader that merges them on read (not
//! every engine does; Snowflake's Iceberg tables, for one, do not read equality deletes).
//!
//! A table that does not exist yet, or that missed flushes of the change log (mirroring was
//! off meanwhile), is built from the change log's live files instead.

use std::collections::BTreeSet;

use arrow_schema::{DataType, TimeUnit};

use super::manifest::DataFile;
use super::metadata::{APP_KEY, SEQUENCE_KEY, TableMetadata};
use super::schema::{Schema, Type};
use super::table::{Current, Table, sink_path};
use super::tables::{Tables, commit_error};
use crate::lake::commit::CommitError;
use crate::lake::tables::current::{Flush, Live, Preceding, Rewrite, Target, rewrite};
use crate::lake::tables::file::mirror_name;
use crate::lake::tables::keyed::{Bounds, Part, reduce};
use crate::lake::tables::overtaken::{flush_of, overtaken};
use crate::lake::tables::{Later, TableFile};

/// How many times a current-state flush is planned again after losing its commit.
const ATTEMPTS: usize = 20;

/// The bound `bytes` (Iceberg's single-value form for type `ty`) of a key column whose files
/// hold `arrow` values, as a key part; `None` for a type whose parts are not compared here
/// (those files may hold any value of it).
pub fn bound(bytes: &[u8], ty: &str, arrow: &DataType) -> Option<Part> {
    let int = |v: i128| Some(Part::Int(v));
    match (ty, arrow) {
        (
            "int",
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16,
        )
        | ("date", DataType::Date32) => int(i32::from_le_bytes(bytes.try_into().ok()?).into()),
        ("long", DataType::Int64 | DataType::UInt32)
        | ("timestamp" | "timestamptz", DataType::Timestamp(TimeUnit::Microsecond, _)) => {
            int(i64::from_le_bytes(bytes.try_into().ok()?).into())
        }
        (_, DataType::Decimal128(..)) if ty.starts_with("decimal") => {
            if bytes.is_empty() || bytes.len() > 16 {
                return None;
            }
            let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
            let mut full = [fill; 16];
            full[16 - bytes.len()..].copy_from_slice(bytes);
            int(i128::from_be_bytes(full))
        }
        ("string", DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => {
            Some(Part::Text(String::from_utf8(bytes.to_vec()).ok()?))
        }
        _ => None,
    }
}

/// The bounds `file`'s manifest entry gives the key columns `keys` (of Arrow types
/// `types`) in the table's `schema`.
pub fn bounds(file: &DataFile, schema: &Schema, keys: &[(String, DataType)]) -> Bounds {
    Bounds::new(
        keys.iter()
            .map(|(name, arrow)| {
                let field = schema.field(name)?;
                let Type::Primitive(ty) = &field.field_type else {
                    return None;
                };
                let lower = file.lower_bounds.get(&field.id)?;
                let upper = file.upper_bounds.get(&field.id)?;
                Some((bound(lower, ty, arrow)?, bound(upper, ty, arrow)?))
            })
            .collect(),
    )
}

/// The flush of `app` that a change-log table (`log`) held before flush `sequence`: the
/// position of the newest snapshot in its current ancestry that `app` wrote below `sequence`.
/// Snapshots of other writers (a compaction) are passed over. When the ancestry ends in a
/// snapshot whose parent was expired, that cannot be told.
pub fn preceding(log: &TableMetadata, app: &str, sequence: u64) -> Preceding {
    let mut oldest = None;
    for snapshot in log.ancestry() {
        let position = snapshot
            .summary
            .get(APP_KEY)
            .filter(|a| a.as_str() == app)
            .and_then(|_| snapshot.summary.get(SEQUENCE_KEY)?.parse::<u64>().ok());
        if let Some(position) = position.filter(|&p| p < sequence) {
            return Preceding::Flush(Some(position));
        }
        oldest = Some(snapshot);
    }
    match oldest {
        Some(s) if s.parent_snapshot_id.is_some() => {
            Preceding::Gone(u64::try_from(s.sequence_number - 1).unwrap_or_default())
        }
        _ => Preceding::Flush(None),
    }
}

/// The current-state table's live files, each with its absolute URI (what a commit removes)
/// and its path relative to the table.
struct Files {
    uris: Vec<String>,
    data: Vec<DataFile>,
}

impl Tables {
    /// Apply flush `sequence` (its `files` of `output`, now in the change-log table) to the
    /// output's current-state table, when it keeps one: idempotent and fenced as the change
    /// log's publish is.
    pub(super) async fn mirror(
        &self,
        output: &str,
        sequence: u64,
        files: &[TableFile],
        later: Later,
    ) -> Result<(), CommitError> {
        let Some(mirrors) = self.mirrors.as_deref() else {
            return Ok(());
        };
        if !mirrors.outputs.contains(output) {
            return Ok(());
        }
        crate::failpoint::reached("iceberg.before-current").await;
        let name = mirror_name(output);
        let failed = |e| commit_error(&name, sequence, e);
        let table = self.table(&name);
        // Both as this writer committed them, when it did: the change log has the flush.
        let log = self.table(output).base(false).await.map_err(failed)?;
        let mut asked = false;
        for attempt in 0..ATTEMPTS {
            let current = table.base(attempt > 0).await.map_err(failed)?;
            let held = current
                .as_ref()
                .and_then(|c| c.metadata.position(&self.app));
            match held {
                Some(h) if h == sequence => return Ok(()),
                Some(h) if h > sequence && later == Later::Holds => return Ok(()),
                Some(theirs) if theirs > sequence => {
                    return Err(CommitError::TableAhead {
                        output: name.clone(),
                        ours: sequence,
                        theirs,
                        writer: Box::new(self.writer.clone()),
                    });
                }
                _ => {}
            }
            let stale = match (&current, &log) {
                (None, _) => Some("it is new".to_owned()),
                (Some(_), Some(log)) => {
                    preceding(&log.metadata, &self.app, sequence).missed_by(held)
                }
                (Some(_), None) => None,
            };
            let attempt = Attempt {
                tables: self,
                table: &table,
                output,
                name: &name,
                sequence,
            };
            if attempt
                .run(current, log.as_ref(), files, stale, &mut asked)
                .await?
            {
                return Ok(());
            }
        }
        Err(failed(super::table::IcebergError::Contended {
            output: name.clone(),
            attempts: ATTEMPTS,
        }))
    }
}

/// One attempt at applying a flush to a current-state table.
struct Attempt<'a> {
    tables: &'a Tables,
    table: &'a Table,
    output: &'a str,
    name: &'a str,
    sequence: u64,
}

impl Attempt<'_> {
    /// Plan on `current`, write, and commit: whether the commit happened (`false`: another
    /// writer committed first, and the files written are deleted again). `stale`: why the
    /// table is built from the whole change log (`log`) instead of taking `files`.
    async fn run(
        &self,
        current: Option<Current>,
        log: Option<&Current>,
        files: &[TableFile],
        stale: Option<String>,
        asked: &mut bool,
    ) -> Result<bool, CommitError> {
        let (tables, name, sequence) = (self.tables, self.name, self.sequence);
        let failed = |e| commit_error(name, sequence, e);
        let mirrors = tables.mirrors.as_deref().expect("mirrored");
        let rebuild = stale.is_some();
        let (paths, txn) = match (&stale, log) {
            (Some(reason), Some(log)) => {
                let all = self.log_files(log).await?;
                tracing::info!(table = %name, files = all.len(), %reason, "building the current-state table from the whole change log");
                let txn = log.metadata.position(&tables.app).unwrap_or(sequence);
                (all, txn)
            }
            _ => (files.iter().map(|f| f.path.clone()).collect(), sequence),
        };
        let mut flush = Flush::read(&tables.sink, &paths)
            .await
            .map_err(|e| self.mirror_error(e))?;
        let live = self.live(current.as_ref()).await?;
        let held: Option<BTreeSet<String>> = match (&current, live.data.is_empty()) {
            (Some(c), false) => c
                .metadata
                .current_schema()
                .map(|s| s.fields.iter().map(|f| f.name.clone()).collect()),
            _ => None,
        };
        let arriving = flush.arriving(held.filter(|_| !rebuild), rebuild);
        let (snapshot, width) = (flush.snapshot(), flush.width());
        let changes = flush.changes();
        let reduced = match (rebuild, snapshot, log) {
            (false, Some(snapshot), Some(log)) => {
                let logged = self.log_relative(log).await?;
                overtaken(
                    &tables.sink,
                    self.output,
                    &logged,
                    snapshot,
                    &flush.keys,
                    &tables.seen,
                )
                .await
                .and_then(|o| o.reduce(changes, width))
            }
            _ => reduce(changes, width),
        }
        .map_err(|e| self.mirror_error(e))?;
        let target = Target {
            sink: &tables.sink,
            name,
            folder: "data/",
            mirrors,
            sequence: txn,
        };
        let lives = self.bounded(current.as_ref(), &live, &flush);
        let rewritten = rewrite(&target, &lives, flush, reduced, rebuild)
            .await
            .map_err(|e| self.mirror_error(e))?;
        if !*asked && !arriving.is_empty() {
            if let Err(e) = self.ask(&arriving).await {
                crate::lake::tables::current::delete_written(&tables.sink, &rewritten.written)
                    .await;
                return Err(e);
            }
            *asked = true;
        }
        self.commit(current, &live, rewritten, txn)
            .await
            .map_err(failed)
    }

    /// Commit `rewritten` as an `overwrite` snapshot on `current`, with position `txn`.
    async fn commit(
        &self,
        current: Option<Current>,
        live: &Files,
        rewritten: Rewrite,
        txn: u64,
    ) -> Result<bool, super::table::IcebergError> {
        let sink = &self.tables.sink;
        let removed: BTreeSet<String> = rewritten
            .removed
            .iter()
            .map(|&i| live.uris[i].clone())
            .collect();
        let added: Vec<TableFile> = rewritten
            .added
            .iter()
            .map(|f| TableFile {
                output: self.name.to_owned(),
                path: format!("{}/{}", self.name, f.path),
                size: f.size,
                rows: f.stats.rows,
                schema: rewritten.schema.clone(),
                partition: None,
                footer: f.footer.clone(),
            })
            .collect();
        let app = (self.tables.app.as_str(), txn);
        let committed = self
            .table
            .overwrite_on(current, app, removed, &added, &rewritten.schema)
            .await;
        match committed {
            Ok(Some(snapshot_id)) => {
                tracing::debug!(table = %self.name, sequence = txn, snapshot_id, "applied to the Iceberg current-state table");
                Ok(true)
            }
            Ok(None) => {
                crate::lake::tables::current::delete_written(sink, &rewritten.written).await;
                Ok(false)
            }
            Err(e) => {
                crate::lake::tables::current::delete_written(sink, &rewritten.written).await;
                Err(e)
            }
        }
    }

    /// The live files of the current-state table as `current` has it.
    async fn live(&self, current: Option<&Current>) -> Result<Files, CommitError> {
        let snapshot = current.and_then(|c| c.metadata.current_snapshot());
        let data = match snapshot {
            Some(s) => self
                .table
                .live_files(s)
                .await
                .map_err(|e| commit_error(self.name, self.sequence, e))?,
            None => Vec::new(),
        };
        Ok(Files {
            uris: data.iter().map(|f| f.file_path.clone()).collect(),
            data,
        })
    }

    /// The live files with their paths relative to the table and their key bounds.
    fn bounded(&self, current: Option<&Current>, live: &Files, flush: &Flush) -> Vec<Live> {
        let keys: Vec<(String, DataType)> = flush
            .keys
            .iter()
            .filter_map(|k| {
                let field = flush.schema.field_with_name(k).ok()?;
                Some((k.clone(), field.data_type().clone()))
            })
            .collect();
        let schema = current.and_then(|c| c.metadata.current_schema());
        live.data
            .iter()
            .map(|f| Live {
                path: self.table.relative(&f.file_path),
                size: u64::try_from(f.file_size_in_bytes).unwrap_or_default(),
                bounds: match (schema, keys.len() == flush.keys.len()) {
                    (Some(schema), true) => bounds(f, schema, &keys),
                    _ => Bounds::new(vec![None; flush.keys.len()]),
                },
            })
            .collect()
    }

    /// The change log's live data files as sink paths, in the order their flushes landed.
    async fn log_files(&self, log: &Current) -> Result<Vec<String>, CommitError> {
        let mut files: Vec<(Option<u64>, String)> = self
            .log_relative(log)
            .await?
            .into_iter()
            .map(|(relative, _)| (flush_of(&relative), format!("{}/{relative}", self.output)))
            .collect();
        files.sort();
        Ok(files.into_iter().map(|(_, path)| path).collect())
    }

    /// The change log's live data files, relative to its table, with their sizes.
    async fn log_relative(&self, log: &Current) -> Result<Vec<(String, u64)>, CommitError> {
        let Some(snapshot) = log.metadata.current_snapshot() else {
            return Ok(Vec::new());
        };
        let table = self.tables.table(self.output);
        let failed = |e| commit_error(self.output, self.sequence, e);
        let files = table.live_files(snapshot).await.map_err(failed)?;
        let prefix = format!("{}/", self.output);
        files
            .into_iter()
            .map(|f| {
                let path = sink_path(&self.tables.sink, &f.file_path).map_err(failed)?;
                let relative = path.as_ref().strip_prefix(&prefix).unwrap_or(path.as_ref());
                Ok((relative.to_owned(), f.file_size_in_bytes as u64))
            })
            .collect()
    }

    /// Ask for the output's rows again: `columns` came into its table while it held rows.
    async fn ask(&self, columns: &[String]) -> Result<(), CommitError> {
        let reload = self
            .tables
            .mirrors
            .as_deref()
            .and_then(|m| m.reload.as_deref());
        let failed = |reason: String| {
            self.mirror_error(crate::lake::tables::keyed::MirrorError::Data {
                path: self.name.to_owned(),
                reason,
            })
        };
        crate::lake::tables::current::ask_reload(reload, self.output, columns, failed).await
    }

    fn mirror_error(&self, e: crate::lake::tables::keyed::MirrorError) -> CommitError {
        // An outage is the sink's, and retried; the rest name the table.
        if let Some(outage) = e.outage() {
            return CommitError::Sink(outage);
        }
        CommitError::Table {
            output: self.name.to_owned(),
            sequence: self.sequence,
            format: "Iceberg",
            source: Box::new(CurrentError(e)),
        }
    }
}

/// A current-state table's error, as the commit protocol names it.
#[derive(Debug, thiserror::Error)]
#[error("its current-state table: {0}")]
struct CurrentError(crate::lake::tables::keyed::MirrorError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_back_as_the_key_parts_of_the_files_types() {
        let long = 42i64.to_le_bytes();
        assert_eq!(bound(&long, "long", &DataType::Int64), Some(Part::Int(42)));
        let micros = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        assert_eq!(bound(&long, "timestamptz", &micros), Some(Part::Int(42)));
        // Seconds in the file and microseconds in the bound: not compared.
        let seconds = DataType::Timestamp(TimeUnit::Second, None);
        assert_eq!(bound(&long, "timestamp", &seconds), None);
        let int = (-7i32).to_le_bytes();
        assert_eq!(bound(&int, "int", &DataType::Int32), Some(Part::Int(-7)));
        assert_eq!(bound(&int, "date", &DataType::Date32), Some(Part::Int(-7)));
        assert_eq!(bound(&[1, 2], "int", &DataType::Int32), None, "short");
        // -1.05 as decimal(10,2): unscaled -105, big-endian two's complement.
        let decimal = DataType::Decimal128(10, 2);
        assert_eq!(
            bound(&[0xff, 0x97], "decimal(10,2)", &decimal),
            Some(Part::Int(-105))
        );
        assert_eq!(
            bound(b"abc", "string", &DataType::Utf8),
            Some(Part::Text("abc".into()))
        );
        assert_eq!(
            bound(&[0; 16], "uuid", &DataType::FixedSizeBinary(16)),
            None
        );
    }

    #[test]
    fn the_flush_before_is_the_newest_older_position_of_the_app() {
        let snapshot = |id: i64, parent: Option<i64>, app: Option<(&str, u64)>| {
            let mut summary = std::collections::BTreeMap::new();
            if let Some((app, sequence)) = app {
                summary.insert(APP_KEY.to_owned(), app.to_owned());
                summary.insert(SEQUENCE_KEY.to_owned(), sequence.to_string());
            }
            super::super::metadata::Snapshot {
                snapshot_id: id,
                parent_snapshot_id: parent,
                sequence_number: id,
                timestamp_ms: 0,
                manifest_list: String::new(),
                summary,
                schema_id: None,
                extra: Default::default(),
            }
        };
        let schema = super::super::schema::fresh(&arrow_schema::Schema::empty())
            .unwrap()
            .0;
        let mut log = super::super::metadata::new_table(
            "memory://t",
            schema,
            0,
            super::super::partition::unpartitioned(),
            0,
        );
        // Flushes 1 and 4 of app a, a compaction, another app's flush, flush 6 of a.
        log.snapshots = vec![
            snapshot(1, None, Some(("a", 1))),
            snapshot(2, Some(1), Some(("a", 4))),
            snapshot(3, Some(2), None),
            snapshot(4, Some(3), Some(("b", 9))),
            snapshot(5, Some(4), Some(("a", 6))),
        ];
        log.current_snapshot_id = Some(5);
        assert_eq!(preceding(&log, "a", 6), Preceding::Flush(Some(4)));
        assert_eq!(preceding(&log, "a", 7), Preceding::Flush(Some(6)));
        assert_eq!(preceding(&log, "a", 1), Preceding::Flush(None));
        assert_eq!(preceding(&log, "b", 9), Preceding::Flush(None));
        // The snapshots before the compaction expired: whether it missed flush 4 is untold.
        log.snapshots.drain(..2);
        assert_eq!(preceding(&log, "a", 6), Preceding::Gone(2));
    }

    /// `public.t__current` as `id -> v`, read through its current snapshot's live files, and
    /// that snapshot's summary.
    async fn rows(
        sink: &crate::lake::sink::Sink,
    ) -> (
        std::collections::BTreeMap<i64, Option<String>>,
        std::collections::BTreeMap<String, String>,
    ) {
        use arrow_array::Array;
        use arrow_array::cast::AsArray;
        let table = Table::new(sink.clone(), "public.t__current");
        let current = table.load().await.unwrap().unwrap();
        let snapshot = current.metadata.current_snapshot().unwrap();
        let mut rows = std::collections::BTreeMap::new();
        for file in table.live_files(snapshot).await.unwrap() {
            let path = sink_path(sink, &file.file_path).unwrap();
            assert!(path.as_ref().starts_with("public.t__current/data/part-"));
            let bytes = sink.get(&path).await.unwrap().unwrap();
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .unwrap()
                    .build()
                    .unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                let ids = batch.column_by_name("id").unwrap();
                let ids = ids.as_primitive::<arrow_array::types::Int64Type>();
                let vs = batch.column_by_name("v").unwrap().as_string::<i32>();
                for i in 0..batch.num_rows() {
                    let v = vs.is_valid(i).then(|| vs.value(i).to_owned());
                    assert!(rows.insert(ids.value(i), v).is_none(), "one row per key");
                }
            }
        }
        (rows, snapshot.summary.clone())
    }

    fn text(pairs: &[(i64, &str)]) -> std::collections::BTreeMap<i64, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (*k, Some((*v).to_owned())))
            .collect()
    }

    /// Flushes applied to an Iceberg current-state table: inserts, an update that left its
    /// TOAST value out, a delete, a truncate; each an `overwrite` snapshot with the flush's
    /// position and no delete files; a publish again changes nothing, and a flush the change
    /// log took without it (a crash between the two) is applied by the catch-up's publish.
    #[tokio::test]
    async fn an_iceberg_current_state_table_follows_the_flushes_by_key() {
        use crate::lake::commit::Writer;
        use crate::lake::tables::current::Mirrors;
        use crate::lake::tables::current::fixtures::changes;
        let sink = crate::lake::sink::Sink::from_store(
            std::sync::Arc::new(object_store::memory::InMemory::new()),
            "memory://lake",
        );
        let app = crate::lake::tables::app_id("db", "slot");
        let tables =
            Tables::new(sink.clone(), app.clone(), Writer::named("a")).with_mirrors(Mirrors {
                outputs: ["public.t".to_owned()].into(),
                properties: parquet::file::properties::WriterProperties::default(),
                target: 1 << 20,
                reload: None,
            });
        let publish = |sequence, file| {
            let tables = tables.clone();
            async move { tables.publish_as(sequence, &[file], Later::TakenOver).await }
        };
        let one = changes(
            &sink,
            1,
            &[
                ("insert", 1, None, Some("a"), false),
                ("insert", 2, None, Some("b"), false),
                ("insert", 3, None, Some("c"), false),
            ],
        )
        .await;
        publish(1, one).await.unwrap();
        let (got, summary) = rows(&sink).await;
        assert_eq!(got, text(&[(1, "a"), (2, "b"), (3, "c")]));
        assert_eq!(summary[SEQUENCE_KEY], "1");

        let two = changes(
            &sink,
            2,
            &[
                ("update", 1, None, Some("x"), true),
                ("delete", 0, Some(2), None, false),
                ("insert", 40, None, Some("d"), false),
            ],
        )
        .await;
        publish(2, two.clone()).await.unwrap();
        let (got, summary) = rows(&sink).await;
        assert_eq!(
            got,
            text(&[(1, "a"), (3, "c"), (40, "d")]),
            "the update left v out: the row keeps it"
        );
        assert_eq!(
            (
                summary["operation"].as_str(),
                summary[SEQUENCE_KEY].as_str(),
                summary["total-delete-files"].as_str(),
                summary[APP_KEY].as_str(),
            ),
            ("overwrite", "2", "0", app.as_str())
        );
        let table = Table::new(sink.clone(), "public.t__current");
        let snapshots = || async {
            table
                .load()
                .await
                .unwrap()
                .unwrap()
                .metadata
                .snapshots
                .len()
        };
        let before = snapshots().await;
        publish(2, two).await.unwrap();
        assert_eq!(snapshots().await, before, "a publish again writes nothing");

        // A flush of key 40 alone rewrites its file only: the manifests' bounds keep the file
        // of keys 1 and 3 out of it.
        let live = || async {
            let current = table.load().await.unwrap().unwrap();
            let snapshot = current.metadata.current_snapshot().unwrap().clone();
            let files = table.live_files(&snapshot).await.unwrap();
            files
                .into_iter()
                .map(|f| f.file_path)
                .collect::<std::collections::BTreeSet<_>>()
        };
        let held = live().await;
        assert_eq!(held.len(), 2, "{held:?}");
        let forty = changes(&sink, 3, &[("update", 40, None, Some("dd"), false)]).await;
        publish(3, forty).await.unwrap();
        let after = live().await;
        assert_eq!(after.intersection(&held).count(), 1, "{held:?} {after:?}");
        assert_eq!(rows(&sink).await.0[&40], Some("dd".to_owned()));

        // The change log takes flush 4 alone (a crash before the current-state table): the
        // seam's hold says so, and the catch-up's publish applies it.
        let three = changes(
            &sink,
            4,
            &[
                ("truncate", 0, None, None, false),
                ("insert", 7, None, Some("e"), false),
            ],
        )
        .await;
        Table::new(sink.clone(), "public.t")
            .publish(&app, 4, std::slice::from_ref(&three))
            .await
            .unwrap();
        assert!(!tables.hold("public.t", 4).await.unwrap());
        tables.publish_as(4, &[three], Later::Holds).await.unwrap();
        assert!(tables.hold("public.t", 4).await.unwrap());
        let (got, summary) = rows(&sink).await;
        assert_eq!(got, text(&[(7, "e")]), "the truncate emptied it first");
        assert_eq!(summary[SEQUENCE_KEY], "4");
    }
}
