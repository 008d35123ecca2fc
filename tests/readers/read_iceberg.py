"""Read an Iceberg table with pyiceberg and with DuckDB, independently of Tributary.

Usage: read_iceberg.py <table folder> <metadata file uri> [<row filter> [<options json> [counts|pyiceberg]]]

pyiceberg opens the metadata file named (StaticTable.from_metadata); DuckDB opens the table
folder and finds the latest metadata through metadata/version-hint.text (iceberg_scan), or,
for a table in a catalog (which keeps no hint; its files are named <N>-<uuid>.metadata.json),
opens the metadata file named, as a reader given the catalog's pointer does. The
DuckDB extensions are loaded from their pip packages, never downloaded. A table in S3, Azure
(Azurite) or GCS (fake-gcs-server) is reached with the sink's object_store options
(aws_endpoint, azure_storage_endpoint, google_base_url, ...); an empty row filter is none.
With `pyiceberg` last, only pyiceberg reads (`duckdb` is left out): DuckDB reaches neither
`abfss://` on Azurite (it has no ADLS endpoint) nor fake-gcs-server (DuckDB speaks GCS's XML
API).

Prints one JSON document:
  schema        [field id, name, type] of each top-level column, as pyiceberg reads them
  snapshot      the current snapshot's summary
  pyiceberg     every row, each column's value as text (null stays null), in (_commit_lsn,
                _seq) order
  duckdb        the same, read by DuckDB
  files         how many data files pyiceberg plans for a full scan
  filtered      when a row filter is given: how many files pyiceberg plans for it, and how
                many rows each reader returns with it

With `counts` last, the rows stay here: `pyiceberg` and `duckdb` are how many rows each read,
and `difference` holds a few rows each read that the other did not (null when they agree, as
multisets, each value as DuckDB prints it). A table of a million rows is compared in seconds
that way; as text it takes minutes.
"""

import datetime
import decimal
import json
import os
import sys
import time
import uuid

import duckdb
import pyarrow.compute as pc
from pyiceberg.table import StaticTable


def text(value):
    if value is None:
        return None
    if isinstance(value, bytes) and len(value) == 16:
        return str(uuid.UUID(bytes=value))
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
        return value.isoformat()
    if isinstance(value, (datetime.date, datetime.time, uuid.UUID, decimal.Decimal)):
        return value.isoformat() if hasattr(value, "isoformat") else str(value)
    if isinstance(value, dict):
        return json.dumps({k: text(v) for k, v in value.items()}, sort_keys=True)
    if isinstance(value, list):
        return json.dumps([text(v) for v in value])
    return str(value)


def rows_of(data):
    order = pc.sort_indices(data, sort_keys=[("_commit_lsn", "ascending"), ("_seq", "ascending")])
    data = data.take(order)
    return [{k: text(v) for k, v in row.items()} for row in data.to_pylist()]


def extension(package, name):
    module = __import__(package)
    return os.path.join(
        os.path.dirname(module.__file__), "extensions", "v" + duckdb.__version__, name + ".duckdb_extension"
    )


def duckdb_connection(options):
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{extension('duckdb_extension_avro', 'avro')}'")
    con.execute(f"LOAD '{extension('duckdb_extension_iceberg', 'iceberg')}'")
    con.execute("SET TimeZone = 'UTC'")
    if options:
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
    return con


def pyiceberg_properties(options):
    if not options:
        return {}
    if "azure_storage_endpoint" in options:
        # abfss://container@account.dfs.core.windows.net/... through adlfs, which takes the
        # emulator's endpoint in a connection string (pyarrow's Azure file system would read
        # the container@account form as a container name).
        endpoint = options["azure_storage_endpoint"]
        connection = ";".join(
            [
                "DefaultEndpointsProtocol=" + endpoint.split("://", 1)[0],
                "AccountName=" + options["azure_storage_account_name"],
                "AccountKey=" + options["azure_storage_account_key"],
                "BlobEndpoint=" + endpoint,
            ]
        )
        return {
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "adls.connection-string": connection,
            "adls.account-name": options["azure_storage_account_name"],
        }
    if "google_base_url" in options:
        # pyarrow's GCS file system speaks the JSON API fake-gcs-server serves; it checks no
        # token, but pyarrow wants one with its expiry.
        return {
            "gcs.service.host": options["google_base_url"],
            "gcs.oauth2.token": "unchecked",
            "gcs.oauth2.token-expires-at": str(int(time.time() * 1000) + 3_600_000),
        }
    return {
        "s3.endpoint": options["aws_endpoint"],
        "s3.access-key-id": options["aws_access_key_id"],
        "s3.secret-access-key": options["aws_secret_access_key"],
        "s3.region": options.get("aws_region", "us-east-1"),
        "s3.force-virtual-addressing": False,
    }


def compared(con, read, scan):
    """How many rows pyiceberg read (`read`) and DuckDB reads (`scan`), and up to three rows of
    each that the other lacks, every value compared as DuckDB prints it: a multiset
    comparison in DuckDB, as fast as the reads, where rows_of takes minutes on a million."""
    con.register("pyiceberg_read", read)
    columns = ", ".join(f'CAST("{name}" AS VARCHAR)' for name in read.column_names)
    only = {
        "pyiceberg_only": f"SELECT {columns} FROM pyiceberg_read EXCEPT ALL SELECT {columns} FROM {scan}",
        "duckdb_only": f"SELECT {columns} FROM {scan} EXCEPT ALL SELECT {columns} FROM pyiceberg_read",
    }
    differ = {key: con.execute(f"{query} LIMIT 3").fetchall() for key, query in only.items()}
    return {
        "pyiceberg": read.num_rows,
        "duckdb": con.execute(f"SELECT count(*) FROM {scan}").fetchone()[0],
        "difference": differ if any(differ.values()) else None,
    }


def main() -> None:
    folder, metadata = sys.argv[1], sys.argv[2]
    row_filter = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    counts = len(sys.argv) > 5 and sys.argv[5] == "counts"
    only_pyiceberg = len(sys.argv) > 5 and sys.argv[5] == "pyiceberg"
    table = StaticTable.from_metadata(metadata, properties=pyiceberg_properties(options))
    out = {
        "schema": [[f.field_id, f.name, str(f.field_type)] for f in table.schema().fields],
        "snapshot": dict(table.current_snapshot().summary.additional_properties)
        | {"operation": table.current_snapshot().summary.operation.value},
        "files": len(list(table.scan().plan_files())),
    }
    if only_pyiceberg:
        out["pyiceberg"] = rows_of(table.scan().to_arrow())
        json.dump(out, sys.stdout)
        return
    con = duckdb_connection(options)
    hinted = metadata.rsplit("/", 1)[-1].startswith("v")
    scan = f"iceberg_scan('{folder if hinted else metadata}')"
    if counts:
        out |= compared(con, table.scan().to_arrow(), scan)
    else:
        out["pyiceberg"] = rows_of(table.scan().to_arrow())
        out["duckdb"] = rows_of(con.execute(f"SELECT * FROM {scan}").fetch_arrow_table())
    if row_filter is not None:
        filtered = table.scan(row_filter=row_filter)
        out["filtered"] = {
            "files": len(list(filtered.plan_files())),
            "pyiceberg": filtered.to_arrow().num_rows,
            "duckdb": con.execute(f"SELECT count(*) FROM {scan} WHERE {row_filter}").fetchone()[0],
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
