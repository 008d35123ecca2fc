//! Named points in the flush protocol where a test can stop a real `tributary run` process.
//!
//! Built only with the `failpoints` cargo feature (the integration tests turn it on); without
//! it every point compiles to nothing. `TRIBUTARY_FAILPOINTS` arms points, comma-separated,
//! each `name` (its first hit) or `name@n` (its n-th hit in this process). An armed point logs
//! `failpoint <name> reached` and then waits forever, while the rest of the process (the
//! replication driver answering the server) goes on; the test looks at the sink and the slot
//! and kills the process with SIGKILL. The crash comes from outside, as a real one does, at a
//! point the test chose.
//!
//! The points, in the order a flush passes them:
//!
//! | name | where |
//! |---|---|
//! | `flush.after-intent` | the intent is written, no data file yet |
//! | `flush.after-file` | one more data file is uploaded (`@k`: the k-th of the run) |
//! | `flush.after-part` | every file of one part of a large transaction is up, more parts follow |
//! | `flush.before-commit` | every data file is uploaded, the commit entry is not written |
//! | `flush.after-commit` | the commit entry exists, the slot is not confirmed (with tables: no table has it yet) |
//! | `tables.before-publish` | with tables (Delta, Iceberg): the commit entry exists, the tables' commits are about to be written |
//! | `tables.after-table` | with tables: one more output's table has the flush (`@k`: the k-th of the run), the others may not |
//! | `delta.before-current` | Delta tables only: an output's change-log table has the flush, its current-state table (`mirror = true`) not yet (`@k`: the k-th of the run) |
//! | `iceberg.before-current` | Iceberg tables only: an output's change-log table has the flush, its current-state table (`mirror = true`) not yet (`@k`: the k-th of the run) |
//! | `tables.after-publish` | with tables: every output's table has the flush, the slot is not confirmed |
//! | `flush.after-confirm` | the slot is confirmed, the intent is not removed |
//! | `journal.after-tick` | trigger capture: a tick is recorded, its batch not yet handed on (`@k`: the k-th of the run) |
//! | `journal.before-delete` | trigger capture: the lake confirmed a position, the journal rows of what landed are not yet deleted (`@k`: the k-th confirmation of the run) |
//! | `load.before-chunk` | a load's connection is about to read a chunk (`@k`: the k-th of the run); the stream and the other connections go on |

/// Every point there is, so that a misspelt `TRIBUTARY_FAILPOINTS` is refused, not ignored.
pub const POINTS: &[&str] = &[
    "flush.after-intent",
    "flush.after-file",
    "flush.after-part",
    "flush.before-commit",
    "flush.after-commit",
    "tables.before-publish",
    "tables.after-table",
    "delta.before-current",
    "iceberg.before-current",
    "tables.after-publish",
    "flush.after-confirm",
    "load.before-chunk",
    "journal.after-tick",
    "journal.before-delete",
];

/// The environment variable that arms points.
pub const ENV: &str = "TRIBUTARY_FAILPOINTS";

/// Pass point `name`; waits forever if it is armed for this hit.
#[cfg(feature = "failpoints")]
pub async fn reached(name: &'static str) {
    if armed::hit(name) {
        tracing::warn!("failpoint {name} reached; this process now waits to be killed");
        std::future::pending::<()>().await;
    }
}

/// Pass point `name` (failpoints are not built in).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn reached(_name: &'static str) {}

/// Say which points are armed, once at start; refuses unknown names.
pub fn announce() -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    {
        let points = armed::points()?;
        if !points.is_empty() {
            let list: Vec<String> = points.iter().map(|(n, k)| format!("{n}@{k}")).collect();
            tracing::warn!("failpoints armed: {}", list.join(", "));
        }
        Ok(())
    }
    #[cfg(not(feature = "failpoints"))]
    {
        match std::env::var(ENV) {
            Ok(v) if !v.trim().is_empty() => Err(format!(
                "{ENV} is set, but this build has no failpoints (build with --features failpoints)"
            )),
            _ => Ok(()),
        }
    }
}

/// Parse `name` / `name@n` items.
pub fn parse(spec: &str) -> Result<Vec<(String, u64)>, String> {
    let mut points = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, nth) = match item.split_once('@') {
            Some((name, n)) => {
                let n: u64 = n.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("{ENV}: {item:?}: the hit after @ is a number from 1")
                })?;
                (name, n)
            }
            None => (item, 1),
        };
        if !POINTS.contains(&name) {
            return Err(format!(
                "{ENV}: no failpoint {name:?}; the points are {}",
                POINTS.join(", ")
            ));
        }
        points.push((name.to_owned(), nth));
    }
    Ok(points)
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    struct Armed {
        points: Result<Vec<(String, u64)>, String>,
        hits: Mutex<HashMap<&'static str, u64>>,
    }

    fn armed() -> &'static Armed {
        static ARMED: OnceLock<Armed> = OnceLock::new();
        ARMED.get_or_init(|| Armed {
            points: super::parse(&std::env::var(super::ENV).unwrap_or_default()),
            hits: Mutex::new(HashMap::new()),
        })
    }

    pub fn points() -> Result<Vec<(String, u64)>, String> {
        armed().points.clone()
    }

    pub fn hit(name: &'static str) -> bool {
        let armed = armed();
        let Ok(points) = &armed.points else {
            return false;
        };
        if !points.iter().any(|(n, _)| n == name) {
            return false;
        }
        let mut hits = armed.hits.lock().unwrap_or_else(|p| p.into_inner());
        let count = hits.entry(name).or_default();
        *count += 1;
        points.iter().any(|(n, k)| n == name && k == count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_known_points_and_hits() {
        assert_eq!(
            parse("flush.after-commit, flush.after-file@3").unwrap(),
            [
                ("flush.after-commit".to_owned(), 1),
                ("flush.after-file".to_owned(), 3)
            ]
        );
        assert!(parse("").unwrap().is_empty());
        let err = parse("flush.after-comit").unwrap_err();
        assert!(
            err.contains("no failpoint \"flush.after-comit\"")
                && err.contains("flush.after-commit"),
            "{err}"
        );
        assert!(parse("flush.after-intent@0").is_err());
    }
}
