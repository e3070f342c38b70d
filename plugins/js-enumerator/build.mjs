// Builds the JavaScript split enumerator into a WebAssembly component.
//
//   node build.mjs OUTPUT.wasm        (the Makefile's `plugins-js` target runs this)
//
// 1. Lays out `wit/deps/`: the project's `wit/` (package `coordhost:plugin@0.1.3`) and the
//    WASI 0.2 packages shipped inside the pinned `@bytecodealliance/jco` npm package, so that
//    `wit/world.wit` can include the plugin world and import `wasi:filesystem`.
// 2. Runs componentize-js (pinned in package.json; `npm ci` installs it) on `enumerator.js`
//    in its default mode (its AOT mode downloads a tool at build time and is not used), with
//    the `http` and `fetch-event` features disabled: otherwise the component would import
//    `wasi:http`, which the coordhost host does not provide, and fail to link.
//
// package.json also pins `@bytecodealliance/preview2-shim`: componentize-js 0.23.0 imports it
// at build time but lists it only among its own devDependencies, so `npm ci` would leave it
// out and the build would stop with ERR_MODULE_NOT_FOUND.
import { componentize } from '@bytecodealliance/componentize-js';
import { cp, mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const projectWit = resolve(here, '../../wit');
const wasiWit = join(here, 'node_modules/@bytecodealliance/jco/lib/wit/builtin/0.2.12');
const witDir = join(here, 'wit');
const deps = join(witDir, 'deps');

const output = process.argv[2];
if (!output) {
  console.error('usage: node build.mjs OUTPUT.wasm');
  process.exit(2);
}

await rm(deps, { recursive: true, force: true });
await mkdir(deps, { recursive: true });
await cp(projectWit, join(deps, 'coordhost-plugin'), { recursive: true });
for (const pkg of ['wasi-io', 'wasi-clocks', 'wasi-filesystem']) {
  await cp(join(wasiWit, pkg), join(deps, pkg), { recursive: true });
}

const { component } = await componentize({
  sourcePath: join(here, 'enumerator.js'),
  witPath: witDir,
  worldName: 'js-enumerator',
  disableFeatures: ['http', 'fetch-event'],
});
await mkdir(dirname(resolve(output)), { recursive: true });
await writeFile(output, component);
console.log(`wrote ${output} (${component.length} bytes)`);
