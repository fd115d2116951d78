/** The partitioner studio: the sweep button and its progress, the comparison table, the sweep chart
 *  (axes with units, values on hover), its Pareto points, and the advisor's plans (panes/advice.ts). */

import { element, show, svgElement } from "../dom";
import { formatRatio } from "../format";
import { formatBytes, formatFlops } from "../units";
import { setTrait, type Model, type PaneContext, type SweepStarted } from "../model";
import { chartGeometry, emptyStudioText, paretoPoints, peakOrderText, pointText, sweepRunning } from "../sweep";
import type { ComparisonRow, SweepPoint } from "../types";
import { advicePart } from "./advice";
import { chartAxes } from "./axes";
import type { Pane } from "./pane";

const COMPARE_COLUMNS: [string, (r: ComparisonRow) => string][] = [
  ["partition", (r) => String(r.partition)],
  ["saved", (r) => String(r.saved)],
  ["saved bytes", (r) => formatBytes(r.saved_activation_bytes)],
  ["peak", (r) => formatBytes(r.peak_activation_bytes)],
  ["torch's ratio", (r) => formatRatio(r.torch_budget_ratio)],
  ["recomputed", (r) => String(r.recomputed)],
  ["bw nodes", (r) => String(r.backward_nodes)],
  ["bw FLOPs", (r) => formatFlops(r.backward_flops)],
];

const WIDTH = 460;
const HEIGHT = 200;
const BOX = { left: 88, top: 12, right: WIDTH - 28, bottom: HEIGHT - 40 }; // room for the y title beside the widest tick label, and the last x tick's label

function renderComparison(table: HTMLTableElement, model: Model, signal: AbortSignal): void {
  const rows = model.get("comparison_rows") ?? [];
  const current = model.get("compare_index");
  table.replaceChildren();
  show(table, rows.length > 0);
  if (!rows.length) return;
  const head = element("tr");
  for (const [label] of COMPARE_COLUMNS) head.appendChild(element("th", "", label));
  table.appendChild(head);
  rows.forEach((row, i) => {
    const tr = element("tr", `bwd-compare-row${i === current ? " bwd-current" : ""}`);
    tr.dataset.index = String(i);
    for (const [, cell] of COMPARE_COLUMNS) tr.appendChild(element("td", "", cell(row)));
    tr.title = row.recomputed_ops?.length ? `recomputes: ${row.recomputed_ops.join(", ")}` : "recomputes nothing";
    tr.addEventListener("click", () => setTrait(model, "compare_index", i), { signal });
    table.appendChild(tr);
  });
}

function renderChart(host: HTMLElement, readout: HTMLElement, model: Model, signal: AbortSignal): void {
  const points = model.get("sweep_points") ?? [];
  host.replaceChildren();
  show(host, points.length > 0);
  if (!points.length) return;
  const chart = chartGeometry(points, BOX);
  const svg = svgElement("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "bwd-sweep-svg", role: "img" });
  const axes = chartAxes(BOX, { ticks: chart.yTicks, format: formatFlops }, { ticks: chart.xTicks, format: formatBytes }, 13);
  axes.append(
    svgElement("text", { x: String((BOX.left + BOX.right) / 2), y: String(HEIGHT - 8), "text-anchor": "middle", class: "bwd-axis-title" }, "activation bytes: \u25CF saved, \u25C7 peak \u2192"),
    svgElement("text", { x: "12", y: String((BOX.top + BOX.bottom) / 2), "text-anchor": "middle", class: "bwd-axis-title bwd-y-title", transform: `rotate(-90 12 ${(BOX.top + BOX.bottom) / 2})` }, "recompute FLOPs \u2192"),
  );
  svg.append(axes, svgElement("polyline", { points: chart.front, class: "bwd-front" }));
  const current = model.get("sweep_index");
  for (const p of chart.points) {
    const isCurrent = p.index === current;
    const circle = svgElement("circle", {
      cx: p.x.toFixed(1), cy: p.y.toFixed(1), r: isCurrent ? "6" : "4.5", "data-index": String(p.index),
      class: `bwd-sweep-point${p.pareto ? " bwd-pareto" : ""}${isCurrent ? " bwd-current" : ""}`,
    });
    const text = pointText(points[p.index]);
    circle.appendChild(svgElement("title", {}, text));
    circle.addEventListener("mouseenter", () => (readout.textContent = text), { signal });
    circle.addEventListener("click", () => setTrait(model, "sweep_index", p.index), { signal });
    const peak = svgElement("path", {
      d: `M ${p.peakX.toFixed(1)} ${(p.y - 5).toFixed(1)} l 5 5 l -5 5 l -5 -5 z`, "data-index": String(p.index),
      class: `bwd-sweep-peak${p.peakBeaten ? " bwd-peak-beaten" : ""}${isCurrent ? " bwd-current" : ""}`,
    });
    peak.appendChild(svgElement("title", {}, text));
    peak.addEventListener("click", () => setTrait(model, "sweep_index", p.index), { signal });
    const gap = svgElement("line", { x1: p.x.toFixed(1), y1: p.y.toFixed(1), x2: p.peakX.toFixed(1), y2: p.y.toFixed(1), class: "bwd-sweep-gap" });
    svg.append(gap, peak, circle);
  }
  host.appendChild(svg);
  const order = peakOrderText(points);
  if (order) host.appendChild(element("div", "bwd-hint bwd-peak-order", order));
}

function renderPareto(table: HTMLTableElement, model: Model, signal: AbortSignal): void {
  const points = model.get("sweep_points") ?? [];
  const front = paretoPoints(points);
  table.replaceChildren();
  show(table, front.length > 0);
  if (!front.length) return;
  const head = element("tr");
  for (const label of ["Pareto budget", "torch's ratio", "saved", "recompute", "peak"]) head.appendChild(element("th", "", label));
  table.appendChild(head);
  for (const { index, point } of front) {
    const tr = element("tr", `bwd-pareto-row${index === model.get("sweep_index") ? " bwd-current" : ""}`);
    tr.dataset.index = String(index);
    const ratio = formatRatio(point.torch_budget_ratio);
    for (const text of [String(point.budget), ratio, formatBytes(point.saved_activation_bytes), formatFlops(point.recompute_flops), formatBytes(point.peak_activation_bytes)]) {
      tr.appendChild(element("td", "", text));
    }
    tr.addEventListener("click", () => setTrait(model, "sweep_index", index), { signal });
    table.appendChild(tr);
  }
}

export function studioPane({ model, signal, experimental, showTab }: PaneContext): Pane {
  const el = element("div", "bwd-studio");
  const bar = element("div", "bwd-studio-bar");
  const sweepButton = element("button", "bwd-sweep-button", "Sweep budgets");
  sweepButton.title = "min-cut at memory budgets 0, 0.1, \u2026, 1 on this joint graph; each point is drawn as it is done";
  const cancelButton = element("button", "bwd-sweep-cancel", "Cancel");
  cancelButton.title = "stop the sweep before its next budget (the points done stay)";
  const progress = element("span", "bwd-sweep-progress");
  const failure = element("span", "bwd-error");
  bar.append(sweepButton, cancelButton, progress, failure);
  const compare = element("table", "bwd-compare");
  const chart = element("div", "bwd-sweep-chart");
  const readout = element("div", "bwd-readout", "Hover a point for its numbers; click it to show that partition.");
  const pareto = element("table", "bwd-pareto");
  const empty = element("div", "bwd-hint bwd-studio-empty");
  const advice = advicePart({ model, signal, experimental });
  el.append(bar, empty, compare, chart, readout, pareto, advice.el);
  let starting = false; // a _sweep command is in flight
  let cancelling = false; // Cancel was pressed for the sweep running now
  let shownOnce = false; // comparisons and sweeps open on this tab

  function renderBar(): void {
    const canSweep = model.get("can_rerun") && experimental !== undefined;
    const running = sweepRunning(model.get("sweep_progress") || "", Boolean(model.get("busy")));
    if (!running) cancelling = false;
    show(sweepButton, canSweep);
    sweepButton.disabled = starting || model.get("busy");
    show(cancelButton, canSweep && running);
    cancelButton.disabled = cancelling;
    cancelButton.textContent = cancelling ? "Cancelling\u2026" : "Cancel";
    progress.textContent = model.get("sweep_progress") || "";
    show(bar, canSweep || progress.textContent !== "" || failure.textContent !== "");
  }

  /** Ask the kernel to sweep; progress and points come back as the sweep_* traits. */
  async function sweep(): Promise<void> {
    if (!experimental || starting) return;
    starting = true;
    failure.textContent = "";
    renderBar();
    try {
      const [reply] = await experimental.invoke<SweepStarted>("_sweep", { budgets: null }, { signal });
      if (reply?.error) failure.textContent = reply.error;
    } catch (e) {
      if (!signal.aborted) failure.textContent = `sweep failed: ${String(e)}`;
    } finally {
      starting = false;
      if (!signal.aborted) renderBar();
    }
  }

  async function cancel(): Promise<void> {
    if (!experimental || cancelling) return;
    cancelling = true;
    renderBar();
    try {
      await experimental.invoke<{ cancelled: boolean }>("_cancel_sweep", {}, { signal });
    } catch (e) {
      if (!signal.aborted) failure.textContent = `cancel failed: ${String(e)}`;
    }
  }

  sweepButton.addEventListener("click", () => void sweep(), { signal });
  cancelButton.addEventListener("click", () => void cancel(), { signal });

  return {
    el,
    update() {
      renderBar();
      renderComparison(compare, model, signal);
      renderChart(chart, readout, model, signal);
      show(readout, (model.get("sweep_points") ?? []).length > 0);
      renderPareto(pareto, model, signal);
      advice.update();
      const studied = (model.get("comparison_rows") ?? []).length > 0 || (model.get("sweep_points") ?? []).length > 0 || (model.get("advice_rows") ?? []).length > 0;
      empty.textContent = emptyStudioText(Boolean(model.get("can_rerun")) && experimental !== undefined);
      show(empty, !studied);
      if (studied && !shownOnce) showTab("partitions");
      shownOnce ||= studied;
    },
  };
}
