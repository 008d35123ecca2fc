"""Runs the built Python plugins in a small stand-in host, without Tributary.

The host here is wasmtime-py: it loads a component, links WASI 0.2 with an empty context and a
`host` interface that records what the plugin logs and counts, and calls `describe`, `init` and
`process` with batches built by hand.

    pip install wasmtime==50.0.1
    python examples/plugins/python/test/test_plugins.py DIR

DIR holds passthrough.wasm, mask.wasm and their columnar variants passthrough-columnar.wasm
and mask-columnar.wasm (what `build_python_examples OUTDIR` writes to OUTDIR/python);
TRIBUTARY_PYTHON_PLUGINS may name it instead. The columnar variants get their tables as Arrow
IPC streams, written and read here with lib/arrow_ipc.py (itself checked against pyarrow by
test_arrow_ipc.py).
"""

import hashlib
import os
import sys
import unittest
from typing import Any, Dict, List, Optional, Tuple

import wasmtime
from wasmtime import component as wc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import arrow_ipc  # noqa: E402

PLUGIN_INTERFACE = "tributary:transform/plugin@1.0.0"
COLUMNAR_INTERFACE = "tributary:transform/columnar@1.0.0"
HOST_INTERFACE = "tributary:transform/host@1.0.0"
PLUGIN_DIR = ""


class Rec:
    """A WIT record as wasmtime-py reads it: one attribute per field, by its WIT (kebab) name."""

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name.replace("_", "-"), value)


def field(record: Any, name: str) -> Any:
    return getattr(record, name.replace("_", "-"))


def var(tag: str, payload: Any = None) -> wc.Variant:
    return wc.Variant(tag, payload)


NULL, ABSENT, TOAST = var("null"), var("absent"), var("unchanged-toast")


def text(s: str) -> wc.Variant:
    return var("text", s)


def column(name: str, oid: int = 25, type_name: str = "text", key: bool = False) -> Rec:
    return Rec(name=name, type_oid=oid, type_modifier=-1, type_name=type_name, key=key)


def change(op: str, relation: int, seq: int, new: Optional[list] = None, old: Optional[list] = None) -> Rec:
    return Rec(op=op, relation=relation, seq=seq, new=new, old=old)


def transaction(changes: List[Rec], xid: int = 1) -> Rec:
    return Rec(xid=xid, commit_lsn=1000 + xid, end_lsn=1100 + xid, commit_time=1_700_000_000_000_000,
               changes=changes, messages=[], part=0, last_part=True)


def batch(relations: List[Rec], transactions: List[Rec]) -> Rec:
    return Rec(relations=relations, transactions=transactions, messages=[])


USERS = Rec(id=16384, schema="public", table="users", columns=[
    column("id", 20, "int8", key=True), column("email"), column("name"),
    column("phone", 1043, "varchar"), column("uid", 2950, "uuid")])
ORDERS = Rec(id=16390, schema="public", table="orders", columns=[
    column("id", 23, "int4", key=True), column("phone"), column("note")])
PLAIN = Rec(id=16400, schema="public", table="plain", columns=[
    column("id", 23, "int4", key=True), column("other")])


class Plugin:
    """One component, compiled once; `fresh()` starts a new instance."""

    def __init__(self, path: str) -> None:
        self.engine = wasmtime.Engine()
        self.component = wc.Component.from_file(self.engine, path)
        self.logs: List[Tuple[str, str, list]] = []
        self.counts: Dict[str, int] = {}
        self.linker = wc.Linker(self.engine)
        self.linker.add_wasip2()
        with self.linker.root() as root:
            with root.add_instance(HOST_INTERFACE) as host:
                host.add_func("log", lambda _store, level, message, fields:
                              self.logs.append((level, message, fields)))
                host.add_func("count", lambda _store, name, delta:
                              self.counts.__setitem__(name, self.counts.get(name, 0) + delta))
        self.fresh()

    def fresh(self) -> None:
        self.logs.clear()
        self.counts.clear()
        self.store = wasmtime.Store(self.engine)
        self.store.set_wasi(wasmtime.WasiConfig())
        self.instance = self.linker.instantiate(self.store, self.component)
        interface = self.instance.get_export_index(self.store, PLUGIN_INTERFACE)
        assert interface is not None, f"the component does not export {PLUGIN_INTERFACE}"
        self.funcs = {}
        for name in ("describe", "init", "process"):
            index = self.instance.get_export_index(self.store, name, interface)
            assert index is not None, f"{PLUGIN_INTERFACE} has no {name}"
            self.funcs[name] = self.instance.get_func(self.store, index)
        columnar = self.instance.get_export_index(self.store, COLUMNAR_INTERFACE)
        if columnar is not None:
            index = self.instance.get_export_index(self.store, "process-columns", columnar)
            assert index is not None, f"{COLUMNAR_INTERFACE} has no process-columns"
            self.funcs["process-columns"] = self.instance.get_func(self.store, index)

    def call(self, name: str, *args: Any) -> Any:
        func = self.funcs[name]
        result = func(self.store, *args)
        func.post_return(self.store)
        return result

    def imports(self) -> List[str]:
        return sorted(self.component.type.imports(self.engine))


def emitted(processed: Any) -> List[tuple]:
    """The emits as plain tuples: ("keep", t, c) or ("edit", t, c, values, old)."""
    out = []
    for emit in processed.emits:
        if emit.tag == "keep":
            out.append(("keep", emit.payload.transaction, emit.payload.change))
        elif emit.tag == "edit":
            edit = emit.payload
            pairs = lambda ps: [(pos, value.tag, value.payload) for pos, value in ps]
            out.append(("edit", edit.change.transaction, edit.change.change,
                        pairs(edit.values), pairs(edit.old)))
        else:
            out.append((emit.tag,))
    return out


def masked(salt: str, s: str) -> str:
    return "sha256:" + hashlib.sha256(salt.encode() + b"\x00" + s.encode()).hexdigest()[:16]


class PassthroughTest(unittest.TestCase):
    plugin: Plugin

    @classmethod
    def setUpClass(cls) -> None:
        cls.plugin = Plugin(os.path.join(PLUGIN_DIR, "passthrough.wasm"))

    def setUp(self) -> None:
        self.plugin.fresh()

    def test_imports_only_host_and_wasi(self) -> None:
        for name in self.plugin.imports():
            self.assertTrue(name.startswith(("tributary:transform/", "wasi:")), name)

    def test_describe_and_setup(self) -> None:
        self.assertEqual(self.plugin.call("describe").name, "passthrough-py")
        setup = self.plugin.call("init", [])
        self.assertEqual(setup.outputs, [])
        self.assertEqual(setup.reshapes, [])
        interest = setup.interest
        self.assertEqual(field(interest, "columns"), [])
        self.assertIs(field(interest, "old_images"), False)
        self.assertIs(field(interest, "messages"), False)
        self.assertIs(field(interest, "whole_transactions"), False)

    def test_refuses_any_setting(self) -> None:
        self.plugin.call("describe")
        refusal = self.plugin.call("init", [("columns", "email")])
        self.assertIsInstance(refusal, str)
        self.assertIn("columns", refusal)

    def test_keeps_every_change_in_order(self) -> None:
        self.plugin.call("describe")
        self.plugin.call("init", [])
        b = batch([USERS, ORDERS], [
            transaction([change("insert", 0, 0, new=[ABSENT] * 5),
                         change("update", 1, 1, new=[ABSENT] * 3),
                         change("delete", 0, 2),
                         change("truncate", 1, 3)], xid=7),
            transaction([], xid=8),
            transaction([change("insert", 1, 0, new=[ABSENT] * 3)], xid=9),
        ])
        processed = self.plugin.call("process", b)
        self.assertEqual(emitted(processed), [("keep", 0, 0), ("keep", 0, 1), ("keep", 0, 2),
                                              ("keep", 0, 3), ("keep", 2, 0)])
        self.assertEqual(processed.rejections, [])


class MaskTest(unittest.TestCase):
    plugin: Plugin

    @classmethod
    def setUpClass(cls) -> None:
        cls.plugin = Plugin(os.path.join(PLUGIN_DIR, "mask.wasm"))

    def setUp(self) -> None:
        self.plugin.fresh()
        self.assertEqual(self.plugin.call("describe").name, "mask-py")

    def refusal(self, config: List[Tuple[str, str]]) -> str:
        self.plugin.fresh()
        self.plugin.call("describe")
        result = self.plugin.call("init", config)
        self.assertIsInstance(result, str, f"init accepted {config}")
        return result

    def test_refusals(self) -> None:
        self.assertIn("columns = ", self.refusal([]))
        self.assertIn("columns = ", self.refusal([("columns", "")]))
        self.assertIn("columns = ", self.refusal([("columns", " , ,")]))
        self.assertIn("pepper", self.refusal([("columns", "email"), ("pepper", "x")]))

    def test_setup(self) -> None:
        setup = self.plugin.call("init", [("columns", " email , phone,,email ")])
        interest = setup.interest
        self.assertEqual(field(interest, "columns"), ["email", "phone"])
        self.assertIs(field(interest, "old_images"), True)
        self.assertIs(field(interest, "messages"), False)
        self.assertIs(field(interest, "whole_transactions"), False)
        self.assertEqual((setup.outputs, setup.reshapes), ([], []))
        self.assertEqual(self.plugin.logs, [("info", "masking columns", [("columns", "email,phone")])])

    def test_masks(self) -> None:
        for salt in ("", "s3cret"):
            with self.subTest(salt=salt):
                self.plugin.fresh()
                self.plugin.call("describe")
                config = [("columns", "email,phone")] + ([("salt", salt)] if salt else [])
                self.plugin.call("init", config)
                b = batch([USERS, ORDERS, PLAIN], [
                    transaction([
                        change("insert", 0, 0, new=[ABSENT, text("a@x"), ABSENT, text("+1 555"), ABSENT]),
                        change("insert", 0, 1, new=[ABSENT, NULL, ABSENT, NULL, ABSENT]),
                        change("update", 0, 2, new=[ABSENT, text("b@x"), ABSENT, TOAST, ABSENT],
                               old=[var("int8", 2**63 - 1), text("a@x"), ABSENT, text("+1 555"), ABSENT]),
                        change("update", 0, 3, new=[ABSENT, text("c@x"), ABSENT, NULL, ABSENT]),
                        change("delete", 0, 4, old=[var("int8", -2**63), NULL, ABSENT, NULL, ABSENT]),
                        change("delete", 0, 5, old=[var("int8", 5), text("d@x"), ABSENT, text("p"), ABSENT]),
                    ], xid=10),
                    transaction([
                        change("truncate", 1, 0),
                        change("insert", 1, 1, new=[ABSENT, text("+44"), ABSENT]),
                        change("insert", 2, 2, new=[ABSENT, ABSENT]),
                        change("delete", 1, 3),
                        change("insert", 1, 4, new=[ABSENT, var("json", '"x"'), ABSENT]),
                    ], xid=11),
                ])
                processed = self.plugin.call("process", b)
                m = lambda s: ("text", masked(salt, s))
                self.assertEqual(emitted(processed), [
                    ("edit", 0, 0, [(1, *m("a@x")), (3, *m("+1 555"))], []),
                    ("keep", 0, 1),
                    ("edit", 0, 2, [(1, *m("b@x"))], [(1, *m("a@x")), (3, *m("+1 555"))]),
                    ("edit", 0, 3, [(1, *m("c@x"))], []),
                    ("keep", 0, 4),
                    ("edit", 0, 5, [(1, *m("d@x")), (3, *m("p"))], []),
                    ("keep", 1, 0),
                    ("edit", 1, 1, [(1, *m("+44"))], []),
                    ("keep", 1, 2),
                    ("keep", 1, 3),
                    ("keep", 1, 4),
                ])
                self.assertEqual(processed.rejections, [])
                self.assertEqual(self.plugin.counts, {"values_masked": 9})

    def test_known_value(self) -> None:
        self.plugin.call("init", [("columns", "email")])
        b = batch([USERS], [transaction([change("insert", 0, 0, new=[ABSENT, text("a@x"), ABSENT, ABSENT, ABSENT])])])
        self.assertEqual(emitted(self.plugin.call("process", b)),
                         [("edit", 0, 0, [(1, "text", "sha256:4c9bd72d1e1dd3f8")], [])])


def table_rows(ops: List[str], columns: List[Tuple[str, list]]) -> bytes:
    """A table's rows as the host sends them: the metadata columns, then the columns read."""
    n = len(ops)
    return arrow_ipc.write_stream(
        [("_txn", arrow_ipc.UINT32, [0] * n), ("_change", arrow_ipc.UINT32, list(range(n))),
         ("_seq", arrow_ipc.UINT32, list(range(n))), ("_op", arrow_ipc.UTF8, ops)]
        + [(name, arrow_ipc.UTF8, values) for name, values in columns])


def column_batch(relations: List[Rec], tables: List[Rec]) -> Rec:
    header = Rec(xid=7, commit_lsn=1007, end_lsn=1107, commit_time=1_700_000_000_000_000,
                 messages=[], part=0, last_part=True)
    return Rec(relations=relations, transactions=[header], tables=tables, messages=[])


def landed_all(output: Any) -> List[bool]:
    """Per table whether it lands every row (`selection.all`, which wasmtime-py hands over as
    None: the one case without a payload)."""
    def is_all(land: Any) -> bool:
        return land is None or (isinstance(land, wc.Variant) and land.tag == "all")
    return [is_all(field(t, "land")) for t in output.tables]


class PassthroughColumnarTest(unittest.TestCase):
    plugin: Plugin

    @classmethod
    def setUpClass(cls) -> None:
        cls.plugin = Plugin(os.path.join(PLUGIN_DIR, "passthrough-columnar.wasm"))

    def test_exports_both_interfaces_and_lands_every_table_as_it_came(self) -> None:
        self.plugin.fresh()
        self.assertEqual(self.plugin.call("describe").name, "passthrough-columnar-py")
        self.assertEqual(field(self.plugin.call("init", []).interest, "columns"), [])
        b = column_batch([USERS, ORDERS], [Rec(rows=table_rows(["insert", "delete"], []), old=None),
                                           Rec(rows=table_rows(["truncate"], []), old=None)])
        out = self.plugin.call("process-columns", b)
        self.assertEqual(landed_all(out), [True, True])
        self.assertEqual([(t.columns, t.old, t.rejections) for t in out.tables], [(None, None, [])] * 2)
        self.assertEqual(out.rows, [])
        # `process` is passthrough-py's, for hosts without the columnar interface.
        typed = self.plugin.call("process", batch([USERS], [transaction([change("insert", 0, 0)])]))
        self.assertEqual(emitted(typed), [("keep", 0, 0)])


class MaskColumnarTest(unittest.TestCase):
    plugin: Plugin

    @classmethod
    def setUpClass(cls) -> None:
        cls.plugin = Plugin(os.path.join(PLUGIN_DIR, "mask-columnar.wasm"))

    def test_masks_the_named_text_columns_of_rows_and_old_images(self) -> None:
        self.plugin.fresh()
        self.assertEqual(self.plugin.call("describe").name, "mask-columnar-py")
        setup = self.plugin.call("init", [("columns", "email,phone,uid"), ("salt", "pepper")])
        self.assertEqual(field(setup.interest, "columns"), ["email", "phone", "uid"])
        ops = ["insert", "insert", "update", "delete"]
        emails = ["ann@example.com", None, "cé@exämple.org", "bob@example.com"]
        phones = ["+1 555 0100", None, None, None]
        rows = table_rows(ops, [("email", emails), ("phone", phones)])
        old = arrow_ipc.write_stream([("email", arrow_ipc.UTF8, [None, None, "ann@example.com", None]),
                                      ("phone", arrow_ipc.UTF8, [None] * 4)])
        b = column_batch([USERS, PLAIN], [Rec(rows=rows, old=old),
                                          Rec(rows=table_rows(["insert"], []), old=None)])
        out = self.plugin.call("process-columns", b)
        self.assertEqual(landed_all(out), [True, True])
        users, plain = out.tables
        got = arrow_ipc.read_stream(users.columns)
        self.assertEqual([c.name for c in got.columns], ["email", "phone"])
        self.assertEqual(got.column("email").values(),
                         [None if e is None else masked("pepper", e) for e in emails])
        self.assertEqual(got.column("phone").values(), [masked("pepper", "+1 555 0100"), None, None, None])
        old_masked = arrow_ipc.read_stream(users.old)
        self.assertEqual(old_masked.column("email").values(),
                         [None, None, masked("pepper", "ann@example.com"), None])
        self.assertEqual((plain.columns, plain.old), (None, None))
        self.assertEqual(self.plugin.counts, {"values_masked": 5})


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and not args[0].startswith("-"):
        PLUGIN_DIR = args.pop(0)
    else:
        PLUGIN_DIR = os.environ.get("TRIBUTARY_PYTHON_PLUGINS", "")
    if not PLUGIN_DIR:
        sys.exit(__doc__)
    unittest.main(argv=[sys.argv[0]] + args, verbosity=2)
