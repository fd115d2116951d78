/** The details panel: everything known about the selected node. */

import { element } from "../dom";
import { formatBytes, formatShape } from "../format";
import type { PaneContext } from "../model";
import { sharesMemory, sourceLabel } from "../table";
import type { GraphData, GraphNode, SavedRow } from "../types";
import type { Pane } from "./pane";

/** The panel's rows, label and text; empty texts are left out. */
export function detailRows(node: GraphNode, saved: SavedRow | undefined): [string, string][] {
  const rows: [string, string][] = [
    ["op", node.op],
    ["kind", node.kind + (node.saved_kind ? ` (${node.saved_kind})` : "")],
    ["shape", `${formatShape(node.shape)} ${node.dtype}`],
    ["args", node.args],
    ["module", node.module || "(top level)"],
    ["source", node.source],
  ];
  if (node.grad_of.length) rows.push(["gradient of", node.grad_of.join(", ")]);
  if (saved) {
    rows.push(["saved", `${formatBytes(saved.bytes)}${saved.source ? ` \u00B7 ${sourceLabel(saved)}` : ""}`]);
    rows.push(["adds", `${formatBytes(saved.activation_bytes)} on top of the forward inputs`]);
    rows.push(["memory", sharesMemory(saved)]);
    rows.push(["why saved", saved.why]);
    rows.push(["torch says", saved.torch_reason]);
  }
  if (node.recomputed) rows.push(["why recomputed", node.why_recomputed]);
  return rows.filter(([, text]) => text !== "");
}

export function detailsPane({ model }: PaneContext): Pane {
  const el = element("div", "bwd-details");
  let data: GraphData | null = null;

  function render(id: string): void {
    const node = data?.nodes.find((n) => n.id === id);
    if (!data || !node) {
      el.replaceChildren(element("div", "bwd-hint", "Click a node, a saved tensor or a code line."));
      return;
    }
    const dl = element("dl");
    for (const [label, text] of detailRows(node, data.saved.find((s) => s.name === id))) {
      dl.append(element("dt", "", label), element("dd", "", text));
    }
    el.replaceChildren(element("div", "bwd-details-title", node.id), dl);
  }

  return {
    el,
    update(next) {
      data = next;
      render(model.get("selected"));
    },
    highlight: (id) => render(id),
  };
}
