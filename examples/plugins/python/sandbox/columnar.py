"""sandbox-columnar-py: returns columnar output that does not fit, for the tests that show the
host refusing it with a message that names the plugin, the table, the column and the fix.

Setting `wrong` picks what is wrong with the columns it returns for every table:

- `ipc`: bytes that are not an Arrow IPC stream;
- `rows`: one row more than the table has;
- `column`: a column `phone`, which the table's output does not have;
- `type`: `email` as Int32 where the column lands as Utf8;
- `null`: a null in `region`, the column its reshape adds as not nullable.

Without it every table lands as it came, with `region` set to "eu". Setting `reject = "true"`
rejects every change of an odd `seq` (class `sandbox`), which then does not land: the tests of
the dead-letter policy by column. `process` (for hosts
without the columnar interface) lands every change as it came. Streams are written with
../lib/arrow_ipc.py.
"""

from typing import List, Tuple

import arrow_ipc
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import columnar as c
from wit_world.imports import types as t

NAME = "sandbox-columnar-py"
VERSION = "1.0.0"
KINDS = ("ipc", "rows", "column", "type", "null")

# What is wrong with the output (the `wrong` setting), or "" for nothing.
WRONG = ""
# Reject the changes of an odd `seq` (the `reject` setting).
REJECT = False


class Plugin(exports.Plugin):
    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=VERSION)

    def init(self, config: List[Tuple[str, str]]) -> t.Setup:
        global WRONG, REJECT
        for key, value in config:
            if key == "wrong" and value in KINDS:
                WRONG = value
            elif key == "reject" and value in ("true", "false"):
                REJECT = value == "true"
            else:
                raise Err(f"{NAME}: unknown setting `{key}` = {value!r}; it takes wrong = one "
                          f"of {', '.join(KINDS)}, and reject = \"true\"")
        region = t.OutputColumn(name="region", type=t.ScalarType.TEXT, array=False, numeric=None,
                                nullable=False, key=False)
        return t.Setup(
            outputs=[],
            reshapes=[t.Reshape(tables=[], drop=[], rename=[], add=[region])],
            interest=t.Interest(columns=[], old_images=False, messages=False,
                                whole_transactions=False),
        )

    def process(self, batch: t.Batch) -> t.Processed:
        emits: List[t.Emit] = [t.Emit_Keep(t.ChangeRef(transaction=ti, change=ci))
                               for ti, tx in enumerate(batch.transactions)
                               for ci in range(len(tx.changes))]
        return t.Processed(emits=emits, rejections=[])


def columns(rows: int) -> bytes:
    """What the `wrong` setting asks for, for a table of `rows` rows."""
    if WRONG == "ipc":
        return b"these bytes are not an Arrow IPC stream"
    if WRONG == "rows":
        return arrow_ipc.write_stream([("region", arrow_ipc.UTF8, ["eu"] * (rows + 1))])
    if WRONG == "column":
        return arrow_ipc.write_stream([("phone", arrow_ipc.UTF8, ["1"] * rows)])
    if WRONG == "type":
        return arrow_ipc.write_stream([("email", arrow_ipc.INT32, [1] * rows)])
    if WRONG == "null":
        return arrow_ipc.write_stream([("region", arrow_ipc.UTF8, [None] * rows)])
    return arrow_ipc.write_stream([("region", arrow_ipc.UTF8, ["eu"] * rows)])


class Columnar(exports.Columnar):
    def process_columns(self, batch: c.ColumnBatch) -> c.ColumnOutput:
        tables = []
        for table in batch.tables:
            rows = arrow_ipc.read_stream(table.rows)
            rejections = []
            if REJECT:
                seqs = rows.column("_seq").values()
                rejections = [c.RowRejection(row=i, class_="sandbox", message="rejected by column")
                              for i, seq in enumerate(seqs) if seq % 2 == 1]
            tables.append(c.TableOutput(land=c.Selection_All(), columns=columns(rows.length),
                                        old=None, rejections=rejections))
        return c.ColumnOutput(tables=tables, rows=[])
