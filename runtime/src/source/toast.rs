//! Which columns of a table PostgreSQL may store out of line, judged without IO from the
//! catalog's facts: what an update that leaves such a value untouched does not send (pgoutput
//! sends an unchanged *out-of-line* value as a marker; a value stored inline, compressed or not,
//! always comes whole).
//!
//! The server only moves values out of line when a row is larger than the TOAST threshold
//! (`TOAST_TUPLE_THRESHOLD`, 2032 bytes on the default 8 kB block), and then only values of a
//! variable-length type whose storage is not `plain`, and larger than the pointer that would
//! replace them. So:
//!
//! - a fixed-length type (`int`, `timestamptz`, `uuid`, ...) or a column with `attstorage = 'p'`
//!   never leaves its row;
//! - a type whose modifier bounds its size (`varchar(n)` and `char(n)` at four bytes a character
//!   at most, `numeric(p, s)`, `bit(n)`, `varbit(n)`) can only leave its row when the row as a
//!   whole, every column at its largest, can pass the threshold, or the table's
//!   `toast_tuple_target` once the unbounded values are out of line;
//! - anything else (`text`, `bytea`, `jsonb`, unbounded `varchar`, arrays, domains, ...) may.

/// What the judgement needs of one column: `pg_attribute` and `pg_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnStorage {
    pub name: String,
    /// `atttypid`.
    pub type_oid: u32,
    /// `atttypmod`, -1 when none.
    pub type_modifier: i32,
    /// `attstorage`: `p`, `e`, `m` or `x`.
    pub storage: char,
    /// `typlen`: bytes of a fixed-length type, -1 for a variable-length one.
    pub length: i16,
    /// `typalign`: `c`, `s`, `i` or `d`.
    pub align: char,
    /// Stored in the row but never published (a generated column): it counts towards the
    /// row's size, and is never sent.
    pub published: bool,
}

/// The storage facts of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableStorage {
    /// The server's `block_size`.
    pub block_size: u32,
    /// The table's `toast_tuple_target` storage parameter, when set.
    pub tuple_target: Option<u32>,
    /// Every column the rows hold, in `attnum` order.
    pub columns: Vec<ColumnStorage>,
}

const BPCHAR: u32 = 1042;
const VARCHAR: u32 = 1043;
const BIT: u32 = 1560;
const VARBIT: u32 = 1562;
const NUMERIC: u32 = 1700;
/// A length word of a variable-length value.
const VARHDRSZ: u32 = 4;
/// The most bytes one character takes in any server encoding.
const MAX_CHAR_BYTES: u32 = 4;
/// What an out-of-line value leaves in its row: a one-byte header and the 16-byte pointer.
const TOAST_POINTER: u32 = 18;
const MAXALIGN: u32 = 8;
/// The fixed part of a heap tuple's header.
const TUPLE_HEADER: u32 = 23;
/// A page's header plus the line pointers of the four tuples the threshold divides it among.
const PAGE_OVERHEAD: u32 = 24 + 4 * 4;

/// The names of the published columns whose values PostgreSQL may store out of line.
pub fn out_of_line_columns(table: &TableStorage) -> Vec<String> {
    let varlena = |c: &&ColumnStorage| c.published && c.length == -1 && c.storage != 'p';
    let bounded = |c: &ColumnStorage| match c.length {
        n if n > 0 => Some(n as u32),
        -1 => max_varlena_size(c.type_oid, c.type_modifier),
        _ => None,
    };
    let unbounded: Vec<String> = table
        .columns
        .iter()
        .filter(varlena)
        .filter(|c| bounded(c).is_none())
        .map(|c| c.name.clone())
        .collect();
    // Every column at its largest; unbounded ones as the pointer they become out of line.
    let largest = row_size(table, |c| bounded(c).unwrap_or(TOAST_POINTER));
    let threshold = tuple_threshold(table.block_size);
    let target = table.tuple_target.unwrap_or(threshold).min(threshold);
    if unbounded.is_empty() && largest <= threshold {
        return Vec::new();
    }
    if largest <= target {
        return unbounded;
    }
    // The row may still be too large with every unbounded value out: bounded values larger
    // than a pointer go next.
    table
        .columns
        .iter()
        .filter(varlena)
        .filter(|c| bounded(c).is_none_or(|size| size > align_up(TOAST_POINTER, MAXALIGN)))
        .map(|c| c.name.clone())
        .collect()
}

/// The most bytes a value of a variable-length type with this modifier takes, when the
/// modifier bounds it.
pub fn max_varlena_size(type_oid: u32, type_modifier: i32) -> Option<u32> {
    let modifier = u32::try_from(type_modifier).ok()?;
    match type_oid {
        BPCHAR | VARCHAR if modifier >= VARHDRSZ => {
            Some((modifier - VARHDRSZ) * MAX_CHAR_BYTES + VARHDRSZ)
        }
        // A length word, a 16-bit header and a 16-bit weight, then base-10000 digits of two
        // bytes: p decimal digits need (p + 6) / 4 of them at most, as the first may hold one.
        NUMERIC if modifier >= VARHDRSZ => {
            let precision = ((modifier - VARHDRSZ) >> 16) & 0xffff;
            Some(VARHDRSZ + 4 + 2 * ((precision + 6) / 4))
        }
        // A length word, the bit count, then the bits.
        BIT | VARBIT => Some(VARHDRSZ + 4 + modifier.div_ceil(8)),
        _ => None,
    }
}

/// `TOAST_TUPLE_THRESHOLD`: a quarter of a page, less its overhead, aligned down.
fn tuple_threshold(block_size: u32) -> u32 {
    let quarter = (block_size.saturating_sub(align_up(PAGE_OVERHEAD, MAXALIGN))) / 4;
    quarter - quarter % MAXALIGN
}

/// The size of a row whose columns take `size` bytes each, with the tuple header, a null
/// bitmap and every column aligned as its type asks.
fn row_size(table: &TableStorage, size: impl Fn(&ColumnStorage) -> u32) -> u32 {
    let bitmap = (table.columns.len() as u32).div_ceil(8);
    let mut offset = align_up(TUPLE_HEADER + bitmap, MAXALIGN);
    for column in &table.columns {
        let align = match column.align {
            'd' => 8,
            'i' => 4,
            's' => 2,
            _ => 1,
        };
        offset = align_up(offset, align).saturating_add(size(column));
    }
    offset
}

fn align_up(n: u32, to: u32) -> u32 {
    n.div_ceil(to).saturating_mul(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INT4: u32 = 23;
    const TEXT: u32 = 25;
    const JSONB: u32 = 3802;
    const INT4_ARRAY: u32 = 1007;

    fn column(name: &str, type_oid: u32, type_modifier: i32) -> ColumnStorage {
        let (storage, length, align) = match type_oid {
            INT4 => ('p', 4, 'i'),
            NUMERIC => ('m', -1, 'i'),
            _ => ('x', -1, 'i'),
        };
        ColumnStorage {
            name: name.into(),
            type_oid,
            type_modifier,
            storage,
            length,
            align,
            published: true,
        }
    }

    fn table(columns: Vec<ColumnStorage>) -> TableStorage {
        TableStorage {
            block_size: 8192,
            tuple_target: None,
            columns,
        }
    }

    /// `varchar(n)`, `char(n)`: n + 4; `numeric(p, s)`: (p << 16 | s) + 4.
    fn chars(n: i32) -> i32 {
        n + 4
    }

    fn numeric(precision: i32, scale: i32) -> i32 {
        ((precision << 16) | scale) + 4
    }

    #[test]
    fn the_threshold_is_postgres_default() {
        assert_eq!(tuple_threshold(8192), 2032);
        assert_eq!(tuple_threshold(32768), 8176);
    }

    #[test]
    fn bounded_types_have_a_largest_size() {
        assert_eq!(max_varlena_size(VARCHAR, chars(20)), Some(84));
        assert_eq!(max_varlena_size(BPCHAR, chars(1)), Some(8));
        assert_eq!(max_varlena_size(NUMERIC, numeric(10, 2)), Some(16));
        assert_eq!(
            max_varlena_size(NUMERIC, numeric(1000, 0)),
            Some(8 + 2 * 251)
        );
        assert_eq!(max_varlena_size(VARBIT, 64), Some(16));
        for (oid, modifier) in [(VARCHAR, -1), (NUMERIC, -1), (TEXT, -1), (JSONB, -1)] {
            assert_eq!(max_varlena_size(oid, modifier), None, "{oid}");
        }
    }

    #[test]
    fn a_table_of_bounded_columns_below_the_threshold_has_none_out_of_line() {
        let orders = table(vec![
            column("id", INT4, -1),
            column("amount", NUMERIC, numeric(10, 2)),
            column("code", VARCHAR, chars(20)),
            column("country", BPCHAR, chars(2)),
        ]);
        assert!(out_of_line_columns(&orders).is_empty());
    }

    #[test]
    fn unbounded_columns_may_be_stored_out_of_line_and_bounded_ones_beside_them_not() {
        let notes = table(vec![
            column("id", INT4, -1),
            column("code", VARCHAR, chars(20)),
            column("body", TEXT, -1),
            column("doc", JSONB, -1),
            column("tags", INT4_ARRAY, -1),
            column("name", VARCHAR, -1),
            column("price", NUMERIC, -1),
        ]);
        assert_eq!(
            out_of_line_columns(&notes),
            ["body", "doc", "tags", "name", "price"]
        );
    }

    #[test]
    fn plain_storage_and_unpublished_columns_are_never_named() {
        let mut body = column("body", TEXT, -1);
        body.storage = 'p';
        let mut generated = column("generated", TEXT, -1);
        generated.published = false;
        let t = table(vec![column("id", INT4, -1), body, generated]);
        assert!(out_of_line_columns(&t).is_empty());
    }

    #[test]
    fn bounded_columns_that_can_outgrow_the_row_may_be_stored_out_of_line() {
        // Three varchar(200): 804 bytes each at most, 2412 in all, past the threshold.
        let wide = table(vec![
            column("id", INT4, -1),
            column("a", VARCHAR, chars(200)),
            column("b", VARCHAR, chars(200)),
            column("c", VARCHAR, chars(200)),
        ]);
        assert_eq!(out_of_line_columns(&wide), ["a", "b", "c"]);
        // Two fit; a lowered toast_tuple_target makes them candidates beside a text column.
        let mut two = table(vec![
            column("a", VARCHAR, chars(200)),
            column("b", VARCHAR, chars(200)),
            column("body", TEXT, -1),
        ]);
        assert_eq!(out_of_line_columns(&two), ["body"]);
        two.tuple_target = Some(256);
        assert_eq!(out_of_line_columns(&two), ["a", "b", "body"]);
        // Smaller than a pointer, a value is never moved.
        let mut tiny = two.clone();
        tiny.columns[0] = column("a", VARCHAR, chars(3));
        tiny.columns[1] = column("b", BPCHAR, chars(1));
        tiny.tuple_target = Some(128);
        assert_eq!(out_of_line_columns(&tiny), ["body"]);
    }
}
