// Builds a plugin whose source imports other modules beside it: `jco componentize` hands
// ComponentizeJS the source text alone, so `import ... from './mask.js'` would not resolve;
// given the file's path, ComponentizeJS reads the modules from its directory.
//
//   node componentize.mjs SOURCE.js WIT WORLD OUT.wasm [FEATURE-TO-DISABLE...]
//
// Run from a directory whose node_modules holds @bytecodealliance/componentize-js (this one
// after `npm ci`).

import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';

const [source, wit, world, out, ...disabled] = process.argv.slice(2);
if (!out) {
  console.error('usage: node componentize.mjs SOURCE.js WIT WORLD OUT.wasm [FEATURE...]');
  process.exit(2);
}
const { componentize } = await import('@bytecodealliance/componentize-js');
const { component } = await componentize({
  sourcePath: resolve(source),
  witPath: resolve(wit),
  worldName: world,
  disableFeatures: disabled,
});
await writeFile(out, component);
