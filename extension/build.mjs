// Build the cell panel: src/widget.ts -> ../xla_lab/view/static/panel.js (ESM), the CSS, and a copy of
// Graphviz WASM (@viz-js/viz) that the kernel hands to the browser on request (never inlined in panel.js).
// Then the JupyterLab extension's sources: src/lab/index.ts -> lib/ (ESM; JupyterLab, Lumino and
// @viz-js/viz left as imports, the views split into a lazily imported chunk) and lib/style.css, which
// `npm run build:labextension` (@jupyter/builder) turns into the prebuilt extension in
// ../xla_lab/labextension (Graphviz becomes a lazily loaded chunk there).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "xla_lab", "view", "static");
mkdirSync(out, { recursive: true });

await build({
  entryPoints: [join(here, "src", "widget.ts")],
  outfile: join(out, "panel.js"),
  bundle: true, format: "esm", minify: true, target: "es2020", legalComments: "none", logLevel: "warning",
});
await build({
  entryPoints: [join(here, "src", "panel", "panel.css")],
  outfile: join(out, "panel.css"), bundle: true, minify: true, logLevel: "warning",
});
// @viz-js/viz 3.x ships one ES module with the WASM inlined: dist/viz.js
const require = createRequire(import.meta.url);
const vizDir = join(dirname(require.resolve("@viz-js/viz")), "..");  // the package's main is dist/viz.cjs
copyFileSync(join(vizDir, "dist", "viz.js"), join(out, "viz-standalone.mjs"));
for (const f of ["panel.js", "panel.css", "viz-standalone.mjs"]) {
  console.log(`${f}: ${statSync(join(out, f)).size} bytes`);
}

const lib = join(here, "lib");
rmSync(lib, { recursive: true, force: true });
await build({
  entryPoints: [join(here, "src", "lab", "index.ts")],
  outdir: lib, bundle: true, splitting: true, format: "esm", target: "es2020", legalComments: "none", logLevel: "warning",
  external: ["@jupyterlab/*", "@lumino/*", "@viz-js/viz"],
  chunkNames: "[name]-[hash]",
});
await build({
  entryPoints: [join(here, "src", "lab", "style.css")],
  outfile: join(lib, "style.css"), bundle: true, logLevel: "warning",
});
console.log(`lib/: ${readdirSync(lib).join(", ")}`);
