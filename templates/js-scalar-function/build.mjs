// Builds `{{name}}` into a WebAssembly component:  node build.mjs [OUTPUT.wasm]
//
// componentize-js takes one source file, so this first writes `build/bundle.js`:
// apache-arrow's single-file build (`Arrow.es2015.min.js`, a UMD script that defines `Arrow`
// on the `this` it is given), run with `this` = `ARROW_HOLDER`, then `function.js`. Then it
// runs componentize-js (pinned in package.json) against `wit/` (world
// `scalar-function-plugin`), with the `http` and `fetch-event` features disabled: otherwise
// the component would import `wasi:http`, which coordhost does not provide, and fail to link.
import { componentize } from '@bytecodealliance/componentize-js';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const output = process.argv[2] ?? join(here, '{{name}}.wasm');

const arrowJs = await readFile(join(here, 'node_modules/apache-arrow/Arrow.es2015.min.js'), 'utf8');
const source = await readFile(join(here, 'function.js'), 'utf8');
const bundle = join(here, 'build', 'bundle.js');
await mkdir(dirname(bundle), { recursive: true });
await writeFile(
  bundle,
  `const ARROW_HOLDER = {};\n(function () {\n${arrowJs}\n}).call(ARROW_HOLDER);\n${source}`,
);

const { component } = await componentize({
  sourcePath: bundle,
  witPath: join(here, 'wit'),
  worldName: 'scalar-function-plugin',
  disableFeatures: ['http', 'fetch-event'],
});
await mkdir(dirname(resolve(output)), { recursive: true });
await writeFile(output, component);
console.log(`wrote ${output} (${component.length} bytes)`);
