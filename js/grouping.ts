/** Module groups: which nodes are visible, and which collapsed groups stand for the rest. */

import type { GraphData, GraphNode } from "./types";

export const GROUP_PREFIX = "group:";

export interface VisibleNode {
  id: string; // a graph node id, or GROUP_PREFIX + module path
  cluster: string; // the expanded module this node is drawn inside ("" for the top level)
  node?: GraphNode;
  path?: string; // for groups
  size?: number; // for groups: graph nodes inside
}

export interface VisibleGraph {
  nodes: VisibleNode[];
  edges: [string, string][];
  /** Edges out of a collapsed module that carry only values saved in forward: they say where a saved
   *  tensor is read, not the order backward runs in, so the layout does not rank by them. */
  savedOnly: Set<string>;
}

export const edgeKey = (from: string, to: string): string => `${from}\u0000${to}`;

export interface ModuleTree {
  size: Map<string, number>; // nodes under a module, nested ones included
  direct: Map<string, number>; // nodes whose own module it is
  children: Map<string, string[]>; // "" is the top level
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

export function buildModuleTree(nodes: GraphNode[]): ModuleTree {
  const size = new Map<string, number>();
  const direct = new Map<string, number>();
  const children = new Map<string, string[]>([["", []]]);
  for (const node of nodes) {
    direct.set(node.module, (direct.get(node.module) ?? 0) + 1);
    for (const path of ancestors(node.module)) {
      if (!size.has(path)) {
        size.set(path, 0);
        const parent = parentOf(path);
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent)!.push(path);
        children.set(path, children.get(path) ?? []);
      }
      size.set(path, size.get(path)! + 1);
    }
  }
  return { size, direct, children };
}

/** The visible id standing for a node: itself, or its outermost collapsed module. */
export function representative(node: GraphNode, expanded: Set<string>): string {
  for (const path of ancestors(node.module)) {
    if (!expanded.has(path)) return GROUP_PREFIX + path;
  }
  return node.id;
}

export function visibleGraph(data: GraphData, expanded: Set<string>): VisibleGraph {
  const tree = buildModuleTree(data.nodes);
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
      byId.set(id, { id, cluster: parentOf(path), path, size: tree.size.get(path) ?? 0 });
    }
  }
  const saved = new Set(data.nodes.filter((n) => n.kind === "saved").map((n) => n.id));
  const carries = new Map<string, boolean>(); // edge key -> whether it carries saved values only
  const edges: [string, string][] = [];
  for (const [source, target] of data.edges) {
    const from = owner.get(source);
    const to = owner.get(target);
    if (!from || !to || from === to) continue;
    const key = edgeKey(from, to);
    if (!carries.has(key)) edges.push([from, to]);
    carries.set(key, (carries.get(key) ?? true) && saved.has(source) && from !== source);
  }
  const savedOnly = new Set([...carries].filter(([, only]) => only).map(([key]) => key));
  return { nodes: [...byId.values()], edges, savedOnly };
}

/** The most nodes a first view may draw before it is tried for readability. */
export const FIRST_VIEW_LIMIT = 40;

/** Every module at most `depth` deep open (depth 1: the top-level modules). */
export function openToDepth(tree: ModuleTree, depth: number): Set<string> {
  return new Set([...tree.size.keys()].filter((path) => ancestors(path).length <= depth));
}

/** How many nodes `visibleGraph` would draw. */
export function visibleCount(tree: ModuleTree, expanded: Set<string>, path = ""): number {
  let count = tree.direct.get(path) ?? 0;
  for (const child of tree.children.get(path) ?? []) count += expanded.has(child) ? visibleCount(tree, expanded, child) : 1;
  return count;
}

/**
 * First views to try, most detailed first: modules open to depth d for each d whose view draws at
 * most `limit` nodes, down to every module collapsed (the top-level modules, as Model Explorer
 * opens a model). The graph pane draws the first of them that is readable in its pane.
 */
export function firstViews(data: GraphData, limit = FIRST_VIEW_LIMIT): Set<string>[] {
  const tree = buildModuleTree(data.nodes);
  const deepest = Math.max(0, ...[...tree.size.keys()].map((path) => ancestors(path).length));
  const views: Set<string>[] = [];
  for (let depth = deepest; depth >= 0; depth--) {
    const expanded = openToDepth(tree, depth);
    if (depth === 0 || visibleCount(tree, expanded) <= limit) views.push(expanded);
  }
  return views;
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
