/** Issue 22 items 9 and 10: the view placed again when the pane changes size, labels measured by their
 *  glyphs, and runs of alike sibling blocks folded so that a long top-level chain opens readable. */
import { describe, expect, it } from "vitest";
import { fitOf, glyphPx, minScaleOf } from "../firstview";
import { findRuns, firstViewCandidates, runHolding, foldedByMember, GROUP_PREFIX, moduleTree, representative, runBytes, unfoldAround, visibleGraph, visibleRuns } from "../grouping";
import { buildDot } from "../dot";
import { keepScale, resized, scaleOf, unionBox } from "../panzoom";
import type { GraphData, GraphNode } from "../types";
import { node, transformerData, withViews } from "./synthetic";

/** An nn.Sequential of `count` blocks (modules `0`…`count-1`, each with attn and mlp), chained; block 0
 *  has other ops (no input gradient); with `lastDifferent` the last block has one more child. */
function sequentialData(count: number, lastDifferent = false): GraphData {
  const data = transformerData(1, 1);
  const nodes: GraphNode[] = [node("tangents_1", "", "tangent")];
  const edges: [string, string][] = [];
  let previous = "tangents_1";
  for (let b = count - 1; b >= 0; b--) {
    for (const part of ["mlp", "attn"]) {
      const id = `b${b}_${part}`;
      const op = b === 0 && part === "attn" ? "aten.relu" : "aten.mm";
      const module = lastDifferent && b === count - 1 && part === "mlp" ? `${b}.${part}.extra` : `${b}.${part}`;
      nodes.push(node(id, module, "op", { op }));
      nodes.push(node(`saved_${id}`, `${b}.${part}`, "saved", { bytes: 100 }));
      edges.push([previous, id], [`saved_${id}`, id]);
      previous = id;
    }
  }
  data.nodes = nodes;
  data.edges = edges;
  return withViews(data);
}

const runsOf = (data: GraphData) => findRuns(moduleTree(data.views.modules), data.nodes);

describe("runs of alike siblings", () => {
  it("finds the blocks of a Sequential as one run, labelled with its range and count", () => {
    const runs = runsOf(sequentialData(32));
    expect(runs).toHaveLength(1);
    expect(runs[0].parent).toBe("");
    expect(runs[0].members).toEqual(Array.from({ length: 32 }, (_, i) => String(i)));
    expect(runs[0].label).toBe("0\u201331 \u00D732");
  });

  it("names a nested run by its parent, and leaves short runs alone", () => {
    const runs = runsOf(transformerData(6, 2));
    expect(runs.map((r) => r.label)).toEqual(["blocks.0\u20135 \u00D76"]);
    expect(runsOf(transformerData(3, 2))).toEqual([]);
  });

  it("breaks a run at a module of another shape, and tells leaf modules apart by their ops", () => {
    expect(runsOf(sequentialData(10, true)).map((r) => r.label)).toEqual(["0\u20138 \u00D79"]);
    // nn.Sequential(Linear, ReLU, Linear, ReLU, ...): leaves of two kinds, no run
    const data = transformerData(1, 1);
    data.nodes = Array.from({ length: 8 }, (_, i) => node(`n${i}`, String(i), "op", { op: i % 2 ? "aten.relu" : "aten.mm" }));
    data.edges = [];
    expect(runsOf(withViews(data))).toEqual([]);
    data.nodes.forEach((n) => (n.op = "aten.mm"));
    expect(runsOf(withViews(data)).map((r) => r.label)).toEqual(["0\u20137 \u00D78"]);
  });

  it("folds a run into one group that stands for its members' nodes and edges", () => {
    const data = sequentialData(32);
    const runs = runsOf(data);
    const graph = visibleGraph(data, new Set(), runs);
    const id = GROUP_PREFIX + runs[0].label;
    expect(graph.nodes.map((v) => v.id)).toEqual(["tangents_1", id]);
    expect(graph.edges).toEqual([["tangents_1", id]]);
    const group = graph.nodes[1];
    expect(group.run).toBe(runs[0]);
    expect(group.path).toBe(runs[0].label);
    expect(group.size).toBe(data.nodes.length - 1);
    expect(buildDot(graph)).toContain("0\u201331 \u00D732 \u25B8");
    expect(representative(data.nodes[5], new Set(), foldedByMember(runs))).toBe(id);
    // unfolded: the 32 blocks, each a group, as before
    expect(visibleGraph(data, new Set()).nodes).toHaveLength(33);
  });

  it("counts a run's saved bytes, unfolds around a module to be seen, and folds only runs on view", () => {
    const data = sequentialData(8);
    const tree = moduleTree(data.views.modules);
    const runs = findRuns(tree, data.nodes);
    expect(runBytes(runs, new Map([["0", 5], ["7", 6]])).get(runs[0].label)).toBe(11);
    expect(unfoldAround("3.attn", runs)).toEqual([]);
    expect(runHolding("3", runs)).toBe(runs[0]);
    expect(runHolding("3.attn", runs)).toBeUndefined();
    expect(unfoldAround("", runs)).toEqual(runs);
    const nested = runsOf(transformerData(6, 2));
    expect(visibleRuns(nested, new Set())).toEqual([]);
    expect(visibleRuns(nested, new Set(["blocks"]))).toEqual(nested);
  });

  it("tries the kernel's views first, then the same views with their runs folded", () => {
    const runs = runsOf(sequentialData(32));
    const tries = firstViewCandidates([new Set()], runs);
    expect(tries).toEqual([{ open: new Set(), folded: [] }, { open: new Set(), folded: runs }]);
    expect(firstViewCandidates([new Set()], [])).toHaveLength(1);
  });
});

describe("labels measured by their glyphs", () => {
  const views = transformerData(1, 1).views; // the kernel's line-box rule: 9.5 px for 11.5 units
  it("asks for glyphs of at least 9 px, not only a 9.5 px line box (glyphs of 8.3 px)", () => {
    const minScale = minScaleOf(views);
    expect(views.min_glyph_px).toBe(9);
    expect(glyphPx(minScale, views)).toBeGreaterThanOrEqual(views.min_glyph_px);
    expect(minScale).toBeCloseTo(views.min_glyph_px / views.label_font_units, 9);
    expect(glyphPx(views.min_label_px / views.label_units, views)).toBeLessThan(views.min_glyph_px);
    // a drawing whose fitted glyphs would be 8.5 px is not readable
    expect(fitOf({ x: 0, y: 0, w: 1000 / 0.85, h: 100 }, { width: 1000, height: 500, figures: views }).readable).toBe(false);
  });
});

describe("a resized pane", () => {
  it("counts as resized when it changed by a pixel and has an area", () => {
    expect(resized({ width: 900, height: 500 }, { width: 600, height: 500 })).toBe(true);
    expect(resized({ width: 900, height: 500 }, { width: 900.4, height: 500 })).toBe(false);
    expect(resized({ width: 900, height: 500 }, { width: 0, height: 0 })).toBe(false); // a hidden tab
  });

  it("keeps a user's view at its scale and centre", () => {
    const view = { x: 100, y: 50, w: 450, h: 250 }; // 2 px per unit in 900 × 500
    const kept = keepScale(view, { width: 900, height: 500 }, { width: 600, height: 500 });
    expect(scaleOf(kept, 600, 500)).toBeCloseTo(2, 9);
    expect(kept.x + kept.w / 2).toBeCloseTo(325, 9);
    expect(kept.y + kept.h / 2).toBeCloseTo(175, 9);
    expect(kept.w / kept.h).toBeCloseTo(600 / 500, 9);
  });

  it("joins boxes", () => {
    expect(unionBox([{ x: 0, y: 10, w: 5, h: 5 }, { x: 20, y: 0, w: 5, h: 5 }])).toEqual({ x: 0, y: 0, w: 25, h: 15 });
    expect(unionBox([])).toEqual({ x: 0, y: 0, w: 0, h: 0 });
  });
});

describe("the saved table in a narrow pane", () => {
  it("keeps least widths for the short columns only (the rest are sized by what they hold: columnWidths)", async () => {
    const { COLUMNS, COLUMN_WIDTHS, cellTitle } = await import("../table");
    expect(Object.keys(COLUMN_WIDTHS).sort()).toEqual([...COLUMNS].sort());
    expect(COLUMNS.filter((c) => COLUMN_WIDTHS[c])).toEqual(["dtype", "bytes", "adds"]);
    expect(cellTitle("blocks.3.attn.qkv", "saved because")).toBe("blocks.3.attn.qkv\nsaved because");
    expect(cellTitle("x", "")).toBe("x");
  });
});

describe("one layout worker for every pane on the page", () => {
  it("makes a request stale only by a newer one of the same pane", async () => {
    const { LayoutClient, StaleLayout } = await import("../layout");
    const posted: { id: number; dot: string }[] = [];
    const client = new LayoutClient((r) => posted.push(r));
    const [paneA, paneB] = [{}, {}];
    const a1 = client.request("digraph a1 {}", paneA);
    const b = client.request("digraph b {}", paneB); // another widget refitting at the same time
    const a2 = client.request("digraph a2 {}", paneA);
    posted.forEach((r) => client.receive({ id: r.id, svg: `<svg>${r.dot}</svg>` }));
    await expect(a1).rejects.toBeInstanceOf(StaleLayout);
    await expect(b).resolves.toBe("<svg>digraph b {}</svg>");
    await expect(a2).resolves.toBe("<svg>digraph a2 {}</svg>");
  });
});
