//! Which transactions a snapshot sees, from `pg_snapshot`'s text, for the transaction ids the
//! lake keeps (`_xid`, 32 bits: pgoutput's). No IO.
//!
//! `verify` compares the lake with the source at a snapshot; with trigger capture no position
//! splits the lake there (a tick is taken when the reader polls, not when verify asks), so the
//! changes are split by their transaction instead: in the snapshot exactly when the snapshot
//! sees the transaction that made them.

/// A snapshot: every transaction below `xmin` had ended when it was taken, none at or above
/// `xmax` had, and of those between, the ones in `running` were still running. 64-bit ids
/// (`xid8`), so no wraparound lies within.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotXids {
    pub xmin: u64,
    pub xmax: u64,
    pub running: Vec<u64>,
}

impl SnapshotXids {
    /// Read `pg_snapshot`'s text form, `xmin:xmax:xip1,xip2,...`.
    pub fn parse(text: &str) -> Option<SnapshotXids> {
        let mut parts = text.trim().splitn(3, ':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let running = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<Vec<u64>>>()?,
        };
        (xmin <= xmax).then_some(SnapshotXids {
            xmin,
            xmax,
            running,
        })
    }

    /// Whether the snapshot sees transaction `xid` (64 bits) as committed, given that it
    /// committed (rolled-back transactions leave nothing in the journal to ask about).
    pub fn sees(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && !self.running.contains(&xid))
    }

    /// [`sees`](Self::sees) for a transaction known only by its low 32 bits, taken as the one
    /// nearest the snapshot's `xmax` (within 2^31 of it either way: a lake's recent changes;
    /// the caller decides older ones by their position).
    pub fn sees_xid32(&self, xid: u32) -> bool {
        let distance = xid.wrapping_sub(self.xmax as u32) as i32;
        match self.xmax.checked_add_signed(i64::from(distance)) {
            Some(full) => self.sees(full),
            // Before the first transaction there was: long ended.
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_sees_what_ended_before_it_and_not_what_ran_or_came_after() {
        let s = SnapshotXids::parse("100:110:102,105").unwrap();
        assert_eq!(s.running, [102, 105]);
        assert!(s.sees(99) && s.sees(100) && s.sees(101) && s.sees(109));
        assert!(!s.sees(102) && !s.sees(105) && !s.sees(110) && !s.sees(5000));
        let empty = SnapshotXids::parse("7:7:").unwrap();
        assert!(empty.sees(6) && !empty.sees(7));
        assert_eq!(SnapshotXids::parse("9:7:"), None);
        assert_eq!(SnapshotXids::parse("1:2:x"), None);
        assert_eq!(SnapshotXids::parse("garbage"), None);
    }

    #[test]
    fn a_32_bit_id_is_taken_as_the_transaction_nearest_the_snapshot_across_an_epoch() {
        // xmax in epoch 3, just past the 32-bit wrap.
        let xmax = (3u64 << 32) + 5;
        let s = SnapshotXids {
            xmin: xmax - 10,
            xmax,
            running: vec![xmax - 2],
        };
        // 2^32 - 3: epoch 2, ended before xmin.
        assert!(s.sees_xid32(u32::MAX - 2));
        // Epoch 3's 1 is xmax - 4: seen; xmax - 2 ran.
        assert!(s.sees_xid32(1));
        assert!(!s.sees_xid32(3));
        // At and after xmax: not seen, in this epoch or just past it.
        assert!(!s.sees_xid32(5) && !s.sees_xid32(1000));
        // A snapshot of a young cluster: what lies far behind it was before everything.
        let young = SnapshotXids {
            xmin: 740,
            xmax: 750,
            running: vec![],
        };
        assert!(young.sees_xid32(3) && !young.sees_xid32(751));
        assert!(young.sees_xid32(u32::MAX - 10));
    }
}
