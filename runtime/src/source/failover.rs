//! Failover of the source: whether the slot is a failover slot that a physical standby keeps
//! synchronised (PostgreSQL 17), so that a pipeline goes on from a promoted standby, and
//! whether a pipeline can decode on a hot standby (PostgreSQL 16). [`gather`] reads the facts
//! over SQL (from the source, and from `source.standby_url` when given); [`assess`] adds their
//! lines to the prerequisite report without IO.

use tokio_postgres::Client;

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

async fn server_facts(client: &Client, slot: &str) -> Result<ServerFailoverFacts, ProvisionError> {
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
    let standby = match &source.standby_url {
        None => None,
        Some(url) => Some(
            standby_facts(url, &source.slot)
                .await
                .map_err(|e| e.to_string()),
        ),
    };
    Ok(FailoverFacts {
        source: facts,
        standby,
    })
}

async fn standby_facts(url: &str, slot: &str) -> Result<ServerFailoverFacts, ProvisionError> {
    let config = crate::source::connect::parse_url(url)?;
    let client = crate::source::connect::sql(&config).await?;
    server_facts(&client, slot).await
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
    match &facts.standby {
        None => report.ok(
            "standby: not checked (name it in source.standby_url to check that it synchronises \
             the slot)"
                .into(),
        ),
        Some(Err(error)) => report.warn(ProvisionError::Failover(format!(
            "source.standby_url could not be asked whether it synchronises slot {slot:?}: {error}"
        ))),
        Some(Ok(standby)) => assess_standby(report, standby, slot),
    }
}

/// The standby `source.standby_url` names: does it keep the failover slot?
fn assess_standby(report: &mut Report, standby: &ServerFailoverFacts, slot: &str) {
    let setup = "on the standby, set sync_replication_slots = on and hot_standby_feedback = on, \
                 name its physical slot in primary_slot_name and a database in primary_conninfo";
    if !standby.in_recovery {
        report.warn(ProvisionError::Failover(format!(
            "source.standby_url is not a standby (not in recovery), so it cannot synchronise \
             slot {slot:?}"
        )));
        return;
    }
    match standby.slot {
        Some(state) if state.synced && !state.temporary => report.ok(format!(
            "standby: synchronises slot {slot:?} (synced), a promotion keeps it"
        )),
        Some(state) if state.synced => report.warn(ProvisionError::Failover(format!(
            "the standby holds slot {slot:?} only as a temporary synchronised slot, which a \
             promotion drops: it becomes permanent once the pipeline has confirmed a position \
             past where the standby could serve it from"
        ))),
        Some(_) => report.warn(ProvisionError::Failover(format!(
            "the standby has a slot {slot:?} of its own, not one synchronised from the primary"
        ))),
        None if standby.sync_replication_slots != Some(true) => {
            report.warn(ProvisionError::Failover(format!(
                "the standby does not synchronise slot {slot:?}: sync_replication_slots is off; \
                 {setup}"
            )))
        }
        None => report.warn(ProvisionError::Failover(format!(
            "the standby has no copy of slot {slot:?} yet ({setup}; a synchronised slot \
             appears once the pipeline has confirmed a position)"
        ))),
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
        assert!(said[2].starts_with("ok standby: not checked"), "{said:?}");

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
                "ok standby: synchronises slot \"shop\" (synced), a promotion keeps it",
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
                "warn the standby does not synchronise slot \"shop\": sync_replication_slots is off"
            ),
            "{said:?}"
        );
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
