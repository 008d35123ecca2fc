//! Rewriting a group of a table's small data files as one file, the same for every format:
//! the files' schemas merged (older files take the columns added since as nulls), their rows
//! copied in order and counted against what the table says they hold, and the new file
//! written under the table's `_compacted/` folder with the group's partition. Each format
//! chooses the groups ([`pack`]) and commits the swap of old files for new.

use arrow_schema::SchemaRef;
use object_store::path::Path;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::file::partition_of;
use super::keyed::{fit, merged_schema};
use super::tend::{COMPACTED, CompactError};
use crate::lake::commit::CommitError;
use crate::lake::encode::partition::{FilePartition, PARTITION_KEY};
use crate::lake::sink::Sink;

/// A random (version 4) UUID, for the names of new files and tables.
pub fn random_uuid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the system's random source");
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    crate::wire::pgtype::uuid_text(&b)
}

/// Items in the order given, cut into groups when one reaches `target` bytes (`size` says an
/// item's); groups of one are left out (rewriting a file alone would gain nothing).
pub fn pack<T>(
    items: impl IntoIterator<Item = T>,
    size: impl Fn(&T) -> u64,
    target: u64,
) -> Vec<Vec<T>> {
    let mut groups = Vec::new();
    let mut group = Vec::new();
    let mut bytes = 0;
    for item in items {
        bytes += size(&item);
        group.push(item);
        if bytes >= target {
            groups.push(std::mem::take(&mut group));
            bytes = 0;
        }
    }
    groups.push(group);
    groups.retain(|g| g.len() > 1);
    groups
}

/// One file of a group to rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Small {
    /// Relative to the sink root.
    pub path: String,
    /// Its rows, when the table's metadata says.
    pub rows: Option<u64>,
}

/// The file a group was rewritten as, written and not yet committed.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// Relative to the sink root: `<table>/_compacted/<uuid>.parquet`.
    pub path: String,
    pub size: u64,
    pub rows: u64,
    /// Its columns ([`merged_schema`] of the group's).
    pub schema: SchemaRef,
    /// The partition of the group's first file, which the new file carries too.
    pub partition: Option<FilePartition>,
}

/// Rewrite `group`, files of table `table`, as one file under `<table>/_compacted/`. Each
/// file is held in memory while read.
pub async fn rewrite(
    sink: &Sink,
    table: &str,
    group: &[Small],
    properties: &WriterProperties,
) -> Result<Rewrite, CompactError> {
    let bad = |path: &str, reason: String| CompactError::File {
        output: table.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let mut readers = Vec::with_capacity(group.len());
    for small in group {
        let bytes = sink
            .get(&Path::from(small.path.as_str()))
            .await
            .map_err(CommitError::from)?
            .ok_or_else(|| {
                bad(
                    &small.path,
                    "the table reads it, but it is not in the sink".into(),
                )
            })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(|e| bad(&small.path, format!("not readable as Parquet: {e}")))?;
        readers.push((small, reader));
    }
    let partition = match readers.first() {
        Some((small, reader)) => {
            partition_of(reader.metadata().file_metadata().key_value_metadata())
                .map_err(|reason| bad(&small.path, reason))?
        }
        None => None,
    };
    let schemas: Vec<_> = readers.iter().map(|(_, r)| r.schema().clone()).collect();
    let schema = merged_schema(&schemas).map_err(|e| bad(table, e.to_string()))?;
    let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties.clone()))
        .map_err(|e| bad(table, e.to_string()))?;
    if let Some(p) = &partition {
        let value = serde_json::to_string(p).expect("a partition serializes");
        writer.append_key_value_metadata(KeyValue::new(PARTITION_KEY.to_owned(), value));
    }
    let (mut rows, mut expected) = (0u64, 0u64);
    for (small, reader) in readers {
        let reader = reader
            .build()
            .map_err(|e| bad(&small.path, e.to_string()))?;
        let before = rows;
        for batch in reader {
            let batch = batch.map_err(|e| bad(&small.path, e.to_string()))?;
            let batch = fit(&batch, &schema).map_err(|e| bad(&small.path, e.to_string()))?;
            rows += batch.num_rows() as u64;
            writer
                .write(&batch)
                .map_err(|e| bad(&small.path, e.to_string()))?;
        }
        expected += small.rows.unwrap_or(rows - before);
    }
    if rows != expected {
        return Err(bad(
            table,
            format!("the files held {rows} rows where the table says {expected}"),
        ));
    }
    let bytes = writer.into_inner().map_err(|e| bad(table, e.to_string()))?;
    let path = format!("{table}/{COMPACTED}/{}.parquet", random_uuid());
    let size = bytes.len() as u64;
    sink.create(&Path::from(path.as_str()), bytes.into())
        .await
        .map_err(CommitError::from)?;
    Ok(Rewrite {
        path,
        size,
        rows,
        schema,
        partition,
    })
}

/// Delete the files of a compaction that did not commit (paths relative to the sink; a
/// failure to delete is only told: no table reads them).
pub async fn remove_written<'a>(sink: &Sink, paths: impl IntoIterator<Item = &'a str>) {
    for path in paths {
        let path = Path::from(path);
        if let Err(e) = sink.delete(&path).await {
            tracing::warn!(%path, error = %e, "could not delete a file of a compaction that did not commit; no table reads it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_packed_in_order_into_groups_of_the_target_and_a_lone_one_is_left() {
        let groups = pack([40u64, 40, 40, 40, 40], |s| *s, 100);
        assert_eq!(groups, [vec![40, 40, 40], vec![40, 40]]);
        assert!(pack([40u64], |s| *s, 100).is_empty());
        assert!(
            pack([500u64, 500], |s| *s, 100).is_empty(),
            "each at the target already"
        );
    }
}
