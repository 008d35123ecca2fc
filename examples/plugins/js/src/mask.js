// mask-js: replaces the text values of chosen columns by a salted digest before they land.
//
// Settings (the `config` table of the pipeline file):
// - `columns` (required): comma-separated column names, in any table (`"email,phone"`).
// - `salt` (optional, default empty): mixed into every digest. Without one, short values
//   such as phone numbers can be recovered by hashing every candidate.
//
// A `text` value v of a masked column becomes "sha256:" followed by the first 8 bytes of
// SHA-256(salt, 0x00, v) in lowercase hex (UTF-8 throughout), so equal values still join and
// group but cannot be read back. Values of other types (null, json, arrays, ...) are left as
// they are, with one warning per column in the host log.
//
// A Tributary transform plugin (WIT world `tributary:transform/transform@1.0.0`), built into a
// WebAssembly component with `jco componentize`. See README.md.

import { count, log } from 'tributary:transform/host@1.0.0';

const NAME = 'mask-js';
const VERSION = '1.0.0';

// An error the host receives as the `err` case of a `result`: the bindings hand on the
// thrown value's own `payload` property. (A plain Error without one makes the call trap.)
class Refusal extends Error {
  constructor(message) {
    super(message);
    this.payload = message;
  }
}

// The settings, as `init` read them.
let maskedNames = new Set();
let saltBytes = new Uint8Array(0);
// `schema.table.column` of the masked columns already reported as holding non-text values.
const warned = new Set();

const utf8 = new TextEncoder();

export const plugin = {
  describe() {
    return { name: NAME, version: VERSION };
  },

  init(config) {
    const settings = new Map(config);
    const unknown = [...settings.keys()].filter((key) => key !== 'columns' && key !== 'salt');
    if (unknown.length > 0) {
      const names = unknown.map((key) => `\`${key}\``).join(', ');
      throw new Refusal(
        `${NAME}: unknown setting ${names}; it takes \`columns\` (required) and \`salt\``,
      );
    }
    const columns = [
      ...new Set(
        (settings.get('columns') ?? '')
          .split(',')
          .map((name) => name.trim())
          .filter((name) => name !== ''),
      ),
    ];
    if (columns.length === 0) {
      throw new Refusal(
        `${NAME}: setting \`columns\` is missing or empty; give the names of the columns to ` +
          'mask, separated by commas: config = { columns = "email,phone" }',
      );
    }
    maskedNames = new Set(columns);
    saltBytes = utf8.encode(settings.get('salt') ?? '');
    log('info', 'masking columns', [
      ['columns', columns.join(',')],
      ['salted', saltBytes.length > 0 ? 'yes' : 'no'],
    ]);
    return {
      outputs: [],
      reshapes: [],
      interest: {
        // Only the masked columns are copied into the plugin; the others arrive as `absent`.
        columns,
        // Updates that change the key (or every update, with REPLICA IDENTITY FULL) carry an
        // old image; it lands in `_old`, so it must be masked too.
        oldImages: true,
        messages: false,
        wholeTransactions: false,
      },
    };
  },

  process(batch) {
    // The positions of the masked columns in each relation of the batch.
    const positions = batch.relations.map((relation) =>
      relation.columns.flatMap((column, i) => (maskedNames.has(column.name) ? [i] : [])),
    );
    const emits = [];
    let masked = 0;
    batch.transactions.forEach((tx, transaction) => {
      tx.changes.forEach((change, index) => {
        const ref = { transaction, change: index };
        if (change.op === 'truncate') {
          emits.push({ tag: 'keep', val: ref });
          return;
        }
        const relation = batch.relations[change.relation];
        const where = positions[change.relation];
        // The row is the new row of an insert or update, the old row of a delete.
        const row = change.op === 'delete' ? change.old : change.new;
        const values = maskRow(row, where, relation);
        // A delete's old image is its row; an update's is `change.old`, when it has one.
        const old = change.op === 'update' ? maskRow(change.old, where, relation) : [];
        if (values.length === 0 && old.length === 0) {
          emits.push({ tag: 'keep', val: ref });
        } else {
          masked += values.length + old.length;
          emits.push({ tag: 'edit', val: { change: ref, values, old } });
        }
      });
    });
    if (masked > 0) {
      count('values_masked', BigInt(masked));
    }
    return { emits, rejections: [] };
  },
};

// The (position, value) pairs that mask `row` (a list of values, or undefined for none).
function maskRow(row, where, relation) {
  const edits = [];
  if (!row) {
    return edits;
  }
  for (const i of where) {
    const value = row[i];
    if (value === undefined) {
      continue;
    }
    if (value.tag === 'text') {
      edits.push([i, { tag: 'text', val: digest(value.val) }]);
    } else if (value.tag !== 'null' && value.tag !== 'absent' && value.tag !== 'unchanged-toast') {
      warnUnmasked(relation, relation.columns[i], value.tag);
    }
  }
  return edits;
}

function warnUnmasked(relation, column, tag) {
  const key = `${relation.schema}.${relation.table}.${column.name}`;
  if (warned.has(key)) {
    return;
  }
  warned.add(key);
  log('warn', 'masked column holds values that are not text; they land unmasked', [
    ['table', `${relation.schema}.${relation.table}`],
    ['column', column.name],
    ['type', column.typeName],
    ['value', tag],
  ]);
}

// The settings `init` accepted, for mask-columnar.js: the masked column names (a Set).
export function maskedColumns() {
  return maskedNames;
}

// The salt `init` read, as UTF-8 bytes, for mask-functions.js.
export function maskSalt() {
  return saltBytes;
}

// How many bytes digestInto writes: "sha256:" and 16 hex digits.
export const DIGEST_LENGTH = 23;

const PREFIX = utf8.encode('sha256:');
const HEX_DIGITS = utf8.encode('0123456789abcdef');
let scratch = new Uint8Array(256); // salt, 0x00, value; reused while values fit

// Writes "sha256:" and the first 8 bytes of SHA-256(salt, 0x00, bytes) in lowercase hex, as
// DIGEST_LENGTH ASCII bytes, into `out` at `at`. `bytes` is the UTF-8 of the text.
export function digestInto(bytes, out, at) {
  const length = saltBytes.length + 1 + bytes.length;
  if (length > scratch.length) {
    scratch = new Uint8Array(Math.max(length, 2 * scratch.length));
  }
  scratch.set(saltBytes, 0);
  scratch[saltBytes.length] = 0;
  scratch.set(bytes, saltBytes.length + 1);
  const hash = sha256(scratch.subarray(0, length));
  out.set(PREFIX, at);
  for (let i = 0; i < 8; i++) {
    out[at + 7 + 2 * i] = HEX_DIGITS[hash[i] >> 4];
    out[at + 8 + 2 * i] = HEX_DIGITS[hash[i] & 15];
  }
}

// The masked form of a text value.
function digest(text) {
  const out = new Uint8Array(DIGEST_LENGTH);
  digestInto(utf8.encode(text), out, 0);
  return String.fromCharCode(...out);
}

// SHA-256 (FIPS 180-4) of a Uint8Array, as a Uint8Array of 32 bytes. Synchronous and plain:
// the engine inside the component has no crypto module to lean on. The engine interprets
// (there is no JIT in WebAssembly), so the rounds keep to local variables and spell the
// rotations out: that makes it about twice as fast as the same code with helper functions.
const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const w = new Int32Array(64); // the message schedule; stores wrap modulo 2^32
let padded = new Uint8Array(128); // reused while messages fit
let paddedView = new DataView(padded.buffer);

export function sha256(message) {
  // Padding: a 1 bit, zeros, then the length in bits as a big-endian 64-bit number, up to a
  // multiple of 64 bytes.
  const length = message.length;
  const size = Math.ceil((length + 9) / 64) * 64;
  if (size > padded.length) {
    padded = new Uint8Array(size);
    paddedView = new DataView(padded.buffer);
  }
  padded.set(message);
  padded[length] = 0x80;
  padded.fill(0, length + 1, size - 8);
  paddedView.setUint32(size - 8, Math.floor(length / 0x20000000)); // the bits above 2^32
  paddedView.setUint32(size - 4, (length * 8) >>> 0);

  let h0 = 0x6a09e667 | 0, h1 = 0xbb67ae85 | 0, h2 = 0x3c6ef372 | 0, h3 = 0xa54ff53a | 0;
  let h4 = 0x510e527f | 0, h5 = 0x9b05688c | 0, h6 = 0x1f83d9ab | 0, h7 = 0x5be0cd19 | 0;
  for (let block = 0; block < size; block += 64) {
    for (let i = 0; i < 16; i++) {
      w[i] = paddedView.getInt32(block + 4 * i);
    }
    for (let i = 16; i < 64; i++) {
      const x = w[i - 15];
      const y = w[i - 2];
      const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    let a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
    for (let i = 0; i < 64; i++) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (h + s1 + ch + K[i] + w[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (s0 + maj) | 0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0;
    h1 = (h1 + b) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
    h5 = (h5 + f) | 0;
    h6 = (h6 + g) | 0;
    h7 = (h7 + h) | 0;
  }
  const digest = new Uint8Array(32);
  const view = new DataView(digest.buffer);
  [h0, h1, h2, h3, h4, h5, h6, h7].forEach((word, i) => view.setInt32(4 * i, word));
  return digest;
}
