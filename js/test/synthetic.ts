/** Synthetic payloads for unit tests; contract.test.ts runs the real one. */

import { ancestors, parentOf } from "../grouping";
import type { FitFigures } from "../firstview";
import type { GraphData, GraphNode, MeasuredMemory, Memory, ModuleRow } from "../types";

/** The figures views/grouping.py writes into every payload's `views` (contract.test.ts holds these equal to
 *  the fixture's): the synthetic payloads are fitted and judged as the kernel's are. */
export const KERNEL_FIGURES: FitFigures = {
  label_units: 11.5, min_label_px: 9.5, label_font_units: 10, min_glyph_px: 9, max_scale: 2, min_span: 0.66, try_across_below: 40,
};

/** The kernel's module tree (views/grouping.py `module_tree`) for synthetic nodes, with no saved bytes.
 *  contract.test.ts holds it equal to the Python rows on the fixture, so tests build on the real rule. */
export function moduleRows(nodes: readonly GraphNode[]): ModuleRow[] {
  const rows = new Map<string, ModuleRow>([["", { path: "", parent: "", depth: 0, size: nodes.length, direct: 0, saved_bytes: 0 }]]);
  for (const n of nodes) {
    for (const path of ancestors(n.module)) {
      if (!rows.has(path)) rows.set(path, { path, parent: parentOf(path), depth: ancestors(path).length, size: 0, direct: 0, saved_bytes: 0 });
      rows.get(path)!.size++;
    }
    rows.get(n.module)!.direct++;
  }
  return [...rows.values()];
}

/** Fill `views` from the nodes (after a test has changed them): the module tree, no first views. */
export function withViews(data: GraphData): GraphData {
  data.views = { ...data.views, modules: moduleRows(data.nodes) };
  return data;
}

export function node(id: string, module = "", kind: GraphNode["kind"] = "op", extra: Partial<GraphNode> = {}): GraphNode {
  return { id, op: kind === "op" ? "aten.mm" : "placeholder", kind, module, shape: [2, 3], dtype: "float32", args: "", source: "", line: 0, grad_of: [], saved_kind: "", recomputed: false, why_recomputed: "", bytes: 24, ...extra };
}

/** A transformer-shaped backward graph: `blocks` blocks of attn/mlp ops, a head, tangents. */
export function transformerData(blocks = 4, opsPerModule = 10): GraphData {
  const nodes: GraphNode[] = [node("tangents_1", "", "tangent")];
  const edges: [string, string][] = [];
  let previous = "tangents_1";
  for (let b = blocks - 1; b >= 0; b--) {
    for (const part of ["mlp", "attn"]) {
      for (let i = 0; i < opsPerModule; i++) {
        const id = `b${b}_${part}_${i}`;
        nodes.push(node(id, `blocks.${b}.${part}`));
        edges.push([previous, id]);
        previous = id;
      }
      const saved = `saved_b${b}_${part}`;
      nodes.push(node(saved, `blocks.${b}.${part}`, "saved"));
      edges.push([saved, previous]);
    }
  }
  nodes.push(node("grad_embed", "embed", "gradient", { grad_of: ["embed.weight"] }));
  edges.push([previous, "grad_embed"]);
  return withViews({
    model: "T", partitioner: "default", memory_budget: null, mode: "real", backend: "aot_eager", graph_index: 0, graph_count: 1,
    nodes, edges, saved: [], code: { backward: "", forward: "", lines: { backward: {}, forward: {} } }, notes: [],
    diff: { against: "", recomputed_now: [], recomputed_rows: [], newly_saved: [] },
    partition: { saved: 0, saved_activation_bytes: 0, saved_input_bytes: 0, recomputed: 0, backward_nodes: nodes.length, torch_budget_ratio: null },
    run: {
      saved: 0, saved_activation_bytes: 0, saved_input_bytes: 0,
      memory: {
        timeline: [], steps: 0, forward_steps: 0, by_module: [], x_ticks: [0, 1], y_ticks: [0, 1], tick_count: 4,
        peak: { step: -1, phase: "forward", node: "", graph: 0, live_bytes: 0, module: "" },
        kinds: [], modules: [], module_depth: 1, selects: [],
      },
    },
    views: { modules: [], first: [[]], ...KERNEL_FIGURES },
    partitioners: [
      { name: "default", takes_budget: false, description: "torch's default partitioner" },
      { name: "min_cut", takes_budget: true, description: "min-cut rematerialization under a memory budget" },
    ],
  });
}

/** A small run as the kernel sends it: four points of ten ops (five forward), the peak in backward,
 *  stacked by kind and by module (each stacking adding up to the line), and the node each point selects. */
export function memoryRun(extra: Partial<Memory> = {}): Memory {
  return {
    timeline: [
      { step: 0, phase: "forward", node: "mm", graph: 0, live_bytes: 100 },
      { step: 4, phase: "forward", node: "relu", graph: 0, live_bytes: 300 },
      { step: 5, phase: "backward", node: "mm_1", graph: 0, live_bytes: 500 },
      { step: 9, phase: "backward", node: "sum_1", graph: 0, live_bytes: 50 },
    ],
    steps: 10,
    forward_steps: 5,
    peak: { step: 5, phase: "backward", node: "mm_1", graph: 0, live_bytes: 500, module: "blocks.0.mlp" },
    by_module: [
      { module: "blocks.0.mlp", bytes: 400 },
      { module: "blocks.0.attn", bytes: 100 },
      { module: "blocks.1.mlp", bytes: 300 },
      { module: "blocks.0", bytes: 50 },
      { module: "", bytes: 20 },
    ],
    x_ticks: [0, 5], // what the kernel sends: nice_ticks(9, 4) within the steps
    y_ticks: [0, 200, 400, 600],
    tick_count: 4,
    measured: null,
    kinds: [
      { key: "saved", label: "saved activations", bytes: [0, 200, 200, 0] },
      { key: "gradient", label: "gradients", bytes: [0, 0, 100, 50] },
      { key: "temporary", label: "temporaries", bytes: [100, 100, 200, 0] },
    ],
    modules: [
      { key: "blocks.0", label: "blocks.0", bytes: [100, 300, 400, 0] },
      { key: null, label: "2 other modules", bytes: [0, 0, 100, 50] },
    ],
    module_depth: 2,
    selects: ["", "relu", "mm_1", "sum_1"], // mm computes nothing backward reads; relu is saved
    ...extra,
  };
}

/** What `g.measure()` sends for memoryRun(): three points, its peak `peak` bytes at the predicted step. */
export function measuredRun(peak: number, error: number): MeasuredMemory {
  return {
    timeline: [
      { step: 0, phase: "forward", node: "mm", graph: 0, live_bytes: 100 },
      { step: 5, phase: "backward", node: "mm_1", graph: 0, live_bytes: peak },
      { step: 9, phase: "backward", node: "sum_1", graph: 0, live_bytes: 50 },
    ],
    peak: { step: 5, phase: "backward", node: "mm_1", graph: 0, live_bytes: peak },
    predicted_peak_bytes: 500,
    error_percent: error,
    device: "cpu",
  };
}
