/** The memory-budget sweep chart: saved activation bytes (x) against recompute FLOPs (y). */

import type { SweepPoint } from "./types";

export interface ChartPoint {
  index: number;
  x: number;
  y: number;
  pareto: boolean;
  label: string;
}

export interface Chart {
  points: ChartPoint[];
  front: string; // SVG polyline points through the Pareto front, left to right
}

export function chartGeometry(points: SweepPoint[], width: number, height: number, pad = 28): Chart {
  const maxX = Math.max(1, ...points.map((p) => p.saved_activation_bytes));
  const maxY = Math.max(1, ...points.map((p) => p.recompute_flops));
  const sx = (v: number) => pad + (v / maxX) * (width - 2 * pad);
  const sy = (v: number) => height - pad - (v / maxY) * (height - 2 * pad);
  const placed = points.map((p, index) => ({
    index,
    x: sx(p.saved_activation_bytes),
    y: sy(p.recompute_flops),
    pareto: p.pareto,
    label: `budget ${p.budget}`,
  }));
  const front = placed
    .filter((p) => p.pareto)
    .sort((a, b) => a.x - b.x)
    .map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`)
    .join(" ");
  return { points: placed, front };
}
