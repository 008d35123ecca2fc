//! Every supported type, with its edge values, decodes the same from the text and the binary
//! form, and lands the same through a text and a binary pipeline, and through trigger capture.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary::source::catalog::Catalog;
use tributary::wire::pgtype::{decode_binary, decode_text};
use tributary_tests::lake::{LandedRow, read_independently, read_output};
use tributary_tests::pipeline::{RunningPipeline, config};
use tributary_tests::{fresh_database, s3, unique_name};

/// Types the tests create next to the built-in ones.
const USER_TYPES: &str = "
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'ünïcode');
    CREATE DOMAIN email AS varchar(40);
    CREATE DOMAIN positive AS int CHECK (VALUE > 0);
    CREATE DOMAIN amounts AS numeric(12, 2)[];
    CREATE TYPE pair AS (a int, b text);
";

/// (type, value as SQL, array dimensions of the type) for every supported type at its edges.
const CASES: &[(&str, &str, i32)] = &[
    ("bool", "true", 0),
    ("bool", "false", 0),
    ("int2", "-32768", 0),
    ("int2", "32767", 0),
    ("int4", "-2147483648", 0),
    ("int8", "-9223372036854775808", 0),
    ("int8", "9223372036854775807", 0),
    ("oid", "4294967295", 0),
    ("float4", "'NaN'", 0),
    ("float4", "'-Infinity'", 0),
    ("float4", "1.17549435e-38", 0),
    ("float4", "3.4028235e38", 0),
    ("float8", "'Infinity'", 0),
    ("float8", "'-0'", 0),
    ("float8", "0.1", 0),
    ("float8", "1e308", 0),
    ("float8", "4.9e-324", 0),
    ("numeric", "'NaN'", 0),
    ("numeric", "'Infinity'", 0),
    ("numeric", "'-Infinity'", 0),
    ("numeric", "0", 0),
    ("numeric", "0.000", 0),
    ("numeric", "-123456789012345678901234567890.123456789", 0),
    ("numeric", "1e-20", 0),
    ("numeric", "10000", 0),
    ("numeric", "0.0001", 0),
    ("numeric(10,2)", "12.5", 0),
    (
        "numeric(50,10)",
        "-1234567890123456789012345678901234567890.0000000001",
        0,
    ),
    ("money", "'-92233720368547758.08'", 0),
    ("money", "'92233720368547758.07'", 0),
    ("money", "0.05", 0),
    ("text", "''", 0),
    ("text", "'ü日本 ✓ 🦀 \"quoted\" \\ back'", 0),
    ("varchar(5)", "'ab'", 0),
    ("char(5)", "'ab'", 0),
    ("name", "'pg_class'", 0),
    ("xml", "'<a>1</a>'", 0),
    ("bytea", "'\\x00ff10'", 0),
    ("bytea", "''", 0),
    ("date", "'infinity'", 0),
    ("date", "'-infinity'", 0),
    ("date", "'4713-01-01 BC'", 0),
    ("date", "'5874897-12-31'", 0),
    ("date", "'2024-02-29'", 0),
    ("time", "'24:00:00'", 0),
    ("time", "'00:00:00.000001'", 0),
    ("timetz", "'23:59:59.999999-15:59'", 0),
    ("timetz", "'00:00+05:30'", 0),
    ("timestamp", "'infinity'", 0),
    ("timestamp", "'4713-01-01 00:00:00 BC'", 0),
    ("timestamp", "'2000-01-01 00:00:00.000001'", 0),
    ("timestamp", "'294246-12-31 23:59:59.999999'", 0),
    ("timestamptz", "'-infinity'", 0),
    ("timestamptz", "'1999-12-31 23:59:59.999999+14'", 0),
    ("timestamptz", "'0044-03-15 12:00:00+00 BC'", 0),
    ("interval", "'-178000000 years'", 0),
    ("interval", "'1 mon -1 day 00:00:00.000001'", 0),
    ("interval", "'-00:00:00.000001'", 0),
    ("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", 0),
    ("json", "'{\"a\": [1, 2.50, \"x\"],  \"a\": 1}'", 0),
    (
        "jsonb",
        "'{\"b\": [1, 2.50], \"a\": null, \"c\": \"ü\"}'",
        0,
    ),
    ("inet", "'192.168.0.1'", 0),
    ("inet", "'192.168.0.1/24'", 0),
    ("inet", "'::ffff:1.2.3.4'", 0),
    ("inet", "'::1.2.3.4'", 0),
    ("inet", "'::1'", 0),
    ("inet", "'::'", 0),
    ("inet", "'2001:db8:0:0:1:0:0:1/64'", 0),
    ("inet", "'fe80::1:0:0:0'", 0),
    ("cidr", "'10.0.0.0/8'", 0),
    ("cidr", "'2001:db8::/32'", 0),
    ("macaddr", "'08:00:2b:01:02:03'", 0),
    ("macaddr8", "'08:00:2b:01:02:03:04:05'", 0),
    ("mood", "'ünïcode'", 0),
    ("email", "'a@b.c'", 0),
    ("positive", "7", 0),
    ("amounts", "'{1.50,NULL}'", 0),
    ("int4[]", "'{1,NULL,3}'", 1),
    ("int4[]", "'{}'", 1),
    ("int4[]", "'[0:1]={5,6}'", 1),
    ("int8[][]", "'{{1,2},{3,4}}'", 2),
    ("text[]", "ARRAY['a b', '', NULL, 'NULL', 'q\"\\', '{}']", 1),
    ("numeric[]", "'{1.50,NaN,-Infinity}'", 1),
    ("mood[]", "'{sad,happy}'", 1),
    ("email[]", "'{x@y.z}'", 1),
    (
        "timestamptz[]",
        "'{infinity,\"2020-01-01 00:00:00+00\"}'",
        1,
    ),
    ("uuid[]", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'", 1),
    ("jsonb[]", "ARRAY['{\"a\": 1}'::jsonb, 'null']", 1),
    ("bytea[]", "ARRAY['\\x00'::bytea, '']", 1),
    ("inet[]", "'{10.0.0.1/8,::1}'", 1),
    ("interval[]", "'{\"1 day\",\"-1 mon\"}'", 1),
    ("bool[][][]", "'{{{t},{f}},{{NULL},{t}}}'", 3),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_binary_forms_of_every_type_decode_alike() {
    let db = fresh_database("types_parity").await;
    db.client.batch_execute(USER_TYPES).await.unwrap();
    db.client
        .batch_execute("SET TimeZone = 'UTC'; SET extra_float_digits = 3")
        .await
        .unwrap();
    let mut catalog = Catalog::new(db.url.parse().unwrap(), true);
    for &(type_sql, value_sql, dims) in CASES {
        let case = format!("({value_sql})::{type_sql}");
        let meta = db
            .client
            .query_one(
                &format!(
                    "SELECT t.oid, t.typsend::text, format('%s', {case})
                     FROM pg_type t WHERE t.oid = pg_typeof({case})::oid"
                ),
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let (type_oid, send, text): (u32, String, String) = (meta.get(0), meta.get(1), meta.get(2));
        let binary: Vec<u8> = db
            .client
            .query_one(&format!("SELECT {send}({case})"), &[])
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"))
            .get(0);
        let ty = catalog.column_type(type_oid, -1, dims).await.unwrap();
        let from_text =
            decode_text(&ty, text.as_bytes()).unwrap_or_else(|e| panic!("{case} as text: {e}"));
        let from_binary =
            decode_binary(&ty, &binary).unwrap_or_else(|e| panic!("{case} as binary: {e}"));
        // Debug output compares NaN equal to NaN and tells -0.0 from 0.0.
        assert_eq!(
            format!("{from_text:?}"),
            format!("{from_binary:?}"),
            "{case}: text {text:?}"
        );
    }
}

const EDGE_TABLE: &str = "public.edge";

const EDGE_SCHEMA: &str = "
    CREATE TABLE edge (
        id int PRIMARY KEY,
        b bool, i2 int2, i4 int4, i8 int8, o oid, f4 real, f8 float8,
        n numeric, n2 numeric(12, 2), nw numeric(50, 10), m money,
        t text, vc varchar(10), c char(3), e email, md mood, pos positive,
        raw bytea, d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,
        u uuid, j json, jb jsonb, ip inet, net cidr, mac macaddr, mac8 macaddr8,
        ia int4[], grid int8[][], ta text[], ma mood[], am amounts);
";

/// Column names of `edge` in order, without `id`.
const EDGE_COLUMNS: &str = "b, i2, i4, i8, o, f4, f8, n, n2, nw, m, t, vc, c, e, md, pos, raw, d, tm, \
     ttz, ts, tstz, iv, u, j, jb, ip, net, mac, mac8, ia, grid, ta, ma, am";

/// Rows of edge values: the smallest, the largest, the special ones, then the large ones.
const EDGE_ROWS: &[&str] = &[
    "false, -32768, -2147483648, -9223372036854775808, 0, '-Infinity', '-Infinity',
     '-Infinity', -9999999999.99, '-9999999999999999999999999999999999999999.9999999999',
     '-92233720368547758.08', '', '', '', '', 'sad', 1, '', '-infinity', '00:00', '00:00+15:59',
     '-infinity', '-infinity', '-178000000 years', '00000000-0000-0000-0000-000000000000',
     '[]', '{}', '0.0.0.0', '0.0.0.0/0', '00:00:00:00:00:00', '00:00:00:00:00:00:00:00',
     '{}', '{}', '{}', '{}', '{}'",
    "true, 32767, 2147483647, 9223372036854775807, 4294967295, 'Infinity', 'Infinity',
     'Infinity', 9999999999.99, '9999999999999999999999999999999999999999.9999999999',
     '92233720368547758.07', 'ü日本 ✓ 🦀', 'zzzzzzzzzz', 'ÿÿÿ', 'x@y.z', 'ünïcode', 2147483647,
     '\\xffffffff', 'infinity', '24:00:00', '23:59:59.999999-15:59', 'infinity',
     '294246-12-31 23:59:59.999999+00', '178000000 years', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
     '{\"a\": [1, 2.50],  \"a\": \"dup\"}', '{\"deep\": {\"x\": [null, true, 1e400]}}',
     '255.255.255.255', 'ffff:ffff::/32', 'ff:ff:ff:ff:ff:ff', 'ff:ff:ff:ff:ff:ff:ff:ff',
     '{2147483647,-2147483648,NULL}', '{{1,2,3},{4,5,NULL}}', '{\"a b\",\"\",NULL,\"NULL\",\"{}\"}',
     '{happy,NULL}', '{9999999999.99,NULL}'",
    "NULL, 0, 0, 0, 1, 'NaN', 'NaN', 'NaN', 0, 0.000000001, 0, NULL, NULL, 'a', NULL, NULL, NULL,
     NULL, '4713-01-01 BC', '12:34:56.789012', '12:00:00+05:30', '4713-01-01 00:00:00 BC',
     '0044-03-15 12:00:00.000001+00 BC', '1 mon -1 day -00:00:00.000001', NULL, 'null', 'null',
     '::ffff:1.2.3.4', '2001:db8::/32', NULL, NULL, '{NULL}', '{{NULL}}', '{NULL}', '{NULL}',
     NULL",
    "true, 1, 1, 1, 1, 1.5, 0.1, 0.1, 0.1, 0.1, 0.1, repeat('ü', 524288), 'v', 'c', 'e@e',
     'ok', 3, (SELECT string_agg(decode(md5(g::text), 'hex'), '') FROM generate_series(1, 655360) g),
     '2024-02-29', '00:00:00.000001', '00:00:00-00:00:01', '2000-01-01 00:00:00.000001',
     '2026-11-30 12:00:00+05:30', '1 year 2 mons 3 days 04:05:06.5',
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '[1, \"ü\"]', '[1, \"ü\"]', '::1', '10.0.0.0/8',
     '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '{1}', '{{1}}', '{ü}', '{sad}', '{0.10}'",
];

/// Columns `SELECT` can render the way the Parquet reader renders them (see
/// `tributary_tests::lake::cell`); the others are compared between the text and the binary
/// pipeline, and by the independent reader.
const EDGE_CANONICAL: &[(&str, &str)] = &[
    ("b", "b::text"),
    ("i2", "i2::text"),
    ("i4", "i4::text"),
    ("i8", "i8::text"),
    ("o", "o::text"),
    ("n", "n::text"),
    ("n2", "n2::text"),
    ("nw", "nw::text"),
    ("m", "m::numeric::text"),
    ("t", "t"),
    ("vc", "vc"),
    ("c", "c::text || repeat(' ', 3 - length(c))"),
    ("e", "e::text"),
    ("md", "md::text"),
    ("pos", "pos::text"),
    ("raw", "encode(raw, 'hex')"),
    (
        "d",
        "CASE WHEN d IS NULL THEN NULL WHEN isfinite(d) THEN (d - date '1970-01-01')::text
              WHEN d > 'epoch' THEN '2147483647' ELSE '-2147483647' END",
    ),
    ("tm", "(extract(epoch from tm) * 1000000)::bigint::text"),
    (
        "ts",
        "CASE WHEN ts IS NULL THEN NULL WHEN isfinite(ts) THEN (extract(epoch from ts) * 1000000)::bigint::text
              WHEN ts > 'epoch' THEN '9223372036854775807' ELSE '-9223372036854775807' END",
    ),
    (
        "tstz",
        "CASE WHEN tstz IS NULL THEN NULL WHEN isfinite(tstz) THEN (extract(epoch from tstz) * 1000000)::bigint::text
              WHEN tstz > 'epoch' THEN '9223372036854775807' ELSE '-9223372036854775807' END",
    ),
    ("u", "replace(u::text, '-', '')"),
    ("j", "j::text"),
    ("jb", "jb::text"),
    ("ip", "nullif(format('%s', ip), '')"),
    ("net", "nullif(format('%s', net), '')"),
    ("mac", "mac::text"),
    ("mac8", "mac8::text"),
    ("ia", "'[' || array_to_string(ia, ',', 'null') || ']'"),
    ("ta", "'[' || array_to_string(ta, ',', 'null') || ']'"),
    ("ma", "'[' || array_to_string(ma, ',', 'null') || ']'"),
];

fn by_id(rows: &[LandedRow]) -> BTreeMap<String, &LandedRow> {
    rows.iter()
        .filter(|r| r.op != "delete")
        .map(|r| (r.values["id"].clone().unwrap(), r))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_values_land_alike_from_text_and_binary_tuples_and_match_select() {
    let db = fresh_database("edge_types").await;
    db.client.batch_execute(USER_TYPES).await.unwrap();
    db.client.batch_execute(EDGE_SCHEMA).await.unwrap();
    let server = s3();
    let bucket = server.fresh_bucket("edge-types").await;
    let lake_dir = std::env::temp_dir().join(unique_name("edge_lake"));

    // The same changes through a text pipeline into a directory and a binary one into S3.
    let text_name = unique_name("edge_text");
    let text_url = format!("file://{}", lake_dir.display());
    let text = RunningPipeline::start(config(
        &db.url,
        &text_name,
        &[EDGE_TABLE],
        &text_url,
        vec![],
        &[],
    ))
    .await;
    let binary_name = unique_name("edge_binary");
    let binary_url = format!("s3://{bucket}/lake");
    let mut binary_config = config(
        &db.url,
        &binary_name,
        &[EDGE_TABLE],
        &binary_url,
        server.object_store_options(),
        &[],
    );
    binary_config.source.binary = true;
    let binary = RunningPipeline::start(binary_config).await;
    // And through trigger capture's journal, into another directory.
    let trigger_dir = std::env::temp_dir().join(unique_name("edge_trigger_lake"));
    let trigger_url = format!("file://{}", trigger_dir.display());
    let mut trigger_config = config(
        &db.url,
        &unique_name("edge_trigger"),
        &[EDGE_TABLE],
        &trigger_url,
        vec![],
        &[],
    );
    trigger_config.source.capture = tributary::config::CaptureMode::Trigger;
    let trigger = RunningPipeline::start(trigger_config).await;

    let mut sql = String::from("BEGIN; INSERT INTO edge (id) VALUES (0);");
    for (i, row) in EDGE_ROWS.iter().enumerate() {
        sql += &format!(
            "INSERT INTO edge (id, {EDGE_COLUMNS}) VALUES ({}, {row});",
            i + 1
        );
    }
    sql += "COMMIT;";
    // An update that changes the key carries the old key in binary too; a delete removes one.
    sql += "UPDATE edge SET id = 10, b = NOT b WHERE id = 2; DELETE FROM edge WHERE id = 3;";
    db.client.batch_execute(&sql).await.unwrap();
    let changes = EDGE_ROWS.len() as u64 + 3;
    let mut landed = Vec::new();
    for (mut pipeline, sink_url, options) in [
        (text, text_url.clone(), vec![]),
        (binary, binary_url.clone(), server.object_store_options()),
        (trigger, trigger_url.clone(), vec![]),
    ] {
        pipeline
            .wait_for_changes(changes, Duration::from_secs(60))
            .await;
        pipeline.stop().await;
        let sink =
            tributary::lake::sink::Sink::open(&sink_url, &options.into_iter().collect()).unwrap();
        landed.push(read_output(sink.store().as_ref(), EDGE_TABLE).await);
    }
    let (from_text, from_binary) = (&landed[0], &landed[1]);
    assert_eq!(from_text.len() as u64, changes);
    assert_eq!(from_text.len(), from_binary.len());
    for (t, b) in from_text.iter().zip(from_binary) {
        assert_eq!((&t.op, t.seq, &t.schema), (&b.op, b.seq, &b.schema));
        assert_eq!(
            t.values, b.values,
            "text and binary tuples landed differently"
        );
    }
    // Trigger capture's journal holds each value's text, which the same decoders read: the
    // same rows with the same types and values.
    let from_trigger = &landed[2];
    assert_eq!(from_text.len(), from_trigger.len());
    for (t, j) in from_text.iter().zip(from_trigger) {
        assert_eq!((&t.op, t.seq, &t.schema), (&j.op, j.seq, &j.schema));
        assert_eq!(
            t.values, j.values,
            "the slot and the trigger journal landed differently"
        );
    }
    let big = &from_text[EDGE_ROWS.len()].values;
    assert_eq!(big["t"].as_ref().map(|t| t.chars().count()), Some(524_288));
    assert_eq!(big["raw"].as_ref().map(String::len), Some(2 * (10 << 20)));

    // DuckDB and pyarrow read the directory lake on their own.
    let independent = read_independently(
        &format!("{}/public.edge/*.parquet", lake_dir.display()),
        "id",
    );
    eprintln!("{independent:#?}");

    // What landed last for each id is what SELECT returns now.
    let select = format!(
        "SELECT id::text, {} FROM edge ORDER BY id",
        EDGE_CANONICAL
            .iter()
            .map(|(_, sql)| *sql)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let current = db.client.query(&select, &[]).await.unwrap();
    let latest = by_id(from_text);
    assert_eq!(current.len(), 4, "ids 0, 1, 4 and 10 remain");
    for row in &current {
        let id: String = row.get(0);
        let landed = latest[&id];
        for (i, (column, _)) in EDGE_CANONICAL.iter().enumerate() {
            let want: Option<String> = row.get(i + 1);
            assert_eq!(landed.values[*column], want, "row {id} column {column}");
        }
    }
    // Floats print differently in PostgreSQL and Rust; they are compared as numbers, bit for
    // bit (NaN to NaN, -0 to -0).
    let floats = db
        .client
        .query(
            "SELECT id::text, f4::text, f8::text FROM edge ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let bits = |text: &str| -> u64 {
        let value: f64 = match text {
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            other => other.parse().unwrap(),
        };
        if value.is_nan() {
            f64::NAN.to_bits()
        } else {
            value.to_bits()
        }
    };
    for row in &floats {
        let id: String = row.get(0);
        for (i, column) in ["f4", "f8"].into_iter().enumerate() {
            let want: Option<String> = row.get(i + 1);
            let have = latest[&id].values[column].clone();
            assert_eq!(
                have.as_deref().map(bits),
                want.as_deref().map(|w| if column == "f4" {
                    // Through f32, as the column holds it.
                    let narrow = bits(w);
                    (f64::from_bits(narrow) as f32 as f64).to_bits()
                } else {
                    bits(w)
                }),
                "row {id} column {column}: landed {have:?}, SELECT {want:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_tuples_are_refused_for_types_read_only_as_text() {
    let db = fresh_database("binary_refusal").await;
    db.client.batch_execute(USER_TYPES).await.unwrap();
    db.client
        .batch_execute("CREATE TABLE pairs (id int PRIMARY KEY, p pair, r int4range)")
        .await
        .unwrap();
    let name = unique_name("binary_refusal");
    let lake = std::env::temp_dir().join(&name);
    let mut refused = config(
        &db.url,
        &name,
        &["public.pairs"],
        &format!("file://{}", lake.display()),
        vec![],
        &[],
    );
    refused.source.binary = true;
    let error = RunningPipeline::start_failure(refused.clone(), Default::default()).await;
    assert_eq!(
        error.to_string(),
        "table public.pairs column \"p\" has type public.pair, which Tributary reads only as \
         text; set source.binary = false (or change the column's type)"
    );

    // In text the same table lands, the composite and the range in their text form.
    refused.source.binary = false;
    let mut running = RunningPipeline::start(refused).await;
    db.client
        .batch_execute("INSERT INTO pairs VALUES (1, ROW(7, 'a b'), '[1,5)')")
        .await
        .unwrap();
    running.wait_for_changes(1, Duration::from_secs(30)).await;
    running.stop().await;
    let sink = tributary::lake::sink::Sink::open(
        &format!("file://{}", lake.display()),
        &Default::default(),
    )
    .unwrap();
    let rows = read_output(sink.store().as_ref(), "public.pairs").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].values["p"].as_deref(), Some("(7,\"a b\")"));
    assert_eq!(rows[0].values["r"].as_deref(), Some("[1,5)"));
}
