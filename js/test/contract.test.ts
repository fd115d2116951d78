/// <reference types="node" />
/**
 * The kernel–browser contract, against the payload the Python side really sends: the
 * conv + batch-norm reference, written by tests/test_contract.py to fixtures/payload.json.
 */

import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { nodeAtLine } from "../code";
import { buildDot, clusterPaths } from "../dot";
import { formatShape } from "../format";
import { edgeKey, firstViews, GROUP_PREFIX, moduleTree, visibleGraph } from "../grouping";
import { decodedData, graphData, TRAIT_NAMES, type Model } from "../model";
import { moduleBars, timelineGeometry } from "../memory";
import { nodeOfPoint } from "../panes/memory";
import { partitionerChoices, takesBudget } from "../partitioners";
import { resultText, searchNodes, searchReasons } from "../search";
import { chartGeometry } from "../sweep";
import { COLUMNS, savedCells, sortRows } from "../table";
import { CONTRACT_KEYS, type AdvicePlanRow, type ComparisonRow, type GraphData, type SweepPoint } from "../types";
import { formatBytes, formatFlops, formatSeconds, niceTicks } from "../units";
import { KERNEL_FIGURES, moduleRows } from "./synthetic";

type TypeName = keyof typeof CONTRACT_KEYS;

/** The Python side's answer for one open-module set of one payload (tests/test_contract.py). */
interface GraphAnswer {
  payload: "data" | "deep" | "recomputing";
  expanded: string[];
  nodes: { id: string; cluster: string; path: string | null; size: number }[];
  edges: [string, string][];
  saved_only: [string, string][];
  count: number;
  dot: string;
}

/** A value and the text core/units.py writes for it. */
interface Sample {
  value: number;
  text: string;
}

interface Fixture {
  data: GraphData;
  deep: GraphData; // a transformer: modules three deep
  recomputing: GraphData; // the same at min-cut budget 0.5: recomputed forward ops read in backward
  comparison_rows: ComparisonRow[];
  sweep_points: SweepPoint[];
  advice_rows: AdvicePlanRow[]; // bw.advise on a small MLP: the Pareto plans, then the offload plan (verified eagerly)
  keys: Record<TypeName, string[]>;
  traits: string[];
  wire: string; // `data` as the kernel sends it (encode_payload), base64
  python: {
    graphs: GraphAnswer[];
    ticks: { max: number; count: number; ticks: number[] }[];
    units: Record<"bytes" | "flops" | "seconds", Sample[]>;
  };
}

const FIXTURE = fileURLToPath(new URL("./fixtures/payload.json", import.meta.url));
const REGENERATE = ".venv/bin/python -m pytest tests/test_contract.py";

function loadFixture(): Fixture {
  if (!existsSync(FIXTURE)) {
    throw new Error(`${FIXTURE} is missing. Write it from the Python side first: \`${REGENERATE}\` (scripts/test.sh runs it before vitest).`);
  }
  return JSON.parse(readFileSync(FIXTURE, "utf8")) as Fixture;
}

const fixture = loadFixture();
const data = fixture.data;
const memory = data.run.memory;

const REFERENCE_NODES = [
  "primals_1", "primals_2", "primals_4", "primals_5", "primals_6", "convolution", "getitem_1", "getitem_2",
  "tangents_1", "native_batch_norm_backward", "getitem_3", "getitem_4", "getitem_5", "convolution_backward",
  "getitem_6", "getitem_7",
];

const sorted = (keys: readonly string[]) => [...keys].sort();

describe("the TypeScript types mirror the Python TypedDicts", () => {
  it("names the same types", () => {
    expect(sorted(Object.keys(fixture.keys))).toEqual(sorted(Object.keys(CONTRACT_KEYS)));
  });

  it("js/model.ts has exactly the traits of the Python WidgetState (the widget's traits are made from it)", () => {
    expect(sorted(TRAIT_NAMES)).toEqual(sorted(fixture.traits));
  });

  it("graphData reads the payload the kernel sends as one binary buffer, and the HTML export's object as it is", () => {
    const bytes = Uint8Array.from(Buffer.from(fixture.wire, "base64"));
    const modelOf = (value: unknown) => ({ get: () => value }) as unknown as Model;
    const wire = modelOf(new DataView(bytes.buffer));
    expect(graphData(wire)).toEqual(data);
    expect(graphData(wire)).toBe(graphData(wire)); // decoded once, however many panes ask
    expect(graphData(modelOf(bytes.buffer))).toEqual(data);
    expect(graphData(modelOf(data))).toBe(data);
  });

  it("decodedData gives a payload only once it is decoded: a trait in the payload's message does not decode it", () => {
    const bytes = Uint8Array.from(Buffer.from(fixture.wire, "base64"));
    const modelOf = (value: unknown) => ({ get: () => value }) as unknown as Model;
    const wire = modelOf(new DataView(bytes.buffer));
    expect(decodedData(wire)).toBeUndefined();
    expect(decodedData(wire)).toBeUndefined(); // asking does not decode it either
    const decoded = graphData(wire);
    expect(decodedData(wire)).toBe(decoded);
    expect(decodedData(modelOf(data))).toBe(data); // the HTML export's object is decoded as it is
  });

  for (const name of Object.keys(CONTRACT_KEYS) as TypeName[]) {
    it(`${name} has exactly the Python fields`, () => {
      expect(sorted(CONTRACT_KEYS[name]), `js/types.ts ${name} against the Python ${name}`).toEqual(sorted(fixture.keys[name]));
    });
  }
});

describe("the reference payload carries exactly those fields", () => {
  const expectKeys = (name: TypeName, objects: object[]) => {
    expect(objects.length, `some ${name} to check`).toBeGreaterThan(0);
    for (const object of objects) expect(sorted(Object.keys(object)), name).toEqual(sorted(CONTRACT_KEYS[name]));
  };

  it("in the graph payload and everything nested in it", () => {
    expectKeys("GraphData", [data]);
    expectKeys("GraphNode", data.nodes);
    expectKeys("SavedRow", [...data.saved, ...data.diff.recomputed_rows]);
    expectKeys("PartitionTotals", [data.partition]);
    expectKeys("RunTotals", [data.run]);
    expectKeys("Views", [data.views]);
    expectKeys("ModuleRow", data.views.modules);
    expectKeys("Code", [data.code]);
    expectKeys("CodeLines", [data.code.lines]);
    expectKeys("Diff", [data.diff]);
    expectKeys("PartitionerOption", data.partitioners);
    expectKeys("Memory", [memory]);
    expectKeys("MemoryPoint", memory.timeline);
    expectKeys("MemoryPeak", [memory.peak]);
    expectKeys("ModuleBytes", memory.by_module);
  });

  it("in comparison rows, sweep points and the advisor's plans", () => {
    expectKeys("ComparisonRow", fixture.comparison_rows);
    expectKeys("SweepPoint", fixture.sweep_points);
    expectKeys("AdvicePlanRow", fixture.advice_rows);
  });
});

describe("the front end's pure modules on the reference payload", () => {
  it("is the 16-node conv + batch-norm backward graph, consistent with itself", () => {
    expect(sorted(data.nodes.map((n) => n.id))).toEqual(sorted(REFERENCE_NODES));
    const ids = new Set(data.nodes.map((n) => n.id));
    for (const [from, to] of data.edges) expect(ids.has(from) && ids.has(to), `${from} -> ${to}`).toBe(true);
    const kinds = (kind: string) => data.nodes.filter((n) => n.kind === kind).length;
    expect([kinds("saved"), kinds("tangent"), kinds("gradient")]).toEqual([8, 1, 4]);
    expect(data.partition.saved).toBe(data.saved.length);
    expect(data.partition.backward_nodes).toBe(data.nodes.length);
    for (const row of data.saved) expect(data.nodes.find((n) => n.id === row.name)?.kind).toBe("saved");
    expect(data.nodes.find((n) => n.id === "getitem_6")!.grad_of.length).toBeGreaterThan(0);
    expect(data.diff.recomputed_rows.map((r) => r.name)).toEqual(data.diff.recomputed_now);
    for (const name of data.diff.newly_saved) expect(data.saved.map((r) => r.name)).toContain(name);
  });

  it("opens fully when small, and collapses into its modules", () => {
    const open = visibleGraph(data, firstViews(data)[0]);
    expect(open.nodes.map((v) => v.id)).toEqual(data.nodes.map((n) => n.id));
    expect(open.edges.length).toBe(new Set(data.edges.map(([a, b]) => `${a}>${b}`)).size);
    const closed = visibleGraph(data, new Set());
    const topLevel = data.nodes.filter((n) => n.module === "").map((n) => n.id);
    const modules = [...new Set(data.nodes.map((n) => n.module).filter(Boolean))].map((m) => GROUP_PREFIX + m);
    expect(sorted(closed.nodes.map((v) => v.id))).toEqual(sorted([...topLevel, ...modules]));
    const shown = new Set(closed.nodes.map((v) => v.id));
    for (const [from, to] of closed.edges) expect(shown.has(from) && shown.has(to) && from !== to).toBe(true);
  });

  it("draws every node and edge with an id by index and each node's name in its label", () => {
    const graph = visibleGraph(data, firstViews(data)[0]);
    const dot = buildDot(graph);
    const ids = [...dot.matchAll(/\bid="([^"]*)"/g)].map((m) => m[1]);
    expect(sorted(ids)).toEqual(sorted([...graph.nodes.map((_, i) => `v${i}`), ...graph.edges.map((_, i) => `e${i}`), ...clusterPaths(graph).map((_, i) => `c${i}`)]));
    for (const v of graph.nodes) expect(dot).toMatch(new RegExp(`label="${v.id}(\\\\n|")`));
    expect(dot.match(/ -> /g)!.length).toBe(graph.edges.length);
  });

  it("finds nodes by name and by op", () => {
    expect(searchNodes(data.nodes, "CONVOLUTION").map((n) => n.id).sort()).toEqual(["convolution", "convolution_backward", "getitem_6", "getitem_7"]);
    expect(searchNodes(data.nodes, "getitem_").length).toBe(7);
  });

  it("finds saved values by their reason, and lists each result by name, op, module and shape", () => {
    const reasons = searchReasons(data.nodes, data.saved);
    const kept = searchNodes(data.nodes, "forward input kept alive", reasons).map((n) => n.id).sort();
    expect(kept).toEqual(data.saved.filter((s) => s.why.includes("forward input kept alive")).map((s) => s.name).sort());
    expect(kept.length).toBeGreaterThan(0);
    expect(searchNodes(data.nodes, "forward input kept alive").length).toBe(0); // only through the reasons
    // a node's name finds it first, not the values whose reason names it as a reader
    expect(searchNodes(data.nodes, "convolution_backward", reasons)[0].id).toBe("convolution_backward");
    expect(searchNodes(data.nodes, "convolution_backward", reasons).map((n) => n.id)).toEqual(searchNodes(data.nodes, "convolution_backward").map((n) => n.id));
    const conv = data.nodes.find((n) => n.id === "convolution")!;
    expect(resultText(conv)).toBe(`convolution \u00B7 ${conv.op} \u00B7 ${conv.module || "(top level)"} \u00B7 ${formatShape(conv.shape)}`);
  });

  it("sorts the saved table, and its adds column sums to the activation total", () => {
    const byBytes = sortRows(data.saved, "bytes", true);
    expect(byBytes[0].name).toBe("convolution");
    for (let i = 1; i < byBytes.length; i++) expect(byBytes[i - 1].bytes).toBeGreaterThanOrEqual(byBytes[i].bytes);
    expect(sortRows(data.saved, "name", false).map((r) => r.name).slice(0, 3)).toEqual(["convolution", "getitem_1", "getitem_2"]);
    expect(data.saved.reduce((sum, r) => sum + r.activation_bytes, 0)).toBe(data.partition.saved_activation_bytes);
    const adds = COLUMNS.indexOf("adds");
    for (const row of data.saved) expect(savedCells(row)[adds]).toBe(formatBytes(row.activation_bytes));
    for (const row of data.saved.filter((r) => r.kind !== "activation")) expect(row.activation_bytes).toBe(0);
  });

  it("maps every code line that defines a node back to that node, in backward and forward code", () => {
    const lines = data.code.backward.split("\n");
    for (const n of data.nodes.filter((n) => n.op !== "placeholder")) {
      expect(lines[n.line - 1]).toContain(`${n.id} = `);
      expect(nodeAtLine(data.nodes, n.line)).toBe(n.id);
      expect(data.code.lines.backward[n.id]).toBe(n.line);
    }
    const forward = data.code.forward.split("\n");
    for (const row of data.saved.filter((r) => r.kind === "activation")) {
      expect(forward[data.code.lines.forward[row.name] - 1].trimStart().startsWith(`${row.name} = `), row.name).toBe(true);
    }
  });

  it("has a memory picture: the peak on the timeline, its node in the graph, bytes by module summing up", () => {
    const peak = memory.timeline.find((p) => p.step === memory.peak.step)!;
    expect(peak.live_bytes).toBe(memory.peak.live_bytes);
    expect(Math.max(...memory.timeline.map((p) => p.live_bytes))).toBe(memory.peak.live_bytes);
    expect(memory.timeline.filter((p) => p.phase === "forward").length).toBe(memory.forward_steps);
    expect(memory.peak.phase).toBe("backward");
    expect(nodeOfPoint(peak, data)).toBe(memory.peak.node);
    expect(memory.by_module.reduce((sum, m) => sum + m.bytes, 0)).toBe(data.run.saved_activation_bytes);
    expect(moduleBars(memory.by_module, "").bars.reduce((sum, b) => sum + b.bytes, 0)).toBe(data.run.saved_activation_bytes);
    expect(data.run.saved_activation_bytes).toBe(data.partition.saved_activation_bytes); // one compiled region
    const geometry = timelineGeometry(memory, { left: 0, top: 0, right: 100, bottom: 100 }, fixture.sweep_points);
    expect(geometry.xs.length).toBe(memory.timeline.length);
    expect(geometry.overlays.length).toBe(fixture.sweep_points.length);
    for (const node of data.nodes) expect(node.bytes).toBeGreaterThanOrEqual(0);
    expect(data.nodes.find((n) => n.id === "convolution")!.bytes).toBe(2 * 8 * 16 * 16 * 4);
  });

  it("offers the registered partitioners, the current one among them", () => {
    const choices = partitionerChoices(data.partitioners, data.partitioner);
    expect(choices.every((c) => c.registered)).toBe(true);
    expect(choices.map((c) => c.name)).toContain(data.partitioner);
    expect(takesBudget(choices, "default")).toBe(false);
    expect(takesBudget(choices, "min_cut")).toBe(true);
  });

  it("charts the sweep and lists the comparison", () => {
    const chart = chartGeometry(fixture.sweep_points, { left: 28, top: 28, right: 272, bottom: 122 });
    expect(chart.points.length).toBe(fixture.sweep_points.length);
    expect(chart.front.split(" ").length).toBe(fixture.sweep_points.filter((p) => p.pareto).length);
    for (const row of fixture.comparison_rows) {
      expect(row.partition.startsWith(row.partitioner), row.partition).toBe(true);
      expect(row.partition.includes("budget"), row.partition).toBe(row.memory_budget !== null);
      expect(row.recomputed === 0, row.partition).toBe(row.recomputed_ops.length === 0);
    }
  });
});

describe("each rule the browser also runs gives the Python answers, on the same payloads", () => {
  const payloads = { data: fixture.data, deep: fixture.deep, recomputing: fixture.recomputing };

  it("the recomputing payload draws recomputed reads as their own kind of edge", () => {
    const answers = fixture.python.graphs.filter((g) => g.payload === "recomputing");
    expect(answers.some((g) => g.dot.includes('class="e-recomputed", style="dotted"'))).toBe(true);
  });

  it("the deep payload nests modules, so drilling down is tested where it matters", () => {
    expect(Math.max(...fixture.deep.views.modules.map((m) => m.depth))).toBeGreaterThanOrEqual(3);
    expect(fixture.python.graphs.filter((g) => g.payload === "deep").length).toBeGreaterThanOrEqual(4);
  });

  for (const answer of fixture.python.graphs) {
    it(`${answer.payload} with [${answer.expanded.join(", ")}] open: the same visible nodes, edges and DOT`, () => {
      const payload = payloads[answer.payload];
      const graph = visibleGraph(payload, new Set(answer.expanded));
      const nodes = graph.nodes.map((v) => ({ id: v.id, cluster: v.cluster, path: v.path ?? null, size: v.size ?? 0 }));
      expect(nodes).toEqual(answer.nodes);
      expect(graph.edges).toEqual(answer.edges);
      expect(sorted([...graph.savedOnly])).toEqual(sorted(answer.saved_only.map(([a, b]) => edgeKey(a, b))));
      expect(graph.nodes.length).toBe(answer.count); // the count the kernel chose first views by
      expect(buildDot(graph, moduleTree(payload.views.modules).savedBytes)).toBe(answer.dot);
    });
  }

  it("the first views are among those sets, most detailed first, ending all collapsed", () => {
    for (const payload of Object.values(payloads)) {
      const views = firstViews(payload);
      expect(views[views.length - 1].size).toBe(0);
      const counts = views.map((open) => visibleGraph(payload, open).nodes.length);
      expect(counts).toEqual([...counts].sort((a, b) => b - a));
    }
  });

  it("the module tree the tests build is the kernel's (saved bytes aside)", () => {
    for (const payload of Object.values(payloads)) {
      expect(moduleRows(payload.nodes)).toEqual(payload.views.modules.map((row) => ({ ...row, saved_bytes: 0 })));
    }
  });

  it("niceTicks gives nice_ticks' ticks", () => {
    expect(fixture.python.ticks.length).toBeGreaterThan(30);
    for (const { max, count, ticks } of fixture.python.ticks) expect(niceTicks(max, count), `${max} in ${count}`).toEqual(ticks);
  });

  it("the first-view figures come in the payload, and the synthetic payloads of the unit tests carry the same", () => {
    for (const payload of [data, fixture.deep, fixture.recomputing]) {
      const figures = Object.fromEntries(Object.keys(KERNEL_FIGURES).map((key) => [key, payload.views[key as keyof typeof KERNEL_FIGURES]]));
      expect(figures).toEqual(KERNEL_FIGURES);
    }
  });

  it("formatBytes, formatFlops and formatSeconds write what core/units.py writes, sample for sample", () => {
    const twins = { bytes: formatBytes, flops: formatFlops, seconds: formatSeconds };
    for (const [kind, format] of Object.entries(twins) as [keyof typeof twins, (value: number) => string][]) {
      const samples = fixture.python.units[kind];
      expect(samples.length, kind).toBeGreaterThan(20);
      for (const { value, text } of samples) expect(format(value), `${kind} ${value}`).toBe(text);
    }
  });
});
