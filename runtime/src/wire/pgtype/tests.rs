use super::*;

fn decode(type_oid: u32, text: &str) -> Result<Value, ValueError> {
    decode_text(&ColumnType::builtin(type_oid, -1), text.as_bytes())
}

fn ok(type_oid: u32, text: &str) -> Value {
    decode(type_oid, text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn names_of_scalars_and_arrays() {
    assert_eq!(type_name(oid::INT4), Some("int4"));
    assert_eq!(type_name(oid::TIMESTAMPTZ), Some("timestamptz"));
    assert_eq!(type_name(oid::INT4_ARRAY), Some("_int4"));
    assert_eq!(type_name(oid::TEXT_ARRAY), Some("_text"));
    assert_eq!(type_name(oid::JSONB_ARRAY), Some("_jsonb"));
    assert_eq!(type_name(16_384), None);
    assert_eq!(array_element(1007), Some(23));
    assert_eq!(array_element(oid::UUID_ARRAY), Some(oid::UUID));
    assert_eq!(array_element(oid::UUID), None);
}

#[test]
fn booleans() {
    assert_eq!(ok(oid::BOOL, "t"), Value::Bool(true));
    assert_eq!(ok(oid::BOOL, "f"), Value::Bool(false));
    assert!(decode(oid::BOOL, "true").is_err());
}

#[test]
fn integers_at_their_limits() {
    assert_eq!(ok(oid::INT2, "-32768"), Value::Int2(i16::MIN));
    assert_eq!(ok(oid::INT2, "32767"), Value::Int2(i16::MAX));
    assert!(decode(oid::INT2, "32768").is_err());
    assert_eq!(ok(oid::INT4, "-2147483648"), Value::Int4(i32::MIN));
    assert_eq!(ok(oid::INT4, "0"), Value::Int4(0));
    assert_eq!(ok(oid::INT8, "-9223372036854775808"), Value::Int8(i64::MIN));
    assert_eq!(ok(oid::INT8, "9223372036854775807"), Value::Int8(i64::MAX));
    assert!(decode(oid::INT8, "9223372036854775808").is_err());
    assert_eq!(ok(oid::OID, "4294967295"), Value::Int8(4_294_967_295));
    assert!(decode(oid::OID, "4294967296").is_err());
    assert!(decode(oid::OID, "-1").is_err());
    for bad in ["", "-", "1.0", "1e3", " 1", "0x10", "١"] {
        assert!(decode(oid::INT4, bad).is_err(), "{bad:?}");
    }
}

#[test]
fn floats_including_special_values() {
    assert_eq!(ok(oid::FLOAT8, "1.5"), Value::Float8(1.5));
    assert_eq!(ok(oid::FLOAT8, "-0"), Value::Float8(-0.0));
    assert_eq!(
        ok(oid::FLOAT8, "1.7976931348623157e+308"),
        Value::Float8(f64::MAX)
    );
    assert_eq!(ok(oid::FLOAT8, "5e-324"), Value::Float8(5e-324));
    assert_eq!(ok(oid::FLOAT8, "Infinity"), Value::Float8(f64::INFINITY));
    assert_eq!(
        ok(oid::FLOAT8, "-Infinity"),
        Value::Float8(f64::NEG_INFINITY)
    );
    assert!(matches!(ok(oid::FLOAT8, "NaN"), Value::Float8(f) if f.is_nan()));
    assert_eq!(ok(oid::FLOAT4, "0.1"), Value::Float4(0.1));
    assert_eq!(ok(oid::FLOAT4, "3.4028235e+38"), Value::Float4(f32::MAX));
    assert!(matches!(ok(oid::FLOAT4, "NaN"), Value::Float4(f) if f.is_nan()));
    for bad in ["", "inf", "nan", "infinity", "1.5.2", "abc"] {
        assert!(decode(oid::FLOAT8, bad).is_err(), "{bad:?}");
    }
}

#[test]
fn numerics_keep_their_exact_text() {
    for text in [
        "0",
        "-12.340",
        "123456789012345678901234567890.000001",
        "NaN",
        "Infinity",
    ] {
        assert_eq!(ok(oid::NUMERIC, text), Value::Numeric(text.to_owned()));
    }
    for bad in ["", "-", "1.", ".5", "1e5", "1,5", "+1"] {
        assert!(decode(oid::NUMERIC, bad).is_err(), "{bad:?}");
    }
}

#[test]
fn text_types() {
    for type_oid in [oid::TEXT, oid::VARCHAR, oid::BPCHAR, oid::NAME] {
        assert_eq!(ok(type_oid, "héllo ✓"), Value::Text("héllo ✓".into()));
        assert_eq!(ok(type_oid, ""), Value::Text(String::new()));
    }
    let err = decode_text(&ColumnType::builtin(oid::TEXT, -1), b"\xff\xfe").unwrap_err();
    assert_eq!(err.reason, "not valid UTF-8");
}

#[test]
fn bytea_in_hex() {
    assert_eq!(ok(oid::BYTEA, "\\x"), Value::Bytea(vec![]));
    assert_eq!(
        ok(oid::BYTEA, "\\x00ff7Fab"),
        Value::Bytea(vec![0, 0xff, 0x7f, 0xab])
    );
    for bad in ["\\x0", "\\xzz", "00ff", "\\000"] {
        assert!(decode(oid::BYTEA, bad).is_err(), "{bad:?}");
    }
}

#[test]
fn dates_times_and_timestamps() {
    assert_eq!(ok(oid::DATE, "2024-02-29"), Value::Date(19_782));
    assert_eq!(ok(oid::DATE, "0001-12-31 BC"), Value::Date(-719_163));
    assert_eq!(ok(oid::DATE, "-infinity"), Value::Date(i32::MIN));
    assert_eq!(ok(oid::TIME, "12:00:00.25"), Value::Time(43_200_250_000));
    assert_eq!(
        ok(oid::TIMESTAMP, "1970-01-01 00:00:01.000001"),
        Value::Timestamp(1_000_001)
    );
    assert_eq!(
        ok(oid::TIMESTAMPTZ, "1970-01-01 05:30:00+05:30"),
        Value::TimestampTz(0)
    );
    assert_eq!(
        ok(oid::TIMESTAMPTZ, "infinity"),
        Value::TimestampTz(i64::MAX)
    );
    let err = decode(oid::TIMESTAMP, "294276-12-31 23:59:59.999999").unwrap_err();
    assert!(err.reason.contains("out of range"), "{err}");
    assert_eq!(
        ok(oid::TIMETZ, "12:00:00+02"),
        Value::TimeTz {
            micros: 12 * 3_600_000_000,
            offset: 7200
        }
    );
    assert_eq!(
        ok(oid::TIMETZ, "23:59:59.999999-05:30:15"),
        Value::TimeTz {
            micros: 86_400_000_000 - 1,
            offset: -(5 * 3600 + 30 * 60 + 15)
        }
    );
    assert!(decode(oid::TIMETZ, "12:00:00").is_err());
}

#[test]
fn intervals() {
    assert_eq!(
        ok(oid::INTERVAL, "1 year 2 mons 3 days 04:05:06.5"),
        Value::Interval {
            months: 14,
            days: 3,
            micros: 14_706_500_000
        }
    );
    assert_eq!(
        ok(oid::INTERVAL, "-1 days +02:03:00"),
        Value::Interval {
            months: 0,
            days: -1,
            micros: 7_380_000_000
        }
    );
    assert_eq!(
        ok(oid::INTERVAL, "00:00:00"),
        Value::Interval {
            months: 0,
            days: 0,
            micros: 0
        }
    );
}

#[test]
fn uuids() {
    let expected = [
        0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a,
        0x11,
    ];
    assert_eq!(
        ok(oid::UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        Value::Uuid(expected)
    );
    assert_eq!(
        ok(oid::UUID, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
        Value::Uuid(expected)
    );
    for bad in [
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380-11",
    ] {
        assert!(decode(oid::UUID, bad).is_err(), "{bad:?}");
    }
}

#[test]
fn json_network_money_and_other_types() {
    assert_eq!(
        ok(oid::JSON, r#"{"a": [1, 2]}"#),
        Value::Json(r#"{"a": [1, 2]}"#.into())
    );
    assert_eq!(
        ok(oid::JSONB, r#"{"a": [1, 2]}"#),
        Value::Json(r#"{"a": [1, 2]}"#.into())
    );
    assert_eq!(
        ok(oid::INET, "10.0.0.1/8"),
        Value::Text("10.0.0.1/8".into())
    );
    assert_eq!(
        ok(oid::MONEY, "$1,234.56"),
        Value::Numeric("1234.56".into())
    );
    assert_eq!(ok(oid::MONEY, "-$0.05"), Value::Numeric("-0.05".into()));
    assert_eq!(
        ok(oid::MONEY, "-$92,233,720,368,547,758.08"),
        Value::Numeric("-92233720368547758.08".into())
    );
    assert!(decode(oid::MONEY, "$").is_err());
    assert_eq!(ok(70_000, "happy"), Value::Other("happy".into()));
    assert_eq!(ok(oid::POINT, "(1,2)"), Value::Other("(1,2)".into()));
}

#[test]
fn arrays_decode_their_elements() {
    let ints =
        |dims: Vec<u32>, elements: Vec<Value>| Value::Array(Box::new(Array { dims, elements }));
    assert_eq!(
        ok(oid::INT4_ARRAY, "{1,2,NULL}"),
        ints(vec![3], vec![Value::Int4(1), Value::Int4(2), Value::Null])
    );
    assert_eq!(
        ok(oid::TEXT_ARRAY, r#"{"a b",c,"NULL",""}"#),
        ints(
            vec![4],
            ["a b", "c", "NULL", ""]
                .into_iter()
                .map(|s| Value::Text(s.into()))
                .collect()
        )
    );
    assert_eq!(
        ok(oid::INT8_ARRAY, "{{1,2},{3,4}}"),
        ints(vec![2, 2], (1..=4).map(Value::Int8).collect())
    );
    assert_eq!(ok(oid::DATE_ARRAY, "{}"), ints(vec![], vec![]));
    assert_eq!(
        ok(oid::POINT_ARRAY, r#"{"(1,2)","(3,4)"}"#),
        ints(
            vec![2],
            vec![Value::Other("(1,2)".into()), Value::Other("(3,4)".into())]
        )
    );
    let err = decode(oid::INT4_ARRAY, "{1,x}").unwrap_err();
    assert_eq!(err.type_name, "_int4");
    assert!(err.reason.contains("integer"), "{err}");
}

#[test]
fn binary_values_decode_like_their_text() {
    let binary = |type_oid: u32, bytes: &[u8]| {
        decode_binary(&ColumnType::builtin(type_oid, -1), bytes).unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(binary(oid::INT4, &7i32.to_be_bytes()), ok(oid::INT4, "7"));
    assert_eq!(
        binary(oid::MONEY, &(-123_456i64).to_be_bytes()),
        ok(oid::MONEY, "-$1,234.56")
    );
    assert_eq!(
        binary(oid::MONEY, &5i64.to_be_bytes()),
        ok(oid::MONEY, "$0.05")
    );
    assert_eq!(binary(oid::JSONB, b"\x01{}"), ok(oid::JSONB, "{}"));
    let mut array = Vec::new();
    for n in [1i32, 1, oid::TEXT as i32, 2, 1] {
        array.extend(n.to_be_bytes());
    }
    array.extend(1i32.to_be_bytes());
    array.extend(b"a");
    array.extend((-1i32).to_be_bytes());
    assert_eq!(
        binary(oid::TEXT_ARRAY, &array),
        ok(oid::TEXT_ARRAY, "{a,NULL}")
    );
    let err = decode_binary(&ColumnType::builtin(oid::POINT, -1), &[0; 16]).unwrap_err();
    assert!(err.reason.contains("source.binary = false"), "{err}");
    assert_eq!(err.text, format!("\\x{}", "00".repeat(16)));
}

#[test]
fn errors_name_the_type_and_quote_a_bounded_text() {
    let err = decode(oid::INT4, "twelve").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"cannot read "twelve" as int4: expected an integer in range"#
    );

    let long = "ü".repeat(1000);
    let err = decode(oid::DATE, &long).unwrap_err();
    assert_eq!(err.type_name, "date");
    assert_eq!(err.text, format!("{}...", "ü".repeat(64)));

    let err = decode_text(&ColumnType::builtin(99_999, -1), b"\xff").unwrap_err();
    assert_eq!(err.type_name, "type with oid 99999");
}

#[test]
fn malformed_input_never_panics() {
    let samples: &[&[u8]] = &[
        b"",
        b"-",
        b"+",
        b":",
        b"::",
        b" ",
        b"  ",
        b"\\x",
        b"\\",
        b"-infinity ",
        b"9999999999",
        b"2024-02-30 25:61:61",
        b"1 2 3",
        b"- days",
        b"1 days -",
        b"\xff\xff",
        b"0000-00-00",
        b"2024-01-01 00:00:00+99:99",
        b"99999999999999999999 years",
    ];
    for &(scalar, _, array) in oid::SCALARS {
        for text in samples {
            for ty in [
                ColumnType::builtin(scalar, -1),
                ColumnType::builtin(array, -1),
            ] {
                let _ = decode_text(&ty, text);
                let _ = decode_binary(&ty, text);
            }
        }
    }
}
