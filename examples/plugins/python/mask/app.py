"""mask-py: a transform plugin that replaces text values of chosen columns by a salted hash.

Settings (the `config` table of its `[[transform]]` in the pipeline file):

- `columns` (required): comma-separated column names, `"email,phone"`. A column of that
  name is masked in every table that has one.
- `salt` (optional, default empty): mixed into the hash, so that the masked values cannot be
  looked up in a table of hashes of likely values.

A masked value is `"sha256:"` and the first 8 bytes of SHA-256(salt + b"\\x00" + text), in
16 lowercase hex digits: the same text always masks to the same value (joins and counts
still work), and nothing else about the text shows. Only `text` values are masked (`text`,
`varchar`, `char(n)`, `citext`, enums, ... arrive as `value.text`); `null` and values of other
types are left as they are.

Built with componentize-py against tributary:transform@1.0.0 (world `transform`); the
modules `wit_world` and `componentize_py_types` are generated from the WIT at build time.
"""

import hashlib
from typing import Dict, List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports import types as t

NAME = "mask-py"
VERSION = "1.0.0"
KNOWN_SETTINGS = ("columns", "salt")

# The settings, kept at module level once `init` has accepted them.
_columns: List[str] = []
_salt: bytes = b""


def mask_text(salt: bytes, text: str) -> str:
    """The masked form of `text`: "sha256:" and 16 hex digits."""
    digest = hashlib.sha256(salt + b"\x00" + text.encode("utf-8")).digest()
    return "sha256:" + digest[:8].hex()


def parse_config(config: List[Tuple[str, str]]) -> Tuple[List[str], bytes]:
    """Reads the settings, or raises Err with a message for the operator."""
    columns: Optional[List[str]] = None
    salt = ""
    for key, value in config:
        if key == "columns":
            names: List[str] = []
            for part in value.split(","):
                name = part.strip()
                if name and name not in names:
                    names.append(name)
            columns = names
        elif key == "salt":
            salt = value
        else:
            raise Err(
                f"{NAME}: unknown setting `{key}`; the settings are `columns` (required) "
                f"and `salt` (optional)"
            )
    if columns is None:
        raise Err(
            f'{NAME}: the setting `columns` is missing; write the columns to mask, '
            f'comma-separated: config = {{ columns = "email,phone" }}'
        )
    if not columns:
        raise Err(
            f'{NAME}: the setting `columns` names no column; write the columns to mask, '
            f'comma-separated: config = {{ columns = "email,phone" }}'
        )
    return columns, salt.encode("utf-8")


def mask_row(row: List[t.Value], positions: List[int], salt: bytes) -> List[Tuple[int, t.Value]]:
    """The (position, value) pairs that replace the text values at `positions` in `row`."""
    edits: List[Tuple[int, t.Value]] = []
    for position in positions:
        if position >= len(row):
            continue
        value = row[position]
        if isinstance(value, t.Value_Text):
            edits.append((position, t.Value_Text(mask_text(salt, value.value))))
    return edits


class Plugin(exports.Plugin):
    """The `plugin` interface: componentize-py calls these methods on an instance of this class."""

    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=VERSION)

    def init(self, config: List[Tuple[str, str]]) -> t.Setup:
        global _columns, _salt
        _columns, _salt = parse_config(config)
        host.log(host.Level.INFO, "masking columns", [("columns", ",".join(_columns))])
        return t.Setup(
            outputs=[],
            reshapes=[],
            interest=t.Interest(
                # Read only the masked columns; every other value arrives as `absent`,
                # and `keep` or an `edit` lands the change's own values for them.
                columns=list(_columns),
                # An update's old image lands in `_old` even if the plugin does not read it:
                # read it to mask it too.
                old_images=True,
                messages=False,
                whole_transactions=False,
            ),
        )

    def process(self, batch: t.Batch) -> t.Processed:
        wanted = set(_columns)
        # Positions of the masked columns in each relation of the batch, by relation index.
        positions: Dict[int, List[int]] = {}
        emits: List[t.Emit] = []
        masked = 0
        for ti, transaction in enumerate(batch.transactions):
            for ci, change in enumerate(transaction.changes):
                ref = t.ChangeRef(transaction=ti, change=ci)
                where = positions.get(change.relation)
                if where is None:
                    columns = batch.relations[change.relation].columns
                    where = [i for i, column in enumerate(columns) if column.name in wanted]
                    positions[change.relation] = where
                values: List[Tuple[int, t.Value]] = []
                old: List[Tuple[int, t.Value]] = []
                if where and change.op != t.Op.TRUNCATE:
                    # The row: the new row of an insert or update, the old row of a delete.
                    row = change.old if change.op == t.Op.DELETE else change.new
                    if row is not None:
                        values = mask_row(row, where, _salt)
                    # The old image of an update (a delete's old image is its row).
                    if change.op == t.Op.UPDATE and change.old is not None:
                        old = mask_row(change.old, where, _salt)
                if values or old:
                    masked += len(values) + len(old)
                    emits.append(t.Emit_Edit(t.Edit(change=ref, values=values, old=old)))
                else:
                    emits.append(t.Emit_Keep(ref))
        if masked:
            host.count("values_masked", masked)
        return t.Processed(emits=emits, rejections=[])
