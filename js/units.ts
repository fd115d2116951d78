/** Numbers as a person reads them: bytes, FLOPs and seconds with their units, and round axis ticks.
 *  bwd_widgets/core/units.py is the twin of every function here; tests/test_contract.py writes its answers
 *  on a table of samples into the contract fixture, and js/test/contract.test.ts holds the two equal.
 *
 *  The rule: decimal units; below 1000 of the smallest unit a whole number ("512 B", "0 FLOP"); else three
 *  significant digits, zeros kept ("16.4 KB", "1.00 GB", "27.3 MFLOP"), in the largest unit that leaves at
 *  least 1; seconds in ms below one ("16.2 ms", "0.500 ms"). */

export const BYTE_UNITS = ["B", "KB", "MB", "GB", "TB", "PB"] as const;
export const FLOP_UNITS = ["FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"] as const;
export const SECOND_UNITS = ["s", "ms"] as const;

/** A positive value below 1000 with three significant digits, zeros kept: 0.500, 1.00, 16.4, 131 (and 1000
 *  for what rounds to it, which the caller writes in the next unit). */
function threeDigits(value: number): string {
  let places = 2;
  let below = 10;
  while (value < below / 10 && places < 12) {
    places++;
    below /= 10;
  }
  let text = value.toFixed(places);
  while (Number(text) >= below && places > 0) {
    // 9.996 rounds to 10.00: one place fewer
    places--;
    below *= 10;
    text = value.toFixed(places);
  }
  return text;
}

/** `value` in the largest of `names` (each 1000 times the one before) that leaves at least 1. */
function scaled(value: number, names: readonly string[]): string {
  let size = Math.abs(value);
  let unit = 0;
  while (size >= 1000 && unit < names.length - 1) {
    size /= 1000;
    unit++;
  }
  let text = unit === 0 ? size.toFixed(0) : threeDigits(size);
  if (Number(text) >= 1000 && unit < names.length - 1) {
    // 999.6 KB rounds to 1000: written 1.00 MB
    size /= 1000;
    unit++;
    text = threeDigits(size);
  }
  return `${value < 0 && Number(text) !== 0 ? "-" : ""}${text} ${names[unit]}`;
}

/** "512 B", "16.4 KB", "1.45 MB", "1.00 GB". */
export function formatBytes(bytes: number): string {
  return scaled(bytes, BYTE_UNITS);
}

/** "0 FLOP", "524 kFLOP", "27.3 MFLOP". */
export function formatFlops(flops: number): string {
  return scaled(flops, FLOP_UNITS);
}

/** "16.2 ms", "0.500 ms", "12.3 s", "0 s": three significant digits, in ms below one second. */
export function formatSeconds(seconds: number): string {
  let size = Math.abs(seconds);
  let unit = 0;
  if (size === 0) return "0 s";
  while (size < 1 && unit < SECOND_UNITS.length - 1) {
    size *= 1000;
    unit++;
  }
  let text = threeDigits(size);
  if (Number(text) >= 1000 && unit > 0) {
    // 999.6 ms rounds to 1000: written 1.00 s
    size /= 1000;
    unit--;
    text = threeDigits(size);
  }
  return `${seconds < 0 ? "-" : ""}${text} ${SECOND_UNITS[unit]}`;
}

/** Round values from 0 in steps of 1, 2 or 5 times a power of ten, the last at or above `max`; [0, 1]
 *  when there is nothing to show, so an axis always has a span. core/units.py `nice_ticks` is its twin
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
