//! Reading back what a pipeline landed: every Parquet file of an output, as rows of text.
//!
//! Values are rendered to one canonical text per type so a test can compare them with what a
//! `SELECT` in PostgreSQL returns for the same row (see each arm of [`cell`]).

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// One landed row: the change metadata, then the output's columns by name.
#[derive(Debug, Clone, PartialEq)]
pub struct LandedRow {
    pub op: String,
    pub commit_lsn: u64,
    pub seq: u32,
    pub xid: u32,
    /// Microseconds since the Unix epoch.
    pub commit_time: i64,
    pub values: BTreeMap<String, Option<String>>,
    /// The file it came from.
    pub file: String,
}

/// Every row of every Parquet file under `<output>/`, sorted by (commit LSN, seq).
pub async fn read_output(store: &dyn ObjectStore, output: &str) -> Vec<LandedRow> {
    let prefix = Path::from(output);
    let mut files: Vec<Path> = store
        .list(Some(&prefix))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing {output}: {e}"));
    files.retain(|p| p.extension() == Some("parquet"));
    files.sort();
    let mut rows = Vec::new();
    for file in files {
        let bytes = store.get(&file).await.unwrap().bytes().await.unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap_or_else(|e| panic!("{file} is not Parquet: {e}"))
            .build()
            .unwrap();
        for batch in reader {
            rows.extend(rows_of(&batch.unwrap(), file.as_ref()));
        }
    }
    rows.sort_by_key(|r| (r.commit_lsn, r.seq));
    rows
}

/// Paths of the data files under `<output>/`.
pub async fn data_files(store: &dyn ObjectStore, output: &str) -> Vec<String> {
    let mut files: Vec<String> = store
        .list(Some(&Path::from(output)))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap();
    files.sort();
    files
}

fn rows_of(batch: &RecordBatch, file: &str) -> Vec<LandedRow> {
    let schema = batch.schema();
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("{file} has no column {name}"))
    };
    let (op, lsn, seq, xid, time) = (
        column("_op"),
        column("_commit_lsn"),
        column("_seq"),
        column("_xid"),
        column("_commit_time"),
    );
    (0..batch.num_rows())
        .map(|i| LandedRow {
            op: cell(op.as_ref(), i).expect("_op is never null"),
            commit_lsn: lsn.as_primitive::<UInt64Type>().value(i),
            seq: seq.as_primitive::<UInt32Type>().value(i),
            xid: xid.as_primitive::<UInt32Type>().value(i),
            commit_time: time.as_primitive::<TimestampMicrosecondType>().value(i),
            values: schema
                .fields()
                .iter()
                .zip(batch.columns())
                .filter(|(f, _)| !f.name().starts_with('_'))
                .map(|(f, a)| (f.name().clone(), cell(a.as_ref(), i)))
                .collect(),
            file: file.to_owned(),
        })
        .collect()
}

/// The canonical text of one value:
/// booleans `true`/`false`; integers and floats in Rust's shortest round-trip form; decimals
/// with exactly their scale's digits; binary and UUIDs as lower-case hex; dates as days since
/// 1970-01-01; timestamps as microseconds since the epoch; strings as they are.
pub fn cell(array: &dyn Array, i: usize) -> Option<String> {
    if array.is_null(i) {
        return None;
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    Some(match array.data_type() {
        DataType::Boolean => array.as_boolean().value(i).to_string(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(i).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(i).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(i).to_string(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(i).to_string(),
        DataType::Float32 => array.as_primitive::<Float32Type>().value(i).to_string(),
        DataType::Float64 => array.as_primitive::<Float64Type>().value(i).to_string(),
        DataType::Decimal128(_, scale) => {
            let v = array
                .as_primitive::<arrow_array::types::Decimal128Type>()
                .value(i);
            decimal_text(v, *scale)
        }
        DataType::Utf8 => array.as_string::<i32>().value(i).to_owned(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(i).to_owned(),
        DataType::Utf8View => array.as_string_view().value(i).to_owned(),
        DataType::Binary => hex(array.as_binary::<i32>().value(i)),
        DataType::LargeBinary => hex(array.as_binary::<i64>().value(i)),
        DataType::FixedSizeBinary(_) => hex(array.as_fixed_size_binary().value(i)),
        DataType::Date32 => array.as_primitive::<Date32Type>().value(i).to_string(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => array
            .as_primitive::<TimestampMicrosecondType>()
            .value(i)
            .to_string(),
        DataType::Dictionary(_, _) => {
            let dict = array.as_any_dictionary();
            let key = dict.normalized_keys()[i];
            cell(dict.values().as_ref(), key)?
        }
        other => panic!("the test reader does not render {other} yet"),
    })
}

fn decimal_text(value: i128, scale: i8) -> String {
    if scale <= 0 {
        return value.to_string();
    }
    let scale = scale as usize;
    let digits = value.unsigned_abs().to_string();
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    format!("{}{int}.{frac}", if value < 0 { "-" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::decimal_text;

    #[test]
    fn decimals_keep_their_scale() {
        assert_eq!(decimal_text(12345, 2), "123.45");
        assert_eq!(decimal_text(-5, 2), "-0.05");
        assert_eq!(decimal_text(100, 0), "100");
    }
}
