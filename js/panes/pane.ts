/** What a pane is: its element, a redraw from the payload, and (where it makes sense) a highlight. */

import type { PaneContext, TraitName } from "../model";
import type { GraphData } from "../types";

export interface Pane {
  readonly el: HTMLElement;
  /** Redraw from the synced state: on a new payload, and on a change of the spec's `traits`. */
  update(data: GraphData): void;
  /** Show node `id` as selected ("" for none); `pan` brings it into view. */
  highlight?(id: string, pan: boolean): void;
  /** The graph looks into module `path` now ("" for the whole model). */
  focus?(path: string): void;
  /** Open module `path` and show it (the graph does; others may follow). */
  open?(path: string): void;
}

/** Where a pane goes: the top row, the main column (the graph), the side column's head, or a tab
 *  of the side column. */
export type Slot = "top" | "main" | "side" | "tab";

export interface PaneSpec {
  slot: Slot;
  /** The tab's title, for panes in the "tab" slot. */
  tab?: string;
  /** Synced traits besides `data` whose change redraws this pane. */
  traits?: readonly TraitName[];
  create(ctx: PaneContext): Pane;
}
