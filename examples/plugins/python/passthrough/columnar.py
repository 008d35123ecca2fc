"""passthrough-columnar-py: passthrough-py (app.py) taking its batches by column.

The same plugin as app.py, built for the world `columnar-transform`: it also exports the
`columnar` interface, which a host that serves it calls instead of `process`. A batch then
crosses as one Arrow IPC stream per table instead of a record per change, and the answer
`land: all` for each table lets every change through as it came: the cost of the call no
longer grows with the rows. `describe`, `init` and `process` are app.py's, so a host that
does not serve `columnar` runs the same plugin through `process`.

Built with componentize-py against tributary:transform@1.0.0 (world `columnar-transform`);
see README.md.
"""

from typing import List

import app
from wit_world import exports
from wit_world.exports import columnar as c
from wit_world.imports import types as t

NAME = "passthrough-columnar-py"


class Plugin(app.Plugin):
    """app.py's `plugin` interface, under this plugin's own name."""

    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=app.VERSION)


class Columnar(exports.Columnar):
    """The `columnar` interface: componentize-py calls `process_columns` for each batch."""

    def process_columns(self, batch: c.ColumnBatch) -> c.ColumnOutput:
        # One answer per table, in the order of `batch.tables`. Edit here: `Selection_Only`
        # with row indices lands only those rows; `columns` (an Arrow IPC stream, see
        # ../lib/arrow_ipc.py) replaces values.
        tables: List[c.TableOutput] = [
            c.TableOutput(land=c.Selection_All(), columns=None, old=None, rejections=[])
            for _ in batch.tables
        ]
        return c.ColumnOutput(tables=tables, rows=[])
