// Builds `{{name}}` into a WebAssembly component:  node build.mjs [OUTPUT.wasm]
//
// Runs componentize-js (pinned in package.json; `npm install` fetches it) on
// `enumerator.js` against `wit/` (world `split-enumerator-plugin`), with the `http` and
// `fetch-event` features disabled: otherwise the component would import `wasi:http`, which
// coordhost does not provide, and fail to link.
import { componentize } from '@bytecodealliance/componentize-js';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const output = process.argv[2] ?? join(here, '{{name}}.wasm');

const { component } = await componentize({
  sourcePath: join(here, 'enumerator.js'),
  witPath: join(here, 'wit'),
  worldName: 'split-enumerator-plugin',
  disableFeatures: ['http', 'fetch-event'],
});
await mkdir(dirname(resolve(output)), { recursive: true });
await writeFile(output, component);
console.log(`wrote ${output} (${component.length} bytes)`);
