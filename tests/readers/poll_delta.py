"""Read a Delta table again and again with the `deltalake` package while it is written to
(appended and compacted), until a stop file exists, and say whether every read was
consistent.

Usage: poll_delta.py <table uri> <storage options as JSON> <stop file>

The writer only inserts, each id once. Every read of a version must hold each id once, and
never fewer rows than a read of an earlier version. Prints one JSON document:
  reads     how many reads were made
  versions  the distinct versions read, in order
  files     [version, data files] of each distinct version read
  problems  one sentence per inconsistent read
"""

import json
import os
import sys

import pyarrow.compute as pc
from deltalake import DeltaTable


def main() -> None:
    uri, options, stop = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    reads, versions, files, problems = 0, [], [], []
    most = 0
    while True:
        stopping = os.path.exists(stop)
        table = DeltaTable(uri, storage_options=options)
        version = table.version()
        ids = table.to_pyarrow_table(columns=["id"]).column("id")
        rows, distinct = len(ids), pc.count_distinct(ids).as_py()
        reads += 1
        if distinct != rows:
            problems.append(f"version {version}: {rows} rows but {distinct} distinct ids")
        if rows < most:
            problems.append(f"version {version}: {rows} rows after a read of {most}")
        most = max(most, rows)
        if not versions or versions[-1] != version:
            versions.append(version)
            files.append([version, len(table.file_uris())])
        if stopping:
            break
    json.dump({"reads": reads, "versions": versions, "files": files, "problems": problems}, sys.stdout)
    sys.stdout.flush()
    # The interpreter's teardown can abort in the native threads the reader leaves behind
    # ("terminate called without an active exception"): the answer is out, so leave without it.
    os._exit(0)


if __name__ == "__main__":
    main()
