//! Compaction of an Iceberg table (`tributary compact`): its live data files smaller than the
//! target, by partition and oldest first (by data sequence number), packed into groups of
//! about the target, each group rewritten as one file ([`rewrite`]), and all of them swapped
//! in one `replace` snapshot. A replace changes no row: readers see the same rows, an
//! incremental reader passes over it, and the pipeline's position, which its own snapshots
//! carry, is untouched. A pipeline's append that commits first is planned on again; a
//! compaction that removed a file this one rewrote ends this one, its new files deleted.

use std::collections::BTreeMap;

use parquet::file::properties::WriterProperties;

use super::manifest::ManifestEntry;
use super::metadata::Operation;
use super::plan::PlanError;
use super::pointer::Catalog;
use super::table::{IcebergError, Table, sink_path};
use super::tables::commit_error;
use crate::lake::sink::Sink;
use crate::lake::tables::file::{MIRROR_SUFFIX, TableFile, table_columns};
use crate::lake::tables::rewrite::{self, Rewrite, Small};
use crate::lake::tables::tend::{CompactError, Compacted};

/// Rewrite table `name`'s files smaller than `target` bytes into files of about `target`,
/// beside a running pipeline.
pub async fn compact_table(
    sink: &Sink,
    catalog: Option<&Catalog>,
    name: &str,
    target: u64,
    properties: &WriterProperties,
) -> Result<Compacted, CompactError> {
    let mut done = Compacted {
        output: name.to_owned(),
        version: None,
        replaced: 0,
        replaced_bytes: 0,
        written: 0,
        written_bytes: 0,
        rows: 0,
        left_alone: None,
    };
    if name.ends_with(MIRROR_SUFFIX) {
        // Its files are sorted by key and chosen by their key bounds at each flush: a rewrite
        // must keep them so, which this release does for Delta's only.
        done.left_alone = Some(
            "Iceberg current-state tables are not compacted by this release yet (each flush rewrites the files its keys fall in)".into(),
        );
        return Ok(done);
    }
    let failed = |e| CompactError::from(commit_error(name, 0, e));
    let table = Table::open(sink.clone(), name, catalog);
    let Some(current) = table.load().await.map_err(failed)? else {
        return Ok(done);
    };
    let Some(snapshot) = current.metadata.current_snapshot() else {
        return Ok(done);
    };
    let live = table.live_entries(snapshot).await.map_err(failed)?;
    let mut written: Vec<Rewrite> = Vec::new();
    let mut replaced = Vec::new();
    for group in plan(live, target) {
        let smalls: Result<Vec<Small>, IcebergError> = group
            .iter()
            .map(|e| {
                Ok(Small {
                    path: sink_path(sink, &e.data_file.file_path)?.to_string(),
                    rows: u64::try_from(e.data_file.record_count).ok(),
                })
            })
            .collect();
        let result = match smalls {
            Ok(smalls) => rewrite::rewrite(sink, name, &smalls, properties)
                .await
                .map(|r| (r, smalls)),
            Err(e) => Err(failed(e)),
        };
        match result {
            Ok((new, smalls)) => {
                done.replaced_bytes += group
                    .iter()
                    .map(|e| e.data_file.file_size_in_bytes.max(0) as u64)
                    .sum::<u64>();
                replaced.extend(smalls.into_iter().map(|s| s.path));
                written.push(new);
            }
            Err(e) => {
                remove(sink, &written).await;
                return Err(e);
            }
        }
    }
    done.replaced = replaced.len();
    done.written = written.len();
    done.written_bytes = written.iter().map(|r| r.size).sum();
    done.rows = written.iter().map(|r| r.rows).sum();
    if written.is_empty() {
        return Ok(done);
    }
    let files: Vec<TableFile> = written
        .iter()
        .map(|r| TableFile {
            output: name.to_owned(),
            path: r.path.clone(),
            size: r.size,
            rows: r.rows,
            schema: table_columns(r.schema.clone(), r.partition.as_ref()),
            partition: r.partition.clone(),
            footer: None,
        })
        .collect();
    match table.replace(Operation::Replace, &replaced, &files).await {
        Ok(id) => {
            let after = table.load().await.map_err(failed)?;
            done.version = after
                .as_ref()
                .and_then(|c| c.metadata.snapshot(id))
                .and_then(|s| u64::try_from(s.sequence_number).ok());
            Ok(done)
        }
        Err(IcebergError::Plan {
            source: PlanError::NotLive(path),
            ..
        }) => {
            remove(sink, &written).await;
            let now = table.load().await.map_err(failed)?;
            let version = now
                .and_then(|c| c.metadata.current_snapshot().map(|s| s.sequence_number))
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or_default();
            Err(CompactError::Concurrent {
                output: name.to_owned(),
                version,
                path: table.relative(&path),
            })
        }
        Err(e) => {
            remove(sink, &written).await;
            Err(failed(e))
        }
    }
}

/// Groups of live files to rewrite, each into one: the files below `target` bytes, by
/// partition, oldest first (data sequence number, then path), cut when a group reaches
/// `target`; a group of one file is left alone.
fn plan(live: Vec<ManifestEntry>, target: u64) -> Vec<Vec<ManifestEntry>> {
    let mut partitions: BTreeMap<String, Vec<ManifestEntry>> = BTreeMap::new();
    for entry in live {
        let size = entry.data_file.file_size_in_bytes.max(0) as u64;
        if size < target {
            let key = format!("{:?}", entry.data_file.partition);
            partitions.entry(key).or_default().push(entry);
        }
    }
    let mut groups = Vec::new();
    for mut small in partitions.into_values() {
        small.sort_by(|a, b| {
            let key = |e: &ManifestEntry| (e.sequence_number, e.data_file.file_path.clone());
            key(a).cmp(&key(b))
        });
        groups.extend(rewrite::pack(
            small,
            |e| e.data_file.file_size_in_bytes.max(0) as u64,
            target,
        ));
    }
    groups
}

async fn remove(sink: &Sink, written: &[Rewrite]) {
    rewrite::remove_written(sink, written.iter().map(|r| r.path.as_str())).await;
}

#[cfg(test)]
mod tests {
    use super::super::avro::Value;
    use super::super::manifest::{DataFile, Status};
    use super::*;

    fn entry(name: &str, size: i64, sequence: i64, day: i32) -> ManifestEntry {
        ManifestEntry {
            status: Status::Added,
            snapshot_id: Some(sequence),
            sequence_number: Some(sequence),
            file_sequence_number: Some(sequence),
            data_file: DataFile {
                file_path: format!("memory://lake/t/{name}"),
                partition: vec![("at_day".into(), Value::Int(day))],
                record_count: 1,
                file_size_in_bytes: size,
                ..Default::default()
            },
        }
    }

    #[test]
    fn small_files_are_grouped_by_partition_oldest_first_and_a_lone_one_is_left() {
        let live = vec![
            entry("d", 40, 4, 1),
            entry("big", 500, 1, 1),
            entry("a", 40, 1, 1),
            entry("c", 40, 3, 1),
            entry("b", 40, 2, 1),
            entry("other", 40, 5, 2),
        ];
        let groups: Vec<Vec<String>> = plan(live.clone(), 100)
            .iter()
            .map(|g| {
                let name = |e: &ManifestEntry| {
                    e.data_file.file_path.rsplit('/').next().unwrap().to_owned()
                };
                g.iter().map(name).collect()
            })
            .collect();
        // a+b+c reach the target; d is alone in its partition's rest, and so is "other".
        assert_eq!(groups, [vec!["a", "b", "c"]]);
        assert!(plan(live[..2].to_vec(), 100).is_empty());
    }
}
