// mask-functions-js: mask-columnar-js (mask-columnar.js) with the digests computed by the host.
//
// The same settings and the same digest as mask.js and mask-columnar.js ("sha256:" and the
// first 8 bytes of SHA-256(salt, 0x00, text), in hex), masking the same columns, but no value
// is touched in JavaScript: for each table the plugin hands the host's column functions
// (`tributary:functions/columns@1.0.0`, guest-sdk/wit/deps/functions/columns.wit) the stream
// it was given and one `sha256` step per masked column, and returns the stream they make as
// its replaced columns. The host computes every digest at native speed, in one call per table.
//
// Built for the world `columnar-functions` (guest-sdk/wit/functions.wit), which imports the
// functions, with componentize.mjs; see README.md. A host that does not serve them refuses
// this build when it loads it, saying so: there, run mask-columnar-js or mask-js, which compute
// the digests themselves and land the same values.

import { apply } from 'tributary:functions/columns@1.0.0';
import { maskingColumnar } from './mask-columnar.js';
import { maskSalt, plugin as typed } from './mask.js';
import { readStream } from './arrow-ipc.js';

const NAME = 'mask-functions-js';

export const plugin = {
  ...typed,
  describe() {
    return { ...typed.describe(), name: NAME };
  },
};

// An error the host receives as the `err` case of `process-columns`.
class Refusal extends Error {
  constructor(message) {
    super(message);
    this.payload = { tag: 'fatal', val: message };
  }
}

// The masked columns of the stream `bytes` among `names`, as a stream, and how many values
// were masked; [undefined, 0] when it holds none of them. Only the stream's schema is read
// here (which of the columns are text); the host reads and writes the values.
function maskStream(bytes, names) {
  const table = readStream(bytes);
  const text = names.filter((name) => table.column(name)?.typeName === 'Utf8');
  if (text.length === 0) {
    return [undefined, 0];
  }
  const salt = maskSalt();
  const prefix = new Uint8Array(salt.length + 1);
  prefix.set(salt);
  const digest = { prefix, keep: 8, encoding: { tag: 'hex', val: 'sha256:' } };
  const steps = text.map((name) => ({
    input: name,
    operation: { tag: 'sha256', val: digest },
    output: name,
  }));
  let applied;
  try {
    applied = apply(bytes, steps);
  } catch (e) {
    throw new Refusal(`the host's column functions refused the mask: ${e.payload ?? e}`);
  }
  const masked = applied.computed.reduce((sum, n) => sum + Number(n), 0);
  return [applied.columns, masked];
}

export const columnar = maskingColumnar(maskStream);
