//! Every supported type, with its edge values, decodes the same from the text and the binary
//! form, and lands the same through a text and a binary pipeline.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary::catalog::Catalog;
use tributary::pgtype::{decode_binary, decode_text};
use tributary_tests::lake::{LandedRow, read_output};
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
    ("numeric(50,10)", "-1234567890123456789012345678901234567890.0000000001", 0),
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
    ("jsonb", "'{\"b\": [1, 2.50], \"a\": null, \"c\": \"ü\"}'", 0),
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
    ("timestamptz[]", "'{infinity,\"2020-01-01 00:00:00+00\"}'", 1),
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
