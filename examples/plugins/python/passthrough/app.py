"""passthrough-py: a transform plugin that lets every change through as it came.

Built with componentize-py against tributary:transform@1.0.0 (world `transform`). The
modules `wit_world` and `componentize_py_types` do not exist on disk: componentize-py
generates them from the WIT while it builds the component (`componentize-py bindings`
writes the same code out, for an editor or a type checker).
"""

from typing import List, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import types as t

NAME = "passthrough-py"
VERSION = "1.0.0"


class Plugin(exports.Plugin):
    """The `plugin` interface: componentize-py calls these methods on an instance of this class.

    It makes a separate instance for each call, so keep settings in module globals, not in
    `self`.
    """

    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=VERSION)

    def init(self, config: List[Tuple[str, str]]) -> t.Setup:
        # `result<setup, string>`: return the setup, or raise Err(message) to refuse.
        for key, _value in config:
            raise Err(f"{NAME} takes no settings: remove `{key}` from its config")
        return t.Setup(
            outputs=[],
            reshapes=[],
            interest=t.Interest(
                # `some([])`: read no column values (every value arrives as `absent`).
                # `None` would be `none`, which means every column; a list of names reads
                # those.
                columns=[],
                old_images=False,
                messages=False,
                whole_transactions=False,
            ),
        )

    def process(self, batch: t.Batch) -> t.Processed:
        # `result<processed, error>`: return the processed batch, or raise
        # Err(t.Error_Fatal(...)) / Err(t.Error_Retry(...)).
        emits: List[t.Emit] = []
        for ti, transaction in enumerate(batch.transactions):
            for ci in range(len(transaction.changes)):
                # Edit here: decide what lands for each change. Emit_Keep lands it as it
                # came; t.Emit_Edit(t.Edit(change=ref, values=[(position, value)], old=[]))
                # replaces some values; t.Emit_Row(...) spells a row out whole.
                emits.append(t.Emit_Keep(t.ChangeRef(transaction=ti, change=ci)))
        return t.Processed(emits=emits, rejections=[])
