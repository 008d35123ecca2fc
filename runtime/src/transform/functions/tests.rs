//! Each function against known vectors, nulls, and the errors a plugin author meets.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, BinaryArray, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::Functions;
use crate::transform::columnar::{ipc_bytes, read_ipc};
use crate::transform::host::wit::functions as fw;

const LIMIT: usize = 64 << 20;

fn stream(columns: Vec<(&str, ArrayRef)>) -> Vec<u8> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    ipc_bytes(&RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()).unwrap()
}

fn text(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

fn step(input: &str, operation: fw::Operation, output: &str) -> fw::Step {
    fw::Step {
        input: input.into(),
        operation,
        output: output.into(),
    }
}

fn hex_digest(prefix: &[u8], keep: u8, text: &str) -> fw::Digest {
    fw::Digest {
        prefix: prefix.to_vec(),
        keep,
        encoding: fw::Encoding::Hex(text.into()),
    }
}

/// The columns `steps` make of `columns`, as text (None for null), by output name.
fn apply(
    columns: Vec<(&str, ArrayRef)>,
    steps: Vec<fw::Step>,
) -> Result<Vec<Vec<Option<String>>>, String> {
    let applied = Functions::default().apply(&stream(columns), &steps, LIMIT)?;
    let record = read_ipc(&applied.columns).unwrap();
    assert_eq!(record.num_columns(), steps.len());
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(record.schema().field(i).name(), &step.output);
        let column = record.column(i);
        let values: Vec<Option<String>> = match column.data_type() {
            DataType::Utf8 => column
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_owned))
                .collect(),
            DataType::Binary => column
                .as_binary::<i32>()
                .iter()
                .map(|v| v.map(|b| b.iter().map(|x| format!("{x:02x}")).collect()))
                .collect(),
            other => panic!("unexpected type {other}"),
        };
        let not_null = values.iter().filter(|v| v.is_some()).count() as u64;
        assert_eq!(applied.computed[i], not_null, "computed of step {i}");
        out.push(values);
    }
    Ok(out)
}

fn one(column: ArrayRef, operation: fw::Operation) -> Result<Vec<Option<String>>, String> {
    apply(vec![("c", column)], vec![step("c", operation, "out")]).map(|mut v| v.remove(0))
}

fn texts(values: &[Option<&str>]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_owned)).collect()
}

#[test]
fn sha256_matches_the_fips_vectors() {
    let out = one(
        text(&[
            Some("abc"),
            Some(""),
            Some("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
        ]),
        fw::Operation::Sha256(hex_digest(b"", 0, "")),
    )
    .unwrap();
    assert_eq!(
        out,
        texts(&[
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            Some("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            Some("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ])
    );
}

#[test]
fn sha256_with_a_prefix_and_kept_bytes_is_the_mask_digest() {
    // What every mask plugin lands: `sha256:` and the first 8 bytes of SHA-256(salt, 0, text)
    // (`printf 's\0a@x' | sha256sum`).
    let out = one(
        text(&[Some("a@x"), None]),
        fw::Operation::Sha256(hex_digest(b"s\0", 8, "sha256:")),
    )
    .unwrap();
    assert_eq!(out, texts(&[Some("sha256:6ea2e2f114e1ffff"), None]));
}

#[test]
fn sha256_of_binary_values_and_as_binary() {
    let bytes: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"abc"[..]), None]));
    let digest = fw::Digest {
        prefix: Vec::new(),
        keep: 4,
        encoding: fw::Encoding::Binary,
    };
    let out = one(bytes, fw::Operation::Sha256(digest)).unwrap();
    assert_eq!(out, texts(&[Some("ba7816bf"), None]));
}

/// RFC 4231, section 4: the HMAC-SHA-256 result of each test case.
#[test]
fn hmac_sha256_matches_rfc_4231() {
    let long_key = vec![0xaa; 131];
    let cases: Vec<(Vec<u8>, Vec<u8>, &str)> = vec![
        (
            vec![0x0b; 20],
            b"Hi There".to_vec(),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        ),
        (
            b"Jefe".to_vec(),
            b"what do ya want for nothing?".to_vec(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        ),
        (
            vec![0xaa; 20],
            vec![0xdd; 50],
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
        ),
        (
            (1..=25).collect(),
            vec![0xcd; 50],
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
        ),
        // Test case 5 is a truncation to 128 bits: 16 bytes kept.
        (
            vec![0x0c; 20],
            b"Test With Truncation".to_vec(),
            "a3b6167473100ee06e0c796c2955552b",
        ),
        (
            long_key.clone(),
            b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        ),
        (
            long_key,
            b"This is a test using a larger than block-size key and a larger than \
                     block-size data. The key needs to be hashed before being used by the HMAC \
                     algorithm."
                .to_vec(),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        ),
    ];
    for (n, (key, data, want)) in cases.into_iter().enumerate() {
        let keep = (want.len() / 2) as u8;
        let bytes: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&data[..])]));
        let keyed = fw::Keyed {
            key,
            digest: hex_digest(b"", keep, ""),
        };
        let out = one(bytes, fw::Operation::HmacSha256(keyed)).unwrap();
        assert_eq!(out, texts(&[Some(want)]), "test case {}", n + 1);
    }
}

#[test]
fn hmac_sha256_hashes_the_prefix_as_part_of_the_message() {
    // "Hi There" split into a prefix and text values, nulls staying null.
    let keyed = fw::Keyed {
        key: vec![0x0b; 20],
        digest: hex_digest(b"Hi ", 0, "mac:"),
    };
    let out = one(
        text(&[Some("There"), None]),
        fw::Operation::HmacSha256(keyed),
    )
    .unwrap();
    assert_eq!(
        out,
        texts(&[
            Some("mac:b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            None
        ])
    );
}

#[test]
fn replace_case_and_truncate() {
    let column = text(&[
        Some("Call 555-1234 or 555-9876"),
        None,
        Some("ÉCOLE Straße"),
    ]);
    let replace = fw::Operation::Replace(fw::Replace {
        pattern: r"(\d{3})-\d{4}".into(),
        replacement: "$1-XXXX".into(),
    });
    let out = apply(
        vec![("c", column)],
        vec![
            step("c", replace, "redacted"),
            step("c", fw::Operation::Lowercase, "lower"),
            step("c", fw::Operation::Uppercase, "upper"),
            // Characters, not bytes: É and ß are two bytes each.
            step("c", fw::Operation::Truncate(2), "short"),
            // An earlier step's output is an input too.
            step("lower", fw::Operation::Truncate(100), "whole"),
        ],
    )
    .unwrap();
    assert_eq!(
        out[0],
        texts(&[
            Some("Call 555-XXXX or 555-XXXX"),
            None,
            Some("ÉCOLE Straße")
        ])
    );
    assert_eq!(
        out[1],
        texts(&[
            Some("call 555-1234 or 555-9876"),
            None,
            Some("école straße")
        ])
    );
    assert_eq!(
        out[2],
        texts(&[
            Some("CALL 555-1234 OR 555-9876"),
            None,
            Some("ÉCOLE STRASSE")
        ])
    );
    assert_eq!(out[3], texts(&[Some("Ca"), None, Some("ÉC")]));
    assert_eq!(out[4], out[1]);
}

#[test]
fn truncate_keeps_whole_characters() {
    let out = one(
        text(&[Some("a😀b"), Some("日本語"), Some("")]),
        fw::Operation::Truncate(2),
    )
    .unwrap();
    assert_eq!(out, texts(&[Some("a😀"), Some("日本"), Some("")]));
    let out = one(text(&[Some("abc")]), fw::Operation::Truncate(0)).unwrap();
    assert_eq!(out, texts(&[Some("")]));
}

#[test]
fn json_path_extracts_strings_as_text_and_the_rest_as_json() {
    let docs = text(&[
        Some(r#"{"a": {"b": ["x", {"c": 7}]}, "name": "Ann", "k.y": true}"#),
        Some(r#"{"a": {"b": []}}"#),
        Some(r#"{"a": null}"#),
        None,
    ]);
    let path = |p: &str| fw::Operation::JsonPath(p.into());
    let out = apply(
        vec![("doc", docs)],
        vec![
            step("doc", path("$.a.b[0]"), "first"),
            step("doc", path("$.a.b[1].c"), "c"),
            step("doc", path("$.a.b[-1]"), "last"),
            step("doc", path(r#"$["k.y"]"#), "quoted"),
            step("doc", path("$.a"), "a"),
            step("doc", path("$.name"), "name"),
        ],
    )
    .unwrap();
    assert_eq!(out[0], texts(&[Some("x"), None, None, None]));
    assert_eq!(out[1], texts(&[Some("7"), None, None, None]));
    assert_eq!(out[2], texts(&[Some(r#"{"c":7}"#), None, None, None]));
    assert_eq!(out[3], texts(&[Some("true"), None, None, None]));
    assert_eq!(
        out[4],
        texts(&[
            Some(r#"{"b":["x",{"c":7}]}"#),
            Some(r#"{"b":[]}"#),
            None,
            None
        ])
    );
    assert_eq!(out[5], texts(&[Some("Ann"), None, None, None]));
}

#[test]
fn no_steps_make_an_empty_stream_of_the_same_rows() {
    let applied = Functions::default()
        .apply(
            &stream(vec![("c", text(&[Some("a"), Some("b")]))]),
            &[],
            LIMIT,
        )
        .unwrap();
    let record = read_ipc(&applied.columns).unwrap();
    assert_eq!((record.num_rows(), record.num_columns()), (2, 0));
}

fn error(columns: Vec<(&str, ArrayRef)>, steps: Vec<fw::Step>) -> String {
    apply(columns, steps).unwrap_err()
}

#[test]
fn a_bad_pattern_is_refused_naming_it_and_the_syntax() {
    let replace = fw::Operation::Replace(fw::Replace {
        pattern: "(unclosed".into(),
        replacement: "".into(),
    });
    let e = error(
        vec![("note", text(&[Some("x")]))],
        vec![step("note", replace, "note")],
    );
    assert!(e.starts_with("step 1 (replace of column \"note\" into \"note\"): the pattern \"(unclosed\" is not a usable regular expression"), "{e}");
    assert!(e.contains("syntax of Rust's regex crate"), "{e}");
    // A pattern that compiles too large is refused, not built.
    let huge = fw::Operation::Replace(fw::Replace {
        pattern: r"\w{1000}{1000}".into(),
        replacement: "".into(),
    });
    let e = error(
        vec![("note", text(&[Some("x")]))],
        vec![step("note", huge, "note")],
    );
    assert!(e.contains("keep it within 1024 KiB compiled"), "{e}");
}

#[test]
fn a_bad_json_path_or_value_is_refused_saying_what_to_write() {
    for (path, says) in [
        ("a.b", "it does not start with `$` at character 0"),
        ("$.a[", "an unclosed `[` at character 3"),
        ("$..a", "expected a member name after `.` at character 2"),
        (
            "$[*]",
            "expected a quoted name or an integer index inside `[]`",
        ),
        ("$a", "expected `.` or `[` at character 1"),
    ] {
        let e = error(
            vec![("doc", text(&[Some("{}")]))],
            vec![step("doc", fw::Operation::JsonPath(path.into()), "out")],
        );
        assert!(
            e.contains(&format!("the JSON path {path:?} does not parse: {says}")),
            "{e}"
        );
        assert!(e.contains("write a path like $.a.b[0]"), "{e}");
    }
    let e = error(
        vec![("doc", text(&[Some("{}"), Some("not json")]))],
        vec![step("doc", fw::Operation::JsonPath("$.a".into()), "out")],
    );
    assert!(
        e.contains(
            "step 1 (json-path of column \"doc\" into \"out\"): row 1: the value is not JSON"
        ),
        "{e}"
    );
    assert!(
        e.contains("apply json-path to a json or jsonb column"),
        "{e}"
    );
}

#[test]
fn a_column_of_another_type_is_refused_naming_it_and_the_types_it_takes() {
    let ints: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
    let e = error(
        vec![("id", ints.clone())],
        vec![step("id", fw::Operation::Lowercase, "id")],
    );
    assert!(e.contains("step 1 (lowercase of column \"id\" into \"id\"): the column is Int32, but lowercase takes text (Utf8)"), "{e}");
    let e = error(
        vec![("id", ints)],
        vec![step(
            "id",
            fw::Operation::Sha256(hex_digest(b"", 0, "")),
            "h",
        )],
    );
    assert!(
        e.contains("the column is Int32, but a digest takes text (Utf8) or bytes (Binary)"),
        "{e}"
    );
    let bytes: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"x"[..])]));
    let e = error(
        vec![("b", bytes)],
        vec![step("b", fw::Operation::Truncate(1), "b")],
    );
    assert!(
        e.contains("the column is Binary, but truncate takes text (Utf8)"),
        "{e}"
    );
}

#[test]
fn a_missing_column_a_repeated_output_and_a_bad_keep_are_refused() {
    let columns = || vec![("email", text(&[Some("x")]))];
    let e = error(columns(), vec![step("mail", fw::Operation::Lowercase, "m")]);
    assert!(
        e.contains(
            "no column of that name in the stream or made by an earlier step (there are: email)"
        ),
        "{e}"
    );
    let e = error(
        columns(),
        vec![
            step("email", fw::Operation::Lowercase, "m"),
            step("email", fw::Operation::Uppercase, "m"),
        ],
    );
    assert!(e.contains("step 2 (uppercase of column \"email\" into \"m\"): step 1 already makes a column of that name"), "{e}");
    let e = error(
        columns(),
        vec![step(
            "email",
            fw::Operation::Sha256(hex_digest(b"", 33, "")),
            "h",
        )],
    );
    assert!(
        e.contains("keep is 33, but a SHA-256 digest has 32 bytes"),
        "{e}"
    );
    let e = Functions::default()
        .apply(b"not arrow", &[], LIMIT)
        .unwrap_err();
    assert!(
        e.starts_with("the rows given to apply are not an Arrow IPC stream"),
        "{e}"
    );
}

#[test]
fn a_result_larger_than_the_memory_limit_is_refused() {
    let rows = stream(vec![("c", text(&[Some("aaaa"); 100]))]);
    let replace = fw::Operation::Replace(fw::Replace {
        pattern: "a".into(),
        replacement: "bbbbbbbbbb".into(),
    });
    let e = Functions::default()
        .apply(&rows, &[step("c", replace, "c")], 1000)
        .unwrap_err();
    assert!(
        e.contains("its result would take more than the plugin's memory limit of 1000 bytes"),
        "{e}"
    );
    // One value whose replacements multiply it is given up before it is whole.
    let rows = stream(vec![("c", text(&[Some(&"a".repeat(10_000))]))]);
    let replace = fw::Operation::Replace(fw::Replace {
        pattern: "a".into(),
        replacement: "b".repeat(1000),
    });
    let e = Functions::default()
        .apply(&rows, &[step("c", replace, "c")], 100_000)
        .unwrap_err();
    assert!(
        e.contains("row 0: its result would take more than the plugin's memory limit of 100000"),
        "{e}"
    );
}
