/**
 * The widget: panes (js/panes/) over the synced traits (js/model.ts). Everything a view
 * listens to is tied to one AbortSignal, so the returned cleanup removes all of it.
 */

import type { RenderProps } from "@anywidget/types";
import { element } from "./dom";
import { watch, type PaneContext, type Traits } from "./model";
import { PANES } from "./panes";
import type { Pane, Slot } from "./panes/pane";

/** root > [top slot], main > ([main slot], side > [side slot]) */
function layoutSlots(el: HTMLElement): { root: HTMLElement; slots: Record<Slot, HTMLElement> } {
  const root = element("div", "bwd-root");
  const main = element("div", "bwd-main");
  const side = element("div", "bwd-side");
  main.append(side);
  el.appendChild(root);
  root.append(main);
  return { root, slots: { top: root, main, side } };
}

function place(slots: Record<Slot, HTMLElement>, slot: Slot, pane: Pane): void {
  const container = slots[slot];
  // the top row goes above the columns; the main column goes before the side one
  if (slot === "top" || slot === "main") container.insertBefore(pane.el, container.lastElementChild);
  else container.appendChild(pane.el);
}

function render({ model, el, experimental, signal: viewSignal }: RenderProps<Traits>): () => void {
  const controller = new AbortController();
  const signal = controller.signal;
  viewSignal?.addEventListener("abort", () => controller.abort(), { signal });
  const { root, slots } = layoutSlots(el);
  const panes: Pane[] = [];

  /** Show node `id` as selected in every pane. */
  const highlight = (id: string, pan: boolean) => {
    for (const pane of panes) pane.highlight?.(id, pan);
  };
  const select = (id: string) => {
    const before = performance.now();
    const changed = model.get("selected") !== id;
    model.set("selected", id);
    model.save_changes();
    if (!changed) highlight(id, true); // no change event: pan to it again all the same
    root.dataset.selectMs = String(Math.round(performance.now() - before));
  };
  const ctx: PaneContext = { model, signal, experimental, root, select };

  for (const spec of PANES) {
    const pane = spec.create(ctx);
    place(slots, spec.slot, pane);
    panes.push(pane);
    if (spec.traits?.length) watch(model, spec.traits, () => pane.update(model.get("data")), signal);
  }
  const onData = () => {
    const data = model.get("data");
    for (const pane of panes) pane.update(data);
  };
  watch(model, ["data"], onData, signal);
  watch(model, ["selected"], () => highlight(model.get("selected"), true), signal);
  onData();
  return () => controller.abort();
}

export default { render };
