//! Reading the journal in ticks (docs/design.md, Capture without a slot): a tick is the
//! server's snapshot, and a batch is the rows of the transactions visible in one tick and not
//! in the one before. Every such transaction has ended, so its rows are all there, and the
//! same two ticks give the same batch however often it is read.

use std::collections::{BTreeMap, HashMap};

use futures::TryStreamExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, RowStream};

use super::journal::{JournalRow, JournalTxn, Layout, LayoutColumn, Op};
use super::query;
use crate::source::provision::ProvisionError;
use crate::source::quote::quote_ident;

/// A tick: a snapshot of the server, as `pg_snapshot`'s text (`xmin:xmax:xip,...`), and the
/// server's time when it was taken (microseconds since the Unix epoch): what its batch's
/// transactions give as their commit time, which they committed before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub snapshot: String,
    pub taken_us: i64,
}

/// The server's snapshot now.
pub async fn take_tick(client: &Client) -> Result<Tick, ProvisionError> {
    let row = client
        .query_one(
            "SELECT pg_current_snapshot()::text, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        )
        .await
        .map_err(query("taking a tick (pg_current_snapshot)"))?;
    Ok(Tick {
        snapshot: row.get(0),
        taken_us: row.get(1),
    })
}

/// The condition on journal rows of the transactions visible in `$1` and not in `$2`.
const BETWEEN: &str = "pg_visible_in_snapshot(xid, $1::text::pg_snapshot)
    AND NOT coalesce(pg_visible_in_snapshot(xid, $2::text::pg_snapshot), false)";

/// Whether any transaction visible in `tick` and not in `after` wrote to the journal.
pub async fn any_between(
    client: &Client,
    schema: &str,
    after: Option<&Tick>,
    tick: &Tick,
) -> Result<bool, ProvisionError> {
    let journal = format!("{}.journal", quote_ident(schema));
    Ok(client
        .query_one(
            &format!("SELECT EXISTS (SELECT 1 FROM {journal} WHERE {BETWEEN})"),
            &[&tick.snapshot, &after.map(|t| t.snapshot.as_str())],
        )
        .await
        .map_err(query(format!(
            "looking for new rows in the journal {journal}"
        )))?
        .get(0))
}

/// The rows of the transactions visible in `tick` and not in `after` (every one before
/// `tick` when `after` is `None`) as they arrive, the transactions ordered by their last
/// journal `seq`, each one's rows in `seq` order, each row with its transaction (see
/// [`journal_row`]). The server sorts; the rows stream in as they are taken.
pub async fn batch_rows(
    client: &Client,
    schema: &str,
    after: Option<&Tick>,
    tick: &Tick,
) -> Result<RowStream, ProvisionError> {
    let journal = format!("{}.journal", quote_ident(schema));
    let after = after.map(|t| t.snapshot.as_str());
    let params: [&(dyn ToSql + Sync); 2] = [&tick.snapshot, &after];
    client
        .query_raw(
            &format!(
                "SELECT seq, xid::text::bigint, rel::bigint, op::text, layout, old, new
                   FROM {journal}
                  WHERE {BETWEEN}
                  ORDER BY max(seq) OVER (PARTITION BY xid), seq"
            ),
            params,
        )
        .await
        .map_err(query(format!("reading the journal {journal}")))
}

/// A row of [`batch_rows`]: its transaction (`pg_current_xact_id()`) and what it records.
pub fn journal_row(row: &Row) -> Result<(u64, JournalRow), ProvisionError> {
    let op: &str = row.get(3);
    let op = Op::from_letter(op.as_bytes().first().copied().unwrap_or(0)).ok_or_else(|| {
        ProvisionError::Journal(format!(
            "row {} has op {op:?}, which is none of I, U, D, T",
            row.get::<_, i64>(0)
        ))
    })?;
    let journal_row = JournalRow {
        seq: row.get(0),
        rel: row.get::<_, i64>(2) as u32,
        op,
        layout: row.get(4),
        old: row.get(5),
        new: row.get(6),
    };
    Ok((row.get::<_, i64>(1) as u64, journal_row))
}

/// The transactions of [`batch_rows`], read whole.
pub async fn read_batch(
    client: &Client,
    schema: &str,
    after: Option<&Tick>,
    tick: &Tick,
) -> Result<Vec<JournalTxn>, ProvisionError> {
    let rows = batch_rows(client, schema, after, tick).await?;
    futures::pin_mut!(rows);
    let mut txns: Vec<JournalTxn> = Vec::new();
    while let Some(row) = rows
        .try_next()
        .await
        .map_err(query(format!("reading the journal of schema {schema:?}")))?
    {
        let (xid, row) = journal_row(&row)?;
        match txns.last_mut() {
            Some(txn) if txn.xid == xid => txn.rows.push(row),
            _ => txns.push(JournalTxn {
                xid,
                rows: vec![row],
            }),
        }
    }
    Ok(txns)
}

/// Every layout recorded in `schema` but those in `known`, with their tables' names as they
/// are now. A batch's rows name only layouts their own transactions recorded or found, so
/// reading them after the batch's tick was taken finds each one.
pub async fn read_layouts_except(
    client: &Client,
    schema: &str,
    known: &[i32],
) -> Result<HashMap<i32, Layout>, ProvisionError> {
    layouts_where(client, schema, "NOT (l.id = ANY($1))", known).await
}

/// The layouts `ids`, with their tables' names as they are now.
pub async fn read_layouts(
    client: &Client,
    schema: &str,
    ids: &[i32],
) -> Result<HashMap<i32, Layout>, ProvisionError> {
    layouts_where(client, schema, "l.id = ANY($1)", ids).await
}

/// The layouts `filter` (on `l`, given `ids` as `$1`) selects.
async fn layouts_where(
    client: &Client,
    schema: &str,
    filter: &str,
    ids: &[i32],
) -> Result<HashMap<i32, Layout>, ProvisionError> {
    let layouts = format!("{}.layouts", quote_ident(schema));
    let rows = client
        .query(
            &format!(
                "SELECT l.id, l.rel::bigint, n.nspname::text, c.relname::text, l.identity::text,
                        l.names, l.types::bigint[], l.modifiers, l.keys
                   FROM {layouts} l
                   JOIN pg_class c ON c.oid = l.rel
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE {filter}"
            ),
            &[&ids],
        )
        .await
        .map_err(query(format!("reading the layouts {layouts}")))?;
    let mut out = HashMap::new();
    for row in rows {
        let names: Vec<String> = row.get(5);
        let types: Vec<i64> = row.get(6);
        let modifiers: Vec<i32> = row.get(7);
        let keys: Vec<bool> = row.get(8);
        let identity: String = row.get(4);
        let layout = Layout {
            id: row.get(0),
            rel: row.get::<_, i64>(1) as u32,
            namespace: row.get(2),
            name: row.get(3),
            identity: identity.as_bytes().first().copied().unwrap_or(b'd'),
            columns: names
                .into_iter()
                .zip(types)
                .zip(modifiers)
                .zip(keys)
                .map(|(((name, type_oid), modifier), key)| LayoutColumn {
                    name,
                    type_oid: type_oid as u32,
                    modifier,
                    key,
                })
                .collect(),
        };
        out.insert(layout.id, layout);
    }
    Ok(out)
}

/// The layouts the rows of `txns` name.
pub fn layout_ids(txns: &[JournalTxn]) -> Vec<i32> {
    let ids: BTreeMap<i32, ()> = txns
        .iter()
        .flat_map(|t| t.rows.iter().filter_map(|r| r.layout))
        .map(|id| (id, ()))
        .collect();
    ids.into_keys().collect()
}
