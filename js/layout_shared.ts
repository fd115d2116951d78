/** The page's one Graphviz worker (inlined into the bundle as text); kept apart from layout.ts so that
 *  the layout client stays testable in Node. */

import workerSource from "virtual:layout-worker";
import { LayoutClient } from "./layout";

let shared: LayoutClient | null = null;

/** One Graphviz worker for every widget on the page. */
export function sharedLayoutClient(): LayoutClient {
  if (!shared) {
    const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    const worker = new Worker(url);
    const client = new LayoutClient((request) => worker.postMessage(request));
    worker.onmessage = (event) => client.receive(event.data);
    shared = client;
  }
  return shared;
}
