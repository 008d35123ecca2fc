// What the plugins return, checked twice: on the sources as Node runs them, and on the built
// components (transpiled back to JavaScript with `jco transpile`, which lowers and lifts
// every value through the WIT as the host does).
//
// The components are looked for in $TRIBUTARY_JS_PLUGINS (a directory with passthrough.wasm
// and mask.wasm), else in dist/; jco is $TRIBUTARY_JCO, else node_modules/.bin/jco.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

import { calls } from './host-stub.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const stubUrl = new URL('./host-stub.mjs', import.meta.url).href;

async function loadSources() {
  return {
    passthrough: (await import('../src/passthrough.js')).plugin,
    mask: (await import('../src/mask.js')).plugin,
  };
}

async function loadComponents() {
  const dir = process.env.TRIBUTARY_JS_PLUGINS || join(here, '..', 'dist');
  const jco = process.env.TRIBUTARY_JCO || join(here, '..', 'node_modules', '.bin', 'jco');
  const wasm = (name) => join(dir, `${name}.wasm`);
  if (!existsSync(wasm('passthrough')) || !existsSync(wasm('mask'))) {
    return `no components in ${dir} (build them first)`;
  }
  if (!existsSync(jco)) {
    return `no jco at ${jco}`;
  }
  const out = mkdtempSync(join(tmpdir(), 'tributary-js-plugins-'));
  after(() => rmSync(out, { recursive: true, force: true }));
  // The transpiled components import WASI (stdio) from jco's preview2-shim: make the copy that
  // jco depends on visible from the output directory.
  const shimEntry = createRequire(realpathSync(jco)).resolve('@bytecodealliance/preview2-shim');
  const shim = shimEntry.slice(0, shimEntry.lastIndexOf('/preview2-shim/') + '/preview2-shim'.length);
  mkdirSync(join(out, 'node_modules', '@bytecodealliance'), { recursive: true });
  symlinkSync(shim, join(out, 'node_modules', '@bytecodealliance', 'preview2-shim'));
  const names = ['passthrough', 'mask'];
  await Promise.all(
    names.map((name) =>
      promisify(execFile)(jco, [
        'transpile', wasm(name), '-o', join(out, name), '--no-typescript', '--quiet',
        '--map', `tributary:transform/host@1.0.0=${stubUrl}`,
      ]),
    ),
  );
  const loaded = {};
  for (const name of names) {
    loaded[name] = (await import(pathToFileURL(join(out, name, `${name}.js`)).href)).plugin;
  }
  return loaded;
}

const targets = [
  ['sources', await loadSources()],
  ['components', await loadComponents()],
];

// Building blocks of a batch.
const text = (val) => ({ tag: 'text', val });
const int8 = (val) => ({ tag: 'int8', val });
const NULL = { tag: 'null' };
const ABSENT = { tag: 'absent' };
const column = (name, typeName, key = false) => ({
  name, typeOid: typeName === 'text' ? 25 : 20, typeModifier: -1, typeName, key,
});
const relation = (id, table, columns) => ({ id, schema: 'public', table, columns });
const change = (op, relation, seq, rows = {}) => ({ op, relation, seq, new: rows.new, old: rows.old });
const transaction = (xid, changes) => ({
  xid, commitLsn: 0x16b3748n, endLsn: 0x16b3778n, commitTime: 1767225600000000n,
  changes, messages: [], part: 0, lastPart: true,
});
const batch = (relations, transactions) => ({ relations, transactions, messages: [] });
const keep = (transaction, change) => ({ tag: 'keep', val: { transaction, change } });
const edit = (transaction, change, values, old = []) => ({
  tag: 'edit', val: { change: { transaction, change }, values, old },
});

const digest = (salt, value) =>
  'sha256:' +
  createHash('sha256').update(Buffer.concat([Buffer.from(salt), Buffer.from([0]), Buffer.from(value)]))
    .digest('hex').slice(0, 16);

// Whatever was thrown, as the host would read the err case.
const refusal = (pattern) => (err) => {
  assert.equal(typeof err.payload, 'string', `thrown without a string payload: ${err}`);
  assert.match(err.payload, pattern);
  return true;
};

for (const [label, plugins] of targets) {
  describe(label, { skip: typeof plugins === 'string' ? plugins : false }, () => {
    const { passthrough, mask } = typeof plugins === 'string' ? {} : plugins;

    describe('passthrough', () => {
      test('describes itself', () => {
        const info = passthrough.describe();
        assert.equal(info.name, 'passthrough-js');
        assert.match(info.version, /^\d+\.\d+\.\d+$/);
      });

      test('refuses settings, naming them', () => {
        assert.throws(() => passthrough.init([['columns', 'email'], ['salt', 'x']]),
          refusal(/no settings.*`columns`, `salt`/));
      });

      test('reads nothing and declares nothing', () => {
        assert.deepEqual(passthrough.init([]), {
          outputs: [],
          reshapes: [],
          interest: { columns: [], oldImages: false, messages: false, wholeTransactions: false },
        });
      });

      test('keeps every change, in order', () => {
        const users = relation(16385, 'users', [column('id', 'int8', true), column('email', 'text')]);
        const b = batch([users], [
          transaction(740, [change('insert', 0, 0, { new: [ABSENT, ABSENT] }), change('truncate', 0, 1)]),
          transaction(741, []),
          transaction(742, [change('delete', 0, 0, { old: [ABSENT, ABSENT] })]),
        ]);
        assert.deepEqual(passthrough.process(b), {
          emits: [keep(0, 0), keep(0, 1), keep(2, 0)],
          rejections: [],
        });
        assert.deepEqual(passthrough.process(batch([], [])), { emits: [], rejections: [] });
      });
    });

    describe('mask', () => {
      test('describes itself', () => {
        assert.equal(mask.describe().name, 'mask-js');
      });

      test('refuses a missing or empty `columns`, saying what to write', () => {
        for (const config of [[], [['salt', 's']], [['columns', '']], [['columns', ' , ']]]) {
          assert.throws(() => mask.init(config), refusal(/`columns`.*columns = "email,phone"/));
        }
      });

      test('refuses unknown settings, naming them', () => {
        assert.throws(() => mask.init([['columns', 'email'], ['colums', 'x'], ['pepper', 'y']]),
          refusal(/unknown setting `colums`, `pepper`/));
      });

      test('reads the masked columns and old images', () => {
        calls.length = 0;
        assert.deepEqual(mask.init([['columns', ' email, phone ,,email'], ['salt', 'pepper']]), {
          outputs: [],
          reshapes: [],
          interest: { columns: ['email', 'phone'], oldImages: true, messages: false, wholeTransactions: false },
        });
        assert.deepEqual(calls, [{
          fn: 'log', level: 'info', message: 'masking columns',
          fields: [['columns', 'email,phone'], ['salted', 'yes']],
        }]);
      });

      test('the example digest: no salt, "a@x"', () => {
        mask.init([['columns', 'email']]);
        const users = relation(1, 'users', [column('email', 'text')]);
        const out = mask.process(batch([users], [transaction(1, [change('insert', 0, 0, { new: [text('a@x')] })])]));
        const expected = 'sha256:' + createHash('sha256').update('\0a@x').digest('hex').slice(0, 16);
        assert.equal(expected.length, 7 + 16);
        assert.deepEqual(out.emits, [edit(0, 0, [[0, text(expected)]])]);
      });

      test('masks rows and old images, keeps the rest', () => {
        const salt = 'pepper';
        mask.init([['columns', 'email,phone'], ['salt', salt]]);
        calls.length = 0;
        // Two tables with the masked columns at other positions; `orders` has none.
        const users = relation(16385, 'users', [column('id', 'int8', true), column('email', 'text'), column('name', 'text')]);
        const contacts = relation(16390, 'contacts', [column('phone', 'text'), column('id', 'int8', true), column('email', 'text')]);
        const orders = relation(16400, 'orders', [column('id', 'int8', true), column('total', 'text')]);
        const d = (v) => text(digest(salt, v));
        const b = batch([users, contacts, orders], [
          transaction(900, [
            // insert: the masked text value, not the others (they are absent: not read)
            change('insert', 0, 0, { new: [ABSENT, text('ann@example.com'), ABSENT] }),
            // insert with a null email: nothing to mask
            change('insert', 0, 1, { new: [ABSENT, NULL, ABSENT] }),
            // update with an old image (REPLICA IDENTITY FULL)
            change('update', 1, 2, {
              new: [text('+1 555 0100'), ABSENT, text('bob@example.com')],
              old: [text('+1 555 0199'), ABSENT, text('bob@example.org')],
            }),
            // update without an old image
            change('update', 0, 3, { new: [ABSENT, text('ann@example.net'), ABSENT] }),
            change('insert', 2, 4, { new: [int8(1n), ABSENT] }),
          ]),
          transaction(901, [
            // delete: the old row is the row, edits go to `values`
            change('delete', 1, 0, { old: [text('+1 555 0100'), ABSENT, NULL] }),
            change('truncate', 2, 1),
            // a delete whose old image holds only the key
            change('delete', 0, 2, { old: [ABSENT, NULL, ABSENT] }),
          ]),
        ]);
        assert.deepEqual(mask.process(b), {
          emits: [
            edit(0, 0, [[1, d('ann@example.com')]]),
            keep(0, 1),
            edit(0, 2, [[0, d('+1 555 0100')], [2, d('bob@example.com')]],
              [[0, d('+1 555 0199')], [2, d('bob@example.org')]]),
            edit(0, 3, [[1, d('ann@example.net')]]),
            keep(0, 4),
            edit(1, 0, [[0, d('+1 555 0100')]]),
            keep(1, 1),
            keep(1, 2),
          ],
          rejections: [],
        });
        assert.deepEqual(calls, [{ fn: 'count', name: 'values_masked', delta: 7n }]);
      });

      test('the salt changes the digest, the same value gives the same digest', () => {
        const users = relation(1, 'users', [column('email', 'text')]);
        const one = batch([users], [transaction(1, [change('insert', 0, 0, { new: [text('a@x')] })])]);
        const digests = [];
        for (const salt of ['', 'one', 'two', 'two']) {
          mask.init([['columns', 'email'], ['salt', salt]]);
          const [emit] = mask.process(one).emits;
          assert.equal(emit.val.values[0][1].val, digest(salt, 'a@x'));
          digests.push(emit.val.values[0][1].val);
        }
        assert.equal(new Set(digests).size, 3);
      });

      test('leaves values that are not text, warning once per column', () => {
        mask.init([['columns', 'email']]);
        calls.length = 0;
        const users = relation(1, 'users', [column('email', 'jsonb')]);
        const json = { tag: 'json', val: '{"a":1}' };
        const b = batch([users], [transaction(1, [
          change('insert', 0, 0, { new: [json] }),
          change('insert', 0, 1, { new: [json] }),
        ])]);
        assert.deepEqual(mask.process(b).emits, [keep(0, 0), keep(0, 1)]);
        assert.equal(calls.length, 1);
        assert.equal(calls[0].level, 'warn');
        assert.deepEqual(calls[0].fields.find(([k]) => k === 'column'), ['column', 'email']);
      });
    });
  });
}
