//! Output rows to Parquet files. (Being written.)

use bytes::Bytes;

use crate::change::OutputBatch;

#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Rows per row group.
    pub row_group_rows: usize,
    /// A file is closed and the next one started once it reaches about this size.
    pub target_file_bytes: usize,
    pub zstd_level: i32,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            row_group_rows: 128 * 1024,
            target_file_bytes: 128 << 20,
            zstd_level: 3,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("output {output:?}: {message}")]
    Invalid { output: String, message: String },
}

/// Encode one output batch as one or more Parquet files (more when it passes the target size).
pub fn encode(_batch: &OutputBatch, _options: &EncodeOptions) -> Result<Vec<Bytes>, EncodeError> {
    todo!("encode")
}
