/** What the selection is computed from and what it feeds, along the drawn edges: the rest is dimmed, as
 *  Model Explorer does, so a value's path through a big backward graph can be followed by eye. */

export type Lineage = {
  /** Drawn nodes the selection is computed from (it is reachable from each). */
  upstream: Set<string>;
  /** Drawn nodes computed from the selection. */
  downstream: Set<string>;
  /** Indices into `edges` of the edges on those paths. */
  edges: Set<number>;
};

/** The lineage of drawn node `id` in the drawn graph `edges` ([from, to] pairs of drawn ids). A drawing of
 *  collapsed modules may hold a cycle; a node on it is both upstream and downstream. */
export function lineageOf(edges: readonly (readonly [string, string])[], id: string): Lineage {
  const reach = (from: 0 | 1): Set<string> => {
    const next = new Map<string, string[]>();
    for (const edge of edges) {
      const list = next.get(edge[from]) ?? [];
      list.push(edge[1 - from]);
      next.set(edge[from], list);
    }
    const seen = new Set<string>();
    const stack = [id];
    while (stack.length) {
      for (const other of next.get(stack.pop()!) ?? []) {
        if (!seen.has(other)) {
          seen.add(other);
          stack.push(other);
        }
      }
    }
    seen.delete(id);
    return seen;
  };
  const downstream = reach(0);
  const upstream = reach(1);
  const on = new Set<number>();
  edges.forEach(([from, to], index) => {
    const intoSelection = upstream.has(from) && (to === id || upstream.has(to));
    const outOfSelection = downstream.has(to) && (from === id || downstream.has(from));
    if (intoSelection || outOfSelection) on.add(index);
  });
  return { upstream, downstream, edges: on };
}
