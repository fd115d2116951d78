/** Search nodes by name, op, module path or shape; a collapsed group holding a match is a match too. */

import { formatShape } from "./format";
import { representative } from "./grouping";
import type { GraphNode, SavedRow } from "./types";

/** Whether `node` answers `query` (already trimmed and lower-cased): its name or op contains it, its shape
 *  reads as it ("[4, 32, 256]" or "4, 32"), or its module path does. A dotted query matches whole path
 *  segments ("blocks.1" finds blocks.1 and blocks.1.attn, not blocks.10); a plain word anywhere ("attn"). */
export function nodeMatches(node: GraphNode, needle: string, reason = ""): boolean {
  if (node.id.toLowerCase().includes(needle) || node.op.toLowerCase().includes(needle)) return true;
  if (needle.length >= 3 && reason.toLowerCase().includes(needle)) return true;
  if (formatShape(node.shape).includes(needle)) return true;
  const module = node.module.toLowerCase();
  if (!module) return false;
  return needle.includes(".") ? `.${module}.`.includes(`.${needle.replace(/^\.|\.$/g, "")}.`) : module.includes(needle);
}

/** Matches of `query`; `reasons` (node id to why it is saved or recomputed, with torch's phrase) lets a
 *  query of three letters or more find values by their reason ("materialized", "knapsack"). */
export function searchNodes(nodes: GraphNode[], query: string, reasons: ReadonlyMap<string, string> = new Map()): GraphNode[] {
  const needle = query.trim().toLowerCase();
  if (!needle) return [];
  const direct = nodes.filter((n) => nodeMatches(n, needle));
  const found = new Set(direct);
  return [...direct, ...nodes.filter((n) => !found.has(n) && nodeMatches(n, needle, reasons.get(n.id)))];
}

/** What the search can find in a node's reason: why it is saved (torch's phrase too) or recomputed. */
export function searchReasons(nodes: readonly GraphNode[], saved: readonly SavedRow[]): Map<string, string> {
  // the reason, not the readers it names ("read by mm_3 and others in backward"): those are found by name
  const reasons = new Map(saved.map((s) => [s.name, `${s.why.replace(/read by .*? in backward/g, "")} ${s.torch_reason}`]));
  for (const n of nodes) if (n.why_recomputed) reasons.set(n.id, n.why_recomputed);
  return reasons;
}

export const RESULTS_SHOWN = 50;

/** One line of the results list: the node, its op, its module and its shape. */
export function resultText(node: GraphNode): string {
  return [node.id, node.op, node.module || "(top level)", formatShape(node.shape)].filter(Boolean).join(" \u00B7 ");
}

/** The match Enter (step 1) or Shift+Enter (step -1) goes to from `current` (-1: none yet), wrapping. */
export function stepMatch(count: number, current: number, step: 1 | -1): number {
  if (count === 0) return -1;
  if (current < 0 || current >= count) return step === 1 ? 0 : count - 1;
  return (current + step + count) % count;
}

/** "3 of 12 matches", "12 matches" before Enter, "no match", or "" with no query. */
export function matchCountText(query: string, count: number, current: number): string {
  if (!query.trim()) return "";
  if (count === 0) return "no match";
  const total = `${count} match${count === 1 ? "" : "es"}`;
  return current >= 0 ? `${current + 1} of ${total}` : total;
}

export function visibleMatches(matches: GraphNode[], expanded: Set<string>): Set<string> {
  return new Set(matches.map((n) => representative(n, expanded)));
}
