/** The payload the kernel sends (bwd_widgets/_graph_data.py: graph_payload). */

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
  line: number;
  grad_of: string[];
  saved_kind: string;
  recomputed: boolean;
}

export interface SavedRow {
  name: string;
  kind: string;
  source: string;
  shape: number[];
  dtype: string;
  bytes: number;
  activation_bytes: number;
  producer: string;
  module: string;
  alias_of: string;
  storage_op: string;
  why: string;
}

export interface Totals {
  saved: number;
  saved_activation_bytes: number;
  saved_input_bytes: number;
  recomputed: number;
  all_graphs_saved: number;
  all_graphs_activation_bytes: number;
}

export interface GraphData {
  model: string;
  partitioner: string;
  memory_budget: number | null;
  mode: string;
  graph_index: number;
  graph_count: number;
  nodes: GraphNode[];
  edges: [string, string][];
  saved: SavedRow[];
  totals: Totals;
  code: { backward: string; forward: string };
  notes: string[];
  diff: { against: string; recomputed_now: string[]; recomputed_rows: SavedRow[]; newly_saved: string[] };
}
