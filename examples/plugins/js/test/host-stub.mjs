// Stands in for the host interface `tributary:transform/host@1.0.0` in tests: records calls.
export const calls = [];

export function log(level, message, fields) {
  calls.push({ fn: 'log', level, message, fields });
}

export function count(name, delta) {
  if (typeof delta !== 'bigint') {
    throw new TypeError(`count: delta must be a BigInt (u64), got ${typeof delta}`);
  }
  calls.push({ fn: 'count', name, delta });
}
