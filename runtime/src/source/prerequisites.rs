//! The prerequisite check: everything the source must offer before a pipeline can run, looked
//! at all at once so that one report names every problem with the statement or setting that
//! fixes it (`tributary check`, and the first step of every start).
//!
//! [`gather`] reads the facts over one SQL connection; [`assess`] turns facts and the pipeline
//! file into a [`Report`] without IO. `tributary check` adds the rest of the pipeline (plugins,
//! sink) and what a start would make of `source.start_from` ([`crate::commands::check`]). A
//! report holds failures (the pipeline cannot run), warnings (it can, with a limit worth knowing) and what was found fine. Its failures are
//! [`ProvisionError`]s, the same values the start refuses with, so a report of one failure
//! reads exactly as that refusal.

use std::collections::BTreeSet;
use std::fmt;

use tokio_postgres::Client;

use crate::config::{CaptureMode, Provisioning, SourceConfig, StartFrom, UnchangedToastPolicy};
use crate::source::catalog::Catalog;
use crate::source::provision::{
    self, ProvisionError, Publishes, SlotState, TableIdentity, check_identity,
    create_publication_sql, sql_table_name,
};
use crate::wire::pgoutput::ReplicaIdentity;

/// What one check found.
#[derive(Debug)]
pub enum Finding {
    Ok(String),
    Warning(ProvisionError),
    Failure(ProvisionError),
    /// A failure of another part of the pipeline (a plugin, the sink), in the words the start
    /// refuses with: only `tributary check` looks at those, after the source.
    Refused(String),
    /// A warning about another part of the pipeline (the sink), in its own words.
    Advised(String),
    /// Neither fine nor a problem: what the capture mode not chosen would need.
    Note(String),
}

/// How the pipeline captures changes, once chosen (`source.capture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// From a logical replication slot.
    Wal,
    /// From the journal the capture triggers write.
    Trigger,
}

impl Capture {
    pub fn as_str(self) -> &'static str {
        match self {
            Capture::Wal => "wal",
            Capture::Trigger => "trigger",
        }
    }
}

/// The mode chosen, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub capture: Capture,
    pub why: String,
}

/// Every check's finding, in the order they were made.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// The capture mode the checks were made for (`None` when the server was too old to ask).
    pub choice: Option<Choice>,
}

impl Report {
    pub fn failures(&self) -> impl Iterator<Item = &ProvisionError> {
        self.findings.iter().filter_map(|f| match f {
            Finding::Failure(e) => Some(e),
            _ => None,
        })
    }

    pub fn warnings(&self) -> impl Iterator<Item = &ProvisionError> {
        self.findings.iter().filter_map(|f| match f {
            Finding::Warning(e) => Some(e),
            _ => None,
        })
    }

    /// Every warning's text, of the source and of the rest of the pipeline, in the order found.
    pub fn warning_texts(&self) -> Vec<String> {
        self.findings
            .iter()
            .filter_map(|f| match f {
                Finding::Warning(e) => Some(e.to_string()),
                Finding::Advised(text) => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    /// No failures: a pipeline can start (warnings allowed).
    pub fn is_ready(&self) -> bool {
        self.problems() == 0
    }

    /// Failures of the source and of the rest of the pipeline.
    fn problems(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| matches!(f, Finding::Failure(_) | Finding::Refused(_)))
            .count()
    }

    /// The refusal a start gives: the only problem itself, or the whole report of several.
    pub fn into_refusal(mut self) -> Option<Refusal> {
        match self.problems() {
            0 => None,
            1 => {
                let at = self
                    .findings
                    .iter()
                    .position(|f| matches!(f, Finding::Failure(_) | Finding::Refused(_)))?;
                match self.findings.swap_remove(at) {
                    Finding::Failure(e) => Some(Refusal::One(e)),
                    Finding::Refused(reason) => Some(Refusal::Said(reason)),
                    _ => unreachable!("the position of a problem"),
                }
            }
            _ => Some(Refusal::Several(self)),
        }
    }

    /// Every problem's text, in the order found.
    pub fn problem_texts(&self) -> Vec<String> {
        self.findings
            .iter()
            .filter_map(|f| match f {
                Finding::Failure(e) => Some(e.to_string()),
                Finding::Refused(reason) => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn ok(&mut self, text: String) {
        self.findings.push(Finding::Ok(text));
    }

    pub(crate) fn fail(&mut self, error: ProvisionError) {
        self.findings.push(Finding::Failure(error));
    }

    pub(crate) fn warn(&mut self, error: ProvisionError) {
        self.findings.push(Finding::Warning(error));
    }

    pub(crate) fn advise(&mut self, text: String) {
        self.findings.push(Finding::Advised(text));
    }

    pub(crate) fn refuse(&mut self, reason: String) {
        self.findings.push(Finding::Refused(reason));
    }

    pub(crate) fn note(&mut self, text: String) {
        self.findings.push(Finding::Note(text));
    }
}

/// Why a start is refused by the check.
#[derive(Debug)]
pub enum Refusal {
    One(ProvisionError),
    /// One problem of the pipeline beyond the source (a plugin, the sink), in its own words.
    Said(String),
    Several(Report),
}

/// The report as `tributary check` prints it: one line per finding, then a summary.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            match finding {
                Finding::Ok(text) => writeln!(f, "ok    {text}")?,
                Finding::Warning(e) => writeln!(f, "warn  {e}")?,
                Finding::Advised(text) => writeln!(f, "warn  {text}")?,
                Finding::Failure(e) => writeln!(f, "FAIL  {e}")?,
                Finding::Refused(reason) => writeln!(f, "FAIL  {reason}")?,
                Finding::Note(text) => writeln!(f, "note  {text}")?,
            }
        }
        let failures = self.problems();
        let warnings = self.warning_texts().len();
        let warned = match warnings {
            0 => String::new(),
            1 => ", 1 warning".into(),
            n => format!(", {n} warnings"),
        };
        match failures {
            0 => writeln!(f, "check: the pipeline is ready to run{warned}"),
            1 => writeln!(f, "check: 1 problem to fix{warned}"),
            n => writeln!(f, "check: {n} problems to fix{warned}"),
        }
    }
}

/// The failures of a report a start refuses with, each with its fix.
pub fn describe_failures(report: &Report) -> String {
    let failures = report.problem_texts();
    let mut text = format!(
        "this pipeline cannot start: {} problems, each with its fix (tributary check --config FILE prints this report)",
        failures.len()
    );
    for (i, failure) in failures.iter().enumerate() {
        text.push_str(&format!("\n  {}. {failure}", i + 1));
    }
    text
}

/// The server, as far as the checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFacts {
    /// `server_version_num`, such as 150004.
    pub version_num: u32,
    /// `server_version`, such as "15.4".
    pub version: String,
    pub wal_level: String,
    pub max_replication_slots: i64,
    pub slots_in_use: i64,
    pub max_wal_senders: i64,
    pub wal_senders_in_use: i64,
}

/// The role the pipeline connects as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleFacts {
    pub name: String,
    pub replication: bool,
    pub superuser: bool,
    /// `CREATE` on the database (creating a publication needs it).
    pub create_in_database: bool,
}

/// A tracked table as this role sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFacts {
    /// `schema.table`.
    pub name: String,
    pub exists: bool,
    pub select: bool,
    /// The role owns it (or is a member of its owner): it may add it to a publication.
    pub owned: bool,
    /// The role may create triggers on it and take the lock their installation takes
    /// (`TRIGGER` and `UPDATE`).
    pub trigger: bool,
}

/// The publication, when it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicationFacts {
    pub publishes: Publishes,
    /// `schema.table` of every published table.
    pub tables: Vec<String>,
}

/// Everything [`assess`] looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFacts {
    pub server: ServerFacts,
    pub role: RoleFacts,
    pub database: String,
    pub publication: Option<PublicationFacts>,
    /// The tracked tables: `source.tables`, or what the publication publishes (every user
    /// table when it is yet to be created `FOR ALL TABLES`).
    pub tables: Vec<TableFacts>,
    pub identities: Vec<TableIdentity>,
    pub slot: Option<SlotState>,
    /// `source.trigger_schema` when it exists: whether this role owns it.
    pub trigger_schema: Option<bool>,
}

/// The oldest server the start can read: `pg_replication_slots.wal_status` and
/// `publish_via_partition_root` are from PostgreSQL 13.
const OLDEST_SERVER: u32 = 130_000;
/// Protocol 2: streaming of large transactions, messages, binary values.
const STREAMING_SERVER: u32 = 140_000;

/// Judge the facts against the pipeline file.
pub fn assess(facts: &SourceFacts, source: &SourceConfig) -> Report {
    let mut report = Report::default();
    let server = &facts.server;
    let version = server.version.clone();
    if server.version_num < OLDEST_SERVER {
        // Nothing else was read: the catalogs the other checks ask differ.
        report.fail(ProvisionError::ServerTooOld { version });
        return report;
    }
    if source.binary && server.version_num < STREAMING_SERVER {
        report.fail(ProvisionError::BinaryNeedsNewerServer {
            version: version.clone(),
        });
    }
    let choice = match choose(facts, source) {
        Ok(choice) => choice,
        Err(neither) => {
            report.fail(neither);
            return report;
        }
    };
    report.ok(format!(
        "capture: {} ({})",
        choice.capture.as_str(),
        choice.why
    ));
    let capture = choice.capture;
    report.choice = Some(choice);
    match capture {
        Capture::Wal => {
            let missing = trigger_missing(facts, source);
            report.note(match missing.is_empty() {
                true => "trigger capture (source.capture = \"trigger\") is possible too".into(),
                false => format!("trigger capture would need: {}", join(&missing)),
            });
            assess_wal(&mut report, facts, source, version);
        }
        Capture::Trigger => {
            let missing = wal_missing(facts);
            report.note(match missing.is_empty() {
                true => "capture from a slot (source.capture = \"wal\") is possible too".into(),
                false => format!("capture from a slot would need: {}", join(&missing)),
            });
            assess_trigger(&mut report, facts, source, version);
        }
    }
    assess_tables(&mut report, facts, source, capture);
    report
}

/// The errors' texts, numbered when there are several.
fn join(problems: &[ProvisionError]) -> String {
    match problems {
        [one] => one.to_string(),
        _ => problems
            .iter()
            .enumerate()
            .map(|(i, p)| format!("({}) {p}", i + 1))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// What a slot needs of the server and the role and does not have.
fn wal_missing(facts: &SourceFacts) -> Vec<ProvisionError> {
    let mut missing = Vec::new();
    if facts.server.wal_level != "logical" {
        missing.push(ProvisionError::WalLevel(facts.server.wal_level.clone()));
    }
    if !(facts.role.replication || facts.role.superuser) {
        missing.push(ProvisionError::NoReplication {
            role: facts.role.name.clone(),
        });
    }
    missing
}

/// What trigger capture needs of the role and does not have: its schema, and triggers on
/// every tracked table that exists.
fn trigger_missing(facts: &SourceFacts, source: &SourceConfig) -> Vec<ProvisionError> {
    let role = &facts.role;
    let mut missing = Vec::new();
    if source.tables.is_empty() && facts.publication.is_none() {
        missing.push(ProvisionError::NoTriggerTables);
    }
    let schema = &source.trigger_schema;
    match facts.trigger_schema {
        Some(owned) if !owned && !role.superuser => {
            missing.push(ProvisionError::TriggerSchemaNotOwned {
                role: role.name.clone(),
                schema: schema.clone(),
            })
        }
        None if !role.create_in_database && !role.superuser => {
            missing.push(ProvisionError::NoTriggerSchema {
                role: role.name.clone(),
                schema: schema.clone(),
                database: facts.database.clone(),
            })
        }
        _ => {}
    }
    for table in &facts.tables {
        if table.exists && !table.trigger && !role.superuser {
            missing.push(ProvisionError::NoTrigger {
                role: role.name.clone(),
                table: table.name.clone(),
                sql: sql_table_name(&table.name),
            });
        }
    }
    missing
}

/// The capture mode `source.capture` asks for, and why; with `"auto"`, the slot where the
/// server and role allow one, triggers where they allow those, and a refusal naming what each
/// would need otherwise.
pub fn choose(facts: &SourceFacts, source: &SourceConfig) -> Result<Choice, ProvisionError> {
    let choice = |capture, why: String| Ok(Choice { capture, why });
    match source.capture {
        CaptureMode::Wal => choice(Capture::Wal, "source.capture = \"wal\"".into()),
        CaptureMode::Trigger => choice(Capture::Trigger, "source.capture = \"trigger\"".into()),
        CaptureMode::Auto => {
            let wal = wal_missing(facts);
            if wal.is_empty() {
                let role = &facts.role.name;
                return choice(
                    Capture::Wal,
                    format!(
                        "source.capture = \"auto\": wal_level = logical and role {role:?} can replicate"
                    ),
                );
            }
            let trigger = trigger_missing(facts, source);
            let mut reasons = Vec::new();
            if facts.server.wal_level != "logical" {
                reasons.push(format!("wal_level = {}", facts.server.wal_level));
            }
            if !(facts.role.replication || facts.role.superuser) {
                reasons.push(format!(
                    "role {:?} has no REPLICATION attribute",
                    facts.role.name
                ));
            }
            match trigger.is_empty() {
                true => choice(
                    Capture::Trigger,
                    format!(
                        "source.capture = \"auto\": no slot, since {}",
                        reasons.join(" and ")
                    ),
                ),
                false => Err(ProvisionError::NoCapture {
                    wal: join(&wal),
                    trigger: join(&trigger),
                }),
            }
        }
    }
}

/// What a slot needs: the server's settings, the role, the slot, a WAL sender, the
/// publication.
fn assess_wal(report: &mut Report, facts: &SourceFacts, source: &SourceConfig, version: String) {
    let server = &facts.server;
    if server.version_num < STREAMING_SERVER {
        report.warn(ProvisionError::NoStreaming { version });
    } else {
        report.ok(format!(
            "server: PostgreSQL {version} (large transactions streamed, messages)"
        ));
    }
    for problem in wal_missing(facts) {
        report.fail(problem);
    }
    if server.wal_level == "logical" {
        report.ok("wal_level = logical".into());
    }
    let role = &facts.role;
    if role.replication || role.superuser {
        let how = if role.superuser {
            "superuser"
        } else {
            "REPLICATION"
        };
        report.ok(format!("role {:?}: {how}", role.name));
    }

    assess_slot(report, facts, source);
    if server.wal_senders_in_use >= server.max_wal_senders {
        report.fail(ProvisionError::NoFreeWalSender {
            max: server.max_wal_senders,
        });
    } else {
        report.ok(format!(
            "WAL senders: {} of {} in use",
            server.wal_senders_in_use, server.max_wal_senders
        ));
    }

    assess_publication(report, facts, source);
}

/// What trigger capture needs: its schema, and triggers on the tracked tables.
fn assess_trigger(
    report: &mut Report,
    facts: &SourceFacts,
    source: &SourceConfig,
    version: String,
) {
    report.ok(format!("server: PostgreSQL {version}"));
    let missing = trigger_missing(facts, source);
    let schema = &source.trigger_schema;
    if !missing.iter().any(|p| {
        matches!(
            p,
            ProvisionError::NoTriggerSchema { .. } | ProvisionError::TriggerSchemaNotOwned { .. }
        )
    }) {
        report.ok(match facts.trigger_schema {
            Some(_) => format!("schema {schema:?}: exists, a start replaces its functions"),
            None => format!("schema {schema:?}: missing, a start creates it"),
        });
    }
    let refused = missing.len();
    for problem in missing {
        report.fail(problem);
    }
    if refused == 0 {
        report.ok(format!(
            "role {:?}: may create the capture triggers on the {} tracked tables",
            facts.role.name,
            facts.tables.len()
        ));
    }
}

fn assess_slot(report: &mut Report, facts: &SourceFacts, source: &SourceConfig) {
    let slot = &source.slot;
    match &facts.slot {
        Some(state) => match provision::check_slot(slot, state, &facts.database) {
            Err(e) => report.fail(e),
            Ok(()) => {
                let held = state
                    .holder
                    .as_ref()
                    .map(|holder| format!(", held by {holder} (a start waits for it)"))
                    .unwrap_or_default();
                let confirmed = state
                    .confirmed_flush_lsn
                    .map(|l| format!(", confirmed to {l}"))
                    .unwrap_or_default();
                report.ok(format!("slot {slot:?}: exists{confirmed}{held}"));
            }
        },
        None if source.slot_behavior() == Provisioning::Reuse => {
            report.fail(ProvisionError::NoSlot { slot: slot.clone() })
        }
        None if facts.server.slots_in_use >= facts.server.max_replication_slots => {
            report.fail(ProvisionError::NoFreeSlot {
                slot: slot.clone(),
                max: facts.server.max_replication_slots,
            })
        }
        None => report.ok(format!(
            "slot {slot:?}: missing, a start creates it ({} of {} slots in use)",
            facts.server.slots_in_use, facts.server.max_replication_slots
        )),
    }
}

fn assess_publication(report: &mut Report, facts: &SourceFacts, source: &SourceConfig) {
    let name = &source.publication;
    match &facts.publication {
        Some(publication) => {
            let missing: Vec<&str> = source
                .tables
                .iter()
                .filter(|t| !publication.tables.contains(t))
                .map(String::as_str)
                .collect();
            if missing.is_empty() {
                report.ok(format!(
                    "publication {name:?}: publishes the {} tracked tables",
                    facts.tables.len()
                ));
            } else {
                report.fail(ProvisionError::NotPublished {
                    publication: name.clone(),
                    tables: missing.join(", "),
                });
            }
        }
        None if source.publication_behavior() == Provisioning::Reuse => {
            report.fail(ProvisionError::NoPublication {
                publication: name.clone(),
                sql: create_publication_sql(source),
            })
        }
        None => {
            let role = &facts.role;
            let not_owned: Vec<&str> = facts
                .tables
                .iter()
                .filter(|t| t.exists && !t.owned)
                .map(|t| t.name.as_str())
                .collect();
            let mut reasons = Vec::new();
            if !role.superuser {
                if source.tables.is_empty() {
                    reasons.push("a publication FOR ALL TABLES needs a superuser".to_owned());
                }
                if !role.create_in_database {
                    reasons.push(format!("it lacks CREATE on database {:?}", facts.database));
                }
                if !not_owned.is_empty() {
                    reasons.push(format!("it does not own {}", not_owned.join(", ")));
                }
            }
            match reasons.is_empty() {
                false => report.fail(ProvisionError::CannotCreatePublication {
                    publication: name.clone(),
                    role: role.name.clone(),
                    reason: reasons.join(", and "),
                    sql: create_publication_sql(source),
                }),
                true => report.ok(format!("publication {name:?}: missing, a start creates it")),
            }
        }
    }
}

fn assess_tables(
    report: &mut Report,
    facts: &SourceFacts,
    source: &SourceConfig,
    capture: Capture,
) {
    let publishes = facts.publication.as_ref().map_or(
        // Created by the start with the defaults: every operation.
        Publishes {
            update: true,
            delete: true,
        },
        |p| p.publishes,
    );
    let full_load = source.start_from == StartFrom::Full;
    let mut fine = 0;
    for table in &facts.tables {
        if !table.exists {
            report.fail(ProvisionError::NoTable {
                table: table.name.clone(),
            });
            continue;
        }
        let mut ok = true;
        if !table.select {
            let problem = ProvisionError::NoSelect {
                role: facts.role.name.clone(),
                table: table.name.clone(),
                sql: sql_table_name(&table.name),
                why: if full_load {
                    "which the full load of source.start_from = \"full\" reads"
                } else {
                    "which a full load (source.start_from = \"full\") and tributary verify read"
                },
            };
            if full_load {
                ok = false;
                report.fail(problem);
            } else {
                report.warn(problem);
            }
        }
        // A trigger reads the whole new row, so no TOASTed value is ever left out of a change
        // (a slot's update leaves out the ones it did not change).
        let toast = match capture {
            Capture::Wal => source.unchanged_toast,
            Capture::Trigger => UnchangedToastPolicy::Null,
        };
        if let Some(identity) = facts.identities.iter().find(|i| i.table == table.name)
            && let Err(e) = check_identity(identity, publishes, toast)
        {
            ok = false;
            report.fail(e);
        }
        fine += usize::from(ok);
    }
    if fine > 0 {
        report.ok(format!(
            "tables: {fine} of {} with a usable replica identity",
            facts.tables.len()
        ));
    }
}

/// Refuse a current-state table (`mirrored`, by output name) of a tracked table that has
/// neither a primary key nor a replica identity index: whatever its replica identity, those
/// are what key its rows (under `REPLICA IDENTITY FULL` the primary key, see
/// [`Catalog::row_key`]).
pub fn assess_mirrors(report: &mut Report, facts: &SourceFacts, mirrored: &BTreeSet<String>) {
    for identity in &facts.identities {
        if !mirrored.contains(&identity.table) {
            continue;
        }
        let keyed = identity.has_primary_key
            || (identity.identity == ReplicaIdentity::Index && identity.has_identity_index);
        if !keyed {
            report.fail(ProvisionError::MirrorWithoutKey {
                table: identity.table.clone(),
                sql: sql_table_name(&identity.table),
            });
        }
    }
}

/// Read the facts over `client`. Fails only when the server cannot be asked.
pub async fn gather(client: &Client, source: &SourceConfig) -> Result<SourceFacts, ProvisionError> {
    let query = |what: &'static str| {
        move |error| ProvisionError::Query {
            what: what.into(),
            error,
        }
    };
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version'),
                    current_setting('wal_level'),
                    current_setting('max_replication_slots')::bigint,
                    (SELECT count(*) FROM pg_replication_slots),
                    current_setting('max_wal_senders')::bigint,
                    (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'),
                    r.rolname::text, r.rolreplication, r.rolsuper,
                    has_database_privilege(current_database(), 'CREATE'),
                    current_database()::text
             FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await
        .map_err(query("reading the server's settings and the role"))?;
    let server = ServerFacts {
        version_num: row.get::<_, i32>(0) as u32,
        version: row.get(1),
        wal_level: row.get(2),
        max_replication_slots: row.get(3),
        slots_in_use: row.get(4),
        max_wal_senders: row.get(5),
        wal_senders_in_use: row.get(6),
    };
    let role = RoleFacts {
        name: row.get(7),
        replication: row.get(8),
        superuser: row.get(9),
        create_in_database: row.get(10),
    };
    let database: String = row.get(11);
    if server.version_num < OLDEST_SERVER {
        return Ok(SourceFacts {
            server,
            role,
            database,
            publication: None,
            tables: Vec::new(),
            identities: Vec::new(),
            slot: None,
            trigger_schema: None,
        });
    }

    let publication = match client
        .query_opt(
            "SELECT pubupdate, pubdelete FROM pg_publication WHERE pubname = $1",
            &[&source.publication],
        )
        .await
        .map_err(query("looking up the publication"))?
    {
        Some(row) => Some(PublicationFacts {
            publishes: Publishes {
                update: row.get(0),
                delete: row.get(1),
            },
            tables: provision::published_tables(client, &source.publication).await?,
        }),
        None => None,
    };
    let tracked: Vec<String> = match (&publication, source.tables.is_empty()) {
        (_, false) => source.tables.clone(),
        (Some(p), true) => p.tables.clone(),
        // To be created FOR ALL TABLES: every table of the database.
        (None, true) => client
            .query(
                "SELECT n.nspname || '.' || c.relname
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
                   AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                   AND n.nspname NOT LIKE 'pg\\_%'
                 ORDER BY 1",
                &[],
            )
            .await
            .map_err(query("listing the tables of the database"))?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    };
    let tables = client
        .query(
            "SELECT t.name, c.oid IS NOT NULL,
                    coalesce(has_table_privilege(c.oid, 'SELECT'), false),
                    coalesce(pg_has_role(c.relowner, 'USAGE'), false),
                    coalesce(has_table_privilege(c.oid, 'TRIGGER')
                             AND has_table_privilege(c.oid, 'UPDATE'), false)
             FROM unnest($1::text[]) WITH ORDINALITY AS t(name, i)
                  LEFT JOIN (pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                             AND c.relkind IN ('r', 'p'))
                  ON n.nspname || '.' || c.relname = t.name
             ORDER BY t.i",
            &[&tracked],
        )
        .await
        .map_err(query("reading the privileges on the tracked tables"))?
        .iter()
        .map(|r| TableFacts {
            name: r.get(0),
            exists: r.get(1),
            select: r.get(2),
            owned: r.get(3),
            trigger: r.get(4),
        })
        .collect();
    let trigger_schema = client
        .query_opt(
            "SELECT pg_has_role(nspowner, 'USAGE') FROM pg_namespace WHERE nspname = $1",
            &[&source.trigger_schema],
        )
        .await
        .map_err(query("looking up the trigger capture's schema"))?
        .map(|r| r.get(0));
    Ok(SourceFacts {
        trigger_schema,
        identities: provision::identities_of(client, &tracked).await?,
        slot: provision::slot_state(client, &source.slot).await?,
        server,
        role,
        database,
        publication,
        tables,
    })
}

/// The whole check: the facts, their assessment, and for binary pipelines whether every
/// tracked column has a binary decoder.
pub async fn run(
    client: &Client,
    pg: &crate::source::connect::PgConfig,
    source: &SourceConfig,
    mirrored: &BTreeSet<String>,
) -> Result<Report, ProvisionError> {
    let facts = gather(client, source).await?;
    let mut report = assess(&facts, source);
    assess_mirrors(&mut report, &facts, mirrored);
    let slot = report.choice.as_ref().map(|c| c.capture) == Some(Capture::Wal);
    if slot {
        let failover = crate::source::failover::gather(client, source).await?;
        crate::source::failover::assess(&mut report, &failover, source);
    }
    if slot && source.binary && facts.server.version_num >= STREAMING_SERVER {
        let columns = provision::table_columns(client, source).await?;
        match Catalog::new(pg.clone(), true).check_tables(&columns).await {
            Ok(()) => {}
            Err(e) => report.fail(ProvisionError::Binary(e.to_string())),
        }
    }
    Ok(report)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Lsn;
    use crate::wire::pgoutput::ReplicaIdentity;

    pub(crate) fn source() -> SourceConfig {
        SourceConfig::new(
            "postgres://app@db/shop",
            "shop",
            "shop",
            &["public.orders", "public.customers"],
        )
    }

    fn ready() -> SourceFacts {
        let table = |name: &str| TableFacts {
            name: name.into(),
            exists: true,
            select: true,
            owned: true,
            trigger: true,
        };
        let identity = |name: &str| TableIdentity {
            table: name.into(),
            identity: ReplicaIdentity::Default,
            has_primary_key: true,
            has_identity_index: false,
            toastable: Vec::new(),
        };
        SourceFacts {
            server: ServerFacts {
                version_num: 150_004,
                version: "15.4".into(),
                wal_level: "logical".into(),
                max_replication_slots: 10,
                slots_in_use: 2,
                max_wal_senders: 10,
                wal_senders_in_use: 1,
            },
            role: RoleFacts {
                name: "app".into(),
                replication: true,
                superuser: false,
                create_in_database: true,
            },
            database: "shop".into(),
            publication: None,
            tables: vec![table("public.orders"), table("public.customers")],
            identities: vec![identity("public.orders"), identity("public.customers")],
            slot: None,
            trigger_schema: None,
        }
    }

    pub(crate) fn failures(report: &Report) -> Vec<String> {
        report.failures().map(|e| e.to_string()).collect()
    }

    #[test]
    fn a_current_state_table_needs_a_primary_key_or_an_identity_index_whatever_the_identity() {
        let mirrored: BTreeSet<String> = ["public.orders".to_owned()].into();
        let judged = |identity: ReplicaIdentity, primary: bool, index: bool| {
            let mut facts = ready();
            facts.identities[0].identity = identity;
            facts.identities[0].has_primary_key = primary;
            facts.identities[0].has_identity_index = index;
            let mut report = Report::default();
            assess_mirrors(&mut report, &facts, &mirrored);
            failures(&report)
        };
        assert!(judged(ReplicaIdentity::Default, true, false).is_empty());
        assert!(judged(ReplicaIdentity::Full, true, false).is_empty());
        assert!(judged(ReplicaIdentity::Index, false, true).is_empty());
        for (identity, primary, index) in [
            (ReplicaIdentity::Full, false, false),
            (ReplicaIdentity::Nothing, false, false),
            (ReplicaIdentity::Default, false, false),
        ] {
            let failed = judged(identity, primary, index);
            assert!(
                failed.len() == 1
                    && failed[0].starts_with(
                        "table public.orders has no primary key and no replica identity index, which its current-state table (outputs.\"public.orders\".mirror = true) keys rows by"
                    ),
                "{identity:?}: {failed:?}"
            );
        }
        // A table that is not mirrored needs neither.
        let mut facts = ready();
        facts.identities[1].has_primary_key = false;
        let mut report = Report::default();
        assess_mirrors(&mut report, &facts, &mirrored);
        assert!(report.is_ready(), "{report}");
    }

    #[test]
    fn a_ready_source_passes_with_what_a_start_will_create() {
        let report = assess(&ready(), &source());
        assert!(report.is_ready(), "{report}");
        let text = report.to_string();
        assert!(
            text.contains(
                "ok    slot \"shop\": missing, a start creates it (2 of 10 slots in use)"
            ),
            "{text}"
        );
        assert!(
            text.contains("ok    publication \"shop\": missing, a start creates it"),
            "{text}"
        );
        assert!(
            text.ends_with("check: the pipeline is ready to run\n"),
            "{text}"
        );
        assert!(report.into_refusal().is_none());
    }

    /// A server without logical decoding and a role without REPLICATION that owns its tables.
    fn no_slot() -> SourceFacts {
        let mut facts = ready();
        facts.server.wal_level = "replica".into();
        facts.role.replication = false;
        facts
    }

    fn auto() -> SourceConfig {
        SourceConfig {
            capture: CaptureMode::Auto,
            ..source()
        }
    }

    #[test]
    fn auto_takes_the_slot_where_it_can_and_says_why() {
        let choice = choose(&ready(), &auto()).unwrap();
        assert_eq!(choice.capture, Capture::Wal);
        assert_eq!(
            choice.why,
            "source.capture = \"auto\": wal_level = logical and role \"app\" can replicate"
        );
        let report = assess(&ready(), &auto());
        assert!(report.is_ready(), "{report}");
        let text = report.to_string();
        assert!(
            text.contains("note  trigger capture (source.capture = \"trigger\") is possible too"),
            "{text}"
        );
    }

    #[test]
    fn auto_takes_triggers_without_logical_decoding_and_reports_what_a_slot_would_need() {
        let choice = choose(&no_slot(), &auto()).unwrap();
        assert_eq!(choice.capture, Capture::Trigger);
        assert_eq!(
            choice.why,
            "source.capture = \"auto\": no slot, since wal_level = replica and role \"app\" has no REPLICATION attribute"
        );
        let report = assess(&no_slot(), &auto());
        assert!(report.is_ready(), "{report}");
        let text = report.to_string();
        assert!(
            text.contains("ok    capture: trigger (source.capture"),
            "{text}"
        );
        assert!(
            text.contains("note  capture from a slot would need: (1) the source server runs with wal_level = replica")
                && text.contains("(2) role \"app\" has neither the REPLICATION attribute"),
            "{text}"
        );
        assert!(
            text.contains("ok    schema \"tributary\": missing, a start creates it"),
            "{text}"
        );
        // Nothing of the slot's is looked at.
        assert!(!text.contains("slot \"shop\""), "{text}");
        assert!(!text.contains("WAL senders"), "{text}");
    }

    #[test]
    fn where_neither_mode_is_possible_the_refusal_lists_what_each_would_need() {
        let mut facts = no_slot();
        facts.tables[1].trigger = false;
        facts.role.create_in_database = false;
        let error = choose(&facts, &auto()).unwrap_err().to_string();
        assert!(
            error.starts_with("neither capture mode is possible"),
            "{error}"
        );
        for needed in [
            "wal_level = replica",
            "ALTER ROLE app REPLICATION",
            "GRANT TRIGGER, UPDATE ON public.customers TO app",
            "GRANT CREATE ON DATABASE shop TO app",
        ] {
            assert!(error.contains(needed), "{needed}: {error}");
        }
        // Asked for by name, a mode is judged on its own needs.
        let trigger = SourceConfig {
            capture: CaptureMode::Trigger,
            ..source()
        };
        let failures = failures(&assess(&facts, &trigger));
        assert_eq!(failures.len(), 2, "{failures:?}");
        let mut owned_elsewhere = no_slot();
        owned_elsewhere.trigger_schema = Some(false);
        let failures = failures_of(&owned_elsewhere, &trigger);
        assert!(
            failures[0].contains("ALTER SCHEMA tributary OWNER TO app"),
            "{failures:?}"
        );
        let mut none_listed = trigger.clone();
        none_listed.tables.clear();
        assert!(failures_of(&no_slot(), &none_listed)[0].contains("list the tables to capture"),);
    }

    fn failures_of(facts: &SourceFacts, source: &SourceConfig) -> Vec<String> {
        failures(&assess(facts, source))
    }

    #[test]
    fn a_refusal_of_another_part_of_the_pipeline_is_a_problem_of_the_report() {
        let mut report = assess(&ready(), &source());
        report.refuse("cannot read plugin /p/mask.wasm: No such file or directory".into());
        assert!(!report.is_ready());
        let text = report.to_string();
        assert!(
            text.ends_with(
                "FAIL  cannot read plugin /p/mask.wasm: No such file or directory\n\
                 check: 1 problem to fix\n"
            ),
            "{text}"
        );
        // A start refuses with it, in its own words.
        assert!(matches!(
            report.into_refusal(),
            Some(Refusal::Said(reason)) if reason == "cannot read plugin /p/mask.wasm: No such file or directory"
        ));
    }

    #[test]
    fn every_failure_comes_in_one_report_with_its_fix() {
        let mut facts = ready();
        facts.server.wal_level = "replica".into();
        facts.role.replication = false;
        facts.server.wal_senders_in_use = 10;
        facts.tables[1].select = false;
        facts.identities[0].has_primary_key = false;
        let mut cfg = source();
        cfg.start_from = StartFrom::Full;
        let report = assess(&facts, &cfg);
        let failures = failures(&report);
        assert_eq!(failures.len(), 5, "{report}");
        assert!(failures[0].contains("wal_level = replica"), "{report}");
        assert!(
            failures[1].ends_with("run: ALTER ROLE app REPLICATION"),
            "{report}"
        );
        assert!(
            failures[2].contains("ALTER SYSTEM SET max_wal_senders = 11"),
            "{report}"
        );
        assert!(
            failures[3].contains("run: ALTER TABLE public.orders ADD PRIMARY KEY"),
            "{report}"
        );
        assert_eq!(
            failures[4],
            "role \"app\" cannot SELECT from table public.customers, which the full load of \
             source.start_from = \"full\" reads; run: GRANT SELECT ON public.customers TO app"
        );
        assert!(
            report.to_string().ends_with("check: 5 problems to fix\n"),
            "{report}"
        );
        let Some(Refusal::Several(report)) = report.into_refusal() else {
            panic!("several failures refuse with the report");
        };
        let text = describe_failures(&report);
        assert!(
            text.starts_with("this pipeline cannot start: 5 problems"),
            "{text}"
        );
        assert!(text.contains("\n  4. table public.orders"), "{text}");
    }

    #[test]
    fn select_is_a_warning_unless_a_full_load_needs_it() {
        let mut facts = ready();
        facts.tables[0].select = false;
        let report = assess(&facts, &source());
        assert!(report.is_ready(), "{report}");
        let warnings: Vec<String> = report.warnings().map(|e| e.to_string()).collect();
        assert_eq!(warnings.len(), 1, "{report}");
        assert!(
            warnings[0].contains("GRANT SELECT ON public.orders TO app"),
            "{report}"
        );
        assert!(report.to_string().ends_with(", 1 warning\n"), "{report}");
    }

    #[test]
    fn one_failure_refuses_as_itself() {
        let mut facts = ready();
        facts.server.wal_level = "minimal".into();
        let Some(Refusal::One(e)) = assess(&facts, &source()).into_refusal() else {
            panic!("one failure refuses as itself");
        };
        assert!(matches!(e, ProvisionError::WalLevel(level) if level == "minimal"));
    }

    #[test]
    fn a_missing_slot_needs_create_and_a_free_slot() {
        let mut cfg = source();
        cfg.slot_behavior = Some(Provisioning::Reuse);
        let report = assess(&ready(), &cfg);
        assert_eq!(
            failures(&report),
            [
                "slot \"shop\" does not exist and source.slot_behavior = \"reuse\" does not create it; \
              run: SELECT pg_create_logical_replication_slot('shop', 'pgoutput'), or set \
              source.slot_behavior = \"create\""
            ]
        );
        let mut facts = ready();
        facts.server.slots_in_use = 10;
        let failures = failures(&assess(&facts, &source()));
        assert!(
            failures[0].contains("ALTER SYSTEM SET max_replication_slots = 11"),
            "{failures:?}"
        );
        // An existing slot needs no free one.
        facts.slot = Some(SlotState {
            plugin: "pgoutput".into(),
            database: "shop".into(),
            holder: None,
            confirmed_flush_lsn: Some(Lsn(0x10)),
            restart_lsn: None,
            wal_status: None,
            safe_wal_size: None,
            two_phase: false,
        });
        assert!(assess(&facts, &source()).is_ready());
    }

    #[test]
    fn the_publication_must_cover_the_tables_or_be_creatable() {
        let mut facts = ready();
        facts.publication = Some(PublicationFacts {
            publishes: Publishes {
                update: true,
                delete: true,
            },
            tables: vec!["public.orders".into()],
        });
        assert_eq!(
            failures(&assess(&facts, &source())),
            [
                "publication \"shop\" does not publish public.customers; run: ALTER PUBLICATION shop ADD TABLE public.customers"
            ]
        );
        let mut facts = ready();
        facts.tables[0].owned = false;
        assert_eq!(
            failures(&assess(&facts, &source())),
            [
                "publication \"shop\" does not exist, and role \"app\" cannot create it (it does not \
              own public.orders); as a superuser or the tables' owner, run: CREATE PUBLICATION \
              shop FOR TABLE public.orders, public.customers WITH (publish_via_partition_root = true)"
            ]
        );
        let mut cfg = source();
        cfg.publication_behavior = Some(Provisioning::Reuse);
        assert!(failures(&assess(&ready(), &cfg))[0].contains("run: CREATE PUBLICATION shop"));
    }

    #[test]
    fn the_server_version_decides_what_the_options_may_ask() {
        let mut facts = ready();
        facts.server.version_num = 130_011;
        facts.server.version = "13.11".into();
        let report = assess(&facts, &source());
        assert!(report.is_ready(), "{report}");
        assert!(
            report
                .warnings()
                .next()
                .unwrap()
                .to_string()
                .contains("13.11"),
            "{report}"
        );
        let mut cfg = source();
        cfg.binary = true;
        assert!(
            failures(&assess(&facts, &cfg))[0].contains("source.binary = true needs PostgreSQL 14"),
        );
        facts.server.version_num = 120_015;
        facts.server.version = "12.15".into();
        assert_eq!(
            failures(&assess(&facts, &source())),
            [
                "the source server runs PostgreSQL 12.15; tributary needs PostgreSQL 13 or newer \
              (slots' WAL status, publications that publish through the partition root): upgrade \
              the server"
            ],
            "nothing else is judged on a server this old"
        );
    }

    #[test]
    fn a_missing_table_and_the_toast_policy_are_checked_per_table() {
        let mut facts = ready();
        facts.tables[0].exists = false;
        facts.identities.remove(0);
        facts.identities[0].toastable = vec!["name".into()];
        let mut cfg = source();
        cfg.unchanged_toast = UnchangedToastPolicy::Refuse;
        let failures = failures(&assess(&facts, &cfg));
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].starts_with("table public.orders does not exist"));
        assert!(failures[1].contains("REPLICA IDENTITY FULL"));
        // Triggers read whole rows: the TOAST policy does not matter to them.
        let trigger = SourceConfig {
            capture: CaptureMode::Trigger,
            ..cfg
        };
        let trigger_failures = failures_of(&facts, &trigger);
        assert_eq!(trigger_failures.len(), 1, "{trigger_failures:?}");
        assert!(trigger_failures[0].starts_with("table public.orders does not exist"));
    }
}
