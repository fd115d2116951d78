/** The code pane: backward and forward GraphNet code with line numbers, highlighted, with Copy; the
 *  `x = None` clearing statements hidden unless asked for; a line selects its node. */

import { chunked, lazyBlock, refill } from "../chunks";
import { codeLines, nodeAtLine, tokenizeLine, type CodeLine } from "../code";
import { clearClass, element, keepInView } from "../dom";
import type { PaneContext } from "../model";
import type { GraphData } from "../types";
import type { Pane } from "./pane";

type CodeKind = "backward" | "forward";
const PLAIN = new Set(["space", "name", "op"]);
/** A code line's height in px (widget.css: 11 px at line-height 1.4), for the blocks not laid out yet. */
const LINE_PX = 15.4;
/** Lines per block: a pane shows about 40; the browser lays out the blocks near the screen when the tab opens. */
const BLOCK_LINES = 50;

function lineElement({ number, text }: CodeLine): HTMLElement {
  const el = element("div", "bwd-line");
  el.dataset.line = String(number);
  for (const token of tokenizeLine(text)) {
    el.appendChild(PLAIN.has(token.kind) ? document.createTextNode(token.text) : element("span", `bwd-tok-${token.kind}`, token.text));
  }
  if (!text) el.textContent = "\u200B";
  return el;
}

/** A block of lines beside one gutter of their numbers: one sticky element per block, not per line, so a
 *  tab of 3,000 lines opens without a long layout (each line a flex row with a sticky number took 50-110 ms). */
function blockElement(lines: CodeLine[]): HTMLElement {
  const block = lazyBlock("bwd-code-block", lines.length * LINE_PX, true);
  const gutter = element("div", "bwd-gutter", lines.map((line) => line.number).join("\n"));
  const body = element("div", "bwd-lines");
  body.append(...lines.map(lineElement));
  block.append(gutter, body);
  return block;
}

export function codePane({ model, signal, select }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-code-pane");
  const bar = element("div", "bwd-code-bar");
  const tabs: Record<CodeKind, HTMLButtonElement> = {
    backward: element("button", "bwd-tab bwd-tab-backward", "backward"),
    forward: element("button", "bwd-tab bwd-tab-forward", "forward"),
  };
  const exactLabel = element("label", "bwd-exact", "");
  const exact = element("input", "bwd-exact-toggle");
  exact.type = "checkbox";
  exactLabel.append(exact, " exact GraphNet text (with x = None lines)");
  exactLabel.title = "The generated code frees each value after its last use with `x = None`; hidden unless ticked.";
  const copy = element("button", "bwd-copy", "Copy");
  bar.append(tabs.backward, tabs.forward, exactLabel, copy);
  const code = element("pre", "bwd-code");
  el.append(bar, code);
  let data: GraphData | null = null;
  let kind: CodeKind = "backward";
  let drawing = 0; // a newer render stops an older one midway

  /** The code shown, in blocks of lines laid out only near the screen; `now` builds every block at once
   *  (a click on the toggles), otherwise one block per task (a payload landing). */
  function render(now = true): void {
    if (!data) return;
    const mine = ++drawing;
    delete code.dataset.drawn;
    for (const [name, tab] of Object.entries(tabs)) tab.classList.toggle("bwd-active", name === kind);
    const slices = chunked(codeLines(data.code[kind], exact.checked), BLOCK_LINES);
    refill(code, slices, blockElement, () => mine === drawing && !signal.aborted, () => {
      code.dataset.drawn = "true";
      mark(model.get("selected"));
    }, now);
  }

  /** The line defining node `id` in the code shown, from the kernel's line map (0 if none). */
  function lineOf(id: string): number {
    return data && id ? data.code.lines[kind][id] ?? 0 : 0;
  }

  /** Mark the selected node's line and scroll the code (not the page) to keep it in view. */
  function mark(id: string): void {
    clearClass(code, "bwd-selected");
    const line = lineOf(id);
    const lineEl = line ? code.querySelector<HTMLElement>(`[data-line="${line}"]`) : null;
    if (!lineEl) return;
    lineEl.classList.add("bwd-selected");
    keepInView(code, lineEl);
    code.scrollLeft = 0;
  }

  code.addEventListener("click", (event) => {
    const line = (event.target as HTMLElement).closest<HTMLElement>("[data-line]");
    if (!line || kind !== "backward" || !data) return;
    const id = nodeAtLine(data.nodes, Number(line.dataset.line));
    if (id) select(id);
  }, on);
  for (const [name, tab] of Object.entries(tabs) as [CodeKind, HTMLButtonElement][]) {
    tab.addEventListener("click", () => {
      kind = name;
      render();
    }, on);
  }
  exact.addEventListener("change", () => render(), on);
  copy.addEventListener("click", () => {
    if (!data) return;
    void navigator.clipboard?.writeText(data.code[kind]);
    copy.textContent = "Copied";
    setTimeout(() => (copy.textContent = "Copy"), 1200);
  }, on);

  return {
    el,
    update(next) {
      data = next;
      render(false);
    },
    highlight: (id) => mark(id),
  };
}
