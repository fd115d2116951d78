/**
 * The kernel–browser contract: one interface per Python TypedDict of the payload
 * (bwd_widgets/views/payload.py and the studio rows), field for field, and each one's
 * key list. js/test/contract.test.ts checks the key lists against the Python names.
 */

export type NodeKind = "saved" | "tangent" | "gradient" | "op";

export interface GraphNode {
  id: string;
  op: string;
  kind: NodeKind;
  module: string;
  shape: number[];
  dtype: string;
  args: string;
  source: string;
  line: number; // 1-based line of its definition in the backward code, 0 if none
  grad_of: string[];
  saved_kind: string;
  recomputed: boolean;
  why_recomputed: string; // for a recomputed forward op: torch's reason, with its phrase; else ""
  bytes: number; // bytes of the tensor it computes (0 for tuples and symbols)
}

export interface SavedRow {
  name: string;
  kind: string;
  source: string;
  source_aliases: string[]; // the other names the parameter or buffer `source` goes by (tied weights)
  shape: number[];
  dtype: string;
  bytes: number;
  activation_bytes: number; // what it adds on top of the forward inputs (0 for views of them)
  producer: string;
  module: string;
  alias_of: string; // the value whose memory it shares, "" if none
  alias_kind: string; // what alias_of is: parameter, buffer, input (a view of those adds 0 B), activation, or ""
  storage_op: string; // the op that made it a view of alias_of
  why: string;
  torch_reason: string; // torch's own phrase for why ("cannot recompute: materialized in backward"), "" if none
  kind_label: string; // what the value is, as every view says it: "parameter view" (adds 0 B), "activation (view)"
}

/** Numbers of the compiled region shown: one partition, one of `graph_count`. */
export interface PartitionTotals {
  saved: number;
  saved_activation_bytes: number;
  saved_input_bytes: number;
  recomputed: number;
  backward_nodes: number;
  /** The budget as torch measures this plan; null where min-cut did not run. */
  torch_budget_ratio: number | null;
}

/** Numbers of the whole run: every compiled region, forward and backward. */
export interface RunTotals {
  saved: number;
  saved_activation_bytes: number;
  saved_input_bytes: number;
  memory: Memory;
}

/** A module of the backward graph ("" is the model itself), with what is inside it. */
export interface ModuleRow {
  path: string;
  parent: string;
  depth: number; // 1 for a top-level module, 0 for ""
  size: number; // backward nodes inside, nested modules included
  direct: number; // backward nodes whose own module it is
  saved_bytes: number; // saved activation bytes of this partition inside, nested included
}

/** The graph pane's rules, computed by the kernel (views/grouping.py): the pane draws what they say. */
export interface Views {
  modules: ModuleRow[]; // in order of first appearance, "" first
  first: string[][]; // open modules of each first view to try, most detailed first
  label_units: number; // height of a label line in drawing units
  min_label_px: number; // a drawing is readable when labels are at least this high on screen
  label_font_units: number; // the labels' font size in drawing units
  min_glyph_px: number; // ...and when their glyphs (font size times scale) are at least this many pixels
  max_scale: number; // a small drawing is enlarged to fill the pane no further than this (pixels per unit)
  min_span: number; // a first view is good when readable and spanning this share of the pane's width or height
  try_across_below: number; // a drawing of fewer visible nodes, not good top to bottom, is tried left to right
}

/** Line (1-based) of each name's definition in the code; placeholders on the `def` line. */
export interface CodeLines {
  backward: Record<string, number>;
  forward: Record<string, number>;
}

export interface Code {
  backward: string;
  forward: string;
  lines: CodeLines;
}

/** What changed against the partition shown before ("" `against` when nothing to compare). */
export interface Diff {
  against: string;
  recomputed_now: string[];
  recomputed_rows: SavedRow[];
  newly_saved: string[];
}

/** A registered partitioner the selector offers. */
export interface PartitionerOption {
  name: string;
  takes_budget: boolean;
  description: string;
}

/** Activation memory after one op of the run (forward, then backward). */
export interface MemoryPoint {
  step: number; // index of the op in the whole timeline
  phase: string;
  node: string;
  graph: number;
  live_bytes: number;
}

export interface MemoryPeak {
  step: number;
  phase: string;
  node: string;
  graph: number;
  live_bytes: number;
  module: string;
}

export interface ModuleBytes {
  module: string;
  bytes: number;
}

/** Live bytes of one kind of storage ("saved", "gradient", "temporary") or one module's storages, at
 *  each point of the timeline; the bands of one stacking add up to the timeline. */
export interface MemoryBand {
  key: string | null; // the kind or the module path ("" for the top level); null: the other modules together
  label: string;
  bytes: number[];
}

/** What the last `g.measure()` saw: live bytes at the prediction's own steps, and its peak's error. */
export interface MeasuredMemory {
  timeline: MemoryPoint[]; // the highest point of each stretch of ops: the measured peak is always in
  peak: MemoryPoint;
  predicted_peak_bytes: number;
  error_percent: number; // (predicted peak - measured peak) / measured peak, in percent
  device: string;
  reserved_peak_bytes?: number | null; // the segments' most during the run, from a memory snapshot; absent or null: not known
}

/** The memory picture: live activation memory over the run, its peak, saved bytes by module. */
export interface Memory {
  timeline: MemoryPoint[]; // the highest point of each stretch of ops: the peak is always in
  steps: number;
  forward_steps: number; // ops before the first backward op
  peak: MemoryPeak;
  by_module: ModuleBytes[]; // largest first; sums to the run's saved activation bytes
  x_ticks: number[]; // ops, within the run's steps
  y_ticks: number[]; // bytes, 0 to at or above the peak (recomputed only when an overlaid budget peaks higher)
  tick_count: number; // how many ticks the timeline asks nice_ticks for on each axis
  measured?: MeasuredMemory | null; // the last g.measure(); null until measured (measuring runs the model)
  kinds: MemoryBand[]; // stacked by the kernel's kind of each live storage
  modules: MemoryBand[]; // stacked by the module allocating each storage, cut at module_depth
  module_depth: number;
  selects: string[]; // the backward node each point selects in its region's graph ("" for none)
}

export interface GraphData {
  model: string;
  partitioner: string;
  memory_budget: number | null;
  mode: string;
  backend: string; // "aot_eager", or "inductor": the joint graph after Inductor's passes, as torch.compile(model) splits it
  graph_index: number;
  graph_count: number;
  partitioners: PartitionerOption[];
  nodes: GraphNode[];
  edges: [string, string][];
  saved: SavedRow[];
  partition: PartitionTotals; // this compiled region
  run: RunTotals; // the whole run
  views: Views;
  code: Code;
  notes: string[];
  diff: Diff;
}

/** One row of `bw.compare(...).rows`. */
export interface ComparisonRow {
  partition: string;
  backend: string;
  partitioner: string;
  memory_budget: number | null;
  saved: number;
  saved_activation_bytes: number;
  recomputed: number;
  recomputed_ops: string[];
  forward_nodes: number;
  backward_nodes: number;
  backward_flops: number;
  recompute_flops: number;
  /** The budget as torch measures the plan; null where min-cut did not run. */
  torch_budget_ratio: number | null;
  peak_activation_bytes: number;
}

/** One point of a memory-budget sweep. */
export interface SweepPoint {
  budget: number;
  saved_activation_bytes: number;
  recompute_flops: number;
  saved: number;
  pareto: boolean;
  peak_activation_bytes: number;
  timeline: number[]; // live bytes over the run in equal stretches (each the highest), to overlay budgets
  torch_budget_ratio: number | null; // the budget as torch measures its plan: (saved - inputs) / (min-cut's - inputs)
  peak_above_budget: number | null; // a larger budget whose peak is lower: this one's recompute buys no peak
}

/** One plan of `bw.advise` (views/payload.py `advice_rows`): the Pareto set, then the offload plans. */
export interface AdvicePlanRow {
  label: string;
  kind: string; // "budget", "selective", "checkpoint", "combined" or "offload"
  code: string; // the code to paste: shown as text
  predicted_peak_bytes: number;
  verified_peak_bytes: number | null; // from executing `code` and extracting; null where bw cannot
  measured_peak_bytes: number | null; // the best plan's graphs run in real mode (g.measure()); null otherwise
  recompute_flops: number;
  measured_seconds: number | null; // advise(..., measure_time=True): one forward and backward of its graphs here
  fits: boolean;
  best: boolean;
  note: string;
  selectable: boolean; // the widget can show its partition (an offload plan has none)
}

// Key lists. `satisfies` rejects a key the interface lacks; Exact<> (on CONTRACT_KEYS) rejects
// a list that misses one of the interface's keys. Either fails `npm run typecheck`.

/** `Keys` when it lists every key of T; otherwise a type naming the missing keys, so assigning fails. */
type Exact<T, Keys extends readonly (keyof T)[]> = [Exclude<keyof T, Keys[number]>] extends [never] ? Keys : { missing_keys: Exclude<keyof T, Keys[number]> };

export const GRAPH_DATA_KEYS = [
  "model", "partitioner", "memory_budget", "mode", "backend", "graph_index", "graph_count", "partitioners", "nodes",
  "edges", "saved", "partition", "run", "views", "code", "notes", "diff",
] as const satisfies readonly (keyof GraphData)[];
export const GRAPH_NODE_KEYS = [
  "id", "op", "kind", "module", "shape", "dtype", "args", "source", "line", "grad_of", "saved_kind", "recomputed", "why_recomputed",
  "bytes",
] as const satisfies readonly (keyof GraphNode)[];
export const SAVED_ROW_KEYS = [
  "name", "kind", "source", "source_aliases", "shape", "dtype", "bytes", "activation_bytes", "producer", "module", "alias_of",
  "alias_kind", "storage_op", "why", "torch_reason", "kind_label",
] as const satisfies readonly (keyof SavedRow)[];
export const PARTITION_TOTALS_KEYS = ["saved", "saved_activation_bytes", "saved_input_bytes", "recomputed", "backward_nodes", "torch_budget_ratio"] as const satisfies readonly (keyof PartitionTotals)[];
export const RUN_TOTALS_KEYS = ["saved", "saved_activation_bytes", "saved_input_bytes", "memory"] as const satisfies readonly (keyof RunTotals)[];
export const VIEWS_KEYS = [
  "modules", "first", "label_units", "min_label_px", "label_font_units", "min_glyph_px", "max_scale", "min_span", "try_across_below",
] as const satisfies readonly (keyof Views)[];
export const MODULE_ROW_KEYS = ["path", "parent", "depth", "size", "direct", "saved_bytes"] as const satisfies readonly (keyof ModuleRow)[];
export const CODE_KEYS = ["backward", "forward", "lines"] as const satisfies readonly (keyof Code)[];
export const CODE_LINES_KEYS = ["backward", "forward"] as const satisfies readonly (keyof CodeLines)[];
export const DIFF_KEYS = ["against", "recomputed_now", "recomputed_rows", "newly_saved"] as const satisfies readonly (keyof Diff)[];
export const PARTITIONER_OPTION_KEYS = ["name", "takes_budget", "description"] as const satisfies readonly (keyof PartitionerOption)[];
export const COMPARISON_ROW_KEYS = [
  "partition", "backend", "partitioner", "memory_budget", "saved", "saved_activation_bytes", "recomputed", "recomputed_ops",
  "forward_nodes", "backward_nodes", "backward_flops", "recompute_flops", "torch_budget_ratio", "peak_activation_bytes",
] as const satisfies readonly (keyof ComparisonRow)[];
export const SWEEP_POINT_KEYS = [
  "budget", "saved_activation_bytes", "recompute_flops", "saved", "pareto", "peak_activation_bytes", "timeline",
  "torch_budget_ratio", "peak_above_budget",
] as const satisfies readonly (keyof SweepPoint)[];
export const ADVICE_PLAN_ROW_KEYS = [
  "label", "kind", "code", "predicted_peak_bytes", "verified_peak_bytes", "measured_peak_bytes", "recompute_flops", "measured_seconds", "fits", "best",
  "note", "selectable",
] as const satisfies readonly (keyof AdvicePlanRow)[];
export const MEMORY_POINT_KEYS = ["step", "phase", "node", "graph", "live_bytes"] as const satisfies readonly (keyof MemoryPoint)[];
export const MEMORY_PEAK_KEYS = ["step", "phase", "node", "graph", "live_bytes", "module"] as const satisfies readonly (keyof MemoryPeak)[];
export const MODULE_BYTES_KEYS = ["module", "bytes"] as const satisfies readonly (keyof ModuleBytes)[];
export const MEMORY_BAND_KEYS = ["key", "label", "bytes"] as const satisfies readonly (keyof MemoryBand)[];
export const MEASURED_MEMORY_KEYS = ["timeline", "peak", "predicted_peak_bytes", "error_percent", "device", "reserved_peak_bytes"] as const satisfies readonly (keyof MeasuredMemory)[];
export const MEMORY_KEYS = [
  "timeline", "steps", "forward_steps", "peak", "by_module", "x_ticks", "y_ticks", "tick_count", "measured", "kinds", "modules",
  "module_depth", "selects",
] as const satisfies readonly (keyof Memory)[];

/** Every contract type by its Python name, with its key list (checked complete at compile time). */
export const CONTRACT_KEYS: {
  GraphData: Exact<GraphData, typeof GRAPH_DATA_KEYS>;
  GraphNode: Exact<GraphNode, typeof GRAPH_NODE_KEYS>;
  SavedRow: Exact<SavedRow, typeof SAVED_ROW_KEYS>;
  PartitionTotals: Exact<PartitionTotals, typeof PARTITION_TOTALS_KEYS>;
  RunTotals: Exact<RunTotals, typeof RUN_TOTALS_KEYS>;
  Views: Exact<Views, typeof VIEWS_KEYS>;
  ModuleRow: Exact<ModuleRow, typeof MODULE_ROW_KEYS>;
  Code: Exact<Code, typeof CODE_KEYS>;
  CodeLines: Exact<CodeLines, typeof CODE_LINES_KEYS>;
  Diff: Exact<Diff, typeof DIFF_KEYS>;
  PartitionerOption: Exact<PartitionerOption, typeof PARTITIONER_OPTION_KEYS>;
  ComparisonRow: Exact<ComparisonRow, typeof COMPARISON_ROW_KEYS>;
  SweepPoint: Exact<SweepPoint, typeof SWEEP_POINT_KEYS>;
  AdvicePlanRow: Exact<AdvicePlanRow, typeof ADVICE_PLAN_ROW_KEYS>;
  MemoryPoint: Exact<MemoryPoint, typeof MEMORY_POINT_KEYS>;
  MemoryPeak: Exact<MemoryPeak, typeof MEMORY_PEAK_KEYS>;
  ModuleBytes: Exact<ModuleBytes, typeof MODULE_BYTES_KEYS>;
  Memory: Exact<Memory, typeof MEMORY_KEYS>;
  MeasuredMemory: Exact<MeasuredMemory, typeof MEASURED_MEMORY_KEYS>;
  MemoryBand: Exact<MemoryBand, typeof MEMORY_BAND_KEYS>;
} = {
  GraphData: GRAPH_DATA_KEYS,
  GraphNode: GRAPH_NODE_KEYS,
  SavedRow: SAVED_ROW_KEYS,
  PartitionTotals: PARTITION_TOTALS_KEYS,
  RunTotals: RUN_TOTALS_KEYS,
  Views: VIEWS_KEYS,
  ModuleRow: MODULE_ROW_KEYS,
  Code: CODE_KEYS,
  CodeLines: CODE_LINES_KEYS,
  Diff: DIFF_KEYS,
  PartitionerOption: PARTITIONER_OPTION_KEYS,
  ComparisonRow: COMPARISON_ROW_KEYS,
  SweepPoint: SWEEP_POINT_KEYS,
  AdvicePlanRow: ADVICE_PLAN_ROW_KEYS,
  MemoryPoint: MEMORY_POINT_KEYS,
  MemoryPeak: MEMORY_PEAK_KEYS,
  ModuleBytes: MODULE_BYTES_KEYS,
  Memory: MEMORY_KEYS,
  MeasuredMemory: MEASURED_MEMORY_KEYS,
  MemoryBand: MEMORY_BAND_KEYS,
};
