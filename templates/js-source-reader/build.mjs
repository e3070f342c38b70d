// Builds `{{name}}` into a WebAssembly component:  node build.mjs [OUTPUT.wasm]
//
// 1. Lays out `build/wit/`: a world that includes `source-reader-plugin` of `wit/reader.wit`
//    and imports `wasi:filesystem/preopens` (StarlingMonkey, the engine inside componentize-js,
//    gives JavaScript no file API of its own; the component imports these interfaces anyway,
//    naming them makes them callable from `reader.js`), with `deps/`: `wit/reader.wit` and the
//    WASI 0.2 packages that ship inside `@bytecodealliance/jco` (installed with
//    componentize-js).
// 2. Writes `build/bundle.js` (componentize-js takes one source file): apache-arrow's
//    single-file build (`Arrow.es2015.min.js`, a UMD script that defines `Arrow` on the `this`
//    it is given), run with `this` = `ARROW_HOLDER`, then `reader.js`.
// 3. Runs componentize-js (pinned in package.json) with the `http` and `fetch-event` features
//    disabled: otherwise the component would import `wasi:http`, which coordhost does not
//    provide, and fail to link.
import { componentize } from '@bytecodealliance/componentize-js';
import { cp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const output = process.argv[2] ?? join(here, '{{name}}.wasm');
const wasiWit = join(here, 'node_modules/@bytecodealliance/jco/lib/wit/builtin/0.2.12');
const witDir = join(here, 'build', 'wit');
const deps = join(witDir, 'deps');

await rm(witDir, { recursive: true, force: true });
await mkdir(join(deps, 'coordhost-reader'), { recursive: true });
await cp(join(here, 'wit', 'reader.wit'), join(deps, 'coordhost-reader', 'reader.wit'));
for (const pkg of ['wasi-io', 'wasi-clocks', 'wasi-filesystem']) {
  await cp(join(wasiWit, pkg), join(deps, pkg), { recursive: true });
}
await writeFile(
  join(witDir, 'world.wit'),
  `package local:reader-build;

world js-source-reader {
    include coordhost:reader/source-reader-plugin@0.1.0;
    import wasi:filesystem/preopens@0.2.12;
}
`,
);

const arrowJs = await readFile(join(here, 'node_modules/apache-arrow/Arrow.es2015.min.js'), 'utf8');
const source = await readFile(join(here, 'reader.js'), 'utf8');
const bundle = join(here, 'build', 'bundle.js');
await writeFile(
  bundle,
  `const ARROW_HOLDER = {};\n(function () {\n${arrowJs}\n}).call(ARROW_HOLDER);\n${source}`,
);

const { component } = await componentize({
  sourcePath: bundle,
  witPath: witDir,
  worldName: 'js-source-reader',
  disableFeatures: ['http', 'fetch-event'],
});
await mkdir(dirname(resolve(output)), { recursive: true });
await writeFile(output, component);
console.log(`wrote ${output} (${component.length} bytes)`);
