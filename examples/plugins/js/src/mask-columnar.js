// mask-columnar-js: mask-js (mask.js) taking its batches by column.
//
// The same settings and the same digest as mask.js ("sha256:" and the first 8 bytes of
// SHA-256(salt, 0x00, text), in hex), built for the world `columnar-transform`. A host that
// serves the `columnar` interface calls `processColumns` instead of `process`: each table of
// the batch arrives as an Arrow IPC stream holding the masked columns only (the plugin's
// interest), and the plugin returns the masked columns as a stream of the same rows. The
// digests are written straight into the returned column's bytes: no string is made per value.
// Reading and writing the streams is arrow-ipc.js.
//
// Which columns are masked: a column of a masked name whose values are text (`Utf8` in the
// stream), except `json`, `jsonb` and `numeric` columns, whose text must stay a valid value of
// their type. Columns of types kept as text (composites, ranges, ...) are masked too, where
// mask.js, which sees them as `other`, leaves them. `null` stays `null`.
//
// `describe`, `init` and `process` are mask.js's, so a host that does not serve `columnar`
// runs the same masker through `process`. Built with componentize.mjs; see README.md.

import { count } from 'tributary:transform/host@1.0.0';
import { DIGEST_LENGTH, digestInto, maskedColumns, plugin as typed } from './mask.js';
import { UTF8, readStream, writeStream } from './arrow-ipc.js';

const NAME = 'mask-columnar-js';

// Text columns of these types are left as they are: a digest is not a valid value of them.
const UNMASKED_TYPES = new Set(['json', 'jsonb', 'numeric']);

export const plugin = {
  ...typed,
  describe() {
    return { ...typed.describe(), name: NAME };
  },
};

// The masked form of a Utf8 column, laid out for writeStream, and how many values it masked.
export function maskColumn(column) {
  const n = column.length;
  const offsets = new Int32Array(n + 1);
  const data = new Uint8Array(n * DIGEST_LENGTH);
  let at = 0;
  let masked = 0;
  for (let i = 0; i < n; i++) {
    const bytes = column.bytes(i);
    if (bytes !== null) {
      digestInto(bytes, data, at);
      at += DIGEST_LENGTH;
      masked++;
    }
    offsets[i + 1] = at;
  }
  const valid = (i) => !column.isNull(i);
  return [{ name: column.name, type: UTF8, offsets, data: data.subarray(0, at), valid }, masked];
}

// The masked columns of the stream `bytes` among `names`, or null when it holds none.
function maskStream(bytes, names) {
  const table = readStream(bytes);
  const columns = [];
  let masked = 0;
  for (const name of names) {
    const column = table.column(name);
    if (column !== undefined && column.typeName === 'Utf8') {
      const [out, n] = maskColumn(column);
      columns.push(out);
      masked += n;
    }
  }
  return columns.length > 0 ? [writeStream(columns), masked] : [undefined, 0];
}

// The `columnar` interface of a mask whose `maskStream(bytes, names)` gives the masked columns
// of a stream among `names`, as a stream, and how many values it masked ([undefined, 0] for
// none): this plugin's, or mask-functions.js's, which has the host compute them.
export function maskingColumnar(maskStream) {
  return {
    processColumns(batch) {
      const wanted = maskedColumns();
      let masked = 0;
      const tables = batch.relations.map((relation, i) => {
        const table = batch.tables[i];
        const names = relation.columns
          .filter((c) => wanted.has(c.name) && !UNMASKED_TYPES.has(c.typeName))
          .map((c) => c.name);
        if (names.length === 0) {
          return { land: { tag: 'all' }, rejections: [] };
        }
        const [columns, inRows] = maskStream(table.rows, names);
        // The old images of updates land in `_old`: mask them too.
        const [old, inOld] = table.old !== undefined ? maskStream(table.old, names) : [undefined, 0];
        masked += inRows + inOld;
        return { land: { tag: 'all' }, columns, old, rejections: [] };
      });
      if (masked > 0) {
        count('values_masked', BigInt(masked));
      }
      return { tables, rows: [] };
    },
  };
}

export const columnar = maskingColumnar(maskStream);
