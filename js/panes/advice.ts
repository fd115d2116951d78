/** The advisor in the partitions tab: a target field with Advise and Cancel, the step under way, the
 *  plans (clicking one shows its code, as text, and, where it has a partition, that partition in the graph). */

import { ADVICE_COLUMNS, adviceRowTitle, adviceRunning, emptyAdviceText } from "../advice";
import { element, show } from "../dom";
import { graphData, setTrait, type AdviceStarted, type PaneContext } from "../model";

export interface AdvicePart {
  el: HTMLElement;
  update(): void;
}

export function advicePart({ model, signal, experimental }: Pick<PaneContext, "model" | "signal" | "experimental">): AdvicePart {
  const el = element("div", "bwd-advice");
  const form = element("form", "bwd-advice-bar");
  const label = element("label", "bwd-advice-label", "Fit activation memory: ");
  const target = element("input", "bwd-advice-target");
  target.type = "text";
  target.dataset.lmSuppressShortcuts = "true"; // Enter submits the target; Shift+Enter must not run the cell
  target.placeholder = "24GB";
  target.setAttribute("aria-label", "activation memory target, e.g. 24GB");
  label.appendChild(target);
  const adviseButton = element("button", "bwd-advise-button", "Advise");
  adviseButton.type = "submit";
  adviseButton.title = "bw.advise: try the plans a practitioner would and re-extract each from its own code";
  const cancelButton = element("button", "bwd-advise-cancel", "Cancel");
  cancelButton.type = "button";
  cancelButton.title = "stop the advisor after the step under way (the plans made so far stay)";
  const timeLabel = element("label", "bwd-advice-time-label");
  const timeBox = element("input", "bwd-advice-time");
  timeBox.type = "checkbox";
  timeLabel.title = "also time one forward and backward of each plan on the Pareto set on this machine (the step time column; real mode only, and cells run meanwhile slow the timing)";
  timeLabel.append(timeBox, " time each plan");
  const progress = element("span", "bwd-advice-progress");
  const failure = element("span", "bwd-error");
  form.append(label, adviseButton, timeLabel, cancelButton, progress, failure);
  const empty = element("div", "bwd-hint bwd-advice-empty");
  const summary = element("div", "bwd-advice-summary");
  const table = element("table", "bwd-advice-table");
  const scroller = element("div", "bwd-advice-scroller"); // a narrow pane scrolls the table, never clips it
  scroller.appendChild(table);
  const note = element("div", "bwd-hint bwd-advice-note");
  const code = element("pre", "bwd-advice-code");
  el.append(form, empty, summary, scroller, note, code);
  let starting = false;

  async function advise(): Promise<void> {
    if (!experimental || starting) return;
    starting = true;
    failure.textContent = "";
    update();
    try {
      const [reply] = await experimental.invoke<AdviceStarted>("_advise", { target: target.value.trim(), time: timeBox.checked && graphData(model).mode === "real" }, { signal });
      if (reply?.error) failure.textContent = reply.error;
    } catch (e) {
      if (!signal.aborted) failure.textContent = `advise failed: ${String(e)}`;
    } finally {
      starting = false;
      if (!signal.aborted) update();
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void advise();
  }, { signal });
  cancelButton.addEventListener("click", () => {
    void experimental?.invoke("_cancel_advise", {}, { signal }).catch(() => undefined);
  }, { signal });

  function renderTable(): void {
    const rows = model.get("advice_rows") ?? [];
    const current = model.get("advice_index");
    table.replaceChildren();
    show(table, rows.length > 0);
    if (!rows.length) return;
    const head = element("tr");
    for (const [name] of ADVICE_COLUMNS) head.appendChild(element("th", "", name));
    table.appendChild(head);
    rows.forEach((row, i) => {
      const classes = ["bwd-advice-row", row.best ? "bwd-best" : "", i === current ? "bwd-current" : "", row.selectable ? "" : "bwd-unselectable"];
      const tr = element("tr", classes.filter(Boolean).join(" "));
      tr.dataset.index = String(i);
      tr.title = adviceRowTitle(row);
      for (const [, cell] of ADVICE_COLUMNS) tr.appendChild(element("td", "", cell(row)));
      // a plan without a partition shows its code and note; the graph keeps the partition it shows
      tr.addEventListener("click", () => setTrait(model, "advice_index", i), { signal });
      table.appendChild(tr);
    });
  }

  function update(): void {
    const canAdvise = Boolean(model.get("can_advise")) && experimental !== undefined;
    const busy = Boolean(model.get("busy"));
    const running = adviceRunning(model.get("advice_progress") || "", busy);
    show(form, canAdvise);
    show(timeLabel, graphData(model).mode === "real"); // a fake-mode widget has no real graphs to time
    adviseButton.disabled = starting || busy;
    show(cancelButton, running);
    progress.textContent = model.get("advice_progress") || "";
    const rows = model.get("advice_rows") ?? [];
    empty.textContent = emptyAdviceText(canAdvise);
    show(empty, rows.length === 0);
    summary.textContent = model.get("advice_summary") || "";
    show(summary, summary.textContent !== "");
    renderTable();
    const shown = rows[model.get("advice_index")] ?? rows.find((r) => r.best);
    code.textContent = shown ? shown.code : "";
    note.textContent = shown?.note ? `${shown.label}: ${shown.note}` : shown ? `${shown.label}: paste this after building the model` : "";
    show(code, Boolean(shown));
    show(note, Boolean(shown));
  }

  return { el, update };
}
