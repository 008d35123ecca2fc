//! The encode stage: the transforms' outputs as Parquet files, named for this writer.

/// Flushes encoded at once.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::error::PipelineError;
use super::messages::{Encoded, Transformed};
use crate::lake::commit::{FileEntry, Writer, data_file_path};
use crate::lake::encode::{EncodeError, Encoder};
use crate::lake::tables::file::footer_of;
use crate::lake::tables::{TableFile, table_columns};

const ENCODERS: usize = 2;

/// The encode stage: Parquet files of every output, named for this writer, on a blocking
/// thread.
pub(super) async fn encode_stage(
    encoder: Encoder,
    writer: Writer,
    tables: bool,
    mut input: mpsc::Receiver<Transformed>,
    output: mpsc::Sender<Encoded>,
) -> Result<(), PipelineError> {
    use futures::StreamExt;
    let encoder = Arc::new(encoder);
    // Flushes encode side by side, each on a blocking thread, and are named and handed on in
    // the order they came: the encoder is the busiest stage of a wide or loading pipeline.
    let mut encoding = futures::stream::FuturesOrdered::new();
    // The file ordinals of the flush being named, per output: the parts of one flush number
    // their files on from the part before.
    let mut numbering: (u64, BTreeMap<String, usize>) = (u64::MAX, BTreeMap::new());
    let mut open = true;
    loop {
        tokio::select! {
            transformed = input.recv(), if open && encoding.len() < ENCODERS => {
                let Some(transformed) = transformed else {
                    open = false;
                    continue;
                };
                let started = Instant::now();
                let mut transformed: Transformed = transformed;
                let outputs = std::mem::take(&mut transformed.outputs);
                let encoder = encoder.clone();
                let files = tokio::task::spawn_blocking(move || {
                    outputs
                        .iter()
                        .map(|o| encoder.encode(o).map(|files| (o.output.clone(), files)))
                        .collect::<Result<Vec<_>, EncodeError>>()
                });
                encoding.push_back(async move { (transformed, started, files.await) });
            }
            Some((transformed, started, files)) = encoding.next(), if !encoding.is_empty() => {
                let Transformed {
                    mut flush,
                    mut share,
                    transform,
                    tallies,
                    ..
                } = transformed;
                let sequence = flush.sequence;
                let files = files
                    .map_err(|e| PipelineError::Task(e.to_string()))?
                    .map_err(|source| PipelineError::Encode {
                        sequence,
                        first: flush.first_commit_lsn,
                        last: flush.last_commit_lsn,
                        source,
                    })?;
                if numbering.0 != sequence {
                    numbering = (sequence, BTreeMap::new());
                }
                (flush.files, flush.tables) =
                    name_files(files, sequence, &writer, &mut numbering.1, tables);
                // Only the files are left until they are uploaded.
                share.shrink_to(flush.files.iter().map(|(_, b)| b.len()).sum());
                let encoded = Encoded {
                    flush,
                    _budget: share,
                    transform,
                    encode: started.elapsed(),
                    tallies,
                };
                if output.send(encoded).await.is_err() {
                    return Ok(());
                }
            }
            else => break,
        }
    }
    Ok(())
}

/// Name the encoded files of a flush (or part of one); `ordinals` holds the next file ordinal
/// of each output in this flush. With `publish`, also what each file brings to its table.
fn name_files(
    outputs: Vec<(String, Vec<crate::lake::encode::EncodedFile>)>,
    sequence: u64,
    writer: &Writer,
    ordinals: &mut BTreeMap<String, usize>,
    publish: bool,
) -> (Vec<(FileEntry, Bytes)>, Vec<TableFile>) {
    let mut files = Vec::new();
    let mut tables = Vec::new();
    for (output, encoded) in outputs {
        for encoded in encoded {
            let part = ordinals.entry(output.clone()).or_default();
            let path = data_file_path(&output, sequence, writer, *part);
            *part += 1;
            let file = FileEntry {
                path,
                output: output.clone(),
                rows: encoded.rows,
                bytes: encoded.bytes.len() as u64,
                schema: encoded.schema,
            };
            if publish {
                tables.push(TableFile {
                    output: output.clone(),
                    path: file.path.clone(),
                    size: file.bytes,
                    rows: file.rows,
                    schema: table_columns(encoded.columns, encoded.partition.as_ref()),
                    partition: encoded.partition,
                    footer: footer_of(&encoded.bytes),
                });
            }
            files.push((file, encoded.bytes));
        }
    }
    (files, tables)
}
