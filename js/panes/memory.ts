/** The memory pane: live activation memory over the run at the pane's full width, stacked by the
 *  kernel's kind of each storage or by module, zoomed to a range of ops (drag across it, or the
 *  forward / backward buttons), peak marked, budgets overlaid, and the measured curve over the
 *  predicted one once `g.measure()` ran; saved bytes by module below. Every point selects its node,
 *  forward ones included; a bar or a module band opens its module in the graph. */

import type { Box } from "../chart";
import { element, svgElement } from "../dom";
import { formatBytes, formatFlops } from "../units";
import {
  measuredText,
  moduleBars,
  nodeAt,
  phaseRange,
  pointAt,
  stackAreas,
  timelineGeometry,
  wholeRun,
  zoomRange,
  type StepRange,
  type TimelineGeometry,
} from "../memory";
import { setTrait, type PaneContext } from "../model";
import type { GraphData, Memory, MemoryBand, MemoryPoint, ModuleBytes, SweepPoint } from "../types";
import { chartAxes } from "./axes";
import type { Pane } from "./pane";

const HEIGHT = 230;
const MIN_WIDTH = 320;
const MARGIN = { left: 62, top: 14, right: 14, bottom: 36 };
/** A press that moves less than this (pixels) is a click, not a drag to zoom. */
const DRAG_PX = 5;

/** How the area under the line is split: not at all, by the kernel's kind of storage, by module. */
export type Stacking = "total" | "kind" | "module";
let panes = 0; // each pane's clip path gets an id of its own: a notebook holds many widgets

const STACKINGS: [Stacking, string][] = [["total", "total"], ["kind", "by kind"], ["module", "by module"]];

/** Kinds in the colours the graph gives them (saved amber, gradients green); temporaries teal. */
const KIND_COLOURS: Record<string, string> = { saved: "var(--bwd-warn)", gradient: "var(--bwd-good)", temporary: "var(--bwd-info)" };
/** Module bands: ten distinct hues that read on light and dark backgrounds; the rest band grey. */
const MODULE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"];

function bandColour(stacking: Stacking, band: MemoryBand, index: number): string {
  if (stacking === "kind") return KIND_COLOURS[band.key ?? ""] ?? "var(--bwd-line)";
  return band.key === null ? "var(--bwd-line)" : MODULE_COLOURS[index % MODULE_COLOURS.length];
}

/** The backward node a timeline point stands for (the kernel's memory.selects), or null for none or
 *  for a point of another compiled region. */
export function nodeOfPoint(point: MemoryPoint, data: GraphData): string | null {
  const memory = data.run.memory;
  return nodeAt(memory, memory.timeline.findIndex((p) => p.step === point.step), data.graph_index);
}

function pointText(index: number, data: GraphData): string {
  const memory = data.run.memory;
  const point = memory.timeline[index];
  const id = nodeAt(memory, index, data.graph_index);
  const where = point.graph !== data.graph_index
    ? ` (compiled region ${point.graph + 1}: a click shows it)`
    : !id ? " (a forward op: nothing in the backward graph stands for it)" : id !== point.node ? ` \u2192 selects ${id}` : "";
  return `after ${point.node} (${point.phase}, op ${point.step + 1} of ${memory.steps}): ${formatBytes(point.live_bytes)} live${where}`;
}

/** `g.measure()`'s curve, dashed over the predicted line: where they agree, both show. */
function measuredLine(path: string, memory: Memory, clip: string): SVGPathElement {
  const style = "stroke: var(--bwd-text-warn); stroke-width: 1.5; stroke-dasharray: 4 3; fill: none";
  const line = svgElement("path", { d: path, class: "bwd-measured", style, "clip-path": `url(#${clip})` });
  line.appendChild(svgElement("title", {}, measuredText(memory) ?? "measured"));
  return line;
}

/** The allocator's peak reserved, apart from the peak allocated the measured line shows: a memory
 *  snapshot's (`region.attach_snapshot`) where it records segments; "" where nothing says. */
export function reservedText(memory: Memory): string {
  const reserved = memory.measured?.reserved_peak_bytes;
  return reserved == null ? "" : ` \u00B7 peak reserved ${formatBytes(reserved)}`;
}

/** Measured peak against predicted, with the error in percent; hidden until the extraction is measured. */
function showMeasured(el: HTMLElement, memory: Memory): void {
  const line = measuredText(memory);
  el.textContent = line ? `${line}${reservedText(memory)} (dashed line: measured; solid: predicted)` : "";
  el.hidden = !line;
}

function rangeText(range: StepRange, memory: Memory): string {
  const whole = wholeRun(memory);
  return range.from === whole.from && range.to === whole.to
    ? `all ${memory.steps} ops (drag across the chart to zoom)`
    : `ops ${range.from + 1}\u2013${range.to + 1} of ${memory.steps}`;
}

/** The kernel's bands piled under the line, with a legend; a module's entry opens it in the graph. */
function drawStacks(chart: SVGSVGElement, legend: HTMLElement, memory: Memory, g: TimelineGeometry, stacking: Stacking, openModule: (path: string) => void, on: AddEventListenerOptions): void {
  const bands = stacking === "kind" ? memory.kinds ?? [] : stacking === "module" ? memory.modules ?? [] : [];
  const areas = stackAreas(bands, g);
  areas.forEach((area, index) => {
    const colour = bandColour(stacking, bands[index], index);
    const path = svgElement("path", { d: area.path, class: "bwd-stack", style: `fill: ${colour}; fill-opacity: 0.45; stroke: none`, "data-key": area.key ?? "" });
    path.appendChild(svgElement("title", {}, `${area.label}: up to ${formatBytes(area.peak)} in view`));
    chart.appendChild(path);
    const entry = element(stacking === "module" && area.key !== null ? "button" : "span", "bwd-legend-entry");
    entry.style.cssText = "display: inline-flex; align-items: center; gap: 4px";
    const swatch = element("span", "bwd-legend-swatch");
    swatch.style.cssText = `display: inline-block; width: 10px; height: 10px; border-radius: 2px; background: ${colour}; opacity: 0.8`;
    entry.append(swatch, element("span", "bwd-legend-label", `${area.label} ${formatBytes(area.peak)}`));
    entry.title = `${area.label}: up to ${formatBytes(area.peak)} live in the ops shown${entry instanceof HTMLButtonElement ? "; click to open it in the graph" : ""}`;
    if (entry instanceof HTMLButtonElement && area.key !== null) {
      const key = area.key;
      entry.dataset.module = key;
      entry.addEventListener("click", () => openModule(key), on);
    }
    legend.appendChild(entry);
  });
  if (stacking === "module" && bands.length) legend.prepend(element("span", "bwd-legend-note", `by the module allocating each storage (depth ${memory.module_depth}):`));
}

/** Saved bytes by module as bars (a click opens the module), with a way back to the top level. */
function drawBars(barsTitle: HTMLElement, bars: HTMLElement, byModule: readonly ModuleBytes[], level: string, openModule: (path: string) => void, toTop: () => void, on: AddEventListenerOptions): void {
  const { level: shown, bars: rows } = moduleBars(byModule, level);
  barsTitle.replaceChildren(rows.length ? `saved activations of the whole run by module${shown ? ` in ${shown}` : ""} (click to open)` : "no saved activations");
  if (shown) {
    const up = element("button", "bwd-bars-up", "whole model");
    up.title = "show the top level's modules";
    up.style.marginLeft = "8px";
    up.addEventListener("click", toTop, on);
    barsTitle.appendChild(up);
  }
  bars.replaceChildren(...rows.map((row) => {
    const button = element("button", "bwd-bar");
    button.dataset.module = row.module;
    const fill = element("span", "bwd-bar-fill");
    fill.style.width = `${(row.share * 100).toFixed(1)}%`;
    button.append(element("span", "bwd-bar-label", row.label), element("span", "bwd-bar-track"), element("span", "bwd-bar-bytes", formatBytes(row.bytes)));
    button.children[1].appendChild(fill);
    button.title = `${row.label}: ${formatBytes(row.bytes)} of saved activations; click to open it in the graph`;
    button.addEventListener("click", () => openModule(row.module), on);
    return button;
  }));
}

/** A press and release on the chart: a click where it barely moved, else a zoom to the stretch it
 *  went across (shown as a band while dragging); a double click shows the whole run again. */
function dragToZoom(chart: SVGSVGElement, xOf: (event: MouseEvent) => number, on: { hover(x: number): void; click(x: number): void; zoom(from: number, to: number): void; reset(): void }, options: AddEventListenerOptions): void {
  let dragFrom: number | null = null;
  const band = () => chart.querySelector(".bwd-zoom-band");
  chart.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    dragFrom = xOf(event);
    chart.setPointerCapture?.(event.pointerId);
  }, options);
  chart.addEventListener("pointermove", (event) => {
    const x = xOf(event);
    if (dragFrom !== null && Math.abs(x - dragFrom) >= DRAG_PX) {
      band()?.setAttribute("x", String(Math.min(x, dragFrom)));
      band()?.setAttribute("width", String(Math.abs(x - dragFrom)));
    } else on.hover(x);
  }, options);
  chart.addEventListener("pointerup", (event) => {
    if (dragFrom === null) return;
    const from = dragFrom;
    const x = xOf(event);
    dragFrom = null;
    band()?.setAttribute("width", "0");
    if (Math.abs(x - from) < DRAG_PX) on.click(x);
    else on.zoom(from, x);
  }, options);
  chart.addEventListener("dblclick", () => on.reset(), options);
}

/** A toggle button shown pressed, or not. */
function press(button: HTMLButtonElement, pressed: boolean): void {
  button.setAttribute("aria-pressed", String(pressed));
  button.style.fontWeight = pressed ? "600" : "";
  button.style.borderColor = pressed ? "var(--bwd-brand)" : "";
}

/** The stacking buttons, the zoom buttons and the range shown. */
function memoryControls(on: { stack(name: Stacking): void; zoom(label: "whole run" | "forward" | "backward"): void }, options: AddEventListenerOptions) {
  const controls = element("div", "bwd-memory-controls");
  controls.style.cssText = "display: flex; flex-wrap: wrap; gap: 4px 10px; align-items: center; padding: 2px 0";
  const stackButtons = STACKINGS.map(([name, label]) => {
    const button = element("button", "bwd-stack-by", label);
    button.dataset.stack = name;
    button.addEventListener("click", () => on.stack(name), options);
    return button;
  });
  const zoomButtons = (["whole run", "forward", "backward"] as const).map((label) => {
    const button = element("button", "bwd-zoom", label);
    button.dataset.zoom = label;
    button.addEventListener("click", () => on.zoom(label), options);
    return button;
  });
  const rangeLabel = element("span", "bwd-zoom-range");
  controls.append(element("span", "", "stack:"), ...stackButtons, element("span", "", "zoom:"), ...zoomButtons, rangeLabel);
  return { controls, stackButtons, rangeLabel };
}

/** The clip path, the axes and the line where backward begins (when it is in the range). */
function drawFrame(chart: SVGSVGElement, b: Box, g: TimelineGeometry, clipId: string): void {
  const clip = svgElement("clipPath", { id: clipId });
  clip.appendChild(svgElement("rect", { x: String(b.left), y: String(b.top - 2), width: String(b.right - b.left), height: String(b.bottom - b.top + 4) }));
  chart.appendChild(svgElement("defs", {})).appendChild(clip);
  const axes = chartAxes(b, { ticks: g.yTicks, format: formatBytes }, { ticks: g.xTicks, format: String }, 12);
  axes.appendChild(svgElement("text", { x: String((b.left + b.right) / 2), y: String(HEIGHT - 6), "text-anchor": "middle" }, "ops run, forward then backward \u2192"));
  if (g.backwardX >= b.left && g.backwardX <= b.right) {
    axes.append(
      svgElement("line", { x1: String(g.backwardX), x2: String(g.backwardX), y1: String(b.top), y2: String(b.bottom), class: "bwd-phase" }),
      svgElement("text", { x: String(g.backwardX - 3), y: String(b.bottom - 4), "text-anchor": "end" }, "forward"),
      svgElement("text", { x: String(g.backwardX + 3), y: String(b.bottom - 4) }, "backward"),
    );
  }
  chart.appendChild(axes);
}

/** Over the lines: the selection's cursor lines, the clicked point, the zoom band, the peak (a click on it picks it). */
function drawMarks(chart: SVGSVGElement, b: Box, g: TimelineGeometry, memory: Memory, pickPeak: () => void, on: AddEventListenerOptions): void {
  chart.appendChild(svgElement("g", { class: "bwd-cursor" }));
  chart.appendChild(svgElement("circle", { class: "bwd-picked", r: "4", cx: "-10", cy: "-10", style: "fill: none; stroke: var(--bwd-fg); stroke-width: 1.5" }));
  chart.appendChild(svgElement("rect", { class: "bwd-zoom-band", x: "0", y: String(b.top), width: "0", height: String(b.bottom - b.top), style: "fill: var(--bwd-brand); opacity: 0.15" }));
  if (!g.peak) return;
  const peak = svgElement("circle", { cx: g.peak.x.toFixed(1), cy: g.peak.y.toFixed(1), r: "5", class: "bwd-peak" });
  peak.appendChild(svgElement("title", {}, `peak: ${formatBytes(memory.peak.live_bytes)} after ${memory.peak.node}`));
  peak.addEventListener("pointerdown", (event) => event.stopPropagation(), on); // a click here is no drag
  peak.addEventListener("click", (event) => {
    event.stopPropagation();
    pickPeak();
  }, on);
  const anchor = g.peak.x > (b.left + b.right) / 2 ? "end" : "start";
  const label = svgElement("text", { x: String(g.peak.x + (anchor === "end" ? -8 : 8)), y: String(Math.max(g.peak.y, b.top + 20)), "text-anchor": anchor, class: "bwd-peak-label" }, `peak ${formatBytes(memory.peak.live_bytes)}`);
  chart.append(peak, label);
}

/** Calls `resized` with the pane's inner width (its padding off) when that changes, never while it is
 *  hidden: on first show and on every resize; the returned check runs it now (the tab calls highlight
 *  as it shows, so a chart is there at once). */
function observeWidth(el: HTMLElement, signal: AbortSignal, resized: (width: number) => void): () => void {
  let width = 0;
  const fit = () => {
    const next = Math.max(MIN_WIDTH, Math.floor(el.clientWidth - 16));
    if (el.clientWidth && next !== width) resized((width = next));
  };
  const observer = new ResizeObserver(fit);
  observer.observe(el);
  signal.addEventListener("abort", () => observer.disconnect(), { once: true });
  return fit;
}

function chartElements() {
  const chart = svgElement("svg", { class: "bwd-timeline", role: "img", height: String(HEIGHT) });
  chart.style.maxWidth = "none"; // the pane's whole width, drawn at its size: text stays 10 px at any width
  chart.style.touchAction = "none";
  const legend = element("div", "bwd-memory-legend");
  legend.style.cssText = "display: flex; flex-wrap: wrap; gap: 2px 12px; padding: 2px 0";
  return { chart, legend, readout: element("div", "bwd-readout"), barsTitle: element("div", "bwd-bars-title"), bars: element("div", "bwd-bars") };
}

/** The budgets overlaid, the predicted line, and the measured one over it. */
function drawLines(chart: SVGSVGElement, g: TimelineGeometry, memory: Memory, clipId: string): void {
  for (const overlay of g.overlays) {
    const path = svgElement("path", { d: overlay.path, class: "bwd-overlay", "clip-path": `url(#${clipId})` });
    path.appendChild(svgElement("title", {}, `budget ${overlay.budget}`));
    chart.appendChild(path);
  }
  chart.appendChild(svgElement("path", { d: g.path, class: "bwd-live" }));
  if (g.measured) chart.appendChild(measuredLine(g.measured.path, memory, clipId));
}

/** The summary line, the measured line and the readout's first words. */
function describeRun(summary: HTMLElement, measured: HTMLElement, readout: HTMLElement, data: GraphData, sweep: readonly SweepPoint[]): void {
  const { peak } = data.run.memory;
  const where = peak.module ? ` in ${peak.module}` : "";
  summary.textContent = `whole run: peak ${formatBytes(peak.live_bytes)} after ${peak.node}${where} (${peak.phase}) \u00B7 saved activations ${formatBytes(data.run.saved_activation_bytes)}`;
  showMeasured(measured, data.run.memory);
  readout.textContent = sweep.length
    ? `budgets overlaid (thin lines): ${sweep.map((p) => `${p.budget} \u2192 peak ${formatBytes(p.peak_activation_bytes)}, ${formatFlops(p.recompute_flops)} recomputed`).join("; ")}`
    : "Click a point to select its op, forward or backward; the graph and code follow. Drag across the chart to zoom.";
}

/** A ring on the point last clicked, when it is in view. */
function markPoint(chart: SVGSVGElement, geometry: TimelineGeometry | null, picked: number): void {
  const circle = chart.querySelector(".bwd-picked");
  const k = geometry ? geometry.indices.indexOf(picked) : -1;
  circle?.setAttribute("cx", k < 0 || !geometry ? "-10" : geometry.xs[k].toFixed(1));
  circle?.setAttribute("cy", k < 0 || !geometry ? "-10" : geometry.ys[k].toFixed(1));
}

/** A vertical line at each op of the selected node in view (a saved value's forward op, a backward op). */
function markSelected(chart: SVGSVGElement, b: Box, geometry: TimelineGeometry | null, data: GraphData, id: string): void {
  const cursor = chart.querySelector(".bwd-cursor");
  if (!cursor || !geometry) return;
  const timeline = data.run.memory.timeline;
  const lines = geometry.indices.flatMap((i, k) => (id && timeline[i].node === id && timeline[i].graph === data.graph_index ? [geometry.xs[k]] : []));
  cursor.replaceChildren(...lines.map((x) => svgElement("line", { class: "bwd-cursor-line", x1: String(x), x2: String(x), y1: String(b.top), y2: String(b.bottom) })));
}

export function memoryPane({ model, signal, select, openModule }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-memory");
  const [summary, measured] = [element("div", "bwd-memory-summary"), element("div", "bwd-memory-measured")];
  const { controls, stackButtons, rangeLabel } = memoryControls({
    stack: (name) => ((stacking = name), renderChart()),
    zoom: (label) => show(data && (label === "whole run" ? wholeRun(data.run.memory) : phaseRange(data.run.memory, label))),
  }, on);
  const { chart, legend, readout, barsTitle, bars } = chartElements();
  el.append(summary, measured, controls, chart, legend, readout, barsTitle, bars);
  let data: GraphData | null = null;
  let geometry: TimelineGeometry | null = null;
  let level = "";
  let stacking: Stacking = "kind";
  let range: StepRange | null = null;
  let width = 0;
  let picked = -1; // the timeline point last clicked
  let pending: { graph: number; id: string } | null = null; // a point of another region: selected once it shows
  const clipId = `bwd-memory-clip-${++panes}`;

  const show = (next: StepRange | null) => next && ((range = next), renderChart()); // zoom to it
  const box = () => ({ left: MARGIN.left, top: MARGIN.top, right: width - MARGIN.right, bottom: HEIGHT - MARGIN.bottom });

  function renderChart(): void {
    chart.replaceChildren();
    legend.replaceChildren();
    stackButtons.forEach((button) => press(button, button.dataset.stack === stacking));
    if (!data?.run.memory.timeline.length || !width) return;
    const memory = data.run.memory;
    const b = box();
    [["viewBox", `0 0 ${width} ${HEIGHT}`], ["width", String(width)]].forEach(([name, value]) => chart.setAttribute(name, value));
    const sweep = model.get("sweep_points") ?? [];
    const shown = (range ??= wholeRun(memory));
    const g = (geometry = timelineGeometry(memory, b, sweep, shown));
    rangeLabel.textContent = rangeText(shown, memory);
    drawFrame(chart, b, g, clipId);
    drawStacks(chart, legend, memory, g, stacking, openModule, on);
    drawLines(chart, g, memory, clipId);
    drawMarks(chart, b, g, memory, () => pick(memory.timeline.findIndex((p) => p.step === memory.peak.step)), on);
    markPicked();
    mark(model.get("selected"));
  }

  function renderBars(): void {
    drawBars(barsTitle, bars, data?.run.memory.by_module ?? [], level, openModule, () => {
      level = "";
      renderBars();
    }, on);
  }

  /** Select the node of timeline point `index` (in its own compiled region), or say why there is none. */
  function pick(index: number): void {
    const point = data?.run.memory.timeline[index];
    if (!data || !point) return;
    picked = index;
    markPicked();
    readout.textContent = pointText(index, data);
    if (point.graph !== data.graph_index) {
      const id = data.run.memory.selects?.[index];
      if (id) pending = { graph: point.graph, id };
      setTrait(model, "graph_index", point.graph);
      return;
    }
    const id = nodeAt(data.run.memory, index, data.graph_index);
    if (id) select(id);
  }

  const markPicked = () => markPoint(chart, geometry, picked);
  const mark = (id: string) => data && markSelected(chart, box(), geometry, data, id);

  const xOf = (event: MouseEvent) => {
    const rect = chart.getBoundingClientRect();
    return ((event.clientX - rect.left) * width) / (rect.width || 1);
  };
  dragToZoom(chart, xOf, {
    hover(x) {
      const index = geometry && data ? pointAt(geometry, x) : -1;
      if (index >= 0 && data) readout.textContent = pointText(index, data);
    },
    click: (x) => geometry && pick(pointAt(geometry, x)),
    zoom: (from, to) => show(geometry && data && zoomRange(data.run.memory, geometry.x.invert(from), geometry.x.invert(to))),
    reset: () => show(data && wholeRun(data.run.memory)),
  }, on);

  const fit = observeWidth(el, signal, (next) => {
    width = next;
    renderChart();
  });

  return {
    el,
    update(next) {
      const sameRun = data?.run.memory.steps === next.run.memory.steps && data?.model === next.model;
      data = next;
      if (!sameRun) {
        range = null;
        picked = -1;
      }
      describeRun(summary, measured, readout, next, model.get("sweep_points") ?? []);
      if (picked >= 0) readout.textContent = pointText(picked, next); // the point clicked stays read out (a region switch redraws)
      renderChart();
      renderBars();
      if (pending && next.graph_index === pending.graph) {
        const id = pending.id;
        pending = null;
        select(id);
      }
    },
    highlight(id) {
      fit();
      mark(id);
    },
    focus(path) {
      level = path;
      renderBars();
    },
  };
}
