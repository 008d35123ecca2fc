"""Read a Delta table with the `deltalake` package (delta-rs) and pyarrow, independently of
Tributary.

Usage: read_delta.py <table uri> <storage options as JSON> [version]

Prints one JSON document:
  version   the table's version read (the latest, unless one is given)
  partition_columns  the table's partition columns
  files     the data files a reader of that version reads
  schema    [name, Delta type, nullable] of each column, in order (nested types as JSON)
  rows      every row, each column's value as text (null stays null), in (_commit_lsn, _seq)
            order
  duckdb    the latest version read a second time, by DuckDB's delta extension (delta-kernel;
            loaded from its pip package, never downloaded): each row's [_commit_lsn, _seq, _op]
            in that order, to hold against the rows above (absent when a version is given)
"""

import json
import os
import sys

import duckdb
import pyarrow.compute as pc
from deltalake import DeltaTable


def text(value):
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def extension(package, name):
    module = __import__(package)
    return os.path.join(
        os.path.dirname(module.__file__), "extensions", "v" + duckdb.__version__, name + ".duckdb_extension"
    )


def duckdb_identities(uri, options, has_op):
    """Each row's [_commit_lsn, _seq, _op] as DuckDB's delta extension reads the table (a
    current-state table has no _op: null)."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    if "azure_storage_endpoint" in options:
        # Azure Blob Storage (Azurite in the tests): the account's endpoint and shared key.
        con.execute(f"LOAD '{extension('duckdb_extension_azure', 'azure')}'")
        connection = ";".join(
            [
                "DefaultEndpointsProtocol=" + options["azure_storage_endpoint"].split("://", 1)[0],
                "AccountName=" + options["azure_storage_account_name"],
                "AccountKey=" + options["azure_storage_account_key"],
                "BlobEndpoint=" + options["azure_storage_endpoint"],
            ]
        )
        con.execute("CREATE SECRET (TYPE azure, CONNECTION_STRING ?)", [connection])
        # The delta extension's store takes the emulator account for Azurite and reads where
        # Azurite listens from this variable, not from the connection string.
        endpoint = options["azure_storage_endpoint"]
        os.environ["AZURITE_BLOB_STORAGE_URL"] = endpoint[: endpoint.rindex("/")]
    elif options:
        con.execute(f"LOAD '{extension('duckdb_extension_httpfs', 'httpfs')}'")
        endpoint = options["aws_endpoint"]
        con.execute(
            "CREATE SECRET (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
            [
                options["aws_access_key_id"],
                options["aws_secret_access_key"],
                options.get("aws_region", "us-east-1"),
                endpoint.split("://", 1)[-1],
                endpoint.startswith("https://"),
            ],
        )
    con.execute(f"LOAD '{extension('duckdb_extension_delta', 'delta')}'")
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    rows = con.execute(
        "SELECT CAST(_commit_lsn AS VARCHAR), CAST(_seq AS VARCHAR), "
        + ("CAST(_op AS VARCHAR)" if has_op else "NULL")
        + " FROM delta_scan(?) ORDER BY _commit_lsn, _seq",
        [path],
    ).fetchall()
    return [list(r) for r in rows]


def main() -> None:
    uri, options = sys.argv[1], json.loads(sys.argv[2])
    version = int(sys.argv[3]) if len(sys.argv) > 3 else None
    table = DeltaTable(uri, storage_options=options, version=version)
    schema = json.loads(table.schema().to_json())
    data = table.to_pyarrow_table()
    order = pc.sort_indices(data, sort_keys=[("_commit_lsn", "ascending"), ("_seq", "ascending")])
    data = data.take(order)
    rows = [{k: text(v) for k, v in row.items()} for row in data.to_pylist()]
    columns = data.column_names
    second = None
    if version is None and "_seq" in columns:
        second = duckdb_identities(uri, options, "_op" in columns)
    json.dump(
        {
            "duckdb": second,
            "version": table.version(),
            "partition_columns": list(table.metadata().partition_columns),
            "files": table.file_uris(),
            "schema": [
                [f["name"], f["type"] if isinstance(f["type"], str) else json.dumps(f["type"]), f["nullable"]]
                for f in schema["fields"]
            ],
            "rows": rows,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # The interpreter's teardown can abort in the native threads the reader leaves behind
    # ("terminate called without an active exception"): the answer is out, so leave without it.
    os._exit(0)
