/** Axes for the small charts (memory timeline, budget sweep): linear scales and round ticks. */

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

/** Round values from 0 in steps of 1, 2 or 5 times a power of ten, the last at or above `max`; [0, 1]
 *  when there is nothing to show, so an axis always has a span. views/plot.py `nice_ticks` is its twin
 *  (same steps, same 12 significant digits); js/test/contract.test.ts holds them equal. */
export function niceTicks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const power = Number(`1e${Math.floor(Math.log10(raw))}`); // parsed, as the Python side does: the same double
  const step = [1, 2, 5].map((m) => m * power).find((s) => s >= raw) ?? 10 * power;
  const ticks = [0];
  while (ticks[ticks.length - 1] < max * (1 - 1e-9)) ticks.push(Number((ticks.length * step).toPrecision(12)));
  return ticks;
}

/** "1.2 GFLOP", "340 kFLOP", "0 FLOP". */
export function formatFlops(flops: number): string {
  const units = ["FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"];
  let value = flops;
  let unit = 0;
  while (Math.abs(value) >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  const text = unit === 0 ? String(Math.round(value)) : value.toFixed(Math.abs(value) >= 100 ? 0 : 1);
  return `${text} ${units[unit]}`;
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
