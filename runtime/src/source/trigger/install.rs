//! Installing trigger capture on a source and removing it ([`sql`](super::sql) says what).

use tokio_postgres::Client;

use super::owner::{Claim, JournalGap, JournalOwner, LakeEnd};
use super::query;
use super::sql;
use crate::source::provision::ProvisionError;
use crate::source::quote::quote_ident;

/// What an installation put in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The tables whose triggers call the capture function: each captured table, and each
    /// partition of a partitioned one (`schema.table`).
    pub tables: Vec<String>,
    pub triggers: usize,
    /// Whether the DDL watch is in place (see [`sql::ddl_watch_sql`]): the capture functions
    /// then check nothing per statement. Without it (a role that may not create event
    /// triggers) each statement first checks its table's columns.
    pub ddl_watch: bool,
}

/// What a removal took away.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    pub triggers: usize,
    pub tables: usize,
    pub functions: usize,
    /// Journal rows that had not landed, dropped with it.
    pub journal_rows: i64,
    pub schema: bool,
}

/// How an installation claims the journal for a sink: what the start judged the journal's
/// owner to be ([`super::owner::judge`]), and what it decided.
pub struct Claiming<'a> {
    pub sink: &'a str,
    pub judged: Option<&'a JournalOwner>,
    pub claim: &'a Claim,
}

/// Who `schema`'s journal captures for; `None` when there is no journal.
pub async fn owner(client: &Client, schema: &str) -> Result<Option<JournalOwner>, ProvisionError> {
    let found = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
            &[
                &sql::qualified(schema, "journal"),
                &sql::qualified(schema, "identity"),
            ],
        )
        .await
        .map_err(query(format!(
            "looking for the journal in schema {schema:?}"
        )))?;
    let (journal, identity): (bool, bool) = (found.get(0), found.get(1));
    let unclaimed = JournalOwner {
        id: None,
        sink: None,
        claimed_at: 0,
        claimed: String::new(),
    };
    if !journal {
        return Ok(None);
    }
    if !identity {
        return Ok(Some(unclaimed));
    }
    let row = client
        .query_opt(
            &format!(
                "SELECT journal, sink, claimed_at, to_char(claimed AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"') FROM {}",
                sql::qualified(schema, "identity")
            ),
            &[],
        )
        .await
        .map_err(query(format!("reading who the journal in schema {schema:?} captures for")))?;
    Ok(Some(row.map_or(unclaimed, |row| JournalOwner {
        id: Some(row.get(0)),
        sink: row.get(1),
        claimed_at: row.get::<_, i64>(2) as u64,
        claimed: row.get(3),
    })))
}

/// Who `schema`'s journal captures for, and what a start of the lake ending at `lake`,
/// writing to `sink`, may do with it ([`super::owner::judge`]): the one judgement `check` and a
/// start make.
pub async fn judge_journal(
    client: &Client,
    schema: &str,
    lake: LakeEnd,
    sink: &str,
    accept: Option<&str>,
) -> Result<(Option<JournalOwner>, Result<Claim, JournalGap>), ProvisionError> {
    let found = owner(client, schema).await?;
    let judged = super::owner::judge(schema, found.as_ref(), lake, sink, accept);
    Ok((found, judged))
}

/// Claim the journal in the installation's transaction, once its lock is held: the owner must
/// still be the one judged (two starts judging at once: the second finds the first's claim).
async fn claim(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    claiming: &Claiming<'_>,
) -> Result<(), ProvisionError> {
    let identity = sql::qualified(schema, "identity");
    let row = tx
        .query_one(
            &format!("SELECT sink, claimed_at FROM {identity} FOR UPDATE"),
            &[],
        )
        .await
        .map_err(query(format!(
            "reading who the journal in schema {schema:?} captures for"
        )))?;
    let now: (Option<String>, i64) = (row.get(0), row.get(1));
    // A journal judged missing is found unclaimed, or claimed by whoever raced this start.
    let judged = match claiming.judged {
        None => (None, now.1),
        Some(o) => (o.sink.clone(), o.claimed_at as i64),
    };
    if now != judged {
        return Err(ProvisionError::Journal(format!(
            "schema {schema:?} was claimed for sink {} while this start installed capture; start again to judge the journal anew",
            now.0.as_deref().unwrap_or("(none)")
        )));
    }
    if let Claim::Take {
        at, fresh_ticks, ..
    } = claiming.claim
    {
        tx.execute(
            &format!("UPDATE {identity} SET sink = $1, claimed_at = $2, claimed = now()"),
            &[&claiming.sink, &(*at as i64)],
        )
        .await
        .map_err(query(format!("claiming the journal in schema {schema:?}")))?;
        if *fresh_ticks {
            tx.execute(
                &format!("DELETE FROM {}", sql::qualified(schema, "ticks")),
                &[],
            )
            .await
            .map_err(query("deleting another lake's ticks"))?;
        }
    }
    Ok(())
}

/// What table `root`'s capture function is written with now: its layout, recorded, and the
/// settings the text of its columns' types depends on.
async fn written_now(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    root: u32,
    table: &str,
) -> Result<sql::Written, ProvisionError> {
    let now = tx
        .query_one(&sql::layout_now(schema, root), &[])
        .await
        .map_err(query(format!("recording the columns of {table}")))?;
    let types: Vec<(u32, char, char)> = tx
        .query(&sql::column_types(root), &[])
        .await
        .map_err(query(format!("reading the types of {table}'s columns")))?
        .iter()
        .map(|row| {
            let typtype: i8 = row.get(1);
            let category: i8 = row.get(2);
            (row.get(0), typtype as u8 as char, category as u8 as char)
        })
        .collect();
    Ok(sql::Written {
        root,
        layout: now.get(0),
        new_cols: now.get(1),
        old_cols: now.get(2),
        signature: now.get(3),
        needs: sql::Needs::of(&types),
    })
}

/// Install capture of `tables` (`schema.table`) in `schema`, in one transaction: the schema's
/// tables when missing, the journal claimed for the sink, each table's capture function
/// written for its columns now, and the triggers on each table and each of its partitions,
/// all replaced. Running it again changes nothing but the functions, so a start of a newer
/// Tributary upgrades them.
pub async fn install(
    client: &mut Client,
    schema: &str,
    tables: &[String],
    claiming: &Claiming<'_>,
) -> Result<Installed, ProvisionError> {
    let mut tx = client
        .transaction()
        .await
        .map_err(query("starting the installation's transaction"))?;
    // Two starts installing at once would race on CREATE ... IF NOT EXISTS.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('tributary.capture'), hashtext($1))",
        &[&schema],
    )
    .await
    .map_err(query("locking the installation"))?;
    for statement in sql::install_schema(schema) {
        tx.batch_execute(&statement).await.map_err(query(format!(
            "installing trigger capture in schema {schema:?}"
        )))?;
    }
    claim(&tx, schema, claiming).await?;
    let ddl_watch = watch_ddl(&mut tx, schema).await?;
    if !ddl_watch {
        tx.batch_execute(&sql::record_all_checked(schema))
            .await
            .map_err(query(
                "recording that the capture functions check their tables",
            ))?;
    }
    let mut installed = Installed {
        tables: Vec::new(),
        triggers: 0,
        ddl_watch,
    };
    for table in tables {
        let found = tx
            .query_one("SELECT c.oid, c.oid::regclass::text FROM pg_class c WHERE c.oid = $1::text::regclass", &[table])
            .await
            .map_err(query(format!("finding table {table}")))?;
        let (root, quoted): (u32, String) = (found.get(0), found.get(1));
        // The lock CREATE TRIGGER takes, taken first: the columns cannot change between the
        // function written for them and its triggers.
        tx.batch_execute(&format!("LOCK TABLE {quoted} IN SHARE ROW EXCLUSIVE MODE"))
            .await
            .map_err(query(format!("locking {table}")))?;
        let written = written_now(&tx, schema, root, table).await?;
        tx.batch_execute(&sql::capture_function_sql(schema, &written, !ddl_watch))
            .await
            .map_err(query(format!("writing the capture function of {table}")))?;
        if ddl_watch {
            let checked = sql::capture_function_sql(schema, &written, true);
            tx.execute(
                &sql::record_unchecked(schema),
                &[&root, &written.signature, &checked],
            )
            .await
            .map_err(query(format!("recording the capture function of {table}")))?;
        }
        // The table and, when it is partitioned, every partition under it (the tree of a
        // table that is not partitioned is empty).
        let rows = tx
            .query(
                "WITH tree AS (
                    SELECT t.relid, t.level FROM pg_partition_tree($1::oid) t
                    UNION ALL
                    SELECT $1::oid::regclass, 0
                     WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree($1::oid))
                 )
                 SELECT n.nspname::text, c.relname::text
                   FROM tree t
                   JOIN pg_class c ON c.oid = t.relid
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  ORDER BY t.level, c.relname",
                &[&root],
            )
            .await
            .map_err(query(format!("listing the partitions of {table}")))?;
        for row in rows {
            let (namespace, name): (String, String) = (row.get(0), row.get(1));
            let target = format!("{}.{}", quote_ident(&namespace), quote_ident(&name));
            for statement in sql::install_triggers(schema, &target, root) {
                tx.batch_execute(&statement).await.map_err(query(format!(
                    "creating the capture triggers on {namespace}.{name}"
                )))?;
                installed.triggers += 1;
            }
            installed.tables.push(format!("{namespace}.{name}"));
        }
    }
    tx.commit()
        .await
        .map_err(query("committing the installation"))?;
    Ok(installed)
}

/// Puts the DDL watch of `schema` in place ([`sql::ddl_watch_sql`]) when this role may create
/// event triggers, and says whether it could.
async fn watch_ddl(
    tx: &mut tokio_postgres::Transaction<'_>,
    schema: &str,
) -> Result<bool, ProvisionError> {
    let oid: u32 = tx
        .query_one(
            "SELECT oid FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .await
        .map_err(query(format!("finding schema {schema:?}")))?
        .get(0);
    let trigger = sql::ddl_watch_trigger(oid);
    let attempt = tx
        .savepoint("tributary_ddl_watch")
        .await
        .map_err(query("starting the DDL watch's savepoint"))?;
    for statement in sql::ddl_watch_sql(schema, &trigger) {
        match attempt.batch_execute(&statement).await {
            Ok(()) => {}
            Err(e)
                if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) =>
            {
                attempt
                    .rollback()
                    .await
                    .map_err(query("rolling back the DDL watch's savepoint"))?;
                return Ok(false);
            }
            Err(e) => return Err(query(format!("creating event trigger {trigger}"))(e)),
        }
    }
    attempt
        .commit()
        .await
        .map_err(query("releasing the DDL watch's savepoint"))?;
    Ok(true)
}

/// A table whose triggers call functions of the capture schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triggered {
    /// `schema.table`, for people.
    pub table: String,
    /// The table's name as SQL reads it, quoted where needed.
    pub quoted: String,
    pub triggers: Vec<String>,
}

/// The tables whose triggers call a function of `schema`, with those triggers' names.
pub async fn triggered_tables(
    client: &Client,
    schema: &str,
) -> Result<Vec<Triggered>, ProvisionError> {
    let rows = client
        .query(
            "SELECT n.nspname::text || '.' || c.relname::text, c.oid::regclass::text, t.tgname::text
               FROM pg_trigger t
               JOIN pg_proc p ON p.oid = t.tgfoid
               JOIN pg_namespace pn ON pn.oid = p.pronamespace
               JOIN pg_class c ON c.oid = t.tgrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE pn.nspname = $1
              ORDER BY 1, 3",
            &[&schema],
        )
        .await
        .map_err(query(format!(
            "listing the capture triggers of schema {schema:?}"
        )))?;
    let mut tables: Vec<Triggered> = Vec::new();
    for row in rows {
        let (table, quoted, trigger): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        match tables.last_mut() {
            Some(last) if last.table == table => last.triggers.push(trigger),
            _ => tables.push(Triggered {
                table,
                quoted,
                triggers: vec![trigger],
            }),
        }
    }
    Ok(tables)
}

/// Remove capture: every trigger that calls a function of `schema` (whatever tables they are
/// on now), then the schema
/// with the function, the journal and the rest. Nothing else is touched.
pub async fn remove(client: &mut Client, schema: &str) -> Result<Removed, ProvisionError> {
    let mut removed = Removed::default();
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .await
        .map_err(query("looking for the capture schema"))?
        .get(0);
    if !exists {
        return Ok(removed);
    }
    let tables = triggered_tables(client, schema).await?;
    let journal = format!("{}.journal", quote_ident(schema));
    let has_journal: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&journal])
        .await
        .map_err(query("looking for the journal"))?
        .get(0);
    let tx = client
        .transaction()
        .await
        .map_err(query("starting the removal's transaction"))?;
    if has_journal {
        removed.journal_rows = tx
            .query_one(&format!("SELECT count(*) FROM {journal}"), &[])
            .await
            .map_err(query("counting the journal's rows"))?
            .get(0);
    }
    for table in &tables {
        for trigger in &table.triggers {
            tx.batch_execute(&format!(
                "DROP TRIGGER {} ON {}",
                quote_ident(trigger),
                table.quoted
            ))
            .await
            .map_err(query(format!(
                "dropping trigger {trigger:?} on {}",
                table.table
            )))?;
        }
        removed.triggers += table.triggers.len();
        removed.tables += 1;
    }
    removed.functions = tx
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1",
            &[&schema],
        )
        .await
        .map_err(query("counting the schema's functions"))?
        .get::<_, i64>(0) as usize;
    tx.batch_execute(&sql::drop_schema(schema))
        .await
        .map_err(query(format!(
            "dropping schema {schema:?} (it belongs to the role that installed capture)"
        )))?;
    tx.commit().await.map_err(query("committing the removal"))?;
    removed.schema = true;
    Ok(removed)
}
