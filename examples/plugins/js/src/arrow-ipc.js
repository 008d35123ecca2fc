// A small Arrow IPC stream reader and writer, for the columnar transform interface.
//
// Tributary hands a columnar plugin each table of a batch as an Arrow IPC *stream*: a schema
// message, one record batch message and the end-of-stream marker, little-endian, metadata
// version 5, uncompressed. This module reads and writes exactly that, for the column types
// the examples need:
//
// - `Int` of 8, 16, 32 bits (numbers) and 64 bits (BigInts), signed or not,
// - `Utf8` (strings; `column.bytes(i)` gives the raw UTF-8 without decoding), `Binary`
//   (Uint8Arrays),
// - `Bool` (booleans),
//
// each with its validity bitmap (`null` for a null). Columns of other types can sit in a
// stream (they are skipped while reading), but asking for their values throws an ArrowError
// naming the column and its type.
//
// The format: every message is 0xFFFFFFFF, the length of its metadata, the metadata (a
// flatbuffer `Message`, padded to 8 bytes) and its body (the buffers, each padded to 8 bytes).
// Flatbuffers are read with the accessors of FlatTable (a table starts with the signed offset
// of its vtable; the vtable holds the offset of each field inside the table, 0 for absent) and
// written front to back: each table's vtable just before it, the objects it points to after
// it, so every offset points forward as flatbuffers require.
//
//   const table = readStream(bytes);          // { length, columns, column(name) }
//   const emails = table.column('email');     // a Column, or undefined
//   emails.value(0);                          // 'a@x', or null
//   const bytes = writeStream([{ name: 'email', type: UTF8, values: ['a', null] }]);

export class ArrowError extends Error {}

const TYPE_NAMES = {
  1: 'Null', 2: 'Int', 3: 'FloatingPoint', 4: 'Binary', 5: 'Utf8', 6: 'Bool', 7: 'Decimal',
  8: 'Date', 9: 'Time', 10: 'Timestamp', 11: 'Interval', 12: 'List', 13: 'Struct', 14: 'Union',
  15: 'FixedSizeBinary', 16: 'FixedSizeList', 17: 'Map', 18: 'Duration', 19: 'LargeBinary',
  20: 'LargeUtf8', 21: 'LargeList',
};
const INT = 2, BINARY = 4, UTF8_ID = 5, BOOL_ID = 6;
// Types whose buffers are validity + values, or validity + offsets + data.
const TWO_BUFFERS = new Set([2, 3, 6, 7, 8, 9, 10, 11, 15, 18]);
const THREE_BUFFERS = new Set([4, 5, 19, 20]);

// Column types for writeStream.
export const BOOL = { id: BOOL_ID };
export const UTF8 = { id: UTF8_ID };
export const BINARY_TYPE = { id: BINARY };
export const INT32 = { id: INT, bits: 32, signed: true };
export const INT64 = { id: INT, bits: 64, signed: true };
export const UINT32 = { id: INT, bits: 32, signed: false };

const CONTINUATION = 0xffffffff;
const METADATA_V5 = 4;
const SCHEMA_HEADER = 1;
const RECORD_BATCH_HEADER = 3;

const utf8Decoder = new TextDecoder('utf-8', { fatal: true });
const utf8Encoder = new TextEncoder();

// ---------------------------------------------------------------------------------------------
// Reading flatbuffers

class FlatTable {
  constructor(view, pos) {
    this.view = view;
    this.pos = pos;
    this.vtable = pos - view.getInt32(pos, true);
    this.vtableLength = view.getUint16(this.vtable, true);
  }

  offset(slot) {
    const at = 4 + 2 * slot;
    return at < this.vtableLength ? this.view.getUint16(this.vtable + at, true) : 0;
  }

  uint8(slot, fallback = 0) {
    const off = this.offset(slot);
    return off ? this.view.getUint8(this.pos + off) : fallback;
  }

  int32(slot, fallback = 0) {
    const off = this.offset(slot);
    return off ? this.view.getInt32(this.pos + off, true) : fallback;
  }

  int64(slot, fallback = 0) {
    const off = this.offset(slot);
    return off ? Number(this.view.getBigInt64(this.pos + off, true)) : fallback;
  }

  target(slot) {
    const off = this.offset(slot);
    if (!off) return -1;
    const at = this.pos + off;
    return at + this.view.getUint32(at, true);
  }

  table(slot) {
    const at = this.target(slot);
    return at < 0 ? null : new FlatTable(this.view, at);
  }

  string(slot) {
    const at = this.target(slot);
    if (at < 0) return null;
    const n = this.view.getUint32(at, true);
    return utf8Decoder.decode(new Uint8Array(this.view.buffer, this.view.byteOffset + at + 4, n));
  }

  // [position of the first element, count]; [0, 0] when absent.
  vector(slot) {
    const at = this.target(slot);
    return at < 0 ? [0, 0] : [at + 4, this.view.getUint32(at, true)];
  }

  tables(slot) {
    const [start, n] = this.vector(slot);
    const out = [];
    for (let i = 0; i < n; i++) {
      const at = start + 4 * i;
      out.push(new FlatTable(this.view, at + this.view.getUint32(at, true)));
    }
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Writing flatbuffers

// A growable byte buffer.
class Bytes {
  constructor() {
    this.bytes = new Uint8Array(1024);
    this.view = new DataView(this.bytes.buffer);
    this.length = 0;
  }

  reserve(n) {
    if (this.length + n <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < this.length + n) size *= 2;
    const bytes = new Uint8Array(size);
    bytes.set(this.bytes.subarray(0, this.length));
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer);
  }

  zeros(n) {
    this.reserve(n);
    this.bytes.fill(0, this.length, this.length + n);
    this.length += n;
  }

  // Pad so that length + extra is a multiple of align.
  pad(align, extra = 0) {
    this.zeros((align - ((this.length + extra) % align)) % align);
  }

  append(data) {
    this.reserve(data.length);
    this.bytes.set(data, this.length);
    this.length += data.length;
  }

  uint32(value) {
    this.reserve(4);
    this.view.setUint32(this.length, value, true);
    this.length += 4;
  }

  done() {
    return this.bytes.slice(0, this.length);
  }
}

const WIDTHS = { bool: 1, u8: 1, i16: 2, i32: 4, i64: 8 };

// A flatbuffer table to write: `fields` is a list of [slot, kind, value]. Kinds: the scalars
// of WIDTHS, 'table' (a Flat), 'tables' (a list of Flat), 'structs' (packed bytes of 8-aligned
// structs and their count), 'string'.
class Flat {
  constructor(fields = []) {
    this.fields = fields;
  }
}

function writeScalar(out, kind, at, value) {
  const view = out.view;
  switch (kind) {
    case 'bool':
    case 'u8':
      view.setUint8(at, Number(value));
      break;
    case 'i16':
      view.setInt16(at, value, true);
      break;
    case 'i32':
      view.setInt32(at, value, true);
      break;
    case 'i64':
      view.setBigInt64(at, BigInt(value), true);
      break;
  }
}

function writeTable(out, table) {
  const fields = table.fields;
  const slots = fields.reduce((n, [slot]) => Math.max(n, slot + 1), 0);
  // Inline layout: the vtable offset, then the fields, largest first, each aligned.
  const layout = [];
  let size = 4;
  for (const [slot, kind, value] of [...fields].sort((a, b) => (WIDTHS[b[1]] ?? 4) - (WIDTHS[a[1]] ?? 4))) {
    const width = WIDTHS[kind] ?? 4;
    size += (width - (size % width)) % width;
    layout.push([slot, kind, value, size]);
    size += width;
  }
  size += (8 - (size % 8)) % 8;
  const vtableLength = 4 + 2 * slots;
  // The table starts 8-aligned, right after its vtable.
  out.pad(8, vtableLength);
  const vtable = out.length;
  out.zeros(vtableLength);
  out.view.setUint16(vtable, vtableLength, true);
  out.view.setUint16(vtable + 2, size, true);
  for (const [slot, , , at] of layout) {
    out.view.setUint16(vtable + 4 + 2 * slot, at, true);
  }
  const pos = out.length;
  out.zeros(size);
  out.view.setInt32(pos, pos - vtable, true);
  const children = [];
  for (const [, kind, value, at] of layout) {
    if (kind in WIDTHS) {
      writeScalar(out, kind, pos + at, value);
    } else {
      children.push([kind, value, pos + at]);
    }
  }
  for (const [kind, value, at] of children) {
    let target;
    if (kind === 'table') {
      target = writeTable(out, value);
    } else if (kind === 'tables') {
      target = writeTables(out, value);
    } else if (kind === 'structs') {
      const [data, count] = value;
      out.pad(8, 4);
      target = out.length;
      out.uint32(count);
      out.append(data);
    } else if (kind === 'string') {
      const encoded = utf8Encoder.encode(value);
      out.pad(4);
      target = out.length;
      out.uint32(encoded.length);
      out.append(encoded);
      out.zeros(1);
    } else {
      throw new Error(`unknown flatbuffer field kind ${kind}`);
    }
    out.view.setUint32(at, target - at, true);
  }
  return pos;
}

function writeTables(out, tables) {
  out.pad(4);
  const pos = out.length;
  out.uint32(tables.length);
  out.zeros(4 * tables.length);
  tables.forEach((table, i) => {
    const at = pos + 4 + 4 * i;
    const target = writeTable(out, table);
    out.view.setUint32(at, target - at, true);
  });
  return pos;
}

function flatbuffer(root) {
  const out = new Bytes();
  out.zeros(4);
  const pos = writeTable(out, root);
  out.view.setUint32(0, pos, true);
  out.pad(8);
  return out.done();
}

// ---------------------------------------------------------------------------------------------
// Streams

function typeName(id, bits, signed) {
  if (id === INT) return `${signed ? '' : 'U'}Int${bits}`;
  return TYPE_NAMES[id] ?? `type ${id}`;
}

// One column of a record batch: `value(i)` reads row i.
export class Column {
  constructor(name, typeId, bits, signed, length, nullCount, buffers) {
    this.name = name;
    this.typeId = typeId;
    this.bits = bits;
    this.signed = signed;
    this.length = length;
    this.nullCount = nullCount;
    this.buffers = buffers;
    this.typeName = typeName(typeId, bits, signed);
    this.validity = nullCount > 0 && buffers.length > 0 && buffers[0].length > 0 ? buffers[0] : null;
    if (typeId === UTF8_ID || typeId === BINARY) {
      const o = buffers[1];
      this.offsets = new Int32Array(o.buffer, o.byteOffset, length + 1);
      this.data = buffers[2];
    } else if (typeId === INT) {
      const d = buffers[1];
      this.dataView = new DataView(d.buffer, d.byteOffset, d.byteLength);
    }
  }

  isNull(i) {
    return this.validity !== null && ((this.validity[i >> 3] >> (i & 7)) & 1) === 0;
  }

  // The raw bytes of row i of a Utf8 or Binary column (a view, not a copy), null for a null.
  bytes(i) {
    if (this.offsets === undefined) {
      throw new ArrowError(`column "${this.name}" is ${this.typeName}, not Utf8 or Binary`);
    }
    if (this.isNull(i)) return null;
    return this.data.subarray(this.offsets[i], this.offsets[i + 1]);
  }

  value(i) {
    if (this.isNull(i)) return null;
    switch (this.typeId) {
      case UTF8_ID:
        return utf8Decoder.decode(this.bytes(i));
      case BINARY:
        return this.bytes(i).slice();
      case BOOL_ID:
        return ((this.buffers[1][i >> 3] >> (i & 7)) & 1) === 1;
      case INT: {
        const v = this.dataView;
        switch (`${this.signed ? 'i' : 'u'}${this.bits}`) {
          case 'i8': return v.getInt8(i);
          case 'u8': return v.getUint8(i);
          case 'i16': return v.getInt16(2 * i, true);
          case 'u16': return v.getUint16(2 * i, true);
          case 'i32': return v.getInt32(4 * i, true);
          case 'u32': return v.getUint32(4 * i, true);
          case 'i64': return v.getBigInt64(8 * i, true);
          case 'u64': return v.getBigUint64(8 * i, true);
        }
      }
    }
    throw new ArrowError(
      `column "${this.name}" is ${this.typeName}, which this reader does not read (it reads ` +
        'Int, Utf8, Binary and Bool); leave the column out of interest.columns',
    );
  }

  values() {
    const out = new Array(this.length);
    for (let i = 0; i < this.length; i++) out[i] = this.value(i);
    return out;
  }
}

// The field nodes and buffers a field of this type takes, with its children.
function fieldBuffers(typeId, children) {
  let nodes = 1;
  let buffers;
  if (TWO_BUFFERS.has(typeId) || typeId === 12 || typeId === 17 || typeId === 21) {
    buffers = 2;
  } else if (THREE_BUFFERS.has(typeId)) {
    buffers = 3;
  } else if (typeId === 13 || typeId === 16) {
    buffers = 1;
  } else if (typeId === 1) {
    buffers = 0;
  } else {
    throw new ArrowError(
      `the stream holds a column of type ${TYPE_NAMES[typeId] ?? typeId}, which this reader cannot skip`,
    );
  }
  for (const child of children) {
    const [n, b] = fieldBuffers(child.uint8(2), child.tables(5));
    nodes += n;
    buffers += b;
  }
  return [nodes, buffers];
}

// The one record batch of an Arrow IPC stream (a Uint8Array): { length, columns, column(name) }.
export function readStream(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  let schema = null;
  for (;;) {
    if (at + 8 > bytes.length) {
      throw new ArrowError('the stream ends without its end-of-stream marker');
    }
    let size = view.getInt32(at + 4, true);
    if (view.getUint32(at, true) !== CONTINUATION) {
      // Streams written before format 0.15 have no continuation marker.
      size = view.getInt32(at, true);
      at -= 4;
    }
    at += 8;
    if (size === 0) break;
    if (size < 0 || at + size > bytes.length) {
      throw new ArrowError("a message's metadata runs past the end of the stream");
    }
    const meta = new DataView(bytes.buffer, bytes.byteOffset + at, size);
    const message = new FlatTable(meta, meta.getUint32(0, true));
    at += size;
    const bodyLength = message.int64(3);
    const body = bytes.subarray(at, at + bodyLength);
    at += bodyLength;
    const kind = message.uint8(1);
    const header = message.table(2);
    if (header === null) throw new ArrowError('a message has no header');
    if (kind === SCHEMA_HEADER) {
      schema = header.tables(1);
    } else if (kind === RECORD_BATCH_HEADER) {
      if (schema === null) throw new ArrowError('a record batch comes before the schema');
      if (header.table(3) !== null) {
        throw new ArrowError('the record batch is compressed; send it uncompressed');
      }
      return recordBatch(schema, header, body);
    } else {
      throw new ArrowError(
        `the stream holds a message of kind ${kind} (dictionaries?), which this reader does not read`,
      );
    }
  }
  throw new ArrowError('the stream holds no record batch');
}

function recordBatch(schema, header, body) {
  const view = header.view;
  const length = header.int64(0);
  const [nodesAt, nodeCount] = header.vector(1);
  const [buffersAt, bufferCount] = header.vector(2);
  let node = 0;
  let buffer = 0;
  const columns = [];
  for (const field of schema) {
    const name = field.string(0) ?? '';
    const typeId = field.uint8(2);
    let bits = 0;
    let signed = false;
    if (typeId === INT) {
      const int = field.table(3);
      if (int !== null) {
        bits = int.int32(0);
        signed = int.uint8(1) === 1;
      }
    }
    const [nodes, buffers] = fieldBuffers(typeId, field.tables(5));
    if (node + nodes > nodeCount || buffer + buffers > bufferCount) {
      throw new ArrowError('the record batch has fewer buffers than its schema needs');
    }
    const rows = Number(view.getBigInt64(nodesAt + 16 * node, true));
    const nulls = Number(view.getBigInt64(nodesAt + 16 * node + 8, true));
    const own = [];
    if (TWO_BUFFERS.has(typeId) || THREE_BUFFERS.has(typeId)) {
      for (let i = buffer; i < buffer + buffers; i++) {
        const offset = Number(view.getBigInt64(buffersAt + 16 * i, true));
        const size = Number(view.getBigInt64(buffersAt + 16 * i + 8, true));
        // Copied when unaligned, so typed arrays can view them.
        const slice = body.subarray(offset, offset + size);
        own.push(slice.byteOffset % 8 === 0 ? slice : slice.slice());
      }
    }
    columns.push(new Column(name, typeId, bits, signed, rows, nulls, own));
    node += nodes;
    buffer += buffers;
  }
  const byName = new Map(columns.map((c) => [c.name, c]));
  return { length, columns, column: (name) => byName.get(name) };
}

// A column's buffers for writeStream: validity bitmap (empty when no row is null), then its
// values. A column is { name, type, values } with a value or null per row, or, for a Utf8 or
// Binary column already laid out, { name, type, offsets (Int32Array), data (Uint8Array),
// valid (per row whether it holds a value, or undefined for every row) }.
function columnBuffers(column, length) {
  const { type } = column;
  let nulls = 0;
  let bitmap = new Uint8Array(0);
  const isValid = column.values !== undefined ? (i) => column.values[i] !== null : column.valid;
  if (isValid !== undefined) {
    const bits = new Uint8Array((length + 7) >> 3);
    for (let i = 0; i < length; i++) {
      if (isValid(i)) bits[i >> 3] |= 1 << (i & 7);
      else nulls++;
    }
    if (nulls > 0) bitmap = bits;
  }
  if (type.id === UTF8_ID || type.id === BINARY) {
    if (column.offsets !== undefined) {
      return [nulls, [bitmap, new Uint8Array(column.offsets.buffer, column.offsets.byteOffset, 4 * (length + 1)), column.data]];
    }
    const parts = column.values.map((v) =>
      v === null ? new Uint8Array(0) : typeof v === 'string' ? utf8Encoder.encode(v) : v,
    );
    const offsets = new Int32Array(length + 1);
    let total = 0;
    parts.forEach((p, i) => {
      total += p.length;
      offsets[i + 1] = total;
    });
    const data = new Uint8Array(total);
    parts.forEach((p, i) => data.set(p, offsets[i]));
    return [nulls, [bitmap, new Uint8Array(offsets.buffer), data]];
  }
  if (type.id === INT) {
    const width = type.bits / 8;
    const data = new Uint8Array(width * length);
    const view = new DataView(data.buffer);
    column.values.forEach((v, i) => {
      if (v === null) return;
      if (width === 8) view.setBigInt64(8 * i, BigInt(v), true);
      else if (width === 4) view.setInt32(4 * i, Number(v), true);
      else if (width === 2) view.setInt16(2 * i, Number(v), true);
      else view.setInt8(i, Number(v));
    });
    return [nulls, [bitmap, data]];
  }
  if (type.id === BOOL_ID) {
    const bits = new Uint8Array((length + 7) >> 3);
    column.values.forEach((v, i) => {
      if (v) bits[i >> 3] |= 1 << (i & 7);
    });
    return [nulls, [bitmap, bits]];
  }
  throw new ArrowError(`column "${column.name}": this writer writes Int, Utf8, Binary and Bool columns`);
}

function typeTable(type) {
  if (type.id === INT) {
    return new Flat([[0, 'i32', type.bits], [1, 'bool', type.signed]]);
  }
  return new Flat();
}

function message(kind, header, bodyLength) {
  const meta = flatbuffer(
    new Flat([[0, 'i16', METADATA_V5], [1, 'u8', kind], [2, 'table', header], [3, 'i64', bodyLength]]),
  );
  const out = new Uint8Array(8 + meta.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, CONTINUATION, true);
  view.setInt32(4, meta.length, true);
  out.set(meta, 8);
  return out;
}

function columnLength(column) {
  return column.values !== undefined ? column.values.length : column.offsets.length - 1;
}

// An Arrow IPC stream (a Uint8Array) of one record batch with `columns`; every column is
// nullable and all have the same length.
export function writeStream(columns) {
  const lengths = new Set(columns.map(columnLength));
  if (lengths.size > 1) {
    throw new ArrowError(`the columns have different lengths: ${[...lengths].join(', ')}`);
  }
  const length = lengths.size === 1 ? [...lengths][0] : 0;
  const fields = columns.map(
    (c) =>
      new Flat([
        [0, 'string', c.name],
        [1, 'bool', true],
        [2, 'u8', c.type.id],
        [3, 'table', typeTable(c.type)],
        [5, 'tables', []],
      ]),
  );
  const schema = message(SCHEMA_HEADER, new Flat([[1, 'tables', fields]]), 0);
  const body = new Bytes();
  const nodes = new Bytes();
  const buffers = new Bytes();
  const int64 = (out, value) => {
    out.reserve(8);
    out.view.setBigInt64(out.length, BigInt(value), true);
    out.length += 8;
  };
  for (const column of columns) {
    const [nulls, parts] = columnBuffers(column, length);
    int64(nodes, length);
    int64(nodes, nulls);
    for (const part of parts) {
      int64(buffers, body.length);
      int64(buffers, part.length);
      body.append(part);
      body.pad(8);
    }
  }
  const header = new Flat([
    [0, 'i64', length],
    [1, 'structs', [nodes.done(), nodes.length / 16]],
    [2, 'structs', [buffers.done(), buffers.length / 16]],
  ]);
  const batch = message(RECORD_BATCH_HEADER, header, body.length);
  const out = new Uint8Array(schema.length + batch.length + body.length + 8);
  out.set(schema, 0);
  out.set(batch, schema.length);
  out.set(body.done(), schema.length + batch.length);
  const view = new DataView(out.buffer);
  view.setUint32(out.length - 8, CONTINUATION, true);
  view.setInt32(out.length - 4, 0, true);
  return out;
}
