/** The memory picture as numbers: the timeline's geometry (zoomed to a range of ops, stacked by the
 *  kernel's bands), the node each point selects, bars by module, bytes as heat. */

import { linearScale, nearestIndex, rangeScale, ticksWithin, type Box, type Scale } from "./chart";
import { formatBytes, niceTicks } from "./units";
import { ancestors, parentOf } from "./grouping";
import type { Memory, MemoryBand, ModuleBytes, SweepPoint } from "./types";

export interface Tick {
  at: number; // pixel
  value: number;
}

/** The ops a zoomed timeline shows, `from` to `to` inclusive (steps of the whole run). */
export interface StepRange {
  from: number;
  to: number;
}

/** Fewest ops a zoom shows: below that a drag is a click. */
export const MIN_ZOOM_STEPS = 4;

/** The whole run: every op from the first to the last. */
export function wholeRun(memory: Memory): StepRange {
  return { from: 0, to: Math.max(memory.steps - 1, 1) };
}

/** The range between two steps a drag went across, in either order, inside the run and at least
 *  MIN_ZOOM_STEPS wide (widened around its middle when narrower); null for a run too short to zoom. */
export function zoomRange(memory: Memory, a: number, b: number): StepRange | null {
  const whole = wholeRun(memory);
  if (whole.to - whole.from < MIN_ZOOM_STEPS) return null;
  let from = Math.max(whole.from, Math.round(Math.min(a, b)));
  let to = Math.min(whole.to, Math.round(Math.max(a, b)));
  if (to - from < MIN_ZOOM_STEPS) {
    const middle = (from + to) / 2;
    from = Math.max(whole.from, Math.round(middle - MIN_ZOOM_STEPS / 2));
    to = Math.min(whole.to, from + MIN_ZOOM_STEPS);
    from = Math.max(whole.from, to - MIN_ZOOM_STEPS);
  }
  return { from, to };
}

/** Forward alone or backward alone, as ranges of steps. */
export function phaseRange(memory: Memory, phase: "forward" | "backward"): StepRange {
  const whole = wholeRun(memory);
  return phase === "forward" ? { from: 0, to: Math.max(memory.forward_steps - 1, 0) } : { from: Math.min(memory.forward_steps, whole.to), to: whole.to };
}

export interface TimelineGeometry {
  path: string; // SVG path through every point shown
  indices: number[]; // the timeline points shown (those inside the range), ascending
  xs: number[]; // pixel x of each point shown
  ys: number[];
  x: Scale; // steps to pixels
  y: Scale; // bytes to pixels
  range: StepRange;
  peak: { x: number; y: number } | null; // null when zoomed away from it
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

/** Live bytes (y) against ops run (x), forward then backward, over `range` (the whole run by
 *  default; the byte axis stays the whole run's, so zooming never rescales bytes); sweep points
 *  overlay their own runs, stretched to the run's width since recomputation changes the number of
 *  ops. Lines past the range are for the chart to clip. */
export function timelineGeometry(memory: Memory, box: Box, sweep: readonly SweepPoint[] = [], range: StepRange = wholeRun(memory)): TimelineGeometry {
  const yTickValues = timelineYTicks(memory, sweep);
  const top = yTickValues[yTickValues.length - 1];
  const whole = wholeRun(memory);
  const zoomed = range.from > whole.from || range.to < whole.to;
  const x = rangeScale(range.from, range.to, box.left, box.right);
  const y = linearScale(top, box.bottom, box.top);
  const inside = (step: number) => step >= range.from && step <= range.to;
  const indices = memory.timeline.flatMap((p, i) => (inside(p.step) ? [i] : []));
  const xs = indices.map((i) => x(memory.timeline[i].step));
  const ys = indices.map((i) => y(memory.timeline[i].live_bytes));
  const overlays = sweep.filter((p) => p.timeline.length > 1).map((p) => {
    const stretch = (i: number) => x((i / (p.timeline.length - 1)) * whole.to);
    return { budget: p.budget, path: polyline(p.timeline.map((_, i) => stretch(i)), p.timeline.map(y)), peakY: y(p.peak_activation_bytes) };
  });
  const m = memory.measured;
  const measured = m?.timeline.length
    ? { path: polyline(m.timeline.map((p) => x(p.step)), m.timeline.map((p) => y(p.live_bytes))), peak: { x: x(m.peak.step), y: y(m.peak.live_bytes) } }
    : null;
  const xTickValues = zoomed ? ticksWithin(range.from, range.to, memory.tick_count) : memory.x_ticks;
  return {
    path: polyline(xs, ys),
    indices,
    xs,
    ys,
    x,
    y,
    range,
    peak: inside(memory.peak.step) ? { x: x(memory.peak.step), y: y(memory.peak.live_bytes) } : null,
    yTicks: yTickValues.map((value) => ({ at: y(value), value })),
    xTicks: xTickValues.map((value) => ({ at: x(value), value })),
    backwardX: x(memory.forward_steps - 0.5),
    overlays,
    measured,
  };
}

export interface StackArea {
  key: string | null;
  label: string;
  path: string; // closed SVG path: the band's top along the points, back along its bottom
  peak: number; // the band's highest bytes over the points shown
}

/** The kernel's bands (memory.kinds or memory.modules) piled up in order at the points shown: each
 *  band's area sits on the ones before it, so the top of the pile is the timeline itself. */
export function stackAreas(bands: readonly MemoryBand[], geometry: TimelineGeometry): StackArea[] {
  const below = geometry.indices.map(() => 0);
  return bands.map((band) => {
    const lower = geometry.indices.map((_, k) => geometry.y(below[k]));
    geometry.indices.forEach((i, k) => (below[k] += band.bytes[i] ?? 0));
    const upper = geometry.indices.map((_, k) => geometry.y(below[k]));
    const back = geometry.xs.map((_, k) => geometry.xs.length - 1 - k);
    const path = geometry.xs.length
      ? `${polyline(geometry.xs, upper)}${back.map((k) => `L${geometry.xs[k].toFixed(1)} ${lower[k].toFixed(1)}`).join("")}Z`
      : "";
    return { key: band.key, label: band.label, path, peak: Math.max(0, ...geometry.indices.map((i) => band.bytes[i] ?? 0)) };
  });
}

/** The backward node timeline point `index` selects in graph `graphIndex` (the kernel's memory.selects:
 *  a backward op itself, a forward op the saved value it computes or the backward op torch built for
 *  it); null for none, or for a point of another compiled region. */
export function nodeAt(memory: Memory, index: number, graphIndex: number): string | null {
  const point = memory.timeline[index];
  if (!point || point.graph !== graphIndex) return null;
  return memory.selects?.[index] || null;
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

/** The timeline point (its index in memory.timeline) shown nearest a pixel x; -1 for none. */
export function pointAt(geometry: TimelineGeometry, x: number): number {
  const k = nearestIndex(geometry.xs, x);
  return k < 0 ? -1 : geometry.indices[k];
}

export interface Bar {
  module: string; // the path a click opens
  label: string;
  bytes: number;
  share: number; // of the largest bar, 0..1
}

/** Saved bytes by module, added up into the children of `level` ("" for the top level); what sits
 *  in `level` itself gets a bar of its own. A module holding no saved bytes, or all of them in one
 *  bar, shows its nearest ancestor with two bars or more (a search deep into one module still
 *  compares it with its siblings): `level` in the result says which. */
export function moduleBars(byModule: readonly ModuleBytes[], level: string): { level: string; bars: Bar[] } {
  const depth = level ? ancestors(level).length : 0;
  const totals = new Map<string, number>();
  for (const { module, bytes } of byModule) {
    const path = ancestors(module);
    if (level && path[depth - 1] !== level) continue;
    const key = path[depth] ?? module;
    totals.set(key, (totals.get(key) ?? 0) + bytes);
  }
  if (totals.size < 2 && level) return moduleBars(byModule, parentOf(level));
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
