//! Which ticks have landed, and where a start resumes. No IO.
//!
//! A tick is recorded (its snapshot, the position of its first transaction and the position
//! after its last) before its batch is handed on, and only once the batch before it was read
//! whole. So a tick has landed whole when the position after its last transaction is at or
//! below the landed position plus one (a tick recorded without that end ends where the next
//! begins). The journal rows of a tick that has landed whole can go, with every older tick's
//! (their transactions are visible in its snapshot too); the ticks after it are read again at
//! a start (the read machine drops what it landed already, as it drops a slot's replays).
//!
//! A full load records its snapshot as a tick of its own: its batch is the load, read from the
//! tables, never from the journal. It takes one position, the load's, and counts as landed
//! whole from the start: the journal rows visible in it are in the load (a load a crash cut
//! short is taken again at a later snapshot, which sees them too), and the ticks after it are
//! read from it. Ticks before it are the obsolete ones of an earlier, interrupted load.

/// A tick as the `ticks` table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickRecord {
    pub id: i64,
    /// The snapshot, as `pg_snapshot`'s text.
    pub snapshot: String,
    /// When it was taken, in microseconds since the Unix epoch.
    pub taken_us: i64,
    /// The position its batch's first transaction takes.
    pub first_position: u64,
    /// The position after its batch's last transaction, when recorded.
    pub end_position: Option<u64>,
    /// A full load's snapshot: its batch is the load (see the module's documentation).
    pub load: bool,
}

/// Where a start resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The latest tick that landed whole: the journal rows visible in it, and the ticks
    /// before it, go. Its snapshot bounds the next batch from below.
    pub landed: Option<TickRecord>,
    /// Ticks recorded after it, to read again in order, each from the one before.
    pub again: Vec<TickRecord>,
    /// The position the first transaction of a new tick takes, when nothing is read again.
    pub next_position: u64,
}

/// Why the recorded ticks do not fit the lake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TickError {
    #[error(
        "the journal's first recorded tick begins at position {first}, but the lake has landed only through position {landed}: the journal's rows between were deleted without landing (a journal of another lake?); remove trigger capture with `tributary teardown` and start with a full load"
    )]
    Gap { first: u64, landed: u64 },
}

/// The index in `ticks` (in `id` order) of the latest tick that landed whole when positions
/// through `landed` have landed.
pub fn landed_whole(ticks: &[TickRecord], landed: u64) -> Option<usize> {
    (0..ticks.len()).rev().find(|&i| {
        if ticks[i].load {
            return true;
        }
        let end = ticks[i]
            .end_position
            .or_else(|| ticks.get(i + 1).map(|next| next.first_position));
        end.is_some_and(|end| end <= landed.saturating_add(1))
    })
}

/// Where to resume when positions through `landed` (0: none) are in the lake and `ticks` (in
/// `id` order) are recorded.
pub fn resume(ticks: &[TickRecord], landed: u64) -> Result<Resume, TickError> {
    // A load's tick begins the lake wherever it stands.
    if let Some(first) = ticks.first()
        && !first.load
        && first.first_position > landed.saturating_add(1)
    {
        return Err(TickError::Gap {
            first: first.first_position,
            landed,
        });
    }
    let whole = landed_whole(ticks, landed);
    let again_from = whole.map_or(0, |w| w + 1);
    // After a load's tick nothing read from the journal may land, the load's own position is
    // taken.
    let after_load = whole
        .filter(|&w| ticks[w].load)
        .and_then(|w| ticks[w].end_position)
        .unwrap_or(0);
    Ok(Resume {
        landed: whole.map(|w| ticks[w].clone()),
        again: ticks[again_from..].to_vec(),
        next_position: (landed + 1).max(after_load),
    })
}

/// The position a full load starting now takes: after every position landed or recorded, so
/// its rows sort after those of an interrupted load before it (the new load's marker tells
/// readers to drop those).
pub fn load_position(ticks: &[TickRecord], landed: u64) -> u64 {
    ticks
        .iter()
        .map(|t| t.end_position.unwrap_or(t.first_position + 1))
        .fold(landed + 1, u64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(id: i64, first_position: u64) -> TickRecord {
        TickRecord {
            id,
            snapshot: format!("{id}:{id}:"),
            taken_us: id,
            first_position,
            end_position: None,
            load: false,
        }
    }

    #[test]
    fn a_tick_whose_end_is_recorded_has_landed_whole_once_its_last_position_has() {
        let ended = |id, first, end| TickRecord {
            end_position: Some(end),
            ..tick(id, first)
        };
        // Tick 1 holds positions 1..=3, tick 2 holds 4..=9.
        let ticks = [ended(1, 1, 4), ended(2, 4, 10)];
        assert_eq!(landed_whole(&ticks, 2), None);
        assert_eq!(landed_whole(&ticks, 3), Some(0));
        assert_eq!(landed_whole(&ticks, 8), Some(0));
        // The last tick too: nothing is left to read again.
        assert_eq!(landed_whole(&ticks, 9), Some(1));
        let resume = super::resume(&ticks, 9).unwrap();
        assert_eq!(resume.landed, Some(ticks[1].clone()));
        assert!(resume.again.is_empty());
        assert_eq!(resume.next_position, 10);
    }

    #[test]
    fn a_tick_has_landed_whole_once_the_next_one_begins_within_what_landed() {
        // Tick 1 holds positions 1..=3, tick 2 holds 4..=9, tick 3 begins at 10.
        let ticks = [tick(1, 1), tick(2, 4), tick(3, 10)];
        assert_eq!(landed_whole(&ticks, 2), None);
        assert_eq!(landed_whole(&ticks, 3), Some(0));
        assert_eq!(landed_whole(&ticks, 8), Some(0));
        assert_eq!(landed_whole(&ticks, 9), Some(1));
        // The last tick's end is not known: it is read again.
        assert_eq!(landed_whole(&ticks, 500), Some(1));
    }

    #[test]
    fn a_start_reads_again_every_tick_after_the_last_that_landed_whole() {
        let ticks = [tick(1, 1), tick(2, 4), tick(3, 10)];
        let resume = super::resume(&ticks, 5).unwrap();
        assert_eq!(resume.landed, Some(tick(1, 1)));
        assert_eq!(resume.again, [tick(2, 4), tick(3, 10)]);
        assert_eq!(resume.next_position, 6);
        let fresh = super::resume(&[], 0).unwrap();
        assert_eq!(
            (fresh.landed, fresh.again, fresh.next_position),
            (None, vec![], 1)
        );
        let nothing_landed = super::resume(&ticks[..1], 0).unwrap();
        assert_eq!(nothing_landed.again, [tick(1, 1)]);
    }

    #[test]
    fn a_loads_tick_bounds_the_first_batch_and_takes_its_position_before_it_lands() {
        let load = |id, position| TickRecord {
            load: true,
            end_position: Some(position + 1),
            ..tick(id, position)
        };
        // A first run's load at position 1; nothing streamed has landed.
        let resume = super::resume(&[load(1, 1)], 0).unwrap();
        assert_eq!(resume.landed, Some(load(1, 1)));
        assert!(resume.again.is_empty());
        assert_eq!(resume.next_position, 2);
        // Ticks read after it, none landed yet: read again from it.
        let ticks = [load(1, 1), tick(2, 2), tick(3, 7)];
        let resume = super::resume(&ticks, 0).unwrap();
        assert_eq!(resume.landed, Some(load(1, 1)));
        assert_eq!(resume.again, [tick(2, 2), tick(3, 7)]);
        assert_eq!(resume.next_position, 2);
        assert_eq!(landed_whole(&ticks, 6), Some(1));
        // A load again after an interrupted one takes a position after all of them.
        assert_eq!(load_position(&ticks, 0), 8);
        assert_eq!(load_position(&[], 0), 1);
        assert_eq!(load_position(&[load(1, 1)], 0), 2);
        // Its tick begins the lake, wherever it stands.
        let resume = super::resume(&[load(9, 8)], 0).unwrap();
        assert_eq!(resume.next_position, 9);
    }

    #[test]
    fn ticks_past_what_the_lake_holds_are_refused() {
        let error = resume(&[tick(7, 40)], 20).unwrap_err();
        assert_eq!(
            error,
            TickError::Gap {
                first: 40,
                landed: 20
            }
        );
        assert!(error.to_string().contains("start with a full load"));
    }
}
