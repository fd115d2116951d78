/** Pieces of the graph pane: classes, titles and heat on Graphviz's SVG; the breadcrumbs; the legend. */

import { element } from "../dom";
import { formatShape } from "../format";
import { formatBytes } from "../units";
import { ancestors, type VisibleGraph, type VisibleNode } from "../grouping";
import { heatLevel, HEAT_LEVELS } from "../memory";
import { directionOf, type Direction } from "../navigate";
import { RESULTS_SHOWN, resultText } from "../search";
import type { GraphNode } from "../types";

/** A drawn node's hover text: what it is, in full (the label is kept short). */
export function titleOf(v: VisibleNode, savedBytes: ReadonlyMap<string, number>): string {
  if (v.run) {
    const bytes = savedBytes.get(v.path!);
    const [first, last] = [v.run.members[0], v.run.members[v.run.members.length - 1]];
    return `${v.run.members.length} alike modules, ${first} to ${last}: ${v.size} backward nodes${bytes ? `, ${formatBytes(bytes)} of saved activations` : ""}. Click or press Enter to show them one by one.`;
  }
  if (v.path !== undefined) {
    const bytes = savedBytes.get(v.path);
    return `module ${v.path}: ${v.size} backward nodes${bytes ? `, ${formatBytes(bytes)} of saved activations` : ""}. Click or press Enter to open it.`;
  }
  const n = v.node!;
  const gradient = n.grad_of.length ? `, gradient of ${n.grad_of.join(", ")}` : "";
  return `${n.id}: ${n.op} ${formatShape(n.shape)} ${n.dtype} (${formatBytes(n.bytes)})${gradient}${n.module ? ` in ${n.module}` : ""}`;
}

/** The bytes a drawn node stands for: its tensor's, or the saved activations inside a module. */
export function bytesOf(v: VisibleNode, savedBytes: ReadonlyMap<string, number>): number {
  return v.path !== undefined ? savedBytes.get(v.path) ?? 0 : v.node!.bytes;
}

/** The largest bytes of each colour scale in a drawing: tensors by their own bytes, modules by the saved
 *  activations inside them (two scales: a module's total would make every tensor look small). */
export interface HeatScales {
  tensors: number;
  modules: number;
}

/** Classes the CSS colours by, a useful <title>, and heat levels for colouring by bytes; returns the scales. */
export function decorateSvg(svg: SVGSVGElement, shown: VisibleGraph, savedBytes: ReadonlyMap<string, number>, recomputedNow: Set<string>): HeatScales {
  svg.classList.add("bwd-svg");
  const scales = heatScales(shown, savedBytes);
  svg.querySelectorAll("g.node").forEach((g) => {
    const v = shown.nodes[Number(g.id.slice(1))];
    if (!v) return;
    g.setAttribute("data-visible-id", v.id);
    g.classList.add(v.path !== undefined ? "bwd-group" : `bwd-node-${v.node!.kind}`);
    if (v.run) g.classList.add("bwd-run");
    g.classList.add(`bwd-heat-${heatLevel(bytesOf(v, savedBytes), v.path !== undefined ? scales.modules : scales.tensors)}`);
    if (v.node && recomputedNow.has(v.node.id)) g.classList.add("bwd-diff-recomputed");
    const title = g.querySelector("title");
    if (title) title.textContent = titleOf(v, savedBytes);
  });
  svg.querySelectorAll("g.cluster > title, g.edge > title, g.graph > title").forEach((title) => title.remove());
  return scales;
}

export function heatScales(shown: VisibleGraph, savedBytes: ReadonlyMap<string, number>): HeatScales {
  const largest = (modules: boolean) => Math.max(0, ...shown.nodes.filter((v) => (v.path !== undefined) === modules).map((v) => bytesOf(v, savedBytes)));
  return { tensors: largest(false), modules: largest(true) };
}

/** Each heat level's bytes, level 1 first: level L holds up to largest / 4^(HEAT_LEVELS - L) (memory.ts heatLevel). */
export function heatBounds(largest: number): number[] {
  return Array.from({ length: HEAT_LEVELS }, (_, i) => largest / 4 ** (HEAT_LEVELS - 1 - i));
}

/** root › blocks › blocks.3 › attn: each crumb a button that shows that module. */
export function renderCrumbs(host: HTMLElement, model: string, focus: string, onPick: (path: string) => void, signal: AbortSignal): void {
  const crumbs = [{ path: "", label: model || "model" }, ...ancestors(focus).map((path) => ({ path, label: path.slice(path.lastIndexOf(".") + 1) }))];
  host.replaceChildren();
  crumbs.forEach((crumb, i) => {
    if (i) host.appendChild(element("span", "bwd-crumb-sep", "\u203A"));
    const button = element("button", `bwd-crumb${i === crumbs.length - 1 ? " bwd-current" : ""}`, crumb.label);
    button.dataset.path = crumb.path;
    button.title = crumb.path ? `show ${crumb.path}` : "show the whole model";
    button.addEventListener("click", () => onPick(crumb.path), { signal });
    host.appendChild(button);
  });
}

const KIND_LEGEND: [string, string][] = [
  ["saved", "saved for backward"], ["tangent", "tangent"], ["gradient", "gradient output"], ["op", "op"],
  ["recomputed", "recomputed forward op"], ["group", "module (click to open)"],
];

const EDGE_LEGEND: [string, string][] = [
  ["e-flow", "backward data flow"], ["e-saved", "saved value read"], ["e-recomputed", "recomputed value read"], ["e-gradient", "into a gradient"],
];

/** The legend for the colouring in use: kinds, or bytes from small to large on each scale the drawing
 *  uses, every swatch with the most bytes it stands for. */
export function renderLegend(host: HTMLElement, byBytes: boolean, scales: HeatScales = { tensors: 0, modules: 0 }): void {
  if (!byBytes) {
    const kinds = KIND_LEGEND.map(([kind, text]) => element("span", `bwd-legend-item bwd-kind-${kind}`, text));
    const edges = EDGE_LEGEND.map(([kind, text]) => element("span", `bwd-legend-edge ${kind}`, text));
    host.replaceChildren(...kinds, ...edges);
    return;
  }
  const rows: HTMLElement[] = [];
  const scale = (name: string, title: string, largest: number) => {
    if (!(largest > 0)) return;
    const row = element("span", `bwd-legend-scale bwd-scale-${name}`);
    row.append(element("span", "bwd-legend-text", title));
    heatBounds(largest).forEach((bound, i) => {
      const swatch = element("span", `bwd-legend-item bwd-heat-${i + 1}`, `\u2264 ${formatBytes(Math.round(bound))}`);
      swatch.title = i ? `${formatBytes(Math.round(heatBounds(largest)[i - 1]))} to ${formatBytes(Math.round(bound))}` : `up to ${formatBytes(Math.round(bound))}`;
      row.append(swatch);
    });
    rows.push(row);
  };
  scale("tensors", "tensor bytes:", scales.tensors);
  scale("modules", "saved activations in a module:", scales.modules);
  if (!rows.length) rows.push(element("span", "bwd-legend-text", "no bytes to colour by in this view"));
  host.replaceChildren(...rows);
}

/** Arrows, Enter and Esc on the focused graph; handled keys go no further (not to the notebook). */
export function onKeys(host: HTMLElement, keys: { move(direction: Direction): void; enter(): void; escape(): void }, signal: AbortSignal): void {
  host.addEventListener("keydown", (event) => {
    const direction = directionOf(event.key);
    if (direction) keys.move(direction);
    else if (event.key === "Enter") keys.enter();
    else if (event.key === "Escape") keys.escape();
    else return;
    event.preventDefault();
    event.stopPropagation();
  }, { signal });
}

/** The pane's elements: toolbar (search, Fit, Collapse all, colouring, export), breadcrumbs, drawing, legend. */
export function graphElements() {
  const el = element("div", "bwd-graph");
  const toolbar = element("div", "bwd-toolbar");
  const search = element("input", "bwd-search");
  search.placeholder = "search name, op, module, shape or reason";
  search.dataset.lmSuppressShortcuts = "true"; // Shift+Enter is the previous match here, not JupyterLab's run-cell
  search.title = "Enter: next match \u00B7 Shift+Enter: previous \u00B7 a click on a result goes there \u00B7 Esc: hide the results";
  const matchCount = element("span", "bwd-match-count");
  const fit = element("button", "bwd-fit", "Fit");
  const collapseAll = element("button", "bwd-collapse", "Collapse all");
  const colour = element("select", "bwd-colour");
  colour.append(new Option("colour by kind", "kind"), new Option("colour by bytes", "bytes"));
  const exportSvg = element("button", "bwd-export bwd-export-svg", "SVG");
  exportSvg.title = "download the view on screen as an SVG file";
  const exportPng = element("button", "bwd-export bwd-export-png", "PNG");
  exportPng.title = "download the view on screen as a PNG picture";
  const lineage = element("input", "bwd-lineage-box");
  lineage.type = "checkbox";
  lineage.checked = true;
  const lineageLabel = element("label", "bwd-lineage-toggle");
  lineageLabel.title = "with a node selected: keep what it is computed from and what it feeds, dim the rest";
  lineageLabel.append(lineage, "lineage");
  const sideBySide = element("button", "bwd-side-by-side", "Side by side");
  sideBySide.hidden = true; // until there is a partition shown before to compare with
  const exportNote = element("span", "bwd-export-note");
  const results = element("ol", "bwd-search-results");
  results.hidden = true;
  toolbar.append(search, matchCount, fit, collapseAll, colour, lineageLabel, sideBySide, exportSvg, exportPng, exportNote, results);
  const crumbs = element("nav", "bwd-crumbs");
  const host = element("div", "bwd-svg-host");
  host.tabIndex = 0;
  host.dataset.lmSuppressShortcuts = "true"; // arrows, Enter and Esc move in the graph, not the notebook
  host.title = "wheel: zoom after a click in the graph, or with Ctrl \u00B7 arrows: move between neighbours \u00B7 Enter: open a module \u00B7 Esc: go up";
  const legend = element("div", "bwd-legend");
  el.append(toolbar, crumbs, host, legend);
  renderLegend(legend, false);
  return { el, search, matchCount, results, fit, collapseAll, colour, lineage, sideBySide, exportSvg, exportPng, exportNote, crumbs, host, legend };
}

/** The search's results under the box: the first RESULTS_SHOWN matches, each a button to go there. */
export function renderResults(list: HTMLElement, found: readonly GraphNode[], current: number, pick: (index: number) => void, signal: AbortSignal): void {
  list.replaceChildren();
  list.hidden = found.length === 0;
  found.slice(0, RESULTS_SHOWN).forEach((node, index) => {
    const item = element("li", index === current ? "bwd-current" : "", resultText(node));
    item.title = resultText(node);
    item.addEventListener("mousedown", (event) => event.preventDefault(), { signal }); // keep the focus in the box
    item.addEventListener("click", () => pick(index), { signal });
    list.appendChild(item);
  });
  if (found.length > RESULTS_SHOWN) list.appendChild(element("li", "bwd-hint", `and ${found.length - RESULTS_SHOWN} more: type more to narrow`));
}
