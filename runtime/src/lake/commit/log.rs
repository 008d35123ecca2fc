//! The commit log, intents and the pipeline identity, as objects in the sink.

use std::collections::BTreeSet;

use bytes::Bytes;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::{
    CommitEntry, CommitError, EntryKind, FORMAT, Intent, OLDEST_FORMAT, PipelineIdentity,
    Provisioned, ProvisionedKind, Writer,
};
use crate::lake::sink::{Created, Sink};

const LOG_DIR: &str = "_tributary/log";
const INTENT_DIR: &str = "_tributary/intent";
const IDENTITY_PATH: &str = "_tributary/pipeline.json";
const CREATED_DIR: &str = "_tributary/created";

fn created_path(kind: ProvisionedKind) -> Path {
    Path::from(format!(
        "{CREATED_DIR}/{}.json",
        kind.as_str().replace(' ', "_")
    ))
}

fn log_path(sequence: u64) -> Path {
    Path::from(format!("{LOG_DIR}/{sequence:020}.json"))
}

/// The intent of one part of a flush: `<sequence>-<writer>.json` for the first (the only one
/// of most flushes), `<sequence>-<writer>-<part>.json` for later parts of a large transaction.
fn intent_path(sequence: u64, writer: &Writer, part: u32) -> Path {
    match part {
        0 => Path::from(format!("{INTENT_DIR}/{sequence:020}-{}.json", writer.id)),
        _ => Path::from(format!(
            "{INTENT_DIR}/{sequence:020}-{}-{part}.json",
            writer.id
        )),
    }
}

/// The writer id in an intent's name (format 1 names have none).
fn writer_of_intent(name: &str) -> Option<&str> {
    name.strip_suffix(".json")?.split('-').nth(1)
}

fn sequence_of_entry(name: &str) -> Option<u64> {
    name.strip_suffix(".json")?.parse().ok()
}

/// An intent's name: `<sequence>-<writer>[-<part>].json`, or `<sequence>.json` from format 1.
fn sequence_of_intent(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".json")?;
    stem.split_once('-').map_or(stem, |(n, _)| n).parse().ok()
}

/// What start-up found in the sink, read after this writer's open entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The entry this writer opened with.
    pub opened: u64,
    /// Data files of intents at or below `opened` that no entry names: nobody can commit them.
    pub orphaned: Vec<String>,
    /// Intent objects at or below `opened`, all of which can go.
    pub intents: Vec<Path>,
    /// Intents above `opened`: a writer that started after this one (this one will stop at its
    /// next commit).
    pub newer: Vec<u64>,
}

/// The commit log and intents, in the sink, as one writer sees them.
#[derive(Debug, Clone)]
pub struct CommitLog {
    sink: Sink,
    writer: Writer,
}

impl CommitLog {
    pub fn new(sink: Sink, writer: Writer) -> Self {
        CommitLog { sink, writer }
    }

    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// The latest entry, if any.
    pub async fn latest(&self) -> Result<Option<CommitEntry>, CommitError> {
        match self.sequences().await?.last() {
            Some(&sequence) => self.read_entry(sequence).await,
            None => Ok(None),
        }
    }

    /// The latest entry that landed transactions, if any.
    pub async fn latest_flush(&self) -> Result<Option<CommitEntry>, CommitError> {
        for &sequence in self.sequences().await?.iter().rev() {
            if let Some(entry) = self.read_entry(sequence).await?
                && entry.kind == EntryKind::Flush
            {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    /// Every entry's sequence number, in order.
    pub async fn sequences(&self) -> Result<Vec<u64>, CommitError> {
        let names = self.sink.list_names(&Path::from(LOG_DIR)).await?;
        let mut sequences: Vec<u64> = names.iter().filter_map(|n| sequence_of_entry(n)).collect();
        sequences.sort_unstable();
        Ok(sequences)
    }

    pub async fn read_entry(&self, sequence: u64) -> Result<Option<CommitEntry>, CommitError> {
        let path = log_path(sequence);
        let Some(bytes) = self.sink.get(&path).await? else {
            return Ok(None);
        };
        let entry: CommitEntry = parse(&path, &bytes)?;
        if entry.sequence != sequence || !(OLDEST_FORMAT..=FORMAT).contains(&entry.format) {
            return Err(CommitError::Corrupt {
                path: path.to_string(),
                reason: format!(
                    "holds sequence {} in format {}, expected sequence {sequence} in format {OLDEST_FORMAT} to {FORMAT}",
                    entry.sequence, entry.format
                ),
            });
        }
        Ok(Some(entry))
    }

    /// The pipeline this sink belongs to, once a writer has opened it.
    pub async fn identity(&self) -> Result<Option<PipelineIdentity>, CommitError> {
        let path = Path::from(IDENTITY_PATH);
        match self.sink.get(&path).await? {
            Some(bytes) => Ok(Some(parse(&path, &bytes)?)),
            None => Ok(None),
        }
    }

    /// Refuse a sink that belongs to another pipeline. A sink written before identities were
    /// recorded is judged by the slot its latest entry names.
    pub async fn check_identity(
        &self,
        ours: &PipelineIdentity,
        latest: Option<&CommitEntry>,
    ) -> Result<(), CommitError> {
        match (self.identity().await?, latest) {
            (Some(theirs), _) => refuse_other(&theirs, ours),
            (None, Some(entry)) if entry.slot != ours.slot => Err(CommitError::OtherPipeline {
                theirs: format!("slot {:?}", entry.slot),
                ours: ours.describe(),
                created_by: Box::new(entry.writer.clone()),
            }),
            (None, _) => Ok(()),
        }
    }

    /// Record which pipeline the sink belongs to, unless it is recorded already.
    pub async fn claim_identity(&self, ours: &PipelineIdentity) -> Result<(), CommitError> {
        let path = Path::from(IDENTITY_PATH);
        match self.sink.create_fence(&path, to_json(ours)).await? {
            Created::New => Ok(()),
            Created::Existed => match self.identity().await? {
                Some(theirs) => refuse_other(&theirs, ours),
                None => Ok(()),
            },
        }
    }

    /// Create entry `entry.sequence`, unless it exists. An existing entry equal to ours is our
    /// own earlier attempt whose reply was lost; any other means another writer holds the
    /// pipeline.
    pub async fn commit(&self, entry: &CommitEntry) -> Result<(), CommitError> {
        let path = log_path(entry.sequence);
        if self.sink.create_fence(&path, to_json(entry)).await? == Created::New {
            return Ok(());
        }
        match self.read_entry(entry.sequence).await? {
            Some(e) if e == *entry => Ok(()),
            other => Err(CommitError::Conflict {
                sequence: entry.sequence,
                holder: Box::new(other.map_or_else(|| Writer::named("unknown"), |e| e.writer)),
                ours: Box::new(self.writer.clone()),
            }),
        }
    }

    /// Every intent in the sink, of any writer: flushes in flight, or left by a writer that
    /// stopped before its commit (the next start deletes those).
    pub async fn intents(&self) -> Result<Vec<Intent>, CommitError> {
        let mut intents = Vec::new();
        for name in self.sink.list_names(&Path::from(INTENT_DIR)).await? {
            let path = Path::from(format!("{INTENT_DIR}/{name}"));
            // Deleted since the listing: its flush committed (or was cleaned up).
            if let Some(bytes) = self.sink.get(&path).await? {
                intents.push(parse(&path, &bytes)?);
            }
        }
        Ok(intents)
    }

    /// Find what can never be committed now that this writer opened with entry `opened`.
    ///
    /// A writer starts flushes ahead of its commits, at most `ahead` past its last entry, so an
    /// intent above `opened` is either a later writer's or one of an earlier writer that wrote
    /// an entry among the `ahead - 1` just below `opened`; the earlier one is fenced, so its
    /// intents can never commit either.
    pub async fn recover(&self, opened: u64, ahead: u64) -> Result<Recovery, CommitError> {
        let mut recovery = Recovery {
            opened,
            orphaned: Vec::new(),
            intents: Vec::new(),
            newer: Vec::new(),
        };
        let mut fenced = BTreeSet::new();
        for sequence in (opened + 1).saturating_sub(ahead).max(1)..opened {
            if let Some(entry) = self.read_entry(sequence).await? {
                fenced.insert(entry.writer.id);
            }
        }
        for name in self.sink.list_names(&Path::from(INTENT_DIR)).await? {
            let Some(sequence) = sequence_of_intent(&name) else {
                continue;
            };
            if sequence > opened && !writer_of_intent(&name).is_some_and(|w| fenced.contains(w)) {
                recovery.newer.push(sequence);
                continue;
            }
            let path = Path::from(format!("{INTENT_DIR}/{name}"));
            let Some(bytes) = self.sink.get(&path).await? else {
                continue;
            };
            let intent: Intent = parse(&path, &bytes)?;
            let committed: BTreeSet<String> = match self.read_entry(sequence).await? {
                Some(entry) => entry.files.into_iter().map(|f| f.path).collect(),
                None => BTreeSet::new(),
            };
            recovery.orphaned.extend(
                intent
                    .files
                    .into_iter()
                    .filter(|file| !committed.contains(file)),
            );
            recovery.intents.push(path);
        }
        recovery.orphaned.sort();
        recovery.newer.sort_unstable();
        Ok(recovery)
    }

    /// Delete what [`recover`](Self::recover) found. Returns the data files removed.
    pub async fn clean_up(&self, recovery: &Recovery) -> Result<Vec<String>, CommitError> {
        for file in &recovery.orphaned {
            self.sink.delete(&Path::from(file.as_str())).await?;
        }
        for intent in &recovery.intents {
            self.sink.delete(intent).await?;
        }
        Ok(recovery.orphaned.clone())
    }

    /// Record that this pipeline created a slot or publication. A record already there is
    /// kept: it names the same object, created by an earlier run.
    pub async fn record_created(&self, created: &Provisioned) -> Result<(), CommitError> {
        self.sink
            .create(&created_path(created.kind), to_json(created))
            .await?;
        Ok(())
    }

    /// What this pipeline created, as recorded.
    pub async fn created(&self) -> Result<Vec<Provisioned>, CommitError> {
        let mut found = Vec::new();
        for kind in [
            ProvisionedKind::Slot,
            ProvisionedKind::Publication,
            ProvisionedKind::TriggerCapture,
        ] {
            let path = created_path(kind);
            if let Some(bytes) = self.sink.get(&path).await? {
                found.push(parse(&path, &bytes)?);
            }
        }
        Ok(found)
    }

    /// Forget a record once its object is dropped.
    pub async fn forget_created(&self, kind: ProvisionedKind) -> Result<(), CommitError> {
        self.sink.delete(&created_path(kind)).await?;
        Ok(())
    }

    /// Create the intent of part `part` of flush `sequence`, naming its files.
    pub async fn write_intent(
        &self,
        sequence: u64,
        part: u32,
        files: &[String],
    ) -> Result<(), CommitError> {
        let intent = Intent {
            sequence,
            writer: self.writer.clone(),
            files: files.to_vec(),
        };
        // Our own name: if it exists, it is this flush's intent from an attempt whose reply
        // was lost.
        self.sink
            .create(&intent_path(sequence, &self.writer, part), to_json(&intent))
            .await?;
        Ok(())
    }

    /// The intents of a flush's `parts` are no longer needed once its entry exists.
    pub async fn clear_intent(&self, sequence: u64, parts: u32) -> Result<(), CommitError> {
        for part in 0..parts {
            self.sink
                .delete(&intent_path(sequence, &self.writer, part))
                .await?;
        }
        Ok(())
    }

    /// Remove this writer's own files and intent of a flush that lost its sequence number to
    /// another writer: they can never be committed.
    pub async fn abandon(
        &self,
        sequence: u64,
        files: &[String],
        parts: u32,
    ) -> Result<(), CommitError> {
        for file in files {
            self.sink.delete(&Path::from(file.as_str())).await?;
        }
        self.clear_intent(sequence, parts).await
    }
}

fn refuse_other(theirs: &PipelineIdentity, ours: &PipelineIdentity) -> Result<(), CommitError> {
    if theirs.same_source(ours) {
        return Ok(());
    }
    if (&theirs.database, &theirs.slot) == (&ours.database, &ours.slot) {
        return Err(CommitError::OtherServer {
            slot: ours.slot.clone(),
            database: ours.database.clone(),
            theirs: theirs.system_identifier.clone(),
            ours: ours.system_identifier.clone(),
        });
    }
    Err(CommitError::OtherPipeline {
        theirs: theirs.describe(),
        ours: ours.describe(),
        created_by: Box::new(theirs.created_by.clone()),
    })
}

fn to_json<T: Serialize>(value: &T) -> Bytes {
    let mut text = serde_json::to_vec_pretty(value).expect("bookkeeping types serialize");
    text.push(b'\n');
    Bytes::from(text)
}

fn parse<T: for<'de> Deserialize<'de>>(path: &Path, bytes: &[u8]) -> Result<T, CommitError> {
    serde_json::from_slice(bytes).map_err(|e| CommitError::Corrupt {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::super::tests::entry;
    use super::super::{Checkpoint, FileEntry, data_file_path};
    use super::*;
    use crate::Lsn;

    fn memory() -> Sink {
        Sink::from_store(Arc::new(InMemory::new()), "memory://")
    }

    fn file(path: String) -> FileEntry {
        FileEntry {
            output: "public.t".into(),
            path,
            rows: 1,
            bytes: 1,
            schema: "x".into(),
        }
    }

    #[tokio::test]
    async fn what_was_created_is_recorded_once_and_forgotten_when_dropped() {
        let log = CommitLog::new(memory(), Writer::named("aaaa"));
        assert!(log.created().await.unwrap().is_empty());
        let slot = Provisioned {
            kind: ProvisionedKind::Slot,
            name: "shop".into(),
            database: "db".into(),
            system_identifier: "7".into(),
            created_by: Writer::named("aaaa"),
            created_at: 1,
        };
        log.record_created(&slot).await.unwrap();
        // A later run that created it again keeps the first record.
        let again = Provisioned {
            created_at: 2,
            ..slot.clone()
        };
        log.record_created(&again).await.unwrap();
        let publication = Provisioned {
            kind: ProvisionedKind::Publication,
            ..slot.clone()
        };
        log.record_created(&publication).await.unwrap();
        assert_eq!(
            log.created().await.unwrap(),
            [slot.clone(), publication.clone()]
        );
        log.forget_created(ProvisionedKind::Slot).await.unwrap();
        assert_eq!(log.created().await.unwrap(), [publication]);
    }

    #[tokio::test]
    async fn commit_is_create_if_absent_and_names_the_other_writer() {
        let sink = memory();
        let a = CommitLog::new(sink.clone(), Writer::named("aaaa"));
        let mine = entry(1, 0x10, 0x20, "aaaa");
        a.commit(&mine).await.unwrap();
        // A retry of our own commit whose reply was lost is fine.
        a.commit(&mine).await.unwrap();
        let b = CommitLog::new(sink.clone(), Writer::named("bbbb"));
        let err = b
            .commit(&entry(1, 0x10, 0x20, "bbbb"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("commit entry 1 was written by another tributary, writer aaaa on host")
                && err.contains("so this one (writer bbbb on host"),
            "{err}"
        );
        assert_eq!(b.latest().await.unwrap().unwrap().writer.id, "aaaa");
    }

    /// The rolling-restart defect: B read the log at entry 8, A then committed 9. B's flush 9
    /// must neither replace A's files nor delete them, and B cannot commit 9.
    #[tokio::test]
    async fn a_second_writer_never_touches_the_first_writers_committed_files() {
        let sink = memory();
        let a = CommitLog::new(sink.clone(), Writer::named("aaaa"));
        let b = CommitLog::new(sink.clone(), Writer::named("bbbb"));
        let a_file = data_file_path("public.t", 9, a.writer(), 0);
        let b_file = data_file_path("public.t", 9, b.writer(), 0);
        assert_ne!(a_file, b_file);

        a.write_intent(9, 0, std::slice::from_ref(&a_file))
            .await
            .unwrap();
        sink.create(&Path::from(a_file.as_str()), Bytes::from_static(b"A"))
            .await
            .unwrap();
        let mut a_entry = entry(9, 0x100, 0x200, "aaaa");
        a_entry.files = vec![file(a_file.clone())];
        a.commit(&a_entry).await.unwrap();

        b.write_intent(9, 0, std::slice::from_ref(&b_file))
            .await
            .unwrap();
        sink.create(&Path::from(b_file.as_str()), Bytes::from_static(b"B"))
            .await
            .unwrap();
        let err = b.commit(&entry(9, 0x100, 0x210, "bbbb")).await.unwrap_err();
        assert!(matches!(err, CommitError::Conflict { .. }), "{err}");
        b.abandon(9, std::slice::from_ref(&b_file), 1)
            .await
            .unwrap();

        let a_bytes = sink.get(&Path::from(a_file.as_str())).await.unwrap();
        assert_eq!(
            a_bytes.as_deref(),
            Some(&b"A"[..]),
            "A's committed file is intact"
        );
        assert!(
            sink.get(&Path::from(b_file.as_str()))
                .await
                .unwrap()
                .is_none()
        );

        // Creating over an existing name is refused by the sink itself.
        let again = sink
            .create(&Path::from(a_file.as_str()), Bytes::from_static(b"X"))
            .await
            .unwrap();
        assert_eq!(again, Created::Existed);
        let a_bytes = sink.get(&Path::from(a_file.as_str())).await.unwrap();
        assert_eq!(a_bytes.as_deref(), Some(&b"A"[..]));
    }

    #[tokio::test]
    async fn recovery_deletes_only_what_can_never_be_committed() {
        let sink = memory();
        let a = CommitLog::new(sink.clone(), Writer::named("aaaa"));
        let c = CommitLog::new(sink.clone(), Writer::named("cccc"));
        let put = |path: String| {
            let sink = sink.clone();
            async move {
                sink.create(&Path::from(path.as_str()), Bytes::from_static(b"x"))
                    .await
                    .unwrap();
                path
            }
        };
        // 1 and 2 committed by A (2's intent left behind), A died during 3 (a transaction in
        // parts) after the first part's file and the second part's intent.
        for n in [1u64, 2] {
            let f = put(data_file_path("public.t", n, a.writer(), 0)).await;
            a.write_intent(n, 0, std::slice::from_ref(&f))
                .await
                .unwrap();
            let mut e = entry(n, n * 0x100, n * 0x100, "aaaa");
            e.files = vec![file(f)];
            a.commit(&e).await.unwrap();
        }
        a.clear_intent(1, 1).await.unwrap();
        let dead = put(data_file_path("public.t", 3, a.writer(), 0)).await;
        a.write_intent(3, 0, std::slice::from_ref(&dead))
            .await
            .unwrap();
        a.write_intent(3, 1, &[data_file_path("public.t", 3, a.writer(), 1)])
            .await
            .unwrap();

        // A had started flush 4 ahead of 3's commit: its intent and file are up.
        let ahead = put(data_file_path("public.t", 4, a.writer(), 0)).await;
        a.write_intent(4, 0, std::slice::from_ref(&ahead))
            .await
            .unwrap();

        // B opens with entry 3; a later writer C has an intent for 4 already.
        let b = CommitLog::new(sink.clone(), Writer::named("bbbb"));
        let latest = b.latest().await.unwrap();
        let checkpoint = Checkpoint::from_entry(latest.as_ref());
        let open = checkpoint.open_entry(b.writer(), "s", Lsn::ZERO, false, 1);
        b.commit(&open).await.unwrap();
        let newer = put(data_file_path("public.t", 4, c.writer(), 0)).await;
        c.write_intent(4, 0, std::slice::from_ref(&newer))
            .await
            .unwrap();
        let mut intended: Vec<(u64, String)> = b
            .intents()
            .await
            .unwrap()
            .into_iter()
            .map(|i| (i.sequence, i.writer.id))
            .collect();
        intended.sort();
        assert_eq!(
            intended,
            [
                (2, "aaaa"),
                (3, "aaaa"),
                (3, "aaaa"),
                (4, "aaaa"),
                (4, "cccc")
            ]
            .map(|(n, w)| (n, w.to_owned())),
            "every writer's intents, parts included"
        );

        let recovery = b.recover(open.sequence, 8).await.unwrap();
        assert_eq!(
            recovery.orphaned,
            [
                dead.clone(),
                data_file_path("public.t", 3, a.writer(), 1),
                ahead.clone()
            ],
            "A wrote entries just below B's: its intents above B's entry are fenced too"
        );
        assert_eq!(
            (recovery.intents.len(), recovery.newer.as_slice()),
            (4, &[4u64][..])
        );
        b.clean_up(&recovery).await.unwrap();

        for n in [1u64, 2] {
            let kept = data_file_path("public.t", n, a.writer(), 0);
            assert!(
                sink.get(&Path::from(kept.as_str()))
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        assert!(
            sink.get(&Path::from(dead.as_str()))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            sink.get(&Path::from(newer.as_str()))
                .await
                .unwrap()
                .is_some(),
            "a newer writer's flush is not ours to delete"
        );
        let again = b.recover(open.sequence, 8).await.unwrap();
        assert!(again.orphaned.is_empty() && again.intents.is_empty());

        // A, resuming with its flush 3, can no longer commit it.
        let err = a.commit(&entry(3, 0x300, 0x300, "aaaa")).await.unwrap_err();
        assert!(err.to_string().contains("writer bbbb"), "{err}");
    }

    #[tokio::test]
    async fn a_sink_belongs_to_one_pipeline() {
        let sink = memory();
        let w = CommitLog::new(sink.clone(), Writer::named("aaaa"));
        let ours = PipelineIdentity {
            format: FORMAT,
            system_identifier: "7000".into(),
            database: "shop".into(),
            slot: "s".into(),
            created_by: w.writer().clone(),
            created_at: 0,
        };
        w.check_identity(&ours, None).await.unwrap();
        w.claim_identity(&ours).await.unwrap();
        let restarted = PipelineIdentity {
            created_by: Writer::named("later"),
            ..ours.clone()
        };
        w.check_identity(&restarted, None).await.unwrap();
        w.claim_identity(&restarted).await.unwrap();

        let other = PipelineIdentity {
            database: "crm".into(),
            ..restarted
        };
        let err = w
            .check_identity(&other, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "the sink belongs to another pipeline: slot \"s\" on database \"shop\" of the server with system identifier 7000, first written by writer aaaa"
            ) && err.contains("this one reads slot \"s\" on database \"crm\""),
            "{err}"
        );
        assert!(w.claim_identity(&other).await.is_err());

        // A sink from before identities: the latest entry's slot decides.
        let old = memory();
        let log = CommitLog::new(old.clone(), Writer::named("aaaa"));
        let latest = entry(1, 0x10, 0x10, "aaaa");
        log.check_identity(&ours, Some(&latest)).await.unwrap();
        let elsewhere = PipelineIdentity {
            slot: "t".into(),
            ..ours
        };
        assert!(log.check_identity(&elsewhere, Some(&latest)).await.is_err());
    }

    #[tokio::test]
    async fn a_corrupt_entry_is_named() {
        let sink = memory();
        sink.create(&log_path(4), Bytes::from_static(b"{not json"))
            .await
            .unwrap();
        let err = CommitLog::new(sink, Writer::named("w"))
            .latest()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("_tributary/log/00000000000000000004.json in the sink"),
            "{err}"
        );
    }

    #[test]
    fn intent_names_of_both_formats_parse() {
        assert_eq!(
            sequence_of_intent("00000000000000000007-00ff.json"),
            Some(7)
        );
        assert_eq!(sequence_of_intent("00000000000000000007.json"), Some(7));
        assert_eq!(sequence_of_intent("x.json"), None);
        assert_eq!(
            writer_of_intent("00000000000000000007-00ff.json"),
            Some("00ff")
        );
        assert_eq!(
            writer_of_intent("00000000000000000007-00ff-2.json"),
            Some("00ff")
        );
        assert_eq!(writer_of_intent("00000000000000000007.json"), None);
    }
}
