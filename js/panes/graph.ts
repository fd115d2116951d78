/** The graph pane: search, Fit, Collapse all, the Graphviz drawing, the legend. */

import workerSource from "virtual:layout-worker";
import { buildDot } from "../dot";
import { clearClass, element } from "../dom";
import { initialExpansion, representative, reveal, toggle, visibleGraph, type VisibleGraph } from "../grouping";
import { LayoutClient, StaleLayout } from "../layout";
import type { PaneContext } from "../model";
import { searchNodes, visibleMatches } from "../search";
import type { GraphData, GraphNode } from "../types";
import { createViewport } from "../viewport";
import type { Pane } from "./pane";

let sharedClient: LayoutClient | null = null;

/** One Graphviz worker for every widget on the page. */
function layoutClient(): LayoutClient {
  if (!sharedClient) {
    const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    const worker = new Worker(url);
    const client = new LayoutClient((request) => worker.postMessage(request));
    worker.onmessage = (event) => client.receive(event.data);
    sharedClient = client;
  }
  return sharedClient;
}

const LEGEND: [string, string][] = [
  ["saved", "saved for backward"], ["tangent", "tangent"], ["gradient", "gradient output"], ["op", "op"],
  ["recomputed", "recomputed forward op"], ["group", "module (click to open)"],
];

export function graphPane({ model, signal, root, select }: PaneContext): Pane {
  const layout = layoutClient();
  const on = { signal };
  const el = element("div", "bwd-graph");
  const toolbar = element("div", "bwd-toolbar");
  const search = element("input", "bwd-search");
  search.placeholder = "search node or op";
  const matchCount = element("span", "bwd-match-count");
  const fit = element("button", "bwd-fit", "Fit");
  const collapseAll = element("button", "bwd-collapse", "Collapse all");
  toolbar.append(search, matchCount, fit, collapseAll);
  const host = element("div", "bwd-svg-host");
  const legend = element("div", "bwd-legend");
  for (const [kind, text] of LEGEND) legend.appendChild(element("span", `bwd-legend-item bwd-kind-${kind}`, text));
  el.append(toolbar, host, legend);
  const viewport = createViewport(host, signal);
  const started = performance.now();

  let data: GraphData | null = null;
  let byId = new Map<string, GraphNode>();
  let expanded = new Set<string>();
  let visible: VisibleGraph = { nodes: [], edges: [] };
  let found: GraphNode[] = []; // search results
  let laidOut = false; // the SVG on screen draws `visible`

  function svgElementFor(visibleId: string): Element | null {
    const index = visible.nodes.findIndex((v) => v.id === visibleId);
    return laidOut && index >= 0 ? viewport.svg?.querySelector(`#v${index}`) ?? null : null;
  }

  /** Outline the selected node, or the collapsed module standing for it. */
  function markSelected(id: string, pan: boolean): void {
    clearClass(viewport.svg, "bwd-selected");
    const node = byId.get(id);
    const target = node ? svgElementFor(representative(node, expanded)) : null;
    if (!target) return;
    target.classList.add("bwd-selected");
    if (pan) viewport.panTo(target);
  }

  function markMatches(): void {
    clearClass(viewport.svg, "bwd-match");
    for (const id of visibleMatches(found, expanded)) svgElementFor(id)?.classList.add("bwd-match");
  }

  function runSearch(): void {
    found = data ? searchNodes(data.nodes, search.value) : [];
    matchCount.textContent = search.value ? `${found.length} match${found.length === 1 ? "" : "es"}` : "";
    markMatches();
  }

  function relayoutWith(next: Set<string>): void {
    expanded = next;
    void relayout();
  }

  /** Classes and click handlers on Graphviz's node and cluster groups. */
  function decorate(svg: SVGSVGElement, shown: VisibleGraph, recomputedNow: Set<string>): void {
    svg.querySelectorAll("g.node").forEach((g) => {
      const v = shown.nodes[Number(g.id.slice(1))];
      if (!v) return;
      g.setAttribute("data-visible-id", v.id);
      g.classList.add(v.path !== undefined ? "bwd-group" : `bwd-node-${v.node!.kind}`);
      if (v.node && recomputedNow.has(v.node.id)) g.classList.add("bwd-diff-recomputed");
      g.addEventListener("click", (event) => {
        event.stopPropagation();
        if (v.path !== undefined) relayoutWith(toggle(v.path, expanded));
        else select(v.node!.id);
      }, on);
    });
    svg.querySelectorAll("g.cluster").forEach((g) => {
      g.addEventListener("dblclick", () => {
        const label = g.querySelector("text")?.textContent;
        if (label && expanded.has(label)) relayoutWith(toggle(label, expanded));
      }, on);
    });
  }

  async function relayout(): Promise<void> {
    if (!data) return;
    const shown = visibleGraph(data, expanded);
    visible = shown;
    laidOut = false;
    const before = performance.now();
    let text: string;
    try {
      text = await layout.request(buildDot(shown));
    } catch (e) {
      if (!(e instanceof StaleLayout) && !signal.aborted) host.replaceChildren(element("div", "bwd-error", `layout failed: ${String(e)}`));
      return;
    }
    if (signal.aborted) return;
    const parsed = new DOMParser().parseFromString(text, "image/svg+xml");
    const svg = document.importNode(parsed.documentElement, true) as unknown as SVGSVGElement;
    svg.classList.add("bwd-svg");
    decorate(svg, shown, new Set(data.diff?.recomputed_now ?? []));
    viewport.show(svg, () => {
      const tangent = shown.nodes.findIndex((v) => v.node?.kind === "tangent");
      return tangent >= 0 ? svg.querySelector(`#v${tangent}`) : null;
    });
    laidOut = true;
    root.dataset.layoutMs = String(Math.round(performance.now() - before));
    root.dataset.visibleNodes = String(shown.nodes.length);
    root.dataset.firstPaintMs ??= String(Math.round(performance.now() - started));
    root.dataset.rendered = String(Number(root.dataset.rendered || 0) + 1);
    markMatches();
    markSelected(model.get("selected"), true);
  }

  search.addEventListener("input", runSearch, on);
  search.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !data) return;
    const first = searchNodes(data.nodes, search.value)[0];
    if (first) select(first.id);
  }, on);
  fit.addEventListener("click", () => viewport.fit(), on);
  collapseAll.addEventListener("click", () => relayoutWith(new Set()), on);

  return {
    el,
    update(next) {
      data = next;
      byId = new Map(next.nodes.map((n) => [n.id, n]));
      expanded = initialExpansion(next);
      runSearch();
      void relayout();
    },
    highlight(id, pan) {
      const node = byId.get(id);
      if (node && representative(node, expanded) !== node.id) relayoutWith(reveal(node, expanded));
      else if (laidOut) markSelected(id, pan);
    },
  };
}
