//! What the source-side checks and set-up refuse, each with the statement or setting that
//! fixes it.

use crate::Lsn;

use super::sql_ident;

#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    // The client error is rendered into the message, not chained as a source: its own text
    // repeats its cause ("db error: ERROR: ..."), and a chained source would print it twice.
    #[error("cannot connect to the source database: {}", server_text(.0))]
    Connect(tokio_postgres::Error),
    #[error("source url is not a valid connection string: {}", server_text(.0))]
    Url(tokio_postgres::Error),
    /// The connection string, a certificate file, or the TLS handshake.
    #[error(transparent)]
    Connection(Box<crate::source::connect::ConnectError>),
    #[error("the replication connection: {0}")]
    ReplicationConnection(Box<crate::source::replication::ReplicationError>),
    #[error(
        "sslmode={mode} to {hosts}, which is not this machine: the connection may go unencrypted, and the server's certificate is not checked; use sslmode=verify-full with sslrootcert=<the CA file of the server's certificate>"
    )]
    WeakSslMode {
        mode: crate::source::connect::SslMode,
        hosts: String,
    },
    #[error("{what}: {}", server_text(error))]
    Query {
        what: String,
        error: tokio_postgres::Error,
    },
    /// A journal row trigger capture cannot read: a defect of the source's journal.
    #[error("the trigger capture journal: {0}")]
    Journal(String),
    /// A journal the lake cannot read on from without a gap.
    #[error(transparent)]
    JournalGap(#[from] crate::source::trigger::owner::JournalGap),
    #[error(
        "the source server runs with wal_level = {0}; logical replication needs wal_level = logical (set it in postgresql.conf and restart the server)"
    )]
    WalLevel(String),
    #[error(
        "publication {publication:?} does not exist and source.publication_behavior = \"reuse\" does not create it; run: {sql}, or set source.publication_behavior = \"create\""
    )]
    NoPublication { publication: String, sql: String },
    #[error(
        "publication {publication:?} does not exist, and role {role:?} cannot create it ({reason}); as a superuser or the tables' owner, run: {sql}"
    )]
    CannotCreatePublication {
        publication: String,
        role: String,
        reason: String,
        sql: String,
    },
    #[error(
        "table {table} does not exist in the source (it is in source.tables); create it, or remove it from source.tables"
    )]
    NoTable { table: String },
    #[error(
        "table {table} has no primary key and no replica identity index, which its current-state table (outputs.\"{table}\".mirror = true) keys rows by: add a primary key, or make a unique index on NOT NULL columns its replica identity (ALTER TABLE {sql} REPLICA IDENTITY USING INDEX <index>), or leave mirror out for it"
    )]
    MirrorWithoutKey { table: String, sql: String },
    #[error(
        "role {role:?} has neither the REPLICATION attribute nor superuser, so it cannot read a replication slot; run: ALTER ROLE {} REPLICATION",
        sql_ident(.role)
    )]
    NoReplication { role: String },
    #[error(
        "neither capture mode is possible (source.capture = \"auto\"): a replication slot needs {wal}; trigger capture needs {trigger}"
    )]
    NoCapture { wal: String, trigger: String },
    #[error(
        "role {role:?} cannot create the capture triggers on table {table}; as its owner or a superuser, run: GRANT TRIGGER, UPDATE ON {sql} TO {}, or capture from a slot (source.capture = \"wal\")",
        sql_ident(.role)
    )]
    NoTrigger {
        role: String,
        table: String,
        sql: String,
    },
    #[error(
        "role {role:?} cannot create schema {schema:?} for trigger capture: it lacks CREATE on database {database:?}; run: GRANT CREATE ON DATABASE {} TO {}, or create the schema for it: CREATE SCHEMA {} AUTHORIZATION {}",
        sql_ident(.database), sql_ident(.role), sql_ident(.schema), sql_ident(.role)
    )]
    NoTriggerSchema {
        role: String,
        schema: String,
        database: String,
    },
    #[error(
        "schema {schema:?} (source.trigger_schema) exists and belongs to another role than {role:?}; name another schema in source.trigger_schema, or run: ALTER SCHEMA {} OWNER TO {}",
        sql_ident(.schema), sql_ident(.role)
    )]
    TriggerSchemaNotOwned { role: String, schema: String },
    #[error(
        "trigger capture captures the tables named in source.tables (or those of an existing publication), and there are none: list the tables to capture in source.tables"
    )]
    NoTriggerTables,
    #[error(
        "source.start_from = {0} names a position in a slot's WAL, which trigger capture does not have: its first run starts from the tail (\"tail\", the default) or with a full load (\"full\")"
    )]
    TriggerStartFrom(String),
    #[error(
        "`tributary resync` loads tables again beside a slot's stream, at a position in its WAL; trigger capture has no such position: to load again, stop the pipeline, empty the sink, and start it with source.start_from = \"full\""
    )]
    TriggerResync,
    #[error(
        "another instance reads the trigger journal in schema {schema:?} (it holds the journal's reader lock); stop it first, or start this one with --wait to take over once it stops"
    )]
    JournalHeld { schema: String },
    #[error(
        "role {role:?} cannot SELECT from table {table}, {why}; run: GRANT SELECT ON {sql} TO {}",
        sql_ident(.role)
    )]
    NoSelect {
        role: String,
        table: String,
        sql: String,
        why: &'static str,
    },
    #[error(
        "all {max} replication slots of the server are in use (max_replication_slots = {max}), so slot {slot:?} cannot be created; drop one no one reads (SELECT pg_drop_replication_slot('<name>'), see pg_replication_slots), or run: ALTER SYSTEM SET max_replication_slots = {}, and restart the server",
        max + 1
    )]
    NoFreeSlot { slot: String, max: i64 },
    #[error(
        "all {max} WAL senders of the server are in use (max_wal_senders = {max}), so the replication connection would be refused; stop a consumer no one needs (pg_stat_replication), or run: ALTER SYSTEM SET max_wal_senders = {}, and restart the server",
        max + 1
    )]
    NoFreeWalSender { max: i64 },
    #[error(
        "the source server runs PostgreSQL {version}; tributary needs PostgreSQL 13 or newer (slots' WAL status, publications that publish through the partition root): upgrade the server"
    )]
    ServerTooOld { version: String },
    #[error(
        "source.binary = true needs PostgreSQL 14 or newer (pgoutput protocol 2), and the source runs {version}: set source.binary = false, or upgrade the server"
    )]
    BinaryNeedsNewerServer { version: String },
    #[error(
        "the source runs PostgreSQL {version}: before 14, pgoutput sends a large transaction only after it commits (the server spills it to disk meanwhile) and no logical decoding messages (the messages plugin and the nudge of tributary verify use them); PostgreSQL 14 or newer streams both"
    )]
    NoStreaming { version: String },
    #[error(
        "source.start_from = \"lsn:{lsn}\" is behind slot {slot:?}'s confirmed position {confirmed}: the slot no longer holds what came before, and the server would silently start at {confirmed} instead; choose a position at or after {confirmed} (start_from = \"head\" starts there)"
    )]
    StartBehindSlot {
        lsn: Lsn,
        slot: String,
        confirmed: Lsn,
    },
    #[error(
        "source.start_from = \"lsn:{lsn}\" is before the server's current WAL position {current}, and slot {slot:?} does not exist yet: a slot holds only the WAL written after it is created, so a new one starts at {current}; choose a position at or after it (or start_from = \"tail\"), or start from a slot that was created before {lsn}"
    )]
    StartBeforeNewSlot {
        lsn: Lsn,
        slot: String,
        current: Lsn,
    },
    #[error(
        "source.start_from = \"lsn:{lsn}\" is past the server's current WAL position {current}: nothing is written there yet; choose a position at or before {current}"
    )]
    StartAhead { lsn: Lsn, current: Lsn },
    /// A binary pipeline's table with a column read only as text (the catalog's refusal).
    #[error("{0}")]
    Binary(String),
    /// Not a refusal: a later run's `source.start_from` that differs from the first run's.
    #[error(
        "source.start_from = {configured:?} is ignored: it applies to a pipeline's first run only, and this pipeline resumes where its commit log ends, at {resume} ({recorded}); to start over from {configured:?}, run it with a new source.slot and an empty sink prefix; to land the tables' current rows in this lake instead, run tributary resync (a new full load while it streams)"
    )]
    StartFromIgnored {
        configured: String,
        resume: Lsn,
        recorded: String,
    },
    #[error(
        "another instance started this pipeline while this one was starting (commit entry {sequence}, by {writer}), so the position this first run chose no longer applies; start again: the next start resumes from the commit log"
    )]
    StartRaced { sequence: u64, writer: String },
    #[error(
        "publication {publication:?} does not publish {tables}; run: ALTER PUBLICATION {publication} ADD TABLE {tables}"
    )]
    NotPublished { publication: String, tables: String },
    #[error(
        "slot {slot:?} uses output plugin {plugin:?}; tributary reads pgoutput slots (drop it or choose another source.slot)"
    )]
    SlotPlugin { slot: String, plugin: String },
    #[error(
        "slot {slot:?} decodes two-phase commit (it was created with two_phase), so it would send \
         prepared transactions before they commit; tributary lands committed transactions only: \
         drop the slot and let tributary create it, or choose another source.slot"
    )]
    SlotTwoPhase { slot: String },
    #[error(
        "slot {slot:?} is invalidated (wal_status = lost): the server removed WAL the slot still \
         needed (max_slot_wal_keep_size), so the changes after {confirmed} can no longer be read \
         and the lake would have a gap; drop the slot (SELECT pg_drop_replication_slot('{slot}')) \
         and run again, which creates it anew and names the gap to accept with --accept-gap; \
         consider raising max_slot_wal_keep_size"
    )]
    SlotLost { slot: String, confirmed: String },
    #[error("slot {slot:?} belongs to database {database:?}, not {expected:?}")]
    SlotDatabase {
        slot: String,
        database: String,
        expected: String,
    },
    #[error(
        "slot {slot:?} is held by {holder} and was not released within {waited_secs} s: another consumer is reading it; stop that consumer, or pass --wait to wait until it lets go"
    )]
    SlotActive {
        slot: String,
        holder: super::SlotHolder,
        waited_secs: u64,
    },
    #[error(
        "slot {slot:?} does not exist and source.slot_behavior = \"reuse\" does not create it; run: SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput'), or set source.slot_behavior = \"create\""
    )]
    NoSlot { slot: String },
    #[error(
        "table {table} has no usable replica identity ({reason}), so its updates and deletes would carry no old key; run: ALTER TABLE {sql} ADD PRIMARY KEY (...), or: ALTER TABLE {sql} REPLICA IDENTITY FULL"
    )]
    NoReplicaIdentity {
        table: String,
        /// The table's name as SQL writes it.
        sql: String,
        reason: &'static str,
    },
    #[error(
        "table {table} has columns PostgreSQL may store out of line as TOAST ({columns}), and an update that leaves such a value untouched does not send it; run: ALTER TABLE {sql} REPLICA IDENTITY FULL (the old row then carries it), or set source.unchanged_toast = \"null\" to land those values as null, flagged in _unchanged_toast"
    )]
    UnchangedToast {
        table: String,
        sql: String,
        columns: String,
    },
    #[error(
        "source.failover = true needs PostgreSQL 17 or newer (failover slots), and the source runs {version}: set source.failover = false, or upgrade the server"
    )]
    FailoverNeedsNewerServer { version: String },
    /// A finding about failover slots, a standby, or decoding on a standby, with its fix.
    #[error("{0}")]
    Failover(String),
}

/// What the server said (message, SQLSTATE, detail, hint), or the client's own text for
/// errors that never reached a server.
impl From<crate::source::connect::ConnectError> for ProvisionError {
    fn from(error: crate::source::connect::ConnectError) -> Self {
        ProvisionError::Connection(Box::new(error))
    }
}

pub fn server_text(error: &tokio_postgres::Error) -> String {
    let Some(db) = error.as_db_error() else {
        return crate::error_chain(error);
    };
    let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
    if let Some(detail) = db.detail() {
        text.push_str(&format!("; {detail}"));
    }
    if let Some(hint) = db.hint() {
        text.push_str(&format!("; hint: {hint}"));
    }
    text
}
