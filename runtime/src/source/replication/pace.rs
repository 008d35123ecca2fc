//! Read pacing: while the stream is busy, the socket wakes the driver only once a chunk has
//! arrived, not once per message.
//!
//! A walsender flushes every pgoutput message as soon as it is made, so a reader that keeps up
//! is woken for each one: the server's `send` pays for waking it, the driver pays for the
//! wake-up, the read and the hand-over to the decoding task. Under TLS the reader keeps up
//! (the server is slowed by encryption) and was measured reading ~500 bytes per wake-up, ten
//! times as many reads and context switches as unencrypted; pacing cut the client's CPU on a
//! W2 drain by 40 % and raised its rate by 10 %. Unencrypted, the walsender spent more CPU per
//! row with the mark raised (the queue it lets build costs the sender more than the wake-ups
//! saved), so only TLS streams are paced (BENCHMARKS.md). Linux lets a socket say how much must be
//! queued before it counts as readable (`SO_RCVLOWAT`); below that mark the kernel does not
//! even wake the reader. The mark is raised while bytes arrive faster than
//! [`WAKE_BYTES`] per [`WAKE_WAIT`], and dropped back to one byte when the stream slows, so a
//! trickle of small transactions is read at once and a busy stream waits at most
//! [`WAKE_WAIT`] for its last partial chunk.
//!
//! [`Pace`] decides (no IO, tested below); [`set_low_water`] applies.

use std::os::fd::RawFd;
use std::time::Duration;

use tokio::time::Instant;

/// Bytes that must be queued before a busy stream wakes the driver.
pub(super) const WAKE_BYTES: usize = 32 * 1024;
/// The longest a busy stream leaves bytes short of [`WAKE_BYTES`] unread: then the stream is
/// taken to have slowed down and every byte wakes the driver again.
pub(super) const WAKE_WAIT: Duration = Duration::from_millis(5);

/// Whether the socket wakes the driver for every byte or for a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Trickle,
    Busy,
}

/// The read pacing of one stream.
#[derive(Debug)]
pub(super) struct Pace {
    mode: Mode,
    /// Start of the window in which arrivals are counted while trickling.
    window_start: Instant,
    window_bytes: usize,
    /// The last read while busy: the wait for a chunk runs from there.
    last_read: Instant,
}

impl Pace {
    pub(super) fn new(now: Instant) -> Self {
        Pace {
            mode: Mode::Trickle,
            window_start: now,
            window_bytes: 0,
            last_read: now,
        }
    }

    /// `bytes` were read at `now`. Returns the low-water mark to set when it changes.
    pub(super) fn read(&mut self, bytes: usize, now: Instant) -> Option<usize> {
        self.last_read = now;
        if self.mode == Mode::Busy {
            return None;
        }
        if now.duration_since(self.window_start) > WAKE_WAIT {
            self.window_start = now;
            self.window_bytes = 0;
        }
        self.window_bytes += bytes;
        if self.window_bytes < WAKE_BYTES {
            return None;
        }
        self.mode = Mode::Busy;
        Some(WAKE_BYTES)
    }

    /// The consumer held reading back until `now`: the wait for a chunk starts over.
    pub(super) fn resumed(&mut self, now: Instant) {
        self.last_read = now;
    }

    /// When waiting for a chunk should end, while busy.
    pub(super) fn deadline(&self) -> Option<Instant> {
        (self.mode == Mode::Busy).then(|| self.last_read + WAKE_WAIT)
    }

    /// The deadline passed without a chunk: the stream slowed down. Returns the mark to set.
    pub(super) fn expired(&mut self, now: Instant) -> usize {
        self.mode = Mode::Trickle;
        self.window_start = now;
        self.window_bytes = 0;
        1
    }
}

/// Sets the socket's receive low-water mark. Setting it makes Linux re-check readability at
/// once, so lowering it wakes a reader for bytes already queued.
pub(super) fn set_low_water(fd: RawFd, bytes: usize) -> std::io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is the stream's own open socket (the driver owns the stream for as long as
    // it paces it), and the option value is a live `c_int` of the length passed.
    let result = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickle_never_raises_the_mark() {
        let start = Instant::now();
        let mut pace = Pace::new(start);
        // 500 bytes every millisecond: 2.5 KB per window, far below a chunk.
        for ms in 1..200 {
            assert_eq!(pace.read(500, start + Duration::from_millis(ms)), None);
        }
        assert_eq!(pace.deadline(), None);
    }

    #[test]
    fn a_fast_stream_waits_for_chunks_until_it_slows() {
        let start = Instant::now();
        let mut pace = Pace::new(start);
        let mut now = start;
        let mut raised = None;
        for _ in 0..40 {
            now += Duration::from_micros(100);
            raised = raised.or(pace.read(1000, now));
        }
        assert_eq!(raised, Some(WAKE_BYTES), "32 KB within one window");
        assert_eq!(pace.deadline(), Some(now + WAKE_WAIT));
        // Chunks keep coming: no change, and the deadline moves with each read.
        now += Duration::from_millis(2);
        assert_eq!(pace.read(WAKE_BYTES, now), None);
        assert_eq!(pace.deadline(), Some(now + WAKE_WAIT));
        // No chunk in time: back to waking for every byte, and no deadline.
        assert_eq!(pace.expired(now + WAKE_WAIT), 1);
        assert_eq!(pace.deadline(), None);
        // A quiet window starts over: old bytes do not count toward the next chunk.
        now += Duration::from_millis(50);
        assert_eq!(pace.read(WAKE_BYTES - 1, now), None);
        now += WAKE_WAIT + Duration::from_millis(1);
        assert_eq!(pace.read(1, now), None);
    }
}
