import { describe, expect, it } from "vitest";
import { ancestors, buildModuleTree, GROUP_PREFIX, initialExpansion, representative, reveal, toggle, visibleGraph } from "../grouping";
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

  it("big graphs open collapsed to at most the limit; small ones open fully", () => {
    const big = transformerData(32, 50);
    expect(big.nodes.length).toBeGreaterThan(3000);
    const expanded = initialExpansion(big, 300);
    const shown = visibleGraph(big, expanded).nodes.length;
    expect(shown).toBeLessThanOrEqual(300);
    expect(expanded.has("blocks")).toBe(true);
    const small = transformerData(1, 3);
    expect(visibleGraph(small, initialExpansion(small)).nodes.length).toBe(small.nodes.length);
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
  });
});
