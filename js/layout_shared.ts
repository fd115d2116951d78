/** The page's one Graphviz worker (inlined into the bundle as text); kept apart from layout.ts so that
 *  the layout client stays testable in Node. */

import workerSource from "virtual:layout-worker";
import { LayoutClient } from "./layout";

/** Where the page keeps its worker: on globalThis, because anywidget imports this bundle afresh for
 *  every widget model (a module of its own each time), so a module-level variable would start one worker,
 *  a Graphviz instance and a copy of the bundle's worker text per widget. The key carries the worker's
 *  length so that a page which loads a newer bundle does not reuse an older worker. */
const KEY = `__bwdWidgetsLayout_${workerSource.length}`;

/** One Graphviz worker for every widget on the page. */
export function sharedLayoutClient(): LayoutClient {
  const page = globalThis as unknown as Record<string, LayoutClient | undefined>;
  let shared = page[KEY];
  if (!shared) {
    const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    const worker = new Worker(url);
    const client = new LayoutClient((request) => worker.postMessage(request));
    worker.onmessage = (event) => client.receive(event.data);
    page[KEY] = shared = client;
  }
  return shared;
}
