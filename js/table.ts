/** Sorting the saved-tensor table. */

import { formatShape } from "./format";
import { formatBytes } from "./units";
import type { SavedRow } from "./types";

export type SortKey = "name" | "kind" | "shape" | "dtype" | "bytes" | "adds" | "producer" | "module" | "torch says";
/** The saved table's columns, by their header text. "adds" is activation_bytes: what the value adds
 *  to memory on top of the forward inputs (0 B for views of parameters and inputs); "torch says" is
 *  torch's own phrase for why it is saved (SavedRow.torch_reason: "cannot recompute: materialized in
 *  backward", "min-cut: in the cut"), a dash where torch has none (the default partitioner). */
export const COLUMNS: SortKey[] = ["name", "kind", "shape", "dtype", "bytes", "adds", "producer", "module", "torch says"];

/** Least widths (CSS) of the saved table's short columns: room for their values ("float32", "16.4 KB") with
 *  the sort arrow, so that they keep their width from one partition to the next; "" for the columns sized
 *  by their content alone. */
export const COLUMN_WIDTHS: Record<SortKey, string> = {
  name: "", kind: "", shape: "", dtype: "calc(7ch + 8px)", bytes: "calc(8ch + 8px)", adds: "calc(8ch + 8px)", producer: "", module: "", "torch says": "",
};

/** Most characters a column of the saved table gives its values: a longer one ends in an ellipsis and says
 *  itself whole in its title (torch's cannot-recompute phrases are under 50). */
export const MAX_COLUMN_CH = 56;

/** Column widths (CSS) of the saved table, from what they hold: each column as wide as its longest value or
 *  its title with the sort arrow, in characters of the table's monospace font (plus the cell's padding), up
 *  to MAX_COLUMN_CH, and at least its COLUMN_WIDTHS. The header and every block of rows get the same widths,
 *  so their columns line up; a pane narrower than their sum scrolls the table sideways instead of cutting
 *  every column short. */
export function columnWidths(rows: readonly (readonly string[])[]): string[] {
  return COLUMNS.map((title, i) => {
    const longest = rows.reduce((most, cells) => Math.max(most, [...(cells[i] ?? "")].length), title.length + 2);
    const fits = `calc(${Math.min(longest, MAX_COLUMN_CH)}ch + 10px)`;
    return COLUMN_WIDTHS[title] ? `max(${COLUMN_WIDTHS[title]}, ${fits})` : fits;
  });
}

/** A cell's hover text: its whole value, then the row's (why the value is saved). */
export function cellTitle(text: string, rowTitle: string): string {
  return rowTitle ? `${text}\n${rowTitle}` : text;
}

/** Columns that sort largest first on their first click. */
export function descendingFirst(key: SortKey): boolean {
  return key === "bytes" || key === "adds";
}

function numericSuffix(name: string): [string, number] {
  const match = /^(.*?)(\d+)$/.exec(name);
  return match ? [match[1], Number(match[2])] : [name, -1];
}

function compare(a: SavedRow, b: SavedRow, key: SortKey): number {
  if (key === "bytes") return a.bytes - b.bytes;
  if (key === "adds") return a.activation_bytes - b.activation_bytes;
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
  const x = key === "torch says" ? a.torch_reason : String(a[key]);
  const y = key === "torch says" ? b.torch_reason : String(b[key]);
  return x < y ? -1 : x > y ? 1 : 0;
}

export function sortRows(rows: SavedRow[], key: SortKey, descending: boolean): SavedRow[] {
  const sign = descending ? -1 : 1;
  return rows
    .map((row, i) => [row, i] as const)
    .sort(([a, i], [b, j]) => sign * compare(a, b, key) || i - j)
    .map(([row]) => row);
}

/** The parameter, buffer or input a saved value is, with the other names a tied weight goes by. */
export function sourceLabel(row: SavedRow): string {
  return [row.source, ...row.source_aliases].filter((name) => name !== "").join(" = ");
}

/** A saved value's cells, in COLUMNS order. */
export function savedCells(row: SavedRow): string[] {
  return [row.name, row.kind_label, formatShape(row.shape), row.dtype, formatBytes(row.bytes), formatBytes(row.activation_bytes), row.producer || sourceLabel(row), row.module, row.torch_reason || NO_PHRASE];
}

/** The "torch says" cell where torch gives no phrase. */
const NO_PHRASE = "\u2014";

/** A value the previous partition saved and this one recomputes, in COLUMNS order: it adds nothing now. */
export function recomputedCells(row: SavedRow): string[] {
  return [row.name, "recomputed now", formatShape(row.shape), row.dtype, formatBytes(row.bytes), formatBytes(0), row.producer, row.module, NO_PHRASE];
}

/** The hover text of a saved row: what it shares memory with, then why it is saved. */
export function savedTitle(row: SavedRow): string {
  return (row.alias_of ? `${sharesMemory(row)}. ` : "") + row.why;
}

/** "shares memory with <alias_of> (<storage_op>)", or "" when it is no view. */
export function sharesMemory(row: SavedRow): string {
  if (!row.alias_of) return "";
  return `shares memory with ${row.alias_of}${row.storage_op ? ` (${row.storage_op})` : ""}`;
}
