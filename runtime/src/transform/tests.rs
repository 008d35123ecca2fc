//! The host against the real plugins of `plugins/`.
//!
//! Building the plugins is the test setup's job (`scripts/test.sh`, or the command the panic
//! names), not these tests': they are found where the integration tests find them, by the
//! same code (`tests/src/plugins.rs`), in `TRIBUTARY_PLUGIN_DIR` or the target directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::*;
use crate::stream::change::{Change, Message, Op, OutputRow, Transaction, Value};
use crate::wire::pgoutput::{Relation, RelationColumn, ReplicaIdentity};

/// The integration tests' plugin locator, shared by path rather than by a dependency on the
/// tests crate (which would build this crate twice).
#[allow(dead_code)]
#[path = "../../../tests/src/plugins.rs"]
mod located;

/// What a chain made of a batch, when no plugin asks to retry (none of `plugins/` does).
trait Outputs {
    fn outputs(self) -> Result<Vec<OutputBatch>, TransformError>;
}

impl Outputs for Result<Processed, TransformError> {
    fn outputs(self) -> Result<Vec<OutputBatch>, TransformError> {
        self.map(|processed| match processed {
            Processed::Done(outputs) => outputs,
            Processed::Retry(retry) => panic!("unexpected: {retry}"),
        })
    }
}

/// The built component `<name>.wasm`; panics with the build command when it is missing.
pub(crate) fn plugin(name: &str) -> PathBuf {
    located::plugin(name)
}

fn load(names_and_config: &[(&str, &[(&str, &str)])], limits: &HostLimits) -> TransformChain {
    let specs: Vec<(TransformSpec, HostLimits)> = names_and_config
        .iter()
        .map(|(name, config)| {
            let spec = TransformSpec {
                plugin: plugin(name),
                config: config
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
            (spec, limits.clone())
        })
        .collect();
    TransformChain::load(&specs).unwrap_or_else(|e| panic!("load {names_and_config:?}: {e}"))
}

pub(crate) fn relation(
    id: u32,
    schema: &str,
    table: &str,
    columns: &[(&str, u32, bool)],
) -> Arc<Relation> {
    Arc::new(Relation {
        id,
        namespace: schema.into(),
        name: table.into(),
        replica_identity: ReplicaIdentity::Default,
        columns: columns
            .iter()
            .map(|&(name, type_oid, key)| RelationColumn::new(name, type_oid, -1, key))
            .collect(),
    })
}

pub(crate) fn change(
    op: Op,
    relation: &Arc<Relation>,
    seq: u32,
    new: Option<Vec<Value>>,
    old: Option<Vec<Value>>,
) -> Change {
    Change {
        op,
        relation: relation.clone(),
        seq,
        new,
        old,
    }
}

pub(crate) fn tx(xid: u32, commit_lsn: u64, changes: Vec<Change>) -> Transaction {
    Transaction {
        xid,
        commit_lsn: Lsn(commit_lsn),
        end_lsn: Lsn(commit_lsn + 8),
        commit_time: 1_700_000_000_000_000 + i64::from(xid),
        changes,
        messages: Vec::new(),
        load: false,
    }
}

/// A table with a column of every value kind, altered mid-batch, next to a second table;
/// inserts, updates (with an unchanged TOAST value), deletes (key-only old row) and a truncate.
pub(super) fn every_kind_batch() -> Batch {
    let kinds: &[(&str, u32, bool)] = &[
        ("id", 23, true),
        ("flag", 16, false),
        ("small", 21, false),
        ("big", 20, false),
        ("real", 700, false),
        ("double", 701, false),
        ("amount", 1700, false),
        ("note", 25, false),
        ("blob", 17, false),
        ("day", 1082, false),
        ("clock", 1083, false),
        ("at", 1114, false),
        ("at_tz", 1184, false),
        ("uid", 2950, false),
        ("doc", 3802, false),
        ("span", 1186, false),
        ("list", 1007, false),
        ("price", 790, false),
    ];
    let all = relation(16384, "public", "kinds", kinds);
    let row = |id: i32, note: Value| {
        vec![
            Value::Int4(id),
            Value::Bool(true),
            Value::Int2(-2),
            Value::Int8(1 << 40),
            Value::Float4(1.5),
            Value::Float8(-0.25),
            Value::Numeric("-12.340".into()),
            note,
            Value::Bytea(vec![0, 1, 255]),
            Value::Date(-1),
            Value::Time(86_399_999_999),
            Value::Timestamp(i64::MIN),
            Value::TimestampTz(i64::MAX),
            Value::Uuid(*b"0123456789abcdef"),
            Value::Json(r#"{"a": [1, null]}"#.into()),
            Value::Interval {
                months: 14,
                days: -3,
                micros: 5,
            },
            Value::Array(Box::new(crate::stream::change::Array {
                dims: vec![2, 2],
                elements: vec![Value::Int4(1), Value::Int4(2), Value::Null, Value::Int4(4)],
            })),
            Value::Numeric("1.00".into()),
        ]
    };
    let key_only = |id: i32| {
        let mut old = vec![Value::Null; kinds.len()];
        old[0] = Value::Int4(id);
        old
    };
    let altered = relation(
        16384,
        "public",
        "kinds",
        &[("id", 23, true), ("extra", 25, false)],
    );
    let users = relation(
        16400,
        "app",
        "users",
        &[("id", 20, true), ("email", 25, false)],
    );
    Batch {
        transactions: vec![
            tx(
                700,
                0x100,
                vec![
                    change(
                        Op::Insert,
                        &all,
                        0,
                        Some(row(1, Value::Text("héllo".into()))),
                        None,
                    ),
                    change(
                        Op::Insert,
                        &users,
                        1,
                        Some(vec![Value::Int8(1), Value::Text("a@b.c".into())]),
                        None,
                    ),
                    change(
                        Op::Update,
                        &all,
                        2,
                        Some(row(1, Value::UnchangedToast)),
                        Some(key_only(1)),
                    ),
                    change(Op::Update, &all, 3, Some(row(2, Value::Null)), None),
                ],
            ),
            tx(
                701,
                0x200,
                vec![
                    change(Op::Delete, &all, 0, None, Some(key_only(2))),
                    change(Op::Delete, &users, 1, None, None),
                    change(Op::Truncate, &users, 2, None, None),
                    change(
                        Op::Insert,
                        &altered,
                        3,
                        Some(vec![Value::Int4(3), Value::Text("x".into())]),
                        None,
                    ),
                ],
            ),
        ],
        messages: Vec::new(),
    }
}

fn rows<'a>(outputs: &'a [OutputBatch], output: &str) -> Vec<&'a OutputRow> {
    outputs
        .iter()
        .filter(|b| b.output == output)
        .flat_map(|b| &b.rows)
        .collect()
}

#[test]
fn zero_plugins_is_the_identity() {
    let mut chain = TransformChain::load(&[]).unwrap();
    assert!(chain.plugins().is_empty());
    let batch = every_kind_batch();
    let out = chain.process(batch.clone()).outputs().unwrap();

    let names: Vec<(&str, usize, usize)> = out
        .iter()
        .map(|b| (b.output.as_str(), b.columns.len(), b.rows.len()))
        .collect();
    // The altered table is a second output batch of the same name with its new columns.
    assert_eq!(
        names,
        [
            ("public.kinds", 18, 4),
            ("app.users", 2, 3),
            ("public.kinds", 2, 1)
        ]
    );

    let kinds = &out[0].rows;
    let ids: Vec<(Op, Lsn, u32)> = kinds.iter().map(|r| (r.op, r.commit_lsn, r.seq)).collect();
    assert_eq!(
        ids,
        [
            (Op::Insert, Lsn(0x100), 0),
            (Op::Update, Lsn(0x100), 2),
            (Op::Update, Lsn(0x100), 3),
            (Op::Delete, Lsn(0x200), 0)
        ]
    );
    assert_eq!(
        kinds[0].values,
        batch.transactions[0].changes[0].new.clone().unwrap()
    );
    // A delete lands its old image: the key, nulls elsewhere.
    assert_eq!(kinds[3].values[0], Value::Int4(2));
    assert!(kinds[3].values[1..].iter().all(|v| *v == Value::Null));
    assert_eq!(
        (kinds[3].xid, kinds[3].commit_time),
        (701, 1_700_000_000_000_701)
    );

    let users = &out[1].rows;
    // A delete without an old image and a truncate both land as all-null rows.
    assert_eq!(users[1].values, [Value::Null, Value::Null]);
    assert_eq!(
        (users[2].op, users[2].values.clone()),
        (Op::Truncate, vec![Value::Null, Value::Null])
    );
}

#[test]
fn passthrough_equals_the_identity() {
    let batch = every_kind_batch();
    let identity = TransformChain::load(&[])
        .unwrap()
        .process(batch.clone())
        .outputs()
        .unwrap();
    let mut chain = load(&[("passthrough", &[])], &HostLimits::default());
    assert_eq!(chain.process(batch.clone()).outputs().unwrap(), identity);
    // The instance is reused; a second batch gives the same answer.
    assert_eq!(chain.process(batch.clone()).outputs().unwrap(), identity);
    // So do two passthroughs in a row.
    let mut twice = load(
        &[("passthrough", &[]), ("passthrough", &[])],
        &HostLimits::default(),
    );
    assert_eq!(twice.process(batch.clone()).outputs().unwrap(), identity);
}

/// Rows spelled out whole (`row` emits, the trap plugin) land what `keep` lands.
#[test]
fn whole_rows_equal_kept_changes() {
    let batch = every_kind_batch();
    let kept = load(&[("passthrough", &[])], &HostLimits::default())
        .process(batch.clone())
        .outputs()
        .unwrap();
    let mut spelled = load(&[("trap", &[])], &HostLimits::default());
    assert_eq!(spelled.process(batch.clone()).outputs().unwrap(), kept);
    // And in a chain, each plugin sees what the one before made.
    let mut chain = load(
        &[("trap", &[]), ("passthrough", &[])],
        &HostLimits::default(),
    );
    assert_eq!(chain.process(batch).outputs().unwrap(), kept);
}

/// A reshape drops, renames and adds columns of the table's output without the plugin
/// reading a value; the next plugin sees the reshaped table.
#[test]
fn a_reshape_drops_renames_and_adds_columns() {
    let users = relation(
        7,
        "public",
        "users",
        &[("id", 23, true), ("email", 25, false), ("ssn", 25, false)],
    );
    let other = relation(8, "public", "other", &[("id", 23, true)]);
    let text = |s: &str| Value::Text(s.into());
    let row = |id, email: &str| vec![Value::Int4(id), text(email), text("123-45")];
    let batch = Batch {
        transactions: vec![tx(
            1,
            0x100,
            vec![
                change(Op::Insert, &users, 0, Some(row(1, "a@x")), None),
                change(
                    Op::Update,
                    &users,
                    1,
                    Some(row(1, "b@x")),
                    Some(row(1, "a@x")),
                ),
                change(Op::Delete, &users, 2, None, Some(row(1, "b@x"))),
                change(Op::Insert, &other, 3, Some(vec![Value::Int4(5)]), None),
            ],
        )],
        messages: Vec::new(),
    };
    let config: &[(&str, &str)] = &[
        ("tables", "public.users"),
        ("drop", "ssn"),
        ("rename", "email:contact"),
        ("add", "region:text"),
    ];
    for chain in [
        &[("select", config)][..],
        &[("select", config), ("trap", &[])][..],
    ] {
        let out = load(chain, &HostLimits::default())
            .process(batch.clone())
            .outputs()
            .unwrap();
        let users_out = out.iter().find(|o| o.output == "public.users").unwrap();
        let names: Vec<&str> = users_out.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id", "contact", "region"], "{chain:?}");
        let reshaped = |id, email: &str| vec![Value::Int4(id), text(email), Value::Null];
        let rows = &users_out.rows;
        assert_eq!(rows[0].values, reshaped(1, "a@x"));
        assert_eq!(rows[1].values, reshaped(1, "b@x"));
        assert_eq!(rows[1].old, Some(reshaped(1, "a@x")));
        assert_eq!(
            (rows[2].op, &rows[2].values),
            (Op::Delete, &reshaped(1, "b@x"))
        );
        // The table not named keeps its columns.
        let other_out = out.iter().find(|o| o.output == "public.other").unwrap();
        assert_eq!(other_out.columns.len(), 1);
        assert_eq!(other_out.rows[0].values, vec![Value::Int4(5)]);
    }
}

/// Files, directories, the environment, the arguments and the network are out of a plugin's
/// reach; each attempt fails inside the plugin, which goes on. Fan-out rows of one change take
/// `sub` 0, 1, 2, ...
#[test]
fn the_sandbox_denies_files_environment_and_network() {
    // SAFETY: tests of this module do not read the environment concurrently with this.
    unsafe { std::env::set_var("TRIBUTARY_SANDBOX_PROBE", "secret") };
    let mut chain = load(&[("sandbox", &[])], &HostLimits::default());
    let out = chain
        .process(batch_with_text(0x100, "x"))
        .outputs()
        .unwrap();
    let attempts = rows(&out, "attempts");
    let seen: Vec<(String, String, u32)> = attempts
        .iter()
        .map(|r| {
            let text = |v: &Value| match v {
                Value::Text(t) => t.clone(),
                other => format!("{other:?}"),
            };
            (text(&r.values[0]), text(&r.values[1]), r.sub)
        })
        .collect();
    assert_eq!(seen.len(), 6, "{seen:?}");
    for (i, (attempt, outcome, sub)) in seen.iter().enumerate() {
        assert!(outcome.starts_with("denied"), "{attempt}: {outcome}");
        assert!(!outcome.contains("secret"), "{attempt}: {outcome}");
        assert_eq!(*sub, i as u32);
    }
    assert_eq!(
        rows(&out, "public.notes").len(),
        1,
        "the change itself lands"
    );
}

/// A rejected change stops the pipeline, named by its identity and table, with its class.
#[test]
fn a_rejected_change_is_named_by_identity_table_and_class() {
    let mut chain = load(&[("trap", &[])], &HostLimits::default());
    let err = chain
        .process(batch_with_text(0x2_0000_0100, "reject"))
        .outputs()
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, TransformError::Rejected(_)), "{message}");
    assert!(
        message.contains(
            "rejected the change at commit lsn 2/100, seq 0 of public.notes (test): asked to reject"
        ),
        "{message}"
    );
}

/// Under the dead-letter policy a rejected change lands in `_dead_letters` with its identity,
/// table, values, the plugin and why, and the rest of the batch lands as usual.
#[test]
fn under_the_dead_letter_policy_rejected_changes_land_beside_the_rest() {
    let spec = TransformSpec {
        plugin: plugin("trap"),
        on_error: FailurePolicy::DeadLetter,
        ..Default::default()
    };
    let mut chain = TransformChain::load(&[(spec, HostLimits::default())]).unwrap();
    let mut batch = batch_with_text(0x3_0000_0100, "reject");
    let notes = batch.transactions[0].changes[0].relation.clone();
    batch.transactions[1].changes.push(change(
        Op::Insert,
        &notes,
        0,
        Some(vec![Value::Int4(2), Value::Text("fine".into())]),
        None,
    ));
    let out = chain.process(batch).outputs().unwrap();
    let letters = rows(&out, DEAD_LETTERS);
    assert_eq!(letters.len(), 1);
    let letter = letters[0];
    assert_eq!((letter.commit_lsn, letter.seq), (Lsn(0x3_0000_0100), 0));
    let text = |i: usize| match &letter.values[i] {
        Value::Text(t) | Value::Json(t) => t.clone(),
        other => panic!("column {i}: {other:?}"),
    };
    assert_eq!(text(0), "public.notes");
    assert_eq!(text(1), "trap");
    assert_eq!(text(3).len(), 64, "the plugin's digest");
    assert_eq!(
        (text(4).as_str(), text(5).as_str()),
        ("test", "asked to reject")
    );
    assert!(matches!(letter.values[6], Value::TimestampTz(t) if t > 1_700_000_000_000_000));
    assert_eq!(text(7), r#"{"body":"reject","id":1}"#);
    // The trap plugin emits the rejected change too; the other change lands as usual.
    assert_eq!(rows(&out, "public.notes").len(), 2);
}

/// Under the dead-letter policy a batch that traps is taken apart: the change it traps on
/// lands as a dead letter (class `trap`), the others as the plugin makes them, and the next
/// batch finds a fresh instance.
#[test]
fn under_the_dead_letter_policy_a_trapping_change_is_isolated() {
    let spec = TransformSpec {
        plugin: plugin("trap"),
        on_error: FailurePolicy::DeadLetter,
        ..Default::default()
    };
    let mut chain = TransformChain::load(&[(spec, HostLimits::default())]).unwrap();
    let mut batch = batch_with_text(0x4_0000_0100, "fine");
    let notes = batch.transactions[0].changes[0].relation.clone();
    let row = |id, text: &str| Some(vec![Value::Int4(id), Value::Text(text.into())]);
    batch.transactions[0]
        .changes
        .push(change(Op::Insert, &notes, 1, row(2, "panic"), None));
    batch.transactions[1]
        .changes
        .push(change(Op::Insert, &notes, 0, row(3, "also fine"), None));
    let out = chain.process(batch).outputs().unwrap();
    let letters = rows(&out, DEAD_LETTERS);
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].commit_lsn, letters[0].seq),
        (Lsn(0x4_0000_0100), 1)
    );
    assert_eq!(letters[0].values[4], Value::Text("trap".into()));
    let Value::Text(message) = &letters[0].values[5] else {
        panic!("{:?}", letters[0].values[5])
    };
    assert!(message.contains("asked to panic"), "{message}");
    let landed: Vec<&Value> = rows(&out, "public.notes")
        .iter()
        .map(|r| &r.values[0])
        .collect();
    assert_eq!(landed, [&Value::Int4(1), &Value::Int4(3)]);
    // The plugin goes on with the next batch.
    let next = chain
        .process(batch_with_text(0x5_0000_0100, "x"))
        .outputs()
        .unwrap();
    assert_eq!(rows(&next, "public.notes").len(), 1);

    // Taking a batch apart keeps its messages for the plugins after it.
    let spec = |name: &str, on_error| TransformSpec {
        plugin: plugin(name),
        on_error,
        ..Default::default()
    };
    let mut chain = TransformChain::load(&[
        (
            spec("trap", FailurePolicy::DeadLetter),
            HostLimits::default(),
        ),
        (spec("messages", FailurePolicy::Stop), HostLimits::default()),
    ])
    .unwrap();
    let mut batch = batch_with_text(0x8_0000_0100, "panic");
    let message = |content: &[u8], before_seq| Message {
        prefix: "p".into(),
        content: content.to_vec(),
        lsn: Lsn(0x8_0000_0000),
        before_seq,
    };
    batch.transactions[0].messages = vec![message(b"in", 1)];
    batch.messages = vec![message(b"between", 1)];
    let out = chain.process(batch).outputs().unwrap();
    assert_eq!(rows(&out, DEAD_LETTERS).len(), 1);
    assert_eq!(rows(&out, "messages").len(), 2);
}

/// Recursion past the stack limit is stopped with an error naming the plugin, the limit and
/// the batch; the plugin recovers on the next batch.
#[test]
fn a_plugin_recursing_past_its_stack_limit_is_stopped_naming_the_limit() {
    let limits = HostLimits {
        stack_bytes: 256 << 10,
        ..HostLimits::default()
    };
    let mut chain = load(&[("trap", &[])], &limits);
    let err = chain
        .process(batch_with_text(0x6_0000_0100, "recurse"))
        .outputs()
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, TransformError::StackLimit { .. }),
        "{message}"
    );
    assert!(message.contains("plugin \"trap\""), "{message}");
    assert!(message.contains("stack limit of 256 KiB"), "{message}");
    assert!(message.contains("6/100"), "{message}");
    assert_eq!(
        chain
            .process(batch_with_text(0x7_0000_0100, "x"))
            .outputs()
            .unwrap()
            .len(),
        1
    );
}

/// The error of loading the plugin `name`, which must be refused as invalid.
fn refused_at_load(name: &str) -> String {
    let spec = TransformSpec {
        plugin: plugin(name),
        config: vec![],
        ..Default::default()
    };
    let err = TransformChain::load(&[(spec, HostLimits::default())])
        .err()
        .expect("load must fail");
    let message = err.to_string();
    assert!(matches!(err, TransformError::Invalid { .. }), "{message}");
    message
}

/// A component built against the retired 0.1 contract is refused before it is linked, with
/// how to rebuild it.
#[test]
fn a_plugin_built_against_the_old_contract_is_refused_with_how_to_rebuild() {
    let message = refused_at_load("old_contract");
    assert!(message.contains("old_contract.wasm"), "{message}");
    assert!(
        message.contains("built against the tributary:transform@0.1.0 contract"),
        "{message}"
    );
    assert!(
        message.contains("rebuild it against tributary:transform/plugin@1.0.0"),
        "{message}"
    );
}

/// A component that imports a version of the column functions this host does not serve
/// (`tributary:functions@1.1.0`) is refused when it loads, naming the interface and the version
/// served and saying what to do, rather than with the linker's words alone.
#[test]
fn a_plugin_importing_functions_this_host_does_not_serve_is_refused_saying_what_to_do() {
    let message = refused_at_load("newer_functions");
    assert!(message.contains("newer_functions.wasm"), "{message}");
    assert!(
        message.contains(
            "it imports tributary:functions/columns@1.1.0, but this Tributary serves \
             tributary:functions 1.0.0 only"
        ),
        "{message}"
    );
    assert!(message.contains("(upgrade Tributary)"), "{message}");
    assert!(
        message.contains("the plugin's build that does not import the column functions"),
        "{message}"
    );
}

/// Message rows of a transaction delivered in parts number on across the parts, so their
/// identities are those of the transaction delivered whole.
#[test]
fn message_rows_keep_their_identity_across_parts() {
    let message = |n: u8| Message {
        prefix: "p".into(),
        content: vec![n],
        lsn: Lsn(0x50 + u64::from(n)),
        before_seq: 0,
    };
    let notes = relation(1, "public", "notes", &[("id", 23, true)]);
    let insert = |seq| {
        change(
            Op::Insert,
            &notes,
            seq,
            Some(vec![Value::Int4(seq as i32)]),
            None,
        )
    };
    let mut whole = tx(3, 0x900, vec![insert(0), insert(1), insert(2)]);
    whole.messages = vec![message(0), message(1), message(2)];
    let mut first = tx(3, 0x900, vec![insert(0), insert(1)]);
    first.messages = vec![message(0), message(1)];
    let mut second = tx(3, 0x900, vec![insert(2)]);
    second.messages = vec![message(2)];
    let batch = |t| Batch {
        transactions: vec![t],
        messages: Vec::new(),
    };
    let identities = |outputs: Vec<OutputBatch>| -> Vec<(String, u32)> {
        outputs
            .into_iter()
            .flat_map(|o| o.rows.into_iter().map(move |r| (o.output.clone(), r.seq)))
            .collect()
    };
    let mut chain = load(&[("messages", &[])], &HostLimits::default());
    let expected = identities(chain.process(batch(whole)).outputs().unwrap());
    let mut parted = identities(
        chain
            .process_part(batch(first), 0, false)
            .outputs()
            .unwrap(),
    );
    parted.extend(identities(
        chain
            .process_part(batch(second), 1, true)
            .outputs()
            .unwrap(),
    ));
    parted.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(parted, expected);
    assert_eq!(expected.iter().filter(|(o, _)| o == "messages").count(), 3);
}

#[test]
fn logical_decoding_messages_reach_every_plugin_of_the_chain() {
    let message = |content: &[u8], lsn: u64, before_seq: u32| Message {
        prefix: "audit".into(),
        content: content.to_vec(),
        lsn: Lsn(lsn),
        before_seq,
    };
    let mut batch = every_kind_batch();
    batch.transactions[0].messages = vec![message(b"hello", 0xf0, 1), message(b"\xff", 0xf1, 4)];
    batch.transactions[1].messages = vec![message(b"second", 0x1f0, 0)];
    batch.messages = vec![message(b"plain", 0x80, 0), message(b"later", 0x180, 1)];
    let identity = TransformChain::load(&[])
        .unwrap()
        .process(batch.clone())
        .outputs()
        .unwrap();
    // After a passthrough, so the messages also cross from one plugin to the next.
    let mut chain = load(
        &[("passthrough", &[]), ("messages", &[])],
        &HostLimits::default(),
    );
    let out = chain.process(batch.clone()).outputs().unwrap();
    let (messages, changes): (Vec<_>, Vec<_>) =
        out.into_iter().partition(|b| b.output == "messages");
    assert_eq!(changes, identity, "changes pass through untouched");

    let columns: Vec<&str> = messages[0]
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "prefix",
            "content",
            "text",
            "lsn",
            "transactional",
            "before_seq"
        ]
    );
    let rows = &messages[0].rows;
    let got: Vec<(Lsn, u32, u32, Value, Value, Value)> = rows
        .iter()
        .map(|r| {
            (
                r.commit_lsn,
                r.seq,
                r.xid,
                r.values[2].clone(),
                r.values[4].clone(),
                r.values[5].clone(),
            )
        })
        .collect();
    let text = |s: &str| Value::Text(s.into());
    assert_eq!(
        got,
        [
            (
                Lsn(0x100),
                0,
                700,
                text("hello"),
                Value::Bool(true),
                Value::Int8(1)
            ),
            // Not UTF-8: no text, the bytes are in `content`.
            (
                Lsn(0x100),
                1,
                700,
                Value::Null,
                Value::Bool(true),
                Value::Int8(4)
            ),
            (
                Lsn(0x200),
                0,
                701,
                text("second"),
                Value::Bool(true),
                Value::Int8(0)
            ),
            // Non-transactional: with the transaction that commits after each, numbered on
            // from that transaction's own messages.
            (
                Lsn(0x100),
                2,
                700,
                text("plain"),
                Value::Bool(false),
                Value::Null
            ),
            (
                Lsn(0x200),
                1,
                701,
                text("later"),
                Value::Bool(false),
                Value::Null
            ),
        ]
    );
    assert_eq!(rows[1].values[1], Value::Bytea(vec![0xff]));
    assert_eq!(rows[0].values[0], text("audit"));
    assert_eq!(rows[0].values[3], Value::Int8(0xf0));
}

#[test]
fn plugins_are_recorded_with_name_version_and_digest() {
    let chain = load(&[("passthrough", &[])], &HostLimits::default());
    let path = plugin("passthrough");
    let digest = Sha256::digest(std::fs::read(&path).unwrap());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        chain.plugins(),
        [PluginInfo {
            name: "passthrough".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            path: path.display().to_string(),
            digest: hex,
        }]
    );
}

fn batch_with_text(lsn: u64, text: &str) -> Batch {
    let notes = relation(
        1,
        "public",
        "notes",
        &[("id", 23, true), ("body", 25, false)],
    );
    let row = vec![Value::Int4(1), Value::Text(text.into())];
    Batch {
        transactions: vec![
            tx(9, lsn, vec![change(Op::Insert, &notes, 0, Some(row), None)]),
            tx(10, lsn + 0x100, vec![]),
        ],
        messages: Vec::new(),
    }
}

#[test]
fn a_trap_names_the_plugin_and_batch_then_the_plugin_recovers() {
    let mut chain = load(&[("trap", &[])], &HostLimits::default());
    for command in ["panic", "unreachable"] {
        let err = chain
            .process(batch_with_text(0x1_0000_0100, command))
            .outputs()
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, TransformError::Trap { .. }), "{message}");
        assert!(message.contains("plugin \"trap\""), "{message}");
        assert!(
            message.contains(&plugin("trap").display().to_string()),
            "{message}"
        );
        assert!(message.contains("commit lsn 1/100 to 1/200"), "{message}");
        assert!(!err.is_retryable());
        if command == "panic" {
            // What the guest printed on its way down is part of the error.
            assert!(message.contains("asked to panic"), "{message}");
        }
        // The poisoned instance was dropped; a fresh one handles the next batch.
        let good = batch_with_text(0x300, "fine");
        let out = chain.process(good.clone()).outputs().unwrap();
        assert_eq!(
            out[0].rows[0].values,
            [Value::Int4(1), Value::Text("fine".into())]
        );
    }
}

#[test]
fn a_chain_runs_on_a_blocking_thread_of_a_tokio_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let mut chain = load(&[("trap", &[])], &HostLimits::default());
    let (chain, panicked) = runtime.block_on(async move {
        tokio::task::spawn_blocking(move || {
            // The panic message goes through WASI stderr, which needs the runtime.
            let panicked = chain
                .process(batch_with_text(0x100, "panic"))
                .outputs()
                .unwrap_err();
            (chain, panicked)
        })
        .await
        .unwrap()
    });
    assert!(
        panicked.to_string().contains("asked to panic"),
        "{panicked}"
    );
    assert_eq!(chain.plugins().len(), 1);
}

#[test]
fn a_fatal_error_carries_the_plugin_message() {
    let mut chain = load(&[("trap", &[])], &HostLimits::default());
    let err = chain
        .process(batch_with_text(0x100, "fatal"))
        .outputs()
        .unwrap_err();
    assert!(matches!(err, TransformError::Fatal { .. }), "{err}");
    assert!(err.to_string().contains("asked to fail"), "{err}");
    assert!(
        err.to_string().contains("commit lsn 0/100 to 0/200"),
        "{err}"
    );
}

#[test]
fn a_plugin_that_never_returns_hits_its_deadline() {
    let limits = HostLimits {
        call_timeout: Duration::from_millis(200),
        ..HostLimits::default()
    };
    let mut chain = load(&[("spin", &[])], &limits);
    let started = Instant::now();
    let err = chain
        .process(batch_with_text(0x100, "x"))
        .outputs()
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, TransformError::Timeout { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("exceeded its time limit of 200 ms"),
        "{err}"
    );
    assert!(
        err.to_string().contains("commit lsn 0/100 to 0/200"),
        "{err}"
    );
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(200), "took {elapsed:?}");
}

#[test]
fn a_plugin_allocating_past_the_memory_cap_fails_cleanly_then_recovers() {
    let limits = HostLimits {
        memory_bytes: 32 << 20,
        ..HostLimits::default()
    };
    let mut chain = load(&[("trap", &[])], &limits);
    let err = chain
        .process(batch_with_text(0x100, "alloc"))
        .outputs()
        .unwrap_err();
    assert!(matches!(err, TransformError::MemoryLimit { .. }), "{err}");
    assert!(
        err.to_string().contains("memory limit of 33554432 bytes"),
        "{err}"
    );
    let out = chain
        .process(batch_with_text(0x100, "fine"))
        .outputs()
        .unwrap();
    assert_eq!(out[0].rows.len(), 1);
}

#[test]
fn mask_masks_chosen_columns_and_drops_deletes() {
    let config: &[(&str, &str)] = &[
        ("columns", "email, phone"),
        ("drop_deletes", "true"),
        ("salt", "s"),
    ];
    // A passthrough after mask sees mask's rows as its changes.
    let mut chain = load(
        &[("mask", config), ("passthrough", &[])],
        &HostLimits::default(),
    );
    let users = relation(
        7,
        "app",
        "users",
        &[
            ("id", 20, true),
            ("email", 25, false),
            ("phone", 1043, false),
            ("name", 25, false),
        ],
    );
    let row = |id: i64, email: &str| {
        Some(vec![
            Value::Int8(id),
            Value::Text(email.into()),
            Value::Null,
            Value::Text("Ada".into()),
        ])
    };
    let batch = Batch {
        transactions: vec![tx(
            5,
            0x100,
            vec![
                change(Op::Insert, &users, 0, row(1, "ada@example.com"), None),
                change(Op::Update, &users, 1, row(1, "ada@example.com"), None),
                change(
                    Op::Delete,
                    &users,
                    2,
                    None,
                    Some(vec![Value::Int8(1), Value::Null, Value::Null, Value::Null]),
                ),
                change(Op::Insert, &users, 3, row(2, "bob@example.com"), None),
            ],
        )],
        messages: Vec::new(),
    };
    let out = chain.process(batch.clone()).outputs().unwrap();
    let rows = rows(&out, "app.users");
    let seqs: Vec<(Op, u32)> = rows.iter().map(|r| (r.op, r.seq)).collect();
    assert_eq!(seqs, [(Op::Insert, 0), (Op::Update, 1), (Op::Insert, 3)]);
    let email = |r: &OutputRow| match &r.values[1] {
        Value::Text(s) => s.clone(),
        other => panic!("email is {other:?}"),
    };
    assert!(email(rows[0]).starts_with("sha256:"), "{}", email(rows[0]));
    assert!(!email(rows[0]).contains("ada"));
    // Equal inputs mask equally, different ones differently.
    assert_eq!(email(rows[0]), email(rows[1]));
    assert_ne!(email(rows[0]), email(rows[2]));
    assert_eq!(rows[0].values[2], Value::Null);
    assert_eq!(rows[0].values[3], Value::Text("Ada".into()));
    assert_eq!(
        (rows[0].xid, rows[0].commit_time),
        (5, 1_700_000_000_000_005)
    );
}

#[test]
fn a_refused_setting_is_reported_at_load() {
    let spec = TransformSpec {
        plugin: plugin("mask"),
        config: vec![("colums".into(), "email".into())],
        ..Default::default()
    };
    let err = TransformChain::load(&[(spec, HostLimits::default())])
        .err()
        .expect("load must fail");
    assert!(matches!(err, TransformError::Init { .. }), "{err}");
    assert!(
        err.to_string().contains("unknown setting \"colums\""),
        "{err}"
    );
}

#[test]
fn a_missing_file_or_a_core_module_is_refused_with_its_path() {
    let missing = PathBuf::from("/nonexistent/plugin.wasm");
    let spec = TransformSpec {
        plugin: missing.clone(),
        config: vec![],
        ..Default::default()
    };
    let err = TransformChain::load(&[(spec, HostLimits::default())])
        .err()
        .expect("load must fail");
    assert!(matches!(err, TransformError::Read { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/plugin.wasm"),
        "{err}"
    );

    let path =
        std::env::temp_dir().join(format!("tributary-core-module-{}.wasm", std::process::id()));
    std::fs::write(&path, b"\0asm\x01\0\0\0").unwrap();
    let spec = TransformSpec {
        plugin: path.clone(),
        config: vec![],
        ..Default::default()
    };
    let err = TransformChain::load(&[(spec, HostLimits::default())])
        .err()
        .expect("load must fail");
    std::fs::remove_file(&path).ok();
    assert!(matches!(err, TransformError::Invalid { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("a core WebAssembly module, not a component"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

/// Emits that do not fit are errors naming plugin, output, column and LSN.
#[test]
fn rows_that_do_not_fit_their_output_are_refused() {
    use super::convert::Relations;
    use super::host::wit;

    let mut chain = load(&[("passthrough", &[])], &HostLimits::default());
    let stage = &mut chain.stages[0];
    let batch = batch_with_text(0x100, "x");
    let (relations, handles) = Relations::of(&batch);
    let at = |transaction, change| wit::ChangeRef {
        transaction,
        change,
    };
    let row = |target: wit::Target, sub, values: Vec<wit::Value>| {
        wit::Emit::Row(wit::Row {
            target,
            origin: wit::Origin::Change(at(0, 0)),
            sub,
            op: wit::Op::Insert,
            values,
            old: None,
        })
    };
    let good = || vec![wit::Value::Int4(1), wit::Value::Text("x".into())];
    let cases = [
        (
            wit::Emit::Keep(at(5, 0)),
            "it names transaction 5 of a batch of 2",
        ),
        (
            wit::Emit::Keep(at(0, 9)),
            "it names change 9 of transaction 0, which has 1",
        ),
        (
            row(wit::Target::Source(3), 0, good()),
            "the batch has no relation 3",
        ),
        (
            row(wit::Target::Declared("audit".into()), 0, good()),
            "output \"audit\" at commit lsn 0/100 that does not fit: the plugin did not declare",
        ),
        (
            row(wit::Target::Source(0), 0, vec![wit::Value::Int4(1)]),
            "the row has 1 values for 2 positions",
        ),
        (
            row(
                wit::Target::Source(0),
                0,
                vec![wit::Value::Text("1".into()), wit::Value::Null],
            ),
            "column \"id\") at commit lsn 0/100 that does not fit: a text value",
        ),
        (
            row(wit::Target::Source(0), 1, good()),
            "sub is 1: a table's output holds one row",
        ),
        (
            wit::Emit::Edit(wit::Edit {
                change: at(0, 0),
                values: vec![(7, wit::Value::Null)],
                old: vec![],
            }),
            "it edits position 7 of the row, which has 2 positions",
        ),
        (
            wit::Emit::Edit(wit::Edit {
                change: at(0, 0),
                values: vec![(0, wit::Value::Text("1".into()))],
                old: vec![],
            }),
            "(column \"id\") at commit lsn 0/100 that does not fit: a text value",
        ),
    ];
    for (bad, expected) in cases {
        let mut collector = super::route::Collector::default();
        let context = stage.context(&relations, &handles, Default::default());
        let err = super::route::route(&context, vec![bad.into()], batch.clone(), &mut collector)
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, TransformError::Emit { .. }), "{message}");
        assert!(message.contains("plugin \"passthrough\""), "{message}");
        assert!(
            message.contains(expected),
            "{message}\n  expected: {expected}"
        );
    }
}

/// Not a test: the cost of the typed boundary. Run with
/// `cargo test -p tributary --lib --release transform::tests::measure -- --ignored --nocapture`
/// (`TRIBUTARY_MEASURE=mask` for one chain alone, to profile it).
#[test]
#[ignore]
fn measure_passthrough_throughput() {
    // The rows of the benchmark's `inserts` table: an email and a 128-character note to mask.
    let orders = relation(
        1,
        "public",
        "bench_rows",
        &[
            ("id", 20, true),
            ("account", 23, false),
            ("amount", 1700, false),
            ("created_at", 1184, false),
            ("email", 25, false),
            ("note", 25, false),
        ],
    );
    let rows = 100_000u32;
    let transactions = (0..100u32)
        .map(|t| {
            let changes = (0..rows / 100)
                .map(|i| {
                    let g = t * 1000 + i;
                    let row = vec![
                        Value::Int8(i64::from(g)),
                        Value::Int4(g as i32 % 1000),
                        Value::Numeric("19.99".into()),
                        Value::TimestampTz(1_700_000_000_000_000),
                        Value::Text(format!("user{g}@example.com")),
                        Value::Text(
                            format!("{:032x}", u128::from(g) * 0x9e37_79b9_7f4a_7c15).repeat(4),
                        ),
                    ];
                    change(Op::Insert, &orders, i, Some(row), None)
                })
                .collect();
            tx(t, 0x1000 + u64::from(t) * 0x100, changes)
        })
        .collect();
    let batch = Batch {
        transactions,
        messages: Vec::new(),
    };
    let mut identity = TransformChain::load(&[]).unwrap();
    let mut chain = load(&[("passthrough", &[])], &HostLimits::default());
    chain.process(batch.clone()).outputs().unwrap();
    let mut mask = load(
        &[("mask", &[("columns", "email,note"), ("salt", "bench")])],
        &HostLimits::default(),
    );
    mask.process(batch.clone()).outputs().unwrap();
    let only = std::env::var("TRIBUTARY_MEASURE").ok();
    for (name, chain) in [
        ("identity", &mut identity),
        ("passthrough", &mut chain),
        ("mask", &mut mask),
    ] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let started = Instant::now();
        let runs = 3;
        for _ in 0..runs {
            let out = chain.process(batch.clone()).outputs().unwrap();
            assert_eq!(out[0].rows.len(), rows as usize);
        }
        let secs = started.elapsed().as_secs_f64() / f64::from(runs);
        println!(
            "{name}: {rows} rows in {:.1} ms = {:.0} rows/s",
            secs * 1e3,
            f64::from(rows) / secs
        );
    }
}

/// What a plugin may hand back is bounded by its memory cap, not by the runtime's default
/// budget for one call's returned data (128 MiB).
#[test]
fn a_plugin_returns_more_than_the_default_call_budget_when_its_memory_allows() {
    let limits = HostLimits {
        memory_bytes: 1 << 30,
        ..HostLimits::default()
    };
    // The trap plugin spells out every row it returns.
    let mut chain = load(&[("trap", &[])], &limits);
    let big = "x".repeat(160 << 20);
    let outputs = chain
        .process(batch_with_text(0x100, &big))
        .outputs()
        .unwrap();
    assert_eq!(outputs[0].rows[0].values[1], Value::Text(big));
}

/// Columns a reshape adds with a constant land it in every row, deletes included; one added as
/// not nullable that a row leaves null is refused, named with its plugin, output and column.
#[test]
fn added_columns_take_constants_and_a_null_where_one_is_not_nullable_is_refused() {
    let users = relation(
        7,
        "public",
        "users",
        &[("id", 23, true), ("email", 25, false)],
    );
    let row = |id| vec![Value::Int4(id), Value::Text(format!("{id}@x"))];
    let batch = Batch {
        transactions: vec![tx(
            1,
            0x100,
            vec![
                change(Op::Insert, &users, 0, Some(row(1)), None),
                change(Op::Update, &users, 1, Some(row(2)), Some(row(1))),
                change(Op::Delete, &users, 2, None, Some(row(2))),
                change(Op::Truncate, &users, 3, None, None),
            ],
        )],
        messages: Vec::new(),
    };
    let config: &[(&str, &str)] = &[("add", "region:text!=eu-west, tier:int4=2")];
    let out = load(&[("select", config)], &HostLimits::default())
        .process(batch.clone())
        .outputs()
        .unwrap();
    let rows = rows(&out, "public.users");
    let tagged = |id| {
        let mut r = row(id);
        r.extend([Value::Text("eu-west".into()), Value::Int4(2)]);
        r
    };
    assert_eq!(rows[0].values, tagged(1));
    assert_eq!(rows[1].values, tagged(2));
    assert_eq!(
        rows[1].old,
        Some([row(1), vec![Value::Null, Value::Null]].concat()),
        "an old image keeps what the change had"
    );
    assert_eq!((rows[2].op, &rows[2].values), (Op::Delete, &tagged(2)));
    assert_eq!(rows[3].op, Op::Truncate);

    let config: &[(&str, &str)] = &[("add", "region:text!")];
    let err = load(&[("select", config)], &HostLimits::default())
        .process(batch)
        .outputs()
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, TransformError::Emit { .. }), "{message}");
    assert!(message.contains("select"), "{message}");
    assert!(message.contains("region"), "{message}");
    assert!(
        message.contains(
            "the row leaves column region null, which the plugin's reshape adds as not nullable"
        ),
        "{message}"
    );
}
