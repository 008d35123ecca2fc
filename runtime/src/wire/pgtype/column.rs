//! What a column's type means to the pipeline: which built-in scalar its values are read as,
//! and how many array dimensions wrap it.
//!
//! pgoutput names each column's type by OID only. Built-in OIDs are fixed, so
//! [`ColumnType::builtin`] resolves them without a server; user-defined types (domains,
//! enums, composites, arrays of those, extension types) need the catalog, which
//! [`TypeCatalog::resolve`] reads from `pg_type` rows fetched by the pipeline.

use std::collections::HashMap;
use std::sync::Arc;

use super::oid;

/// How the values of a column are read and stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnType {
    /// The type values are read as: a built-in scalar OID (the column's own type, a domain's
    /// base type, `text` for enums and other text-like types), or the declared OID of a type
    /// that is kept in its text form (composites, ranges, extension types).
    pub scalar: u32,
    /// The modifier of `scalar`: the column's, or for a domain the domain's; for `money`, its
    /// number of fraction digits.
    pub modifier: i32,
    /// Array dimensions: 0 for a scalar column.
    pub dims: u8,
    /// The declared type's name: `typname` for built-in types (`int4`, `_text`), and
    /// `schema.typname` for types created by users (`public.mood`); empty when unknown.
    pub name: Arc<str>,
}

/// Fraction digits of `money` under the C and most other locales; the pipeline asks the
/// server for the real figure.
pub const DEFAULT_MONEY_DIGITS: i32 = 2;

impl ColumnType {
    /// The type of a column declared as `type_oid` with `type_modifier`, knowing only the
    /// built-in types. A built-in array is one-dimensional; anything unknown is kept as text.
    pub fn builtin(type_oid: u32, type_modifier: i32) -> ColumnType {
        let name: Arc<str> = Arc::from(super::type_name(type_oid).unwrap_or(""));
        match super::array_element(type_oid) {
            Some(element) => ColumnType {
                scalar: element,
                modifier: scalar_modifier(element, type_modifier),
                dims: 1,
                name,
            },
            None => ColumnType {
                scalar: type_oid,
                modifier: scalar_modifier(type_oid, type_modifier),
                dims: 0,
                name,
            },
        }
    }

    /// The same type with `dims` array dimensions, for array columns declared with more
    /// than one (`int4[][]`).
    pub fn with_dims(mut self, dims: u8) -> ColumnType {
        if self.dims > 0 {
            self.dims = dims.max(1);
        }
        self
    }

    /// The name for messages: the type's name, or its OID when the name is unknown.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("type with oid {}", self.scalar)
        } else {
            self.name.to_string()
        }
    }

    pub fn is_array(&self) -> bool {
        self.dims > 0
    }

    /// Whether values of this type can be read from the binary send format. Types kept as
    /// text have no decoder for their binary form.
    pub fn reads_binary(&self) -> bool {
        super::binary::supports(self.scalar)
    }
}

fn scalar_modifier(scalar: u32, modifier: i32) -> i32 {
    if scalar == oid::MONEY {
        DEFAULT_MONEY_DIGITS
    } else {
        modifier
    }
}

/// One `pg_type` row, as much of it as resolution needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeRow {
    pub oid: u32,
    pub schema: String,
    pub name: String,
    /// `typtype`: `b` base, `c` composite, `d` domain, `e` enum, `p` pseudo, `r` range,
    /// `m` multirange.
    pub kind: u8,
    /// `typbasetype`, for domains.
    pub base: u32,
    /// `typtypmod`, for domains.
    pub base_modifier: i32,
    /// `typelem` of a true array type (`typsubscript = array_subscript_handler`), else 0.
    pub element: u32,
    /// `typsend`'s function name: `textsend` marks a type whose binary form is its text.
    pub send: String,
}

/// Types read from the catalog, by OID.
#[derive(Debug, Clone, Default)]
pub struct TypeCatalog {
    rows: HashMap<u32, TypeRow>,
    money_digits: Option<i32>,
}

/// How deep domain-over-array-over-domain chains may go before resolution gives up.
const MAX_DEPTH: usize = 16;

impl TypeCatalog {
    pub fn new() -> TypeCatalog {
        TypeCatalog::default()
    }

    pub fn insert(&mut self, row: TypeRow) {
        self.rows.insert(row.oid, row);
    }

    pub fn has_money_digits(&self) -> bool {
        self.money_digits.is_some()
    }

    pub fn set_money_digits(&mut self, digits: i32) {
        self.money_digits = Some(digits);
    }

    /// OIDs that resolving `type_oid` needs and the catalog does not hold yet: the type
    /// itself, or what a known row points at (a domain's base, an array's element).
    pub fn missing(&self, type_oid: u32) -> Option<u32> {
        let mut current = type_oid;
        for _ in 0..MAX_DEPTH {
            if is_builtin(current) {
                return None;
            }
            let row = match self.rows.get(&current) {
                Some(row) => row,
                None => return Some(current),
            };
            current = match row.kind {
                b'd' => row.base,
                _ if row.element != 0 => row.element,
                _ => return None,
            };
        }
        None
    }

    /// The column type of a column declared as `type_oid` with `type_modifier` and `dims`
    /// array dimensions (`pg_attribute.attndims`, 0 when not declared).
    pub fn resolve(&self, type_oid: u32, type_modifier: i32, dims: i32) -> ColumnType {
        let declared = self.name_of(type_oid);
        let mut resolved = self.resolve_inner(type_oid, type_modifier, 0);
        if resolved.scalar == oid::MONEY {
            resolved.modifier = self.money_digits.unwrap_or(DEFAULT_MONEY_DIGITS);
        }
        resolved.name = declared;
        resolved.with_dims(dims.clamp(0, super::array::MAX_DIMS as i32) as u8)
    }

    fn name_of(&self, type_oid: u32) -> Arc<str> {
        match self.rows.get(&type_oid) {
            Some(row) if !is_builtin(type_oid) => Arc::from(format!("{}.{}", row.schema, row.name)),
            _ => ColumnType::builtin(type_oid, -1).name,
        }
    }

    fn resolve_inner(&self, type_oid: u32, type_modifier: i32, depth: usize) -> ColumnType {
        if is_builtin(type_oid) || depth >= MAX_DEPTH {
            return ColumnType::builtin(type_oid, type_modifier);
        }
        let Some(row) = self.rows.get(&type_oid) else {
            return ColumnType::builtin(type_oid, type_modifier);
        };
        let kept_as_text = || ColumnType {
            scalar: type_oid,
            modifier: type_modifier,
            dims: 0,
            name: self.name_of(type_oid),
        };
        match row.kind {
            // A domain reads as its base type, under the domain's own modifier.
            b'd' => {
                let modifier = if row.base_modifier != -1 {
                    row.base_modifier
                } else {
                    type_modifier
                };
                self.resolve_inner(row.base, modifier, depth + 1)
            }
            // An enum's text and binary forms are both its label.
            b'e' => ColumnType {
                scalar: oid::TEXT,
                modifier: -1,
                dims: 0,
                name: self.name_of(type_oid),
            },
            _ if row.element != 0 => {
                let element = self.resolve_inner(row.element, type_modifier, depth + 1);
                if element.is_array() {
                    // An array of a domain over an array: PostgreSQL flattens it anyway.
                    element
                } else {
                    ColumnType { dims: 1, ..element }
                }
            }
            // Extension types whose binary form is their text (citext and the like).
            b'b' if matches!(row.send.as_str(), "textsend" | "citextsend") => ColumnType {
                scalar: oid::TEXT,
                modifier: -1,
                dims: 0,
                name: self.name_of(type_oid),
            },
            _ => kept_as_text(),
        }
    }
}

/// OIDs below 16384 (`FirstNormalObjectId`) are assigned at initdb and never change; every
/// one the pipeline knows by number is in [`oid::SCALARS`].
fn is_builtin(type_oid: u32) -> bool {
    super::type_name(type_oid).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(oid: u32, name: &str, kind: u8, base: u32, element: u32) -> TypeRow {
        TypeRow {
            oid,
            schema: "public".into(),
            name: name.into(),
            kind,
            base,
            base_modifier: -1,
            element,
            send: String::new(),
        }
    }

    #[test]
    fn builtin_types_resolve_without_a_catalog() {
        let t = ColumnType::builtin(oid::INT4, -1);
        assert_eq!((t.scalar, t.dims, &*t.name), (oid::INT4, 0, "int4"));
        let t = ColumnType::builtin(oid::NUMERIC_ARRAY, 655_366);
        assert_eq!((t.scalar, t.modifier, t.dims), (oid::NUMERIC, 655_366, 1));
        assert_eq!(&*t.name, "_numeric");
        assert_eq!(ColumnType::builtin(oid::MONEY, -1).modifier, 2);
        let t = ColumnType::builtin(70_000, -1);
        assert_eq!((t.scalar, t.dims, &*t.name), (70_000, 0, ""));
        assert_eq!(t.label(), "type with oid 70000");
    }

    #[test]
    fn domains_enums_and_their_arrays_resolve_through_the_catalog() {
        let mut catalog = TypeCatalog::new();
        let mut email = row(16_400, "email", b'd', oid::VARCHAR, 0);
        email.base_modifier = 104;
        catalog.insert(email);
        catalog.insert(row(16_401, "mood", b'e', 0, 0));
        catalog.insert(row(16_402, "_mood", b'b', 0, 16_401));
        catalog.insert(row(16_403, "point3", b'c', 0, 0));
        catalog.insert(row(16_404, "ints", b'd', oid::INT4_ARRAY, 0));
        catalog.insert(row(16_405, "ci", b'b', 0, 0));
        catalog.rows.get_mut(&16_405).unwrap().send = "citextsend".into();
        catalog.set_money_digits(0);

        let t = catalog.resolve(16_400, -1, 0);
        assert_eq!((t.scalar, t.modifier, t.dims), (oid::VARCHAR, 104, 0));
        assert_eq!(&*t.name, "public.email");
        let t = catalog.resolve(16_401, -1, 0);
        assert_eq!((t.scalar, t.dims, &*t.name), (oid::TEXT, 0, "public.mood"));
        let t = catalog.resolve(16_402, -1, 2);
        assert_eq!((t.scalar, t.dims, &*t.name), (oid::TEXT, 2, "public._mood"));
        let t = catalog.resolve(16_403, -1, 0);
        assert_eq!((t.scalar, t.dims), (16_403, 0));
        assert!(!t.reads_binary());
        let t = catalog.resolve(16_404, -1, 0);
        assert_eq!((t.scalar, t.dims), (oid::INT4, 1));
        assert_eq!(catalog.resolve(16_405, -1, 0).scalar, oid::TEXT);
        assert_eq!(catalog.resolve(oid::MONEY, -1, 0).modifier, 0);
        assert_eq!(catalog.resolve(oid::INT4_ARRAY, -1, 3).dims, 3);
        assert_eq!(catalog.resolve(oid::INT4, -1, 3).dims, 0);
    }

    #[test]
    fn missing_names_what_the_catalog_still_needs() {
        let mut catalog = TypeCatalog::new();
        assert_eq!(catalog.missing(oid::INT4), None);
        assert_eq!(catalog.missing(16_500), Some(16_500));
        catalog.insert(row(16_500, "_d", b'b', 0, 16_501));
        assert_eq!(catalog.missing(16_500), Some(16_501));
        catalog.insert(row(16_501, "d", b'd', oid::INT8, 0));
        assert_eq!(catalog.missing(16_500), None);
    }
}
