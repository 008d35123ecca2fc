use std::collections::HashMap;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatchReader};
use arrow_schema::{DataType, Field, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, LogicalType};

use super::*;
use crate::stream::change::{self, Op, OutputColumn, Value};
use crate::wire::pgtype::{ColumnType, oid};

fn numeric_typmod(precision: i32, scale: i32) -> i32 {
    ((precision << 16) | scale) + 4
}

fn col(name: &str, type_oid: u32, type_modifier: i32) -> OutputColumn {
    OutputColumn::builtin(name, type_oid, type_modifier)
}

/// One column of every kind the encoder distinguishes.
fn every_type() -> Vec<OutputColumn> {
    vec![
        col("b", oid::BOOL, -1),
        col("i2", oid::INT2, -1),
        col("i4", oid::INT4, -1),
        col("i8", oid::INT8, -1),
        col("o", oid::OID, -1),
        col("f4", oid::FLOAT4, -1),
        col("f8", oid::FLOAT8, -1),
        col("money", oid::NUMERIC, numeric_typmod(12, 2)),
        col("wide", oid::NUMERIC, numeric_typmod(50, 10)),
        col("n", oid::NUMERIC, -1),
        col("t", oid::TEXT, -1),
        col("vc", oid::VARCHAR, 14),
        col("bp", oid::BPCHAR, 7),
        col("nm", oid::NAME, -1),
        col("by", oid::BYTEA, -1),
        col("d", oid::DATE, -1),
        col("tm", oid::TIME, -1),
        col("ts", oid::TIMESTAMP, -1),
        col("tz", oid::TIMESTAMPTZ, -1),
        col("iv", oid::INTERVAL, -1),
        col("u", oid::UUID, -1),
        col("j", oid::JSON, -1),
        col("jb", oid::JSONB, -1),
        col("a", oid::INT4_ARRAY, -1),
        col("ttz", oid::TIMETZ, -1),
        col("mood", 70_000, -1),
        col("cash", oid::MONEY, -1),
        col("ip", oid::INET, -1),
        OutputColumn {
            ty: ColumnType::builtin(oid::TEXT_ARRAY, -1).with_dims(2),
            ..col("grid", oid::TEXT_ARRAY, -1)
        },
        col("ids", oid::UUID_ARRAY, -1),
    ]
}

fn list(dims: Vec<u32>, elements: Vec<Value>) -> Value {
    Value::Array(Box::new(change::Array { dims, elements }))
}

fn typical() -> Vec<Value> {
    vec![
        Value::Bool(true),
        Value::Int2(-7),
        Value::Int4(42),
        Value::Int8(1 << 40),
        Value::Int8(4_294_967_295),
        Value::Float4(1.5),
        Value::Float8(-2.25e300),
        Value::Numeric("1234567890.12".into()),
        Value::Numeric("-12345678901234567890123456789012345678.0123456789".into()),
        Value::Numeric("3.14159265358979323846264338327950288419716939937510".into()),
        Value::Text("hello".into()),
        Value::Text("varchar".into()),
        Value::Text("abc".into()),
        Value::Text("pg_class".into()),
        Value::Bytea(vec![0, 1, 2, 255]),
        Value::Date(19_782),
        Value::Time(45_296_789_000),
        Value::Timestamp(1_709_210_096_789_000),
        Value::TimestampTz(1_709_210_096_789_001),
        Value::Interval {
            months: 14,
            days: 3,
            micros: 14_706_500_000,
        },
        Value::Uuid(*b"\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11"),
        Value::Json(r#"{"a": [1, 2]}"#.into()),
        Value::Json(r#"{"b": null}"#.into()),
        list(vec![3], vec![Value::Int4(1), Value::Int4(2), Value::Null]),
        Value::TimeTz {
            micros: 43_200_000_000,
            offset: 7200,
        },
        Value::Other("happy".into()),
        Value::Numeric("-1234.56".into()),
        Value::Text("10.0.0.1/8".into()),
        list(
            vec![2, 2],
            ["a", "b", "c d", ""]
                .iter()
                .map(|s| Value::Text((*s).into()))
                .collect(),
        ),
        list(vec![1], vec![Value::Uuid([7; 16])]),
    ]
}

fn edges() -> Vec<Value> {
    vec![
        Value::Bool(false),
        Value::Int2(i16::MIN),
        Value::Int4(i32::MAX),
        Value::Int8(i64::MIN),
        Value::Int8(0),
        Value::Float4(f32::NAN),
        Value::Float8(f64::NEG_INFINITY),
        Value::Numeric("-9999999999.99".into()),
        Value::Numeric("0.0000000000".into()),
        Value::Numeric("NaN".into()),
        Value::Text(String::new()),
        Value::Text("日本語 ✓ 🦀".into()),
        Value::Text("a  ".into()),
        Value::Text(String::new()),
        Value::Bytea((0..=255u8).cycle().take(3 << 20).collect()),
        Value::Date(-719_528),
        Value::Time(86_400_000_000),
        Value::Timestamp(i64::MIN),
        Value::TimestampTz(i64::MAX),
        Value::Interval {
            months: -1,
            days: -2,
            micros: i64::MIN,
        },
        Value::Uuid([0xff; 16]),
        Value::Json("[]".into()),
        Value::Json("\"ü\"".into()),
        list(vec![], vec![]),
        Value::TimeTz {
            micros: 0,
            offset: -50_400,
        },
        Value::Other("sad".into()),
        Value::Numeric("92233720368547758.07".into()),
        Value::Text("::ffff:1.2.3.4".into()),
        list(vec![1, 1], vec![Value::Null]),
        list(vec![2], vec![Value::Null, Value::Uuid([0; 16])]),
    ]
}

fn row(seq: u32, values: Vec<Value>) -> OutputRow {
    OutputRow {
        op: [Op::Insert, Op::Update, Op::Delete, Op::Truncate][seq as usize % 4],
        commit_lsn: Lsn(0x16_B374_D848),
        seq,
        sub: 0,
        xid: 771,
        commit_time: 1_709_210_096_000_000 + i64::from(seq),
        values,
        old: None,
    }
}

fn batch(columns: Vec<OutputColumn>, rows: Vec<OutputRow>) -> OutputBatch {
    OutputBatch {
        output: "public.things".into(),
        columns: columns.into(),
        rows,
        old_image: false,
    }
}

fn read(file: &Bytes) -> (SchemaRef, Vec<RecordBatch>) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())
        .unwrap()
        .build()
        .unwrap();
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().unwrap();
    (schema, batches)
}

fn decimal_text(digits: String, scale: usize) -> String {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(rest) => ("-", rest.to_owned()),
        None => ("", digits),
    };
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let point = digits.len() - scale;
    format!("{sign}{}.{}", &digits[..point], &digits[point..])
}

/// Reads a cell back into the value the encoder was given.
fn cell(array: &dyn Array, i: usize, kind: Kind) -> Value {
    if array.is_null(i) {
        return Value::Null;
    }
    if let DataType::List(_) = array.data_type() {
        let mut dims = Vec::new();
        let mut elements = Vec::new();
        flatten(
            array.as_list::<i32>().value(i).as_ref(),
            kind,
            0,
            &mut dims,
            &mut elements,
        );
        if elements.is_empty() {
            dims.clear();
        }
        return list(dims, elements);
    }
    match kind {
        Kind::Bool => Value::Bool(array.as_boolean().value(i)),
        Kind::Int2 => Value::Int2(array.as_primitive::<Int16Type>().value(i)),
        Kind::Int4 => Value::Int4(array.as_primitive::<Int32Type>().value(i)),
        Kind::Int8 => Value::Int8(array.as_primitive::<Int64Type>().value(i)),
        Kind::Oid => Value::Int8(array.as_primitive::<UInt32Type>().value(i).into()),
        Kind::Float4 => Value::Float4(array.as_primitive::<Float32Type>().value(i)),
        Kind::Float8 => Value::Float8(array.as_primitive::<Float64Type>().value(i)),
        Kind::Decimal128 { scale, .. } => Value::Numeric(decimal_text(
            array.as_primitive::<Decimal128Type>().value(i).to_string(),
            scale as usize,
        )),
        Kind::NumericText => Value::Numeric(array.as_string::<i32>().value(i).into()),
        Kind::Text => Value::Text(array.as_string::<i32>().value(i).into()),
        Kind::Json => Value::Json(array.as_string::<i32>().value(i).into()),
        Kind::Other => Value::Other(array.as_string::<i32>().value(i).into()),
        Kind::Bytea => Value::Bytea(array.as_binary::<i32>().value(i).into()),
        Kind::Date => Value::Date(array.as_primitive::<Date32Type>().value(i)),
        Kind::Time => Value::Time(array.as_primitive::<Time64MicrosecondType>().value(i)),
        Kind::Timestamp => {
            Value::Timestamp(array.as_primitive::<TimestampMicrosecondType>().value(i))
        }
        Kind::TimestampTz => {
            Value::TimestampTz(array.as_primitive::<TimestampMicrosecondType>().value(i))
        }
        Kind::Uuid => Value::Uuid(array.as_fixed_size_binary().value(i).try_into().unwrap()),
        Kind::Interval => {
            let s = array.as_struct();
            Value::Interval {
                months: s.column(0).as_primitive::<Int32Type>().value(i),
                days: s.column(1).as_primitive::<Int32Type>().value(i),
                micros: s.column(2).as_primitive::<Int64Type>().value(i),
            }
        }
        Kind::TimeTz => {
            let s = array.as_struct();
            Value::TimeTz {
                micros: s.column(0).as_primitive::<Time64MicrosecondType>().value(i),
                offset: s.column(1).as_primitive::<Int32Type>().value(i),
            }
        }
    }
}

/// The shape and elements of one list cell, level by level.
fn flatten(array: &dyn Array, kind: Kind, depth: usize, dims: &mut Vec<u32>, out: &mut Vec<Value>) {
    if dims.len() == depth {
        dims.push(array.len() as u32);
    }
    match array.data_type() {
        DataType::List(_) => {
            let lists = array.as_list::<i32>();
            for j in 0..lists.len() {
                flatten(lists.value(j).as_ref(), kind, depth + 1, dims, out);
            }
        }
        _ => out.extend((0..array.len()).map(|j| cell(array, j, kind))),
    }
}

#[test]
fn every_type_round_trips_with_its_schema() {
    let columns = every_type();
    let mut toasted = vec![Value::Null; columns.len()];
    toasted[10] = Value::UnchangedToast;
    toasted[14] = Value::UnchangedToast;
    let input = vec![row(0, typical()), row(1, toasted), row(2, edges())];
    let files = encode(
        &batch(columns.clone(), input.clone()),
        &EncodeOptions::default(),
    )
    .unwrap();
    assert_eq!(files.len(), 1);

    let (schema, batches) = read(&files[0].bytes);
    assert_eq!(schema.fields(), arrow_schema(&columns, false).fields());
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names[..7], METADATA_COLUMNS);
    // A declared output's files end with `_sub`.
    assert_eq!(names[7..].len(), columns.len() + 1);
    assert_eq!(names.last(), Some(&SUB_COLUMN));
    let utc = || Some("UTC".into());
    let expected_types = [
        DataType::Utf8,
        DataType::UInt64,
        DataType::UInt32,
        DataType::UInt32,
        DataType::Timestamp(TimeUnit::Microsecond, utc()),
        DataType::Utf8,
        DataType::List(Arc::new(Field::new(LIST_ITEM, DataType::Utf8, false))),
        DataType::Boolean,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt32,
        DataType::Float32,
        DataType::Float64,
        DataType::Decimal128(12, 2),
        DataType::Utf8,
        DataType::Utf8,
        DataType::Utf8,
        DataType::Utf8,
        DataType::Utf8,
        DataType::Utf8,
        DataType::Binary,
        DataType::Date32,
        DataType::Time64(TimeUnit::Microsecond),
        DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Timestamp(TimeUnit::Microsecond, utc()),
        DataType::Struct(
            vec![
                Field::new("months", DataType::Int32, false),
                Field::new("days", DataType::Int32, false),
                Field::new("micros", DataType::Int64, false),
            ]
            .into(),
        ),
        DataType::FixedSizeBinary(16),
        DataType::Utf8,
        DataType::Utf8,
        DataType::List(Arc::new(Field::new(LIST_ITEM, DataType::Int32, true))),
        DataType::Struct(
            vec![
                Field::new("time", DataType::Time64(TimeUnit::Microsecond), false),
                Field::new("offset_seconds", DataType::Int32, false),
            ]
            .into(),
        ),
        DataType::Utf8,
        DataType::Decimal128(19, 2),
        DataType::Utf8,
        DataType::List(Arc::new(Field::new(
            LIST_ITEM,
            DataType::List(Arc::new(Field::new(LIST_ITEM, DataType::Utf8, true))),
            true,
        ))),
        DataType::List(Arc::new(
            Field::new(LIST_ITEM, DataType::FixedSizeBinary(16), true)
                .with_extension_type(arrow_schema::extension::Uuid),
        )),
        DataType::UInt32,
    ];
    let types: Vec<&DataType> = schema.fields().iter().map(|f| f.data_type()).collect();
    assert_eq!(types, expected_types.iter().collect::<Vec<_>>());
    let (sub, data) = schema.fields()[7..].split_last().unwrap();
    assert!(data.iter().all(|f| f.is_nullable()));
    assert!(!sub.is_nullable());

    let meta = |name: &str| schema.field_with_name(name).unwrap().metadata().clone();
    let pg = |ty: &str, oid: &str| {
        HashMap::from([
            (PG_TYPE_KEY.to_owned(), ty.to_owned()),
            (PG_OID_KEY.into(), oid.into()),
        ])
    };
    assert_eq!(meta("i4"), pg("int4", "23"));
    let mut ints = pg("_int4", "1007");
    ints.insert(PG_DIMS_KEY.into(), "1".into());
    assert_eq!(meta("a"), ints);
    assert_eq!(meta("grid")[PG_DIMS_KEY], "2");
    assert_eq!(meta("cash")[PG_TYPE_KEY], "money");
    let mut money = pg("numeric", "1700");
    money.insert(PG_TYPMOD_KEY.into(), numeric_typmod(12, 2).to_string());
    assert_eq!(meta("money"), money);
    assert_eq!(
        meta("mood"),
        HashMap::from([(PG_OID_KEY.to_owned(), "70000".to_owned())])
    );
    assert_eq!(meta("u")["ARROW:extension:name"], "arrow.uuid");
    assert_eq!(meta("jb")["ARROW:extension:name"], "arrow.json");
    assert_eq!(meta("jb")[PG_TYPE_KEY], "jsonb");

    assert_eq!(batches.len(), 1);
    let got = &batches[0];
    assert_eq!(got.num_rows(), 3);
    let ops = got.column(0).as_string::<i32>();
    assert_eq!(
        [ops.value(0), ops.value(1), ops.value(2)],
        ["insert", "update", "delete"]
    );
    let lsns = got.column(1).as_primitive::<UInt64Type>();
    assert!(lsns.values().iter().all(|&l| l == 0x16_B374_D848));
    assert_eq!(
        got.column(2).as_primitive::<UInt32Type>().values(),
        &[0, 1, 2]
    );
    assert_eq!(
        got.column(3).as_primitive::<UInt32Type>().values(),
        &[771; 3]
    );
    assert_eq!(
        got.column(4)
            .as_primitive::<TimestampMicrosecondType>()
            .values(),
        &[
            1_709_210_096_000_000,
            1_709_210_096_000_001,
            1_709_210_096_000_002
        ]
    );
    let unchanged = got.column(6).as_list::<i32>();
    assert!(unchanged.is_null(0) && unchanged.is_null(2));
    let names = unchanged.value(1);
    let names = names.as_string::<i32>();
    assert_eq!(
        (0..names.len()).map(|i| names.value(i)).collect::<Vec<_>>(),
        [columns[10].name.as_str(), columns[14].name.as_str()]
    );
    let fingerprints = got.column(5).as_string::<i32>();
    assert!((0..3).all(|r| fingerprints.value(r) == fingerprint(&columns)));
    assert_eq!(fingerprint(&columns).len(), 16);

    // NaN and the numeric NaN are compared through their printed form.
    let mut expected = input.iter().map(|r| r.values.clone()).collect::<Vec<_>>();
    expected[1] = vec![Value::Null; columns.len()];
    expected[2][9] = Value::Numeric("NaN".into());
    // -infinity is written as the value DuckDB reads as -infinity.
    expected[2][17] = Value::Timestamp(i64::MIN + 1);
    for (c, column) in columns.iter().enumerate() {
        let kind = Kind::of(column);
        for (r, want) in expected.iter().enumerate() {
            let have = cell(got.column(7 + c), r, kind);
            assert_eq!(
                format!("{have:?}"),
                format!("{:?}", want[c]),
                "row {r} column {}",
                column.name
            );
        }
    }
}

#[test]
fn old_images_land_in_a_struct_beside_the_row() {
    let columns = every_type();
    let mut update = row(1, typical());
    update.old = Some(edges());
    let mut key_only = vec![Value::Null; columns.len()];
    key_only[2] = Value::Int4(7);
    let mut delete = row(2, key_only.clone());
    delete.old = Some(key_only);
    let mut output = batch(columns.clone(), vec![row(0, typical()), update, delete]);
    output.old_image = true;
    let files = encode(&output, &EncodeOptions::default()).unwrap();
    let (schema, batches) = read(&files[0].bytes);
    assert_eq!(schema.fields(), arrow_schema(&columns, true).fields());
    assert_eq!(schema.fields().last().unwrap().name(), OLD_COLUMN);
    let old = batches[0].column_by_name(OLD_COLUMN).unwrap().as_struct();
    assert!(old.is_null(0) && old.is_valid(1) && old.is_valid(2));
    for (c, column) in columns.iter().enumerate() {
        let kind = Kind::of(column);
        let have = cell(old.column(c).as_ref(), 1, kind);
        let want = match (c, &edges()[c]) {
            (9, _) => Value::Numeric("NaN".into()),
            (17, _) => Value::Timestamp(i64::MIN + 1),
            (_, v) => v.clone(),
        };
        assert_eq!(format!("{have:?}"), format!("{want:?}"), "{}", column.name);
    }
    assert_eq!(cell(old.column(2).as_ref(), 2, Kind::Int4), Value::Int4(7));
    assert_eq!(cell(old.column(3).as_ref(), 2, Kind::Int8), Value::Null);

    // An old image of the wrong width is refused like a row of the wrong width.
    let mut short = row(3, typical());
    short.old = Some(vec![Value::Null]);
    output.rows = vec![short];
    assert!(matches!(
        encode(&output, &EncodeOptions::default()),
        Err(EncodeError::Arity { values: 1, .. })
    ));
}

#[test]
fn files_carry_uuid_and_json_logical_types_and_zstd() {
    let columns = every_type();
    let files = encode(
        &batch(columns, vec![row(0, typical())]),
        &EncodeOptions::default(),
    )
    .unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(files[0].bytes.clone()).unwrap();
    let metadata = builder.metadata();
    let descr = metadata.file_metadata().schema_descr();
    let logical = |name: &str| {
        let i = descr
            .columns()
            .iter()
            .position(|c| c.path().string() == name)
            .unwrap();
        descr.column(i).logical_type_ref().cloned()
    };
    assert_eq!(logical("u"), Some(LogicalType::Uuid));
    assert_eq!(logical("j"), Some(LogicalType::Json));
    assert_eq!(logical("jb"), Some(LogicalType::Json));
    assert_eq!(logical("t"), Some(LogicalType::String));
    let chunk = metadata.row_group(0).column(0);
    assert!(matches!(chunk.compression(), Compression::ZSTD(_)));
    assert!(chunk.statistics().is_some());
}

#[test]
fn small_target_rolls_files_at_row_boundaries() {
    let columns = vec![col("id", oid::INT8, -1), col("note", oid::TEXT, -1)];
    let rows: Vec<OutputRow> = (0..1000u32)
        .map(|i| {
            row(
                i,
                vec![
                    Value::Int8(i64::from(i) * 3),
                    Value::Text(format!("row {i}")),
                ],
            )
        })
        .collect();
    let options = EncodeOptions {
        row_group_rows: 64,
        target_file_bytes: 1,
        compression: Codec::Zstd(1),
        ..EncodeOptions::default()
    };
    let files = encode(&batch(columns, rows), &options).unwrap();
    assert_eq!(files.len(), 16, "1000 rows in chunks of 64");

    let mut seen = Vec::new();
    for file in &files {
        let (_, batches) = read(&file.bytes);
        let rows_in_file: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert!(rows_in_file > 0);
        assert_eq!(
            file.rows, rows_in_file as u64,
            "the row count the encoder reports"
        );
        assert_eq!(file.schema, files[0].schema);
        for b in batches {
            let ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            let notes = b.column_by_name("note").unwrap().as_string::<i32>();
            for i in 0..b.num_rows() {
                let seq = b.column(2).as_primitive::<UInt32Type>().value(i);
                assert_eq!(ids.value(i), i64::from(seq) * 3);
                assert_eq!(notes.value(i), format!("row {seq}"));
                seen.push(seq);
            }
        }
    }
    assert_eq!(seen, (0..1000).collect::<Vec<_>>());
}

#[test]
fn large_target_keeps_one_file_with_row_groups() {
    let columns = vec![col("id", oid::INT4, -1)];
    let rows: Vec<OutputRow> = (0..10_000u32)
        .map(|i| row(i, vec![Value::Int4(i as i32)]))
        .collect();
    let options = EncodeOptions {
        row_group_rows: 3000,
        ..EncodeOptions::default()
    };
    let files = encode(&batch(columns, rows), &options).unwrap();
    assert_eq!(files.len(), 1);
    let builder = ParquetRecordBatchReaderBuilder::try_new(files[0].bytes.clone()).unwrap();
    let groups: Vec<i64> = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows())
        .collect();
    assert_eq!(groups, [3000, 3000, 3000, 1000]);
}

#[test]
fn empty_batch_writes_no_file() {
    let files = encode(&batch(every_type(), vec![]), &EncodeOptions::default()).unwrap();
    assert!(files.is_empty());
}

fn encode_error(columns: Vec<OutputColumn>, values: Vec<Value>) -> String {
    let mut rows = vec![row(0, columns.iter().map(|_| Value::Null).collect())];
    rows.push(row(5, values));
    let err = encode(&batch(columns, rows), &EncodeOptions::default()).unwrap_err();
    err.to_string()
}

#[test]
fn a_value_of_the_wrong_kind_names_output_column_and_change() {
    let message = encode_error(
        vec![col("id", oid::INT8, -1), col("qty", oid::INT4, -1)],
        vec![Value::Int8(1), Value::Text("12".into())],
    );
    assert_eq!(
        message,
        "output \"public.things\" column \"qty\" (int4): change at commit lsn 16/B374D848 seq 5: \
         expected a int4 value, got text (hint: rows must match the output's declared column types)"
    );
}

#[test]
fn numerics_that_do_not_fit_their_decimal_are_refused() {
    let money = || vec![col("price", oid::NUMERIC, numeric_typmod(12, 2))];
    let message = encode_error(money(), vec![Value::Numeric("NaN".into())]);
    assert!(
        message.contains("column \"price\" (numeric(12,2))"),
        "{message}"
    );
    assert!(
        message.contains("NaN has no decimal representation"),
        "{message}"
    );
    let message = encode_error(money(), vec![Value::Numeric("1.234".into())]);
    assert!(
        message.contains("\"1.234\" does not fit numeric(12,2)"),
        "{message}"
    );
    let message = encode_error(money(), vec![Value::Numeric("12345678901".into())]);
    assert!(message.contains("does not fit numeric(12,2)"), "{message}");
    let message = encode_error(money(), vec![Value::Float8(1.0)]);
    assert!(
        message.contains("expected a numeric value, got float8"),
        "{message}"
    );
}

#[test]
fn oids_out_of_range_and_wrong_arity_are_refused() {
    let message = encode_error(vec![col("o", oid::OID, -1)], vec![Value::Int8(-1)]);
    assert!(message.contains("oid -1 out of range"), "{message}");

    let columns: Vec<OutputColumn> = vec![col("a", oid::INT4, -1), col("b", oid::INT4, -1)];
    let err = encode(
        &batch(columns, vec![row(3, vec![Value::Int4(1)])]),
        &EncodeOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "output \"public.things\": change at commit lsn 16/B374D848 seq 3 has 1 values for 2 columns"
    );
}

#[test]
fn invalid_options_are_refused() {
    let zero = EncodeOptions {
        row_group_rows: 0,
        ..EncodeOptions::default()
    };
    assert!(matches!(Encoder::new(&zero), Err(EncodeError::Options(_))));
    let level = EncodeOptions {
        compression: Codec::Zstd(99),
        ..EncodeOptions::default()
    };
    assert!(
        Encoder::new(&level)
            .unwrap_err()
            .to_string()
            .contains("zstd level 99")
    );
}

/// `cargo test --release -p tributary --lib encode::tests::throughput -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check; run in release"]
fn throughput() {
    let columns = vec![
        col("id", oid::INT8, -1),
        col("body", oid::TEXT, -1),
        col("at", oid::TIMESTAMPTZ, -1),
        col("amount", oid::NUMERIC, numeric_typmod(12, 2)),
    ];
    let n = 1_000_000u32;
    let rows: Vec<OutputRow> = (0..n)
        .map(|i| {
            let body = format!(
                "{i:08} the quick brown fox jumps over the lazy dog {}",
                "x".repeat(i as usize % 40)
            );
            row(
                i,
                vec![
                    Value::Int8(i64::from(i)),
                    Value::Text(body),
                    Value::TimestampTz(1_700_000_000_000_000 + i64::from(i) * 1000),
                    Value::Numeric(format!("{}.{:02}", i % 100_000, i % 100)),
                ],
            )
        })
        .collect();
    let batch = batch(columns, rows);
    // Each codec three times, interleaved: the fastest of each is the figure.
    let codecs = [
        Codec::Zstd(1),
        Codec::Zstd(3),
        Codec::Snappy,
        Codec::Uncompressed,
    ];
    let mut best = vec![(std::time::Duration::MAX, 0usize); codecs.len()];
    for _ in 0..3 {
        for (i, &compression) in codecs.iter().enumerate() {
            let options = EncodeOptions {
                compression,
                ..EncodeOptions::default()
            };
            let encoder = Encoder::new(&options).unwrap();
            let start = Instant::now();
            let files = encoder.encode(&batch).unwrap();
            let elapsed = start.elapsed();
            let bytes = files.iter().map(|f| f.bytes.len()).sum();
            best[i] = (best[i].0.min(elapsed), bytes);
        }
    }
    for (codec, (elapsed, bytes)) in codecs.iter().zip(best) {
        println!(
            "{codec:?}: encoded {n} rows in {elapsed:?}: {:.0} rows/s, {bytes} bytes",
            f64::from(n) / elapsed.as_secs_f64(),
        );
    }
}
