/** The memory picture as numbers: the timeline's geometry, bars by module, bytes as heat. */

import { linearScale, nearestIndex, niceTicks, type Box } from "./chart";
import { formatBytes } from "./format";
import { ancestors, parentOf } from "./grouping";
import type { Memory, ModuleBytes, SweepPoint } from "./types";

export interface Tick {
  at: number; // pixel
  value: number;
}

export interface TimelineGeometry {
  path: string; // SVG path through every point
  xs: number[]; // pixel x of each timeline point, ascending
  ys: number[];
  peak: { x: number; y: number };
  yTicks: Tick[];
  xTicks: Tick[]; // in ops
  backwardX: number; // where backward begins
  overlays: { budget: number; path: string; peakY: number }[];
  measured: { path: string; peak: { x: number; y: number } } | null; // g.measure()'s curve, when measured
}

/** The kernel's byte ticks (memory.y_ticks), unless an overlaid budget peaks above them: only the
 *  browser holds both the partition shown and the sweep, so then it asks `niceTicks` (the Python
 *  nice_ticks' twin) for ticks over both. */
export function timelineYTicks(memory: Memory, sweep: readonly SweepPoint[]): number[] {
  const highest = Math.max(...sweep.map((p) => p.peak_activation_bytes), 0);
  const top = memory.y_ticks[memory.y_ticks.length - 1] ?? 0;
  const measured = memory.measured?.peak.live_bytes ?? 0;
  return highest > top ? niceTicks(Math.max(memory.peak.live_bytes, measured, highest), memory.tick_count) : memory.y_ticks;
}

/** Live bytes (y) against ops run (x), forward then backward; sweep points overlay their own
 *  runs, stretched to the same width since recomputation changes the number of ops. */
export function timelineGeometry(memory: Memory, box: Box, sweep: readonly SweepPoint[] = []): TimelineGeometry {
  const yTickValues = timelineYTicks(memory, sweep);
  const top = yTickValues[yTickValues.length - 1];
  const x = linearScale(Math.max(memory.steps - 1, 1), box.left, box.right);
  const y = linearScale(top, box.bottom, box.top);
  const xs = memory.timeline.map((p) => x(p.step));
  const ys = memory.timeline.map((p) => y(p.live_bytes));
  const overlays = sweep.filter((p) => p.timeline.length > 1).map((p) => {
    const stretch = linearScale(p.timeline.length - 1, box.left, box.right);
    return { budget: p.budget, path: polyline(p.timeline.map((_, i) => stretch(i)), p.timeline.map(y)), peakY: y(p.peak_activation_bytes) };
  });
  const m = memory.measured;
  const measured = m?.timeline.length
    ? { path: polyline(m.timeline.map((p) => x(p.step)), m.timeline.map((p) => y(p.live_bytes))), peak: { x: x(m.peak.step), y: y(m.peak.live_bytes) } }
    : null;
  return {
    path: polyline(xs, ys),
    xs,
    ys,
    peak: { x: x(memory.peak.step), y: y(memory.peak.live_bytes) },
    yTicks: yTickValues.map((value) => ({ at: y(value), value })),
    xTicks: memory.x_ticks.map((value) => ({ at: x(value), value })),
    backwardX: x(memory.forward_steps - 0.5),
    overlays,
    measured,
  };
}

/** The error in percent, signed: "+0.0%" when the prediction is exact, "+12.5%" when it is above. */
export function formatError(percent: number): string {
  const shown = Math.abs(percent) < 0.05 ? 0 : percent;
  return `${shown < 0 ? "\u2212" : "+"}${Math.abs(shown).toFixed(1)}%`;
}

/** One line on measured against predicted, or null when the extraction was not measured. */
export function measuredText(memory: Memory): string | null {
  const m = memory.measured;
  if (!m) return null;
  const where = m.peak.node ? ` after ${m.peak.node} (${m.peak.phase})` : "";
  return `measured on ${m.device}: peak ${formatBytes(m.peak.live_bytes)}${where} \u00B7 predicted ${formatBytes(m.predicted_peak_bytes)}, off by ${formatError(m.error_percent)}`;
}

function polyline(xs: number[], ys: number[]): string {
  return xs.map((x, i) => `${i ? "L" : "M"}${x.toFixed(1)} ${ys[i].toFixed(1)}`).join("");
}

/** The timeline point under a pixel x. */
export function pointAt(geometry: TimelineGeometry, x: number): number {
  return nearestIndex(geometry.xs, x);
}

export interface Bar {
  module: string; // the path a click opens
  label: string;
  bytes: number;
  share: number; // of the largest bar, 0..1
}

/** Saved bytes by module, added up into the children of `level` ("" for the top level); what sits
 *  in `level` itself gets a bar of its own. A module holding no saved bytes shows its nearest
 *  ancestor that does: `level` in the result says which. */
export function moduleBars(byModule: readonly ModuleBytes[], level: string): { level: string; bars: Bar[] } {
  const depth = level ? ancestors(level).length : 0;
  const totals = new Map<string, number>();
  for (const { module, bytes } of byModule) {
    const path = ancestors(module);
    if (level && path[depth - 1] !== level) continue;
    const key = path[depth] ?? module;
    totals.set(key, (totals.get(key) ?? 0) + bytes);
  }
  if (!totals.size && level) return moduleBars(byModule, parentOf(level));
  const largest = Math.max(1, ...totals.values());
  const bars = [...totals.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([module, bytes]) => ({
      module,
      label: module === level ? (level ? `${level} (itself)` : "(top level)") : module,
      bytes,
      share: bytes / largest,
    }));
  return { level, bars };
}

export const HEAT_LEVELS = 5;

/** 0 for nothing, else 1..HEAT_LEVELS: each level down holds a quarter of the one above. */
export function heatLevel(bytes: number, largest: number): number {
  if (!(bytes > 0) || !(largest > 0)) return 0;
  const quarters = Math.floor(Math.log(largest / bytes) / Math.log(4));
  return Math.max(1, HEAT_LEVELS - Math.max(0, quarters));
}
