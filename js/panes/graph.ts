/** The graph pane: breadcrumbs, search, Fit, Collapse all, colouring, the Graphviz drawing, keys. */

import { buildDot, clusterPaths } from "../dot";
import { clearClass, element } from "../dom";
import { bestDrawing, chooseFirstView, LABEL_UNITS, type Drawing } from "../firstview";
import { firstViews, openPath, parentOf, representative, reveal, toggle, visibleGraph, GROUP_PREFIX, type VisibleGraph } from "../grouping";
import { StaleLayout } from "../layout";
import { sharedLayoutClient } from "../layout_shared";
import { bytesUnder } from "../memory";
import type { PaneContext } from "../model";
import { nearestTo, neighbour, type Placed } from "../navigate";
import { readableScale, type View } from "../panzoom";
import { searchNodes, visibleMatches } from "../search";
import type { GraphData, GraphNode } from "../types";
import { createViewport } from "../viewport";
import { decorateSvg, graphElements, onKeys, renderCrumbs, renderLegend } from "./graph_parts";
import type { Pane } from "./pane";

/** After a relayout: fit the whole drawing, show a module's cluster, centre a node, or keep the view. */
type Then = { fit: true } | { module: string } | { node: string } | { keep: true };

export function graphPane({ model, signal, root, select, setFocus }: PaneContext): Pane {
  const layout = sharedLayoutClient();
  const on = { signal };
  const { el, search, matchCount, fit, collapseAll, colour, crumbs, host, legend } = graphElements();
  const viewport = createViewport(host, signal);
  const started = performance.now();

  let data: GraphData | null = null;
  let byId = new Map<string, GraphNode>();
  let savedBytes = new Map<string, number>();
  let expanded = new Set<string>();
  let visible: VisibleGraph = { nodes: [], edges: [], savedOnly: new Set() };
  let clusters: string[] = [];
  let found: GraphNode[] = []; // search results
  let laidOut = false; // the SVG on screen draws `visible`
  let cursor = ""; // the visible id the keys move from
  let focus = "";
  let generation = 0; // a newer drawing request makes older ones stale

  let waiting = false; // the first view waits for the pane to have a size
  const sized = new ResizeObserver(() => waiting && void firstView());
  sized.observe(host);
  signal.addEventListener("abort", () => sized.disconnect(), { once: true });

  const minScale = readableScale(LABEL_UNITS);
  const drawn = (visibleId: string): Element | null => {
    const index = visible.nodes.findIndex((v) => v.id === visibleId);
    return laidOut && index >= 0 ? viewport.svg?.querySelector(`#v${index}`) ?? null : null;
  };
  const clusterOf = (path: string): Element | null => {
    const index = clusters.indexOf(path);
    return laidOut && index >= 0 ? viewport.svg?.querySelector(`#c${index}`) ?? null : null;
  };

  function setFocusTo(path: string): void {
    focus = path;
    renderCrumbs(crumbs, data?.model ?? "", focus, showModule, signal);
    setFocus(path);
  }

  function markCursor(): void {
    clearClass(viewport.svg, "bwd-cursor");
    drawn(cursor)?.classList.add("bwd-cursor");
  }

  /** Outline the selected node, or the collapsed module standing for it. */
  function markSelected(id: string, pan: boolean): void {
    clearClass(viewport.svg, "bwd-selected");
    const node = byId.get(id);
    const target = node ? drawn(representative(node, expanded)) : null;
    if (!target) return;
    target.classList.add("bwd-selected");
    if (pan) viewport.panTo(target);
  }

  function markMatches(): void {
    clearClass(viewport.svg, "bwd-match");
    for (const id of visibleMatches(found, expanded)) drawn(id)?.classList.add("bwd-match");
  }

  function runSearch(): void {
    found = data ? searchNodes(data.nodes, search.value) : [];
    matchCount.textContent = search.value ? `${found.length} match${found.length === 1 ? "" : "es"}` : "";
    markMatches();
  }

  /** Lay out `open` (left to right too when that reads better) without showing it. */
  function draw(open: Set<string>): Promise<Drawing> {
    const graph = visibleGraph(data!, open);
    const { width, height } = viewport.size();
    return bestDrawing(graph.nodes.length, (rankdir) => layout.request(buildDot(graph, savedBytes, rankdir)), width, height);
  }

  function show(open: Set<string>, drawing: Drawing, then: Then): void {
    expanded = open;
    visible = visibleGraph(data!, open);
    clusters = clusterPaths(visible);
    const parsed = new DOMParser().parseFromString(drawing.svg, "image/svg+xml");
    const svg = document.importNode(parsed.documentElement, true) as unknown as SVGSVGElement;
    decorateSvg(svg, visible, savedBytes, new Set(data!.diff?.recomputed_now ?? []));
    const first: View | null = "fit" in then ? drawing.fit.view : null;
    viewport.show(svg, first);
    laidOut = true;
    if ("fit" in then && !drawing.fit.readable) {
      const start = drawn(visible.nodes.find((v) => v.node?.kind === "tangent")?.id ?? "") ?? svg.querySelector("g.node");
      if (start) viewport.focus(start, minScale); // too big to read whole: start readable, at the top
    }
    if ("module" in then) {
      const target = clusterOf(then.module) ?? drawn(GROUP_PREFIX + then.module);
      if (target) viewport.focus(target, minScale);
    }
    if ("node" in then) {
      const target = drawn(then.node);
      if (target) viewport.panTo(target);
    }
    root.dataset.visibleNodes = String(visible.nodes.length);
    root.dataset.rankdir = drawing.rankdir;
    root.dataset.firstPaintMs ??= String(Math.round(performance.now() - started));
    // wall-clock ms once the frame is on screen (a frame later), for the kernel-to-pixels bench
    requestAnimationFrame(() => requestAnimationFrame(() => {
      root.dataset.paintedAt = String(Math.round(performance.timeOrigin + performance.now()));
      root.dataset.firstPaintedAt ??= root.dataset.paintedAt;
    }));
    root.dataset.rendered = String(Number(root.dataset.rendered || 0) + 1);
    markMatches();
    markSelected(model.get("selected"), false);
    markCursor();
  }

  /** Draw `open` and show it; a failed or superseded layout leaves the drawing as it is. */
  async function relayout(open: Set<string>, then: Then): Promise<void> {
    if (!data) return;
    const mine = ++generation;
    const before = performance.now();
    try {
      const drawing = await draw(open);
      if (mine !== generation || signal.aborted) return;
      show(open, drawing, then);
      root.dataset.layoutMs = String(Math.round(performance.now() - before));
    } catch (e) {
      if (!(e instanceof StaleLayout) && !signal.aborted) host.replaceChildren(element("div", "bwd-error", `layout failed: ${String(e)}`));
    }
  }

  /** The first view: the most detailed of firstViews(data) that reads well in this pane (once the
   *  pane has a size: a notebook may lay out an output only when it scrolls into view). */
  async function firstView(): Promise<void> {
    if (!data) return;
    waiting = !host.clientWidth || !host.clientHeight;
    if (waiting) return;
    const mine = ++generation;
    try {
      const { candidate, drawing } = await chooseFirstView(firstViews(data), draw);
      if (mine === generation && !signal.aborted) show(candidate, drawing, { fit: true });
    } catch (e) {
      if (!(e instanceof StaleLayout) && !signal.aborted) host.replaceChildren(element("div", "bwd-error", `layout failed: ${String(e)}`));
    }
  }

  /** Open `path` (and what is above it), then show it. */
  function openModule(path: string): void {
    if (!data) return;
    cursor = GROUP_PREFIX + path;
    setFocusTo(path);
    void relayout(openPath(path, expanded), { module: path });
  }

  /** A breadcrumb: the whole model fitted, or a module shown (opened when closed). */
  function showModule(path: string): void {
    if (!path) {
      setFocusTo("");
      viewport.fit();
    } else if (expanded.has(path) && clusterOf(path)) {
      setFocusTo(path);
      viewport.focus(clusterOf(path)!, minScale);
    } else openModule(path);
  }

  /** Close the innermost open module around the cursor (a module just opened, or the one the cursor
   *  is in): Esc goes one level up. */
  function goUp(): void {
    const group = cursor.startsWith(GROUP_PREFIX) ? cursor.slice(GROUP_PREFIX.length) : null;
    const inside = group !== null ? (expanded.has(group) ? group : parentOf(group)) : byId.get(cursor)?.module ?? focus;
    if (!inside) return;
    cursor = GROUP_PREFIX + inside;
    setFocusTo(parentOf(inside));
    void relayout(toggle(inside, expanded), { node: cursor });
  }

  function placed(): Placed[] {
    return visible.nodes.flatMap((v) => {
      const g = drawn(v.id);
      if (!g) return [];
      const box = viewport.boxOf(g);
      return [{ id: v.id, x: box.x + box.w / 2, y: box.y + box.h / 2 }];
    });
  }

  function moveCursor(to: string): void {
    cursor = to;
    markCursor();
    const target = drawn(to);
    if (target) viewport.panTo(target);
    if (to.startsWith(GROUP_PREFIX)) setFocusTo(parentOf(to.slice(GROUP_PREFIX.length)));
    else select(to);
  }

  onKeys(host, {
    move(direction) {
      const all = placed();
      const pane = viewport.boxOf(host); // keys start from the node nearest the middle of the pane
      const to = drawn(cursor) ? neighbour(cursor, direction, all, visible.edges) : nearestTo(all, pane.x + pane.w / 2, pane.y + pane.h / 2);
      if (to) moveCursor(to);
    },
    enter: () => cursor.startsWith(GROUP_PREFIX) && openModule(cursor.slice(GROUP_PREFIX.length)),
    escape: goUp,
  }, signal);
  host.addEventListener("click", (event) => {
    host.focus({ preventScroll: true });
    const g = (event.target as Element).closest("g.node");
    const v = g ? visible.nodes[Number(g.id.slice(1))] : undefined;
    if (!v) return;
    if (v.path !== undefined) {
      if (expanded.has(v.path)) return;
      openModule(v.path);
    } else {
      cursor = v.id;
      setFocusTo(v.node!.module);
      select(v.node!.id);
    }
  }, on);
  host.addEventListener("dblclick", (event) => {
    const cluster = (event.target as Element).closest("g.cluster");
    const path = cluster ? clusters[Number(cluster.id.slice(1))] : undefined;
    if (path && expanded.has(path)) {
      cursor = GROUP_PREFIX + path;
      setFocusTo(parentOf(path));
      void relayout(toggle(path, expanded), { node: cursor });
    }
  }, on);
  search.addEventListener("input", runSearch, on);
  search.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !data) return;
    const first = searchNodes(data.nodes, search.value)[0];
    if (first) select(first.id);
  }, on);
  fit.addEventListener("click", () => viewport.fit(), on);
  collapseAll.addEventListener("click", () => {
    setFocusTo("");
    void relayout(new Set(), { fit: true });
  }, on);
  colour.addEventListener("change", () => {
    el.classList.toggle("bwd-colour-bytes", colour.value === "bytes");
    renderLegend(legend, colour.value === "bytes");
  }, on);

  return {
    el,
    update(next) {
      data = next;
      byId = new Map(next.nodes.map((n) => [n.id, n]));
      savedBytes = bytesUnder(next.memory?.by_module ?? []);
      cursor = "";
      setFocusTo("");
      runSearch();
      void firstView();
    },
    highlight(id, pan) {
      const node = byId.get(id);
      if (!node) return;
      cursor = representative(node, expanded);
      if (cursor !== node.id) {
        cursor = node.id;
        setFocusTo(node.module);
        void relayout(reveal(node, expanded), { node: node.id });
      } else if (laidOut) {
        markSelected(id, pan);
        markCursor();
      }
    },
    open: openModule,
  };
}
