//! Failover of the source: whether the slot is a failover slot that a physical standby keeps
//! synchronised (PostgreSQL 17), so that a pipeline goes on from a promoted standby, and
//! whether a pipeline can decode on a hot standby (PostgreSQL 16). [`gather`] reads the facts
//! over SQL (from the source, and from `source.standby_url` when given); [`assess`] adds their
//! lines to the prerequisite report without IO.
//!
//! Whether a promotion now keeps the slot is one judgement, [`StandbyCopy`], which `check`,
//! `status` and the readiness gauge word alike. A PostgreSQL 17 standby keeps its synchronised
//! copy temporary (and drops it at a promotion) until the primary's slot has moved past the
//! standby's catalog horizon; [`log_standby_snapshot`] is how a running pipeline shortens that
//! window.

use serde::Serialize;
use tokio_postgres::Client;

use crate::Lsn;
use crate::config::SourceConfig;
use crate::source::prerequisites::Report;
use crate::source::provision::{ProvisionError, query_error};

/// Failover slots: PostgreSQL 17.
pub const FAILOVER_SERVER: u32 = 170_000;
/// Logical decoding on a standby: PostgreSQL 16.
const STANDBY_DECODING_SERVER: u32 = 160_000;

/// A slot's failover state (`pg_replication_slots`, PostgreSQL 17; false before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotFailover {
    /// Created or marked as a failover slot.
    pub failover: bool,
    /// On a standby: kept synchronised from the primary (on a promoted standby it stays true).
    pub synced: bool,
    /// A synchronised slot is temporary until the primary's has moved past where the standby
    /// could serve it from; it is usable after a promotion only once it is not.
    pub temporary: bool,
}

/// The slot's failover state, `None` when it does not exist.
pub async fn slot_failover(
    client: &Client,
    slot: &str,
) -> Result<Option<SlotFailover>, ProvisionError> {
    let row = client
        .query_opt(
            // Read through jsonb: `failover` and `synced` exist from PostgreSQL 17.
            "SELECT coalesce((to_jsonb(s) ->> 'failover')::bool, false),
                    coalesce((to_jsonb(s) ->> 'synced')::bool, false), temporary
             FROM pg_replication_slots s WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query_error(format!(
            "looking up the failover state of slot {slot:?}"
        )))?;
    Ok(row.map(|r| SlotFailover {
        failover: r.get(0),
        synced: r.get(1),
        temporary: r.get(2),
    }))
}

/// One server as the failover lines need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFailoverFacts {
    pub version_num: u32,
    pub version: String,
    /// A standby in recovery (`pg_is_in_recovery()`).
    pub in_recovery: bool,
    pub wal_level: String,
    pub hot_standby_feedback: bool,
    /// `synchronized_standby_slots` (PostgreSQL 17; `None` before).
    pub standby_slots: Option<String>,
    /// `sync_replication_slots` (PostgreSQL 17; `None` before).
    pub sync_replication_slots: Option<bool>,
    pub slot: Option<SlotFailover>,
}

/// The source, and the standby `source.standby_url` names (or why it could not be asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverFacts {
    pub source: ServerFailoverFacts,
    pub standby: Option<Result<ServerFailoverFacts, String>>,
}

/// The failover facts of the server behind `client`, with its view of `slot`.
pub async fn server_facts(
    client: &Client,
    slot: &str,
) -> Result<ServerFailoverFacts, ProvisionError> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version'),
                    pg_is_in_recovery(), current_setting('wal_level'),
                    current_setting('hot_standby_feedback')::bool,
                    current_setting('synchronized_standby_slots', true),
                    current_setting('sync_replication_slots', true)::bool",
            &[],
        )
        .await
        .map_err(query_error("reading the failover settings"))?;
    Ok(ServerFailoverFacts {
        version_num: row.get::<_, i32>(0) as u32,
        version: row.get(1),
        in_recovery: row.get(2),
        wal_level: row.get(3),
        hot_standby_feedback: row.get(4),
        standby_slots: row.get(5),
        sync_replication_slots: row.get(6),
        slot: slot_failover(client, slot).await?,
    })
}

/// Read the facts: the source's over `client`, the standby's over a connection of its own.
pub async fn gather(
    client: &Client,
    source: &SourceConfig,
) -> Result<FailoverFacts, ProvisionError> {
    let facts = server_facts(client, &source.slot).await?;
    Ok(FailoverFacts {
        source: facts,
        standby: ask_standby(source, &source.slot).await,
    })
}

/// The facts of the standby `source.standby_url` names, over a connection of its own, with its
/// view of `slot`: `None` without one, the error when it could not be asked.
pub async fn ask_standby(
    source: &SourceConfig,
    slot: &str,
) -> Option<Result<ServerFailoverFacts, String>> {
    let url = source.standby_url.as_deref()?;
    let asked = async {
        let config = crate::source::connect::parse_url(url)?;
        let client = crate::source::connect::sql(&config).await?;
        server_facts(&client, slot).await
    };
    Some(asked.await.map_err(|e| e.to_string()))
}

/// The failover lines of the report.
pub fn assess(report: &mut Report, facts: &FailoverFacts, source: &SourceConfig) {
    let server = &facts.source;
    let slot = &source.slot;
    if server.in_recovery {
        assess_standby_source(report, server, source);
        return;
    }
    if source.failover && server.version_num < FAILOVER_SERVER {
        report.fail(ProvisionError::FailoverNeedsNewerServer {
            version: server.version.clone(),
        });
        return;
    }
    if server.version_num < FAILOVER_SERVER {
        return;
    }
    match (server.slot, source.failover) {
        (Some(state), _) if state.failover => report.ok(format!("slot {slot:?}: a failover slot")),
        (Some(_), true) => report.warn(ProvisionError::Failover(format!(
            "slot {slot:?} is not a failover slot, and source.failover = true: a start makes it \
             one (ALTER_REPLICATION_SLOT {slot} (FAILOVER true)) once no one streams from it"
        ))),
        (Some(_), false) => report.ok(format!(
            "slot {slot:?}: not a failover slot (source.failover = false): a promoted standby \
             will not have it, and the pipeline stops at a failover"
        )),
        (None, true) => report.ok(format!(
            "slot {slot:?}: a start creates it as a failover slot"
        )),
        (None, false) => {}
    }
    if !source.failover {
        return;
    }
    match server.standby_slots.as_deref().map(str::trim) {
        Some(slots) if !slots.is_empty() => report.ok(format!(
            "synchronized_standby_slots = '{slots}': changes reach the pipeline only once those \
             standbys have them"
        )),
        _ => report.warn(ProvisionError::Failover(
            "synchronized_standby_slots is not set on the primary: the pipeline may land changes \
             a standby has not received yet, and after that standby's promotion the lake would \
             be ahead of the new primary (tributary then stops); run: ALTER SYSTEM SET \
             synchronized_standby_slots = '<the standby's physical slot>', then SELECT \
             pg_reload_conf()"
                .into(),
        )),
    }
    let copy = StandbyCopy::judge(facts.standby.as_ref());
    match copy {
        StandbyCopy::Persistent => report.ok(copy.describe(slot)),
        StandbyCopy::NotNamed => report.note(copy.describe(slot)),
        _ => report.warn(ProvisionError::Failover(copy.describe(slot))),
    }
}

/// What the standby of `source.standby_url` holds of the failover slot, and so whether a
/// promotion now keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StandbyCopy {
    /// No `source.standby_url`: nobody can say.
    NotNamed,
    /// The standby could not be asked, and why.
    Unreachable(String),
    /// `source.standby_url` is not in recovery.
    NotAStandby,
    /// A synchronised copy that is no longer temporary: a promotion keeps it.
    Persistent,
    /// A synchronised copy that is still temporary: a promotion drops it.
    Temporary,
    /// A slot of the same name that the standby made itself (its slot sync refuses to
    /// overwrite it).
    OwnSlot,
    /// No copy, and the standby does not synchronise slots (`sync_replication_slots` off).
    NotSynchronising,
    /// No copy yet, though the standby synchronises slots.
    Missing,
}

/// How a standby is set up to synchronise failover slots.
const STANDBY_SETUP: &str = "on the standby, set sync_replication_slots = on and \
    hot_standby_feedback = on, name its physical slot in primary_slot_name and a database in \
    primary_conninfo";

impl StandbyCopy {
    /// Judge the standby's facts (`None` without `source.standby_url`; the error when it could
    /// not be asked).
    pub fn judge(standby: Option<&Result<ServerFailoverFacts, String>>) -> StandbyCopy {
        let standby = match standby {
            None => return StandbyCopy::NotNamed,
            Some(Err(error)) => return StandbyCopy::Unreachable(error.clone()),
            Some(Ok(standby)) => standby,
        };
        if !standby.in_recovery {
            return StandbyCopy::NotAStandby;
        }
        match standby.slot {
            Some(state) if state.synced && !state.temporary => StandbyCopy::Persistent,
            Some(state) if state.synced => StandbyCopy::Temporary,
            Some(_) => StandbyCopy::OwnSlot,
            None if standby.sync_replication_slots != Some(true) => StandbyCopy::NotSynchronising,
            None => StandbyCopy::Missing,
        }
    }

    /// A promotion of the standby now keeps the slot: the pipeline would go on from it.
    pub fn ready(&self) -> bool {
        *self == StandbyCopy::Persistent
    }

    /// The judgement in one sentence about `slot`, with what to do where something can be
    /// done.
    pub fn describe(&self, slot: &str) -> String {
        match self {
            StandbyCopy::NotNamed => format!(
                "failover readiness not known: set source.standby_url to the standby that \
                 synchronises slot {slot:?} to see whether a promotion keeps it"
            ),
            StandbyCopy::Unreachable(error) => format!(
                "failover readiness not known: source.standby_url could not be asked whether \
                 it holds slot {slot:?}: {error}"
            ),
            StandbyCopy::NotAStandby => format!(
                "failover readiness not known: source.standby_url is not a standby (not in \
                 recovery), so it cannot synchronise slot {slot:?}; point it at the physical \
                 standby that a failover would promote"
            ),
            StandbyCopy::Persistent => format!(
                "failover ready: the standby holds slot {slot:?} synchronised and persistent, \
                 so a promotion keeps it"
            ),
            StandbyCopy::Temporary => format!(
                "failover not ready: the standby holds slot {slot:?} only as a temporary \
                 synchronised copy, which a promotion drops, so a failover now would lose the \
                 slot; PostgreSQL 17 keeps the copy temporary until the primary's slot has \
                 moved past the standby's catalog horizon, which takes a position the pipeline \
                 confirmed after a running-xacts record (a running pipeline asks the primary \
                 for one and confirms past it)"
            ),
            StandbyCopy::OwnSlot => format!(
                "failover not ready: the standby has a slot {slot:?} of its own, not one \
                 synchronised from the primary, and its slot sync will not replace it; drop it \
                 on the standby (SELECT pg_drop_replication_slot('{slot}'))"
            ),
            StandbyCopy::NotSynchronising => format!(
                "failover not ready: the standby does not synchronise slot {slot:?} \
                 (sync_replication_slots is off), so a failover would lose the slot; \
                 {STANDBY_SETUP}"
            ),
            StandbyCopy::Missing => format!(
                "failover not ready: the standby has no copy of slot {slot:?} yet, so a \
                 failover now would lose the slot; a copy appears once the slot exists on the \
                 primary as a failover slot and the standby's slot sync has seen it (if it \
                 never does: {STANDBY_SETUP})"
            ),
        }
    }
}

/// Have the primary write a running-xacts record now (`pg_log_standby_snapshot()`,
/// PostgreSQL 16 and newer), and return where it ends; `None` when the role may not (the
/// function is the superuser's unless granted).
///
/// A failover slot's copy on a standby stays temporary until the primary's slot has moved past
/// the standby's catalog horizon (taken when the standby made the copy), and the primary's
/// slot moves only at a running-xacts record the consumer then confirms past. The server
/// writes one every 15 s, and only while other WAL is written; a consumer that confirms past
/// one written after the copy was made has the copy persist at the standby's next slot sync.
pub async fn log_standby_snapshot(client: &Client) -> Result<Option<Lsn>, ProvisionError> {
    match client
        .query_one("SELECT pg_log_standby_snapshot()::text", &[])
        .await
    {
        Ok(row) => {
            let text: String = row.get(0);
            let lsn = text.parse().map_err(|e| {
                ProvisionError::Failover(format!(
                    "pg_log_standby_snapshot() returned {text:?}, not a WAL position: {e}"
                ))
            })?;
            Ok(Some(lsn))
        }
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            Ok(None)
        }
        Err(e) => Err(query_error("asking the primary for a running-xacts record")(e)),
    }
}

/// `source.url` is a hot standby: can a pipeline decode there?
fn assess_standby_source(report: &mut Report, server: &ServerFailoverFacts, source: &SourceConfig) {
    let version = &server.version;
    if server.version_num < STANDBY_DECODING_SERVER {
        report.fail(ProvisionError::Failover(format!(
            "source.url is a hot standby running PostgreSQL {version}; logical decoding on a \
             standby needs PostgreSQL 16 or newer: point source.url at the primary"
        )));
        return;
    }
    report.ok(format!(
        "source.url is a hot standby: PostgreSQL {version} decodes on a standby"
    ));
    if source.failover {
        report.fail(ProvisionError::Failover(
            "source.failover = true, but source.url is a standby, where a failover slot cannot \
             be created (the primary's failover slots are synchronised to it instead): point \
             source.url at the primary, or set source.failover = false"
                .into(),
        ));
    }
    if server.hot_standby_feedback {
        report.ok(
            "hot_standby_feedback = on: the primary keeps the catalog rows the slot needs".into(),
        );
    } else {
        report.warn(ProvisionError::Failover(
            "hot_standby_feedback is off on this standby: the primary may remove catalog rows \
             the slot still needs, and the server then invalidates the slot; set \
             hot_standby_feedback = on on the standby"
                .into(),
        ));
    }
    // A standby shows its own wal_level; the primary's is in its WAL, and the server refuses a
    // slot (and invalidates one) when it is below logical.
    report.ok(format!(
        "wal_level of the primary: not visible over SQL from a standby (this standby's is {}); \
         the server refuses to create the slot if the primary's is below logical",
        server.wal_level
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::prerequisites::Finding;

    fn primary(version_num: u32) -> ServerFailoverFacts {
        ServerFailoverFacts {
            version_num,
            version: format!("{}.2", version_num / 10_000),
            in_recovery: false,
            wal_level: "logical".into(),
            hot_standby_feedback: false,
            standby_slots: Some(String::new()),
            sync_replication_slots: Some(false),
            slot: None,
        }
    }

    fn lines(facts: &FailoverFacts, source: &SourceConfig) -> Vec<String> {
        let mut report = Report::default();
        assess(&mut report, facts, source);
        report
            .findings
            .iter()
            .map(|f| match f {
                Finding::Ok(text) => format!("ok {text}"),
                Finding::Warning(e) => format!("warn {e}"),
                Finding::Advised(text) => format!("warn {text}"),
                Finding::Failure(e) => format!("FAIL {e}"),
                Finding::Refused(text) => format!("FAIL {text}"),
                Finding::Note(text) => format!("note {text}"),
            })
            .collect()
    }

    fn failover_source() -> SourceConfig {
        SourceConfig {
            failover: true,
            ..SourceConfig::new("postgres://a@db/shop", "shop", "shop", &[])
        }
    }

    #[test]
    fn failover_needs_postgresql_17_and_names_the_setting() {
        let facts = FailoverFacts {
            source: primary(160_004),
            standby: None,
        };
        let said = lines(&facts, &failover_source());
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("FAIL source.failover = true needs PostgreSQL 17"),
            "{said:?}"
        );
        let plain = SourceConfig::new("postgres://a@db/shop", "shop", "shop", &[]);
        assert!(lines(&facts, &plain).is_empty());
    }

    #[test]
    fn the_slot_the_standby_slots_and_the_standby_are_each_a_line() {
        let mut source = primary(170_002);
        source.slot = Some(SlotFailover::default());
        let facts = FailoverFacts {
            source: source.clone(),
            standby: None,
        };
        let said = lines(&facts, &failover_source());
        assert!(
            said[0].starts_with("warn slot \"shop\" is not a failover slot"),
            "{said:?}"
        );
        assert!(said[0].contains("ALTER_REPLICATION_SLOT"), "{said:?}");
        assert!(
            said[1].starts_with("warn synchronized_standby_slots is not set"),
            "{said:?}"
        );
        assert_eq!(
            said[2],
            "note failover readiness not known: set source.standby_url to the standby that \
             synchronises slot \"shop\" to see whether a promotion keeps it"
        );

        source.slot = Some(SlotFailover {
            failover: true,
            ..SlotFailover::default()
        });
        source.standby_slots = Some("standby1".into());
        let mut standby = primary(170_002);
        standby.in_recovery = true;
        standby.slot = Some(SlotFailover {
            failover: true,
            synced: true,
            temporary: false,
        });
        let facts = FailoverFacts {
            source,
            standby: Some(Ok(standby.clone())),
        };
        let said = lines(&facts, &failover_source());
        assert_eq!(
            said,
            [
                "ok slot \"shop\": a failover slot",
                "ok synchronized_standby_slots = 'standby1': changes reach the pipeline only once those standbys have them",
                "ok failover ready: the standby holds slot \"shop\" synchronised and persistent, so a promotion keeps it",
            ]
        );

        standby.slot = None;
        let facts = FailoverFacts {
            standby: Some(Ok(standby)),
            ..facts
        };
        let said = lines(&facts, &failover_source());
        assert!(
            said[2].starts_with(
                "warn failover not ready: the standby does not synchronise slot \"shop\" \
                 (sync_replication_slots is off)"
            ),
            "{said:?}"
        );
    }

    #[test]
    fn only_a_persistent_synchronised_copy_is_ready() {
        let mut standby = primary(170_002);
        standby.in_recovery = true;
        standby.sync_replication_slots = Some(true);
        let judged = |standby: &ServerFailoverFacts, slot: Option<SlotFailover>| {
            let facts = ServerFailoverFacts {
                slot,
                ..standby.clone()
            };
            StandbyCopy::judge(Some(&Ok(facts)))
        };
        let synced = |temporary: bool| SlotFailover {
            failover: true,
            synced: true,
            temporary,
        };
        assert_eq!(
            judged(&standby, Some(synced(false))),
            StandbyCopy::Persistent
        );
        assert_eq!(judged(&standby, Some(synced(true))), StandbyCopy::Temporary);
        assert_eq!(
            judged(&standby, Some(SlotFailover::default())),
            StandbyCopy::OwnSlot
        );
        assert_eq!(judged(&standby, None), StandbyCopy::Missing);
        let mut off = standby.clone();
        off.sync_replication_slots = Some(false);
        assert_eq!(judged(&off, None), StandbyCopy::NotSynchronising);
        let mut primary_too = standby.clone();
        primary_too.in_recovery = false;
        assert_eq!(
            judged(&primary_too, Some(synced(false))),
            StandbyCopy::NotAStandby
        );
        assert_eq!(StandbyCopy::judge(None), StandbyCopy::NotNamed);
        assert_eq!(
            StandbyCopy::judge(Some(&Err("connection refused".into()))),
            StandbyCopy::Unreachable("connection refused".into())
        );
        let all = [
            StandbyCopy::Persistent,
            StandbyCopy::Temporary,
            StandbyCopy::OwnSlot,
            StandbyCopy::Missing,
            StandbyCopy::NotSynchronising,
            StandbyCopy::NotAStandby,
            StandbyCopy::NotNamed,
            StandbyCopy::Unreachable("connection refused".into()),
        ];
        let ready: Vec<_> = all.iter().filter(|c| c.ready()).collect();
        assert_eq!(ready, [&StandbyCopy::Persistent]);
        // A temporary copy says that a failover now loses the slot, and why.
        let said = StandbyCopy::Temporary.describe("shop");
        for part in [
            "failover not ready: the standby holds slot \"shop\" only as a temporary",
            "a failover now would lose the slot",
            "past the standby's catalog horizon",
            "after a running-xacts record",
        ] {
            assert!(said.contains(part), "{part:?} not in {said:?}");
        }
        assert!(
            StandbyCopy::Missing
                .describe("shop")
                .contains("set sync_replication_slots = on"),
            "the setup hint"
        );
    }

    #[test]
    fn the_check_words_the_standby_copy_as_status_does() {
        let mut source = primary(170_002);
        source.slot = Some(SlotFailover {
            failover: true,
            ..SlotFailover::default()
        });
        source.standby_slots = Some("standby1".into());
        let mut standby = primary(170_002);
        standby.in_recovery = true;
        standby.sync_replication_slots = Some(true);
        standby.slot = Some(SlotFailover {
            failover: true,
            synced: true,
            temporary: true,
        });
        let facts = FailoverFacts {
            source,
            standby: Some(Ok(standby)),
        };
        let said = lines(&facts, &failover_source());
        let copy = StandbyCopy::judge(facts.standby.as_ref());
        assert_eq!(copy, StandbyCopy::Temporary);
        assert_eq!(said[2], format!("warn {}", copy.describe("shop")));
    }

    #[test]
    fn a_hot_standby_as_source_says_whether_it_can_decode() {
        let mut standby = primary(150_004);
        standby.in_recovery = true;
        let plain = SourceConfig::new("postgres://a@db/shop", "shop", "shop", &[]);
        let facts = FailoverFacts {
            source: standby.clone(),
            standby: None,
        };
        let said = lines(&facts, &plain);
        assert!(
            said[0].starts_with("FAIL source.url is a hot standby running PostgreSQL 15.2"),
            "{said:?}"
        );

        standby.version_num = 160_002;
        standby.version = "16.2".into();
        let facts = FailoverFacts {
            source: standby,
            standby: None,
        };
        let said = lines(&facts, &plain);
        assert!(
            said[0].starts_with("ok source.url is a hot standby: PostgreSQL 16.2 decodes"),
            "{said:?}"
        );
        assert!(
            said[1].starts_with("warn hot_standby_feedback is off"),
            "{said:?}"
        );
        assert!(
            said[2].starts_with("ok wal_level of the primary: not visible"),
            "{said:?}"
        );
    }
}
