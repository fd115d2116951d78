import { formatBytes } from "./units";

/** torch's budget ratio as the widget shows it everywhere: three decimals, a dash where min-cut did not run. */
export function formatRatio(ratio: number | null): string {
  return ratio === null ? "\u2014" : ratio.toFixed(3);
}

export function formatShape(shape: number[]): string {
  return `[${shape.join(", ")}]`;
}

/** "+2", "-1.2 MB", or "" when unchanged. */
export function formatDelta(delta: number, bytes = false): string {
  if (!delta) return "";
  const sign = delta > 0 ? "+" : "-";
  return sign + (bytes ? formatBytes(Math.abs(delta)) : String(Math.abs(delta)));
}
