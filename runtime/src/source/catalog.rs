//! Column types of source tables, resolved through the source database's catalog.
//!
//! pgoutput describes a column by type OID. Built-in types resolve without asking
//! ([`ColumnType::builtin`]); a domain, an enum, an array of either, an extension type, or an
//! array column declared with more than one dimension needs `pg_type` and `pg_attribute`.
//! [`Catalog`] asks once per unknown type and once per table with array columns, over a plain
//! SQL connection opened when first needed, and keeps what it learned for the run.
//!
//! With `source.binary = true` it also refuses a column whose values Tributary cannot read in
//! the binary format, naming the table, the column and the type.

use std::collections::HashMap;

use tokio_postgres::Client;

use crate::source::provision::{self, ProvisionError, TableColumn};
use crate::wire::pgoutput::Relation;
use crate::wire::pgtype::{ColumnType, TypeCatalog, oid};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error(
        "table {table} column {column:?} has type {type_name}, which Tributary reads only as text; set source.binary = false (or change the column's type)"
    )]
    NotBinary {
        table: String,
        column: String,
        type_name: String,
    },
}

pub struct Catalog {
    pg: crate::source::connect::PgConfig,
    client: Option<Client>,
    types: TypeCatalog,
    binary: bool,
}

impl Catalog {
    /// A catalog for the source at `pg`; `binary` is whether tuples arrive in binary form.
    pub fn new(pg: crate::source::connect::PgConfig, binary: bool) -> Catalog {
        Catalog {
            pg,
            client: None,
            types: TypeCatalog::new(),
            binary,
        }
    }

    async fn client(&mut self) -> Result<&Client, ProvisionError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(crate::source::connect::sql(&self.pg).await?);
        }
        Ok(self.client.as_ref().expect("connected above"))
    }

    /// Load what resolving `type_oids` needs: their rows, the rows they point at (base and
    /// element types), and the fraction digits of `money` when it appears.
    async fn load(
        &mut self,
        type_oids: impl IntoIterator<Item = u32>,
    ) -> Result<(), ProvisionError> {
        let mut wanted: Vec<u32> = type_oids.into_iter().collect();
        loop {
            let mut missing: Vec<u32> = wanted
                .iter()
                .filter_map(|&oid| self.types.missing(oid))
                .collect();
            missing.sort_unstable();
            missing.dedup();
            if missing.is_empty() {
                break;
            }
            let rows = provision::type_rows(self.client().await?, &missing).await?;
            if rows.is_empty() {
                // Dropped since the change was written: such columns stay text.
                break;
            }
            for row in rows {
                self.types.insert(row);
            }
            wanted = missing;
        }
        Ok(())
    }

    /// Learn `money`'s fraction digits if `types` hold money and they are not known yet;
    /// returns whether it did.
    async fn ensure_money(&mut self, types: &[ColumnType]) -> Result<bool, ProvisionError> {
        if types.iter().any(|t| t.scalar == oid::MONEY) && !self.types.has_money_digits() {
            let digits = provision::money_digits(self.client().await?).await?;
            self.types.set_money_digits(digits);
            return Ok(true);
        }
        Ok(false)
    }

    /// The resolved types of `relation`'s columns, or `None` when the decoder's built-in
    /// resolution already has them right. Errors when a column cannot be read as the session
    /// sends it.
    pub async fn resolve(
        &mut self,
        relation: &Relation,
    ) -> Result<Option<Vec<ColumnType>>, CatalogError> {
        // Arrays need their declared dimensions and unknown types their catalog rows; money
        // needs only its fraction digits.
        let needs_rows = relation
            .columns
            .iter()
            .any(|c| c.ty.is_array() || crate::wire::pgtype::type_name(c.type_oid).is_none());
        let has_money = relation.columns.iter().any(|c| c.ty.scalar == oid::MONEY);
        if !needs_rows && !has_money {
            self.check_binary(
                relation.qualified_name(),
                relation.columns.iter().map(|c| (&c.name, &c.ty)),
            )?;
            return Ok(None);
        }
        self.load(relation.columns.iter().map(|c| c.type_oid))
            .await?;
        let dims: HashMap<String, i32> = if needs_rows {
            provision::array_dims(self.client().await?, relation.id)
                .await?
                .into_iter()
                .collect()
        } else {
            HashMap::new()
        };
        let resolve_all = |types: &TypeCatalog| -> Vec<ColumnType> {
            relation
                .columns
                .iter()
                .map(|c| {
                    let declared = dims.get(&c.name).copied().unwrap_or(0);
                    types.resolve(c.type_oid, c.type_modifier, declared)
                })
                .collect()
        };
        let mut types = resolve_all(&self.types);
        if self.ensure_money(&types).await? {
            types = resolve_all(&self.types);
        }
        self.check_binary(
            relation.qualified_name(),
            relation.columns.iter().map(|c| &c.name).zip(&types),
        )?;
        Ok(Some(types))
    }

    /// The columns that key `relation`'s rows in the lake, when pgoutput's flags do not: under
    /// `REPLICA IDENTITY FULL` it flags every column (the old row is sent whole), which would
    /// make a current-state table's key change with every column added, dropped or renamed.
    /// Its primary key keys the rows instead (no column flagged: it has none, and a
    /// current-state table refuses it). `None` for any other identity, whose flags (the
    /// primary key, or the replica identity index) stand.
    pub async fn row_key(
        &mut self,
        relation: &Relation,
    ) -> Result<Option<Vec<bool>>, CatalogError> {
        if relation.replica_identity != crate::wire::pgoutput::ReplicaIdentity::Full {
            return Ok(None);
        }
        let primary = provision::primary_key(self.client().await?, relation.id).await?;
        Ok(Some(
            relation
                .columns
                .iter()
                .map(|c| primary.contains(&c.name))
                .collect(),
        ))
    }

    /// The resolved type of a column declared as `type_oid` with `type_modifier` and `dims`
    /// array dimensions (`attndims`).
    pub async fn column_type(
        &mut self,
        type_oid: u32,
        type_modifier: i32,
        dims: i32,
    ) -> Result<ColumnType, ProvisionError> {
        self.load([type_oid]).await?;
        let ty = self.types.resolve(type_oid, type_modifier, dims);
        if self.ensure_money(std::slice::from_ref(&ty)).await? {
            return Ok(self.types.resolve(type_oid, type_modifier, dims));
        }
        Ok(ty)
    }

    /// Refuse, before streaming, tracked columns that binary tuples would make unreadable.
    pub async fn check_tables(&mut self, columns: &[TableColumn]) -> Result<(), CatalogError> {
        if !self.binary {
            return Ok(());
        }
        self.load(columns.iter().map(|c| c.type_oid)).await?;
        for c in columns {
            let ty = self.types.resolve(c.type_oid, c.type_modifier, c.dims);
            self.check_binary(c.table.clone(), [(&c.column, &ty)])?;
        }
        Ok(())
    }

    fn check_binary<'a>(
        &self,
        table: String,
        columns: impl IntoIterator<Item = (&'a String, &'a ColumnType)>,
    ) -> Result<(), CatalogError> {
        if !self.binary {
            return Ok(());
        }
        for (name, ty) in columns {
            if !ty.reads_binary() {
                return Err(CatalogError::NotBinary {
                    table,
                    column: name.clone(),
                    type_name: ty.label(),
                });
            }
        }
        Ok(())
    }
}
