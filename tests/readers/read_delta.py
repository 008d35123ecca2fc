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
"""

import json
import os
import sys

import pyarrow.compute as pc
from deltalake import DeltaTable


def text(value):
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def main() -> None:
    uri, options = sys.argv[1], json.loads(sys.argv[2])
    version = int(sys.argv[3]) if len(sys.argv) > 3 else None
    table = DeltaTable(uri, storage_options=options, version=version)
    schema = json.loads(table.schema().to_json())
    data = table.to_pyarrow_table()
    order = pc.sort_indices(data, sort_keys=[("_commit_lsn", "ascending"), ("_seq", "ascending")])
    data = data.take(order)
    rows = [{k: text(v) for k, v in row.items()} for row in data.to_pylist()]
    json.dump(
        {
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
