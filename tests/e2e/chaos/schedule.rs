//! The chaos test's schedule: which faults, how many, how long, in which order, from the seed
//! alone.

use std::time::Duration;

use tributary_cluster::StopMode;
use tributary_tests::chaos::Rng;

/// How long the S3 server stays stopped in an outage.
pub const S3_OUTAGE: Duration = Duration::from_secs(30);

/// Kills right after each large transaction commits, while it lands: how long each run lives,
/// in milliseconds. The first comes within 300 ms of the commit, while the run receives it: the
/// S3 Iceberg plan's 50,000 rows once landed in the 1.3 s before a later first kill, and the
/// run asserts that a kill came while one landed.
const LARGE_KILLS: [(u64, u64); 3] = [(50, 300), (2_000, 10_000), (5_000, 15_000)];

/// How much of each fault one run applies.
pub struct Plan {
    pub name: &'static str,
    pub kills: usize,
    pub s3_outages: usize,
    /// Periods of HTTP errors from the proxy, 500 and 503 by turns, lasting `error_ms`.
    pub error_periods: usize,
    pub error_ms: (u64, u64),
    /// Periods of the proxy stalling, lasting `stall_ms` (past the client's 30 s request
    /// timeout in the long mode).
    pub stalls: usize,
    pub stall_ms: (u64, u64),
    /// PostgreSQL restarts, `-m fast` and `-m immediate` by turns.
    pub pg_restarts: usize,
    pub large_transactions: usize,
    pub large_rows: u64,
    pub truncates: usize,
    /// Connections running small transactions side by side.
    pub pool: usize,
    /// The longest the pipeline may take to catch up before the test calls it stuck.
    pub settle_timeout: Duration,
    /// What the sink is (`sink.format`): with tables, every table also keeps its current-state
    /// table, and both are read back at the end.
    pub format: &'static str,
    pub lake: Lake,
}

/// Where a run's lake is, and what holds its Iceberg tables' pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lake {
    /// S3 through the fault proxy; no catalog.
    S3,
    /// S3, the tables' pointers in a SQL catalog (a database of the shared test PostgreSQL,
    /// which the schedule's restarts leave alone).
    S3Sql,
    /// S3, the pointers in a REST catalog server (pyiceberg's catalog behind the REST routes,
    /// its metadata written to the same S3 server directly).
    S3Rest,
    /// A local directory; no catalog.
    Directory,
}

/// CI: about five minutes on two cores.
pub const CI: Plan = Plan {
    name: "ci",
    kills: 55,
    s3_outages: 1,
    error_periods: 2,
    error_ms: (4_000, 10_000),
    stalls: 2,
    stall_ms: (4_000, 10_000),
    pg_restarts: 2,
    large_transactions: 1,
    large_rows: 1_000_000,
    truncates: 1,
    pool: 4,
    settle_timeout: Duration::from_secs(240),
    format: "parquet",
    lake: Lake::S3,
};

/// CI into Iceberg tables on S3 through a SQL catalog, every table with its current-state
/// table: fewer kills, one of each outage, a smaller large transaction and two connections
/// (a flush into six tables costs more than one of Parquet files).
pub const CI_ICEBERG_SQL: Plan = Plan {
    name: "ci-iceberg-sql",
    kills: 12,
    s3_outages: 1,
    error_periods: 1,
    error_ms: (4_000, 10_000),
    stalls: 1,
    stall_ms: (4_000, 10_000),
    pg_restarts: 1,
    large_transactions: 1,
    large_rows: 50_000,
    truncates: 1,
    pool: 2,
    settle_timeout: Duration::from_secs(240),
    format: "iceberg",
    lake: Lake::S3Sql,
};

/// The same through a REST catalog.
pub const CI_ICEBERG_REST: Plan = Plan {
    name: "ci-iceberg-rest",
    lake: Lake::S3Rest,
    ..CI_ICEBERG_SQL
};

/// Into a directory with no catalog: kills and PostgreSQL restarts, no S3 to fail.
pub const CI_ICEBERG_DIRECTORY: Plan = Plan {
    name: "ci-iceberg-directory",
    // As many as the S3 plan's: a directory lands 200,000 rows so quickly that, on a fast
    // run, every kill of the burst came after they had landed (the run asserts one did not).
    large_rows: 1_000_000,
    s3_outages: 0,
    error_periods: 0,
    stalls: 0,
    lake: Lake::Directory,
    ..CI_ICEBERG_SQL
};

/// The long mode: ten times the kills, and outages to match.
pub const LONG: Plan = Plan {
    name: "long",
    kills: 520,
    s3_outages: 8,
    error_periods: 16,
    error_ms: (4_000, 20_000),
    stalls: 12,
    stall_ms: (4_000, 45_000),
    pg_restarts: 20,
    large_transactions: 2,
    large_rows: 1_000_000,
    truncates: 2,
    pool: 4,
    settle_timeout: Duration::from_secs(300),
    format: "parquet",
    lake: Lake::S3,
};

#[derive(Debug, Clone)]
pub enum Step {
    Kill {
        after: Duration,
    },
    S3Down {
        lasting: Duration,
    },
    S3Errors {
        status: u16,
        lasting: Duration,
    },
    S3Stall {
        lasting: Duration,
    },
    PgRestart {
        mode: StopMode,
        down: Duration,
    },
    /// Wait until the pipeline has caught up (after a burst of kills).
    Settle,
    Truncate,
    LargeTransaction,
}

/// The schedule, from the seed alone.
pub fn schedule(rng: &mut Rng, plan: &Plan) -> Vec<Step> {
    let mut faults = Vec::new();
    for _ in 0..plan.kills - plan.large_transactions * LARGE_KILLS.len() {
        faults.push(Step::Kill {
            after: kill_after(rng),
        });
    }
    for _ in 0..plan.s3_outages {
        faults.push(Step::S3Down { lasting: S3_OUTAGE });
    }
    for i in 0..plan.error_periods {
        faults.push(Step::S3Errors {
            status: if i % 2 == 0 { 503 } else { 500 },
            lasting: rng.millis(plan.error_ms.0, plan.error_ms.1),
        });
    }
    for _ in 0..plan.stalls {
        faults.push(Step::S3Stall {
            lasting: rng.millis(plan.stall_ms.0, plan.stall_ms.1),
        });
    }
    for i in 0..plan.pg_restarts {
        faults.push(Step::PgRestart {
            mode: if i % 2 == 0 {
                StopMode::Fast
            } else {
                StopMode::Immediate
            },
            down: rng.millis(500, 5_000),
        });
    }
    rng.shuffle(&mut faults);
    let mut steps = Vec::new();
    let (mut burst, mut burst_len) = (0, rng.between(3, 8));
    for fault in faults {
        if let Step::Kill { .. } = fault {
            if burst == burst_len {
                steps.push(Step::Settle);
                (burst, burst_len) = (0, rng.between(3, 8));
            }
            burst += 1;
        } else {
            burst = 0;
        }
        steps.push(fault);
    }
    // The workload's one-off events at seeded places, the large transactions early enough
    // for kills and outages to hit them while they land.
    let n = steps.len() as u64;
    for _ in 0..plan.large_transactions {
        let at = rng.between(n / 10, n / 2) as usize;
        // Kills while it lands: the first before the run that received it as it ran lands it,
        // the next ones while a new run receives it again, reads it back in parts, lands them.
        let mut burst = vec![Step::LargeTransaction];
        for (lo, hi) in LARGE_KILLS {
            burst.push(Step::Kill {
                after: rng.millis(lo, hi),
            });
        }
        burst.push(Step::Settle);
        steps.splice(at..at, burst);
    }
    for _ in 0..plan.truncates {
        let at = rng.between(n / 10, n * 3 / 4) as usize;
        steps.insert(at, Step::Truncate);
    }
    steps.push(Step::Settle);
    steps
}

/// How long a run lives before its kill: a quarter die in start-up (holding the slot,
/// reading the log, writing the open entry), most a few flushes in, some later.
fn kill_after(rng: &mut Rng) -> Duration {
    match rng.below(100) {
        0..25 => rng.millis(0, 400),
        25..80 => rng.millis(400, 2_000),
        _ => rng.millis(2_000, 5_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_schedule_with_every_fault_the_plan_asks_for() {
        for plan in [&CI, &LONG, &CI_ICEBERG_DIRECTORY] {
            let steps = schedule(&mut Rng::new(42), plan);
            let again = schedule(&mut Rng::new(42), plan);
            assert_eq!(format!("{steps:?}"), format!("{again:?}"));
            let other = schedule(&mut Rng::new(43), plan);
            assert_ne!(format!("{steps:?}"), format!("{other:?}"));

            let count = |f: fn(&Step) -> bool| steps.iter().filter(|s| f(s)).count();
            assert_eq!(count(|s| matches!(s, Step::Kill { .. })), plan.kills);
            assert_eq!(count(|s| matches!(s, Step::S3Down { .. })), plan.s3_outages);
            assert_eq!(
                count(|s| matches!(s, Step::S3Errors { .. })),
                plan.error_periods
            );
            assert_eq!(count(|s| matches!(s, Step::S3Stall { .. })), plan.stalls);
            let fast = count(|s| {
                matches!(
                    s,
                    Step::PgRestart {
                        mode: StopMode::Fast,
                        ..
                    }
                )
            });
            assert_eq!(
                (fast, count(|s| matches!(s, Step::PgRestart { .. })) - fast),
                (plan.pg_restarts.div_ceil(2), plan.pg_restarts / 2)
            );
            assert_eq!(
                count(|s| matches!(s, Step::LargeTransaction)),
                plan.large_transactions
            );
            assert_eq!(count(|s| matches!(s, Step::Truncate)), plan.truncates);
            // No burst of kills runs longer than eight without a catch-up.
            let mut run = 0;
            for step in &steps {
                run = if matches!(step, Step::Kill { .. }) {
                    run + 1
                } else {
                    0
                };
                assert!(run <= 8, "{steps:?}");
            }
            assert!(matches!(steps.last(), Some(Step::Settle)));
        }
    }
}
