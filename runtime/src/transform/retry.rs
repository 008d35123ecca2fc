//! When a plugin that asks to retry a batch is called again, and when the host gives up on it.
//! Time is passed in, so the schedule is the same whoever waits it out.

use std::time::{Duration, Instant};

/// The pauses, in seconds, before each call again: doubling to a minute, about ten minutes in
/// all, long enough for a lookup service that is briefly down to come back.
const PAUSES: &[u64] = &[
    1, 2, 4, 8, 15, 30, 30, 30, 30, 30, 60, 60, 60, 60, 60, 60, 60,
];

/// The retries of one call: how many were scheduled since the plugin first asked.
#[derive(Debug, Clone, Copy)]
pub(super) struct RetrySchedule {
    /// When the first call that asked to retry began.
    started: Instant,
    attempts: usize,
}

impl RetrySchedule {
    pub fn new(started: Instant) -> RetrySchedule {
        RetrySchedule {
            started,
            attempts: 0,
        }
    }

    /// When to call again, asked at `now`, or `None` once the plugin has asked for long enough.
    pub fn next(&mut self, now: Instant) -> Option<Instant> {
        let pause = PAUSES.get(self.attempts)?;
        self.attempts += 1;
        Some(now + Duration::from_secs(*pause))
    }

    /// How many calls again were scheduled: the number of the one `next` last gave.
    pub fn attempts(&self) -> u32 {
        self.attempts as u32
    }

    /// How long the plugin has been asking, at `now`.
    pub fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_a_minute_and_end_after_ten_minutes() {
        let started = Instant::now();
        let mut schedule = RetrySchedule::new(started);
        let mut now = started + Duration::from_millis(300);
        let mut pauses = Vec::new();
        while let Some(due) = schedule.next(now) {
            pauses.push((due - now).as_secs());
            assert_eq!(schedule.attempts() as usize, pauses.len());
            // The call again itself takes a moment before the plugin asks once more.
            now = due + Duration::from_millis(10);
        }
        assert_eq!(
            pauses,
            [
                1, 2, 4, 8, 15, 30, 30, 30, 30, 30, 60, 60, 60, 60, 60, 60, 60
            ]
        );
        assert_eq!(pauses.iter().sum::<u64>(), 600);
        assert_eq!(schedule.elapsed(now).as_secs(), 600);
        assert_eq!(schedule.next(now), None, "a spent schedule stays spent");
        assert_eq!(schedule.attempts(), 17);
    }

    #[test]
    fn a_pause_counts_from_when_the_plugin_asked() {
        let started = Instant::now();
        let mut schedule = RetrySchedule::new(started);
        let asked = started + Duration::from_secs(20);
        assert_eq!(schedule.next(asked), Some(asked + Duration::from_secs(1)));
        assert_eq!(schedule.elapsed(asked), Duration::from_secs(20));
    }
}
