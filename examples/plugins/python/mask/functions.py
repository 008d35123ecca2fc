"""mask-functions-py: mask-columnar-py (columnar.py) with the digests computed by the host.

The same settings and the same digest as app.py and columnar.py ("sha256:" and the first 8
bytes of SHA-256(salt + b"\\x00" + text), in hex), masking the same columns, but no value is
touched in Python: for each table the plugin hands the host's column functions
(`tributary:functions/columns@1.0.0`, guest-sdk/wit/deps/functions/columns.wit) the stream it
was given and one `sha256` step per masked column, and returns the stream they make as its
replaced columns. The host computes every digest at native speed, in one call per table.

Built for the world `columnar-functions` (guest-sdk/wit/functions.wit), which imports the
functions. A host that does not serve them refuses this build when it loads it, saying so:
there, run mask-columnar-py (columnar.py) or mask-py (app.py), which compute the digests
themselves and land the same values.
"""

from typing import List, Optional, Tuple

import app
import arrow_ipc
import columnar
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import columnar as c
from wit_world.imports import columns as fn
from wit_world.imports import types as t

NAME = "mask-functions-py"


class Plugin(app.Plugin):
    """app.py's `plugin` interface (settings, interest, `process`), under this name."""

    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=app.VERSION)


def masked_names(data: bytes, names: List[str]) -> List[str]:
    """Those of `names` that are text (`Utf8`) columns of the stream `data`: its schema is read,
    not its values."""
    table = arrow_ipc.read_stream(data)
    return [name for name in names
            if (column := table.column(name)) is not None and column.type_name == "Utf8"]


def mask_stream(data: bytes, names: List[str]) -> Tuple[Optional[bytes], int]:
    """The masked columns of the stream `data` among `names`, as a stream, and how many values
    were masked; (None, 0) when it holds none of them."""
    names = masked_names(data, names)
    if not names:
        return None, 0
    digest = fn.Digest(prefix=app._salt + b"\x00", keep=8,
                       encoding=fn.Encoding_Hex("sha256:"))
    steps = [fn.Step(input=name, operation=fn.Operation_Sha256(digest), output=name)
             for name in names]
    try:
        applied = fn.apply(data, steps)
    except Err as e:
        raise Err(t.Error_Fatal(f"the host's column functions refused the mask: {e.value}"))
    return applied.columns, sum(applied.computed)


class Columnar(exports.Columnar):
    """The `columnar` interface: componentize-py calls `process_columns` for each batch."""

    def process_columns(self, batch: c.ColumnBatch) -> c.ColumnOutput:
        return columnar.mask_batch(batch, mask_stream)
