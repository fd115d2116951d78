/** The saved-tensor table: totals, sortable columns, rows newly saved and rows now recomputed. */

import { chunked, lazyBlock, refill } from "../chunks";
import { clearClass, element, keepInView } from "../dom";
import { formatBytes } from "../units";
import type { PaneContext } from "../model";
import { cellTitle, columnWidths, COLUMNS, descendingFirst, recomputedCells, savedCells, savedTitle, sortRows, type SortKey } from "../table";
import type { GraphData } from "../types";
import type { Pane } from "./pane";

/** A table row's height in px (widget.css: 11 px text, 1 px padding), for the blocks not laid out yet. */
const ROW_PX = 17;
/** Rows per block: a pane shows about 30. */
const BLOCK_ROWS = 50;

export function savedPane({ model, signal, select }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-saved");
  const totals = element("div", "bwd-totals");
  // the header is a table of its own, kept under the totals; the rows follow in blocks of tables with
  // the same columns, each laid out only near the screen
  const table = element("table", "bwd-table bwd-table-head");
  Object.assign(table.style, { position: "sticky", top: "22px", zIndex: "1" });
  const rows = element("div", "bwd-saved-rows");
  el.append(totals, table, rows);
  rows.addEventListener("click", (event) => {
    const tr = (event.target as Element).closest<HTMLElement>("tr[data-name]");
    if (tr?.dataset.name) select(tr.dataset.name);
  }, on);
  let data: GraphData | null = null;
  let drawing = 0; // a newer render stops an older one midway
  const sort: { key: SortKey; descending: boolean } = { key: "bytes", descending: true };

  function row(name: string, className: string, cells: string[], title: string): HTMLTableRowElement {
    const tr = element("tr", className);
    tr.dataset.name = name;
    for (const text of cells) {
      const td = element("td", "", text);
      td.title = cellTitle(text, title); // the whole value, when the column cuts it short
      tr.appendChild(td);
    }
    tr.title = title;
    return tr;
  }

  function header(): HTMLTableSectionElement {
    const tr = element("tr");
    for (const column of COLUMNS) {
      const sorted = sort.key === column ? `bwd-sorted ${sort.descending ? "bwd-desc" : "bwd-asc"}` : "";
      const th = element("th", sorted, column);
      th.dataset.column = column;
      th.addEventListener("click", () => {
        sort.descending = sort.key === column ? !sort.descending : descendingFirst(column);
        sort.key = column;
        render();
      }, on);
      tr.appendChild(th);
    }
    const thead = element("thead");
    thead.appendChild(tr);
    return thead;
  }

  /** The columns' widths, the same for the header and every block of rows (js/table.ts columnWidths). */
  function columns(widths: readonly string[]): HTMLTableColElement {
    const group = element("colgroup");
    for (const width of widths) {
      const col = element("col");
      col.style.width = width;
      group.appendChild(col);
    }
    return group;
  }

  /** The table; `now` builds every block of rows at once (a click on a column), otherwise one block per
   *  task (a payload landing). */
  function render(now = true): void {
    if (!data) return;
    const mine = ++drawing;
    const diff = data.diff;
    const shown: Parameters<typeof row>[] = sortRows(data.saved, sort.key, sort.descending).map((saved) => {
      const newly = diff?.newly_saved.includes(saved.name) ? " bwd-diff-saved" : "";
      return [saved.name, `bwd-row bwd-row-${saved.kind}${newly}`, savedCells(saved), savedTitle(saved)];
    });
    for (const gone of diff?.recomputed_rows ?? []) {
      const title = `saved under ${diff.against}; this partition recomputes it in backward instead`;
      shown.push([gone.name, "bwd-row bwd-row-recomputed-now", recomputedCells(gone), title]);
    }
    const widths = columnWidths(shown.map(([, , cells]) => cells));
    const width = `calc(${widths.join(" + ")})`; // each table's own, so no block sizes by a percentage
    table.style.width = width;
    table.replaceChildren(columns(widths), header());
    delete rows.dataset.drawn;
    const block = (slice: typeof shown) => {
      const lazy = lazyBlock("bwd-saved-block", slice.length * ROW_PX, true); // as wide as its table: never clipped
      const part = element("table", "bwd-table");
      part.style.width = width;
      const tbody = element("tbody");
      tbody.append(...slice.map((cells) => row(...cells)));
      part.append(columns(widths), tbody);
      lazy.appendChild(part);
      return lazy;
    };
    const t = data.partition;
    const views = data.saved.filter((r) => r.alias_kind && r.alias_kind !== "activation").length;
    const viewText = views ? ` \u00B7 ${views} view${views === 1 ? "" : "s"} of parameters/inputs (0 B added)` : "";
    totals.textContent = `${t.saved} saved \u00B7 activations ${formatBytes(t.saved_activation_bytes)} \u00B7 parameters/inputs ${formatBytes(t.saved_input_bytes)}${viewText}`;
    totals.title = totals.textContent;
    refill(rows, chunked(shown, BLOCK_ROWS), block, () => mine === drawing && !signal.aborted, () => {
      rows.dataset.drawn = "true";
      mark(model.get("selected"), false);
    }, now);
  }

  function mark(id: string, scroll: boolean): void {
    clearClass(rows, "bwd-selected");
    const tr = id ? rows.querySelector(`tr[data-name="${CSS.escape(id)}"]`) : null;
    tr?.classList.add("bwd-selected");
    if (tr instanceof HTMLElement && scroll) keepInView(el, tr);
  }

  return {
    el,
    update(next) {
      data = next;
      render(false);
    },
    highlight: mark,
  };
}
