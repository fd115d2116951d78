import { describe, expect, it } from "vitest";
import { ancestors, buildModuleTree, edgeKey, firstViews, GROUP_PREFIX, openPath, openToDepth, representative, reveal, toggle, visibleCount, visibleGraph } from "../grouping";
import { buildDot } from "../dot";
import { node, transformerData } from "./synthetic";

describe("module tree", () => {
  it("lists ancestors outermost first", () => {
    expect(ancestors("blocks.3.attn")).toEqual(["blocks", "blocks.3", "blocks.3.attn"]);
    expect(ancestors("")).toEqual([]);
  });

  it("counts nodes per module, nested included", () => {
    const tree = buildModuleTree(transformerData(2, 5).nodes);
    expect(tree.size.get("blocks")).toBe(2 * 2 * 6);
    expect(tree.size.get("blocks.1.attn")).toBe(6);
    expect(tree.children.get("")).toEqual(["blocks", "embed"]);
    expect(tree.children.get("blocks")).toEqual(["blocks.1", "blocks.0"]);
  });
});

describe("collapse and expand", () => {
  it("collapsed modules stand for their nodes and edges merge", () => {
    const data = transformerData(2, 5);
    const graph = visibleGraph(data, new Set());
    expect(graph.nodes.map((v) => v.id).sort()).toEqual([GROUP_PREFIX + "blocks", GROUP_PREFIX + "embed", "tangents_1"].sort());
    expect(graph.edges).toEqual([["tangents_1", GROUP_PREFIX + "blocks"], [GROUP_PREFIX + "blocks", GROUP_PREFIX + "embed"]]);
    expect(graph.nodes.find((v) => v.id === GROUP_PREFIX + "blocks")!.size).toBe(24);
  });

  it("opening a module shows its children inside its cluster", () => {
    const data = transformerData(2, 5);
    const graph = visibleGraph(data, new Set(["blocks", "blocks.0", "blocks.0.mlp"]));
    const ids = graph.nodes.map((v) => v.id);
    expect(ids).toContain("b0_mlp_3");
    expect(ids).toContain(GROUP_PREFIX + "blocks.0.attn");
    expect(ids).toContain(GROUP_PREFIX + "blocks.1");
    expect(graph.nodes.find((v) => v.id === "b0_mlp_3")!.cluster).toBe("blocks.0.mlp");
    expect(graph.nodes.find((v) => v.id === GROUP_PREFIX + "blocks.1")!.cluster).toBe("blocks");
    for (const [from, to] of graph.edges) {
      expect(ids).toContain(from);
      expect(ids).toContain(to);
      expect(from).not.toBe(to);
    }
  });

  it("first views: modules open level by level within the limit, down to all collapsed", () => {
    const big = transformerData(32, 50);
    expect(big.nodes.length).toBeGreaterThan(3000);
    const views = firstViews(big, 40);
    const tree = buildModuleTree(big.nodes);
    const counts = views.map((open) => visibleGraph(big, open).nodes.length);
    expect(counts.every((n, i) => n === visibleCount(tree, views[i]))).toBe(true);
    expect(views[views.length - 1].size).toBe(0);
    expect(counts.slice(0, -1).every((n) => n <= 40)).toBe(true);
    expect(counts).toEqual([...counts].sort((a, b) => b - a));
    const small = transformerData(1, 3);
    expect(visibleGraph(small, firstViews(small)[0]).nodes.length).toBe(small.nodes.length);
    expect([...openToDepth(tree, 1)].sort()).toEqual(["blocks", "embed"]);
  });

  it("marks edges out of a collapsed module that carry only saved values, and only those", () => {
    const data = transformerData(1, 1);
    data.nodes.push(node("s", "a", "saved"), node("op_a", "a"), node("op_b", "b"), node("op_c", "c"));
    data.edges.push(["s", "op_b"], ["op_a", "op_c"], ["s", "op_c"]);
    const collapsed = visibleGraph(data, new Set());
    expect([...collapsed.savedOnly]).toEqual([edgeKey(GROUP_PREFIX + "a", GROUP_PREFIX + "b")]);
    const open = visibleGraph(data, new Set(["a"]));
    expect(open.savedOnly.size).toBe(0); // drawn itself, a saved value stays near what reads it
    expect(buildDot(collapsed)).toMatch(/v\d+ -> v\d+ \[constraint=false\];/);
  });

  it("toggle closes a module and everything inside it", () => {
    const open = new Set(["blocks", "blocks.0", "blocks.0.mlp", "embed"]);
    expect([...toggle("blocks", open)]).toEqual(["embed"]);
    expect(toggle("blocks.1", open).has("blocks.1")).toBe(true);
  });

  it("reveal opens the modules above a node", () => {
    const target = node("x", "blocks.3.attn");
    expect(representative(target, new Set())).toBe(GROUP_PREFIX + "blocks");
    const opened = reveal(target, new Set());
    expect(representative(target, opened)).toBe("x");
    expect([...openPath("blocks.3", new Set(["embed"]))].sort()).toEqual(["blocks", "blocks.3", "embed"]);
  });
});
