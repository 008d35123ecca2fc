//! The WebAssembly transform host. (Being written.)

use std::path::PathBuf;
use std::time::Duration;

use crate::change::{Batch, OutputBatch};

/// One `[[transform]]` of the pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformSpec {
    pub plugin: PathBuf,
    pub config: Vec<(String, String)>,
}

/// What each plugin call may use.
#[derive(Debug, Clone)]
pub struct HostLimits {
    pub memory_bytes: usize,
    pub call_timeout: Duration,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            memory_bytes: 256 << 20,
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// A loaded plugin as recorded in commit entries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub path: String,
    /// SHA-256 of the plugin file, hex.
    pub digest: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error("plugin {plugin:?}: {message}")]
    Plugin { plugin: String, message: String },
}

/// The transforms of a pipeline, applied in order. With none, every change lands in the
/// output derived from its table.
pub struct TransformChain {}

impl TransformChain {
    pub fn load(_specs: &[TransformSpec], _limits: &HostLimits) -> Result<Self, TransformError> {
        todo!("load")
    }

    pub fn plugins(&self) -> Vec<PluginInfo> {
        Vec::new()
    }

    pub fn process(&mut self, _batch: &Batch) -> Result<Vec<OutputBatch>, TransformError> {
        todo!("process")
    }
}
