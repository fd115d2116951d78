/** The synced state: the widget's traits (bwd_widgets/jupyter/widget.py, made from the Python
 *  `WidgetState` in views/payload.py), typed once. */

import type { AnyModel, Experimental } from "@anywidget/types";
import type { AheadKey } from "./ahead";
import type { AdvicePlanRow, ComparisonRow, GraphData, SweepPoint } from "./types";

/** Totals of the partition shown before the current one; empty before any switch. */
export interface PreviousTotals {
  saved?: number;
  saved_activation_bytes?: number;
}

/** The `data` trait as it arrives: from a kernel, the GraphData's UTF-8 JSON in one binary buffer
 *  (views/payload.py `encode_payload`: ipywidgets neither walks nor re-encodes it); in the HTML export,
 *  the object itself. Read it through `graphData`. */
export type DataTrait = GraphData | DataView | ArrayBuffer;

export interface Traits {
  data: DataTrait;
  selected: string;
  partitioner: string;
  memory_budget: number;
  graph_index: number;
  busy: boolean;
  error: string;
  previous: PreviousTotals;
  can_rerun: boolean;
  comparison_rows: ComparisonRow[];
  compare_index: number;
  sweep_points: SweepPoint[];
  sweep_index: number;
  sweep_progress: string;
  can_advise: boolean;
  advice_rows: AdvicePlanRow[];
  advice_index: number;
  advice_summary: string;
  advice_progress: string;
}

export type TraitName = keyof Traits & string;

/** `Keys` when it lists every trait; otherwise a type naming the missing ones, so assigning fails. */
type AllTraits<Keys extends readonly TraitName[]> = [Exclude<TraitName, Keys[number]>] extends [never] ? Keys : { missing_traits: Exclude<TraitName, Keys[number]> };
const TRAITS = [
  "data", "selected", "partitioner", "memory_budget", "graph_index", "busy", "error", "previous", "can_rerun",
  "comparison_rows", "compare_index", "sweep_points", "sweep_index", "sweep_progress", "can_advise", "advice_rows",
  "advice_index", "advice_summary", "advice_progress",
] as const satisfies readonly TraitName[];
/** Every trait by name (checked complete at compile time); js/test/contract.test.ts checks it against
 *  the Python `WidgetState`, the one list the widget's traits are made from. */
export const TRAIT_NAMES: AllTraits<typeof TRAITS> = TRAITS;
export type Model = AnyModel<Traits>;

/** The kernel's reply to the `_sweep` command: it starts the sweep in a thread and answers at once (its
 *  progress and points arrive as the sweep_* traits); `_cancel_sweep` stops it before its next budget. */
export interface SweepStarted {
  started: boolean;
  error: string;
}

/** The kernel's reply to the `_advise` command (`{target: "24GB"}`): it starts `bw.advise` in a thread and
 *  answers at once; its steps arrive as `advice_progress`, its plans as `advice_rows`. `_cancel_advise` stops
 *  it after the step under way. */
export type AdviceStarted = SweepStarted;

/** What every pane is built with. */
export interface PaneContext {
  model: Model;
  /** Aborted when the view goes away: pass it to every addEventListener. */
  signal: AbortSignal;
  experimental: Experimental | undefined;
  /** The widget's root element (carries the data-* timings the tests read). */
  root: HTMLElement;
  /** Select a node everywhere: sets the `selected` trait and highlights it in every pane. */
  select(id: string): void;
  /** Open a module in the graph (and every module above it) and bring it into view. */
  openModule(path: string): void;
  /** Tell every pane which module the graph is looking into ("" for the whole model). */
  setFocus(path: string): void;
  /** Bring the side column's tab named `name` to the front. */
  showTab(name: string): void;
  /** Draw the partition `key` names at once when the kernel made its payload ahead (js/ahead.ts); false
   *  when it did not, and the kernel's answer to the move is waited for. */
  showAhead(key: AheadKey): boolean;
}

const decoded = new WeakMap<object, GraphData>();
const utf8 = new TextDecoder();
const shownAhead = new WeakMap<Model, DataView | ArrayBuffer>();

/** Show `wire`, a payload the kernel made ahead (js/ahead.ts), in place of the `data` trait until
 *  `dropAhead`: the kernel's own payload for the same move follows it. */
export function showAhead(model: Model, wire: DataView | ArrayBuffer): void {
  shownAhead.set(model, wire);
}

/** Show the `data` trait again; true when a payload made ahead was shown. */
export function dropAhead(model: Model): boolean {
  return shownAhead.delete(model);
}

/** The `data` trait, or the payload made ahead shown in its place (`showAhead`). */
function shownTrait(model: Model): DataTrait {
  return shownAhead.get(model) ?? model.get("data");
}

/** The payload shown: the `data` trait (or one made ahead, `showAhead`) decoded, once per message however
 *  many panes ask. */
export function graphData(model: Model): GraphData {
  const trait = shownTrait(model);
  if (!(trait instanceof ArrayBuffer || ArrayBuffer.isView(trait))) return trait;
  let data = decoded.get(trait);
  if (data === undefined) {
    data = JSON.parse(utf8.decode(trait)) as GraphData;
    decoded.set(trait, data);
  }
  return data;
}

/** The payload shown when it is decoded already, else undefined: a payload not decoded yet has its landing to
 *  come (js/widget.ts), which redraws every pane, so a trait that came in its message need not decode it in
 *  that message's task (JupyterLab's own). */
export function decodedData(model: Model): GraphData | undefined {
  const trait = shownTrait(model);
  return trait instanceof ArrayBuffer || ArrayBuffer.isView(trait) ? decoded.get(trait) : trait;
}

/** Set a trait and send it to the kernel. */
export function setTrait<K extends TraitName>(model: Model, name: K, value: Traits[K]): void {
  model.set(name, value);
  model.save_changes();
}

/** Call `callback` on a change of any of `names`, until `signal` aborts. */
export function watch(model: Model, names: readonly TraitName[], callback: () => void, signal: AbortSignal): void {
  if (signal.aborted) return;
  for (const name of names) model.on(`change:${name}`, callback);
  signal.addEventListener("abort", () => {
    for (const name of names) model.off(`change:${name}`, callback);
  }, { once: true });
}
