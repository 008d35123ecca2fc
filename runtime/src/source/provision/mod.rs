//! Source-side checks and set-up over an ordinary SQL connection: the publication, the tracked
//! tables' replica identity, and the slot's state as `pg_replication_slots` reports it. The
//! prerequisite report that gathers them with the server's settings is [`crate::source::prerequisites`];
//! what
//! all of them refuse is [`ProvisionError`] (`error.rs`).
//!
//! The replica identity check runs before streaming, for every tracked table (the configured
//! `source.tables`, or every table of the publication when that list is empty). A table must
//! have a usable identity, so that its updates and deletes carry the old key: a primary key
//! (`REPLICA IDENTITY DEFAULT`), the chosen index (`USING INDEX`), or the whole old row
//! (`FULL`). A table that may hold TOASTed values and is not `FULL` would send updates without
//! their untouched large values; `source.unchanged_toast` says whether that refuses the start
//! (the default) or lands those values as null (see [`toast`](crate::stream::toast)).

use tokio_postgres::Client;

use crate::Lsn;
use crate::config::{Provisioning, SourceConfig, UnchangedToastPolicy};
use crate::source::quote_ident;
use crate::source::toast::{ColumnStorage, TableStorage, out_of_line_columns};
use crate::wire::pgoutput::ReplicaIdentity;
use crate::wire::pgtype::TypeRow;

mod error;

pub use error::{ProvisionError, server_text};

/// A slot as `pg_replication_slots` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub plugin: String,
    pub database: String,
    /// The consumer reading it now, if any.
    pub holder: Option<SlotHolder>,
    pub confirmed_flush_lsn: Option<Lsn>,
    pub restart_lsn: Option<Lsn>,
    pub wal_status: Option<String>,
    pub safe_wal_size: Option<i64>,
    /// Decodes prepared transactions at PREPARE (PostgreSQL 14 and later).
    pub two_phase: bool,
}

impl SlotState {
    /// The pid of the walsender serving the slot's consumer (`active_pid`).
    pub fn active_pid(&self) -> Option<i32> {
        self.holder.as_ref().map(|h| h.pid)
    }
}

/// Who reads a slot: the walsender's pid (`active_pid`), and the client it serves as
/// `pg_stat_activity` shows it: what a person needs to find the other consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotHolder {
    pub pid: i32,
    /// The client's `application_name` (Tributary's is `tributary <writer id>`).
    pub application_name: Option<String>,
    /// `host:port` the client connects from, `None` when the server shows it not to this role.
    pub client: Option<String>,
    /// Connected over a Unix-domain socket, from this host.
    pub local: bool,
}

/// `"tributary 3f2a..." at 10.0.0.5:51234 (walsender pid 123)`.
impl std::fmt::Display for SlotHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.application_name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => write!(f, "{name:?}")?,
            None => write!(f, "a client without an application_name")?,
        }
        match (&self.client, self.local) {
            (Some(client), _) => write!(f, " at {client}")?,
            (None, true) => write!(f, " over a local socket")?,
            (None, false) => {}
        }
        write!(f, " (walsender pid {})", self.pid)
    }
}

pub(crate) fn query_error(
    what: impl Into<String>,
) -> impl FnOnce(tokio_postgres::Error) -> ProvisionError {
    let what = what.into();
    move |error| ProvisionError::Query { what, error }
}

/// Whether provisioning found an object or made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Existed,
    Created,
}

/// The statement that creates the publication for the tracked tables (every table when
/// `source.tables` is empty).
pub fn create_publication_sql(source: &SourceConfig) -> String {
    let target = if source.tables.is_empty() {
        "ALL TABLES".to_owned()
    } else {
        let tables: Vec<_> = source.tables.iter().map(|t| sql_table_name(t)).collect();
        format!("TABLE {}", tables.join(", "))
    };
    // Changes to a partition land under its partitioned table, one dataset per table as the
    // user named it.
    format!(
        "CREATE PUBLICATION {} FOR {target} WITH (publish_via_partition_root = true)",
        sql_ident(&source.publication)
    )
}

/// Make sure the publication exists and publishes every configured table.
pub async fn ensure_publication(
    client: &Client,
    source: &SourceConfig,
) -> Result<Ensured, ProvisionError> {
    let publication = &source.publication;
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(query_error(format!(
            "looking up publication {publication:?}"
        )))?
        .is_some();
    if !exists {
        let sql = create_publication_sql(source);
        if source.publication_behavior() == Provisioning::Reuse {
            return Err(ProvisionError::NoPublication {
                publication: publication.clone(),
                sql,
            });
        }
        client
            .batch_execute(&sql)
            .await
            .map_err(query_error(format!("creating publication {publication:?}")))?;
        tracing::info!(publication, "created publication");
        return Ok(Ensured::Created);
    }
    let published = published_tables(client, publication).await?;
    let missing: Vec<&str> = source
        .tables
        .iter()
        .filter(|t| !published.contains(t))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(ProvisionError::NotPublished {
            publication: publication.clone(),
            tables: missing.join(", "),
        });
    }
    Ok(Ensured::Existed)
}

/// What a tracked table's updates and deletes will carry, as the catalog says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableIdentity {
    /// `schema.table`.
    pub table: String,
    /// `pg_class.relreplident`.
    pub identity: ReplicaIdentity,
    pub has_primary_key: bool,
    /// An index marked as the replica identity exists (`REPLICA IDENTITY USING INDEX`).
    pub has_identity_index: bool,
    /// Published columns whose values may be stored out of line ([`crate::source::toast`] judges
    /// them).
    pub toastable: Vec<String>,
}

/// Which row operations a publication sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publishes {
    pub update: bool,
    pub delete: bool,
}

/// Refuse a tracked table whose changes this pipeline could not land faithfully.
pub fn check_identity(
    table: &TableIdentity,
    publishes: Publishes,
    policy: UnchangedToastPolicy,
) -> Result<(), ProvisionError> {
    let sql = sql_table_name(&table.table);
    if publishes.update || publishes.delete {
        let missing = match table.identity {
            ReplicaIdentity::Nothing => Some("REPLICA IDENTITY NOTHING"),
            ReplicaIdentity::Default if !table.has_primary_key => {
                Some("REPLICA IDENTITY DEFAULT without a primary key")
            }
            ReplicaIdentity::Index if !table.has_identity_index => {
                Some("REPLICA IDENTITY USING INDEX, but the index no longer exists")
            }
            _ => None,
        };
        if let Some(reason) = missing {
            return Err(ProvisionError::NoReplicaIdentity {
                table: table.table.clone(),
                sql,
                reason,
            });
        }
    }
    if publishes.update
        && policy == UnchangedToastPolicy::Refuse
        && table.identity != ReplicaIdentity::Full
        && !table.toastable.is_empty()
    {
        return Err(ProvisionError::UnchangedToast {
            table: table.table.clone(),
            sql,
            columns: table.toastable.join(", "),
        });
    }
    Ok(())
}

/// Check the replica identity of every tracked table before streaming.
pub async fn check_replica_identity(
    client: &Client,
    source: &SourceConfig,
) -> Result<(), ProvisionError> {
    let publication = &source.publication;
    let row = client
        .query_one(
            "SELECT pubupdate, pubdelete FROM pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(query_error(format!(
            "reading what publication {publication:?} publishes"
        )))?;
    let publishes = Publishes {
        update: row.get(0),
        delete: row.get(1),
    };
    for table in table_identities(client, source).await? {
        check_identity(&table, publishes, source.unchanged_toast)?;
    }
    Ok(())
}

/// `schema.table` of every table the publication publishes.
pub async fn published_tables(
    client: &Client,
    publication: &str,
) -> Result<Vec<String>, ProvisionError> {
    Ok(client
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(query_error(format!(
            "listing tables of publication {publication:?}"
        )))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// `schema.table` of every tracked table: the configured list, or what the publication
/// publishes.
pub async fn tracked_tables(
    client: &Client,
    source: &SourceConfig,
) -> Result<Vec<String>, ProvisionError> {
    if !source.tables.is_empty() {
        return Ok(source.tables.clone());
    }
    published_tables(client, &source.publication).await
}

/// Replica identity facts of the tracked tables, in name order.
pub async fn table_identities(
    client: &Client,
    source: &SourceConfig,
) -> Result<Vec<TableIdentity>, ProvisionError> {
    identities_of(client, &tracked_tables(client, source).await?).await
}

/// Replica identity facts of these `schema.table` names (those that exist), in name order,
/// with the columns whose values may be stored out of line as [`crate::source::toast`] judges
/// them.
pub async fn identities_of(
    client: &Client,
    tracked: &[String],
) -> Result<Vec<TableIdentity>, ProvisionError> {
    let rows = client
        .query(
            "SELECT n.nspname || '.' || c.relname, c.relreplident::text,
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident),
                    current_setting('block_size')::int,
                    (SELECT o.option_value::int FROM pg_options_to_table(c.reloptions) o
                     WHERE o.option_name = 'toast_tuple_target')
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname || '.' || c.relname = ANY($1) AND c.relkind IN ('r', 'p')
             ORDER BY 1",
            &[&tracked],
        )
        .await
        .map_err(query_error(
            "reading the replica identity of the tracked tables",
        ))?;
    // Every column a row holds, generated ones too: they count towards its size, though they
    // are not published and so never arrive as unchanged TOAST.
    let columns = client
        .query(
            "SELECT n.nspname || '.' || c.relname, a.attname::text, a.atttypid, a.atttypmod,
                    a.attstorage::text, t.typlen, t.typalign::text, a.attgenerated = ''
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  JOIN pg_attribute a ON a.attrelid = c.oid
                  JOIN pg_type t ON t.oid = a.atttypid
             WHERE n.nspname || '.' || c.relname = ANY($1) AND c.relkind IN ('r', 'p')
               AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY 1, a.attnum",
            &[&tracked],
        )
        .await
        .map_err(query_error("reading the columns of the tracked tables"))?;
    let letter = |text: String| text.chars().next().unwrap_or(' ');
    Ok(rows
        .iter()
        .map(|r| {
            let table: String = r.get(0);
            let storage = TableStorage {
                block_size: u32::try_from(r.get::<_, i32>(4)).unwrap_or(8192),
                tuple_target: r
                    .get::<_, Option<i32>>(5)
                    .and_then(|t| u32::try_from(t).ok()),
                columns: columns
                    .iter()
                    .filter(|c| c.get::<_, String>(0) == table)
                    .map(|c| ColumnStorage {
                        name: c.get(1),
                        type_oid: c.get(2),
                        type_modifier: c.get(3),
                        storage: letter(c.get(4)),
                        length: c.get(5),
                        align: letter(c.get(6)),
                        published: c.get(7),
                    })
                    .collect(),
            };
            TableIdentity {
                identity: match r.get::<_, String>(1).as_str() {
                    "n" => ReplicaIdentity::Nothing,
                    "f" => ReplicaIdentity::Full,
                    "i" => ReplicaIdentity::Index,
                    _ => ReplicaIdentity::Default,
                },
                has_primary_key: r.get(2),
                has_identity_index: r.get(3),
                toastable: out_of_line_columns(&storage),
                table,
            }
        })
        .collect())
}

/// One published column of a tracked table, with its declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    pub table: String,
    pub column: String,
    pub type_oid: u32,
    pub type_modifier: i32,
    /// `attndims`: array dimensions as declared, 0 when not declared.
    pub dims: i32,
}

/// Every published column of the tracked tables, in table and column order.
pub async fn table_columns(
    client: &Client,
    source: &SourceConfig,
) -> Result<Vec<TableColumn>, ProvisionError> {
    let tracked = tracked_tables(client, source).await?;
    let rows = client
        .query(
            "SELECT n.nspname || '.' || c.relname, a.attname::text, a.atttypid, a.atttypmod,
                    a.attndims::int
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  JOIN pg_attribute a ON a.attrelid = c.oid
             WHERE n.nspname || '.' || c.relname = ANY($1) AND c.relkind IN ('r', 'p')
               AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
             ORDER BY 1, a.attnum",
            &[&tracked],
        )
        .await
        .map_err(query_error("reading the columns of the tracked tables"))?;
    Ok(rows
        .iter()
        .map(|r| TableColumn {
            table: r.get(0),
            column: r.get(1),
            type_oid: r.get(2),
            type_modifier: r.get(3),
            dims: r.get(4),
        })
        .collect())
}

/// `attndims` of each column of the table with OID `relid`, by column name.
pub async fn array_dims(client: &Client, relid: u32) -> Result<Vec<(String, i32)>, ProvisionError> {
    let rows = client
        .query(
            "SELECT attname::text, attndims::int FROM pg_attribute
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped",
            &[&relid],
        )
        .await
        .map_err(query_error(format!(
            "reading the array dimensions of table oid {relid}"
        )))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The primary key's columns of the table with OID `relid` (empty: it has none).
pub async fn primary_key(client: &Client, relid: u32) -> Result<Vec<String>, ProvisionError> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])
              WHERE i.indrelid = $1 AND i.indisprimary",
            &[&relid],
        )
        .await
        .map_err(query_error(format!(
            "reading the primary key of table oid {relid}"
        )))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The `pg_type` rows of `oids`, as much as type resolution needs.
pub async fn type_rows(client: &Client, oids: &[u32]) -> Result<Vec<TypeRow>, ProvisionError> {
    let rows = client
        .query(
            "SELECT t.oid, n.nspname::text, t.typname::text, t.typtype, t.typbasetype, t.typtypmod,
                    CASE WHEN t.typcategory = 'A' AND t.typelem <> 0 THEN t.typelem ELSE 0 END,
                    t.typsend::text
             FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE t.oid = ANY($1)",
            &[&oids],
        )
        .await
        .map_err(query_error("reading column types from pg_type"))?;
    Ok(rows
        .iter()
        .map(|r| TypeRow {
            oid: r.get(0),
            schema: r.get(1),
            name: r.get(2),
            kind: r.get::<_, i8>(3) as u8,
            base: r.get(4),
            base_modifier: r.get(5),
            element: r.get(6),
            send: r.get(7),
        })
        .collect())
}

/// How many fraction digits `money` has under the server's `lc_monetary`.
pub async fn money_digits(client: &Client) -> Result<i32, ProvisionError> {
    let row = client
        .query_one("SELECT scale('1'::money::numeric)", &[])
        .await
        .map_err(query_error("reading the fraction digits of money"))?;
    Ok(row.get(0))
}

/// `schema.table` as SQL reads it: each part quoted only when it has to be.
pub(crate) fn sql_table_name(table: &str) -> String {
    table
        .split('.')
        .map(sql_ident)
        .collect::<Vec<_>>()
        .join(".")
}

/// An identifier as SQL reads it: quoted only when it has to be.
pub(crate) fn sql_ident(part: &str) -> String {
    let plain = part
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain {
        part.to_owned()
    } else {
        quote_ident(part)
    }
}

/// The slot's row in `pg_replication_slots`, `None` when there is no such slot.
pub async fn slot_state(client: &Client, slot: &str) -> Result<Option<SlotState>, ProvisionError> {
    let row = client
        .query_opt(
            // `two_phase` exists from PostgreSQL 14; read through jsonb, it is null before.
            "SELECT coalesce(plugin, ''), coalesce(database, ''), active_pid,
                    confirmed_flush_lsn::text, restart_lsn::text, wal_status, safe_wal_size,
                    coalesce((to_jsonb(s) ->> 'two_phase')::bool, false),
                    a.application_name, coalesce(a.client_hostname, host(a.client_addr)),
                    a.client_port
             FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
             WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query_error(format!("looking up slot {slot:?}")))?;
    Ok(row.map(|r| {
        let lsn = |i: usize| r.get::<_, Option<String>>(i).and_then(|s| s.parse().ok());
        SlotState {
            plugin: r.get(0),
            database: r.get(1),
            holder: r.get::<_, Option<i32>>(2).map(|pid| {
                let port: Option<i32> = r.get(10);
                let host: Option<String> = r.get(9);
                SlotHolder {
                    pid,
                    application_name: r.get(8),
                    client: host.map(|host| match (host.contains(':'), port) {
                        (true, Some(port)) => format!("[{host}]:{port}"),
                        (false, Some(port)) => format!("{host}:{port}"),
                        (_, None) => host,
                    }),
                    local: port == Some(-1),
                }
            }),
            confirmed_flush_lsn: lsn(3),
            restart_lsn: lsn(4),
            wal_status: r.get(5),
            safe_wal_size: r.get(6),
            two_phase: r.get(7),
        }
    }))
}

/// Refuse a slot this pipeline cannot use. A slot held by another consumer is not refused
/// here: start-up waits for it (see the pipeline's start).
pub fn check_slot(slot: &str, state: &SlotState, database: &str) -> Result<(), ProvisionError> {
    if state.plugin != "pgoutput" {
        return Err(ProvisionError::SlotPlugin {
            slot: slot.into(),
            plugin: state.plugin.clone(),
        });
    }
    if state.database != database {
        return Err(ProvisionError::SlotDatabase {
            slot: slot.into(),
            database: state.database.clone(),
            expected: database.into(),
        });
    }
    // Such a slot sends prepared transactions as they prepare whether or not the client asks
    // for two_phase; see docs/design.md (Two-phase commit).
    if state.two_phase {
        return Err(ProvisionError::SlotTwoPhase { slot: slot.into() });
    }
    if state.wal_status.as_deref() == Some("lost") {
        return Err(ProvisionError::SlotLost {
            slot: slot.into(),
            confirmed: state
                .confirmed_flush_lsn
                .map_or_else(|| "its confirmed position".into(), |l| l.to_string()),
        });
    }
    Ok(())
}

pub async fn current_database(client: &Client) -> Result<String, ProvisionError> {
    let row = client
        .query_one("SELECT current_database()", &[])
        .await
        .map_err(query_error("reading the current database"))?;
    Ok(row.get(0))
}

/// Where the server's WAL ends: on a standby (which may decode from PostgreSQL 16), how far
/// it has replayed.
pub async fn current_wal_lsn(client: &Client) -> Result<Lsn, ProvisionError> {
    let row = client
        .query_one(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                          ELSE pg_current_wal_lsn() END)::text",
            &[],
        )
        .await
        .map_err(query_error("reading the current WAL position"))?;
    let text: String = row.get(0);
    Ok(text.parse().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalidated_slot_is_refused_with_the_way_out() {
        let mut lost = state("pgoutput", None);
        lost.wal_status = Some("lost".into());
        lost.confirmed_flush_lsn = Some(Lsn(0x1_0000_0028));
        let err = check_slot("s", &lost, "shop").unwrap_err().to_string();
        assert!(
            err.starts_with("slot \"s\" is invalidated (wal_status = lost)")
                && err.contains("after 1/28")
                && err.contains("pg_drop_replication_slot('s')")
                && err.contains("--accept-gap"),
            "{err}"
        );
        lost.wal_status = Some("reserved".into());
        assert!(check_slot("s", &lost, "shop").is_ok());
    }

    #[test]
    fn identifiers_are_quoted_part_by_part() {
        assert_eq!(sql_table_name("public.Orders"), "public.\"Orders\"");
    }

    fn state(plugin: &str, active_pid: Option<i32>) -> SlotState {
        SlotState {
            plugin: plugin.into(),
            database: "shop".into(),
            holder: active_pid.map(|pid| SlotHolder {
                pid,
                application_name: None,
                client: None,
                local: false,
            }),
            confirmed_flush_lsn: None,
            restart_lsn: None,
            wal_status: None,
            safe_wal_size: None,
            two_phase: false,
        }
    }

    fn table(
        identity: ReplicaIdentity,
        has_primary_key: bool,
        toastable: &[&str],
    ) -> TableIdentity {
        TableIdentity {
            table: "public.docs".into(),
            identity,
            has_primary_key,
            has_identity_index: false,
            toastable: toastable.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    const ALL: Publishes = Publishes {
        update: true,
        delete: true,
    };
    const REFUSE: UnchangedToastPolicy = UnchangedToastPolicy::Refuse;
    const NULL: UnchangedToastPolicy = UnchangedToastPolicy::Null;

    #[test]
    fn tables_without_a_usable_identity_are_refused_with_the_fix() {
        let err = check_identity(&table(ReplicaIdentity::Default, false, &[]), ALL, NULL)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "table public.docs has no usable replica identity (REPLICA IDENTITY DEFAULT without a primary key), \
             so its updates and deletes would carry no old key; run: ALTER TABLE public.docs ADD PRIMARY KEY (...), \
             or: ALTER TABLE public.docs REPLICA IDENTITY FULL"
        );
        let err = check_identity(&table(ReplicaIdentity::Nothing, true, &[]), ALL, NULL)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(REPLICA IDENTITY NOTHING)"), "{err}");
        let err = check_identity(&table(ReplicaIdentity::Index, true, &[]), ALL, NULL)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the index no longer exists"), "{err}");

        let mut indexed = table(ReplicaIdentity::Index, false, &[]);
        indexed.has_identity_index = true;
        check_identity(&indexed, ALL, REFUSE).unwrap();
        check_identity(&table(ReplicaIdentity::Default, true, &[]), ALL, REFUSE).unwrap();
        check_identity(&table(ReplicaIdentity::Full, false, &["body"]), ALL, REFUSE).unwrap();
    }

    #[test]
    fn toastable_columns_need_full_identity_or_the_null_policy() {
        let docs = table(ReplicaIdentity::Default, true, &["title", "body"]);
        let err = check_identity(&docs, ALL, REFUSE).unwrap_err().to_string();
        assert_eq!(
            err,
            "table public.docs has columns PostgreSQL may store out of line as TOAST (title, body), \
             and an update that leaves such a value untouched does not send it; \
             run: ALTER TABLE public.docs REPLICA IDENTITY FULL (the old row then carries it), \
             or set source.unchanged_toast = \"null\" to land those values as null, flagged in _unchanged_toast"
        );
        check_identity(&docs, ALL, NULL).unwrap();
    }

    #[test]
    fn only_published_operations_need_an_identity() {
        let inserts_only = Publishes {
            update: false,
            delete: false,
        };
        let bare = table(ReplicaIdentity::Nothing, false, &["body"]);
        check_identity(&bare, inserts_only, REFUSE).unwrap();
        let deletes = Publishes {
            update: false,
            delete: true,
        };
        // Deletes need the key but never carry unchanged TOAST values.
        check_identity(
            &table(ReplicaIdentity::Default, true, &["body"]),
            deletes,
            REFUSE,
        )
        .unwrap();
        check_identity(&bare, deletes, REFUSE).unwrap_err();
    }

    #[test]
    fn hints_quote_only_names_that_need_it() {
        assert_eq!(sql_table_name("public.docs_2"), "public.docs_2");
        assert_eq!(
            sql_table_name("Sales.order items"),
            "\"Sales\".\"order items\""
        );
        assert_eq!(sql_table_name("public.2fa"), "public.\"2fa\"");
    }

    #[test]
    fn unusable_slots_are_refused_with_the_reason() {
        check_slot("s", &state("pgoutput", None), "shop").unwrap();
        let err = check_slot("s", &state("wal2json", None), "shop")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"wal2json\""), "{err}");
        // A busy slot is waited for at start, not refused here.
        check_slot("s", &state("pgoutput", Some(42)), "shop").unwrap();
        let busy = ProvisionError::SlotActive {
            slot: "s".into(),
            holder: SlotHolder {
                pid: 42,
                application_name: Some("tributary 00ff".into()),
                client: Some("10.0.0.5:51234".into()),
                local: false,
            },
            waited_secs: 15,
        };
        assert_eq!(
            busy.to_string(),
            "slot \"s\" is held by \"tributary 00ff\" at 10.0.0.5:51234 (walsender pid 42) and was not released within 15 s: another consumer is reading it; stop that consumer, or pass --wait to wait until it lets go"
        );
        let local = SlotHolder {
            pid: 7,
            application_name: Some(String::new()),
            client: None,
            local: true,
        };
        assert_eq!(
            local.to_string(),
            "a client without an application_name over a local socket (walsender pid 7)"
        );
        let err = check_slot("s", &state("pgoutput", None), "other")
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to database \"shop\""), "{err}");
        let two_phase = SlotState {
            two_phase: true,
            ..state("pgoutput", None)
        };
        let err = check_slot("s", &two_phase, "shop").unwrap_err().to_string();
        assert!(err.contains("two-phase commit"), "{err}");
        assert!(err.contains("drop the slot"), "{err}");
    }
}
