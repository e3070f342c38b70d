// Builds the JavaScript scalar function into a WebAssembly component.
//
//   node build.mjs OUTPUT.wasm        (the Makefile's `plugins-js` target runs this)
//
// componentize-js takes one source file, so this writes `build/function.bundle.js`:
// apache-arrow's single-file build (`Arrow.es2015.min.js`, pinned in package-lock.json),
// wrapped so that it defines `Arrow` on an object of ours (`ARROW_HOLDER`, it is a UMD
// script that expects a global `this`), then `function.js`. Then it runs componentize-js
// (pinned in package.json) against `wit/function/` of the repository, world
// `scalar-function-plugin`, with the `http` and `fetch-event` features disabled (otherwise
// the component would import `wasi:http`, which coordhost does not provide).
import { componentize } from '@bytecodealliance/componentize-js';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const output = process.argv[2];
if (!output) {
  console.error('usage: node build.mjs OUTPUT.wasm');
  process.exit(2);
}

const arrowJs = await readFile(join(here, 'node_modules/apache-arrow/Arrow.es2015.min.js'), 'utf8');
const source = await readFile(join(here, 'function.js'), 'utf8');
const bundle = join(here, 'build', 'function.bundle.js');
await mkdir(dirname(bundle), { recursive: true });
await writeFile(
  bundle,
  `const ARROW_HOLDER = {};\n(function () {\n${arrowJs}\n}).call(ARROW_HOLDER);\n${source}`,
);

const { component } = await componentize({
  sourcePath: bundle,
  witPath: resolve(here, '../../wit/function'),
  worldName: 'scalar-function-plugin',
  disableFeatures: ['http', 'fetch-event'],
});
await mkdir(dirname(resolve(output)), { recursive: true });
await writeFile(output, component);
console.log(`wrote ${output} (${component.length} bytes)`);
