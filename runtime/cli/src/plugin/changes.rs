//! The sample changes `tributary plugin test` runs a plugin on: JSON lines, one table, change,
//! message or commit per line, read into the [`Batch`] the pipeline would hand the plugins.
//!
//! ```text
//! {"table": "public.users", "columns": [["id", "int4", true], ["email", "text"]]}
//! {"table": "public.users", "op": "insert", "new": {"id": 1, "email": "a@x"}}
//! {"table": "public.users", "op": "update", "old": {"id": 1}, "new": {"id": 1, "email": "b@x"}}
//! {"commit": true}
//! {"table": "public.users", "op": "delete", "old": {"id": 1}}
//! ```
//!
//! The format is described for authors in [`FORMAT`] (the command's help) and in
//! `docs/plugins.md`; the two say the same.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value as Json};
use tributary::Lsn;
use tributary::stream::change::{Array, Batch, Change, Message, Op, Transaction, Value};
use tributary::wire::pgoutput::{Relation, RelationColumn, ReplicaIdentity};
use tributary::wire::pgtype::{self, ColumnType, oid};

/// The format, for the command's help.
pub const FORMAT: &str = "\
One JSON object per line; blank lines and lines starting with # are skipped.

  {\"table\": \"public.users\", \"columns\": [[\"id\", \"int4\", true], [\"email\", \"text\"]]}
      declares a table: each column is [name, type] or [name, type, key]; a table declared
      again later changes its columns from there on, as ALTER TABLE does. A name without a
      schema is in public. Types are PostgreSQL's names (int4, text, timestamptz, _int4) or
      SQL's (integer, bigint, varchar(20), numeric(10,2), text[]).
  {\"table\": \"public.users\", \"op\": \"insert\", \"new\": {\"id\": 1, \"email\": \"a@x\"}}
      a change: insert (new), update (new, optional old, optional \"unchanged\": [columns]
      left untouched as TOAST), delete (old) or truncate (no row). Columns left out are null.
  {\"message\": \"audit\", \"content\": \"text\", \"transactional\": true}
      a logical decoding message (transactional unless \"transactional\": false).
  {\"commit\": true}
      ends the transaction (optional \"time\": RFC 3339 text or microseconds since 1970).
      What comes after the last commit is one more transaction.

Values follow the column's type: JSON numbers for integers and floats, true/false, numeric
as a number or (exactly) as text, any JSON for json/jsonb, integers of days (date) or
microseconds (time, timestamp, timestamptz) or RFC 3339 text, bytea as hex (\\x00ff or 00ff),
interval as {\"months\", \"days\", \"micros\"}, arrays as JSON arrays; any other value as
PostgreSQL prints it. Transactions get made-up, increasing commit LSNs from 0/1000000.";

/// The first made-up LSN.
const FIRST_LSN: u64 = 0x0100_0000;
/// How far apart made-up WAL records are.
const LSN_STEP: u64 = 0x40;
/// The first table's made-up OID: the first one PostgreSQL gives user objects.
const FIRST_TABLE_OID: u32 = 16_384;
/// 2024-01-01 00:00:00 UTC in microseconds: the first made-up commit time.
const FIRST_COMMIT_TIME: i64 = 1_704_067_200_000_000;

/// Read sample changes into one batch. `source` names the input in errors (a file name, or
/// `stdin`).
pub fn read(source: &str, text: &str) -> anyhow::Result<Batch> {
    let mut reader = Reader::default();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        reader
            .line(number, line)
            .map_err(|problem| anyhow::anyhow!("{source} line {number}: {problem}"))?;
    }
    reader.finish(source)
}

#[derive(Default)]
struct Reader {
    /// Each table's relation as last declared.
    tables: HashMap<String, Arc<Relation>>,
    /// Each table's OID, kept across declarations.
    oids: HashMap<String, u32>,
    transactions: Vec<Transaction>,
    changes: Vec<Change>,
    messages: Vec<Message>,
    /// Non-transactional messages, with their line numbers.
    batch_messages: Vec<(usize, Message)>,
    /// Whether a change or message came after the last commit.
    open: bool,
    /// The last LSN handed out.
    lsn: u64,
}

impl Reader {
    fn line(&mut self, number: usize, line: &str) -> Result<(), String> {
        let json: Json = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let Json::Object(object) = json else {
            return Err(format!("expected a JSON object, got {}", kind(&json)));
        };
        if object.contains_key("commit") {
            self.commit(&object)
        } else if object.contains_key("message") {
            self.message(number, &object)
        } else if object.contains_key("columns") {
            self.table(&object)
        } else if object.contains_key("op") {
            self.change(&object)
        } else {
            Err(
                "expected a table (\"table\" and \"columns\"), a change (\"table\" and \"op\"), \
                 a message (\"message\") or {\"commit\": true}"
                    .into(),
            )
        }
    }

    fn next_lsn(&mut self) -> u64 {
        self.lsn = self.lsn.max(FIRST_LSN - LSN_STEP) + LSN_STEP;
        self.lsn
    }

    fn table(&mut self, object: &Map<String, Json>) -> Result<(), String> {
        only(object, &["table", "columns"])?;
        let name = qualified(string(object, "table")?);
        let Some(Json::Array(specs)) = object.get("columns") else {
            return Err("\"columns\" must be a list of [name, type] or [name, type, key]".into());
        };
        let mut columns: Vec<RelationColumn> = Vec::with_capacity(specs.len());
        for spec in specs {
            let (column, type_text, key) = column_spec(spec)?;
            if columns.iter().any(|c| c.name == column) {
                return Err(format!("column {column:?} is declared twice"));
            }
            let (type_oid, modifier) = type_named(type_text)?;
            columns.push(RelationColumn::new(column, type_oid, modifier, key));
        }
        if columns.is_empty() {
            return Err(format!("table {name} has no columns"));
        }
        let next = FIRST_TABLE_OID + self.oids.len() as u32;
        let id = *self.oids.entry(name.clone()).or_insert(next);
        let (namespace, table) = name.split_once('.').unwrap_or(("public", &name));
        let relation = Relation {
            id,
            namespace: namespace.to_owned(),
            name: table.to_owned(),
            replica_identity: ReplicaIdentity::Default,
            columns,
        };
        self.tables.insert(name, Arc::new(relation));
        Ok(())
    }

    fn change(&mut self, object: &Map<String, Json>) -> Result<(), String> {
        only(object, &["table", "op", "new", "old", "unchanged"])?;
        let name = qualified(string(object, "table")?);
        let relation = self.tables.get(&name).cloned().ok_or_else(|| {
            format!(
                "table {name} is not declared; declare it first with a line like \
                 {{\"table\": \"{name}\", \"columns\": [[\"id\", \"int4\", true]]}}"
            )
        })?;
        let op = match string(object, "op")? {
            "insert" => Op::Insert,
            "update" => Op::Update,
            "delete" => Op::Delete,
            "truncate" => Op::Truncate,
            other => {
                return Err(format!(
                    "op {other:?}: expected insert, update, delete or truncate"
                ));
            }
        };
        let has = |key: &str| object.get(key).is_some_and(|v| !v.is_null());
        let (wants_new, allows_old) = match op {
            Op::Insert => (true, false),
            Op::Update => (true, true),
            Op::Delete => (false, true),
            Op::Truncate | Op::Load => (false, false),
        };
        if wants_new != has("new") {
            return Err(match wants_new {
                true => format!("an {} needs \"new\", the row", op.as_str()),
                false => format!("a {} has no \"new\" row", op.as_str()),
            });
        }
        if op == Op::Delete && !has("old") {
            return Err("a delete needs \"old\", the old row or at least its key".into());
        }
        if !allows_old && has("old") {
            return Err(format!("an {} has no \"old\" row", op.as_str()));
        }
        if op != Op::Update && object.contains_key("unchanged") {
            return Err("only an update leaves columns \"unchanged\"".into());
        }
        let mut new = object
            .get("new")
            .filter(|v| !v.is_null())
            .map(|v| row(&relation, v, "new"))
            .transpose()?;
        let old = object
            .get("old")
            .filter(|v| !v.is_null())
            .map(|v| row(&relation, v, "old"))
            .transpose()?;
        if let (Some(row), Some(unchanged)) = (&mut new, object.get("unchanged")) {
            let given = object.get("new").and_then(Json::as_object);
            for name in strings(unchanged, "unchanged")? {
                let position = column_position(&relation, name, "unchanged")?;
                if given.is_some_and(|g| g.contains_key(name)) {
                    return Err(format!(
                        "column {name:?} is both in \"new\" and \"unchanged\""
                    ));
                }
                row[position] = Value::UnchangedToast;
            }
        }
        self.next_lsn();
        self.changes.push(Change {
            op,
            relation,
            seq: self.changes.len() as u32,
            new,
            old,
        });
        self.open = true;
        Ok(())
    }

    fn message(&mut self, number: usize, object: &Map<String, Json>) -> Result<(), String> {
        only(object, &["message", "content", "transactional"])?;
        let prefix = string(object, "message")?.to_owned();
        let content = match object.get("content") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::String(text)) => text.clone().into_bytes(),
            Some(other) => {
                return Err(format!("\"content\" must be text, got {}", kind(other)));
            }
        };
        let transactional = match object.get("transactional") {
            None => true,
            Some(Json::Bool(b)) => *b,
            Some(other) => {
                return Err(format!(
                    "\"transactional\" must be true or false, got {}",
                    kind(other)
                ));
            }
        };
        let lsn = Lsn(self.next_lsn());
        if transactional {
            self.messages.push(Message {
                prefix,
                content,
                lsn,
                before_seq: self.changes.len() as u32,
            });
            self.open = true;
        } else {
            let before_seq = self.transactions.len() as u32;
            self.batch_messages.push((
                number,
                Message {
                    prefix,
                    content,
                    lsn,
                    before_seq,
                },
            ));
        }
        Ok(())
    }

    fn commit(&mut self, object: &Map<String, Json>) -> Result<(), String> {
        only(object, &["commit", "time"])?;
        if object.get("commit") != Some(&Json::Bool(true)) {
            return Err("a commit is {\"commit\": true}".into());
        }
        let time = match object.get("time") {
            None | Some(Json::Null) => None,
            Some(Json::Number(n)) => Some(
                n.as_i64()
                    .ok_or("\"time\" must be whole microseconds since 1970")?,
            ),
            Some(Json::String(text)) => match timestamp_text(text, true) {
                Ok(Value::TimestampTz(micros)) => Some(micros),
                _ => {
                    return Err(format!(
                        "\"time\" {text:?}: expected RFC 3339 text like 2024-01-31T12:00:00Z"
                    ));
                }
            },
            Some(other) => {
                return Err(format!(
                    "\"time\" must be text or a number, got {}",
                    kind(other)
                ));
            }
        };
        self.close(time);
        Ok(())
    }

    fn close(&mut self, time: Option<i64>) {
        let n = self.transactions.len();
        let commit_lsn = self.next_lsn();
        let end_lsn = commit_lsn + 0x30;
        self.lsn = end_lsn;
        self.transactions.push(Transaction {
            xid: 1000 + n as u32,
            commit_lsn: Lsn(commit_lsn),
            end_lsn: Lsn(end_lsn),
            commit_time: time.unwrap_or(FIRST_COMMIT_TIME + n as i64 * 1_000_000),
            changes: std::mem::take(&mut self.changes),
            messages: std::mem::take(&mut self.messages),
            load: false,
        });
        self.open = false;
    }

    fn finish(mut self, source: &str) -> anyhow::Result<Batch> {
        if self.open {
            self.close(None);
        }
        if let Some((line, _)) = self
            .batch_messages
            .iter()
            .find(|(_, m)| m.before_seq as usize >= self.transactions.len())
        {
            anyhow::bail!(
                "{source} line {line}: a non-transactional message travels with the next \
                 transaction to commit, and none commits after it; add a change and \
                 {{\"commit\": true}} after it"
            );
        }
        Ok(Batch {
            transactions: self.transactions,
            messages: self.batch_messages.into_iter().map(|(_, m)| m).collect(),
        })
    }
}

/// Refuse keys other than `allowed`, so that a typo is not silently ignored.
fn only(object: &Map<String, Json>, allowed: &[&str]) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(format!(
            "unknown key {key:?} here; this kind of line takes {}",
            allowed
                .iter()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn string<'a>(object: &'a Map<String, Json>, key: &str) -> Result<&'a str, String> {
    match object.get(key) {
        Some(Json::String(s)) => Ok(s),
        Some(other) => Err(format!("{key:?} must be text, got {}", kind(other))),
        None => Err(format!("{key:?} is missing")),
    }
}

fn strings<'a>(value: &'a Json, key: &str) -> Result<Vec<&'a str>, String> {
    let error = || format!("{key:?} must be a list of column names");
    value
        .as_array()
        .ok_or_else(error)?
        .iter()
        .map(|v| v.as_str().ok_or_else(error))
        .collect()
}

/// `schema.table`, with `public` for a name without a schema.
fn qualified(name: &str) -> String {
    match name.contains('.') {
        true => name.to_owned(),
        false => format!("public.{name}"),
    }
}

/// What a JSON value is, for messages.
fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "true or false",
        Json::Number(_) => "a number",
        Json::String(_) => "text",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

/// `[name, type]`, `[name, type, key]` or `{"name", "type", "key"}`.
fn column_spec(spec: &Json) -> Result<(&str, &str, bool), String> {
    let bad = || {
        format!(
            "column {spec}: expected [name, type] or [name, type, key], like [\"id\", \"int4\", true]"
        )
    };
    let (name, ty, key) = match spec {
        Json::Array(parts) if (2..=3).contains(&parts.len()) => {
            (&parts[0], &parts[1], parts.get(2))
        }
        Json::Object(fields) => {
            if fields
                .keys()
                .any(|k| !["name", "type", "key"].contains(&k.as_str()))
            {
                return Err(bad());
            }
            (
                fields.get("name").ok_or_else(bad)?,
                fields.get("type").ok_or_else(bad)?,
                fields.get("key"),
            )
        }
        _ => return Err(bad()),
    };
    let (Json::String(name), Json::String(ty)) = (name, ty) else {
        return Err(bad());
    };
    let key = match key {
        None | Some(Json::Null) => false,
        Some(Json::Bool(b)) => *b,
        Some(_) => return Err(bad()),
    };
    Ok((name, ty, key))
}

/// SQL's spellings of built-in types, and the `typname` each stands for.
const ALIASES: &[(&str, &str)] = &[
    ("boolean", "bool"),
    ("smallint", "int2"),
    ("integer", "int4"),
    ("int", "int4"),
    ("serial", "int4"),
    ("bigint", "int8"),
    ("bigserial", "int8"),
    ("real", "float4"),
    ("double precision", "float8"),
    ("float", "float8"),
    ("decimal", "numeric"),
    ("character varying", "varchar"),
    ("character", "bpchar"),
    ("timestamp without time zone", "timestamp"),
    ("timestamp with time zone", "timestamptz"),
    ("time without time zone", "time"),
    ("time with time zone", "timetz"),
];

/// The built-in type OID and modifier a type name stands for: `int4`, `integer`,
/// `varchar(20)`, `numeric(10,2)`, `text[]`, `_text`.
pub fn type_named(text: &str) -> Result<(u32, i32), String> {
    let unknown = || {
        format!(
            "unknown type {text:?}: use a built-in PostgreSQL type by its name (int4, text, \
             timestamptz, _int4) or SQL's (integer, varchar(20), numeric(10,2), text[])"
        )
    };
    let lowered = text.trim().to_ascii_lowercase();
    let (base, array) = match lowered.strip_suffix("[]") {
        Some(base) => (base.trim_end(), true),
        None => (lowered.as_str(), false),
    };
    let (name, arguments) = match base.split_once('(') {
        Some((name, rest)) => {
            let arguments = rest.strip_suffix(')').ok_or_else(unknown)?;
            let numbers = arguments
                .split(',')
                .map(|n| n.trim().parse::<i32>().ok().filter(|n| *n >= 0))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(unknown)?;
            (name.trim_end(), Some(numbers))
        }
        None => (base, None),
    };
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, typname)| typname);
    let scalar = pgtype::builtin_types()
        .find(|&oid| pgtype::type_name(oid) == Some(name))
        .ok_or_else(unknown)?;
    let element = pgtype::array_element(scalar).unwrap_or(scalar);
    let modifier = match (element, arguments.as_deref()) {
        (_, None) => -1,
        (oid::NUMERIC, Some(&[precision])) => (precision << 16) + 4,
        (oid::NUMERIC, Some(&[precision, scale])) if scale <= precision => {
            ((precision << 16) | scale) + 4
        }
        (oid::VARCHAR | oid::BPCHAR, Some(&[length])) => length + 4,
        (oid::TIME | oid::TIMETZ | oid::TIMESTAMP | oid::TIMESTAMPTZ, Some(&[p])) if p <= 6 => p,
        _ => return Err(unknown()),
    };
    let type_oid = match array {
        false => scalar,
        true if pgtype::array_element(scalar).is_some() => {
            return Err(format!(
                "{text:?} is an array of arrays; write text[] for any dimensions"
            ));
        }
        true => pgtype::array_of(scalar).ok_or_else(unknown)?,
    };
    Ok((type_oid, modifier))
}

fn column_position(relation: &Relation, name: &str, what: &str) -> Result<usize, String> {
    relation
        .columns
        .iter()
        .position(|c| c.name == name)
        .ok_or_else(|| {
            format!(
                "{what}: table {} has no column {name:?} (it has {})",
                relation.qualified_name(),
                relation
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// A row given as `{"column": value}`: one value per column of the relation, null for those
/// left out.
fn row(relation: &Relation, json: &Json, what: &str) -> Result<Vec<Value>, String> {
    let Json::Object(fields) = json else {
        return Err(format!(
            "{what:?} must be an object of column values, got {}",
            kind(json)
        ));
    };
    let mut values = vec![Value::Null; relation.columns.len()];
    for (name, json) in fields {
        let position = column_position(relation, name, what)?;
        let column = &relation.columns[position];
        values[position] = value(&column.ty, json).map_err(|problem| {
            format!("{what} column {name:?} ({}): {problem}", label(&column.ty))
        })?;
    }
    Ok(values)
}

fn label(ty: &ColumnType) -> String {
    match ty.is_array() {
        true => format!("{}[]", pgtype::type_name(ty.scalar).unwrap_or("?")),
        false => ty.label(),
    }
}

/// A JSON value as a value of a column of type `ty`.
pub fn value(ty: &ColumnType, json: &Json) -> Result<Value, String> {
    match json {
        Json::Null => Ok(Value::Null),
        Json::String(text) => match ty.is_array() {
            true => pgtype::decode_text(ty, text.as_bytes()).map_err(|e| e.to_string()),
            false => scalar(ty, json),
        },
        Json::Array(items) if ty.is_array() => {
            let element = ColumnType {
                dims: 0,
                ..ty.clone()
            };
            let mut dims = Vec::new();
            let mut elements = Vec::new();
            array(&element, items, 0, &mut dims, &mut elements)?;
            Ok(Value::Array(Box::new(Array { dims, elements })))
        }
        _ if ty.is_array() => Err(format!(
            "expected a list, or an array as PostgreSQL prints it ({{1,2}}), got {}",
            kind(json)
        )),
        _ => scalar(ty, json),
    }
}

/// The elements of a (possibly nested) JSON array, checking that every sub-array of one
/// level has the same length.
fn array(
    element: &ColumnType,
    items: &[Json],
    depth: usize,
    dims: &mut Vec<u32>,
    out: &mut Vec<Value>,
) -> Result<(), String> {
    match dims.get(depth) {
        None if items.is_empty() && depth == 0 => return Ok(()),
        None => dims.push(items.len() as u32),
        Some(&n) if n as usize != items.len() => {
            return Err("the sub-lists of a multi-dimensional array must all be as long".into());
        }
        Some(_) => {}
    }
    let nested = items.first().is_some_and(Json::is_array);
    for item in items {
        match (item, nested) {
            (Json::Array(inner), true) if !inner.is_empty() => {
                array(element, inner, depth + 1, dims, out)?
            }
            (Json::Array(_), _) | (_, true) => {
                return Err("a multi-dimensional array needs lists of the same shape".into());
            }
            (item, false) => {
                if dims.len() > depth + 1 {
                    return Err("a multi-dimensional array needs lists of the same shape".into());
                }
                out.push(match item {
                    Json::Null => Value::Null,
                    _ => scalar(element, item)?,
                });
            }
        }
    }
    Ok(())
}

/// A JSON value (not null) as a scalar of type `ty`.
fn scalar(ty: &ColumnType, json: &Json) -> Result<Value, String> {
    let from_text =
        |text: &str| pgtype::decode_text(ty, text.as_bytes()).map_err(|e| e.to_string());
    let integer = |lo: i64, hi: i64| -> Result<i64, String> {
        json.as_i64()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| format!("expected a whole number from {lo} to {hi}, got {json}"))
    };
    let wrong = |expected: &str| Err(format!("expected {expected}, got {}", kind(json)));
    match (ty.scalar, json) {
        (oid::JSON | oid::JSONB, _) => Ok(Value::Json(json.to_string())),
        (_, Json::String(text)) => match ty.scalar {
            oid::BYTEA if !text.starts_with("\\x") => from_text(&format!("\\x{text}")),
            oid::TIMESTAMP => timestamp_text(text, false),
            oid::TIMESTAMPTZ => timestamp_text(text, true),
            _ => from_text(text),
        },
        (oid::BOOL, Json::Bool(b)) => Ok(Value::Bool(*b)),
        (oid::BOOL, _) => wrong("true or false"),
        (oid::INT2, Json::Number(_)) => Ok(Value::Int2(
            integer(i16::MIN.into(), i16::MAX.into())? as i16
        )),
        (oid::INT4, Json::Number(_)) => Ok(Value::Int4(
            integer(i32::MIN.into(), i32::MAX.into())? as i32
        )),
        (oid::INT8, Json::Number(_)) => Ok(Value::Int8(integer(i64::MIN, i64::MAX)?)),
        (oid::OID, Json::Number(_)) => Ok(Value::Int8(integer(0, u32::MAX.into())?)),
        (oid::FLOAT4, Json::Number(n)) => Ok(Value::Float4(n.as_f64().unwrap_or(f64::NAN) as f32)),
        (oid::FLOAT8, Json::Number(n)) => Ok(Value::Float8(n.as_f64().unwrap_or(f64::NAN))),
        (oid::NUMERIC | oid::MONEY, Json::Number(n)) => Ok(Value::Numeric(n.to_string())),
        (oid::DATE, Json::Number(_)) => Ok(Value::Date(
            integer(i32::MIN.into(), i32::MAX.into())? as i32
        )),
        (oid::TIME, Json::Number(_)) => Ok(Value::Time(integer(0, 86_400_000_000)?)),
        (oid::TIMESTAMP, Json::Number(_)) => Ok(Value::Timestamp(integer(i64::MIN, i64::MAX)?)),
        (oid::TIMESTAMPTZ, Json::Number(_)) => Ok(Value::TimestampTz(integer(i64::MIN, i64::MAX)?)),
        (oid::INTERVAL, Json::Object(fields)) => {
            if let Some(key) = fields
                .keys()
                .find(|k| !["months", "days", "micros"].contains(&k.as_str()))
            {
                return Err(format!(
                    "unknown interval field {key:?}: expected months, days, micros"
                ));
            }
            let field = |key: &str| -> Result<i64, String> {
                match fields.get(key) {
                    None => Ok(0),
                    Some(v) => v
                        .as_i64()
                        .ok_or_else(|| format!("interval {key} must be a whole number")),
                }
            };
            let small = |key: &str| -> Result<i32, String> {
                i32::try_from(field(key)?).map_err(|_| format!("interval {key} out of range"))
            };
            Ok(Value::Interval {
                months: small("months")?,
                days: small("days")?,
                micros: field("micros")?,
            })
        }
        (oid::INTERVAL, _) => wrong(
            "an interval as PostgreSQL prints it (1 day 02:00:00) or {\"months\", \"days\", \"micros\"}",
        ),
        (
            oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::OID
            | oid::FLOAT4
            | oid::FLOAT8
            | oid::NUMERIC
            | oid::MONEY,
            _,
        ) => wrong("a number"),
        (oid::DATE, _) => wrong("days since 1970-01-01 or text like 2024-01-31"),
        (oid::TIME | oid::TIMESTAMP | oid::TIMESTAMPTZ, _) => {
            wrong("microseconds or RFC 3339 text like 2024-01-31T12:00:00Z")
        }
        (scalar, _) if pgtype::is_text_like(scalar) || pgtype::type_name(scalar).is_some() => {
            wrong("text")
        }
        // A type the host keeps as text: whatever JSON was given, as JSON text.
        _ => Ok(Value::Other(json.to_string())),
    }
}

/// A timestamp written as RFC 3339 (`2024-01-31T12:00:00.5Z`, `...+05:30`) or as PostgreSQL
/// prints it (`2024-01-31 12:00:00.5+00`).
fn timestamp_text(text: &str, with_offset: bool) -> Result<Value, String> {
    let mut text = text.trim().to_owned();
    if text.len() > 10 && matches!(text.as_bytes()[10], b'T' | b't') {
        text.replace_range(10..11, " ");
    }
    if let Some(stripped) = text.strip_suffix(['Z', 'z']) {
        text = match with_offset {
            true => format!("{stripped}+00"),
            false => stripped.to_owned(),
        };
    }
    let ty = ColumnType::builtin(
        if with_offset {
            oid::TIMESTAMPTZ
        } else {
            oid::TIMESTAMP
        },
        -1,
    );
    pgtype::decode_text(&ty, text.as_bytes()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(text: &str) -> Batch {
        read("changes.jsonl", text).expect("the sample reads")
    }

    fn error(text: &str) -> String {
        format!(
            "{:#}",
            read("changes.jsonl", text).expect_err("the sample is refused")
        )
    }

    const USERS: &str = r#"{"table": "users", "columns": [["id", "int4", true], ["email", "text"], ["tags", "text[]"]]}"#;

    #[test]
    fn changes_form_transactions_with_increasing_commits() {
        let b = batch(&format!(
            "{USERS}\n\
             # a comment\n\
             {{\"table\": \"users\", \"op\": \"insert\", \"new\": {{\"id\": 1, \"email\": \"a@x\", \"tags\": [\"a\", null]}}}}\n\
             {{\"table\": \"public.users\", \"op\": \"update\", \"old\": {{\"id\": 1}}, \"new\": {{\"id\": 2}}, \"unchanged\": [\"email\"]}}\n\
             {{\"commit\": true}}\n\
             \n\
             {{\"table\": \"users\", \"op\": \"delete\", \"old\": {{\"id\": 2}}}}\n\
             {{\"table\": \"users\", \"op\": \"truncate\"}}\n"
        ));
        assert_eq!(b.transactions.len(), 2);
        let (first, second) = (&b.transactions[0], &b.transactions[1]);
        assert!(first.commit_lsn < second.commit_lsn);
        assert!(first.commit_lsn < first.end_lsn && first.end_lsn < second.commit_lsn);
        assert_eq!(first.changes.len(), 2);
        assert_eq!(second.changes.len(), 2);
        assert_eq!(second.changes[1].seq, 1);
        let relation = &first.changes[0].relation;
        assert_eq!(relation.qualified_name(), "public.users");
        assert!(relation.columns[0].key && !relation.columns[1].key);
        assert!(Arc::ptr_eq(relation, &second.changes[0].relation));
        let insert = first.changes[0].new.as_ref().unwrap();
        assert_eq!(insert[0], Value::Int4(1));
        assert_eq!(insert[1], Value::Text("a@x".into()));
        assert_eq!(
            insert[2],
            Value::Array(Box::new(Array {
                dims: vec![2],
                elements: vec![Value::Text("a".into()), Value::Null]
            }))
        );
        let update = &first.changes[1];
        assert_eq!(
            update.new.as_deref(),
            Some(&[Value::Int4(2), Value::UnchangedToast, Value::Null][..])
        );
        assert_eq!(
            update.old.as_deref(),
            Some(&[Value::Int4(1), Value::Null, Value::Null][..])
        );
        assert_eq!(second.changes[1].op, Op::Truncate);
        assert!(second.changes[1].new.is_none() && second.changes[1].old.is_none());
    }

    #[test]
    fn values_follow_their_column_type() {
        let cases: &[(&str, &str, Value)] = &[
            (
                "int8",
                "9007199254740993",
                Value::Int8(9_007_199_254_740_993),
            ),
            ("bigint", "\"-5\"", Value::Int8(-5)),
            ("float4", "0.5", Value::Float4(0.5)),
            ("double precision", "\"NaN\"", Value::Float8(f64::NAN)),
            ("bool", "true", Value::Bool(true)),
            ("numeric(10,2)", "12.5", Value::Numeric("12.5".into())),
            ("numeric", "\"-0.100\"", Value::Numeric("-0.100".into())),
            ("varchar(20)", "\"hi\"", Value::Text("hi".into())),
            (
                "jsonb",
                "{\"a\": [1, 2]}",
                Value::Json("{\"a\":[1,2]}".into()),
            ),
            ("json", "\"x\"", Value::Json("\"x\"".into())),
            (
                "uuid",
                "\"00112233-4455-6677-8899-AABBCCDDEEFF\"",
                Value::Uuid([
                    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
                    0xdd, 0xee, 0xff,
                ]),
            ),
            ("date", "1", Value::Date(1)),
            ("date", "\"1970-01-03\"", Value::Date(2)),
            ("time", "\"00:00:01.5\"", Value::Time(1_500_000)),
            (
                "timestamp",
                "\"1970-01-01T00:00:01\"",
                Value::Timestamp(1_000_000),
            ),
            (
                "timestamptz",
                "\"1970-01-01T01:00:00+01:00\"",
                Value::TimestampTz(0),
            ),
            (
                "timestamptz",
                "\"1970-01-01T00:00:00.25Z\"",
                Value::TimestampTz(250_000),
            ),
            ("timestamptz", "7", Value::TimestampTz(7)),
            ("bytea", "\"00ff\"", Value::Bytea(vec![0, 255])),
            ("bytea", "\"\\\\x0a\"", Value::Bytea(vec![10])),
            (
                "interval",
                "{\"days\": 1, \"micros\": 5}",
                Value::Interval {
                    months: 0,
                    days: 1,
                    micros: 5,
                },
            ),
            (
                "interval",
                "\"1 mon 02:00:00\"",
                Value::Interval {
                    months: 1,
                    days: 0,
                    micros: 7_200_000_000,
                },
            ),
            ("point", "\"(1,2)\"", Value::Other("(1,2)".into())),
            (
                "int4[]",
                "[[1, 2], [3, null]]",
                Value::Array(Box::new(Array {
                    dims: vec![2, 2],
                    elements: vec![Value::Int4(1), Value::Int4(2), Value::Int4(3), Value::Null],
                })),
            ),
            (
                "_int4",
                "\"{1,2}\"",
                Value::Array(Box::new(Array::from_elements(vec![
                    Value::Int4(1),
                    Value::Int4(2),
                ]))),
            ),
            (
                "text[]",
                "[]",
                Value::Array(Box::new(Array::from_elements(vec![]))),
            ),
        ];
        for (type_text, json, want) in cases {
            let (type_oid, modifier) = type_named(type_text).unwrap();
            let ty = ColumnType::builtin(type_oid, modifier);
            let json: Json = serde_json::from_str(json).unwrap();
            let got = value(&ty, &json).unwrap_or_else(|e| panic!("{type_text} {json}: {e}"));
            match (&got, want) {
                (Value::Float8(a), Value::Float8(b)) if b.is_nan() => assert!(a.is_nan()),
                _ => assert_eq!(&got, want, "{type_text} {json}"),
            }
        }
    }

    #[test]
    fn type_names_carry_their_modifiers() {
        assert_eq!(type_named("integer"), Ok((oid::INT4, -1)));
        assert_eq!(
            type_named("numeric(12, 2)"),
            Ok((oid::NUMERIC, (12 << 16 | 2) + 4))
        );
        assert_eq!(type_named("varchar(20)"), Ok((oid::VARCHAR, 24)));
        assert_eq!(
            type_named("TEXT[]"),
            Ok((pgtype::array_of(oid::TEXT).unwrap(), -1))
        );
        assert_eq!(type_named("_text"), type_named("text[]"));
        for bad in ["intx", "int4(3)", "numeric(2,3)", "_text[]", "varchar(", ""] {
            let error = type_named(bad).expect_err(bad);
            assert!(
                error.contains("unknown type") || error.contains("array of arrays"),
                "{error}"
            );
        }
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases: &[(&str, &str)] = &[
            (
                "{\"table\": \"users\", \"op\": \"insert\"",
                "line 2: not JSON",
            ),
            ("[1]", "line 2: expected a JSON object"),
            ("{\"hello\": 1}", "line 2: expected a table"),
            (
                "{\"table\": \"t\", \"op\": \"insert\", \"new\": {}}",
                "line 2: table public.t is not declared",
            ),
            (
                "{\"table\": \"users\", \"op\": \"upsert\", \"new\": {}}",
                "op \"upsert\"",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\", \"nwe\": {}}",
                "unknown key \"nwe\"",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\"}",
                "an insert needs \"new\"",
            ),
            (
                "{\"table\": \"users\", \"op\": \"delete\", \"new\": {\"id\": 1}}",
                "a delete has no \"new\"",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\", \"new\": {\"mail\": 1}}",
                "no column \"mail\"",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\", \"new\": {\"id\": \"x\"}}",
                "line 2: new column \"id\" (int4): cannot read \"x\" as int4",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\", \"new\": {\"id\": 3000000000}}",
                "expected a whole number from",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\", \"new\": {\"email\": 5}}",
                "expected text, got a number",
            ),
            (
                "{\"table\": \"users\", \"op\": \"insert\", \"new\": {\"tags\": [[\"a\"], \"b\"]}}",
                "same shape",
            ),
            ("{\"commit\": false}", "a commit is"),
            (
                "{\"table\": \"u\", \"columns\": [[\"a\", \"nope\"]]}",
                "unknown type \"nope\"",
            ),
            (
                "{\"table\": \"u\", \"columns\": [[\"a\", \"int4\"], [\"a\", \"text\"]]}",
                "declared twice",
            ),
            (
                "{\"message\": \"m\", \"transactional\": false}",
                "line 2: a non-transactional message",
            ),
        ];
        for (line, want) in cases {
            let error = error(&format!("{USERS}\n{line}\n"));
            assert!(error.contains(want), "{line}: {error}");
            assert!(
                error.starts_with("changes.jsonl line 2: "),
                "{line}: {error}"
            );
        }
    }

    #[test]
    fn messages_are_placed_among_changes_and_transactions() {
        let b = batch(&format!(
            "{USERS}\n\
             {{\"message\": \"early\", \"content\": \"n\", \"transactional\": false}}\n\
             {{\"message\": \"audit\", \"content\": \"who\"}}\n\
             {{\"table\": \"users\", \"op\": \"insert\", \"new\": {{\"id\": 1}}}}\n\
             {{\"message\": \"after\"}}\n\
             {{\"commit\": true, \"time\": \"2024-02-01T00:00:00Z\"}}\n"
        ));
        let tx = &b.transactions[0];
        assert_eq!(tx.messages.len(), 2);
        assert_eq!(
            (tx.messages[0].before_seq, tx.messages[1].before_seq),
            (0, 1)
        );
        assert_eq!(tx.messages[0].content, b"who");
        assert!(tx.messages[1].lsn.0 < tx.commit_lsn.0);
        assert_eq!(b.messages.len(), 1);
        assert_eq!(b.messages[0].before_seq, 0);
        assert_eq!(tx.commit_time, 1_706_745_600_000_000);
    }

    #[test]
    fn a_table_declared_again_keeps_its_oid_and_changes_its_columns() {
        let b = batch(&format!(
            "{USERS}\n\
             {{\"table\": \"users\", \"op\": \"insert\", \"new\": {{\"id\": 1}}}}\n\
             {{\"table\": \"users\", \"columns\": [[\"id\", \"int8\", true]]}}\n\
             {{\"table\": \"users\", \"op\": \"insert\", \"new\": {{\"id\": 2}}}}\n\
             {{\"table\": \"orders\", \"columns\": [[\"id\", \"int8\", true]]}}\n\
             {{\"table\": \"orders\", \"op\": \"insert\", \"new\": {{\"id\": 3}}}}\n"
        ));
        let changes = &b.transactions[0].changes;
        assert_eq!(changes[0].relation.id, changes[1].relation.id);
        assert_ne!(changes[0].relation.id, changes[2].relation.id);
        assert_eq!(changes[1].new.as_ref().unwrap()[0], Value::Int8(2));
        assert_eq!(changes[1].relation.columns.len(), 1);
    }
}
