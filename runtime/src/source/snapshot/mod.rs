//! The source as it was at one exact WAL position, and its tables read out as typed values.
//!
//! [`Snapshot::take`] opens a replication connection, creates a *temporary* logical slot that
//! exports its snapshot, and imports that snapshot into a `REPEATABLE READ` transaction on an
//! ordinary SQL connection. The slot's consistent point `P` then divides the WAL exactly:
//! every transaction whose commit record lies before `P` is visible in the snapshot, and
//! every later one is what a slot created at `P` would decode (the snapshot is built from the
//! WAL by logical decoding itself, not from the process array). Once imported, the snapshot
//! belongs to the transaction, so the slot is dropped at once; being temporary, it would also
//! go with its connection if the process died first. Nothing is left on the server.
//!
//! [`Snapshot::table`] reads what a table is inside the snapshot: its columns resolved to the
//! same [`ColumnType`](crate::wire::pgtype::ColumnType)s the pipeline lands (through
//! [`Catalog`]), its key, and what a publication restricts (column lists and row filters,
//! PostgreSQL 15 and later). [`Snapshot::rows`] streams the table with
//! `COPY (SELECT ...) TO STDOUT (FORMAT binary)`, decoded by the same binary decoders as
//! `binary 'true'` pgoutput tuples (columns of types read only as text are selected as text
//! and decoded from their text form, under the session settings of the replication
//! connection). `tributary verify` reads the source this way; a full load would too.

mod copy;

use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use tokio_postgres::{Client, CopyOutStream};

use crate::Lsn;
use crate::source::catalog::Catalog;
use crate::source::provision::ProvisionError;
use crate::source::provision::query_error as query;
use crate::source::replication::ReplicationError;
use crate::stream::change::{OutputColumn, Value};
use crate::wire::pgoutput::{Relation, RelationColumn, ReplicaIdentity};
use crate::wire::pgtype::{self, ColumnType, ValueError};

pub use crate::stream::load::Pages;
pub use copy::{CopyError, CopyReader, CopyRow};

/// The settings pgoutput's text values are printed under (see the replication connection):
/// columns read as text are printed the same way here.
const SESSION_SETTINGS: &str = "SET DateStyle = 'ISO'; SET TimeZone = 'UTC'; \
     SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; SET bytea_output = 'hex'";

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "cannot create a temporary slot for a consistent snapshot: {0} (the source needs a free replication slot, max_replication_slots, and a role with REPLICATION)"
    )]
    Slot(ReplicationError),
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error(
        "table {table} has more than 4294967295 rows in one chunk of a full load; a load numbers a chunk's rows in 32 bits"
    )]
    TooLarge { table: String },
    #[error("table {table} does not exist in the source")]
    NoTable { table: String },
    #[error("reading table {table}: {source}")]
    Copy {
        table: String,
        #[source]
        source: CopyError,
    },
    #[error("reading table {table} column {column:?}: {source}")]
    Value {
        table: String,
        column: String,
        #[source]
        source: ValueError,
    },
}

/// A name for a temporary slot of this process, for `purpose` (`verify`, `load`).
pub fn temporary_slot_name(purpose: &str) -> String {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    let random: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("tributary_{purpose}_{}_{random}", std::process::id())
}

/// A table of the source, as the snapshot sees it.
#[derive(Debug, Clone)]
pub struct SourceTable {
    /// `schema.table`, the name of its output in the lake.
    pub name: String,
    /// The published columns, in table order, typed as the pipeline lands them.
    pub columns: Arc<[OutputColumn]>,
    /// Positions in `columns` of the columns that identify a row in the changes the
    /// pipeline receives: the replica identity index, or the primary key (also under
    /// `REPLICA IDENTITY FULL`); empty when the table has neither.
    pub key: Vec<usize>,
    pub identity: ReplicaIdentity,
    /// Positions in `columns` of the columns whose type PostgreSQL may store out of line.
    pub toastable: Vec<usize>,
    /// The publication's row filter (PostgreSQL 15 and later), as SQL.
    pub row_filter: Option<String>,
    oid: u32,
    partitioned: bool,
}

impl SourceTable {
    /// The relation load rows of the table belong to, shaped as pgoutput describes the table, so
    /// that load rows and streamed changes land in one dataset with one schema.
    pub fn relation(&self) -> Relation {
        let (namespace, name) = self
            .name
            .split_once('.')
            .expect("tracked tables are named schema.table");
        let columns = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                // The stream's key: the replica identity's columns, the primary key under
                // FULL (see `Catalog::row_key`).
                let key = match self.identity {
                    ReplicaIdentity::Nothing => false,
                    _ => self.key.contains(&i),
                };
                let mut column =
                    RelationColumn::new(c.name.clone(), c.type_oid, c.type_modifier, key);
                column.ty = c.ty.clone();
                column
            })
            .collect();
        Relation {
            id: self.oid(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            replica_identity: self.identity,
            columns,
        }
    }

    /// The table's OID.
    pub fn oid(&self) -> u32 {
        self.oid
    }

    /// A partitioned table: its rows live in its partitions.
    pub fn partitioned(&self) -> bool {
        self.partitioned
    }

    /// The names of the key columns.
    pub fn key_names(&self) -> Vec<&str> {
        self.key
            .iter()
            .map(|&i| self.columns[i].name.as_str())
            .collect()
    }
}

/// A `REPEATABLE READ` transaction on the source that sees exactly the transactions committed
/// before [`consistent_point`](Self::consistent_point).
pub struct Snapshot {
    client: Client,
    consistent_point: Lsn,
}

impl Snapshot {
    /// Take a snapshot of the source at `pg` through a temporary slot named `slot`. Creating a
    /// logical slot waits until the transactions running at that moment have ended.
    pub async fn take(
        pg: &crate::source::connect::PgConfig,
        slot: &str,
    ) -> Result<Snapshot, SnapshotError> {
        Self::take_with(pg, slot, false, false).await
    }

    /// [`take`](Self::take), the slot kept when `keep` (a pipeline's own slot, created for a
    /// full load: it then streams from exactly where the snapshot stands), and created as a
    /// failover slot when `failover` too (`source.failover`).
    pub async fn take_with(
        pg: &crate::source::connect::PgConfig,
        slot: &str,
        keep: bool,
        failover: bool,
    ) -> Result<Snapshot, SnapshotError> {
        let mut replication = crate::source::connect::replication(pg)
            .await
            .map_err(SnapshotError::Slot)?;
        let created = match keep {
            true if failover => replication.create_failover_slot(slot, true).await,
            true => {
                replication
                    .create_logical_slot_exporting_snapshot(slot)
                    .await
            }
            false => {
                replication
                    .create_temporary_slot_exporting_snapshot(slot)
                    .await
            }
        }
        .map_err(SnapshotError::Slot)?;
        let Some(name) = created.snapshot_name else {
            return Err(SnapshotError::Slot(ReplicationError::Protocol(
                "the server created the slot but exported no snapshot".into(),
            )));
        };
        let snapshot = Self::import(pg, &name, created.consistent_point).await?;
        // The transaction holds the snapshot now; a temporary slot has done its work.
        if !keep {
            replication
                .drop_slot(slot)
                .await
                .map_err(SnapshotError::Slot)?;
        }
        drop(replication);
        Ok(snapshot)
    }

    /// Join snapshot `name`, exported by another session that still holds it (a slot's
    /// creation, or [`export`](Self::export)), which stands at `consistent_point`.
    pub async fn import(
        pg: &crate::source::connect::PgConfig,
        name: &str,
        consistent_point: Lsn,
    ) -> Result<Snapshot, SnapshotError> {
        let client = crate::source::connect::sql(pg).await?;
        client
            .batch_execute(&format!(
                "{SESSION_SETTINGS}; BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
                 SET TRANSACTION SNAPSHOT {}",
                crate::source::quote_literal(name)
            ))
            .await
            .map_err(query(format!("importing snapshot {name}")))?;
        Ok(Snapshot {
            client,
            consistent_point,
        })
    }

    /// Open a `REPEATABLE READ` transaction of its own on the source at `pg` and return it with
    /// its snapshot as `pg_snapshot`'s text (`xmin:xmax:xip,...`) and the server's time then
    /// (microseconds since the Unix epoch), both read by its first statement, which is what
    /// fixes the transaction's snapshot: without a slot, trigger capture's load and verify
    /// stand at that snapshot, and the journal is read from it. `position` is the position it
    /// is given in the lake.
    pub async fn begin(
        pg: &crate::source::connect::PgConfig,
        position: Lsn,
    ) -> Result<(Snapshot, String, i64), SnapshotError> {
        let client = crate::source::connect::sql(pg).await?;
        client
            .batch_execute(&format!(
                "{SESSION_SETTINGS}; BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
            ))
            .await
            .map_err(query("beginning a snapshot's transaction"))?;
        let row = client
            .query_one(
                "SELECT pg_current_snapshot()::text, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                &[],
            )
            .await
            .map_err(query("taking a snapshot (pg_current_snapshot)"))?;
        let snapshot = Snapshot {
            client,
            consistent_point: position,
        };
        Ok((snapshot, row.get(0), row.get(1)))
    }

    /// Export this transaction's snapshot under a new name, for other connections to
    /// [`import`](Self::import) for as long as this one stays open.
    pub async fn export(&self) -> Result<String, SnapshotError> {
        Ok(self
            .client
            .query_one("SELECT pg_export_snapshot()", &[])
            .await
            .map_err(query("exporting the snapshot to more connections"))?
            .get(0))
    }

    /// How many heap pages `table` has now (a partitioned table has none of its own).
    pub async fn pages(&self, table: &SourceTable) -> Result<u32, SnapshotError> {
        let pages: i64 = self
            .client
            .query_one(
                "SELECT pg_relation_size($1::oid) / current_setting('block_size')::bigint",
                &[&table.oid],
            )
            .await
            .map_err(query(format!("reading the size of table {}", table.name)))?
            .get(0);
        Ok(u32::try_from(pages).unwrap_or(u32::MAX))
    }

    /// The WAL position the snapshot stands at: transactions that committed before it are
    /// visible, later ones are not.
    pub fn consistent_point(&self) -> Lsn {
        self.consistent_point
    }

    /// The SQL connection inside the snapshot, for catalog reads of its own.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// What `table` (`schema.table`) is in the snapshot. `publication` restricts its columns
    /// and rows as the publication does.
    pub async fn table(
        &self,
        catalog: &mut Catalog,
        table: &str,
        publication: Option<&str>,
    ) -> Result<SourceTable, SnapshotError> {
        let (schema, name) = table.split_once('.').unwrap_or(("public", table));
        let what = || format!("reading what table {table} is");
        let Some(row) = self
            .client
            .query_opt(
                "SELECT c.oid, c.relkind = 'p', c.relreplident::text
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
                &[&schema, &name],
            )
            .await
            .map_err(query(what()))?
        else {
            return Err(SnapshotError::NoTable {
                table: table.to_owned(),
            });
        };
        let oid: u32 = row.get(0);
        let partitioned: bool = row.get(1);
        let identity = match row.get::<_, String>(2).as_str() {
            "n" => ReplicaIdentity::Nothing,
            "f" => ReplicaIdentity::Full,
            "i" => ReplicaIdentity::Index,
            _ => ReplicaIdentity::Default,
        };

        let (published, row_filter) = match publication {
            Some(publication) => self.published(publication, schema, name, table).await?,
            None => (Vec::new(), None),
        };
        // Generated columns are not published. `attndims` is int2 from PostgreSQL 17, int4
        // before.
        let rows = self
            .client
            .query(
                "SELECT a.attname::text, a.atttypid, a.atttypmod, a.attndims::int, t.typstorage <> 'p'
                 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
                   AND a.attgenerated = ''
                 ORDER BY a.attnum",
                &[&oid],
            )
            .await
            .map_err(query(what()))?;
        let mut columns = Vec::new();
        let mut toastable = Vec::new();
        for row in rows {
            let column: String = row.get(0);
            if !published.is_empty() && !published.contains(&column) {
                continue;
            }
            let (type_oid, type_modifier, dims): (u32, i32, i32) =
                (row.get(1), row.get(2), row.get(3));
            if row.get::<_, bool>(4) {
                toastable.push(columns.len());
            }
            columns.push(OutputColumn {
                name: column,
                type_oid,
                type_modifier,
                ty: catalog.column_type(type_oid, type_modifier, dims).await?,
                nullable: true,
                key: false,
            });
        }

        let indexes = self
            .client
            .query(
                "SELECT i.indisprimary, i.indisreplident,
                        ARRAY(SELECT a.attname::text
                              FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
                              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                              ORDER BY k.ord)
                 FROM pg_index i WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)",
                &[&oid],
            )
            .await
            .map_err(query(what()))?;
        let index = |primary: bool| {
            indexes
                .iter()
                .find(|r| r.get::<_, bool>(if primary { 0 } else { 1 }))
                .map(|r| r.get::<_, Vec<String>>(2))
        };
        // The columns the pipeline's changes are identified by: what the replica identity
        // sends as the old key, or the primary key when it sends the whole row.
        let key_columns = match identity {
            ReplicaIdentity::Index => index(false).or_else(|| index(true)),
            _ => index(true),
        }
        .unwrap_or_default();
        let key = key_columns
            .iter()
            .map(|k| columns.iter().position(|c| &c.name == k))
            .collect::<Option<Vec<usize>>>()
            // A key column the publication does not publish cannot key the landed rows.
            .unwrap_or_default();
        // The landed files mark the columns the stream keys rows by: the replica identity's
        // key, or the primary key under REPLICA IDENTITY FULL (see `Catalog::row_key`).
        for (i, column) in columns.iter_mut().enumerate() {
            column.key = match identity {
                ReplicaIdentity::Nothing => false,
                _ => key.contains(&i),
            };
        }
        Ok(SourceTable {
            name: table.to_owned(),
            columns: columns.into(),
            key,
            identity,
            toastable,
            row_filter,
            oid,
            partitioned,
        })
    }

    /// The columns (empty: all) and the row filter `publication` publishes `table` with.
    async fn published(
        &self,
        publication: &str,
        schema: &str,
        name: &str,
        table: &str,
    ) -> Result<(Vec<String>, Option<String>), SnapshotError> {
        // `attnames` and `rowfilter` exist from PostgreSQL 15; read through jsonb, they are
        // absent before.
        let row = self
            .client
            .query_opt(
                "SELECT ARRAY(SELECT jsonb_array_elements_text(to_jsonb(p) -> 'attnames')),
                        to_jsonb(p) ->> 'rowfilter'
                 FROM pg_publication_tables p
                 WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                &[&publication, &schema, &name],
            )
            .await
            .map_err(query(format!(
                "reading how publication {publication:?} publishes {table}"
            )))?;
        Ok(row.map_or((Vec::new(), None), |r| (r.get(0), r.get(1))))
    }

    /// Stream the rows of `table` as the snapshot sees them.
    pub async fn rows(&self, table: &SourceTable) -> Result<TableRows, SnapshotError> {
        self.read(table, Pages::All).await
    }

    /// `table` as SQL names it now, quoted where it needs to be (by its oid, so a rename since
    /// the snapshot does not lose it).
    async fn relation(&self, table: &SourceTable) -> Result<String, SnapshotError> {
        Ok(self
            .client
            .query_one("SELECT $1::oid::regclass::text", &[&table.oid])
            .await
            .map_err(query(format!("naming table {}", table.name)))?
            .get(0))
    }

    /// Lock `table` against DDL for the rest of the snapshot's transaction (the lock its reads
    /// take anyway, taken first) and say whether DDL committed after the snapshot was taken
    /// changed it: catalog reads see the table as the snapshot does, but a statement is
    /// planned against the catalog as it is now, so a column dropped or renamed since fails
    /// the read, and a rewrite since (a type changed) shows the snapshot an empty table.
    /// `Some(what changed)`: read it under a new snapshot.
    pub async fn hold(&self, table: &SourceTable) -> Result<Option<String>, SnapshotError> {
        let what = || format!("locking table {} for the load", table.name);
        let relation = self.relation(table).await?;
        self.client
            .batch_execute(&format!("LOCK TABLE {relation} IN ACCESS SHARE MODE"))
            .await
            .map_err(query(what()))?;
        // As the snapshot sees it, and as it is now (the lock made this session take in the
        // DDL committed before it).
        let row = self
            .client
            .query_one(
                "SELECT NULLIF(c.relfilenode, 0)::bigint, pg_relation_filenode(c.oid)::bigint,
                        ARRAY(SELECT a.attname::text FROM pg_attribute a
                              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                              ORDER BY a.attnum)
                 FROM pg_class c WHERE c.oid = $1",
                &[&table.oid],
            )
            .await
            .map_err(query(what()))?;
        let (then, now): (Option<i64>, Option<i64>) = (row.get(0), row.get(1));
        if then != now {
            return Ok(Some("its storage was rewritten".to_owned()));
        }
        let seen: Vec<String> = row.get(2);
        let only = if table.partitioned { "" } else { "ONLY " };
        let planned = self
            .client
            .prepare(&format!("SELECT * FROM {only}{relation}"))
            .await
            .map_err(query(what()))?;
        let current: Vec<String> = planned
            .columns()
            .iter()
            .map(|c| c.name().to_owned())
            .collect();
        Ok((current != seen).then(|| {
            format!(
                "its columns were ({}) and are now ({})",
                seen.join(", "),
                current.join(", ")
            )
        }))
    }

    /// Stream the rows of `table` in `pages`; rows of a page range come with their place in
    /// the heap ([`TableRows::next_rows`]).
    pub async fn read(
        &self,
        table: &SourceTable,
        pages: Pages,
    ) -> Result<TableRows, SnapshotError> {
        let placed = matches!(pages, Pages::Range { .. });
        let mut select: Vec<String> = table
            .columns
            .iter()
            .map(|c| match c.ty.reads_binary() {
                true => crate::source::quote_ident(&c.name),
                false => format!("{}::text", crate::source::quote_ident(&c.name)),
            })
            .collect();
        if placed {
            select.insert(0, "ctid".to_owned());
        }
        let only = if table.partitioned { "" } else { "ONLY " };
        let mut conditions: Vec<String> =
            table.row_filter.iter().map(|f| format!("({f})")).collect();
        if let Pages::Range { from, to } = pages {
            // TID range scans (PostgreSQL 14 and later) read just these pages.
            conditions.push(format!("ctid >= '({from},0)'::tid"));
            if let Some(to) = to {
                conditions.push(format!("ctid < '({to},0)'::tid"));
            }
        }
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        };
        let relation = self.relation(table).await?;
        let sql = format!(
            "COPY (SELECT {} FROM {only}{relation}{filter}) TO STDOUT (FORMAT binary)",
            if select.is_empty() {
                "NULL".to_owned()
            } else {
                select.join(", ")
            }
        );
        let stream = self
            .client
            .copy_out(sql.as_str())
            .await
            .map_err(query(format!("reading table {}", table.name)))?;
        Ok(TableRows {
            table: table.clone(),
            reader: CopyReader::new(select.len().max(1)),
            stream: Box::pin(stream),
            ended: false,
            placed,
        })
    }

    /// End the transaction.
    pub async fn close(self) -> Result<(), SnapshotError> {
        self.client
            .batch_execute("ROLLBACK")
            .await
            .map_err(query("ending the snapshot's transaction"))?;
        Ok(())
    }
}

/// The rows of one table, decoded, in chunks.
pub struct TableRows {
    table: SourceTable,
    reader: CopyReader,
    stream: Pin<Box<CopyOutStream>>,
    ended: bool,
    /// Each row starts with its `ctid`.
    placed: bool,
}

/// A row read with its place and size.
#[derive(Debug)]
pub struct ReadRow {
    /// `(block, offset)` in the heap, for a read of a page range.
    pub place: Option<(u32, u16)>,
    pub values: Vec<Value>,
    /// What the row occupies decoded, about: the measure budgets count.
    pub bytes: usize,
}

impl TableRows {
    /// Up to `max` more rows, each one value per column; `None` once all were read.
    pub async fn next_chunk(
        &mut self,
        max: usize,
    ) -> Result<Option<Vec<Vec<Value>>>, SnapshotError> {
        let mut rows = Vec::new();
        while rows.len() < max {
            if let Some(row) = self.reader.next_row().map_err(|e| self.copy_error(e))? {
                rows.push(self.decode(row)?);
                continue;
            }
            if !self.fill().await? {
                break;
            }
        }
        Ok((!rows.is_empty()).then_some(rows))
    }

    /// More rows, until they occupy about `max_bytes` decoded; `None` once all were read.
    pub async fn next_rows(
        &mut self,
        max_bytes: usize,
    ) -> Result<Option<Vec<ReadRow>>, SnapshotError> {
        let (mut rows, mut bytes) = (Vec::new(), 0);
        while bytes < max_bytes {
            if let Some(mut row) = self.reader.next_row().map_err(|e| self.copy_error(e))? {
                let place = match self.placed {
                    true => Some(self.place(row.remove(0))?),
                    false => None,
                };
                let size = crate::stream::assemble::CHANGE_BYTES
                    + row
                        .iter()
                        .map(|f| {
                            crate::stream::assemble::VALUE_BYTES + f.as_ref().map_or(0, |b| b.len())
                        })
                        .sum::<usize>();
                bytes += size;
                rows.push(ReadRow {
                    place,
                    values: self.decode(row)?,
                    bytes: size,
                });
                continue;
            }
            if !self.fill().await? {
                break;
            }
        }
        Ok((!rows.is_empty()).then_some(rows))
    }

    /// A `ctid` in its binary form: the block (4 bytes) and the offset (2).
    fn place(&self, field: Option<bytes::Bytes>) -> Result<(u32, u16), SnapshotError> {
        match field.as_deref() {
            Some(&[a, b, c, d, e, f]) => {
                Ok((u32::from_be_bytes([a, b, c, d]), u16::from_be_bytes([e, f])))
            }
            _ => Err(SnapshotError::Copy {
                table: self.table.name.clone(),
                source: CopyError::Length(field.map_or(-1, |b| b.len() as i32)),
            }),
        }
    }

    /// Read more of the COPY data into the reader; `false` once it has all been read.
    async fn fill(&mut self) -> Result<bool, SnapshotError> {
        if self.ended {
            return Ok(false);
        }
        match self.stream.next().await {
            Some(bytes) => {
                let bytes = bytes.map_err(query(format!("reading table {}", self.table.name)))?;
                self.reader.push(&bytes);
            }
            None => {
                self.ended = true;
                self.reader.finish().map_err(|e| self.copy_error(e))?;
            }
        }
        // At the end, rows may still wait in the reader.
        Ok(true)
    }

    fn copy_error(&self, source: CopyError) -> SnapshotError {
        SnapshotError::Copy {
            table: self.table.name.clone(),
            source,
        }
    }

    fn decode(&self, row: CopyRow) -> Result<Vec<Value>, SnapshotError> {
        if self.table.columns.is_empty() {
            return Ok(Vec::new());
        }
        row.into_iter()
            .zip(self.table.columns.iter())
            .map(|(field, column)| {
                let Some(bytes) = field else {
                    return Ok(Value::Null);
                };
                decode(&column.ty, &bytes).map_err(|source| SnapshotError::Value {
                    table: self.table.name.clone(),
                    column: column.name.clone(),
                    source,
                })
            })
            .collect()
    }
}

/// A value as [`Snapshot::rows`] selects it: in binary, or as text for types read only so.
fn decode(ty: &ColumnType, bytes: &[u8]) -> Result<Value, ValueError> {
    match ty.reads_binary() {
        true => pgtype::decode_binary(ty, bytes),
        false => pgtype::decode_text(ty, bytes),
    }
}
