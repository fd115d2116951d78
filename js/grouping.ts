/** Module groups: which nodes are visible, and which collapsed groups stand for the rest. */

import type { GraphData, GraphNode } from "./types";

export const GROUP_PREFIX = "group:";
export const DEFAULT_VISIBLE_LIMIT = 300;

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
}

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
  const seen = new Set<string>();
  const edges: [string, string][] = [];
  for (const [source, target] of data.edges) {
    const from = owner.get(source);
    const to = owner.get(target);
    if (!from || !to || from === to) continue;
    const key = from + "\u0000" + to;
    if (seen.has(key)) continue;
    seen.add(key);
    edges.push([from, to]);
  }
  return { nodes: [...byId.values()], edges };
}

/** Open module groups breadth first while the graph stays within `limit` visible nodes. */
export function initialExpansion(data: GraphData, limit = DEFAULT_VISIBLE_LIMIT): Set<string> {
  const tree = buildModuleTree(data.nodes);
  const expanded = new Set<string>();
  let visible = (tree.direct.get("") ?? 0) + (tree.children.get("") ?? []).length;
  const queue = [...(tree.children.get("") ?? [])];
  while (queue.length) {
    const path = queue.shift()!;
    const kids = tree.children.get(path) ?? [];
    const grown = visible - 1 + (tree.direct.get(path) ?? 0) + kids.length;
    if (grown > limit) continue;
    expanded.add(path);
    visible = grown;
    queue.push(...kids);
  }
  return expanded;
}

/** Open every module above a node so that it is drawn itself. */
export function reveal(node: GraphNode, expanded: Set<string>): Set<string> {
  const result = new Set(expanded);
  for (const path of ancestors(node.module)) result.add(path);
  return result;
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
