/** The details panel: everything known about the selected node, in full; its inputs and consumers are
 *  links that select them. */

import { element } from "../dom";
import { formatShape } from "../format";
import { formatBytes } from "../units";
import type { PaneContext } from "../model";
import { sharesMemory, sourceLabel } from "../table";
import type { GraphData, GraphNode, SavedRow } from "../types";
import type { Pane } from "./pane";

/** The panel's rows, label and text; empty texts are left out. */
export function detailRows(node: GraphNode, saved: SavedRow | undefined): [string, string][] {
  const rows: [string, string][] = [
    ["op", node.op],
    ["kind", saved ? `saved: ${saved.kind_label}` : node.kind + (node.saved_kind ? ` (${node.saved_kind})` : "")],
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

/** A piece of an args text: plain text, or the name of a node of the graph (`id`). */
export interface ArgPart {
  text: string;
  id?: string;
}

/** `args` cut into text and node names, so each input can be a link; together the parts are `args`. */
export function argParts(args: string, ids: ReadonlySet<string>): ArgPart[] {
  const parts: ArgPart[] = [];
  let last = 0;
  for (const match of args.matchAll(/[A-Za-z_][A-Za-z0-9_]*/g)) {
    if (!ids.has(match[0])) continue;
    if (match.index > last) parts.push({ text: args.slice(last, match.index) });
    parts.push({ text: match[0], id: match[0] });
    last = match.index + match[0].length;
  }
  if (last < args.length) parts.push({ text: args.slice(last) });
  return parts;
}

/** The node's inputs and consumers by the graph's edges, each once, in edge order. */
export function neighboursOf(edges: readonly [string, string][], id: string): { inputs: string[]; consumers: string[] } {
  const inputs = new Set<string>();
  const consumers = new Set<string>();
  for (const [from, to] of edges) {
    if (to === id) inputs.add(from);
    if (from === id) consumers.add(to);
  }
  return { inputs: [...inputs], consumers: [...consumers] };
}

/** `file.py:12: code` as its place and its code line (views' source_line writes it so). */
export function splitSource(source: string): { place: string; code: string } {
  const match = /^(.*?:\d+)(?:: (.*))?$/.exec(source);
  return match ? { place: match[1], code: match[2] ?? "" } : { place: "", code: source };
}

/** `text` cut after each `(`, `[`, `,`, `.` and `/`: where a long code line or path may wrap without
 *  breaking a name. Together the pieces are `text`. */
export function wrapPoints(text: string): string[] {
  return text.match(/[^([,./]*[([,./]?/g)?.filter((piece) => piece !== "") ?? [];
}

/** Text whose lines may wrap at the points `wrapPoints` finds (<wbr> between the pieces). */
function wrappable(className: string, tag: "div" | "code", text: string): HTMLElement {
  const el = element(tag, className);
  wrapPoints(text).forEach((piece, i) => {
    if (i) el.append(element("wbr"));
    el.append(document.createTextNode(piece));
  });
  return el;
}

export function detailsPane({ model, select, signal }: PaneContext): Pane {
  const el = element("div", "bwd-details");
  let data: GraphData | null = null;
  let ids = new Set<string>();

  const link = (id: string): HTMLButtonElement => {
    const button = element("button", "bwd-node-link", id);
    button.dataset.node = id;
    button.title = `select ${id}`;
    button.addEventListener("click", () => select(id), { signal });
    return button;
  };

  /** The text of a row as the panel shows it: args with linked names, source as place and code. */
  function value(label: string, text: string): HTMLElement {
    const dd = element("dd");
    if (label === "args") {
      for (const part of argParts(text, ids)) dd.append(part.id ? link(part.id) : document.createTextNode(part.text));
    } else if (label === "source") {
      const { place, code } = splitSource(text);
      dd.classList.add("bwd-source");
      if (place) dd.append(wrappable("bwd-source-place", "div", place));
      if (code) dd.append(wrappable("bwd-source-code", "code", code));
    } else {
      dd.textContent = text;
    }
    return dd;
  }

  function render(id: string): void {
    const node = data?.nodes.find((n) => n.id === id);
    if (!data || !node) {
      el.replaceChildren(element("div", "bwd-hint", "Click a node, a saved tensor or a code line."));
      return;
    }
    const dl = element("dl");
    const rows = detailRows(node, data.saved.find((s) => s.name === id));
    const { inputs, consumers } = neighboursOf(data.edges, id);
    const named = new Set(argParts(node.args, ids).flatMap((p) => (p.id ? [p.id] : [])));
    const unnamed = inputs.filter((input) => !named.has(input)); // inputs the (shortened) args text leaves out
    for (const [label, text] of rows) {
      dl.append(element("dt", "", label), value(label, text));
      if (label === "args" && unnamed.length) dl.append(element("dt", "", "inputs"), linkList(unnamed));
    }
    if (!node.args && unnamed.length) dl.append(element("dt", "", "inputs"), linkList(unnamed));
    dl.append(element("dt", "", "consumers"), consumers.length ? linkList(consumers) : element("dd", "bwd-hint", "none in this graph"));
    el.replaceChildren(element("div", "bwd-details-title", node.id), dl);
  }

  function linkList(names: string[]): HTMLElement {
    const dd = element("dd", "bwd-node-links");
    dd.append(...names.map(link));
    return dd;
  }

  return {
    el,
    update(next) {
      data = next;
      ids = new Set(next.nodes.map((n) => n.id));
      render(model.get("selected"));
    },
    highlight: (id) => render(id),
  };
}
