//! The text of replication commands. Names and values come from configuration, so they are
//! always quoted, never pasted.

use crate::Lsn;
use crate::source::quote::{quote_ident, quote_literal};

/// `CREATE_REPLICATION_SLOT`, in the grammar every server since PostgreSQL 10 reads. A
/// temporary slot is dropped when its session ends, however it ends.
pub fn create_logical_slot(slot: &str, temporary: bool, export_snapshot: bool) -> String {
    let snapshot = if export_snapshot {
        "EXPORT_SNAPSHOT"
    } else {
        "NOEXPORT_SNAPSHOT"
    };
    let temporary = if temporary { " TEMPORARY" } else { "" };
    format!(
        "CREATE_REPLICATION_SLOT {}{temporary} LOGICAL pgoutput {snapshot}",
        quote_ident(slot)
    )
}

/// `CREATE_REPLICATION_SLOT` of a failover slot, in the option-list grammar (PostgreSQL 15+;
/// `FAILOVER` is from 17), which the bare keywords of [`create_logical_slot`] cannot be mixed
/// with.
pub fn create_failover_slot(slot: &str, export_snapshot: bool) -> String {
    let snapshot = if export_snapshot { "export" } else { "nothing" };
    format!(
        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT '{snapshot}', FAILOVER true)",
        quote_ident(slot)
    )
}

/// `ALTER_REPLICATION_SLOT ... (FAILOVER true)` (PostgreSQL 17+).
pub fn alter_slot_failover(slot: &str) -> String {
    format!(
        "ALTER_REPLICATION_SLOT {} (FAILOVER true)",
        quote_ident(slot)
    )
}

/// `TIMELINE_HISTORY`: the history file of a timeline.
pub fn timeline_history(timeline: u32) -> String {
    format!("TIMELINE_HISTORY {timeline}")
}

pub fn drop_slot(slot: &str) -> String {
    format!("DROP_REPLICATION_SLOT {}", quote_ident(slot))
}

/// `START_REPLICATION SLOT "slot" LOGICAL X/Y ("name" 'value', ...)`.
pub fn start_logical(slot: &str, start: Lsn, options: &[(&str, &str)]) -> String {
    let mut command = format!(
        "START_REPLICATION SLOT {} LOGICAL {start}",
        quote_ident(slot)
    );
    if !options.is_empty() {
        let options: Vec<String> = options
            .iter()
            .map(|(name, value)| format!("{} {}", quote_ident(name), quote_literal(value)))
            .collect();
        command.push_str(" (");
        command.push_str(&options.join(", "));
        command.push(')');
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_replication_names_slot_position_and_options() {
        let command = start_logical(
            "tributary_shop",
            Lsn(0x16_B374_D848),
            &[
                ("proto_version", "1"),
                ("publication_names", "\"pub\",\"o'k\""),
            ],
        );
        assert_eq!(
            command,
            "START_REPLICATION SLOT \"tributary_shop\" LOGICAL 16/B374D848 \
             (\"proto_version\" '1', \"publication_names\" '\"pub\",\"o''k\"')"
        );
        assert_eq!(
            start_logical("s", Lsn::ZERO, &[]),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0"
        );
    }

    #[test]
    fn slot_commands() {
        assert_eq!(
            create_logical_slot("s", false, false),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput NOEXPORT_SNAPSHOT"
        );
        assert_eq!(
            create_logical_slot("s", false, true),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput EXPORT_SNAPSHOT"
        );
        assert_eq!(
            create_logical_slot("s", true, true),
            "CREATE_REPLICATION_SLOT \"s\" TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
        );
        assert_eq!(drop_slot("s\"x"), "DROP_REPLICATION_SLOT \"s\"\"x\"");
        assert_eq!(
            create_failover_slot("s", false),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)"
        );
        assert_eq!(
            create_failover_slot("s", true),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"
        );
        assert_eq!(
            alter_slot_failover("s"),
            "ALTER_REPLICATION_SLOT \"s\" (FAILOVER true)"
        );
        assert_eq!(timeline_history(2), "TIMELINE_HISTORY 2");
    }
}
