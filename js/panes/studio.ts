/** The partitioner studio: the sweep button and its progress, the comparison table, the sweep chart. */

import { element, show, svgElement } from "../dom";
import { formatBytes } from "../format";
import { setTrait, type Model, type PaneContext, type SweepReply } from "../model";
import { chartGeometry } from "../sweep";
import type { ComparisonRow } from "../types";
import type { Pane } from "./pane";

const COMPARE_COLUMNS: [string, (r: ComparisonRow) => string][] = [
  ["partition", (r) => String(r.partition)],
  ["saved", (r) => String(r.saved)],
  ["activations", (r) => formatBytes(r.saved_activation_bytes)],
  ["recomputed", (r) => String(r.recomputed)],
  ["bw nodes", (r) => String(r.backward_nodes)],
  ["bw GFLOP", (r) => (r.backward_flops / 1e9).toFixed(3)],
];

const CHART_WIDTH = 300;
const CHART_HEIGHT = 150;

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

function renderChart(host: HTMLElement, model: Model, signal: AbortSignal): void {
  const points = model.get("sweep_points") ?? [];
  host.replaceChildren();
  show(host, points.length > 0);
  if (!points.length) return;
  const [width, height] = [CHART_WIDTH, CHART_HEIGHT];
  const chart = chartGeometry(points, width, height);
  const svg = svgElement("svg", { viewBox: `0 0 ${width} ${height}`, class: "bwd-sweep-svg" });
  svg.append(
    svgElement("path", { d: `M28 ${height - 28} H${width - 28} M28 ${height - 28} V28`, class: "bwd-axis" }),
    svgElement("polyline", { points: chart.front, class: "bwd-front" }),
    svgElement("text", { x: String(width / 2 - 60), y: String(height - 8) }, "saved activation bytes \u2192"),
    svgElement("text", { x: "4", y: "18" }, "recompute FLOPs \u2191"),
  );
  const current = model.get("sweep_index");
  for (const p of chart.points) {
    const isCurrent = p.index === current;
    const circle = svgElement("circle", {
      cx: p.x.toFixed(1), cy: p.y.toFixed(1), r: isCurrent ? "6" : "4.5", "data-index": String(p.index),
      class: `bwd-sweep-point${p.pareto ? " bwd-pareto" : ""}${isCurrent ? " bwd-current" : ""}`,
    });
    const point = points[p.index];
    circle.appendChild(svgElement("title", {}, `${p.label}: ${formatBytes(point.saved_activation_bytes)} saved, ${point.recompute_flops} recompute FLOPs`));
    circle.addEventListener("click", () => setTrait(model, "sweep_index", p.index), { signal });
    svg.appendChild(circle);
  }
  host.appendChild(svg);
}

export function studioPane({ model, signal, experimental }: PaneContext): Pane {
  const el = element("div", "bwd-studio");
  const bar = element("div", "bwd-studio-bar");
  const sweepButton = element("button", "bwd-sweep-button", "Sweep budgets");
  sweepButton.title = "min-cut at memory budgets 0, 0.1, \u2026, 1 on this joint graph";
  const progress = element("span", "bwd-sweep-progress");
  const failure = element("span", "bwd-error");
  bar.append(sweepButton, progress, failure);
  const compare = element("table", "bwd-compare");
  const chart = element("div", "bwd-sweep-chart");
  el.append(bar, compare, chart);
  let sweeping = false; // a _sweep command is in flight

  function renderBar(): void {
    const canSweep = model.get("can_rerun") && experimental !== undefined;
    show(sweepButton, canSweep);
    sweepButton.disabled = sweeping || model.get("busy");
    progress.textContent = model.get("sweep_progress") || "";
    show(bar, canSweep || progress.textContent !== "" || failure.textContent !== "");
  }

  /** Ask the kernel to sweep; progress and points come back as the sweep_* traits. */
  async function sweep(): Promise<void> {
    if (!experimental || sweeping) return;
    sweeping = true;
    failure.textContent = "";
    renderBar();
    try {
      await experimental.invoke<SweepReply>("_sweep", { budgets: null }, { signal });
    } catch (e) {
      if (!signal.aborted) failure.textContent = `sweep failed: ${String(e)}`;
    } finally {
      sweeping = false;
      if (!signal.aborted) renderBar();
    }
  }

  sweepButton.addEventListener("click", () => void sweep(), { signal });

  return {
    el,
    update() {
      renderBar();
      renderComparison(compare, model, signal);
      renderChart(chart, model, signal);
    },
  };
}
