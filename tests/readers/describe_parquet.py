"""Read landed Parquet files with DuckDB and pyarrow, independently of Tributary.

Usage: describe_parquet.py <glob> <key column>

Prints one JSON document:
  duckdb.types      column -> DuckDB type, as DESCRIBE names it
  duckdb.rows       key -> column -> the value cast to VARCHAR by DuckDB (null stays null)
  pyarrow.types     column -> Arrow type, as pyarrow prints it
  pyarrow.pg_types  column -> the `pg.type` field metadata, when present
"""

import json
import sys

import duckdb
import pyarrow.parquet as pq


def main() -> None:
    pattern, key = sys.argv[1], sys.argv[2]
    con = duckdb.connect()
    source = f"read_parquet('{pattern}')"
    types = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    # Only the inserted version of each row, so every key appears once. A value DuckDB cannot
    # print (a timestamp past its range) reads as null.
    cursor = con.execute(
        f"SELECT TRY_CAST(COLUMNS(*) AS VARCHAR) FROM {source} WHERE _op = 'insert' ORDER BY _commit_lsn, _seq"
    )
    names = [d[0] for d in cursor.description]
    rows = {}
    for values in cursor.fetchall():
        row = dict(zip(names, values))
        rows[row[key]] = row

    schema = pq.read_schema(sorted(__import__("glob").glob(pattern))[0])
    arrow_types = {field.name: str(field.type) for field in schema}
    pg_types = {
        field.name: field.metadata[b"pg.type"].decode()
        for field in schema
        if field.metadata and b"pg.type" in field.metadata
    }
    json.dump(
        {
            "duckdb": {"types": types, "rows": rows},
            "pyarrow": {"types": arrow_types, "pg_types": pg_types},
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
