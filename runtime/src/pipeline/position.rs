//! Where a run starts reading: `source.start_from` on a pipeline's first run, the commit log on
//! every later one. No IO: the facts come in, the decision goes out.
//!
//! PostgreSQL decodes from the slot's `restart_lsn` and sends every transaction whose commit
//! record is at or after the position `START_REPLICATION` names, but never one before the
//! slot's confirmed position: a position behind it is silently moved up to it. So:
//!
//! - `tail` names the server's current WAL position (a new slot starts there anyway);
//! - `head` names nothing (`0/0`), which the server reads as the slot's confirmed position:
//!   everything the slot still holds;
//! - `lsn:X` names X, refused when it is behind the slot's confirmed position (the server
//!   would start elsewhere without a word), before a slot not yet created (which can only
//!   start at the current position), or past the current position.
//!
//! The first open entry records the choice and starts the lake at that position, so a run
//! that stops before its first flush resumes there and not at the slot's older position.

use crate::Lsn;
use crate::config::StartFrom;
use crate::lake::commit::StartedFrom;
use crate::source::provision::{ProvisionError, SlotState};
use crate::source::trigger::owner::LakeEnd;

/// A first run's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FirstStart {
    pub from: StartFrom,
    /// The position `START_REPLICATION` names (`0/0`: the slot's confirmed position).
    pub at: Lsn,
}

impl FirstStart {
    /// What the first open entry records, once the slot is held at `slot_confirmed`.
    pub fn started(&self, slot_confirmed: Lsn) -> StartedFrom {
        StartedFrom {
            start_from: self.from.to_string(),
            lsn: self.at.max(slot_confirmed),
        }
    }
}

/// Decide where a first run starts. `slot` is the slot as it is now (`None`: it is created
/// by this start) and `current` the server's current WAL position.
pub(crate) fn first_start(
    from: StartFrom,
    slot_name: &str,
    slot: Option<&SlotState>,
    current: Lsn,
) -> Result<FirstStart, ProvisionError> {
    let confirmed = slot.and_then(|s| s.confirmed_flush_lsn);
    let at = match from {
        // The load's snapshot holds what came before; the stream goes on from the slot.
        StartFrom::Full | StartFrom::Head => Lsn::ZERO,
        // A new slot starts at the current position by itself.
        StartFrom::Tail if slot.is_none() => Lsn::ZERO,
        StartFrom::Tail => current.max(confirmed.unwrap_or_default()),
        StartFrom::Lsn(lsn) => {
            if lsn > current {
                return Err(ProvisionError::StartAhead { lsn, current });
            }
            match confirmed {
                Some(confirmed) if lsn < confirmed => {
                    return Err(ProvisionError::StartBehindSlot {
                        lsn,
                        slot: slot_name.to_owned(),
                        confirmed,
                    });
                }
                Some(_) => lsn,
                None if lsn < current => {
                    return Err(ProvisionError::StartBeforeNewSlot {
                        lsn,
                        slot: slot_name.to_owned(),
                        current,
                    });
                }
                None => lsn,
            }
        }
    };
    Ok(FirstStart { from, at })
}

/// Once the slot is held: refuse a start the server would move, since the slot may have been
/// confirmed further between the first look and holding it.
pub(crate) fn check_held(
    start: &FirstStart,
    slot_name: &str,
    slot_confirmed: Lsn,
) -> Result<(), ProvisionError> {
    match start.from {
        StartFrom::Lsn(lsn) if lsn < slot_confirmed => Err(ProvisionError::StartBehindSlot {
            lsn,
            slot: slot_name.to_owned(),
            confirmed: slot_confirmed,
        }),
        _ => Ok(()),
    }
}

/// What to say when a later run's `source.start_from` differs from what the first run started
/// from: it is ignored, not applied.
pub(crate) fn ignored(
    configured: StartFrom,
    first: Option<&StartedFrom>,
    resume: Lsn,
) -> Option<ProvisionError> {
    let configured = configured.to_string();
    let recorded = match first {
        Some(first) if first.start_from == configured => return None,
        Some(first) => format!(
            "its first run started from {:?} at {}",
            first.start_from, first.lsn
        ),
        None if configured == StartFrom::Tail.to_string() => return None,
        None => "its first run's start is not recorded".into(),
    };
    Some(ProvisionError::StartFromIgnored {
        configured,
        resume,
        recorded,
    })
}

/// How the start-up line names the mode.
pub(crate) fn describe(first: Option<&FirstStart>, resume: Lsn) -> String {
    match first {
        Some(FirstStart {
            from: StartFrom::Head,
            ..
        }) => format!("first run from the head: everything the slot holds, from {resume}"),
        Some(FirstStart {
            from: StartFrom::Tail,
            ..
        }) => format!("first run from the tail: the changes committed from {resume}"),
        Some(FirstStart {
            from: StartFrom::Full,
            ..
        }) => "first run with a full load: the tables as a snapshot holds them, then the changes \
               committed after it"
            .to_owned(),
        Some(FirstStart { from, .. }) => {
            format!("first run from {from}: the transactions committed from {resume}")
        }
        None => format!("resuming from the commit log at {resume}"),
    }
}

/// Where the lake at `checkpoint` ends, as the trigger journal's judgement needs it.
pub(super) fn lake_end(checkpoint: &crate::lake::commit::Checkpoint) -> LakeEnd {
    LakeEnd {
        sequence: checkpoint.sequence(),
        landed: checkpoint.confirmed().0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(confirmed: u64) -> SlotState {
        SlotState {
            plugin: "pgoutput".into(),
            database: "db".into(),
            holder: None,
            confirmed_flush_lsn: Some(Lsn(confirmed)),
            restart_lsn: Some(Lsn(confirmed)),
            wal_status: Some("reserved".into()),
            safe_wal_size: None,
            two_phase: false,
        }
    }

    const NOW: Lsn = Lsn(0x9000);

    #[test]
    fn tail_skips_what_an_existing_slot_holds_and_head_keeps_it() {
        let held = slot(0x1000);
        let tail = first_start(StartFrom::Tail, "s", Some(&held), NOW).unwrap();
        assert_eq!(tail.at, NOW);
        assert_eq!(tail.started(Lsn(0x1000)).lsn, NOW);
        let head = first_start(StartFrom::Head, "s", Some(&held), NOW).unwrap();
        assert_eq!(
            head.at,
            Lsn::ZERO,
            "the server starts at the slot's position"
        );
        assert_eq!(
            head.started(Lsn(0x1000)),
            StartedFrom {
                start_from: "head".into(),
                lsn: Lsn(0x1000)
            }
        );
        // A new slot holds nothing: both start where it is created.
        for from in [StartFrom::Tail, StartFrom::Head] {
            assert_eq!(first_start(from, "s", None, NOW).unwrap().at, Lsn::ZERO);
        }
    }

    #[test]
    fn an_explicit_position_must_be_one_the_slot_can_send() {
        let held = slot(0x1000);
        let from = |lsn| StartFrom::Lsn(Lsn(lsn));
        assert_eq!(
            first_start(from(0x2000), "s", Some(&held), NOW).unwrap().at,
            Lsn(0x2000)
        );
        assert_eq!(
            first_start(from(0x1000), "s", Some(&held), NOW).unwrap().at,
            Lsn(0x1000)
        );
        let behind = first_start(from(0x800), "s", Some(&held), NOW).unwrap_err();
        assert_eq!(
            behind.to_string(),
            "source.start_from = \"lsn:0/800\" is behind slot \"s\"'s confirmed position 0/1000: \
             the slot no longer holds what came before, and the server would silently start at \
             0/1000 instead; choose a position at or after 0/1000 (start_from = \"head\" starts there)"
        );
        let new_slot = first_start(from(0x800), "s", None, NOW).unwrap_err();
        assert!(
            matches!(new_slot, ProvisionError::StartBeforeNewSlot { current, .. } if current == NOW),
            "{new_slot}"
        );
        let ahead = first_start(from(0x9001), "s", Some(&held), NOW).unwrap_err();
        assert!(
            ahead
                .to_string()
                .contains("past the server's current WAL position 0/9000")
        );
    }

    #[test]
    fn a_slot_confirmed_further_before_it_was_held_refuses_an_explicit_position() {
        let start =
            first_start(StartFrom::Lsn(Lsn(0x2000)), "s", Some(&slot(0x1000)), NOW).unwrap();
        check_held(&start, "s", Lsn(0x2000)).unwrap();
        let err = check_held(&start, "s", Lsn(0x2001)).unwrap_err();
        assert!(
            matches!(err, ProvisionError::StartBehindSlot { .. }),
            "{err}"
        );
        let tail = first_start(StartFrom::Tail, "s", Some(&slot(0x1000)), NOW).unwrap();
        check_held(&tail, "s", Lsn(0x9999)).unwrap();
    }

    #[test]
    fn a_full_load_streams_from_the_slot_after_its_snapshot() {
        let full = first_start(StartFrom::Full, "s", Some(&slot(0x1000)), NOW).unwrap();
        assert_eq!(full.at, Lsn::ZERO, "the slot's position");
        let new = first_start(StartFrom::Full, "s", None, NOW).unwrap();
        assert_eq!(new.at, Lsn::ZERO);
    }

    #[test]
    fn a_changed_start_from_on_a_later_run_is_said_to_be_ignored() {
        let first = StartedFrom {
            start_from: "tail".into(),
            lsn: Lsn(0x1000),
        };
        assert!(ignored(StartFrom::Tail, Some(&first), Lsn(0x5000)).is_none());
        let note = ignored(StartFrom::Head, Some(&first), Lsn(0x5000)).unwrap();
        assert_eq!(
            note.to_string(),
            "source.start_from = \"head\" is ignored: it applies to a pipeline's first run only, \
             and this pipeline resumes where its commit log ends, at 0/5000 (its first run started \
             from \"tail\" at 0/1000); to start over from \"head\", run it with a new source.slot \
             and an empty sink prefix; to land the tables' current rows in this lake instead, run \
             tributary resync (a new full load while it streams)"
        );
        assert!(ignored(StartFrom::Tail, None, Lsn(0x5000)).is_none());
        assert!(
            ignored(StartFrom::Full, None, Lsn(0x5000))
                .unwrap()
                .to_string()
                .contains("not recorded")
        );
    }
}
