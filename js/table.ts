/** Sorting the saved-tensor table. */

import type { SavedRow } from "./types";

export type SortKey = "name" | "kind" | "shape" | "dtype" | "bytes" | "producer" | "module";
export const COLUMNS: SortKey[] = ["name", "kind", "shape", "dtype", "bytes", "producer", "module"];

function numericSuffix(name: string): [string, number] {
  const match = /^(.*?)(\d+)$/.exec(name);
  return match ? [match[1], Number(match[2])] : [name, -1];
}

function compare(a: SavedRow, b: SavedRow, key: SortKey): number {
  if (key === "bytes") return a.bytes - b.bytes;
  if (key === "shape") {
    const sa = a.shape.reduce((x, y) => x * y, 1);
    const sb = b.shape.reduce((x, y) => x * y, 1);
    return sa - sb;
  }
  if (key === "name") {
    const [pa, na] = numericSuffix(a.name);
    const [pb, nb] = numericSuffix(b.name);
    return pa === pb ? na - nb : pa < pb ? -1 : 1;
  }
  const x = String(a[key]);
  const y = String(b[key]);
  return x < y ? -1 : x > y ? 1 : 0;
}

export function sortRows(rows: SavedRow[], key: SortKey, descending: boolean): SavedRow[] {
  const sign = descending ? -1 : 1;
  return rows
    .map((row, i) => [row, i] as const)
    .sort(([a, i], [b, j]) => sign * compare(a, b, key) || i - j)
    .map(([row]) => row);
}
