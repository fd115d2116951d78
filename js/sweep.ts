/** The memory-budget sweep chart: activation bytes (x: saved, and the peak beside it) against recompute
 *  FLOPs (y). Saved is not peak: both are drawn, on one axis, so the gap between them shows. */

import { linearScale, type Box } from "./chart";
import { formatRatio } from "./format";
import { formatBytes, formatFlops, niceTicks } from "./units";
import type { Tick } from "./memory";
import type { SweepPoint } from "./types";

export interface ChartPoint {
  index: number;
  x: number; // saved activation bytes
  peakX: number; // peak activation bytes
  y: number;
  pareto: boolean;
  label: string;
  peakBeaten: boolean; // a larger budget peaks lower (decided in the kernel: peak_above_budget)
}

export interface Chart {
  points: ChartPoint[];
  front: string; // SVG polyline points through the Pareto front, left to right
  xTicks: Tick[]; // bytes
  yTicks: Tick[]; // FLOPs
}

export function chartGeometry(points: readonly SweepPoint[], box: Box): Chart {
  const xTickValues = niceTicks(Math.max(1, ...points.flatMap((p) => [p.saved_activation_bytes, p.peak_activation_bytes])), 3);
  const yTickValues = niceTicks(Math.max(1, ...points.map((p) => p.recompute_flops)), 3);
  const sx = linearScale(xTickValues[xTickValues.length - 1], box.left, box.right);
  const sy = linearScale(yTickValues[yTickValues.length - 1], box.bottom, box.top);
  const placed = points.map((p, index) => ({
    index,
    x: sx(p.saved_activation_bytes),
    peakX: sx(p.peak_activation_bytes),
    y: sy(p.recompute_flops),
    pareto: p.pareto,
    label: `budget ${p.budget}`,
    peakBeaten: p.peak_above_budget !== null,
  }));
  const front = placed
    .filter((p) => p.pareto)
    .sort((a, b) => a.x - b.x)
    .map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`)
    .join(" ");
  return {
    points: placed,
    front,
    xTicks: xTickValues.map((value) => ({ at: sx(value), value })),
    yTicks: yTickValues.map((value) => ({ at: sy(value), value })),
  };
}

/** What the partitions tab says before it holds anything: what a sweep or a comparison would show, and
 *  how to get one where the button cannot run (a static export, a notebook without its kernel). */
export function emptyStudioText(canSweep: boolean): string {
  const what = "A sweep partitions this joint graph with min-cut at memory budgets 0, 0.1, \u2026, 1 and plots saved and peak bytes against recompute FLOPs; bw.compare(model, x, partitioners=[...]) lists several partitioners side by side.";
  return canSweep ? `Nothing compared yet. ${what} Press Sweep budgets to run one (a few seconds per budget).` : `Nothing compared in this view. ${what} Run bw.sweep(...) or bw.compare(...) in a live kernel to fill this tab.`;
}

/** The Pareto points, fewest saved bytes first: the budgets worth choosing between. */
export function paretoPoints(points: readonly SweepPoint[]): { index: number; point: SweepPoint }[] {
  return points
    .map((point, index) => ({ index, point }))
    .filter(({ point }) => point.pareto)
    .sort((a, b) => a.point.saved_activation_bytes - b.point.saved_activation_bytes);
}

/** One point in words: its budget beside torch's own ratio for the plan, saved, recompute and peak. */
export function pointText(p: SweepPoint): string {
  const ratio = p.torch_budget_ratio === null ? "" : ` (torch's ratio ${formatRatio(p.torch_budget_ratio)})`;
  const beaten = p.peak_above_budget === null ? "" : `; budget ${p.peak_above_budget} peaks lower, so this budget's extra recompute buys no peak memory`;
  return `budget ${p.budget}${ratio}: ${formatBytes(p.saved_activation_bytes)} saved, ${formatFlops(p.recompute_flops)} recomputed, peak ${formatBytes(p.peak_activation_bytes)}${beaten}`;
}

/** Under the chart: which budgets a larger budget beats on peak ("" when the peaks rise with the budget). */
export function peakOrderText(points: readonly SweepPoint[]): string {
  const beaten = points.filter((p) => p.peak_above_budget !== null);
  if (!beaten.length) return "";
  const byWinner = new Map<number, number[]>();
  for (const p of beaten) byWinner.set(p.peak_above_budget as number, [...(byWinner.get(p.peak_above_budget as number) ?? []), p.budget]);
  const parts = [...byWinner].map(([winner, losers]) => `budget${losers.length > 1 ? "s" : ""} ${losers.join(", ")} peak${losers.length > 1 ? "" : "s"} above budget ${winner}`);
  return `Peak memory does not fall with the budget here: ${parts.join("; ")} (\u25C7 flagged). Saved is not peak: a lower budget can recompute more and still peak higher.`;
}

/** Whether a sweep is under way: the kernel is busy and its progress (`done/total`) has budgets left. */
export function sweepRunning(progress: string, busy: boolean): boolean {
  const counted = /^(\d+)\/(\d+)$/.exec(progress);
  return busy && counted !== null && Number(counted[1]) < Number(counted[2]);
}
