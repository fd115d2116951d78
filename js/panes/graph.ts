/** The graph pane: breadcrumbs, search, Fit, Collapse all, colouring, the Graphviz drawing, keys. */

import { buildDot, clusterPaths } from "../dot";
import { clearClass, element } from "../dom";
import { download, exportFileName, pngOf, standaloneSvg } from "../export";
import { bestDrawing, chooseFirstView, drawingSize, fitOf, minScaleOf, type Drawing } from "../firstview";
import { firstViewCandidates, findRuns, runHolding, firstViews, foldedByMember, moduleTree, openPath, parentOf, representative, reveal, runBytes, toggle, unfoldAround, visibleGraph, visibleRuns, GROUP_PREFIX, type Run, type VisibleGraph } from "../grouping";
import { StaleLayout, type LayoutClient } from "../layout";
import { lineageOf } from "../lineage";
import { sharedLayoutClient } from "../layout_shared";
import type { PaneContext } from "../model";
import { nearestTo, neighbour, type Placed } from "../navigate";
import { resized, unionBox, type View } from "../panzoom";
import { matchCountText, searchNodes, searchReasons, stepMatch } from "../search";
import type { GraphData, GraphNode } from "../types";
import { createViewport, type Viewport } from "../viewport";
import { sideBySide } from "./graph_compare";
import { decorateSvg, graphElements, onKeys, renderCrumbs, renderLegend, renderResults, type HeatScales } from "./graph_parts";
import type { Pane } from "./pane";

/** After a relayout: fit the whole drawing, show a module's cluster, show the members of an unfolded
 *  run, centre a node, or keep the view. */
type Then = { fit: true } | { module: string } | { members: string[] } | { node: string } | { keep: true };

/** Wait this long after the last size change before placing the view again (a dragged edge). */
const REFIT_AFTER_MS = 80;

type Elements = ReturnType<typeof graphElements>;

/** The pane's state and what it does with it: drawing (layout, show, marks) and moving around. */
class GraphView {
  readonly viewport: Viewport;
  private readonly layout: LayoutClient = sharedLayoutClient();
  private readonly started = performance.now();
  data: GraphData | null = null;
  byId = new Map<string, GraphNode>();
  savedBytes = new Map<string, number>();
  minScale = 1; // the payload's readable scale (minScaleOf its views), set by load
  maxScale = 1; // the payload's views.max_scale, set by load
  expanded = new Set<string>();
  runs: Run[] = []; // every run of alike siblings in the model
  folded: Run[] = []; // the runs drawn as one group
  unfolded = new Set<Run>(); // runs the user unfolded: Esc from one of their blocks folds them again
  placement: Then = { fit: true }; // how the view on screen was placed: a resize places it so again
  atFirstView = false; // the drawing on screen is the first view (nothing opened or closed since)
  private refitTimer = 0;
  private shownDrawing: Drawing | null = null;
  visible: VisibleGraph = { nodes: [], edges: [], savedOnly: new Set(), edgeKinds: new Map() };
  clusters: string[] = [];
  found: GraphNode[] = []; // search results
  foundIndex = -1; // the match Enter went to last, -1 before the first Enter
  laidOut = false; // the SVG on screen draws `visible`
  cursor = ""; // the visible id the keys move from
  focus = "";
  generation = 0; // a newer drawing request makes older ones stale
  waiting = false; // the first view waits for the pane to have a size
  heat: HeatScales = { tensors: 0, modules: 0 }; // the drawing's bytes scales, for the legend's values

  constructor(private readonly ctx: PaneContext, readonly parts: Elements) {
    this.viewport = createViewport(parts.host, ctx.signal);
    const sized = new ResizeObserver(() => (this.waiting ? void this.firstView() : this.resizedSoon()));
    sized.observe(parts.host);
    ctx.signal.addEventListener("abort", () => sized.disconnect(), { once: true });
  }

  /** A new payload: the kernel's module tree and readability figures, then its first view, whose first
   *  layout request is made in a task of its own (a 48-layer model's update took 23-39 ms with it, 8-12 ms
   *  without), unless another drawing was asked for meanwhile; a drawing under way for the payload before is
   *  not shown. */
  load(next: GraphData): void {
    this.data = next;
    this.byId = new Map(next.nodes.map((n) => [n.id, n]));
    const tree = moduleTree(next.views.modules);
    this.runs = findRuns(tree, next.nodes);
    this.savedBytes = new Map([...tree.savedBytes, ...runBytes(this.runs, tree.savedBytes)]);
    this.folded = [];
    this.unfolded = new Set();
    this.minScale = minScaleOf(next.views);
    this.maxScale = next.views.max_scale;
    this.cursor = "";
    this.setFocusTo("");
    this.runSearch();
    const asked = ++this.generation; // a drawing of the payload before is stale from now on
    setTimeout(() => asked === this.generation && !this.ctx.signal.aborted && void this.firstView(), 0);
  }

  drawn(visibleId: string): Element | null {
    const index = this.visible.nodes.findIndex((v) => v.id === visibleId);
    return this.laidOut && index >= 0 ? this.viewport.svg?.querySelector(`#v${index}`) ?? null : null;
  }

  clusterOf(path: string): Element | null {
    const index = this.clusters.indexOf(path);
    return this.laidOut && index >= 0 ? this.viewport.svg?.querySelector(`#c${index}`) ?? null : null;
  }

  setFocusTo(path: string): void {
    this.focus = path;
    renderCrumbs(this.parts.crumbs, this.data?.model ?? "", path, (crumb) => this.showModule(crumb), this.ctx.signal);
    this.ctx.setFocus(path);
  }

  /** The legend for the colouring chosen, with the drawing's bytes scales. */
  showLegend(): void {
    const byBytes = this.parts.colour.value === "bytes";
    this.parts.el.classList.toggle("bwd-colour-bytes", byBytes);
    renderLegend(this.parts.legend, byBytes, this.heat);
  }

  markCursor(): void {
    clearClass(this.viewport.svg, "bwd-cursor");
    this.drawn(this.cursor)?.classList.add("bwd-cursor");
  }

  /** Outline the selected node, or the collapsed module standing for it, and mark its lineage. */
  markSelected(id: string, pan: boolean): void {
    clearClass(this.viewport.svg, "bwd-selected");
    const node = this.byId.get(id);
    const shownAs = node ? representative(node, this.expanded, foldedByMember(this.folded)) : "";
    const target = shownAs ? this.drawn(shownAs) : null;
    this.markLineage(target ? shownAs : "");
    if (!target) return;
    target.classList.add("bwd-selected");
    if (pan) this.panTo(target);
  }

  /** What drawn node `visibleId` is computed from and what it feeds stay, the rest is dimmed (CSS
   *  `.bwd-lineage`); no selection, or the toolbar's "lineage" box unticked, dims nothing. */
  markLineage(visibleId: string): void {
    const svg = this.viewport.svg;
    if (!svg) return;
    for (const name of ["bwd-upstream", "bwd-downstream", "bwd-on-path"]) clearClass(svg, name);
    const on = this.laidOut && visibleId !== "" && this.parts.lineage.checked;
    svg.classList.toggle("bwd-lineage", on);
    if (!on) return;
    const { upstream, downstream, edges } = lineageOf(this.visible.edges, visibleId);
    this.visible.nodes.forEach((v, i) => {
      const g = upstream.has(v.id) || downstream.has(v.id) ? svg.querySelector(`#v${i}`) : null;
      g?.classList.add(upstream.has(v.id) ? "bwd-upstream" : "bwd-downstream");
    });
    for (const k of edges) svg.querySelector(`#e${k}`)?.classList.add("bwd-on-path");
  }

  markMatches(): void {
    clearClass(this.viewport.svg, "bwd-match");
    const folded = foldedByMember(this.folded); // a match inside a folded run outlines the run
    for (const id of new Set(this.found.map((n) => representative(n, this.expanded, folded)))) this.drawn(id)?.classList.add("bwd-match");
  }

  runSearch(): void {
    const { search, matchCount } = this.parts;
    this.found = this.data ? searchNodes(this.data.nodes, search.value, searchReasons(this.data.nodes, this.data.saved)) : [];
    this.foundIndex = -1;
    matchCount.textContent = matchCountText(search.value, this.found.length, -1);
    this.markMatches();
  }

  /** Enter: the next match; Shift+Enter: the previous one. Returns the node to select. */
  stepSearch(step: 1 | -1): GraphNode | undefined {
    this.foundIndex = stepMatch(this.found.length, this.foundIndex, step);
    this.parts.matchCount.textContent = matchCountText(this.parts.search.value, this.found.length, this.foundIndex);
    return this.found[this.foundIndex];
  }

  /** Lay out `open` (left to right too when that reads better) without showing it. */
  draw(open: Set<string>, folded: readonly Run[] = this.folded): Promise<Drawing> {
    const graph = visibleGraph(this.data!, open, folded);
    const pane = { ...this.viewport.size(), figures: this.data!.views };
    return bestDrawing(graph.nodes.length, (rankdir) => this.layout.request(buildDot(graph, this.savedBytes, rankdir), this), pane);
  }

  /** Put a laid-out drawing on screen, then move the view as `then` says. */
  show(open: Set<string>, drawing: Drawing, then: Then, folded: Run[] = this.folded): void {
    this.expanded = open;
    this.folded = folded;
    this.atFirstView = false;
    this.placement = then;
    this.shownDrawing = drawing;
    this.visible = visibleGraph(this.data!, open, folded);
    this.clusters = clusterPaths(this.visible);
    const parsed = new DOMParser().parseFromString(drawing.svg, "image/svg+xml");
    const svg = document.importNode(parsed.documentElement, true) as unknown as SVGSVGElement;
    this.heat = decorateSvg(svg, this.visible, this.savedBytes, new Set(this.data!.diff?.recomputed_now ?? []));
    this.showLegend();
    const first: View | null = "fit" in then ? drawing.fit.view : null;
    this.viewport.show(svg, first);
    this.laidOut = true;
    this.place(then, drawing, svg);
    this.stamp(drawing);
    this.markMatches();
    this.markSelected(this.ctx.model.get("selected"), false);
    this.markCursor();
  }

  private place(then: Then, drawing: Drawing, svg: SVGSVGElement): void {
    if ("fit" in then && !drawing.fit.readable) {
      const tangent = this.visible.nodes.find((v) => v.node?.kind === "tangent")?.id ?? "";
      const start = this.drawn(tangent) ?? svg.querySelector("g.node");
      if (start) this.viewport.focus(start, this.minScale, this.maxScale); // too big to read whole: start readable, at the top
    }
    if ("module" in then) {
      const target = this.clusterOf(then.module) ?? this.drawn(GROUP_PREFIX + then.module);
      if (target) this.viewport.focus(target, this.minScale, this.maxScale);
    }
    if ("members" in then) {
      const boxes = then.members.flatMap((path) => {
        const g = this.drawn(GROUP_PREFIX + path);
        return g ? [this.viewport.boxOf(g)] : [];
      });
      if (boxes.length) this.viewport.focusBox(unionBox(boxes), this.minScale, this.maxScale);
    }
    if ("node" in then) {
      const target = this.drawn(then.node);
      if (target) this.viewport.panTo(target);
    }
  }

  /** The pane changed size: place the view again once the size settles. */
  private resizedSoon(): void {
    clearTimeout(this.refitTimer);
    this.refitTimer = window.setTimeout(() => this.refit(), REFIT_AFTER_MS);
  }

  /** Place the view for the pane's new size: the first view is chosen again (a fresh render at this size
   *  would choose it); a view the widget placed is placed again; a view the user zoomed or dragged keeps
   *  their scale and centre. */
  refit(): void {
    const svg = this.viewport.svg;
    if (!this.laidOut || !svg || this.ctx.signal.aborted || !resized(this.viewport.shownAt, this.viewport.size())) return;
    if (!this.parts.host.clientWidth || !this.parts.host.clientHeight) return; // a hidden pane: wait for it to show
    this.ctx.root.dataset.refits = String(Number(this.ctx.root.dataset.refits || 0) + 1);
    this.viewport.keep(); // the drawing maps to the pane linearly again, for the boxes below
    if (this.viewport.handMoved) return;
    if (this.atFirstView) {
      void this.firstView();
      return;
    }
    const shown = this.shownDrawing;
    if (!shown) return;
    const drawing = { ...shown, fit: fitOf(drawingSize(shown.svg), { ...this.viewport.size(), figures: this.data!.views }) };
    if ("fit" in this.placement) this.viewport.fit(this.maxScale);
    this.place(this.placement, drawing, svg);
  }

  /** The data-* timings and counts the tests and benchmarks read. */
  private stamp(drawing: Drawing): void {
    const root = this.ctx.root;
    root.dataset.visibleNodes = String(this.visible.nodes.length);
    root.dataset.rankdir = drawing.rankdir;
    root.dataset.firstPaintMs ??= String(Math.round(performance.now() - this.started));
    // wall-clock ms once the frame is on screen (a frame later), for the kernel-to-pixels bench
    requestAnimationFrame(() => requestAnimationFrame(() => {
      root.dataset.paintedAt = String(Math.round(performance.timeOrigin + performance.now()));
      root.dataset.firstPaintedAt ??= root.dataset.paintedAt;
    }));
    root.dataset.rendered = String(Number(root.dataset.rendered || 0) + 1);
  }

  private failed(e: unknown): void {
    if (!(e instanceof StaleLayout) && !this.ctx.signal.aborted) this.parts.host.replaceChildren(element("div", "bwd-error", `layout failed: ${String(e)}`));
  }

  /** Draw `open` and show it; a failed or superseded layout leaves the drawing as it is. */
  async relayout(open: Set<string>, then: Then): Promise<void> {
    if (!this.data) return;
    const mine = ++this.generation;
    const before = performance.now();
    try {
      const drawing = await this.draw(open);
      if (mine !== this.generation || this.ctx.signal.aborted) return;
      this.show(open, drawing, then);
      this.ctx.root.dataset.layoutMs = String(Math.round(performance.now() - before));
    } catch (e) {
      this.failed(e);
    }
  }

  /** The first view: the most detailed of the kernel's first views that reads well in this pane (once
   *  the pane has a size: a notebook may lay out an output only when it scrolls into view). */
  async firstView(): Promise<void> {
    if (!this.data) return;
    const host = this.parts.host;
    this.waiting = !host.clientWidth || !host.clientHeight;
    if (this.waiting) return;
    const mine = ++this.generation;
    try {
      const tries = firstViewCandidates(firstViews(this.data), this.runs);
      const { candidate, drawing } = await chooseFirstView(tries, (c) => this.draw(c.open, c.folded));
      if (mine !== this.generation || this.ctx.signal.aborted) return;
      this.show(candidate.open, drawing, { fit: true }, candidate.folded);
      this.atFirstView = true;
    } catch (e) {
      this.failed(e);
    }
  }

  /** Centre on a drawn element, keeping the scale; a resize keeps that view. */
  panTo(target: Element): void {
    this.viewport.panTo(target);
    const id = target.getAttribute("data-visible-id");
    if (id) this.placement = { node: id };
    this.atFirstView = false;
  }

  /** Open `path` (and what is above it), then show it; a folded run's label shows its members. */
  openModule(path: string): void {
    if (!this.data) return;
    const run = this.folded.find((r) => r.label === path);
    if (run) {
      this.unfold(run);
      return;
    }
    this.cursor = GROUP_PREFIX + path;
    this.setFocusTo(path);
    this.folded = unfoldAround(path, this.folded);
    void this.relayout(openPath(path, this.expanded), { module: path });
  }

  /** Draw a run's members as one group again, the cursor on it. */
  fold(run: Run): void {
    this.folded = [...this.folded, run];
    this.cursor = GROUP_PREFIX + run.label;
    this.setFocusTo(run.parent);
    void this.relayout(this.expanded, { node: this.cursor });
  }

  /** Draw a folded run's members one by one, shown from the first of them, the cursor on it. */
  unfold(run: Run): void {
    this.folded = this.folded.filter((r) => r !== run);
    this.unfolded.add(run);
    this.cursor = GROUP_PREFIX + run.members[0];
    this.setFocusTo(run.parent);
    void this.relayout(this.expanded, { members: run.members });
  }

  /** A breadcrumb: the whole model fitted, or a module shown (opened when closed). */
  showModule(path: string): void {
    const cluster = path && this.expanded.has(path) ? this.clusterOf(path) : null;
    if (!path) {
      this.setFocusTo("");
      this.viewport.fit(this.maxScale);
      this.placement = { fit: true };
    } else if (cluster) {
      this.setFocusTo(path);
      this.viewport.focus(cluster, this.minScale, this.maxScale);
      this.placement = { module: path };
      this.atFirstView = false;
    } else this.openModule(path);
  }

  /** Close open module `path` (and what is inside it), the cursor on it. */
  close(path: string): void {
    this.cursor = GROUP_PREFIX + path;
    this.setFocusTo(parentOf(path));
    void this.relayout(toggle(path, this.expanded), { node: this.cursor });
  }

  /** Close the innermost open module around the cursor (a module just opened, or the one the cursor
   *  is in): Esc goes one level up. */
  goUp(): void {
    const cursor = this.cursor;
    const group = cursor.startsWith(GROUP_PREFIX) ? cursor.slice(GROUP_PREFIX.length) : null;
    const run = group !== null && !this.expanded.has(group) ? runHolding(group, this.runs) : undefined;
    if (run && this.unfolded.has(run) && !this.folded.includes(run)) {
      this.fold(run); // a block of a run the user unfolded: up is the run, folded again
      return;
    }
    const inside = group !== null ? (this.expanded.has(group) ? group : parentOf(group)) : this.byId.get(cursor)?.module ?? this.focus;
    if (inside) this.close(inside);
  }

  placed(): Placed[] {
    return this.visible.nodes.flatMap((v) => {
      const g = this.drawn(v.id);
      if (!g) return [];
      const box = this.viewport.boxOf(g);
      return [{ id: v.id, x: box.x + box.w / 2, y: box.y + box.h / 2 }];
    });
  }

  moveCursor(to: string): void {
    this.cursor = to;
    this.markCursor();
    const target = this.drawn(to);
    if (target) this.panTo(target);
    if (to.startsWith(GROUP_PREFIX)) this.setFocusTo(parentOf(to.slice(GROUP_PREFIX.length)));
    else this.ctx.select(to);
  }

  /** Show node `id` as selected: opening the modules above it when it is inside a collapsed one. */
  highlight(id: string, pan: boolean): void {
    const node = this.byId.get(id);
    if (!node) return;
    this.cursor = representative(node, this.expanded, foldedByMember(this.folded));
    if (this.cursor !== node.id) {
      this.cursor = node.id;
      this.setFocusTo(node.module);
      this.folded = unfoldAround(node.module, this.folded);
      void this.relayout(reveal(node, this.expanded), { node: node.id });
    } else if (this.laidOut) {
      this.markSelected(id, pan);
      this.markCursor();
    }
  }
}

/** Keys, clicks on nodes and clusters, search, and the toolbar's buttons. */
function bindInput(view: GraphView, { search, results, fit, collapseAll, colour, lineage, exportSvg, exportPng, exportNote, host }: Elements, { select, signal, root, model }: PaneContext): void {
  const on = { signal };
  lineage.addEventListener("change", () => view.markSelected(model.get("selected"), false), on);
  onKeys(host, {
    move(direction) {
      const all = view.placed();
      const pane = view.viewport.boxOf(host); // keys start from the node nearest the middle of the pane
      const to = view.drawn(view.cursor) ? neighbour(view.cursor, direction, all, view.visible.edges) : nearestTo(all, pane.x + pane.w / 2, pane.y + pane.h / 2);
      if (to) view.moveCursor(to);
    },
    enter: () => view.cursor.startsWith(GROUP_PREFIX) && view.openModule(view.cursor.slice(GROUP_PREFIX.length)),
    escape: () => view.goUp(),
  }, signal);
  host.addEventListener("click", (event) => {
    host.focus({ preventScroll: true });
    const g = (event.target as Element).closest("g.node");
    const v = g ? view.visible.nodes[Number(g.id.slice(1))] : undefined;
    if (!v) return;
    if (v.run) {
      view.unfold(v.run);
      return;
    }
    if (v.path !== undefined) {
      if (!view.expanded.has(v.path)) view.openModule(v.path);
      return;
    }
    view.cursor = v.id;
    view.setFocusTo(v.node!.module);
    select(v.node!.id);
  }, on);
  host.addEventListener("dblclick", (event) => {
    const cluster = (event.target as Element).closest("g.cluster");
    const path = cluster ? view.clusters[Number(cluster.id.slice(1))] : undefined;
    if (path && view.expanded.has(path)) view.close(path);
  }, on);
  const listResults = () => renderResults(results, view.found, view.foundIndex, (index) => {
    view.foundIndex = index - 1;
    const match = view.stepSearch(1);
    listResults();
    if (match) select(match.id);
  }, signal);
  search.addEventListener("input", () => {
    view.runSearch();
    listResults();
  }, on);
  search.addEventListener("keydown", (event) => {
    if (event.key === "Escape") results.hidden = true;
    if (event.key !== "Enter" || !view.data) return;
    const match = view.stepSearch(event.shiftKey ? -1 : 1);
    listResults();
    if (match) select(match.id);
  }, on);
  search.addEventListener("blur", () => (results.hidden = true), on);
  search.addEventListener("focus", () => (results.hidden = view.found.length === 0), on);
  fit.addEventListener("click", () => {
    view.viewport.fit(view.maxScale);
    view.placement = { fit: true };
  }, on);
  collapseAll.addEventListener("click", () => {
    view.setFocusTo("");
    view.folded = visibleRuns(view.runs, new Set());
    void view.relayout(new Set(), { fit: true });
  }, on);
  colour.addEventListener("change", () => view.showLegend(), on);
  /** The view on screen as a file; what fails is said where the drawing is, in one sentence. */
  const exportAs = async (extension: "svg" | "png") => {
    const svg = view.viewport.svg;
    if (!svg || !view.data) return;
    const [width, height] = [host.clientWidth, host.clientHeight];
    const text = standaloneSvg(svg, width, height, getComputedStyle(host.closest(".bwd-root") ?? root).backgroundColor); // the widget's background, in either view
    const name = exportFileName(view.data.model, view.data.graph_index, view.data.graph_count, extension);
    try {
      download(extension === "svg" ? new Blob([text], { type: "image/svg+xml" }) : await pngOf(text, width, height, window.devicePixelRatio || 1), name);
      exportNote.textContent = "";
      root.dataset.exported = name;
    } catch (e) {
      exportNote.textContent = `The ${extension.toUpperCase()} could not be made: ${e instanceof Error ? e.message : String(e)}.`;
    }
  };
  exportSvg.addEventListener("click", () => void exportAs("svg"), on);
  exportPng.addEventListener("click", () => void exportAs("png"), on);
}

export function graphPane(ctx: PaneContext): Pane {
  const parts = graphElements();
  const view = new GraphView(ctx, parts);
  bindInput(view, parts, ctx);
  const compared = sideBySide(view, parts.el, parts.sideBySide, () => beforeView(ctx), () => ctx.model.get("selected"), ctx.signal);
  return {
    el: parts.el,
    update: (next) => {
      compared.update(next);
      view.load(next);
    },
    highlight: (id, pan) => {
      view.highlight(id, pan);
      compared.highlight(id, pan);
    },
    open: (path) => view.openModule(path),
  };
}

/** The graph of the partition shown before, for the side-by-side comparison: a view of its own whose
 *  clicks select in the whole widget; its timings go on its own element, not the widget's root. */
function beforeView(ctx: PaneContext): { view: GraphView; el: HTMLElement } {
  const parts = graphElements();
  parts.el.classList.add("bwd-graph-before");
  parts.sideBySide.remove();
  const own: PaneContext = { ...ctx, root: parts.el, setFocus: () => {}, openModule: () => {} };
  const view = new GraphView(own, parts);
  bindInput(view, parts, own);
  return { view, el: parts.el };
}
