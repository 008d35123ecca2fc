//! OIDs of PostgreSQL's built-in types, as fixed in `pg_type.dat`.
//!
//! These numbers are stable across server versions, so they are safe to match on without a
//! catalog lookup. Types created by users (enums, domains, composites, extension types) get
//! OIDs assigned at `CREATE TYPE` time and are not listed here.

pub const BOOL: u32 = 16;
pub const BYTEA: u32 = 17;
pub const CHAR: u32 = 18;
pub const NAME: u32 = 19;
pub const INT8: u32 = 20;
pub const INT2: u32 = 21;
pub const INT2VECTOR: u32 = 22;
pub const INT4: u32 = 23;
pub const REGPROC: u32 = 24;
pub const TEXT: u32 = 25;
pub const OID: u32 = 26;
pub const TID: u32 = 27;
pub const XID: u32 = 28;
pub const CID: u32 = 29;
pub const OIDVECTOR: u32 = 30;
pub const JSON: u32 = 114;
pub const XML: u32 = 142;
pub const POINT: u32 = 600;
pub const LSEG: u32 = 601;
pub const PATH: u32 = 602;
pub const BOX: u32 = 603;
pub const POLYGON: u32 = 604;
pub const LINE: u32 = 628;
pub const CIDR: u32 = 650;
pub const FLOAT4: u32 = 700;
pub const FLOAT8: u32 = 701;
pub const CIRCLE: u32 = 718;
pub const MACADDR8: u32 = 774;
pub const MONEY: u32 = 790;
pub const MACADDR: u32 = 829;
pub const INET: u32 = 869;
pub const ACLITEM: u32 = 1033;
pub const BPCHAR: u32 = 1042;
pub const VARCHAR: u32 = 1043;
pub const DATE: u32 = 1082;
pub const TIME: u32 = 1083;
pub const TIMESTAMP: u32 = 1114;
pub const TIMESTAMPTZ: u32 = 1184;
pub const INTERVAL: u32 = 1186;
pub const TIMETZ: u32 = 1266;
pub const BIT: u32 = 1560;
pub const VARBIT: u32 = 1562;
pub const NUMERIC: u32 = 1700;
pub const REFCURSOR: u32 = 1790;
pub const REGCLASS: u32 = 2205;
pub const REGTYPE: u32 = 2206;
pub const UUID: u32 = 2950;
pub const PG_LSN: u32 = 3220;
pub const TSVECTOR: u32 = 3614;
pub const TSQUERY: u32 = 3615;
pub const JSONB: u32 = 3802;
pub const INT4RANGE: u32 = 3904;
pub const NUMRANGE: u32 = 3906;
pub const TSRANGE: u32 = 3908;
pub const TSTZRANGE: u32 = 3910;
pub const DATERANGE: u32 = 3912;
pub const INT8RANGE: u32 = 3926;
pub const JSONPATH: u32 = 4072;
pub const XID8: u32 = 5069;

pub const BOOL_ARRAY: u32 = 1000;
pub const BYTEA_ARRAY: u32 = 1001;
pub const CHAR_ARRAY: u32 = 1002;
pub const NAME_ARRAY: u32 = 1003;
pub const INT2_ARRAY: u32 = 1005;
pub const INT2VECTOR_ARRAY: u32 = 1006;
pub const INT4_ARRAY: u32 = 1007;
pub const REGPROC_ARRAY: u32 = 1008;
pub const TEXT_ARRAY: u32 = 1009;
pub const TID_ARRAY: u32 = 1010;
pub const XID_ARRAY: u32 = 1011;
pub const CID_ARRAY: u32 = 1012;
pub const OIDVECTOR_ARRAY: u32 = 1013;
pub const BPCHAR_ARRAY: u32 = 1014;
pub const VARCHAR_ARRAY: u32 = 1015;
pub const INT8_ARRAY: u32 = 1016;
pub const POINT_ARRAY: u32 = 1017;
pub const LSEG_ARRAY: u32 = 1018;
pub const PATH_ARRAY: u32 = 1019;
pub const BOX_ARRAY: u32 = 1020;
pub const FLOAT4_ARRAY: u32 = 1021;
pub const FLOAT8_ARRAY: u32 = 1022;
pub const POLYGON_ARRAY: u32 = 1027;
pub const OID_ARRAY: u32 = 1028;
pub const ACLITEM_ARRAY: u32 = 1034;
pub const MACADDR_ARRAY: u32 = 1040;
pub const INET_ARRAY: u32 = 1041;
pub const TIMESTAMP_ARRAY: u32 = 1115;
pub const DATE_ARRAY: u32 = 1182;
pub const TIME_ARRAY: u32 = 1183;
pub const TIMESTAMPTZ_ARRAY: u32 = 1185;
pub const INTERVAL_ARRAY: u32 = 1187;
pub const NUMERIC_ARRAY: u32 = 1231;
pub const TIMETZ_ARRAY: u32 = 1270;
pub const BIT_ARRAY: u32 = 1561;
pub const VARBIT_ARRAY: u32 = 1563;
pub const JSON_ARRAY: u32 = 199;
pub const XML_ARRAY: u32 = 143;
pub const LINE_ARRAY: u32 = 629;
pub const CIDR_ARRAY: u32 = 651;
pub const CIRCLE_ARRAY: u32 = 719;
pub const MACADDR8_ARRAY: u32 = 775;
pub const MONEY_ARRAY: u32 = 791;
pub const REFCURSOR_ARRAY: u32 = 2201;
pub const REGCLASS_ARRAY: u32 = 2210;
pub const REGTYPE_ARRAY: u32 = 2211;
pub const UUID_ARRAY: u32 = 2951;
pub const PG_LSN_ARRAY: u32 = 3221;
pub const TSVECTOR_ARRAY: u32 = 3643;
pub const TSQUERY_ARRAY: u32 = 3645;
pub const JSONB_ARRAY: u32 = 3807;
pub const INT4RANGE_ARRAY: u32 = 3905;
pub const NUMRANGE_ARRAY: u32 = 3907;
pub const TSRANGE_ARRAY: u32 = 3909;
pub const TSTZRANGE_ARRAY: u32 = 3911;
pub const DATERANGE_ARRAY: u32 = 3913;
pub const INT8RANGE_ARRAY: u32 = 3927;
pub const JSONPATH_ARRAY: u32 = 4073;
pub const XID8_ARRAY: u32 = 271;

/// Built-in scalar types: OID, `typname`, and the OID of the array type over it.
pub(super) const SCALARS: &[(u32, &str, u32)] = &[
    (BOOL, "bool", BOOL_ARRAY),
    (BYTEA, "bytea", BYTEA_ARRAY),
    (CHAR, "char", CHAR_ARRAY),
    (NAME, "name", NAME_ARRAY),
    (INT8, "int8", INT8_ARRAY),
    (INT2, "int2", INT2_ARRAY),
    (INT2VECTOR, "int2vector", INT2VECTOR_ARRAY),
    (INT4, "int4", INT4_ARRAY),
    (REGPROC, "regproc", REGPROC_ARRAY),
    (TEXT, "text", TEXT_ARRAY),
    (OID, "oid", OID_ARRAY),
    (TID, "tid", TID_ARRAY),
    (XID, "xid", XID_ARRAY),
    (CID, "cid", CID_ARRAY),
    (OIDVECTOR, "oidvector", OIDVECTOR_ARRAY),
    (JSON, "json", JSON_ARRAY),
    (XML, "xml", XML_ARRAY),
    (POINT, "point", POINT_ARRAY),
    (LSEG, "lseg", LSEG_ARRAY),
    (PATH, "path", PATH_ARRAY),
    (BOX, "box", BOX_ARRAY),
    (POLYGON, "polygon", POLYGON_ARRAY),
    (LINE, "line", LINE_ARRAY),
    (CIDR, "cidr", CIDR_ARRAY),
    (FLOAT4, "float4", FLOAT4_ARRAY),
    (FLOAT8, "float8", FLOAT8_ARRAY),
    (CIRCLE, "circle", CIRCLE_ARRAY),
    (MACADDR8, "macaddr8", MACADDR8_ARRAY),
    (MONEY, "money", MONEY_ARRAY),
    (MACADDR, "macaddr", MACADDR_ARRAY),
    (INET, "inet", INET_ARRAY),
    (ACLITEM, "aclitem", ACLITEM_ARRAY),
    (BPCHAR, "bpchar", BPCHAR_ARRAY),
    (VARCHAR, "varchar", VARCHAR_ARRAY),
    (DATE, "date", DATE_ARRAY),
    (TIME, "time", TIME_ARRAY),
    (TIMESTAMP, "timestamp", TIMESTAMP_ARRAY),
    (TIMESTAMPTZ, "timestamptz", TIMESTAMPTZ_ARRAY),
    (INTERVAL, "interval", INTERVAL_ARRAY),
    (TIMETZ, "timetz", TIMETZ_ARRAY),
    (BIT, "bit", BIT_ARRAY),
    (VARBIT, "varbit", VARBIT_ARRAY),
    (NUMERIC, "numeric", NUMERIC_ARRAY),
    (REFCURSOR, "refcursor", REFCURSOR_ARRAY),
    (REGCLASS, "regclass", REGCLASS_ARRAY),
    (REGTYPE, "regtype", REGTYPE_ARRAY),
    (UUID, "uuid", UUID_ARRAY),
    (PG_LSN, "pg_lsn", PG_LSN_ARRAY),
    (TSVECTOR, "tsvector", TSVECTOR_ARRAY),
    (TSQUERY, "tsquery", TSQUERY_ARRAY),
    (JSONB, "jsonb", JSONB_ARRAY),
    (INT4RANGE, "int4range", INT4RANGE_ARRAY),
    (NUMRANGE, "numrange", NUMRANGE_ARRAY),
    (TSRANGE, "tsrange", TSRANGE_ARRAY),
    (TSTZRANGE, "tstzrange", TSTZRANGE_ARRAY),
    (DATERANGE, "daterange", DATERANGE_ARRAY),
    (INT8RANGE, "int8range", INT8RANGE_ARRAY),
    (JSONPATH, "jsonpath", JSONPATH_ARRAY),
    (XID8, "xid8", XID8_ARRAY),
];

/// `typname` of each array type in [`SCALARS`], index for index: PostgreSQL names an array
/// type after its element with a leading underscore.
pub(super) const ARRAY_NAMES: &[&str] = &[
    "_bool",
    "_bytea",
    "_char",
    "_name",
    "_int8",
    "_int2",
    "_int2vector",
    "_int4",
    "_regproc",
    "_text",
    "_oid",
    "_tid",
    "_xid",
    "_cid",
    "_oidvector",
    "_json",
    "_xml",
    "_point",
    "_lseg",
    "_path",
    "_box",
    "_polygon",
    "_line",
    "_cidr",
    "_float4",
    "_float8",
    "_circle",
    "_macaddr8",
    "_money",
    "_macaddr",
    "_inet",
    "_aclitem",
    "_bpchar",
    "_varchar",
    "_date",
    "_time",
    "_timestamp",
    "_timestamptz",
    "_interval",
    "_timetz",
    "_bit",
    "_varbit",
    "_numeric",
    "_refcursor",
    "_regclass",
    "_regtype",
    "_uuid",
    "_pg_lsn",
    "_tsvector",
    "_tsquery",
    "_jsonb",
    "_int4range",
    "_numrange",
    "_tsrange",
    "_tstzrange",
    "_daterange",
    "_int8range",
    "_jsonpath",
    "_xid8",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_names_follow_their_elements() {
        assert_eq!(SCALARS.len(), ARRAY_NAMES.len());
        for ((_, name, _), array_name) in SCALARS.iter().zip(ARRAY_NAMES) {
            assert_eq!(&array_name[1..], *name);
        }
    }

    #[test]
    fn oids_are_unique() {
        let mut all: Vec<u32> = SCALARS.iter().flat_map(|&(o, _, a)| [o, a]).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
