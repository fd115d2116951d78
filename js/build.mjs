// Bundle the front end into bwd_widgets/static/: the Graphviz worker first, inlined as text.
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";

const outdir = "bwd_widgets/static";
mkdirSync(outdir, { recursive: true });

const worker = await esbuild.build({
  entryPoints: ["js/layout_worker.ts"],
  bundle: true,
  format: "iife",
  minify: true,
  write: false,
  target: "es2022",
});
const workerSource = worker.outputFiles[0].text;

const inlineWorker = {
  name: "inline-worker",
  setup(build) {
    build.onResolve({ filter: /^virtual:layout-worker$/ }, () => ({ path: "layout-worker", namespace: "virtual" }));
    build.onLoad({ filter: /.*/, namespace: "virtual" }, () => ({ contents: workerSource, loader: "text" }));
  },
};

await esbuild.build({
  entryPoints: ["js/widget.ts"],
  bundle: true,
  format: "esm",
  minify: true,
  outfile: `${outdir}/widget.js`,
  plugins: [inlineWorker],
  target: "es2022",
});
copyFileSync("js/widget.css", `${outdir}/widget.css`);
console.log(`built ${outdir}/widget.js and widget.css`);
