/** Every pane, in the order they are laid out in their slot. A new pane: one file, one line here. */

import { codePane } from "./code";
import { detailsPane } from "./details";
import { graphPane } from "./graph";
import { headerPane } from "./header";
import { memoryPane } from "./memory";
import type { PaneSpec } from "./pane";
import { savedPane } from "./saved";
import { studioPane } from "./studio";

const STUDIO_TRAITS = [
  "comparison_rows", "compare_index", "sweep_points", "sweep_index", "sweep_progress", "busy", "can_rerun", "can_advise",
  "advice_rows", "advice_index", "advice_summary", "advice_progress",
] as const;

export const PANES: readonly PaneSpec[] = [
  { slot: "top", create: headerPane, traits: ["partitioner", "memory_budget", "graph_index", "busy", "error", "previous", "can_rerun"] },
  { slot: "main", create: graphPane },
  { slot: "side", create: detailsPane },
  { slot: "tab", tab: "saved", create: savedPane },
  { slot: "tab", tab: "memory", create: memoryPane, traits: ["sweep_points", "sweep_index"] },
  { slot: "tab", tab: "code", create: codePane },
  { slot: "tab", tab: "partitions", create: studioPane, traits: STUDIO_TRAITS },
];
