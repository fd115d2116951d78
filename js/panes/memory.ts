/** The memory pane: live activation memory over the run (peak marked, budgets overlaid, and the
 *  measured curve over the predicted one once `g.measure()` ran) and saved bytes by module. A point
 *  selects its node; a bar opens its module in the graph. */

import { formatFlops } from "../chart";
import { element, svgElement } from "../dom";
import { formatBytes } from "../format";
import { measuredText, moduleBars, pointAt, timelineGeometry, type TimelineGeometry } from "../memory";
import type { PaneContext } from "../model";
import type { GraphData, Memory, MemoryPoint } from "../types";
import { chartAxes } from "./axes";
import type { Pane } from "./pane";

const WIDTH = 480;
const HEIGHT = 190;
const BOX = { left: 62, top: 14, right: WIDTH - 12, bottom: HEIGHT - 36 };

/** The backward node a timeline point stands for: its own op in backward, or the saved value it
 *  computed in forward; null for a forward op the backward graph does not hold. */
export function nodeOfPoint(point: MemoryPoint, data: GraphData): string | null {
  if (point.graph !== data.graph_index) return null;
  const node = data.nodes.find((n) => n.id === point.node);
  if (!node) return null;
  return point.phase === "backward" || node.kind === "saved" ? node.id : null;
}

function pointText(point: MemoryPoint, data: GraphData): string {
  const where = nodeOfPoint(point, data) ? "" : " (a forward op; not in the backward graph)";
  return `after ${point.node} (${point.phase}, op ${point.step + 1} of ${data.run.memory.steps}): ${formatBytes(point.live_bytes)} live${where}`;
}

/** `g.measure()`'s curve, dashed over the predicted line: where they agree, both show. */
function measuredLine(path: string, memory: Memory): SVGPathElement {
  const style = "stroke: var(--bwd-text-warn); stroke-width: 1.5; stroke-dasharray: 4 3; fill: none";
  const line = svgElement("path", { d: path, class: "bwd-measured", style });
  line.appendChild(svgElement("title", {}, measuredText(memory) ?? "measured"));
  return line;
}

/** Measured peak against predicted, with the error in percent; hidden until the extraction is measured. */
function showMeasured(el: HTMLElement, memory: Memory): void {
  const line = measuredText(memory);
  el.textContent = line ? `${line} (dashed line: measured; solid: predicted)` : "";
  el.hidden = !line;
}

export function memoryPane({ model, signal, select, openModule }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-memory");
  const summary = element("div", "bwd-memory-summary");
  const measured = element("div", "bwd-memory-measured");
  const chart = svgElement("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "bwd-timeline", role: "img" });
  const readout = element("div", "bwd-readout");
  const barsTitle = element("div", "bwd-bars-title");
  const bars = element("div", "bwd-bars");
  el.append(summary, measured, chart, readout, barsTitle, bars);
  let data: GraphData | null = null;
  let geometry: TimelineGeometry | null = null;
  let level = "";

  function renderChart(): void {
    chart.replaceChildren();
    if (!data?.run.memory.timeline.length) return;
    const memory = data.run.memory;
    const sweep = model.get("sweep_points") ?? [];
    const g = (geometry = timelineGeometry(memory, BOX, sweep));
    const axes = chartAxes(BOX, { ticks: g.yTicks, format: formatBytes }, { ticks: g.xTicks, format: String }, 12);
    axes.append(
      svgElement("text", { x: String((BOX.left + BOX.right) / 2), y: String(HEIGHT - 6), "text-anchor": "middle" }, "ops run, forward then backward \u2192"),
      svgElement("line", { x1: String(g.backwardX), x2: String(g.backwardX), y1: String(BOX.top), y2: String(BOX.bottom), class: "bwd-phase" }),
      svgElement("text", { x: String(g.backwardX - 3), y: String(BOX.bottom - 4), "text-anchor": "end" }, "forward"),
      svgElement("text", { x: String(g.backwardX + 3), y: String(BOX.bottom - 4) }, "backward"),
    );
    chart.appendChild(axes);
    for (const overlay of g.overlays) {
      const path = svgElement("path", { d: overlay.path, class: "bwd-overlay" });
      path.appendChild(svgElement("title", {}, `budget ${overlay.budget}`));
      chart.appendChild(path);
    }
    chart.appendChild(svgElement("path", { d: g.path, class: "bwd-live" }));
    if (g.measured) chart.appendChild(measuredLine(g.measured.path, memory));
    chart.appendChild(svgElement("line", { class: "bwd-cursor-line", y1: String(BOX.top), y2: String(BOX.bottom), x1: "-10", x2: "-10" }));
    const peak = svgElement("circle", { cx: g.peak.x.toFixed(1), cy: g.peak.y.toFixed(1), r: "5", class: "bwd-peak" });
    peak.appendChild(svgElement("title", {}, `peak: ${formatBytes(memory.peak.live_bytes)} after ${memory.peak.node}`));
    peak.addEventListener("click", (event) => {
      event.stopPropagation();
      pick(memory.timeline.findIndex((p) => p.step === memory.peak.step));
    }, on);
    const anchor = g.peak.x > (BOX.left + BOX.right) / 2 ? "end" : "start";
    const label = svgElement("text", { x: String(g.peak.x + (anchor === "end" ? -8 : 8)), y: String(Math.max(g.peak.y, BOX.top + 20)), "text-anchor": anchor, class: "bwd-peak-label" }, `peak ${formatBytes(memory.peak.live_bytes)}`);
    chart.append(peak, label);
    mark(model.get("selected"));
  }

  function renderText(): void {
    if (!data) return;
    const { peak } = data.run.memory;
    const where = peak.module ? ` in ${peak.module}` : "";
    summary.textContent = `whole run: peak ${formatBytes(peak.live_bytes)} after ${peak.node}${where} (${peak.phase}) \u00B7 saved activations ${formatBytes(data.run.saved_activation_bytes)}`;
    showMeasured(measured, data.run.memory);
    const sweep = model.get("sweep_points") ?? [];
    readout.textContent = sweep.length
      ? `budgets overlaid (thin lines): ${sweep.map((p) => `${p.budget} \u2192 peak ${formatBytes(p.peak_activation_bytes)}, ${formatFlops(p.recompute_flops)} recomputed`).join("; ")}`
      : "Click a point to select its op; the graph and code follow.";
  }

  function renderBars(): void {
    const { level: shown, bars: rows } = moduleBars(data?.run.memory.by_module ?? [], level);
    barsTitle.textContent = rows.length ? `saved activations of the whole run by module${shown ? ` in ${shown}` : ""} (click to open)` : "no saved activations";
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

  /** Select the node of timeline point `index`, or say why there is none. */
  function pick(index: number): void {
    const point = data?.run.memory.timeline[index];
    if (!data || !point) return;
    readout.textContent = pointText(point, data);
    const id = nodeOfPoint(point, data);
    if (id) select(id);
  }

  /** A vertical line at the selected node's op, when the timeline shows it. */
  function mark(id: string): void {
    const line = chart.querySelector(".bwd-cursor-line");
    const timeline = data?.run.memory.timeline ?? [];
    const point = timeline.find((p) => p.node === id && p.graph === data?.graph_index);
    const x = point && geometry ? geometry.xs[timeline.indexOf(point)] : -10;
    line?.setAttribute("x1", String(x));
    line?.setAttribute("x2", String(x));
  }

  const xOf = (event: MouseEvent) => {
    const rect = chart.getBoundingClientRect();
    return ((event.clientX - rect.left) * WIDTH) / (rect.width || 1);
  };
  chart.addEventListener("click", (event) => geometry && pick(pointAt(geometry, xOf(event))), on);
  chart.addEventListener("mousemove", (event) => {
    const point = geometry && data ? data.run.memory.timeline[pointAt(geometry, xOf(event))] : undefined;
    if (point && data) readout.textContent = pointText(point, data);
  }, on);

  return {
    el,
    update(next) {
      data = next;
      renderText();
      renderChart();
      renderBars();
    },
    highlight: (id) => mark(id),
    focus(path) {
      level = path;
      renderBars();
    },
  };
}
