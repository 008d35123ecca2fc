// The columnar variants, as Node runs their sources: passthrough-columnar lands every table
// as it came; mask-columnar returns the masked columns of the rows and of the old images, with
// the digest mask.js computes (checked against Node's own SHA-256).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { beforeEach, test } from 'node:test';

import { UINT32, UTF8, readStream, writeStream } from '../src/arrow-ipc.js';
import { calls } from './host-stub.mjs';

const { columnar: passthrough, plugin: passthroughPlugin } = await import('../src/passthrough-columnar.js');
const { columnar: mask, plugin: maskPlugin } = await import('../src/mask-columnar.js');

beforeEach(() => {
  calls.length = 0;
});

const column = (name, typeName, key = false) => ({ name, typeOid: 25, typeModifier: -1, typeName, key });
const USERS = {
  id: 16384, schema: 'public', table: 'users',
  columns: [column('id', 'int4', true), column('email', 'text'), column('doc', 'jsonb'), column('note', 'text')],
};
const PLAIN = { id: 16390, schema: 'public', table: 'plain', columns: [column('id', 'int4', true)] };

// A table's rows as the host sends them: the metadata columns, then the columns read.
function rows(ops, columns) {
  const n = ops.length;
  return writeStream([
    { name: '_txn', type: UINT32, values: Array(n).fill(0) },
    { name: '_change', type: UINT32, values: ops.map((_, i) => i) },
    { name: '_seq', type: UINT32, values: ops.map((_, i) => i) },
    { name: '_op', type: UTF8, values: ops },
    ...columns.map(([name, values]) => ({ name, type: UTF8, values })),
  ]);
}

const header = { xid: 7, commitLsn: 100n, endLsn: 108n, commitTime: 0n, messages: [], part: 0, lastPart: true };

function digest(salt, text) {
  const hash = createHash('sha256').update(salt).update(Buffer.from([0])).update(text).digest('hex');
  return `sha256:${hash.slice(0, 16)}`;
}

test('passthrough-columnar lands every table as it came', () => {
  assert.equal(passthroughPlugin.describe().name, 'passthrough-columnar-js');
  assert.deepEqual(passthroughPlugin.init([]).interest.columns, []);
  const batch = {
    relations: [USERS, PLAIN],
    transactions: [header],
    tables: [{ rows: rows(['insert'], []) }, { rows: rows(['delete', 'truncate'], []) }],
    messages: [],
  };
  assert.deepEqual(passthrough.processColumns(batch), {
    tables: [{ land: { tag: 'all' }, rejections: [] }, { land: { tag: 'all' }, rejections: [] }],
    rows: [],
  });
});

test('mask-columnar masks the text columns it names, in rows and old images, and counts them', () => {
  assert.equal(maskPlugin.describe().name, 'mask-columnar-js');
  const setup = maskPlugin.init([['columns', 'email,doc'], ['salt', 'pepper']]);
  assert.deepEqual(setup.interest.columns, ['email', 'doc']);
  assert.equal(setup.interest.oldImages, true);
  const ops = ['insert', 'insert', 'update', 'delete'];
  const emails = ['ann@example.com', null, 'cé@exämple.org', 'bob@example.com'];
  const docs = ['{"a": 1}', null, null, '{}'];
  const batch = {
    relations: [USERS, PLAIN],
    transactions: [header],
    tables: [
      {
        rows: rows(ops, [['email', emails], ['doc', docs]]),
        old: writeStream([
          { name: 'email', type: UTF8, values: [null, null, 'ann@example.com', null] },
          { name: 'doc', type: UTF8, values: [null, null, null, null] },
        ]),
      },
      { rows: rows(['insert'], []), old: writeStream([]) },
    ],
    messages: [],
  };
  const out = mask.processColumns(batch);
  assert.equal(out.tables.length, 2);
  const [users, plain] = out.tables;
  assert.deepEqual(users.land, { tag: 'all' });
  const masked = readStream(users.columns);
  // The jsonb column keeps its values: a digest is no JSON.
  assert.deepEqual(masked.columns.map((c) => c.name), ['email']);
  assert.deepEqual(masked.column('email').values(), emails.map((e) => (e === null ? null : digest('pepper', e))));
  const old = readStream(users.old);
  assert.deepEqual(old.column('email').values(), [null, null, digest('pepper', 'ann@example.com'), null]);
  assert.deepEqual(plain, { land: { tag: 'all' }, rejections: [] });
  assert.deepEqual(calls.filter((c) => c.fn === 'count'), [{ fn: 'count', name: 'values_masked', delta: 4n }]);
});
