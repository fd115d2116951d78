/** "16.4 KB": views/dot.py `format_bytes` is its twin (the static SVG's labels), held equal on the fixture. */
export function formatBytes(bytes: number): string {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = Math.abs(bytes);
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  const text = unit === 0 ? String(value) : value.toFixed(value >= 100 ? 0 : 1);
  return `${bytes < 0 ? "-" : ""}${text} ${units[unit]}`;
}

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

/** A measured time: milliseconds below 10 s, else seconds, as the advisor's report prints it. */
export function formatSeconds(seconds: number): string {
  return seconds < 10 ? `${(seconds * 1e3).toFixed(1)} ms` : `${seconds.toFixed(1)} s`;
}
