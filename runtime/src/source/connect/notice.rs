//! Server notices on the source's connections, and the level each is logged at.
//!
//! Tributary's own statements are written to be run again (`CREATE ... IF NOT EXISTS`,
//! `DROP ... IF EXISTS`), and the server answers each repeat with a NOTICE such as
//! `relation "journal" already exists, skipping`. Those tell an operator nothing, at every
//! start, so they are logged at DEBUG. Any other notice is news from the server and stays at
//! INFO; a WARNING is logged as one. No IO here beyond the log line.

/// SQLSTATEs of the NOTICEs an `IF NOT EXISTS` gives when the object is there: duplicate
/// database, schema, table (relations and indexes), column, object and function.
const ALREADY_THERE: &[&str] = &["42P04", "42P06", "42P07", "42701", "42710", "42723"];

/// The level a server notice is logged at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeLevel {
    Debug,
    Info,
    Warn,
}

/// The level of a notice of `severity` (its unlocalized `V` field when the server sent one),
/// SQLSTATE `code` and `message`.
pub fn notice_level(severity: &str, code: &str, message: &str) -> NoticeLevel {
    match severity {
        "WARNING" => NoticeLevel::Warn,
        "NOTICE" if is_skip(code, message) => NoticeLevel::Debug,
        "DEBUG" | "LOG" => NoticeLevel::Debug,
        _ => NoticeLevel::Info,
    }
}

/// An `IF [NOT] EXISTS` that found nothing to do: `... already exists, skipping` carries a
/// duplicate-object SQLSTATE, `... does not exist, skipping` none (`00000`).
fn is_skip(code: &str, message: &str) -> bool {
    ALREADY_THERE.contains(&code) || (code == "00000" && message.ends_with(", skipping"))
}

/// Log a server notice at its level.
pub fn log_notice(connection: &str, severity: &str, code: &str, message: &str) {
    match notice_level(severity, code, message) {
        NoticeLevel::Debug => {
            tracing::debug!(%severity, %code, "server notice on the {connection} connection: {message}")
        }
        NoticeLevel::Info => {
            tracing::info!(%severity, %code, "server notice on the {connection} connection: {message}")
        }
        NoticeLevel::Warn => {
            tracing::warn!(%severity, %code, "server notice on the {connection} connection: {message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skips_of_if_not_exists_go_to_debug_and_other_notices_stay_visible() {
        for (code, message) in [
            ("42P06", "schema \"tributary\" already exists, skipping"),
            ("42P07", "relation \"journal\" already exists, skipping"),
            (
                "42701",
                "column \"xid\" of relation \"journal\" already exists, skipping",
            ),
            ("42710", "extension \"x\" already exists, skipping"),
            (
                "00000",
                "trigger \"t_capture\" for relation \"t\" does not exist, skipping",
            ),
        ] {
            assert_eq!(
                notice_level("NOTICE", code, message),
                NoticeLevel::Debug,
                "{message}"
            );
        }
        assert_eq!(
            notice_level("NOTICE", "00000", "drop cascades to 3 other objects"),
            NoticeLevel::Info
        );
        assert_eq!(
            notice_level("WARNING", "25P01", "there is no transaction in progress"),
            NoticeLevel::Warn
        );
        assert_eq!(
            notice_level(
                "WARNING",
                "42P07",
                "relation \"x\" already exists, skipping"
            ),
            NoticeLevel::Warn,
            "only a NOTICE is a skip"
        );
    }
}
