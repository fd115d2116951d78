/** The saved-tensor table: totals, sortable columns, rows newly saved and rows now recomputed. */

import { clearClass, element, keepInView } from "../dom";
import { formatBytes } from "../format";
import type { PaneContext } from "../model";
import { cellTitle, COLUMN_WIDTHS, COLUMNS, descendingFirst, recomputedCells, savedCells, savedTitle, sortRows, type SortKey } from "../table";
import type { GraphData } from "../types";
import type { Pane } from "./pane";

export function savedPane({ model, signal, select }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-saved");
  const totals = element("div", "bwd-totals");
  const table = element("table", "bwd-table");
  el.append(totals, table);
  let data: GraphData | null = null;
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
    tr.addEventListener("click", () => select(name), on);
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

  function columns(): HTMLTableColElement {
    const group = element("colgroup");
    for (const column of COLUMNS) {
      const col = element("col");
      col.style.width = COLUMN_WIDTHS[column];
      group.appendChild(col);
    }
    return group;
  }

  function render(): void {
    if (!data) return;
    const diff = data.diff;
    const tbody = element("tbody");
    for (const saved of sortRows(data.saved, sort.key, sort.descending)) {
      const newly = diff?.newly_saved.includes(saved.name) ? " bwd-diff-saved" : "";
      tbody.appendChild(row(saved.name, `bwd-row bwd-row-${saved.kind}${newly}`, savedCells(saved), savedTitle(saved)));
    }
    for (const gone of diff?.recomputed_rows ?? []) {
      const title = `saved under ${diff.against}; this partition recomputes it in backward instead`;
      tbody.appendChild(row(gone.name, "bwd-row bwd-row-recomputed-now", recomputedCells(gone), title));
    }
    table.replaceChildren(columns(), header(), tbody);
    const t = data.partition;
    const views = data.saved.filter((r) => r.alias_kind && r.alias_kind !== "activation").length;
    const viewText = views ? ` \u00B7 ${views} view${views === 1 ? "" : "s"} of parameters/inputs (0 B added)` : "";
    totals.textContent = `${t.saved} saved \u00B7 activations ${formatBytes(t.saved_activation_bytes)} \u00B7 parameters/inputs ${formatBytes(t.saved_input_bytes)}${viewText}`;
    mark(model.get("selected"), false);
  }

  function mark(id: string, scroll: boolean): void {
    clearClass(table, "bwd-selected");
    const tr = id ? table.querySelector(`tr[data-name="${CSS.escape(id)}"]`) : null;
    tr?.classList.add("bwd-selected");
    if (tr instanceof HTMLElement && scroll) keepInView(el, tr);
  }

  return {
    el,
    update(next) {
      data = next;
      render();
    },
    highlight: mark,
  };
}
