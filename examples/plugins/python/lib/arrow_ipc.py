"""A small Arrow IPC stream reader and writer, for the columnar transform interface.

Tributary hands a columnar plugin each table of a batch as an Arrow IPC *stream*: a schema
message, one record batch message and the end-of-stream marker, little-endian, metadata
version 5, uncompressed. This module reads and writes exactly that, for the column types the
examples need:

- `Int` of 8, 16, 32 and 64 bits, signed or not (Python `int`),
- `Utf8` (Python `str`, or the raw UTF-8 `bytes` with `Column.raw()`), `Binary` (`bytes`),
- `Bool` (Python `bool`),

each with its validity bitmap (`None` for a null). Columns of other types can sit in a stream
(they are skipped while reading), but asking for their values raises `ArrowError` naming the
column and its type.

The format: every message is `0xFFFFFFFF`, the length of its metadata, the metadata (a
flatbuffer `Message`, padded to 8 bytes) and its body (the buffers, each padded to 8 bytes).
Flatbuffers are read with the few accessors below (a table starts with the signed offset of its
vtable; the vtable holds the offset of each field inside the table, 0 for absent) and written
front to back: each table's vtable just before it, the objects a table points to after it, so
that every offset points forward as flatbuffers require.

Usage:

    table = read_stream(data)            # -> Table
    emails = table.column("email")       # -> Column or None
    texts = emails.values()              # [str | None, ...]
    data = write_stream([("email", UTF8, ["a", None])])
"""

import struct
import sys
from array import array
from itertools import accumulate
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = [
    "ArrowError", "Column", "Table", "read_stream", "write_stream",
    "BOOL", "UTF8", "BINARY", "INT8", "INT16", "INT32", "INT64", "UINT32", "UINT64",
]


class ArrowError(Exception):
    """The bytes are not a stream this module reads, or a column holds a type it does not."""


# Type ids of the `Type` union of Schema.fbs.
_TYPE_NAMES = {
    1: "Null", 2: "Int", 3: "FloatingPoint", 4: "Binary", 5: "Utf8", 6: "Bool", 7: "Decimal",
    8: "Date", 9: "Time", 10: "Timestamp", 11: "Interval", 12: "List", 13: "Struct",
    14: "Union", 15: "FixedSizeBinary", 16: "FixedSizeList", 17: "Map", 18: "Duration",
    19: "LargeBinary", 20: "LargeUtf8", 21: "LargeList",
}
_INT, _BINARY, _UTF8, _BOOL, _STRUCT, _LIST = 2, 4, 5, 6, 13, 12
# Types whose buffers are validity + values, validity + offsets + data, or validity only.
_TWO_BUFFERS = {2, 3, 6, 7, 8, 9, 10, 11, 15, 18}
_THREE_BUFFERS = {4, 5, 19, 20}

# Column types for `write_stream`: (type id, bit width, signed).
BOOL = (_BOOL, 0, False)
UTF8 = (_UTF8, 0, False)
BINARY = (_BINARY, 0, False)
INT8 = (_INT, 8, True)
INT16 = (_INT, 16, True)
INT32 = (_INT, 32, True)
INT64 = (_INT, 64, True)
UINT32 = (_INT, 32, False)
UINT64 = (_INT, 64, False)

_INT_CODES = {(8, True): "b", (8, False): "B", (16, True): "h", (16, False): "H",
              (32, True): "i", (32, False): "I", (64, True): "q", (64, False): "Q"}
_CONTINUATION = 0xFFFFFFFF
_METADATA_V5 = 4
_SCHEMA_HEADER, _RECORD_BATCH_HEADER = 1, 3
_LITTLE = sys.byteorder == "little"


def _typed(code: str, data: Any) -> array:
    """`data` as an array of little-endian `code` values."""
    values = array(code)
    values.frombytes(data)
    if not _LITTLE:
        values.byteswap()
    return values


# ---------------------------------------------------------------------------------------------
# Reading flatbuffers


class _FlatTable:
    """One flatbuffer table: `buf[pos:]`, its fields found through its vtable."""

    __slots__ = ("buf", "pos", "vtable", "vtable_len")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vtable_len = struct.unpack_from("<H", buf, self.vtable)[0]

    def _offset(self, slot: int) -> int:
        at = 4 + 2 * slot
        if at >= self.vtable_len:
            return 0
        return struct.unpack_from("<H", self.buf, self.vtable + at)[0]

    def scalar(self, slot: int, fmt: str, default: Any) -> Any:
        off = self._offset(slot)
        return struct.unpack_from(fmt, self.buf, self.pos + off)[0] if off else default

    def _target(self, slot: int) -> Optional[int]:
        off = self._offset(slot)
        if not off:
            return None
        at = self.pos + off
        return at + struct.unpack_from("<I", self.buf, at)[0]

    def table(self, slot: int) -> Optional["_FlatTable"]:
        at = self._target(slot)
        return None if at is None else _FlatTable(self.buf, at)

    def string(self, slot: int) -> Optional[str]:
        at = self._target(slot)
        if at is None:
            return None
        n = struct.unpack_from("<I", self.buf, at)[0]
        return bytes(self.buf[at + 4:at + 4 + n]).decode("utf-8")

    def vector(self, slot: int) -> Tuple[int, int]:
        """(position of the first element, element count); (0, 0) when absent."""
        at = self._target(slot)
        if at is None:
            return 0, 0
        return at + 4, struct.unpack_from("<I", self.buf, at)[0]

    def tables(self, slot: int) -> List["_FlatTable"]:
        start, n = self.vector(slot)
        out = []
        for i in range(n):
            at = start + 4 * i
            out.append(_FlatTable(self.buf, at + struct.unpack_from("<I", self.buf, at)[0]))
        return out


# ---------------------------------------------------------------------------------------------
# Writing flatbuffers


class _Flat:
    """A flatbuffer table to write: its fields by slot, as (kind, value) pairs.

    Kinds: "bool", "u8", "i16", "i32", "i64" (scalars), "table" (a `_Flat`), "tables" (a list
    of `_Flat`), "structs" (packed bytes of 8-aligned structs, with their count), "string".
    """

    __slots__ = ("fields",)

    def __init__(self, **fields: Tuple[int, str, Any]) -> None:
        self.fields = fields


_SCALARS = {"bool": ("<B", 1), "u8": ("<B", 1), "i16": ("<h", 2), "i32": ("<i", 4),
            "i64": ("<q", 8)}


def _pad(buf: bytearray, align: int, extra: int = 0) -> None:
    """Pad `buf` so that `len(buf) + extra` is a multiple of `align`."""
    buf.extend(b"\0" * ((-(len(buf) + extra)) % align))


def _write_table(buf: bytearray, table: _Flat) -> int:
    """Write `table` (vtable, then the table, then what it points to); return its position."""
    fields = sorted(table.fields.values(), key=lambda f: f[0])
    slots = (fields[-1][0] + 1) if fields else 0
    # Inline layout: the vtable offset, then the fields, largest first, each aligned.
    layout = []
    size = 4
    for slot, kind, value in sorted(fields, key=lambda f: -_SCALARS.get(f[1], ("", 4))[1]):
        width = _SCALARS.get(kind, ("", 4))[1]
        size += (-size) % width
        layout.append((slot, kind, value, size))
        size += width
    size += (-size) % 8
    vtable = bytearray(struct.pack("<HH", 4 + 2 * slots, size))
    offsets = [0] * slots
    for slot, _, _, at in layout:
        offsets[slot] = at
    vtable += struct.pack("<%dH" % slots, *offsets)
    # The table starts 8-aligned, right after its vtable.
    _pad(buf, 8, len(vtable))
    vtable_pos = len(buf)
    buf += vtable
    pos = len(buf)
    buf += b"\0" * size
    struct.pack_into("<i", buf, pos, pos - vtable_pos)
    children = []
    for slot, kind, value, at in layout:
        if kind in _SCALARS:
            struct.pack_into(_SCALARS[kind][0], buf, pos + at, int(value))
        else:
            children.append((kind, value, pos + at))
    for kind, value, at in children:
        if kind == "table":
            target = _write_table(buf, value)
        elif kind == "tables":
            target = _write_tables(buf, value)
        elif kind == "structs":
            data, count = value
            _pad(buf, 8, 4)
            target = len(buf)
            buf += struct.pack("<I", count)
            buf += data
        elif kind == "string":
            encoded = value.encode("utf-8")
            _pad(buf, 4)
            target = len(buf)
            buf += struct.pack("<I", len(encoded)) + encoded + b"\0"
        else:
            raise ValueError(kind)
        struct.pack_into("<I", buf, at, target - at)
    return pos


def _write_tables(buf: bytearray, tables: List[_Flat]) -> int:
    _pad(buf, 4)
    pos = len(buf)
    buf += struct.pack("<I", len(tables)) + b"\0" * (4 * len(tables))
    for i, table in enumerate(tables):
        at = pos + 4 + 4 * i
        struct.pack_into("<I", buf, at, _write_table(buf, table) - at)
    return pos


def _flatbuffer(root: _Flat) -> bytes:
    buf = bytearray(4)
    struct.pack_into("<I", buf, 0, _write_table(buf, root))
    _pad(buf, 8)
    return bytes(buf)


# ---------------------------------------------------------------------------------------------
# Streams


class Column:
    """One column of a record batch."""

    __slots__ = ("name", "nullable", "type_id", "bit_width", "signed", "length", "null_count",
                 "_buffers")

    def __init__(self, name: str, nullable: bool, type_id: int, bit_width: int, signed: bool,
                 length: int, null_count: int, buffers: List[memoryview]) -> None:
        self.name = name
        self.nullable = nullable
        self.type_id = type_id
        self.bit_width = bit_width
        self.signed = signed
        self.length = length
        self.null_count = null_count
        self._buffers = buffers

    @property
    def type_name(self) -> str:
        if self.type_id == _INT:
            return "%sInt%d" % ("" if self.signed else "U", self.bit_width)
        return _TYPE_NAMES.get(self.type_id, "type %d" % self.type_id)

    def _unsupported(self) -> ArrowError:
        return ArrowError(
            "column %r is %s, which this reader does not read (it reads Int, Utf8, Binary and "
            "Bool); leave the column out of interest.columns" % (self.name, self.type_name))

    def valid(self) -> Optional[List[bool]]:
        """Per row whether it holds a value; None when no row is null."""
        if self.null_count == 0 or not self._buffers or len(self._buffers[0]) == 0:
            return None
        bits = self._buffers[0]
        return [bool(bits[i >> 3] >> (i & 7) & 1) for i in range(self.length)]

    def raw(self) -> List[Optional[bytes]]:
        """The bytes of each value of a Utf8 or Binary column, None for a null."""
        if self.type_id not in (_UTF8, _BINARY):
            raise ArrowError("column %r is %s, not Utf8 or Binary" % (self.name, self.type_name))
        offsets = _typed("i", self._buffers[1][:4 * (self.length + 1)])
        data = bytes(self._buffers[2])
        values: List[Optional[bytes]] = [data[offsets[i]:offsets[i + 1]]
                                         for i in range(self.length)]
        return self._with_nulls(values)

    def values(self) -> List[Any]:
        """The values as Python objects (int, str, bytes, bool), None for a null."""
        n = self.length
        if self.type_id == _INT:
            code = _INT_CODES.get((self.bit_width, self.signed))
            if code is None:
                raise self._unsupported()
            width = self.bit_width // 8
            return self._with_nulls(list(_typed(code, self._buffers[1][:width * n])))
        if self.type_id == _UTF8:
            offsets = _typed("i", self._buffers[1][:4 * (n + 1)])
            data = bytes(self._buffers[2])
            if data.isascii():
                # One decode for the column: byte offsets are character offsets.
                text = data.decode("ascii")
                return self._with_nulls([text[offsets[i]:offsets[i + 1]] for i in range(n)])
            return self._with_nulls([data[offsets[i]:offsets[i + 1]].decode("utf-8")
                                     for i in range(n)])
        if self.type_id == _BINARY:
            return self.raw()
        if self.type_id == _BOOL:
            bits = self._buffers[1]
            return self._with_nulls([bool(bits[i >> 3] >> (i & 7) & 1) for i in range(n)])
        raise self._unsupported()

    def _with_nulls(self, values: List[Any]) -> List[Any]:
        valid = self.valid()
        if valid is not None:
            for i, ok in enumerate(valid):
                if not ok:
                    values[i] = None
        return values


class Table:
    """A record batch: its row count and columns, in order."""

    def __init__(self, length: int, columns: List[Column]) -> None:
        self.length = length
        self.columns = columns
        self._by_name: Dict[str, Column] = {c.name: c for c in columns}

    def column(self, name: str) -> Optional[Column]:
        return self._by_name.get(name)


def _messages(data: memoryview):
    """(message table, body) of each message of the stream, up to its end."""
    at = 0
    while True:
        if at + 8 > len(data):
            raise ArrowError("the stream ends without its end-of-stream marker")
        first, size = struct.unpack_from("<Ii", data, at)
        if first != _CONTINUATION:
            # Streams written before format 0.15 have no continuation marker.
            first, size, at = _CONTINUATION, first, at - 4
        at += 8
        if size == 0:
            return
        if size < 0 or at + size > len(data):
            raise ArrowError("a message's metadata runs past the end of the stream")
        meta = data[at:at + size]
        message = _FlatTable(meta, struct.unpack_from("<I", meta, 0)[0])
        at += size
        body_length = message.scalar(3, "<q", 0)
        body = data[at:at + body_length]
        at += body_length
        yield message, body


def _field_buffers(type_id: int, children: List[Any]) -> Tuple[int, int]:
    """(field nodes, buffers) a field of this type takes, with its children."""
    nodes, buffers = 1, 0
    if type_id in _TWO_BUFFERS:
        buffers = 2
    elif type_id in _THREE_BUFFERS:
        buffers = 3
    elif type_id in (_STRUCT, 16):
        buffers = 1
    elif type_id in (_LIST, 17, 21):
        buffers = 2
    elif type_id != 1:
        raise ArrowError("the stream holds a column of type %s, which this reader cannot skip"
                         % _TYPE_NAMES.get(type_id, type_id))
    for child in children:
        n, b = _field_buffers(child.scalar(2, "<B", 0), child.tables(5))
        nodes += n
        buffers += b
    return nodes, buffers


def read_stream(data: bytes) -> Table:
    """The one record batch of an Arrow IPC stream."""
    view = memoryview(data)
    schema = None
    for message, body in _messages(view):
        kind = message.scalar(1, "<B", 0)
        header = message.table(2)
        if header is None:
            raise ArrowError("a message has no header")
        if kind == _SCHEMA_HEADER:
            schema = header.tables(1)
        elif kind == _RECORD_BATCH_HEADER:
            if schema is None:
                raise ArrowError("a record batch comes before the schema")
            if header.table(3) is not None:
                raise ArrowError("the record batch is compressed; send it uncompressed")
            return _record_batch(schema, header, body)
        else:
            raise ArrowError("the stream holds a message of kind %d (dictionaries?), which "
                             "this reader does not read" % kind)
    raise ArrowError("the stream holds no record batch")


def _record_batch(schema: List[_FlatTable], header: _FlatTable, body: memoryview) -> Table:
    length = header.scalar(0, "<q", 0)
    nodes_at, node_count = header.vector(1)
    buffers_at, buffer_count = header.vector(2)
    buf = header.buf
    node, buffer = 0, 0
    columns = []
    for field in schema:
        name = field.string(0) or ""
        type_id = field.scalar(2, "<B", 0)
        bit_width, signed = 0, False
        if type_id == _INT:
            int_type = field.table(3)
            if int_type is not None:
                bit_width = int_type.scalar(0, "<i", 0)
                signed = bool(int_type.scalar(1, "<B", 0))
        nodes, buffers = _field_buffers(type_id, field.tables(5))
        if node + nodes > node_count or buffer + buffers > buffer_count:
            raise ArrowError("the record batch has fewer buffers than its schema needs")
        rows, nulls = struct.unpack_from("<qq", buf, nodes_at + 16 * node)
        own = []
        for i in range(buffer, buffer + (buffers if type_id in _TWO_BUFFERS | _THREE_BUFFERS
                                         else 0)):
            offset, size = struct.unpack_from("<qq", buf, buffers_at + 16 * i)
            own.append(body[offset:offset + size])
        columns.append(Column(name, bool(field.scalar(1, "<B", 0)), type_id, bit_width, signed,
                              rows, nulls, own))
        node += nodes
        buffer += buffers
    return Table(length, columns)


def _validity(values: Sequence[Any]) -> Tuple[bytes, int]:
    """The validity bitmap of `values` (empty when none is None) and the null count."""
    nulls = values.count(None) if isinstance(values, list) else sum(v is None for v in values)
    if nulls == 0:
        return b"", 0
    bits = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits), nulls


def _little(values: array) -> bytes:
    if not _LITTLE:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _column_buffers(name: str, kind: Tuple[int, int, bool], values: Sequence[Any]) -> List[bytes]:
    type_id, bit_width, signed = kind
    if type_id in (_UTF8, _BINARY):
        if type_id == _UTF8:
            encoded = [b"" if v is None else (v.encode("utf-8") if isinstance(v, str) else v)
                       for v in values]
        else:
            encoded = [b"" if v is None else bytes(v) for v in values]
        offsets = array("i", accumulate(map(len, encoded), initial=0))
        return [_little(offsets), b"".join(encoded)]
    if type_id == _INT:
        code = _INT_CODES[(bit_width, signed)]
        return [_little(array(code, (0 if v is None else v for v in values)))]
    if type_id == _BOOL:
        bits = bytearray((len(values) + 7) // 8)
        for i, value in enumerate(values):
            if value:
                bits[i >> 3] |= 1 << (i & 7)
        return [bytes(bits)]
    raise ArrowError("column %r: this writer writes Int, Utf8, Binary and Bool columns" % name)


def _type_table(kind: Tuple[int, int, bool]) -> _Flat:
    type_id, bit_width, signed = kind
    if type_id == _INT:
        return _Flat(bit_width=(0, "i32", bit_width), signed=(1, "bool", signed))
    return _Flat()


def _message(kind: int, header: _Flat, body_length: int) -> bytes:
    meta = _flatbuffer(_Flat(version=(0, "i16", _METADATA_V5), header_type=(1, "u8", kind),
                             header=(2, "table", header), body_length=(3, "i64", body_length)))
    return struct.pack("<Ii", _CONTINUATION, len(meta)) + meta


def write_stream(columns: List[Tuple[str, Tuple[int, int, bool], Sequence[Any]]]) -> bytes:
    """An Arrow IPC stream of one record batch with `columns`: (name, type, values), each
    type one of BOOL, UTF8, BINARY, INT8 ... UINT64, each value None for a null. Every column
    is nullable and all have the same length."""
    lengths = {len(values) for _, _, values in columns}
    if len(lengths) > 1:
        raise ArrowError("the columns have different lengths: %s" % sorted(lengths))
    length = lengths.pop() if lengths else 0
    fields = [_Flat(name=(0, "string", name), nullable=(1, "bool", True),
                    type_type=(2, "u8", kind[0]), type=(3, "table", _type_table(kind)),
                    children=(5, "tables", []))
              for name, kind, _ in columns]
    schema = _message(_SCHEMA_HEADER, _Flat(fields=(1, "tables", fields)), 0)
    body = bytearray()
    nodes = bytearray()
    buffers = bytearray()

    def add(data: bytes) -> None:
        buffers.extend(struct.pack("<qq", len(body), len(data)))
        body.extend(data)
        _pad(body, 8)

    for name, kind, values in columns:
        bitmap, nulls = _validity(values)
        nodes.extend(struct.pack("<qq", length, nulls))
        add(bitmap)
        for data in _column_buffers(name, kind, values):
            add(data)
    header = _Flat(length=(0, "i64", length),
                   nodes=(1, "structs", (bytes(nodes), len(nodes) // 16)),
                   buffers=(2, "structs", (bytes(buffers), len(buffers) // 16)))
    batch = _message(_RECORD_BATCH_HEADER, header, len(body))
    return schema + batch + bytes(body) + struct.pack("<Ii", _CONTINUATION, 0)
