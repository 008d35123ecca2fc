//! Hot reload of the plugins: a replaced plugin file, or `SIGHUP`, loads the pipeline's
//! transforms again in the background; the transform stage swaps them in at the next batch
//! boundary (never between the parts of one transaction). A version that fails to load or
//! `init` leaves the running one in place, and the log says why.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use crate::transform::{HostLimits, TransformChain, TransformError, TransformSpec};

/// How often the plugin files are looked at.
pub(super) const WATCH_EVERY: Duration = Duration::from_secs(2);

/// What identifies the version of a file on disk without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
}

fn stamp(path: &PathBuf) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        #[cfg(unix)]
        inode: std::os::unix::fs::MetadataExt::ino(&meta),
    })
}

/// Watches the plugin files and loads new versions.
pub(super) struct Reloader {
    specs: Vec<(TransformSpec, HostLimits)>,
    stamps: Vec<Option<Stamp>>,
    /// A load in progress, and why it started.
    loading: Option<(
        oneshot::Receiver<Result<TransformChain, TransformError>>,
        String,
    )>,
    /// Asked for while a load was running: start another when it is done.
    again: Option<String>,
}

impl Reloader {
    pub fn new(specs: Vec<(TransformSpec, HostLimits)>) -> Self {
        let stamps = specs.iter().map(|(s, _)| stamp(&s.plugin)).collect();
        Reloader {
            specs,
            stamps,
            loading: None,
            again: None,
        }
    }

    /// Whether there are plugins to reload at all.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Look at the files; start a load when one changed.
    pub fn poll_files(&mut self) {
        let now: Vec<Option<Stamp>> = self.specs.iter().map(|(s, _)| stamp(&s.plugin)).collect();
        let changed: Vec<String> = self
            .specs
            .iter()
            .zip(now.iter().zip(&self.stamps))
            .filter(|(_, (new, old))| new != old && new.is_some())
            .map(|((s, _), _)| s.plugin.display().to_string())
            .collect();
        self.stamps = now;
        if !changed.is_empty() {
            self.request(format!("{} changed", changed.join(", ")));
        }
    }

    /// Start a load (or queue one behind the load in progress).
    pub fn request(&mut self, why: String) {
        if self.specs.is_empty() {
            return;
        }
        if self.loading.is_some() {
            self.again = Some(why);
            return;
        }
        tracing::info!("{why}: loading the plugins again; the running ones go on until then");
        let specs = self.specs.clone();
        let (tx, rx) = oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let _ = tx.send(TransformChain::load(&specs));
        });
        self.loading = Some((rx, why));
    }

    /// A newly loaded chain, when a load finished successfully. A failed load is logged and
    /// the running chain stays.
    pub fn ready(&mut self) -> Option<TransformChain> {
        let (rx, why) = self.loading.as_mut()?;
        let result = match rx.try_recv() {
            Err(oneshot::error::TryRecvError::Empty) => return None,
            Err(oneshot::error::TryRecvError::Closed) => {
                tracing::error!("reloading the plugins ({why}) ended without a result");
                None
            }
            Ok(Err(error)) => {
                tracing::error!(
                    "reloading the plugins ({why}) failed, the running version goes on: {error}"
                );
                None
            }
            Ok(Ok(chain)) => Some(chain),
        };
        self.loading = None;
        if let Some(why) = self.again.take() {
            self.request(why);
        }
        result
    }
}

/// `SIGHUP`, where there is one.
#[cfg(unix)]
pub(super) fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

#[cfg(not(unix))]
pub(super) fn hangup_signal() -> Option<()> {
    None
}

#[cfg(unix)]
pub(super) async fn next_hangup(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
pub(super) async fn next_hangup(_: &mut Option<()>) {
    std::future::pending().await
}
