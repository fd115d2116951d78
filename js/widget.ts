/**
 * The widget: panes (js/panes/) over the synced traits (js/model.ts). Everything a view
 * listens to is tied to one AbortSignal, so the returned cleanup removes all of it.
 */

import type { RenderProps } from "@anywidget/types";
import { inTurn } from "./chunks";
import { element } from "./dom";
import { PayloadsAhead } from "./ahead";
import { decodedData, dropAhead, graphData, showAhead, watch, type PaneContext, type Traits } from "./model";
import { PANES } from "./panes";
import type { Pane, PaneSpec } from "./panes/pane";

interface Layout {
  root: HTMLElement;
  place(spec: PaneSpec, pane: Pane): void;
  showTab(name: string): void;
}

/** root > [header], main > ([graph], side > ([details], tab bar, [tabs])) */
function layout(el: HTMLElement, signal: AbortSignal, shown: (name: string) => void): Layout {
  const root = element("div", "bwd-root");
  const main = element("div", "bwd-main");
  const side = element("div", "bwd-side");
  const bar = element("div", "bwd-tabs");
  bar.setAttribute("role", "tablist");
  const body = element("div", "bwd-tab-body");
  side.append(bar, body);
  main.append(side);
  root.append(main);
  el.appendChild(root);
  const tabs = new Map<string, { button: HTMLButtonElement; pane: HTMLElement }>();
  const showTab = (name: string) => {
    for (const [tab, { button, pane }] of tabs) {
      const active = tab === name;
      button.classList.toggle("bwd-active", active);
      button.setAttribute("aria-selected", String(active));
      pane.hidden = !active;
    }
    root.dataset.tab = name;
    shown(name);
  };
  const place = (spec: PaneSpec, pane: Pane) => {
    if (spec.slot === "top") root.insertBefore(pane.el, main);
    else if (spec.slot === "main") main.insertBefore(pane.el, side);
    else if (spec.slot === "side") side.insertBefore(pane.el, bar);
    else {
      const name = spec.tab ?? "";
      const button = element("button", `bwd-tab bwd-tab-${name}`, name);
      button.setAttribute("role", "tab");
      button.addEventListener("click", () => showTab(name), { signal });
      bar.appendChild(button);
      body.appendChild(pane.el);
      tabs.set(name, { button, pane: pane.el });
      if (tabs.size === 1) showTab(name);
      else pane.el.hidden = true;
    }
  };
  return { root, place, showTab };
}

function render({ model, el, experimental, signal: viewSignal }: RenderProps<Traits>): () => void {
  const controller = new AbortController();
  const signal = controller.signal;
  viewSignal?.addEventListener("abort", () => controller.abort(), { signal });
  const panes: Pane[] = [];
  const tabPanes = new Map<string, Pane>();
  // a pane shown again scrolls to the selection: hidden, it could not measure where that is
  const { root, place, showTab } = layout(el, signal, (name) => tabPanes.get(name)?.highlight?.(model.get("selected"), false));

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
  const ahead = new PayloadsAhead();
  const onMessage = (message: unknown, buffers: DataView[]) => void ahead.receive(message, buffers);
  model.on("msg:custom", onMessage);
  signal.addEventListener("abort", () => model.off("msg:custom", onMessage), { once: true });
  try {
    model.send({ send_ahead: true }); // those made before this view was (a page reload, a widget shown later)
  } catch {
    // no kernel to ask (an HTML export): every move there is the kernel's, and there is none
  }
  const ctx: PaneContext = {
    model,
    signal,
    experimental,
    root,
    select,
    openModule: (path) => panes.forEach((pane) => pane.open?.(path)),
    setFocus: (path) => panes.forEach((pane) => pane.focus?.(path)),
    showTab,
    showAhead: (key) => {
      const wire = ahead.find(key);
      if (wire !== undefined) {
        showAhead(model, wire);
        onData();
      }
      return wire !== undefined;
    },
  };

  for (const spec of PANES) {
    const pane = spec.create(ctx);
    place(spec, pane);
    panes.push(pane);
    if (spec.tab) tabPanes.set(spec.tab, pane);
    // a trait of the pane's own redraws it, but not before its payload is decoded: the landing redraws it then
    const redraw = () => {
      const data = decodedData(model);
      if (data) pane.update(data);
    };
    if (spec.traits?.length) watch(model, spec.traits, redraw, signal);
  }
  let landing = 0; // a newer payload stops the panes' turns for an older one
  /** A new payload: its JSON is parsed in a task of its own (a 48-layer model's takes as long as a pane's
   *  drawing), then each pane redraws in a task of its own, those on screen first, so that a big model's
   *  payload does not hold the page for all of them at once, nor add to the task that brought it (the
   *  kernel's message, JupyterLab's own; a move's click). */
  const onData = () => {
    const mine = ++landing;
    const onScreen = (i: number) => PANES[i].slot !== "tab" || PANES[i].tab === root.dataset.tab;
    const order = panes.map((_, i) => i).sort((a, b) => Number(onScreen(b)) - Number(onScreen(a)));
    const parse = () => void graphData(model); // graphData keeps what it parsed: the panes' calls below reuse it
    inTurn([parse, ...order.map((i) => () => panes[i].update(graphData(model)))], () => mine === landing && !signal.aborted);
  };
  watch(model, ["data"], () => (dropAhead(model), onData()), signal); // the kernel's payload, with its diff
  watch(model, ["error"], () => model.get("error") && dropAhead(model) && onData(), signal); // the move failed
  watch(model, ["selected"], () => highlight(model.get("selected"), true), signal);
  // the panes draw in tasks after the one that made the view: a big payload's first view is not added to
  // the task in which JupyterLab and ipywidgets create the model and the view (issue 22, long tasks)
  onData();
  return () => controller.abort();
}

export default { render };
