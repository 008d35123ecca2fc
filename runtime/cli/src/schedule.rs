//! The scheduling policy of Tributary's threads.
//!
//! On a host it shares with PostgreSQL, the pipeline's threads wake on every read of the
//! replication stream. Under the kernel's default policy a thread that wakes preempts the
//! running one when it has slept long enough: the walsender it reads from, which is CPU-bound
//! while it decodes WAL, was preempted tens of thousands of times a drain, and spent up to 1.7×
//! the CPU per row it spent serving a client that woke less (BENCHMARKS.md). `SCHED_BATCH`
//! tells the kernel these threads are throughput work: a woken thread waits for the running
//! one's slice to end instead. It takes no privilege (it is not a real-time policy), keeps the
//! threads' nice value, and is inherited by every thread made after it is set.

/// The policy, as `--scheduling` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduling {
    /// SCHED_BATCH.
    Batch,
    /// The kernel's default policy (SCHED_OTHER).
    Normal,
}

impl Scheduling {
    fn name(self) -> &'static str {
        match self {
            Scheduling::Batch => "SCHED_BATCH",
            Scheduling::Normal => "SCHED_OTHER",
        }
    }
}

/// Sets `scheduling` for the calling thread, so for every thread it makes later. A kernel or
/// sandbox that refuses is logged, and the threads run under the policy they have.
pub fn apply(scheduling: Scheduling) {
    #[cfg(target_os = "linux")]
    {
        let policy = match scheduling {
            Scheduling::Batch => libc::SCHED_BATCH,
            Scheduling::Normal => libc::SCHED_OTHER,
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sets the calling thread's policy (pid 0), with a valid parameter.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
            let error = std::io::Error::last_os_error();
            tracing::warn!(
                %error,
                "could not set the scheduling policy {}; the threads keep the one they have (--scheduling normal avoids this warning)", scheduling.name()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = scheduling;
}
