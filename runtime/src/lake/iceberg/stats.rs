//! Column statistics of a data file for its manifest entry, from the file's Parquet footer:
//! sizes, value and null counts, and lower and upper bounds in Iceberg's single-value
//! binary form. Readers skip files by these bounds, so a bound is only ever given when it
//! holds: a column's bounds are left out unless every row group has them.
//!
//! Leaves of the Parquet schema are matched to the table's field ids by name (the data files
//! carry no ids; see [`super`]). Bounds are given for primitive columns outside lists and
//! maps; counts for every leaf. NaN counts are not known from a Parquet footer and are left
//! out, which readers take as "may contain NaN" (the Parquet bounds never are NaN).
//!
//! | Iceberg type | bound bytes |
//! |---|---|
//! | `boolean` | one byte, 0 or 1 |
//! | `int`, `date` | 4 bytes little-endian |
//! | `long`, `time`, `timestamp`, `timestamptz` | 8 bytes little-endian |
//! | `float`, `double` | IEEE 754 little-endian |
//! | `decimal(p,s)` | the unscaled value, big-endian two's complement, fewest bytes |
//! | `string` | UTF-8, cut to 16 characters (the upper bound's last one raised) |
//! | `uuid`, `fixed[n]` | the bytes as they are |
//! | `binary` | cut to 16 bytes (the upper bound's last one raised) |

use parquet::basic::LogicalType;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::statistics::Statistics;
use std::cmp::Ordering;

use super::manifest::DataFile;
use super::schema::{Schema, Type};

/// How long string and binary bounds are kept (Iceberg's default `truncate(16)`).
const TRUNCATE: usize = 16;

/// A leaf column's field id and type, and whether readers prune on it.
struct Leaf<'a> {
    id: i32,
    ty: &'a str,
    bounded: bool,
}

/// The field a Parquet column path names in `schema`: structs by field name, a list's
/// `<name>.list.<element>`, a map's `<name>.key_value.key` and `.value`.
fn leaf<'a>(schema: &'a Schema, path: &[String]) -> Option<Leaf<'a>> {
    let (first, mut rest) = path.split_first()?;
    let field = schema.field(first)?;
    let (mut id, mut ty, mut bounded) = (field.id, &field.field_type, true);
    loop {
        match ty {
            Type::Primitive(name) => {
                return rest.is_empty().then_some(Leaf {
                    id,
                    ty: name,
                    bounded,
                });
            }
            Type::Struct(s) => {
                let (name, tail) = rest.split_first()?;
                let f = s.fields.iter().find(|f| &f.name == name)?;
                (id, ty, rest) = (f.id, &f.field_type, tail);
            }
            Type::List(l) => {
                rest = rest.get(2..)?;
                (id, ty, bounded) = (l.element_id, &l.element, false);
            }
            Type::Map(m) => {
                let which = rest.get(1)?;
                rest = rest.get(2..)?;
                bounded = false;
                (id, ty) = match which.as_str() {
                    "key" => (m.key_id, &m.key),
                    _ => (m.value_id, &m.value),
                };
            }
        }
    }
}

/// A statistics value, comparable within its column.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Bool(bool),
    Int(i64),
    Float(f64),
    Decimal(i128),
    Bytes(Vec<u8>),
}

impl Bound {
    fn is_nan(&self) -> bool {
        matches!(self, Bound::Float(v) if v.is_nan())
    }

    fn cmp(&self, other: &Bound) -> Ordering {
        match (self, other) {
            (Bound::Bool(a), Bound::Bool(b)) => a.cmp(b),
            (Bound::Int(a), Bound::Int(b)) => a.cmp(b),
            (Bound::Float(a), Bound::Float(b)) => a.total_cmp(b),
            (Bound::Decimal(a), Bound::Decimal(b)) => a.cmp(b),
            (Bound::Bytes(a), Bound::Bytes(b)) => a.cmp(b),
            _ => Ordering::Equal,
        }
    }
}

/// A big-endian two's complement integer (a Parquet decimal's bytes).
fn be_i128(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut full = [fill; 16];
    full[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(full))
}

/// The minimum and maximum of one row group's column chunk, as `ty` reads them.
fn chunk_bounds(column: &ColumnChunkMetaData, ty: &str) -> Option<(Bound, Bound)> {
    let unsigned = matches!(
        column.column_descr().logical_type_ref(),
        Some(LogicalType::Integer(int)) if !int.is_signed
    );
    let decimal = ty.starts_with("decimal");
    let pair = |min: Option<Bound>, max: Option<Bound>| Some((min?, max?));
    match column.statistics()? {
        Statistics::Boolean(s) => pair(
            s.min_opt().map(|v| Bound::Bool(*v)),
            s.max_opt().map(|v| Bound::Bool(*v)),
        ),
        Statistics::Int32(s) => {
            let int = |v: &i32| match (decimal, unsigned) {
                (true, _) => Bound::Decimal(i128::from(*v)),
                (false, true) => Bound::Int(i64::from(*v as u32)),
                (false, false) => Bound::Int(i64::from(*v)),
            };
            pair(s.min_opt().map(int), s.max_opt().map(int))
        }
        Statistics::Int64(s) => {
            let int = |v: &i64| match (decimal, unsigned) {
                (true, _) => Some(Bound::Decimal(i128::from(*v))),
                // An unsigned value past i64::MAX fits no `long`: no bound.
                (false, true) => i64::try_from(*v as u64).ok().map(Bound::Int),
                (false, false) => Some(Bound::Int(*v)),
            };
            pair(s.min_opt().and_then(int), s.max_opt().and_then(int))
        }
        Statistics::Float(s) => pair(
            s.min_opt().map(|v| Bound::Float(f64::from(*v))),
            s.max_opt().map(|v| Bound::Float(f64::from(*v))),
        ),
        Statistics::Double(s) => pair(
            s.min_opt().map(|v| Bound::Float(*v)),
            s.max_opt().map(|v| Bound::Float(*v)),
        ),
        Statistics::ByteArray(s) => {
            let bytes = |v: &parquet::data_type::ByteArray| match decimal {
                true => be_i128(v.data()).map(Bound::Decimal),
                false => Some(Bound::Bytes(v.data().to_vec())),
            };
            pair(s.min_opt().and_then(bytes), s.max_opt().and_then(bytes))
        }
        Statistics::FixedLenByteArray(s) => {
            let bytes = |v: &parquet::data_type::FixedLenByteArray| match decimal {
                true => be_i128(v.data()).map(Bound::Decimal),
                false => Some(Bound::Bytes(v.data().to_vec())),
            };
            pair(s.min_opt().and_then(bytes), s.max_opt().and_then(bytes))
        }
        Statistics::Int96(_) => None,
    }
}

/// The fewest big-endian two's complement bytes that hold `v`.
fn decimal_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        let redundant = (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    bytes[start..].to_vec()
}

/// `bytes` cut to at most `TRUNCATE` characters (UTF-8) or bytes; for an upper bound, the
/// cut value's last character or byte is raised so it stays above every value it cut short,
/// and there is no bound when nothing can be raised.
fn truncated(bytes: &[u8], text: bool, upper: bool) -> Option<Vec<u8>> {
    if text {
        let s = std::str::from_utf8(bytes).ok()?;
        if s.chars().count() <= TRUNCATE {
            return Some(bytes.to_vec());
        }
        let mut chars: Vec<char> = s.chars().take(TRUNCATE).collect();
        if !upper {
            return Some(chars.into_iter().collect::<String>().into_bytes());
        }
        while let Some(last) = chars.pop() {
            let raised = (u32::from(last) + 1..=0x10_FFFF).find_map(char::from_u32);
            if let Some(c) = raised {
                chars.push(c);
                return Some(chars.into_iter().collect::<String>().into_bytes());
            }
        }
        return None;
    }
    if bytes.len() <= TRUNCATE {
        return Some(bytes.to_vec());
    }
    let mut cut = bytes[..TRUNCATE].to_vec();
    if !upper {
        return Some(cut);
    }
    while let Some(last) = cut.pop() {
        if last < 0xff {
            cut.push(last + 1);
            return Some(cut);
        }
    }
    None
}

/// A bound in Iceberg's single-value form for type `ty`.
fn serialize(bound: &Bound, ty: &str, upper: bool) -> Option<Vec<u8>> {
    match (bound, ty) {
        (Bound::Bool(b), "boolean") => Some(vec![u8::from(*b)]),
        (Bound::Int(v), "int" | "date") => Some(i32::try_from(*v).ok()?.to_le_bytes().to_vec()),
        (Bound::Int(v), "long" | "time" | "timestamp" | "timestamptz") => {
            Some(v.to_le_bytes().to_vec())
        }
        (Bound::Float(v), "float") => Some((*v as f32).to_le_bytes().to_vec()),
        (Bound::Float(v), "double") => Some(v.to_le_bytes().to_vec()),
        (Bound::Decimal(v), _) if ty.starts_with("decimal") => Some(decimal_bytes(*v)),
        (Bound::Bytes(b), "string") => truncated(b, true, upper),
        (Bound::Bytes(b), "binary") => truncated(b, false, upper),
        (Bound::Bytes(b), _) if ty == "uuid" || ty.starts_with("fixed") => Some(b.clone()),
        _ => None,
    }
}

/// Fill `file`'s statistics and split offsets from the Parquet footer `metadata`, by the
/// table's `schema`.
pub fn fill(file: &mut DataFile, metadata: &ParquetMetaData, schema: &Schema) {
    let groups = metadata.row_groups();
    let Some(first) = groups.first() else { return };
    file.split_offsets = Some(
        groups
            .iter()
            .filter_map(|g| {
                g.file_offset()
                    .or_else(|| Some(g.columns().first()?.data_page_offset()))
            })
            .collect(),
    );
    for (c, column) in first.columns().iter().enumerate() {
        let Some(leaf) = leaf(schema, column.column_path().parts()) else {
            continue;
        };
        let chunks: Vec<&ColumnChunkMetaData> =
            groups.iter().filter_map(|g| g.columns().get(c)).collect();
        file.column_sizes
            .insert(leaf.id, chunks.iter().map(|c| c.compressed_size()).sum());
        file.value_counts
            .insert(leaf.id, chunks.iter().map(|c| c.num_values()).sum());
        let nulls: Option<u64> = chunks
            .iter()
            .map(|c| c.statistics()?.null_count_opt())
            .sum();
        if let Some(nulls) = nulls {
            file.null_value_counts.insert(leaf.id, nulls as i64);
        }
        if !leaf.bounded {
            continue;
        }
        // Row groups of nulls alone have no bounds and constrain nothing.
        let mut bounds: Option<(Bound, Bound)> = None;
        let mut complete = true;
        for chunk in &chunks {
            let all_null = chunk
                .statistics()
                .and_then(Statistics::null_count_opt)
                .is_some_and(|n| n as i64 == chunk.num_values());
            match chunk_bounds(chunk, leaf.ty) {
                // A chunk of NaN (and nulls) alone: the Parquet writer gives NaN bounds,
                // which an Iceberg bound never is; the other chunks bound the rest.
                Some((lo, hi)) if lo.is_nan() && hi.is_nan() => {}
                Some((lo, hi)) if lo.is_nan() || hi.is_nan() => complete = false,
                Some((lo, hi)) => {
                    bounds = Some(match bounds {
                        None => (lo, hi),
                        Some((a, b)) => (
                            if lo.cmp(&a).is_lt() { lo } else { a },
                            if hi.cmp(&b).is_gt() { hi } else { b },
                        ),
                    })
                }
                None if all_null => {}
                None => complete = false,
            }
        }
        if let (true, Some((lo, hi))) = (complete, bounds) {
            if let Some(lo) = serialize(&lo, leaf.ty, false) {
                file.lower_bounds.insert(leaf.id, lo);
            }
            if let Some(hi) = serialize(&hi, leaf.ty, true) {
                file.upper_bounds.insert(leaf.id, hi);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, Decimal128Array, FixedSizeBinaryArray, Float64Array, Int32Array, ListArray,
        RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array, UInt64Array,
    };
    use arrow_schema::{DataType, Field, TimeUnit};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    fn bounds_of(file: &DataFile, id: i32) -> (Option<&[u8]>, Option<&[u8]>) {
        (
            file.lower_bounds.get(&id).map(Vec::as_slice),
            file.upper_bounds.get(&id).map(Vec::as_slice),
        )
    }

    /// A Parquet file of `batch` in row groups of `rows`, and its footer.
    fn written(batch: &RecordBatch, rows: usize) -> ParquetMetaData {
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows))
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(Bytes::from(out)).unwrap();
        reader.metadata().clone()
    }

    #[test]
    fn bounds_are_the_columns_extremes_in_icebergs_binary_form() {
        let uuid = Field::new("u", DataType::FixedSizeBinary(16), true)
            .with_extension_type(arrow_schema::extension::Uuid);
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        let columns = arrow_schema::Schema::new(vec![
            Field::new("_seq", DataType::UInt32, false),
            Field::new("_commit_lsn", DataType::UInt64, false),
            Field::new("n", DataType::Int32, true),
            Field::new("price", DataType::Decimal128(12, 2), true),
            Field::new("s", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            uuid,
            Field::new("x", DataType::Float64, true),
            Field::new("l", DataType::List(item.clone()), true),
        ]);
        let long = "xyzabcdefghijklmnopq";
        let batch = RecordBatch::try_new(
            Arc::new(columns.clone()),
            vec![
                Arc::new(UInt32Array::from(vec![1, u32::MAX, 3, 4])) as ArrayRef,
                Arc::new(UInt64Array::from(vec![10, 20, 30, 40])),
                Arc::new(Int32Array::from(vec![Some(-5), None, Some(7), None])),
                Arc::new(
                    Decimal128Array::from(vec![Some(-12_345), Some(99), None, Some(100_000)])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
                Arc::new(StringArray::from(vec![
                    Some("b"),
                    Some(long),
                    Some("a"),
                    None,
                ])),
                Arc::new(TimestampMicrosecondArray::from(vec![5, 1, 9, 3]).with_timezone("UTC")),
                Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                        [Some([2u8; 16]), Some([1u8; 16]), None, Some([0xf0; 16])].into_iter(),
                        16,
                    )
                    .unwrap(),
                ),
                Arc::new(Float64Array::from(vec![1.5, f64::NAN, -2.0, 0.5])),
                Arc::new(ListArray::from_iter_primitive::<
                    arrow_array::types::Int32Type,
                    _,
                    _,
                >(vec![
                    Some(vec![Some(1)]),
                    None,
                    Some(vec![]),
                    Some(vec![Some(2), None]),
                ])),
            ],
        )
        .unwrap();
        let (schema, _) = super::super::schema::fresh(&columns).unwrap();
        for rows in [4, 2, 1] {
            let metadata = written(&batch, rows);
            let mut file = DataFile::default();
            fill(&mut file, &metadata, &schema);
            let le4 = |v: i32| v.to_le_bytes().to_vec();
            let le8 = |v: i64| v.to_le_bytes().to_vec();
            let b = |id| {
                let (lo, hi) = bounds_of(&file, id);
                (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))
            };
            assert_eq!(
                b(1),
                (Some(le8(1)), Some(le8(u32::MAX as i64))),
                "unsigned, {rows} rows a group"
            );
            assert_eq!(b(2), (Some(le8(10)), Some(le8(40))));
            assert_eq!(b(3), (Some(le4(-5)), Some(le4(7))));
            assert_eq!(file.null_value_counts[&3], 2);
            // -12345 is 0xcfc7 in two bytes; 100000 is 0x0186a0.
            assert_eq!(b(4), (Some(vec![0xcf, 0xc7]), Some(vec![0x01, 0x86, 0xa0])));
            let upper = "xyzabcdefghijkln".as_bytes().to_vec();
            assert_eq!(b(5), (Some(b"a".to_vec()), Some(upper)));
            assert_eq!(b(6), (Some(le8(1)), Some(le8(9))));
            assert_eq!(b(7), (Some(vec![1u8; 16]), Some(vec![0xf0; 16])));
            assert_eq!(
                b(8),
                (
                    Some((-2.0f64).to_le_bytes().to_vec()),
                    Some(1.5f64.to_le_bytes().to_vec())
                )
            );
            // A list's element has counts but no bounds.
            assert_eq!(b(10), (None, None));
            assert!(file.value_counts.contains_key(&10));
            assert_eq!(file.value_counts[&1], 4);
            assert_eq!(file.split_offsets.as_ref().unwrap().len(), 4 / rows);
        }
    }

    #[test]
    fn truncation_keeps_bounds_bounds() {
        assert_eq!(truncated(b"short", true, true).unwrap(), b"short");
        let s = "ééééééééééééééééé".as_bytes(); // 17 characters
        let lower = truncated(s, true, false).unwrap();
        assert_eq!(std::str::from_utf8(&lower).unwrap().chars().count(), 16);
        let upper = truncated(s, true, true).unwrap();
        assert!(upper.as_slice() > s, "the upper bound is above the value");
        assert_eq!(truncated(&[0xff; 20], false, true), None);
        assert_eq!(
            truncated(&[1; 20], false, true).unwrap(),
            [vec![1; 15], vec![2]].concat()
        );
        assert_eq!(decimal_bytes(0), [0]);
        assert_eq!(decimal_bytes(-1), [0xff]);
        assert_eq!(decimal_bytes(128), [0, 0x80]);
        assert_eq!(decimal_bytes(-129), [0xff, 0x7f]);
    }
}
