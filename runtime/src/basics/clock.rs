//! The wall clock, as the lake and the commit log record it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch; 0 for a clock set before it.
pub(crate) fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
