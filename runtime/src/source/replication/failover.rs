//! The replication commands of failover (PostgreSQL 17): a slot created or marked as a
//! failover slot, which a physical standby with `sync_replication_slots = on` keeps
//! synchronised, and `TIMELINE_HISTORY`, where a promoted standby says at which position its
//! timeline forked from the one before.

use super::{CreatedSlot, ReplicationConnection, ReplicationError, command};
use crate::Lsn;

/// Where each earlier timeline of a server's history ended: the content of
/// `<timeline>.history`, as `TIMELINE_HISTORY` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineHistory {
    /// The timeline whose history this is.
    pub timeline: u32,
    /// Each ancestor timeline and the position where this history left it, oldest first.
    pub switches: Vec<TimelineSwitch>,
}

/// One line of a history file: timeline `timeline` ended at `end`, where the next began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineSwitch {
    pub timeline: u32,
    pub end: Lsn,
}

impl TimelineHistory {
    /// Reads a history file: `<parent timeline>\t<switch point>\t<reason>` per line; blank
    /// lines and `#` comments are skipped, as the server skips them.
    pub fn parse(timeline: u32, text: &str) -> Result<TimelineHistory, String> {
        let mut switches = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(parent), Some(end)) = (fields.next(), fields.next()) else {
                return Err(format!("a line without a switch point: {line:?}"));
            };
            let parent = parent
                .parse()
                .map_err(|_| format!("a line with an invalid timeline: {line:?}"))?;
            let end = end
                .parse()
                .map_err(|_| format!("a line with an invalid switch point: {line:?}"))?;
            switches.push(TimelineSwitch {
                timeline: parent,
                end,
            });
        }
        Ok(TimelineHistory { timeline, switches })
    }

    /// Where `timeline` ended in this history: `None` when it is not an ancestor (this server
    /// never was on it, or forked from it elsewhere than this history says).
    pub fn end_of(&self, timeline: u32) -> Option<Lsn> {
        self.switches
            .iter()
            .find(|s| s.timeline == timeline)
            .map(|s| s.end)
    }
}

impl ReplicationConnection {
    /// Creates a logical failover slot for pgoutput (PostgreSQL 17+), exporting the snapshot
    /// it starts from when `export_snapshot` (see
    /// [`create_logical_slot_exporting_snapshot`](Self::create_logical_slot_exporting_snapshot)).
    pub async fn create_failover_slot(
        &mut self,
        slot: &str,
        export_snapshot: bool,
    ) -> Result<CreatedSlot, ReplicationError> {
        let command = command::create_failover_slot(slot, export_snapshot);
        let rows = self.simple_query(&command).await?;
        let row = match rows.as_slice() {
            [row] if row.len() >= 3 => row,
            _ => return Err(unexpected(&command, "not one row of the created slot")),
        };
        let consistent_point = row[1]
            .as_deref()
            .ok_or_else(|| unexpected(&command, "no consistent point"))?;
        Ok(CreatedSlot {
            slot_name: row[0].clone().unwrap_or_else(|| slot.to_owned()),
            consistent_point: consistent_point
                .parse()
                .map_err(|_| unexpected(&command, "an invalid consistent point"))?,
            snapshot_name: row[2].clone(),
        })
    }

    /// Marks an existing slot, which no one may be streaming from, as a failover slot
    /// (`ALTER_REPLICATION_SLOT`, PostgreSQL 17+).
    pub async fn make_failover_slot(&mut self, slot: &str) -> Result<(), ReplicationError> {
        self.simple_query(&command::alter_slot_failover(slot))
            .await
            .map(|_| ())
    }

    /// The history of `timeline` on this server (`TIMELINE_HISTORY`): where each timeline
    /// before it ended. Timeline 1 has none.
    pub async fn timeline_history(
        &mut self,
        timeline: u32,
    ) -> Result<TimelineHistory, ReplicationError> {
        if timeline <= 1 {
            return Ok(TimelineHistory {
                timeline,
                switches: Vec::new(),
            });
        }
        let command = command::timeline_history(timeline);
        let rows = self.simple_query(&command).await?;
        // One row: the file name, and its content as bytea sent in text format, which is the
        // file's own text.
        let content = match rows.as_slice() {
            [row] if row.len() >= 2 => row[1].clone().unwrap_or_default(),
            _ => return Err(unexpected(&command, "not one row with a file")),
        };
        TimelineHistory::parse(timeline, &content).map_err(|what| unexpected(&command, &what))
    }
}

fn unexpected(command: &str, what: &str) -> ReplicationError {
    ReplicationError::Protocol(format!("`{command}` returned {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_files_name_where_each_timeline_ended() {
        let text = "1\t0/3000158\tno recovery target specified\n\n# a comment\n\
                    2\t0/5000000\tat restore point \"x\"\n";
        let history = TimelineHistory::parse(3, text).unwrap();
        assert_eq!(history.end_of(1), Some(Lsn(0x300_0158)));
        assert_eq!(history.end_of(2), Some(Lsn(0x500_0000)));
        assert_eq!(
            history.end_of(3),
            None,
            "a timeline does not end in its own history"
        );
        assert_eq!(history.end_of(4), None);
        assert!(TimelineHistory::parse(2, "1\n").is_err());
        assert!(TimelineHistory::parse(2, "x\t0/1\treason\n").is_err());
        assert!(TimelineHistory::parse(2, "1\tnot-an-lsn\treason\n").is_err());
    }
}
