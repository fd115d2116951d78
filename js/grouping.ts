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
  run?: Run; // for a folded run of alike sibling modules: `path` is then its label
}

/** What an edge carries, where not backward data flow (the default). */
export type EdgeKind = "saved" | "recomputed" | "gradient";

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
  const found: string[] = [];
  for (let dot = path.indexOf("."); dot >= 0; dot = path.indexOf(".", dot + 1)) found.push(path.slice(0, dot));
  found.push(path);
  return found;
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

/** A run of alike sibling modules numbered one after another (`0`…`31` of an nn.Sequential,
 *  `blocks.0`…`blocks.31` of a ModuleList). Folded, it is drawn as one group labelled `0–31 ×32`, so that
 *  a model whose top level is a long chain of blocks opens readable; a click shows its members. */
export interface Run {
  parent: string;
  members: string[]; // module paths, in number order
  label: string; // "0–31 ×32", "blocks.0–31 ×32": also the group's `path` and the key of its saved bytes
}

/** Shorter runs of alike siblings are drawn one by one. */
export const MIN_RUN = 4;

const lastName = (path: string) => path.slice(path.lastIndexOf(".") + 1);

/** A module's shape: its children's names, nested (two blocks of one class match, though the first
 *  block's ops differ: it computes no gradient for its input). */
function shapeOf(tree: ModuleTree, path: string, memo: Map<string, string>): string {
  let shape = memo.get(path);
  if (shape === undefined) {
    const children = (tree.children.get(path) ?? []).map((child) => `${lastName(child)}(${shapeOf(tree, child, memo)})`);
    shape = children.sort().join(",");
    memo.set(path, shape);
  }
  return shape;
}

/** Every run of at least `minRun` alike sibling modules named by consecutive integers, parents in tree
 *  order. Alike: the same nested children; modules with none (a Linear, a ReLU) by the ops in them. */
export function findRuns(tree: ModuleTree, nodes: readonly GraphNode[], minRun = MIN_RUN): Run[] {
  const ops = new Map<string, Set<string>>();
  for (const n of nodes) {
    if (!ops.has(n.module)) ops.set(n.module, new Set());
    ops.get(n.module)!.add(`${n.kind}:${n.op}`);
  }
  const opsOf = (path: string) => [...(ops.get(path) ?? [])].sort().join(" ");
  const memo = new Map<string, string>();
  const alike = (a: string, b: string) => {
    const shape = shapeOf(tree, a, memo);
    return shape === shapeOf(tree, b, memo) && (shape !== "" || opsOf(a) === opsOf(b));
  };
  const runs: Run[] = [];
  for (const [parent, children] of tree.children) {
    const numbered = children.filter((c) => /^\d+$/.test(lastName(c))).sort((a, b) => Number(lastName(a)) - Number(lastName(b)));
    let start = 0;
    for (let i = 1; i <= numbered.length; i++) {
      const continues = i < numbered.length
        && Number(lastName(numbered[i])) === Number(lastName(numbered[i - 1])) + 1
        && alike(numbered[i], numbered[start]);
      if (continues) continue;
      const members = numbered.slice(start, i);
      if (members.length >= minRun) {
        const prefix = parent ? `${parent}.` : "";
        runs.push({ parent, members, label: `${prefix}${lastName(members[0])}\u2013${lastName(members[members.length - 1])} \u00D7${members.length}` });
      }
      start = i;
    }
  }
  return runs;
}

/** The runs drawn folded with `expanded` open: those whose parent is open (or the top level). */
export function visibleRuns(runs: readonly Run[], expanded: Set<string>): Run[] {
  return runs.filter((run) => !run.parent || ancestors(run.parent).every((path) => expanded.has(path)));
}

/** The run that module `path` is a member of, if any. */
export function runHolding(path: string, runs: readonly Run[]): Run | undefined {
  return runs.find((run) => run.members.includes(path));
}

/** The folded runs left once module `path` (or a node in it) is to be seen: a run holding it or a module
 *  above it unfolds. */
export function unfoldAround(path: string, folded: readonly Run[]): Run[] {
  const above = new Set(ancestors(path));
  return folded.filter((run) => !run.members.some((member) => above.has(member)));
}

/** Saved bytes under each run, keyed by its label (as `ModuleTree.savedBytes` is by path). */
export function runBytes(runs: readonly Run[], savedBytes: ReadonlyMap<string, number>): Map<string, number> {
  return new Map(runs.map((run) => [run.label, run.members.reduce((sum, m) => sum + (savedBytes.get(m) ?? 0), 0)]));
}

const NO_RUNS: ReadonlyMap<string, Run> = new Map();

/** Member module path -> its folded run. */
export function foldedByMember(folded: readonly Run[]): Map<string, Run> {
  return new Map(folded.flatMap((run) => run.members.map((member) => [member, run] as const)));
}

/** The visible id standing for a node: itself, its outermost collapsed module, or the folded run (by
 *  `foldedByMember`) holding that module. */
export function representative(node: GraphNode, expanded: Set<string>, folded: ReadonlyMap<string, Run> = NO_RUNS): string {
  return groupOf(node.module, expanded, folded) || node.id;
}

/** The group drawn for the nodes of `module` (its outermost collapsed module, or the folded run holding
 *  it), or "" when they are drawn themselves: one answer per module, which visibleGraph asks once per
 *  module rather than once per node (a 48-layer model's first view asked it 12,000 times, issue 22). */
function groupOf(module: string, expanded: Set<string>, folded: ReadonlyMap<string, Run>): string {
  for (const path of ancestors(module)) {
    const run = folded.get(path);
    if (run) return GROUP_PREFIX + run.label;
    if (!expanded.has(path)) return GROUP_PREFIX + path;
  }
  return "";
}

/** What is drawn with `expanded` open (and the runs `folded` drawn as one group each): with no runs
 *  folded, views/grouping.py `visible_graph`'s twin, held equal to it on the contract fixture. */
export function visibleGraph(data: GraphData, expanded: Set<string>, folded: readonly Run[] = []): VisibleGraph {
  const sizes = new Map(data.views.modules.map((row) => [row.path, row.size]));
  const byMember = foldedByMember(folded);
  const byId = new Map<string, VisibleNode>();
  const owner = new Map<string, string>();
  const groups = new Map<string, string>(); // module -> groupOf(module)
  for (const node of data.nodes) {
    let group = groups.get(node.module);
    if (group === undefined) groups.set(node.module, (group = groupOf(node.module, expanded, byMember)));
    const id = group || node.id;
    owner.set(node.id, id);
    if (byId.has(id)) continue;
    if (id === node.id) {
      byId.set(id, { id, cluster: node.module, node });
    } else {
      const path = id.slice(GROUP_PREFIX.length);
      const run = folded.find((r) => r.label === path);
      const size = run ? run.members.reduce((sum, m) => sum + (sizes.get(m) ?? 0), 0) : sizes.get(path) ?? 0;
      byId.set(id, run ? { id, cluster: run.parent, path, size, run } : { id, cluster: parentOf(path), path, size });
    }
  }
  const saved = new Set(data.nodes.filter((n) => n.kind === "saved").map((n) => n.id));
  const forwardValues = new Set([...saved, ...data.nodes.filter((n) => n.recomputed).map((n) => n.id)]);
  const gradients = new Set(data.nodes.filter((n) => n.kind === "gradient").map((n) => n.id));
  const carries = new Map<string, boolean>(); // edge key -> whether it carries forward values only
  const readsSaved = new Map<string, boolean>();
  const readsForward = new Map<string, boolean>();
  const intoGradient = new Map<string, boolean>();
  const edges: [string, string][] = [];
  for (const [source, target] of data.edges) {
    const from = owner.get(source);
    const to = owner.get(target);
    if (!from || !to || from === to) continue;
    const key = edgeKey(from, to);
    if (!carries.has(key)) edges.push([from, to]);
    carries.set(key, (carries.get(key) ?? true) && forwardValues.has(source) && from !== source);
    readsSaved.set(key, (readsSaved.get(key) ?? true) && saved.has(source));
    readsForward.set(key, (readsForward.get(key) ?? true) && forwardValues.has(source));
    intoGradient.set(key, (intoGradient.get(key) ?? true) && gradients.has(target));
  }
  const savedOnly = new Set([...carries].filter(([, only]) => only).map(([key]) => key));
  const edgeKinds = new Map<string, EdgeKind>([...readsSaved].filter(([, only]) => only).map(([key]) => [key, "saved"]));
  for (const [key, only] of readsForward) if (only && !edgeKinds.has(key)) edgeKinds.set(key, "recomputed");
  for (const [key, only] of intoGradient) if (only && !edgeKinds.has(key)) edgeKinds.set(key, "gradient");
  return { nodes: [...byId.values()], edges, savedOnly, edgeKinds };
}

/** The kernel's first views to try, most detailed first (views.first), as sets. */
export function firstViews(data: GraphData): Set<string>[] {
  return data.views.first.map((open) => new Set(open));
}

/** A first view to try: modules open, and runs of alike siblings folded into one group each. */
export interface Candidate {
  open: Set<string>;
  folded: Run[];
}

/** The kernel's first views (most detailed first), then each again with the runs it shows folded: a
 *  model whose top level is a long chain of alike blocks, not readable drawn whole, opens as `0–31 ×32`. */
export function firstViewCandidates(views: readonly Set<string>[], runs: readonly Run[]): Candidate[] {
  const plain = views.map((open) => ({ open, folded: [] as Run[] }));
  const folded = views.map((open) => ({ open, folded: visibleRuns(runs, open) })).filter((c) => c.folded.length);
  return [...plain, ...folded];
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
