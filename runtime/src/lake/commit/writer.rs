//! Who writes: one identity per process run, recorded in everything it writes to the sink.
//!
//! The id is 64 random bits. It is part of every object name a writer creates (data files,
//! intents), so no other writer, before or after, can produce the same name: a writer only
//! ever creates objects, and never touches another writer's. Host, pid and start time are for
//! the person reading an error ("another tributary, writer 3f.. on host h, pid 12, started ...").
//! Whether that run still goes on is not in the sink: `tributary status` asks the slot.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The identity of one writing process run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Writer {
    /// 16 lowercase hex digits, unique per run.
    pub id: String,
    pub host: String,
    pub pid: u32,
    /// Microseconds since the Unix epoch.
    pub started_at: i64,
}

impl Writer {
    /// A fresh identity for this process run.
    pub fn new() -> Writer {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // No entropy source: fall back to what makes a run distinct on one host. Names stay
            // unique across hosts through the host name being part of the hash input.
            let seed = format!("{}:{}:{}", host_name(), std::process::id(), unix_micros());
            let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
            bytes.copy_from_slice(&digest[..8]);
        }
        Writer {
            id: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            host: host_name(),
            pid: std::process::id(),
            started_at: unix_micros(),
        }
    }

    /// A writer with a fixed id, for tests and tools that only read.
    pub fn named(id: impl Into<String>) -> Writer {
        Writer {
            id: id.into(),
            host: host_name(),
            pid: std::process::id(),
            started_at: unix_micros(),
        }
    }
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writer {}", self.id)?;
        if self.host.is_empty() && self.pid == 0 {
            return Ok(());
        }
        write!(f, " on host {}, pid {}", self.host, self.pid)?;
        if self.started_at > 0 {
            write!(f, ", started {}", utc_text(self.started_at))?;
        }
        Ok(())
    }
}

/// Entries of format 1 named their writer as one string, `host:pid:start-micros`.
impl<'de> Deserialize<'de> for Writer {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            id: String,
            host: String,
            pid: u32,
            started_at: i64,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Fields(Fields),
            Legacy(String),
        }
        Ok(match Repr::deserialize(deserializer)? {
            Repr::Fields(f) => Writer {
                id: f.id,
                host: f.host,
                pid: f.pid,
                started_at: f.started_at,
            },
            Repr::Legacy(text) => {
                let mut parts = text.rsplitn(3, ':');
                let started_at = parts.next().and_then(|s| s.parse().ok());
                let pid = parts.next().and_then(|s| s.parse().ok());
                match (parts.next(), pid, started_at) {
                    (Some(host), Some(pid), Some(started_at)) => Writer {
                        id: text.clone(),
                        host: host.to_owned(),
                        pid,
                        started_at,
                    },
                    _ => Writer {
                        id: text,
                        host: String::new(),
                        pid: 0,
                        started_at: 0,
                    },
                }
            }
        })
    }
}

// Where the commit log's callers have always found it.
pub(crate) use crate::clock::unix_micros;

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// `2026-12-01 08:40:12 UTC` for microseconds since the Unix epoch.
pub(crate) fn utc_text(micros: i64) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil date from days since 1970-01-01, on 400-year eras counted from March.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_gets_its_own_id() {
        let (a, b) = (Writer::new(), Writer::new());
        assert_eq!(a.id.len(), 16);
        assert!(a.id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a.id, b.id);
        assert_eq!((a.pid, &a.host), (b.pid, &b.host));
    }

    #[test]
    fn reads_its_own_form_and_the_format_1_string() {
        let w = Writer {
            id: "00ff00ff00ff00ff".into(),
            host: "db-7".into(),
            pid: 42,
            started_at: 1_764_578_412_000_000,
        };
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(serde_json::from_str::<Writer>(&json).unwrap(), w);
        assert_eq!(
            w.to_string(),
            "writer 00ff00ff00ff00ff on host db-7, pid 42, started 2025-12-01 08:40:12 UTC"
        );
        let old: Writer = serde_json::from_str("\"db-7:42:1764578412000000\"").unwrap();
        assert_eq!(
            (old.host.as_str(), old.pid, old.started_at),
            ("db-7", 42, w.started_at)
        );
        let odd: Writer = serde_json::from_str("\"an earlier run\"").unwrap();
        assert_eq!(odd.to_string(), "writer an earlier run");
    }

    #[test]
    fn utc_text_reads_like_a_clock() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text(951_782_400_000_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_text(-1_000_000), "1969-12-31 23:59:59 UTC");
    }
}
