/** Two partitions side by side: the one shown before a switch (a comparison row, the partitioner, the
 *  budget) beside the one shown now, each a graph view of its own; a selection in either selects in both,
 *  and a pan or zoom in either moves the other to the same scale, around the same node. */

import { element } from "../dom";
import type { Placed } from "../navigate";
import { followView, parseViewBox } from "../panzoom";
import type { GraphData } from "../types";
import type { Viewport } from "../viewport";

/** What the comparison needs of a graph view (js/panes/graph.ts GraphView). */
export interface ComparedView {
  readonly viewport: Viewport;
  readonly parts: { readonly host: HTMLElement };
  load(data: GraphData): void;
  highlight(id: string, pan: boolean): void;
  placed(): Placed[];
}

/** `data`'s partition in words: "min_cut (budget 0)". */
export function partitionName(data: GraphData): string {
  return data.memory_budget === null ? data.partitioner : `${data.partitioner} (budget ${data.memory_budget})`;
}

/** The node both views draw to hold still while following: the selection, else the one nearest the
 *  middle of the moved view; null when they draw no node in common. */
export function anchorOf(moved: readonly Placed[], other: readonly Placed[], selected: string, centre: { x: number; y: number }): [Placed, Placed] | null {
  const there = new Map(other.map((p) => [p.id, p]));
  const shared = moved.filter((p) => there.has(p.id));
  if (!shared.length) return null;
  const chosen = shared.find((p) => p.id === selected) ?? shared.reduce((a, b) => (Math.hypot(a.x - centre.x, a.y - centre.y) <= Math.hypot(b.x - centre.x, b.y - centre.y) ? a : b));
  return [chosen, there.get(chosen.id)!];
}

export interface SideBySide {
  /** A new payload: the one before it is kept to compare against when the kernel says it differs. */
  update(next: GraphData): void;
  highlight(id: string, pan: boolean): void;
}

/** The "Side by side" button of `main`'s toolbar and the second view it shows beside `main`. */
export function sideBySide(main: ComparedView, mainEl: HTMLElement, toggle: HTMLButtonElement, makeOther: () => { view: ComparedView; el: HTMLElement }, selected: () => string, signal: AbortSignal): SideBySide {
  let current: GraphData | null = null;
  let before: GraphData | null = null;
  let other: { view: ComparedView; el: HTMLElement } | null = null;
  const captions = [element("div", "bwd-compare-caption"), element("div", "bwd-compare-caption")];
  const expected = new Map<Viewport, string>(); // the viewBox a view was just moved to by the other

  /** Move `to` after `from` moved (unless `from` moved only because it followed). */
  const follow = (from: ComparedView, to: ComparedView) => {
    const svg = from.viewport.svg;
    const box = svg?.getAttribute("viewBox") ?? "";
    if (!svg || !to.viewport.svg || expected.get(from.viewport) === box) return;
    const view = parseViewBox(box);
    const pair = anchorOf(from.placed(), to.placed(), selected(), { x: view.x + view.w / 2, y: view.y + view.h / 2 });
    if (!pair) return;
    to.viewport.focusBox(followView(view, pair[0], pair[1], from.viewport.size(), to.viewport.size()), 0, Infinity);
    expected.set(to.viewport, to.viewport.svg.getAttribute("viewBox") ?? "");
  };
  const watchView = (from: ComparedView, to: () => ComparedView | null) => {
    const observer = new MutationObserver(() => {
      const target = to();
      if (target) follow(from, target);
    });
    observer.observe(from.parts.host, { attributes: true, attributeFilter: ["viewBox"], subtree: true, childList: true });
    signal.addEventListener("abort", () => observer.disconnect(), { once: true });
  };

  const show = (on: boolean) => {
    const row = mainEl.parentElement;
    toggle.classList.toggle("bwd-active", on);
    toggle.setAttribute("aria-pressed", String(on));
    row?.classList.toggle("bwd-comparing", on);
    if (!on || !before || !current) {
      other?.el.remove();
      captions.forEach((c) => c.remove());
      return;
    }
    if (!other) {
      other = makeOther();
      const made = other.view;
      watchView(made, () => main);
      watchView(main, () => (other && other.el.isConnected ? other.view : null));
    }
    mainEl.after(other.el);
    captions[0].textContent = `now: ${partitionName(current)}`;
    captions[1].textContent = `before: ${partitionName(before)}`;
    mainEl.prepend(captions[0]);
    other.el.prepend(captions[1]);
    other.view.load(before);
    other.view.highlight(selected(), true);
  };
  toggle.addEventListener("click", () => show(!toggle.classList.contains("bwd-active")), { signal });

  return {
    update(next) {
      if (current && next !== current && next.diff.against) before = current;
      else if (!next.diff.against) before = null;
      current = next;
      toggle.hidden = !before;
      toggle.title = before ? `show ${partitionName(before)} (shown before) beside ${partitionName(next)}: a selection, pan or zoom in either follows in both` : "";
      if (toggle.classList.contains("bwd-active")) show(Boolean(before));
    },
    highlight(id, pan) {
      if (other?.el.isConnected) other.view.highlight(id, pan);
    },
  };
}
