//! Which lake a trigger journal captures for, and whether a start may read it. No IO.
//!
//! A slot has an identity the lake can compare itself with: its name, and the position it has
//! confirmed. A journal is a table anyone can drop and create again, and a new one captures
//! only from its installation on. So the schema records who it captures for (`identity`, one
//! row, written in the transaction that installs it): a random id, the sink it was claimed
//! for, and the lake's position when it was claimed. A start judges that record against the
//! lake before it installs anything ([`judge`]), in the words a slot's start uses for a
//! missing slot: a journal that is missing, was installed after the lake's end, or captures
//! for another sink is refused unless `--accept-gap` names exactly that gap
//! ([`token`]), and then the commit log records it.
//!
//! Each pipeline captures into a schema of its own (`source.trigger_schema`): two lakes never
//! share a journal, since each deletes what it landed.

/// What a journal's schema says of the lake it captures for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalOwner {
    /// The journal's random id, made when its schema was installed (`None`: installed by a
    /// version before owners were recorded).
    pub id: Option<String>,
    /// The sink it captures for (`None`: not claimed yet, or an older version's journal).
    pub sink: Option<String>,
    /// The lake's last landed position when the sink claimed it: the journal holds every
    /// change committed after that.
    pub claimed_at: u64,
    /// When it was claimed, for people.
    pub claimed: String,
}

impl JournalOwner {
    /// The short form of the id that messages and `--accept-gap` use.
    pub fn short_id(&self) -> &str {
        self.id
            .as_deref()
            .map_or("unknown", |id| &id[..id.len().min(8)])
    }
}

/// Where the lake stands, as the judgement needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LakeEnd {
    /// The commit log's latest entry; 0 for an empty log (a first run).
    pub sequence: u64,
    /// The last landed position.
    pub landed: u64,
}

/// What a start may do with the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The journal is this lake's and holds everything after its end: read it as it is.
    Keep,
    /// Claim it for this sink at position `at`: a new journal, one of an older version, a
    /// first run's, or one taken with `--accept-gap`. `fresh_ticks` drops the ticks recorded
    /// before (another lake's positions), so the rows waiting are read at this lake's.
    Take {
        at: u64,
        fresh_ticks: bool,
        /// The gap `--accept-gap` named, to state in the log and the commit log.
        gap: Option<String>,
    },
}

/// A journal the lake cannot resume from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalGap {
    #[error(
        "the trigger journal in schema {schema:?} does not exist but the sink already holds changes up to position {landed}: a new journal would capture from its installation on and lose the changes since (was it removed by `tributary teardown`, or dropped by hand?); to start anyway and accept that gap and no other, pass --accept-gap \"{landed}..new journal\" (it is recorded in the commit log)"
    )]
    Missing { schema: String, landed: u64 },
    #[error(
        "the trigger journal in schema {schema:?} (journal {id}) was claimed at position {claimed_at} ({claimed}), after this sink's last landed position {landed}: it was installed again since this lake last read it, and the changes committed in between never reached it (or the sink was restored from an older copy); to start anyway and accept that gap and no other, pass --accept-gap \"{landed}..journal {id}\" (it is recorded in the commit log)"
    )]
    Reinstalled {
        schema: String,
        id: String,
        claimed_at: u64,
        claimed: String,
        landed: u64,
    },
    #[error(
        "the trigger journal in schema {schema:?} (journal {id}) captures for another sink, {theirs} (claimed {claimed}): two pipelines cannot read one journal, since each deletes what it landed; give this pipeline a schema of its own with source.trigger_schema; if that pipeline is gone for good, take its journal over with --accept-gap \"{landed}..journal {id}\" (it is recorded in the commit log)"
    )]
    OtherSink {
        schema: String,
        id: String,
        theirs: String,
        claimed: String,
        landed: u64,
    },
}

/// What `--accept-gap` must say to start from `owner`'s journal (`None`: a new one) when the
/// lake has landed through `landed`.
pub fn token(landed: u64, owner: Option<&JournalOwner>) -> String {
    match owner {
        None => format!("{landed}..new journal"),
        Some(owner) => format!("{landed}..journal {}", owner.short_id()),
    }
}

/// Whether a start of the lake at `lake`, writing to `sink`, may read the journal of `schema`
/// as `found` (`None`: there is none), and how it claims it.
pub fn judge(
    schema: &str,
    found: Option<&JournalOwner>,
    lake: LakeEnd,
    sink: &str,
    accept: Option<&str>,
) -> Result<Claim, JournalGap> {
    let landed = lake.landed;
    let first_run = lake.sequence == 0;
    let accepted = accept.is_some_and(|given| given == token(landed, found));
    let take = |fresh_ticks: bool, gap: bool| Claim::Take {
        at: landed,
        fresh_ticks,
        gap: gap.then(|| token(landed, found)),
    };
    let Some(owner) = found else {
        return match (first_run, accepted) {
            (true, _) => Ok(take(false, false)),
            (false, true) => Ok(take(false, true)),
            (false, false) => Err(JournalGap::Missing {
                schema: schema.to_owned(),
                landed,
            }),
        };
    };
    match owner.sink.as_deref() {
        // Never claimed (an older version's journal): this lake's, as that version assumed.
        None => Ok(take(false, false)),
        Some(theirs) if theirs != sink => match accepted {
            true => Ok(take(true, !first_run)),
            false => Err(JournalGap::OtherSink {
                schema: schema.to_owned(),
                id: owner.short_id().to_owned(),
                theirs: theirs.to_owned(),
                claimed: owner.claimed.clone(),
                landed,
            }),
        },
        // This sink's, and the sink starts over (emptied, or a first run that stopped before
        // its first entry): claimed again from the start.
        Some(_) if first_run => Ok(take(false, false)),
        Some(_) if owner.claimed_at <= landed => Ok(Claim::Keep),
        Some(_) => match accepted {
            true => Ok(take(true, true)),
            false => Err(JournalGap::Reinstalled {
                schema: schema.to_owned(),
                id: owner.short_id().to_owned(),
                claimed_at: owner.claimed_at,
                claimed: owner.claimed.clone(),
                landed,
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINK: &str = "s3://lake/orders";

    fn owner(sink: Option<&str>, claimed_at: u64) -> JournalOwner {
        JournalOwner {
            id: Some("0123456789abcdef".into()),
            sink: sink.map(str::to_owned),
            claimed_at,
            claimed: "2026-12-05 10:00:00+00".into(),
        }
    }

    fn lake(sequence: u64, landed: u64) -> LakeEnd {
        LakeEnd { sequence, landed }
    }

    #[test]
    fn a_first_run_claims_a_new_journal_and_its_own_sinks() {
        assert_eq!(
            judge("tributary", None, lake(0, 0), SINK, None),
            Ok(Claim::Take {
                at: 0,
                fresh_ticks: false,
                gap: None
            })
        );
        let ours = owner(Some(SINK), 40);
        assert!(matches!(
            judge("tributary", Some(&ours), lake(0, 0), SINK, None),
            Ok(Claim::Take {
                at: 0,
                gap: None,
                ..
            })
        ));
    }

    #[test]
    fn a_lake_reads_on_from_its_own_journal() {
        let ours = owner(Some(SINK), 40);
        for landed in [40, 41, 9000] {
            assert_eq!(
                judge("tributary", Some(&ours), lake(7, landed), SINK, None),
                Ok(Claim::Keep)
            );
        }
    }

    #[test]
    fn a_missing_journal_is_refused_with_its_token_and_taken_when_named() {
        let err = judge("tributary", None, lake(7, 120), SINK, None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("schema \"tributary\" does not exist")
                && text.contains("up to position 120")
                && text.contains("--accept-gap \"120..new journal\""),
            "{text}"
        );
        assert_eq!(
            judge(
                "tributary",
                None,
                lake(7, 120),
                SINK,
                Some("120..new journal")
            ),
            Ok(Claim::Take {
                at: 120,
                fresh_ticks: false,
                gap: Some("120..new journal".into())
            })
        );
        // Another gap's token accepts nothing else.
        assert!(
            judge(
                "tributary",
                None,
                lake(7, 120),
                SINK,
                Some("119..new journal")
            )
            .is_err()
        );
    }

    #[test]
    fn a_journal_claimed_after_the_lakes_end_is_refused() {
        let later = owner(Some(SINK), 300);
        let err = judge("tributary", Some(&later), lake(7, 120), SINK, None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("(journal 01234567) was claimed at position 300")
                && text.contains("--accept-gap \"120..journal 01234567\""),
            "{text}"
        );
        assert_eq!(
            judge(
                "tributary",
                Some(&later),
                lake(7, 120),
                SINK,
                Some("120..journal 01234567")
            ),
            Ok(Claim::Take {
                at: 120,
                fresh_ticks: true,
                gap: Some("120..journal 01234567".into())
            })
        );
    }

    #[test]
    fn another_sinks_journal_is_refused_even_on_a_first_run() {
        let theirs = owner(Some("s3://lake/other"), 5);
        for at in [lake(0, 0), lake(3, 50)] {
            let text = judge("tributary", Some(&theirs), at, SINK, None)
                .unwrap_err()
                .to_string();
            assert!(
                text.contains("captures for another sink, s3://lake/other")
                    && text.contains("source.trigger_schema"),
                "{text}"
            );
        }
        assert!(matches!(
            judge(
                "tributary",
                Some(&theirs),
                lake(0, 0),
                SINK,
                Some("0..journal 01234567")
            ),
            Ok(Claim::Take {
                fresh_ticks: true,
                gap: None,
                ..
            })
        ));
    }

    #[test]
    fn an_older_versions_journal_is_claimed_where_the_lake_stands() {
        let legacy = JournalOwner {
            id: None,
            sink: None,
            claimed_at: 0,
            claimed: String::new(),
        };
        assert_eq!(
            judge("tributary", Some(&legacy), lake(7, 120), SINK, None),
            Ok(Claim::Take {
                at: 120,
                fresh_ticks: false,
                gap: None
            })
        );
    }
}
