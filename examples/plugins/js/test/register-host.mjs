// `node --import ./test/register-host.mjs`: lets Node import the plugin sources as they are, by
// resolving the WIT import `tributary:transform/host@1.0.0` to test/host-stub.mjs.
import { register } from 'node:module';

const hooks = `
const stub = ${JSON.stringify(new URL('./host-stub.mjs', import.meta.url).href)};
export async function resolve(specifier, context, next) {
  if (specifier === 'tributary:transform/host@1.0.0') {
    return { url: stub, shortCircuit: true };
  }
  return next(specifier, context);
}
`;
register('data:text/javascript,' + encodeURIComponent(hooks));
