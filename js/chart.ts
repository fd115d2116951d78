/** Axes for the small charts (memory timeline, budget sweep): linear scales and round ticks (js/units.ts
 *  `niceTicks`). */

import { niceTicks } from "./units";

export interface Box {
  left: number;
  top: number;
  right: number;
  bottom: number;
}

export interface Scale {
  (value: number): number;
  /** The value at a pixel position: the scale's inverse. */
  invert(pixel: number): number;
}

/** Maps [0, max] onto [from, to] (pixels; `to` may be smaller, for a y axis that grows upwards). */
export function linearScale(max: number, from: number, to: number): Scale {
  const span = max > 0 ? max : 1;
  const scale = ((value: number) => from + (value / span) * (to - from)) as Scale;
  scale.invert = (pixel: number) => ((pixel - from) / (to - from || 1)) * span;
  return scale;
}

/** The index of the point whose x is nearest `x` (points sorted by x); -1 for none. */
export function nearestIndex(xs: readonly number[], x: number): number {
  if (!xs.length) return -1;
  let low = 0;
  let high = xs.length - 1;
  while (high - low > 1) {
    const mid = (low + high) >> 1;
    if (xs[mid] <= x) low = mid;
    else high = mid;
  }
  return Math.abs(xs[low] - x) <= Math.abs(xs[high] - x) ? low : high;
}

/** Maps [lo, hi] onto [from, to] (pixels): the zoomed timeline's x axis. */
export function rangeScale(lo: number, hi: number, from: number, to: number): Scale {
  const span = hi > lo ? hi - lo : 1;
  const scale = ((value: number) => from + ((value - lo) / span) * (to - from)) as Scale;
  scale.invert = (pixel: number) => lo + ((pixel - from) / (to - from || 1)) * span;
  return scale;
}

/** Round values within [lo, hi], spaced as `niceTicks` spaces [0, hi - lo]: a zoomed axis's ticks. */
export function ticksWithin(lo: number, hi: number, count = 5): number[] {
  const step = niceTicks(hi - lo, count)[1];
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}
