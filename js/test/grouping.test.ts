import { describe, expect, it } from "vitest";
import { ancestors, edgeKey, firstViews, GROUP_PREFIX, moduleTree, openPath, representative, reveal, toggle, visibleGraph } from "../grouping";
import { buildDot } from "../dot";
import { node, transformerData, withViews } from "./synthetic";

describe("module tree", () => {
  it("lists ancestors outermost first", () => {
    expect(ancestors("blocks.3.attn")).toEqual(["blocks", "blocks.3", "blocks.3.attn"]);
    expect(ancestors("")).toEqual([]);
  });

  it("reads the kernel's counts per module, nested included", () => {
    const tree = moduleTree(transformerData(2, 5).views.modules);
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

  it("first views are the kernel's, as sets (views/grouping.py first_views chooses them)", () => {
    const data = transformerData(1, 3);
    data.views.first = [["blocks", "blocks.0"], []];
    expect(firstViews(data)).toEqual([new Set(["blocks", "blocks.0"]), new Set()]);
  });

  it("marks edges out of a collapsed module that carry only saved values, and only those", () => {
    const data = transformerData(1, 1);
    data.nodes.push(node("s", "a", "saved"), node("op_a", "a"), node("op_b", "b"), node("op_c", "c"));
    data.edges.push(["s", "op_b"], ["op_a", "op_c"], ["s", "op_c"]);
    withViews(data);
    const collapsed = visibleGraph(data, new Set());
    expect([...collapsed.savedOnly]).toEqual([edgeKey(GROUP_PREFIX + "a", GROUP_PREFIX + "b")]);
    const open = visibleGraph(data, new Set(["a"]));
    expect(open.savedOnly.size).toBe(0); // drawn itself, a saved value stays near what reads it
    expect(buildDot(collapsed)).toMatch(/v\d+ -> v\d+ \[id="e\d+", constraint=false, class="e-saved", style="dashed"\];/);
  });

  it("says what each drawn edge carries: a saved value read, into a gradient, or backward data flow", () => {
    const data = transformerData(1, 1);
    data.nodes.push(node("s", "a", "saved"), node("op_a", "a"), node("op_b", "b"), node("g", "b", "gradient"));
    data.edges.push(["s", "op_a"], ["op_a", "op_b"], ["op_b", "g"]);
    withViews(data);
    const open = visibleGraph(data, new Set(["a", "b"]));
    expect(open.edgeKinds.get(edgeKey("s", "op_a"))).toBe("saved");
    expect(open.edgeKinds.get(edgeKey("op_b", "g"))).toBe("gradient");
    expect(open.edgeKinds.has(edgeKey("op_a", "op_b"))).toBe(false);
    // collapsed, a's edge to b carries a saved value and data flow at once: it is data flow
    data.edges.push(["s", "op_b"]);
    expect(visibleGraph(data, new Set()).edgeKinds.has(edgeKey(GROUP_PREFIX + "a", GROUP_PREFIX + "b"))).toBe(false);
    expect(buildDot(open)).toMatch(/\[id="e\d+", class="e-saved", style="dashed"\];/);
    expect(buildDot(open)).toMatch(/\[id="e\d+", class="e-gradient"\];/);
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
