// passthrough-columnar-js: passthrough-js (passthrough.js) taking its batches by column.
//
// The same plugin, built for the world `columnar-transform`: it also exports the `columnar`
// interface, which a host that serves it calls instead of `process`. A batch then crosses as
// one Arrow IPC stream per table instead of an object per change, and the answer `land: all`
// for each table lets every change through as it came: the cost of a call no longer grows
// with its rows. `describe`, `init` and `process` are passthrough.js's, so a host that does
// not serve `columnar` runs the same plugin through `process`.
//
// Built with componentize.mjs (ComponentizeJS, which resolves the import of passthrough.js).
// See README.md.

import { plugin as typed } from './passthrough.js';

const NAME = 'passthrough-columnar-js';

export const plugin = {
  ...typed,
  describe() {
    return { ...typed.describe(), name: NAME };
  },
};

export const columnar = {
  processColumns(batch) {
    // One answer per table, in the order of `batch.tables`. Edit here: `{ tag: 'only', val:
    // [row indices] }` lands only those rows; `columns` (an Arrow IPC stream, see
    // arrow-ipc.js) replaces values.
    return {
      tables: batch.tables.map(() => ({ land: { tag: 'all' }, rejections: [] })),
      rows: [],
    };
  },
};
