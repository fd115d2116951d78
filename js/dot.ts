/** DOT text for the visible graph. Labels are escaped: a name can never become markup. Colours are
 *  not here: nodes and clusters carry classes, and the widget's CSS colours them from the theme.
 *  views/dot.py `build_dot` writes the same text for the static outputs (adding colours there);
 *  js/test/contract.test.ts holds the two equal on the contract fixture's payloads. */

import { formatShape } from "./format";
import { formatBytes } from "./units";
import { edgeKey, type VisibleGraph, type VisibleNode } from "./grouping";

/** A DOT double-quoted string: backslashes and quotes escaped, newlines as \n. */
export function quote(text: string): string {
  return '"' + text.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\r?\n/g, "\\n") + '"';
}

const SHAPE: Record<string, string> = {
  saved: 'shape=box, style="filled"',
  tangent: 'shape=box, style="filled"',
  gradient: 'shape=box, style="rounded,filled,bold"',
  op: 'shape=box, style="rounded,filled"',
  recomputed: 'shape=box, style="rounded,filled,dashed"',
  group: 'shape=box3d, style="filled"',
};

/** The label's first line is the node's id (or the module's path): tests and search rely on it. */
export function nodeLabel(v: VisibleNode, savedBytes?: ReadonlyMap<string, number>): string {
  if (v.path !== undefined) {
    const bytes = savedBytes?.get(v.path);
    return `${v.path} \u25B8\n${v.size} nodes${bytes ? ` \u00B7 ${formatBytes(bytes)} saved` : ""}`;
  }
  const n = v.node!;
  if (n.kind === "gradient") return `${n.id}\n\u2207 ${n.grad_of.join(", ")}`;
  if (n.kind === "saved" || n.kind === "tangent") return `${n.id}\n${formatShape(n.shape)} ${shortDtype(n.dtype)}`;
  const op = n.op.replace(/^aten\./, "");
  return n.id === op || n.id.startsWith(`${op}_`) ? n.id : `${n.id}\n${op}`; // `mm_3` needs no second `mm`
}

/** float32 -> f32, bfloat16 -> bf16, int64 -> i64: labels stay narrow (the details say it in full). */
export function shortDtype(dtype: string): string {
  return dtype.replace(/^(b?)float(\d+)$/, "$1f$2").replace(/^u?int(\d+)$/, (m, bits) => `${m.startsWith("u") ? "u" : "i"}${bits}`);
}

/** Big drawings lay out with Graphviz's effort limits (the flat graph of a large model would not
 *  finish); small ones get its full effort, which keeps them compact. */
export const QUICK_LAYOUT_ABOVE = 150;

export function nodeKind(v: VisibleNode): string {
  if (v.path !== undefined) return "group";
  return v.node!.recomputed ? "recomputed" : v.node!.kind;
}

/** Every open module drawn as a cluster, sorted: cluster `c<i>` in the SVG is the i-th. */
export function clusterPaths(graph: VisibleGraph): string[] {
  const all = new Set<string>();
  for (const v of graph.nodes) {
    if (!v.cluster) continue;
    const parts = v.cluster.split(".");
    for (let i = 1; i <= parts.length; i++) all.add(parts.slice(0, i).join("."));
  }
  return [...all].sort();
}

/** Element ids in the SVG are `v<index>` into graph.nodes, `e<index>` into graph.edges and `c<index>` into clusterPaths(graph):
 *  no user text in ids. `savedBytes` (saved bytes under each module) goes into group labels; `rankdir`
 *  LR lays a short chain out across a wide pane. */
/** An edge's DOT attributes (views/dot.py `edge_attributes`' twin): saved values do not rank the layout
 *  when read out of a collapsed module; saved-value reads are dashed, and each kind has its CSS class. */
export function edgeAttributes(graph: VisibleGraph, from: string, to: string): string[] {
  const key = edgeKey(from, to);
  const attributes = graph.savedOnly?.has(key) ? ["constraint=false"] : [];
  const kind = graph.edgeKinds?.get(key);
  if (kind === "saved") attributes.push('class="e-saved"', 'style="dashed"');
  else if (kind === "recomputed") attributes.push('class="e-recomputed"', 'style="dotted"');
  else if (kind === "gradient") attributes.push('class="e-gradient"');
  return attributes;
}

export function buildDot(graph: VisibleGraph, savedBytes?: ReadonlyMap<string, number>, rankdir: "TB" | "LR" = "TB"): string {
  const index = new Map(graph.nodes.map((v, i) => [v.id, i]));
  const byCluster = new Map<string, VisibleNode[]>();
  for (const v of graph.nodes) {
    if (!byCluster.has(v.cluster)) byCluster.set(v.cluster, []);
    byCluster.get(v.cluster)!.push(v);
  }
  const clusters = clusterPaths(graph);
  const childClusters = new Map<string, string[]>();
  for (const c of clusters) {
    const cut = c.lastIndexOf(".");
    const parent = cut < 0 ? "" : c.slice(0, cut);
    if (!childClusters.has(parent)) childClusters.set(parent, []);
    childClusters.get(parent)!.push(c);
  }
  const limits = graph.nodes.length > QUICK_LAYOUT_ABOVE ? "nslimit=1, nslimit1=1, mclimit=0.1, " : "";
  const lines = [
    "digraph backward {",
    `  graph [rankdir=${rankdir}, newrank=true, ${limits}ranksep=0.25, nodesep=0.18, fontname="Helvetica", fontsize=11, bgcolor="transparent"];`,
    '  node [fontname="Helvetica", fontsize=10, margin="0.08,0.03", height=0.2, fillcolor="white", color="gray"];',
    '  edge [arrowsize=0.5, color="gray"];',
  ];
  const emit = (cluster: string, indent: string) => {
    for (const v of byCluster.get(cluster) ?? []) {
      const i = index.get(v.id)!;
      const kind = nodeKind(v);
      lines.push(`${indent}v${i} [id="v${i}", class="k-${kind}", label=${quote(nodeLabel(v, savedBytes))}, ${SHAPE[kind]}];`);
    }
    for (const child of childClusters.get(cluster) ?? []) {
      const c = clusters.indexOf(child);
      lines.push(`${indent}subgraph cluster_${c} {`);
      lines.push(`${indent}  id="c${c}"; label=${quote(child)}; style="rounded";`);
      emit(child, indent + "  ");
      lines.push(`${indent}}`);
    }
  };
  emit("", "  ");
  graph.edges.forEach(([from, to], k) => {
    const attributes = [`id="e${k}"`, ...edgeAttributes(graph, from, to)]; // e<k>: graph.edges[k]
    lines.push(`  v${index.get(from)} -> v${index.get(to)} [${attributes.join(", ")}];`);
  });
  lines.push("}");
  return lines.join("\n");
}
