/** What a pane is: its element, a redraw from the payload, and (where it makes sense) a highlight. */

import type { PaneContext, TraitName } from "../model";
import type { GraphData } from "../types";

export interface Pane {
  readonly el: HTMLElement;
  /** Redraw from the synced state: on a new payload, and on a change of the spec's `traits`. */
  update(data: GraphData): void;
  /** Show node `id` as selected ("" for none); `pan` brings it into view. */
  highlight?(id: string, pan: boolean): void;
}

/** Where a pane goes: the top row, the main column (the graph) or the side column. */
export type Slot = "top" | "main" | "side";

export interface PaneSpec {
  slot: Slot;
  /** Synced traits besides `data` whose change redraws this pane. */
  traits?: readonly TraitName[];
  create(ctx: PaneContext): Pane;
}
