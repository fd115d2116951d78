/** Web Worker: Graphviz compiled to WebAssembly lays out DOT off the UI thread. */

import { Graphviz } from "@hpcc-js/wasm-graphviz";

const ready = Graphviz.load();

self.onmessage = async (event: MessageEvent<{ id: number; dot: string }>) => {
  const { id, dot } = event.data;
  try {
    const graphviz = await ready;
    (self as unknown as Worker).postMessage({ id, svg: graphviz.layout(dot, "svg", "dot") });
  } catch (error) {
    (self as unknown as Worker).postMessage({ id, error: String(error) });
  }
};
