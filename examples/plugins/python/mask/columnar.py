"""mask-columnar-py: mask-py (app.py) taking its batches by column.

The same settings and the same digest as app.py ("sha256:" and the first 8 bytes of
SHA-256(salt + b"\\x00" + text), in hex), built for the world `columnar-transform`. A host
that serves the `columnar` interface calls `process_columns` instead of `process`: each table
of the batch arrives as an Arrow IPC stream holding the masked columns only (the plugin's
interest), and the plugin returns the masked columns as a stream of the same rows. Reading and
writing the streams is ../lib/arrow_ipc.py, a small reader and writer of the format in pure Python.

Which columns are masked: a column of a masked name whose values are text (`Utf8` in the
stream), except `json`, `jsonb` and `numeric` columns, whose text must stay a valid value of
their type. Columns of types kept as text (composites, ranges, ...) are masked too, where
app.py, which sees them as `value.other`, leaves them. `null` stays `null`.

`describe`, `init` and `process` are app.py's, so a host that does not serve `columnar` runs
the same masker through `process`. Built with componentize-py against
tributary:transform@1.0.0 (world `columnar-transform`); see README.md.
"""

import hashlib
from typing import Any, Callable, List, Optional, Tuple

import app
import arrow_ipc
from wit_world import exports
from wit_world.exports import columnar as c
from wit_world.imports import host
from wit_world.imports import types as t

NAME = "mask-columnar-py"

# Text columns of these types are left as they are: a digest is not a valid value of them.
UNMASKED_TYPES = {"json", "jsonb", "numeric"}


class Plugin(app.Plugin):
    """app.py's `plugin` interface (settings, interest, `process`), under this name."""

    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=app.VERSION)


def mask_values(salted: Any, raws: List[Optional[bytes]]) -> List[Optional[str]]:
    """The masked form of each UTF-8 value (None stays None). `salted` is a SHA-256 already
    fed with the salt and the 0 byte; each value continues a copy of it."""
    out: List[Optional[str]] = []
    append = out.append
    for raw in raws:
        if raw is None:
            append(None)
        else:
            digest = salted.copy()
            digest.update(raw)
            append("sha256:" + digest.hexdigest()[:16])
    return out


def mask_stream(salted: Any, data: bytes, names: List[str]) -> Optional[List[tuple]]:
    """The masked columns of the stream `data` among `names`, as `write_stream` takes them;
    None when it holds none of them."""
    table = arrow_ipc.read_stream(data)
    columns = []
    for name in names:
        column = table.column(name)
        if column is not None and column.type_name == "Utf8":
            columns.append((name, arrow_ipc.UTF8, mask_values(salted, column.raw())))
    return columns or None


def written_stream(salted: Any, data: bytes, names: List[str]) -> Tuple[Optional[bytes], int]:
    """`mask_stream` written as a stream, and how many values it masked; (None, 0) when the
    stream holds none of the columns."""
    columns = mask_stream(salted, data, names)
    if columns is None:
        return None, 0
    masked = sum(v is not None for _, _, values in columns for v in values)
    return arrow_ipc.write_stream(columns), masked


def mask_batch(batch: c.ColumnBatch,
               mask: Callable[[bytes, List[str]], Tuple[Optional[bytes], int]]) -> c.ColumnOutput:
    """The output of a mask by column, whose `mask(data, names)` gives the masked columns of the
    stream `data` among `names` as a stream, and how many values it masked ((None, 0) for
    none): this plugin's, or functions.py's, which has the host compute them."""
    wanted = set(app._columns)
    outputs: List[c.TableOutput] = []
    masked = 0
    for relation, table in zip(batch.relations, batch.tables):
        names = [column.name for column in relation.columns
                 if column.name in wanted and column.type_name not in UNMASKED_TYPES]
        columns = old = None
        if names:
            columns, n = mask(table.rows, names)
            masked += n
            # The old images of updates land in `_old`: mask them too.
            if table.old is not None:
                old, n = mask(table.old, names)
                masked += n
        outputs.append(c.TableOutput(land=c.Selection_All(), columns=columns, old=old,
                                     rejections=[]))
    if masked:
        host.count("values_masked", masked)
    return c.ColumnOutput(tables=outputs, rows=[])


class Columnar(exports.Columnar):
    """The `columnar` interface: componentize-py calls `process_columns` for each batch."""

    def process_columns(self, batch: c.ColumnBatch) -> c.ColumnOutput:
        salted = hashlib.sha256(app._salt + b"\x00")
        return mask_batch(batch, lambda data, names: written_stream(salted, data, names))
