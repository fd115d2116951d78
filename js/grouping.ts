/** Module groups: which nodes are visible, and which collapsed groups stand for the rest. The kernel
 *  computes the module tree and the first views (views/grouping.py); drilling down runs here, and
 *  js/test/contract.test.ts holds it equal to the Python twin on the contract fixture. */

import type { GraphData, GraphNode, ModuleRow } from "./types";

export const GROUP_PREFIX = "group:";

export interface VisibleNode {
  id: string; // a graph node id, or GROUP_PREFIX + module path
  cluster: string; // the expanded module this node is drawn inside ("" for the top level)
  node?: GraphNode;
  path?: string; // for groups
  size?: number; // for groups: graph nodes inside
}

/** What an edge carries, where not backward data flow (the default). */
export type EdgeKind = "saved" | "gradient";

export interface VisibleGraph {
  nodes: VisibleNode[];
  edges: [string, string][];
  /** Edges out of a collapsed module that carry only values saved in forward: they say where a saved
   *  tensor is read, not the order backward runs in, so the layout does not rank by them. */
  savedOnly: Set<string>;
  /** What a drawn edge carries when all the edges it stands for agree (views/grouping.py `edge_kinds`):
   *  "saved" (a value saved in forward, read here) or "gradient" (into a gradient output), by edgeKey. */
  edgeKinds: Map<string, EdgeKind>;
}

export const edgeKey = (from: string, to: string): string => `${from}\u0000${to}`;

/** The payload's module tree as maps (views.modules: the kernel counts, the browser looks up). */
export interface ModuleTree {
  size: Map<string, number>; // nodes under a module, nested ones included ("" is the whole model)
  direct: Map<string, number>; // nodes whose own module it is
  children: Map<string, string[]>; // "" is the top level
  savedBytes: Map<string, number>; // saved activation bytes of this partition under a module
}

/** "a.b.c" -> ["a", "a.b", "a.b.c"]; "" -> []. */
export function ancestors(path: string): string[] {
  if (!path) return [];
  const parts = path.split(".");
  return parts.map((_, i) => parts.slice(0, i + 1).join("."));
}

export function parentOf(path: string): string {
  const cut = path.lastIndexOf(".");
  return cut < 0 ? "" : path.slice(0, cut);
}

export function moduleTree(rows: readonly ModuleRow[]): ModuleTree {
  const tree: ModuleTree = { size: new Map(), direct: new Map(), children: new Map([["", []]]), savedBytes: new Map() };
  for (const row of rows) {
    tree.size.set(row.path, row.size);
    tree.direct.set(row.path, row.direct);
    tree.savedBytes.set(row.path, row.saved_bytes);
    if (!tree.children.has(row.path)) tree.children.set(row.path, []);
    if (row.path) tree.children.get(row.parent)?.push(row.path);
  }
  return tree;
}

/** Every module path of the tree, "" left out. */
export function modulePaths(tree: ModuleTree): string[] {
  return [...tree.size.keys()].filter(Boolean);
}

/** The visible id standing for a node: itself, or its outermost collapsed module. */
export function representative(node: GraphNode, expanded: Set<string>): string {
  for (const path of ancestors(node.module)) {
    if (!expanded.has(path)) return GROUP_PREFIX + path;
  }
  return node.id;
}

/** What is drawn with `expanded` open: views/grouping.py `visible_graph`'s twin, held equal to it on
 *  the contract fixture. */
export function visibleGraph(data: GraphData, expanded: Set<string>): VisibleGraph {
  const sizes = new Map(data.views.modules.map((row) => [row.path, row.size]));
  const byId = new Map<string, VisibleNode>();
  const owner = new Map<string, string>();
  for (const node of data.nodes) {
    const id = representative(node, expanded);
    owner.set(node.id, id);
    if (byId.has(id)) continue;
    if (id === node.id) {
      byId.set(id, { id, cluster: node.module, node });
    } else {
      const path = id.slice(GROUP_PREFIX.length);
      byId.set(id, { id, cluster: parentOf(path), path, size: sizes.get(path) ?? 0 });
    }
  }
  const saved = new Set(data.nodes.filter((n) => n.kind === "saved").map((n) => n.id));
  const gradients = new Set(data.nodes.filter((n) => n.kind === "gradient").map((n) => n.id));
  const carries = new Map<string, boolean>(); // edge key -> whether it carries saved values only
  const readsSaved = new Map<string, boolean>();
  const intoGradient = new Map<string, boolean>();
  const edges: [string, string][] = [];
  for (const [source, target] of data.edges) {
    const from = owner.get(source);
    const to = owner.get(target);
    if (!from || !to || from === to) continue;
    const key = edgeKey(from, to);
    if (!carries.has(key)) edges.push([from, to]);
    carries.set(key, (carries.get(key) ?? true) && saved.has(source) && from !== source);
    readsSaved.set(key, (readsSaved.get(key) ?? true) && saved.has(source));
    intoGradient.set(key, (intoGradient.get(key) ?? true) && gradients.has(target));
  }
  const savedOnly = new Set([...carries].filter(([, only]) => only).map(([key]) => key));
  const edgeKinds = new Map<string, EdgeKind>([...readsSaved].filter(([, only]) => only).map(([key]) => [key, "saved"]));
  for (const [key, only] of intoGradient) if (only && !edgeKinds.has(key)) edgeKinds.set(key, "gradient");
  return { nodes: [...byId.values()], edges, savedOnly, edgeKinds };
}

/** The kernel's first views to try, most detailed first (views.first), as sets. */
export function firstViews(data: GraphData): Set<string>[] {
  return data.views.first.map((open) => new Set(open));
}

/** Open module `path` and every module above it. */
export function openPath(path: string, expanded: Set<string>): Set<string> {
  const result = new Set(expanded);
  for (const open of ancestors(path)) result.add(open);
  return result;
}

/** Open every module above a node so that it is drawn itself. */
export function reveal(node: GraphNode, expanded: Set<string>): Set<string> {
  return openPath(node.module, expanded);
}

/** Open a collapsed module, or close an open one together with everything inside it. */
export function toggle(path: string, expanded: Set<string>): Set<string> {
  const result = new Set(expanded);
  if (result.has(path)) {
    for (const open of expanded) {
      if (open === path || open.startsWith(path + ".")) result.delete(open);
    }
  } else {
    result.add(path);
  }
  return result;
}
