"""lib/arrow_ipc.py, the Arrow IPC reader and writer of the columnar examples, against pyarrow
(Apache Arrow's C++ library): what it writes pyarrow reads and validates, what pyarrow writes
it reads, and what it cannot read it refuses, saying why. Runs in plain CPython:

    pip install pyarrow
    python examples/plugins/python/test/test_arrow_ipc.py
"""

import io
import os
import sys
import unittest

import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import arrow_ipc  # noqa: E402


def pyarrow_stream(batch: pa.RecordBatch) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


class ArrowIpcTest(unittest.TestCase):
    def test_what_it_writes_pyarrow_reads_and_validates(self) -> None:
        data = arrow_ipc.write_stream([
            ("email", arrow_ipc.UTF8, ["a", None, "cé", ""]),
            ("n", arrow_ipc.INT64, [1, None, -(2 ** 62), 0]),
            ("i", arrow_ipc.INT32, [-1, 2, None, 2 ** 31 - 1]),
            ("u", arrow_ipc.UINT32, [0, 1, 2, 2 ** 32 - 1]),
            ("b", arrow_ipc.BOOL, [True, False, None, True]),
            ("x", arrow_ipc.BINARY, [b"\xff", None, b"", b"\x01\x02"]),
        ])
        table = pa.ipc.open_stream(data).read_all()
        table.validate(full=True)
        self.assertEqual([str(t) for t in table.schema.types],
                         ["string", "int64", "int32", "uint32", "bool", "binary"])
        self.assertEqual(table.to_pydict(), {
            "email": ["a", None, "cé", ""], "n": [1, None, -(2 ** 62), 0],
            "i": [-1, 2, None, 2 ** 31 - 1], "u": [0, 1, 2, 2 ** 32 - 1],
            "b": [True, False, None, True], "x": [b"\xff", None, b"", b"\x01\x02"],
        })

    def test_reads_what_pyarrow_writes_and_skips_what_it_does_not_read(self) -> None:
        batch = pa.record_batch({
            "_txn": pa.array([0, 0, 1], pa.uint32()),
            "email": pa.array(["ann@example.com", None, "cé@exämple.org"]),
            "span": pa.array([{"months": 1}, None, {"months": 2}],
                             pa.struct([("months", pa.int32())])),
            "tags": pa.array([["a"], None, []], pa.list_(pa.string())),
            "n": pa.array([1, None, -3], pa.int16()),
            "flag": pa.array([True, None, False]),
        })
        table = arrow_ipc.read_stream(pyarrow_stream(batch))
        self.assertEqual(table.length, 3)
        self.assertEqual([(c.name, c.type_name) for c in table.columns], [
            ("_txn", "UInt32"), ("email", "Utf8"), ("span", "Struct"), ("tags", "List"),
            ("n", "Int16"), ("flag", "Bool")])
        self.assertEqual(table.column("_txn").values(), [0, 0, 1])
        self.assertEqual(table.column("email").values(), ["ann@example.com", None, "cé@exämple.org"])
        self.assertEqual(table.column("email").raw()[2], "cé@exämple.org".encode())
        self.assertEqual(table.column("n").values(), [1, None, -3])
        self.assertEqual(table.column("flag").values(), [True, None, False])
        with self.assertRaisesRegex(arrow_ipc.ArrowError, "column 'span' is Struct, which this reader"):
            table.column("span").values()

    def test_refuses_what_is_not_a_stream_it_reads(self) -> None:
        with self.assertRaisesRegex(arrow_ipc.ArrowError, "end-of-stream marker"):
            arrow_ipc.read_stream(b"\x01\x02")
        data = arrow_ipc.write_stream([("s", arrow_ipc.UTF8, ["a"])])
        with self.assertRaisesRegex(arrow_ipc.ArrowError, "runs past the end"):
            arrow_ipc.read_stream(data[:20])
        with self.assertRaisesRegex(arrow_ipc.ArrowError, "no record batch"):
            arrow_ipc.read_stream(data[-8:])
        with self.assertRaisesRegex(arrow_ipc.ArrowError, "different lengths"):
            arrow_ipc.write_stream([("a", arrow_ipc.UTF8, ["x"]), ("b", arrow_ipc.UTF8, [])])


if __name__ == "__main__":
    unittest.main(verbosity=2)
