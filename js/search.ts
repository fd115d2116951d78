/** Search nodes by name or op; a collapsed group holding a match is a match too. */

import { representative } from "./grouping";
import type { GraphNode } from "./types";

export function searchNodes(nodes: GraphNode[], query: string): GraphNode[] {
  const needle = query.trim().toLowerCase();
  if (!needle) return [];
  return nodes.filter((n) => n.id.toLowerCase().includes(needle) || n.op.toLowerCase().includes(needle));
}

export function visibleMatches(matches: GraphNode[], expanded: Set<string>): Set<string> {
  return new Set(matches.map((n) => representative(n, expanded)));
}
