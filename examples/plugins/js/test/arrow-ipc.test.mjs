// The Arrow IPC reader and writer of src/arrow-ipc.js: what they write reads back, and a
// stream written by pyarrow (Apache Arrow's C++ library) reads as pyarrow wrote it.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  ArrowError, BINARY_TYPE, BOOL, INT32, INT64, UINT32, UTF8, readStream, writeStream,
} from '../src/arrow-ipc.js';

// pyarrow 21: a record batch of _txn (uint32), email (string, a null), n (int64, a null),
// flag (bool, a null), span (struct<months: int32>, a null) and blob (binary, a null).
const PYARROW_STREAM = Buffer.from(
  '/////5gBAAAQAAAAAAAKAAwABgAFAAgACgAAAAABBAAMAAAACAAIAAAABAAIAAAABAAAAAYAAAA0AQAA9AAAALwAAA' +
  'CQAAAAMAAAAAQAAAD0/v//AAABBBAAAAAYAAAABAAAAAAAAAAEAAAAYmxvYgAAAAAg////HP///wAAAQ0UAAAAHAAA' +
  'AAQAAAABAAAAFAAAAAQAAABzcGFuAAAAAEz///9I////AAABAhAAAAAYAAAABAAAAAAAAAAGAAAAbW9udGhzAACs//' +
  '//AAAAASAAAAB4////AAABBhAAAAAYAAAABAAAAAAAAAAEAAAAZmxhZwAAAACk////oP///wAAAQIQAAAAHAAAAAQA' +
  'AAAAAAAAAQAAAG4AAAAIAAwACAAHAAgAAAAAAAABQAAAANT///8AAAEFEAAAABwAAAAEAAAAAAAAAAUAAABlbWFpbA' +
  'AAAAQABAAEAAAAEAAUAAgABgAHAAwAAAAQABAAAAAAAAECEAAAABwAAAAEAAAAAAAAAAQAAABfdHhuAAAGAAgABAAG' +
  'AAAAIAAAAAAAAAD/////uAEAABQAAAAAAAAADAAWAAYABQAIAAwADAAAAAADBAAYAAAAsAAAAAAAAAAAAAoAGAAMAA' +
  'QACAAKAAAADAEAABAAAAADAAAAAAAAAAAAAAAPAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAADAAAAAAAAAAQAAAA' +
  'AAAAAAEAAAAAAAAAGAAAAAAAAAAQAAAAAAAAACgAAAAAAAAAHwAAAAAAAABIAAAAAAAAAAEAAAAAAAAAUAAAAAAAAA' +
  'AYAAAAAAAAAGgAAAAAAAAAAQAAAAAAAABwAAAAAAAAAAEAAAAAAAAAeAAAAAAAAAABAAAAAAAAAIAAAAAAAAAAAAAA' +
  'AAAAAACAAAAAAAAAAAwAAAAAAAAAkAAAAAAAAAABAAAAAAAAAJgAAAAAAAAAEAAAAAAAAACoAAAAAAAAAAIAAAAAAA' +
  'AAAAAAAAcAAAADAAAAAAAAAAAAAAAAAAAAAwAAAAAAAAABAAAAAAAAAAMAAAAAAAAAAQAAAAAAAAADAAAAAAAAAAEA' +
  'AAAAAAAAAwAAAAAAAAABAAAAAAAAAAMAAAAAAAAAAAAAAAAAAAADAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAABAAAAAA' +
  'AAAAUAAAAAAAAAAAAAAA8AAAAPAAAAHwAAAGFubkBleGFtcGxlLmNvbWPDqUBleMOkbXBsZS5vcmcABQAAAAAAAAAB' +
  'AAAAAAAAAAAAAAAAAAAA/f////////8FAAAAAAAAAAEAAAAAAAAABQAAAAAAAAABAAAAAAAAAAIAAAAAAAAAAwAAAA' +
  'AAAAAAAAAAAgAAAAIAAAACAAAAAAEAAAAAAAD/////AAAAAA==' +
  '',
  'base64',
);

test('reads a stream pyarrow wrote, skipping the column types it does not read', () => {
  const table = readStream(new Uint8Array(PYARROW_STREAM));
  assert.equal(table.length, 3);
  assert.deepEqual(table.columns.map((c) => [c.name, c.typeName]), [
    ['_txn', 'UInt32'], ['email', 'Utf8'], ['n', 'Int64'], ['flag', 'Bool'], ['span', 'Struct'],
    ['blob', 'Binary'],
  ]);
  assert.deepEqual(table.column('_txn').values(), [0, 0, 1]);
  assert.deepEqual(table.column('email').values(), ['ann@example.com', null, 'cé@exämple.org']);
  assert.deepEqual(table.column('n').values(), [1n, null, -3n]);
  assert.deepEqual(table.column('flag').values(), [true, null, false]);
  assert.deepEqual(table.column('blob').values(), [new Uint8Array([0, 1]), new Uint8Array(0), null]);
  assert.deepEqual([...table.column('email').bytes(2)], [...Buffer.from('cé@exämple.org')]);
  assert.throws(() => table.column('span').values(), (e) =>
    e instanceof ArrowError && /column "span" is Struct, which this reader does not read/.test(e.message));
});

test('what it writes reads back, nulls and all', () => {
  const bytes = writeStream([
    { name: 'email', type: UTF8, values: ['a', null, 'cé', ''] },
    { name: 'n', type: INT64, values: [1n, null, -(2n ** 62n), 0n] },
    { name: 'i', type: INT32, values: [-1, 2, null, 2 ** 31 - 1] },
    { name: 'u', type: UINT32, values: [0, 1, 2, 2 ** 32 - 1] },
    { name: 'b', type: BOOL, values: [true, false, null, true] },
    { name: 'x', type: BINARY_TYPE, values: [new Uint8Array([255]), null, new Uint8Array(0), new Uint8Array([1, 2])] },
  ]);
  assert.equal(bytes.length % 8, 0);
  const table = readStream(bytes);
  assert.equal(table.length, 4);
  assert.deepEqual(table.column('email').values(), ['a', null, 'cé', '']);
  assert.deepEqual(table.column('n').values(), [1n, null, -(2n ** 62n), 0n]);
  assert.deepEqual(table.column('i').values(), [-1, 2, null, 2 ** 31 - 1]);
  assert.deepEqual(table.column('u').values(), [0, 1, 2, 2 ** 32 - 1]);
  assert.deepEqual(table.column('b').values(), [true, false, null, true]);
  assert.deepEqual(table.column('x').values(), [new Uint8Array([255]), null, new Uint8Array(0), new Uint8Array([1, 2])]);
  assert.equal(table.column('i').nullCount, 1);
  assert.equal(table.column('u').nullCount, 0);
});

test('a column laid out already is written as it is', () => {
  const data = new TextEncoder().encode('abcd');
  const offsets = new Int32Array([0, 1, 1, 4]);
  const bytes = writeStream([{ name: 's', type: UTF8, offsets, data, valid: (i) => i !== 1 }]);
  assert.deepEqual(readStream(bytes).column('s').values(), ['a', null, 'bcd']);
});

test('refuses what is not a stream it reads, saying why', () => {
  assert.throws(() => readStream(new Uint8Array([1, 2, 3])), /ends without its end-of-stream marker/);
  const bytes = writeStream([{ name: 's', type: UTF8, values: ['a'] }]);
  assert.throws(() => readStream(bytes.subarray(0, 20)), /metadata runs past the end of the stream/);
  assert.throws(() => readStream(bytes.subarray(bytes.length - 8)), /holds no record batch/);
  assert.throws(
    () => writeStream([{ name: 'a', type: UTF8, values: ['x'] }, { name: 'b', type: UTF8, values: [] }]),
    /different lengths/,
  );
});
