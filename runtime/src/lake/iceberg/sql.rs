//! A SQL catalog in PostgreSQL (`catalog = "postgresql://…"`), in the layout Iceberg's
//! JdbcCatalog (Spark, Flink), Trino's JDBC catalog and pyiceberg's `SqlCatalog` share:
//!
//! ```sql
//! iceberg_tables (catalog_name, table_namespace, table_name,     -- the primary key
//!                 metadata_location, previous_metadata_location,
//!                 iceberg_type)                                 -- 'TABLE' (schema V1)
//! iceberg_namespace_properties (catalog_name, namespace, property_key,  -- the primary key
//!                               property_value)
//! ```
//!
//! One row per table holds the pointer to its current metadata file. A commit writes the new
//! metadata file first and then swaps the pointer with `UPDATE … WHERE metadata_location =
//! <the base>`: no row changed means another writer moved it first ([`CatalogError::LostRace`]).
//! A namespace lives as rows of its properties; a new one without properties gets
//! `exists = true`, as pyiceberg writes it. Namespaces are stored with their levels joined
//! by dots, and `catalog_name` keeps several catalogs apart in one database: a reader must
//! be given the same name ([`DEFAULT_CATALOG_NAME`] unless the sink names another).
//!
//! The tables are created when missing, with the V1 layout (the `iceberg_type` column, which
//! JdbcCatalog's schema V1 and pyiceberg add to tell tables from views). A database of the V0
//! layout, without that column, is used as it is. Rows of other types (views) are invisible.
//!
//! The connection is plain: TLS to the catalog database is not supported yet, so
//! `sslmode=require` (or stricter) is refused rather than silently ignored.

use std::collections::BTreeMap;
use std::str::FromStr as _;

use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;

use super::catalog::{CatalogError, Secret, TableIdent, dotted};

/// The `catalog_name` rows are written under when the sink names none.
pub const DEFAULT_CATALOG_NAME: &str = "tributary";

/// The URL parameter that names the catalog (`postgresql://host/db?catalog_name=lake`), taken
/// out of the URL before it reaches PostgreSQL.
const CATALOG_NAME_PARAM: &str = "catalog_name";

const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);";

/// How a SQL catalog is reached.
#[derive(Debug, Clone)]
pub struct SqlOptions {
    /// `postgresql://user@host:port/db`, optionally with `catalog_name=…`.
    pub url: String,
    /// Wins over the URL's `catalog_name`; [`DEFAULT_CATALOG_NAME`] when neither names one.
    pub catalog_name: Option<String>,
    /// Wins over a password in the URL (read from the environment or a file by the caller).
    pub password: Option<Secret>,
}

/// Where a table's metadata is, as its catalog row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePointer {
    pub metadata_location: String,
    pub previous_metadata_location: Option<String>,
}

/// A SQL catalog: one connection, opened again when it was lost.
pub struct SqlCatalog {
    config: tokio_postgres::Config,
    catalog_name: String,
    /// `"<name>" in postgresql://user@host:port/db`, without the password.
    display: String,
    /// Whether `iceberg_tables` has the V1 `iceberg_type` column.
    typed: bool,
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl std::fmt::Debug for SqlCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlCatalog")
            .field("catalog", &self.display)
            .field("typed", &self.typed)
            .finish_non_exhaustive()
    }
}

impl SqlCatalog {
    /// Connects, creates the catalog tables when they are missing and reads their layout.
    pub async fn connect(options: SqlOptions) -> Result<SqlCatalog, CatalogError> {
        let (url, named) = split_catalog_name(&options.url);
        let catalog_name = options
            .catalog_name
            .or(named)
            .unwrap_or_else(|| DEFAULT_CATALOG_NAME.to_owned());
        let mut config =
            tokio_postgres::Config::from_str(&url).map_err(|error| CatalogError::Failed {
                catalog: format!("\"{catalog_name}\""),
                what: "reading the catalog URL".into(),
                message: crate::error_chain(&error),
            })?;
        if let Some(password) = &options.password {
            config.password(password.expose());
        }
        let display = format!("\"{catalog_name}\" in {}", describe(&config));
        let mut catalog = SqlCatalog {
            config,
            catalog_name,
            display,
            typed: true,
            client: tokio::sync::Mutex::new(None),
        };
        if matches!(catalog.config.get_ssl_mode(), SslMode::Require) {
            return Err(catalog.failed(
                "connecting",
                "TLS to the catalog database is not supported yet; use sslmode=disable or prefer \
                 (plain) on a network you trust"
                    .into(),
            ));
        }
        catalog.prepare().await?;
        Ok(catalog)
    }

    /// The catalog's name and database, as errors name it.
    pub fn name(&self) -> &str {
        &self.display
    }

    /// Whether the namespace, or one below it, has properties or tables.
    pub async fn namespace_exists(&self, namespace: &[String]) -> Result<bool, CatalogError> {
        let what = format!("looking up namespace {}", dotted(namespace));
        let name = dotted(namespace);
        let below = format!("{}.%", escape_like(&name));
        let found = self
            .query(
                &what,
                "SELECT 1 FROM iceberg_tables
                 WHERE catalog_name = $1 AND (table_namespace = $2 OR table_namespace LIKE $3 ESCAPE '!')
                 UNION ALL
                 SELECT 1 FROM iceberg_namespace_properties
                 WHERE catalog_name = $1 AND (namespace = $2 OR namespace LIKE $3 ESCAPE '!')
                 LIMIT 1",
                &[&self.catalog_name, &name, &below],
            )
            .await?;
        Ok(!found.is_empty())
    }

    /// Creates a namespace: its properties, or `exists = true` when it has none.
    pub async fn create_namespace(
        &self,
        namespace: &[String],
        properties: &BTreeMap<String, String>,
    ) -> Result<(), CatalogError> {
        let name = dotted(namespace);
        if self.namespace_exists(namespace).await? {
            return Err(self.already_exists(format!("namespace {name}")));
        }
        let what = format!("creating namespace {name}");
        let minimal = BTreeMap::from([("exists".to_owned(), "true".to_owned())]);
        let properties = if properties.is_empty() {
            &minimal
        } else {
            properties
        };
        let keys: Vec<&str> = properties.keys().map(String::as_str).collect();
        let values: Vec<&str> = properties.values().map(String::as_str).collect();
        let result = self
            .execute(
                "INSERT INTO iceberg_namespace_properties
                     (catalog_name, namespace, property_key, property_value)
                 SELECT $1, $2, key, value FROM unnest($3::text[], $4::text[]) AS p(key, value)",
                &[&self.catalog_name, &name, &keys, &values],
            )
            .await;
        match result {
            Err(Failure::Db(code, _)) if code == SqlState::UNIQUE_VIOLATION => {
                Err(self.already_exists(format!("namespace {name}")))
            }
            other => other
                .map(drop)
                .map_err(|failure| self.failure(&what, failure)),
        }
    }

    /// The table's pointer; [`CatalogError::NoSuchTable`] when the catalog has no such table.
    pub async fn load(&self, table: &TableIdent) -> Result<TablePointer, CatalogError> {
        let what = format!("loading table {table}");
        let rows = self
            .query(
                &what,
                &format!(
                    "SELECT metadata_location, previous_metadata_location FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3{}",
                    self.tables_only()
                ),
                &[&self.catalog_name, &dotted(&table.namespace), &table.name],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Err(CatalogError::NoSuchTable {
                catalog: self.display.clone(),
                table: table.to_string(),
            });
        };
        let Some(metadata_location) = row.get::<_, Option<String>>(0) else {
            return Err(self.failed(
                &what,
                "its row has no metadata_location; repair or drop the row".into(),
            ));
        };
        Ok(TablePointer {
            metadata_location,
            previous_metadata_location: row.get(1),
        })
    }

    /// The names of the tables in `namespace` (not below it), in order.
    pub async fn list_tables(&self, namespace: &[String]) -> Result<Vec<String>, CatalogError> {
        let what = format!("listing the tables of namespace {}", dotted(namespace));
        let rows = self
            .query(
                &what,
                &format!(
                    "SELECT table_name FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2{} ORDER BY table_name",
                    self.tables_only()
                ),
                &[&self.catalog_name, &dotted(namespace)],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    pub async fn table_exists(&self, table: &TableIdent) -> Result<bool, CatalogError> {
        match self.load(table).await {
            Ok(_) => Ok(true),
            Err(CatalogError::NoSuchTable { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Registers a table whose first metadata file is written at `metadata_location`. Its
    /// namespace must exist.
    pub async fn create_table(
        &self,
        table: &TableIdent,
        metadata_location: &str,
    ) -> Result<(), CatalogError> {
        if !self.namespace_exists(&table.namespace).await? {
            return Err(CatalogError::NoSuchNamespace {
                catalog: self.display.clone(),
                namespace: dotted(&table.namespace),
            });
        }
        let what = format!("creating table {table}");
        let (columns, values) = if self.typed {
            (", iceberg_type", ", 'TABLE'")
        } else {
            ("", "")
        };
        let result = self
            .execute(
                &format!(
                    "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name,
                         metadata_location, previous_metadata_location{columns})
                     VALUES ($1, $2, $3, $4, NULL{values})"
                ),
                &[
                    &self.catalog_name,
                    &dotted(&table.namespace),
                    &table.name,
                    &metadata_location,
                ],
            )
            .await;
        match result {
            Err(Failure::Db(code, _)) if code == SqlState::UNIQUE_VIOLATION => {
                Err(self.already_exists(format!("table {table}")))
            }
            other => other
                .map(drop)
                .map_err(|failure| self.failure(&what, failure)),
        }
    }

    /// Moves the table's pointer from `base` (the metadata its commit was made on) to `new`.
    pub async fn swap(
        &self,
        table: &TableIdent,
        base: &str,
        new: &str,
    ) -> Result<(), CatalogError> {
        let what = format!("committing to table {table}");
        let result = self
            .execute(
                &format!(
                    "UPDATE iceberg_tables
                     SET metadata_location = $1, previous_metadata_location = $2
                     WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5
                       AND metadata_location = $2{}",
                    self.tables_only()
                ),
                &[
                    &new,
                    &base,
                    &self.catalog_name,
                    &dotted(&table.namespace),
                    &table.name,
                ],
            )
            .await;
        match result {
            Ok(1..) => Ok(()),
            Ok(0) => {
                // No row moved: the pointer is elsewhere now (or the table is gone).
                let current = self.load(table).await?;
                Err(CatalogError::LostRace {
                    catalog: self.display.clone(),
                    table: table.to_string(),
                    message: format!(
                        "its metadata is {} now, not {base}",
                        current.metadata_location
                    ),
                })
            }
            // The statement went out and no answer came back: it may have been applied.
            Err(Failure::Lost(message)) => Err(CatalogError::CommitStateUnknown {
                catalog: self.display.clone(),
                table: table.to_string(),
                message,
            }),
            Err(failure) => Err(self.failure(&what, failure)),
        }
    }

    /// Creates the catalog tables when missing and learns whether they are of the V1 layout.
    async fn prepare(&mut self) -> Result<(), CatalogError> {
        let what = "creating the catalog tables";
        let mut attempt = self.batch(CREATE_TABLES).await;
        // Two writers creating the tables at once: one of them meets the other's type.
        if let Err(Failure::Db(code, _)) = &attempt
            && (*code == SqlState::UNIQUE_VIOLATION || *code == SqlState::DUPLICATE_TABLE)
        {
            attempt = self.batch(CREATE_TABLES).await;
        }
        attempt.map_err(|failure| self.failure(what, failure))?;
        match self
            .batch("SELECT iceberg_type FROM iceberg_tables LIMIT 0")
            .await
        {
            Ok(()) => self.typed = true,
            Err(Failure::Db(code, _)) if code == SqlState::UNDEFINED_COLUMN => self.typed = false,
            Err(failure) => return Err(self.failure("reading the catalog tables", failure)),
        }
        Ok(())
    }

    /// The condition that keeps views (rows of other types) out, on a V1 layout.
    fn tables_only(&self) -> &'static str {
        if self.typed {
            " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
        } else {
            ""
        }
    }

    async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, CatalogError> {
        let mut held = self.connected().await.map_err(|f| self.failure(what, f))?;
        let client = held.as_mut().expect("connected() leaves a client");
        super::catalog::count_request();
        let result = client.query(sql, params).await;
        result.map_err(|error| self.failure(what, failure(&error)))
    }

    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, Failure> {
        let mut held = self.connected().await?;
        let client = held.as_mut().expect("connected() leaves a client");
        super::catalog::count_request();
        client.execute(sql, params).await.map_err(|e| failure(&e))
    }

    async fn batch(&self, sql: &str) -> Result<(), Failure> {
        let mut held = self.connected().await?;
        let client = held.as_mut().expect("connected() leaves a client");
        super::catalog::count_request();
        client.batch_execute(sql).await.map_err(|e| failure(&e))
    }

    /// The connection, opened anew when there is none or it was closed.
    async fn connected(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, Option<tokio_postgres::Client>>, Failure> {
        let mut held = self.client.lock().await;
        if held.as_ref().is_none_or(|client| client.is_closed()) {
            let (client, connection) =
                self.config
                    .connect(tokio_postgres::NoTls)
                    .await
                    .map_err(|error| match failure(&error) {
                        // Nothing was sent: a failed connect is never an unknown outcome.
                        Failure::Lost(message) => Failure::Connect(message),
                        other => other,
                    })?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(error = %error, "the SQL catalog's connection ended");
                }
            });
            *held = Some(client);
        }
        Ok(held)
    }

    fn failure(&self, what: &str, failure: Failure) -> CatalogError {
        let message = match failure {
            Failure::Db(code, message) if code == SqlState::INVALID_PASSWORD => {
                return CatalogError::CredentialsRefused {
                    catalog: self.display.clone(),
                    message,
                };
            }
            Failure::Db(_, message) | Failure::Lost(message) | Failure::Connect(message) => message,
        };
        self.failed(what, message)
    }

    fn failed(&self, what: &str, message: String) -> CatalogError {
        CatalogError::Failed {
            catalog: self.display.clone(),
            what: what.to_owned(),
            message,
        }
    }

    fn already_exists(&self, what: String) -> CatalogError {
        CatalogError::AlreadyExists {
            catalog: self.display.clone(),
            what,
        }
    }
}

/// Why a statement failed: the server refused it (nothing applied), the connection could not
/// be opened (nothing sent), or the connection was lost (it may have been applied).
#[derive(Debug)]
enum Failure {
    Db(SqlState, String),
    Connect(String),
    Lost(String),
}

fn failure(error: &tokio_postgres::Error) -> Failure {
    match error.as_db_error() {
        Some(db) => Failure::Db(
            db.code().clone(),
            format!("{} ({})", db.message(), db.code().code()),
        ),
        None => Failure::Lost(crate::error_chain(error)),
    }
}

/// The URL without its `catalog_name` parameter, and that parameter's value.
fn split_catalog_name(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut name = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((CATALOG_NAME_PARAM, value)) => {
                name = Some(value.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    if kept.is_empty() {
        (base.to_owned(), name)
    } else {
        (format!("{base}?{}", kept.join("&")), name)
    }
}

/// `postgresql://user@host:port/db`, never with the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let user = config
        .get_user()
        .map(|user| format!("{user}@"))
        .unwrap_or_default();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(dir) => dir.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect();
    let db = config.get_dbname().unwrap_or_default();
    format!("postgresql://{user}{}/{db}", hosts.join(","))
}

/// `text` as a literal inside a `LIKE … ESCAPE '!'` pattern.
fn escape_like(text: &str) -> String {
    text.replace('!', "!!")
        .replace('%', "!%")
        .replace('_', "!_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_name_comes_out_of_the_url() {
        assert_eq!(
            split_catalog_name("postgresql://db/lake?catalog_name=shop&sslmode=disable"),
            (
                "postgresql://db/lake?sslmode=disable".to_owned(),
                Some("shop".to_owned())
            )
        );
        assert_eq!(
            split_catalog_name("postgresql://db/lake?catalog_name=shop"),
            ("postgresql://db/lake".to_owned(), Some("shop".to_owned()))
        );
        assert_eq!(
            split_catalog_name("postgresql://db/lake"),
            ("postgresql://db/lake".to_owned(), None)
        );
    }

    #[test]
    fn a_catalog_is_described_without_its_password() {
        let config =
            tokio_postgres::Config::from_str("postgresql://lake:hunter2@db.internal:6432/catalog")
                .unwrap();
        assert_eq!(
            describe(&config),
            "postgresql://lake@db.internal:6432/catalog"
        );
    }

    #[test]
    fn like_patterns_keep_wildcards_literal() {
        assert_eq!(escape_like("a_b%c!d"), "a!_b!%c!!d");
    }
}
