//! `tributary teardown`: drop the slot and the publication Tributary created for a pipeline,
//! or what trigger capture installed (its schema, functions and triggers), and nothing else.
//!
//! A start records every object it creates in the sink (`_tributary/created/`, see
//! [`Provisioned`]); an object that existed before (made by an operator, or by another tool)
//! has no record and is left alone. [`Teardown::prepare`] reads the records and the source and
//! says what it would drop; [`Teardown::execute`] drops it. A slot some consumer holds is
//! refused: dropping it under a running pipeline would stop that pipeline and lose the WAL it
//! still needs. The sink's files stay: the lake is the user's data.

use std::fmt;

use tokio_postgres::Client;

use crate::config::PipelineConfig;
use crate::lake::commit::{CommitError, CommitLog, Provisioned, ProvisionedKind, Writer};
use crate::lake::sink::{Sink, SinkError};
use crate::source::provision::{self, ProvisionError};
use crate::source::quote_ident;
use crate::source::replication::ReplicationError;
use crate::source::trigger::{capture, install};

#[derive(Debug, thiserror::Error)]
pub enum TeardownError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(
        "slot {slot:?} is held by {holder}: a pipeline is reading it, and dropping it would stop that pipeline and lose the WAL it still needs; stop the pipeline first, then run tributary teardown again"
    )]
    SlotHeld {
        slot: String,
        holder: provision::SlotHolder,
    },
    #[error(
        "the trigger journal in schema {schema:?} is being read by a running pipeline: removing it would stop that pipeline and lose the changes not yet landed; stop the pipeline first, then run tributary teardown again"
    )]
    JournalHeld { schema: String },
    #[error(
        "the sink records a {kind} {name:?} created on database {database:?} of the server with system identifier {theirs}, but source.url reaches database {our_database:?} of the server with system identifier {ours}: nothing is dropped; point source.url at the server the pipeline ran on"
    )]
    OtherServer {
        kind: &'static str,
        name: String,
        database: String,
        theirs: String,
        our_database: String,
        ours: String,
    },
}

/// What a teardown found: what it will drop, and what it leaves alone and why.
pub struct Teardown {
    client: Client,
    /// Holds the journal's reader lock, when trigger capture is to be removed: no pipeline
    /// starts reading while it goes.
    reader: Option<Client>,
    log: CommitLog,
    /// Created by Tributary and still there: dropped by [`execute`](Self::execute).
    pub drops: Vec<Provisioned>,
    /// Records of objects already gone: forgotten by [`execute`](Self::execute).
    pub gone: Vec<Provisioned>,
    /// The pipeline's slot or publication, present but not created by Tributary.
    pub left_alone: Vec<(ProvisionedKind, String)>,
    /// Trigger capture this sink created, now claimed by another sink (named): left to that
    /// pipeline, and the record forgotten.
    pub claimed: Vec<(Provisioned, String)>,
}

impl Teardown {
    /// Read what the sink records and what the source holds. Refuses a held slot and records
    /// of another server.
    pub async fn prepare(config: &PipelineConfig) -> Result<Teardown, TeardownError> {
        let source = &config.source;
        let pg = crate::source::connect::parse_url(&source.url)?;
        let client = crate::source::connect::sql(&pg).await?;
        let sink = Sink::open(&config.sink.url, &config.sink.options)?;
        let log = CommitLog::new(sink, Writer::new());
        let records = log.created().await?;
        let database = provision::current_database(&client).await?;
        let triggers_only = records
            .iter()
            .all(|r| r.kind == ProvisionedKind::TriggerCapture);
        let system = match (records.is_empty(), triggers_only) {
            (true, _) => None,
            // Trigger capture needs no REPLICATION, and its teardown neither.
            (false, true) => Some(capture::identify(&client).await?.0),
            (false, false) => Some(
                crate::source::connect::replication(&pg)
                    .await?
                    .identify_system()
                    .await?
                    .system_id,
            ),
        };
        let mut teardown = Teardown {
            client,
            reader: None,
            log,
            drops: Vec::new(),
            gone: Vec::new(),
            left_alone: Vec::new(),
            claimed: Vec::new(),
        };
        for record in records {
            let ours = system.clone().unwrap_or_default();
            if record.system_identifier != ours || record.database != database {
                return Err(TeardownError::OtherServer {
                    kind: record.kind.as_str(),
                    name: record.name,
                    database: record.database,
                    theirs: record.system_identifier,
                    our_database: database,
                    ours,
                });
            }
            let exists = match record.kind {
                ProvisionedKind::Slot => {
                    match provision::slot_state(&teardown.client, &record.name).await? {
                        Some(state) => {
                            if let Some(holder) = state.holder {
                                return Err(TeardownError::SlotHeld {
                                    slot: record.name,
                                    holder,
                                });
                            }
                            true
                        }
                        None => false,
                    }
                }
                ProvisionedKind::Publication => {
                    publication_exists(&teardown.client, &record.name).await?
                }
                ProvisionedKind::TriggerCapture => {
                    // A journal another sink claimed since (a pipeline of its own took it over
                    // with --accept-gap) is that pipeline's capture now: never removed here.
                    let owner = install::owner(&teardown.client, &record.name).await?;
                    if let Some(theirs) = owner
                        .and_then(|o| o.sink)
                        .filter(|theirs| *theirs != config.sink.url)
                    {
                        teardown.claimed.push((record, theirs));
                        continue;
                    }
                    let reader = crate::source::connect::sql(&pg).await?;
                    if !capture::hold(&reader, &record.name).await? {
                        return Err(TeardownError::JournalHeld {
                            schema: record.name,
                        });
                    }
                    teardown.reader = Some(reader);
                    schema_exists(&teardown.client, &record.name).await?
                }
            };
            match exists {
                true => teardown.drops.push(record),
                false => teardown.gone.push(record),
            }
        }
        let recorded = |kind, name: &str| {
            teardown
                .drops
                .iter()
                .chain(&teardown.gone)
                .any(|r| r.kind == kind && r.name == name)
        };
        let mut left_alone = Vec::new();
        // With trigger capture the pipeline file may name neither.
        if !source.slot.is_empty()
            && !recorded(ProvisionedKind::Slot, &source.slot)
            && provision::slot_state(&teardown.client, &source.slot)
                .await?
                .is_some()
        {
            left_alone.push((ProvisionedKind::Slot, source.slot.clone()));
        }
        if !source.publication.is_empty()
            && !recorded(ProvisionedKind::Publication, &source.publication)
            && publication_exists(&teardown.client, &source.publication).await?
        {
            left_alone.push((ProvisionedKind::Publication, source.publication.clone()));
        }
        teardown.left_alone = left_alone;
        Ok(teardown)
    }

    /// Nothing to drop and no record to forget.
    pub fn is_empty(&self) -> bool {
        self.drops.is_empty() && self.gone.is_empty() && self.claimed.is_empty()
    }

    /// Drop what was created (the slot first: it is what holds the server's WAL), and forget
    /// the records. Returns a line for each thing done.
    pub async fn execute(self) -> Result<Vec<String>, TeardownError> {
        let mut done = Vec::new();
        let mut drops = self.drops;
        drops.sort_by_key(|r| r.kind != ProvisionedKind::Slot);
        let mut client = self.client;
        for record in drops {
            if record.kind == ProvisionedKind::TriggerCapture {
                let removed = install::remove(&mut client, &record.name).await?;
                self.log.forget_created(record.kind).await?;
                done.push(format!(
                    "removed trigger capture in schema {:?}: {} triggers on {} tables, {} functions, and the journal with {} rows not landed",
                    record.name, removed.triggers, removed.tables, removed.functions, removed.journal_rows
                ));
                continue;
            }
            let (sql, what) = match record.kind {
                ProvisionedKind::Slot => (
                    format!(
                        "SELECT pg_drop_replication_slot('{}')",
                        record.name.replace('\'', "''")
                    ),
                    "dropping the slot",
                ),
                ProvisionedKind::Publication => (
                    format!("DROP PUBLICATION {}", quote_ident(&record.name)),
                    "dropping the publication",
                ),
                ProvisionedKind::TriggerCapture => unreachable!("removed above"),
            };
            client
                .batch_execute(&sql)
                .await
                .map_err(|error| ProvisionError::Query {
                    what: format!("{what} {:?}", record.name),
                    error,
                })?;
            self.log.forget_created(record.kind).await?;
            done.push(format!(
                "dropped {} {:?}",
                record.kind.as_str(),
                record.name
            ));
        }
        for (record, theirs) in self.claimed {
            self.log.forget_created(record.kind).await?;
            done.push(format!(
                "left trigger capture in schema {:?} to the pipeline of sink {theirs}, which claimed it; forgot this sink's record of it",
                record.name
            ));
        }
        for record in self.gone {
            self.log.forget_created(record.kind).await?;
            done.push(format!(
                "forgot {} {:?}: it was already gone",
                record.kind.as_str(),
                record.name
            ));
        }
        Ok(done)
    }
}

/// What a teardown will do, as it asks before doing it.
impl fmt::Display for Teardown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for record in &self.drops {
            writeln!(
                f,
                "will drop {} {:?} (created by tributary, {})",
                record.kind.as_str(),
                record.name,
                record.created_by
            )?;
        }
        for record in &self.gone {
            writeln!(
                f,
                "already gone: {} {:?} (its record in the sink is removed)",
                record.kind.as_str(),
                record.name
            )?;
        }
        for (record, theirs) in &self.claimed {
            writeln!(
                f,
                "left alone: {} {:?} captures for another sink now, {theirs} (its record in this sink is removed)",
                record.kind.as_str(),
                record.name
            )?;
        }
        for (kind, name) in &self.left_alone {
            writeln!(
                f,
                "left alone: {} {name:?} exists but was not created by tributary",
                kind.as_str()
            )?;
        }
        if self.is_empty() {
            writeln!(
                f,
                "nothing to drop: tributary created nothing this sink records"
            )?;
        }
        writeln!(
            f,
            "the sink's files and commit log stay; a pipeline started again on a new slot or a new trigger journal needs --accept-gap"
        )
    }
}

async fn publication_exists(client: &Client, name: &str) -> Result<bool, ProvisionError> {
    Ok(client
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
        .await
        .map_err(|error| ProvisionError::Query {
            what: format!("looking up publication {name:?}"),
            error,
        })?
        .is_some())
}

async fn schema_exists(client: &Client, name: &str) -> Result<bool, ProvisionError> {
    Ok(client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&name])
        .await
        .map_err(|error| ProvisionError::Query {
            what: format!("looking up schema {name:?}"),
            error,
        })?
        .is_some())
}
