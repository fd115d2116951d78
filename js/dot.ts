/** DOT text for the visible graph. Labels are escaped: a name can never become markup. */

import type { VisibleGraph, VisibleNode } from "./grouping";
import { formatShape } from "./format";

/** A DOT double-quoted string: backslashes and quotes escaped, newlines as \n. */
export function quote(text: string): string {
  return '"' + text.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\r?\n/g, "\\n") + '"';
}

const STYLE: Record<string, string> = {
  saved: 'shape=box, style="filled", fillcolor="#fde68a", color="#b45309"',
  tangent: 'shape=box, style="filled", fillcolor="#bfdbfe", color="#1d4ed8"',
  gradient: 'shape=box, style="rounded,filled,bold", fillcolor="#bbf7d0", color="#15803d"',
  op: 'shape=box, style="rounded,filled", fillcolor="#f3f4f6", color="#9ca3af"',
  recomputed: 'shape=box, style="rounded,filled,dashed", fillcolor="#fce7f3", color="#be185d"',
  group: 'shape=folder, style="filled", fillcolor="#e0e7ff", color="#4338ca"',
};

export function nodeLabel(v: VisibleNode): string {
  if (v.path !== undefined) return `${v.path} \u25B8\n${v.size} nodes`;
  const n = v.node!;
  if (n.kind === "gradient") return `${n.id}\n${n.op}\n\u2207 ${n.grad_of.join(", ")}`;
  if (n.kind === "saved" || n.kind === "tangent") return `${n.id}\n${formatShape(n.shape)} ${n.dtype}`;
  return `${n.id}\n${n.op}`;
}

export function nodeKind(v: VisibleNode): string {
  if (v.path !== undefined) return "group";
  return v.node!.recomputed ? "recomputed" : v.node!.kind;
}

/** Element ids in the SVG are `v<index>` into graph.nodes: no user text in ids. */
export function buildDot(graph: VisibleGraph): string {
  const index = new Map(graph.nodes.map((v, i) => [v.id, i]));
  const byCluster = new Map<string, VisibleNode[]>();
  for (const v of graph.nodes) {
    if (!byCluster.has(v.cluster)) byCluster.set(v.cluster, []);
    byCluster.get(v.cluster)!.push(v);
  }
  const clusters = [...byCluster.keys()].filter((c) => c !== "");
  const allClusters = new Set<string>();
  for (const c of clusters) {
    const parts = c.split(".");
    for (let i = 1; i <= parts.length; i++) allClusters.add(parts.slice(0, i).join("."));
  }
  const childClusters = new Map<string, string[]>();
  for (const c of [...allClusters].sort()) {
    const cut = c.lastIndexOf(".");
    const parent = cut < 0 ? "" : c.slice(0, cut);
    if (!childClusters.has(parent)) childClusters.set(parent, []);
    childClusters.get(parent)!.push(c);
  }
  const lines = [
    "digraph backward {",
    '  graph [rankdir=TB, nslimit=1, nslimit1=1, mclimit=0.1, ranksep=0.25, nodesep=0.15, fontname="Helvetica", fontsize=10, bgcolor="transparent"];',
    '  node [fontname="Helvetica", fontsize=9, margin="0.06,0.02", height=0.2];',
    '  edge [arrowsize=0.4, color="#9ca3af"];',
  ];
  let clusterCount = 0;
  const emit = (cluster: string, indent: string) => {
    for (const v of byCluster.get(cluster) ?? []) {
      const i = index.get(v.id)!;
      lines.push(`${indent}v${i} [id="v${i}", label=${quote(nodeLabel(v))}, ${STYLE[nodeKind(v)]}];`);
    }
    for (const child of childClusters.get(cluster) ?? []) {
      lines.push(`${indent}subgraph cluster_${clusterCount++} {`);
      lines.push(`${indent}  label=${quote(child)}; style="rounded"; color="#c7d2fe"; fontcolor="#4338ca";`);
      emit(child, indent + "  ");
      lines.push(`${indent}}`);
    }
  };
  emit("", "  ");
  for (const [from, to] of graph.edges) lines.push(`  v${index.get(from)} -> v${index.get(to)};`);
  lines.push("}");
  return lines.join("\n");
}
