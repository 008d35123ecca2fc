//! The in-flight budget: the memory the batches between the stages may hold together.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most forms a batch takes at once, each about its decoded size: the changes and what the
/// transforms make of them while they run; their output and its Arrow columns and Parquet
/// while it is encoded.
pub(super) const PEAK_COPIES: usize = 2;

/// The in-flight budget, in KiB: a batch takes the most it will occupy at once when it is cut,
/// holds less as stages let go of its earlier forms, and gives the rest back once its files are
/// uploaded. Later stages never wait for it, so the budget can never deadlock the pipeline.
#[derive(Clone)]
pub(super) struct Budget {
    semaphore: Arc<Semaphore>,
    total_kib: u32,
}

impl Budget {
    pub(super) fn new(mib: usize) -> Self {
        let total_kib = u32::try_from(mib.saturating_mul(1024)).unwrap_or(u32::MAX >> 4);
        Budget {
            semaphore: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// Wait for `bytes` of room (at most the whole budget, so a batch larger than it still
    /// goes, alone).
    pub(super) async fn take(&self, bytes: usize) -> Share {
        let kib = kib(bytes).min(self.total_kib);
        let permit = self
            .semaphore
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the budget is never closed");
        Share(permit)
    }
}

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024))
        .unwrap_or(u32::MAX)
        .max(1)
}

/// One batch's share of the in-flight budget; dropping it gives it back.
pub(super) struct Share(OwnedSemaphorePermit);

impl Share {
    /// Keep room for `bytes` only, giving back the rest: a stage let go of a form of the batch.
    pub(super) fn shrink_to(&mut self, bytes: usize) {
        let keep = kib(bytes) as usize;
        let held = self.0.num_permits();
        if held > keep {
            drop(self.0.split(held - keep));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[tokio::test]
    async fn a_share_gives_back_what_a_stage_let_go_of_and_the_rest_when_dropped() {
        let budget = Budget::new(1);
        let mut share = budget.take(600 << 10).await;
        assert_eq!(budget.semaphore.available_permits(), 424);
        share.shrink_to(100 << 10);
        assert_eq!(budget.semaphore.available_permits(), 924);
        share.shrink_to(500 << 10);
        assert_eq!(
            budget.semaphore.available_permits(),
            924,
            "a share never grows"
        );
        // More than the whole budget goes through alone.
        drop(share);
        let whole = budget.take(5 << 20).await;
        assert_eq!(budget.semaphore.available_permits(), 0);
        drop(whole);
        assert_eq!(budget.semaphore.available_permits(), 1024);
    }
}
