/** The code pane: backward and forward GraphNet code, highlighted, with Copy; a line selects its node. */

import { nodeAtLine, tokenizeLine } from "../code";
import { clearClass, element } from "../dom";
import type { PaneContext } from "../model";
import type { GraphData } from "../types";
import type { Pane } from "./pane";

type CodeKind = "backward" | "forward";
const PLAIN = new Set(["space", "name", "op"]);

function lineElement(line: string, number: number): HTMLElement {
  const el = element("div", "bwd-line");
  el.dataset.line = String(number);
  for (const token of tokenizeLine(line)) {
    el.appendChild(PLAIN.has(token.kind) ? document.createTextNode(token.text) : element("span", `bwd-tok-${token.kind}`, token.text));
  }
  if (!line) el.textContent = "\u200B";
  return el;
}

export function codePane({ model, signal, select }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-code-pane");
  const bar = element("div", "bwd-code-bar");
  const tabs: Record<CodeKind, HTMLButtonElement> = {
    backward: element("button", "bwd-tab bwd-tab-backward", "backward"),
    forward: element("button", "bwd-tab bwd-tab-forward", "forward"),
  };
  const copy = element("button", "bwd-copy", "Copy");
  bar.append(tabs.backward, tabs.forward, copy);
  const code = element("pre", "bwd-code");
  el.append(bar, code);
  let data: GraphData | null = null;
  let kind: CodeKind = "backward";

  function render(): void {
    if (!data) return;
    code.replaceChildren(...data.code[kind].split("\n").map((line, i) => lineElement(line, i + 1)));
    for (const [name, tab] of Object.entries(tabs)) tab.classList.toggle("bwd-active", name === kind);
    mark(model.get("selected"));
  }

  /** Mark the selected node's line in the backward code and scroll it into view. */
  function mark(id: string): void {
    clearClass(code, "bwd-selected");
    const line = data?.nodes.find((n) => n.id === id)?.line;
    if (kind !== "backward" || !line) return;
    const lineEl = code.querySelector<HTMLElement>(`[data-line="${line}"]`);
    if (!lineEl) return;
    lineEl.classList.add("bwd-selected");
    code.scrollTop = lineEl.offsetTop - code.clientHeight / 3;
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
      render();
    },
    highlight: (id) => mark(id),
  };
}
