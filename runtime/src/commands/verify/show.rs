//! The rows behind the differences shown: the source's read again in the same snapshot, the
//! lake's from the files that hold them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::digest::{self, BatchCells, RowText, Shape};
use super::lake::{self, Survey};
use super::read;
use super::replay::{ChangeId, Difference, DigestMap, DigestSet, RowAt, Sample, Version};
use super::report::Shown;
use super::{VerifyError, digest_error, scan_source};
use crate::Lsn;
use crate::lake::commit::CommitLog;
use crate::source::snapshot::{Snapshot, SourceTable};

/// Both sides' rows of the sampled differences.
pub(super) async fn show(
    snapshot: &Snapshot,
    log: &CommitLog,
    survey: &Survey,
    table: &SourceTable,
    shape: &Shape,
    samples: &[Sample],
) -> Result<Vec<Shown>, VerifyError> {
    if samples.is_empty() {
        return Ok(Vec::new());
    }
    let source = source_rows(snapshot, table, shape, samples).await?;
    let lake = lake_rows(log, survey, shape, samples).await?;
    let key_text = |row: &RowText| match &shape.key {
        None => "row".to_owned(),
        Some(key) => key
            .iter()
            .map(|&k| format!("{}={}", row[k].0, row[k].1))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let mut shown: Vec<Shown> = samples
        .iter()
        .map(|s| {
            let source = source.get(&s.key).cloned();
            let lake_row = s.lake.as_ref().and_then(|v| lake.get(&v.at));
            let key = source
                .as_ref()
                .or(lake_row.map(|(_, row)| row))
                .map_or_else(|| format!("(key digest {:032x})", s.key), key_text);
            Shown {
                difference: s.difference,
                key,
                source,
                lake: lake_row.map(|(_, row)| row.clone()),
                lake_at: s.lake.as_ref().zip(lake_row).map(|(v, (id, _))| {
                    format!(
                        "{}, change {} seq {}",
                        survey.location(v.at),
                        Lsn(id.commit_lsn),
                        id.seq
                    )
                }),
            }
        })
        .collect();
    shown.sort_by(|a, b| (a.difference, &a.key).cmp(&(b.difference, &b.key)));
    Ok(shown)
}

/// The source's rows of the samples that have one there, by key digest: the table read again
/// in the same snapshot.
async fn source_rows(
    snapshot: &Snapshot,
    table: &SourceTable,
    shape: &Shape,
    samples: &[Sample],
) -> Result<DigestMap<RowText>, VerifyError> {
    let wanted: DigestSet = samples
        .iter()
        .filter(|s| s.difference != Difference::Extra)
        .map(|s| s.key)
        .collect();
    if wanted.is_empty() {
        return Ok(DigestMap::default());
    }
    let shape = Arc::new(shape.clone());
    scan_source(
        snapshot,
        table,
        shape.format,
        DigestMap::default(),
        move |found, batch| {
            let mut cells = BatchCells::new(batch, &shape).map_err(digest_error(&shape))?;
            for i in 0..batch.num_rows() {
                let key = cells.key(i);
                if wanted.contains(&key) {
                    found.insert(key, digest::render_row(batch, &shape, i));
                }
            }
            Ok(())
        },
    )
    .await
}

/// The lake's rows of the samples that have one there, with the change each comes from, by
/// where they are; unchanged TOAST cells are taken from the rows their values come from.
async fn lake_rows(
    log: &CommitLog,
    survey: &Survey,
    shape: &Shape,
    samples: &[Sample],
) -> Result<HashMap<RowAt, (ChangeId, RowText)>, VerifyError> {
    let versions: Vec<&Version> = samples.iter().filter_map(|s| s.lake.as_ref()).collect();
    let mut by_file: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for v in &versions {
        by_file.entry(v.at.file).or_default().push(v.at.row);
        for (_, at) in v.toast.iter().flat_map(|t| t.iter().flatten()) {
            by_file.entry(at.file).or_default().push(at.row);
        }
    }
    let mut rendered: HashMap<RowAt, (ChangeId, RowText)> = HashMap::new();
    for (file, rows) in by_file {
        let path = &survey.committed[file as usize].path;
        let Some(bytes) = lake::fetch(log, path).await? else {
            continue;
        };
        let shape = shape.clone();
        let read = tokio::task::spawn_blocking(move || read::render_rows(bytes, &shape, &rows))
            .await
            .map_err(|e| VerifyError::Task(e.to_string()))?;
        // The file was readable a moment ago; if it is not now, its rows go unprinted.
        for (row, text) in read.unwrap_or_default() {
            rendered.insert(RowAt { file, row }, text);
        }
    }
    let mut out = HashMap::new();
    for v in versions {
        let Some((id, mut row)) = rendered.get(&v.at).cloned() else {
            continue;
        };
        for (j, filled) in v.toast.iter().flat_map(|t| t.iter().enumerate()) {
            let col = shape.toast[j];
            match filled {
                Some((_, at)) if *at == v.at => {}
                Some((_, at)) => {
                    if let Some((_, from)) = rendered.get(at) {
                        let value = &from[col].1;
                        row[col].1 = format!("{value} (unchanged, from {})", survey.location(*at));
                    }
                }
                None => row[col].1 = "(unchanged TOAST value the lake never had)".to_owned(),
            }
        }
        out.insert(v.at, (id, row));
    }
    Ok(out)
}
