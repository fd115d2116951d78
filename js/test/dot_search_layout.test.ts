import { describe, expect, it } from "vitest";
import { codeLines, nodeAtLine, tokenizeLine } from "../code";
import { buildDot, clusterPaths, nodeLabel, QUICK_LAYOUT_ABOVE, quote, shortDtype } from "../dot";
import { formatDelta } from "../format";
import { formatBytes } from "../units";
import { GROUP_PREFIX, moduleTree, modulePaths, visibleGraph } from "../grouping";
import { LayoutClient, StaleLayout } from "../layout";
import { matchCountText, searchNodes, stepMatch, visibleMatches } from "../search";
import { sortRows } from "../table";
import type { SavedRow } from "../types";
import { node, transformerData, withViews } from "./synthetic";

describe("DOT", () => {
  it("escapes quotes, backslashes and newlines in labels", () => {
    expect(quote('a"b\\c\nd')).toBe('"a\\"b\\\\c\\nd"');
  });

  it("puts no user text in element ids and nests clusters", () => {
    const data = transformerData(1, 2);
    data.nodes[1].module = '<img src=x onerror=alert(1)>';
    withViews(data);
    const graph = visibleGraph(data, new Set(['<img src=x onerror=alert(1)>', "blocks", "blocks.0", "blocks.0.mlp", "blocks.0.attn"]));
    const dot = buildDot(graph);
    expect(dot).toMatch(/^digraph backward \{/);
    // every visible node has one id, v<its index>, every edge e<its index>, every cluster c<its index>, and no other id is emitted
    const ids = [...dot.matchAll(/\bid="([^"]*)"/g)].map((m) => m[1]);
    const clusters = clusterPaths(graph);
    expect(ids.length).toBe(graph.nodes.length + graph.edges.length + clusters.length);
    expect(new Set(ids)).toEqual(new Set([...graph.nodes.map((_, i) => `v${i}`), ...graph.edges.map((_, i) => `e${i}`), ...clusters.map((_, i) => `c${i}`)]));
    expect(dot).toContain(`v1 [id="v1", class="k-op", label="b0_mlp_0\\nmm"`);
    expect(dot).toContain('label="<img src=x onerror=alert(1)>"');
    expect(dot.match(/subgraph cluster_/g)!.length).toBe(5);
    expect(clusters).toContain("<img src=x onerror=alert(1)>");
  });

  it("lays big drawings out with Graphviz's effort limits only, and left to right when asked", () => {
    const small = visibleGraph(transformerData(1, 2), new Set());
    expect(buildDot(small)).not.toContain("nslimit");
    const big = transformerData(8, 10);
    const open = visibleGraph(big, new Set(modulePaths(moduleTree(big.views.modules))));
    expect(open.nodes.length).toBeGreaterThan(QUICK_LAYOUT_ABOVE);
    expect(buildDot(open)).toContain("nslimit=1");
    expect(buildDot(small, undefined, "LR")).toContain("rankdir=LR");
  });

  it("shortens dtypes and ops in labels; the details keep them whole", () => {
    expect(["float32", "bfloat16", "float16", "int64", "uint8", "bool"].map(shortDtype)).toEqual(["f32", "bf16", "f16", "i64", "u8", "bool"]);
    expect(nodeLabel({ id: "s", cluster: "", node: node("s", "", "saved", { shape: [2, 3], dtype: "float32" }) })).toBe("s\n[2, 3] f32");
    expect(nodeLabel({ id: "mm_3", cluster: "", node: node("mm_3", "", "op", { op: "aten.mm" }) })).toBe("mm_3");
    expect(nodeLabel({ id: "getitem_3", cluster: "", node: node("getitem_3", "", "op", { op: "aten.native_batch_norm[0]" }) })).toBe("getitem_3\nnative_batch_norm[0]");
  });

  it("labels gradients with what they differentiate and groups with their size", () => {
    expect(nodeLabel({ id: "g", cluster: "", node: node("g", "", "gradient", { grad_of: ["conv.weight"], op: "aten.convolution_backward[1]" }) })).toContain("\u2207 conv.weight");
    expect(nodeLabel({ id: GROUP_PREFIX + "blocks", cluster: "", path: "blocks", size: 12 })).toBe("blocks \u25B8\n12 nodes");
    expect(nodeLabel({ id: GROUP_PREFIX + "blocks", cluster: "", path: "blocks", size: 12 }, new Map([["blocks", 2048]]))).toBe("blocks \u25B8\n12 nodes \u00B7 2.05 KB saved");
  });
});

describe("search", () => {
  it("matches name or op, case-insensitively, and marks collapsed groups", () => {
    const data = transformerData(2, 3);
    data.nodes[3].op = "aten.native_layer_norm_backward";
    expect(searchNodes(data.nodes, "LAYER_NORM").map((n) => n.id)).toEqual([data.nodes[3].id]);
    expect(searchNodes(data.nodes, "  ")).toEqual([]);
    expect([...visibleMatches(searchNodes(data.nodes, "b0_attn_1"), new Set())]).toEqual([GROUP_PREFIX + "blocks"]);
  });

  it("finds modules by path (whole segments when dotted) and nodes by shape", () => {
    const data = transformerData(12, 2);
    const modules = (query: string) => new Set(searchNodes(data.nodes, query).map((n) => n.module));
    expect(modules("blocks.1")).toEqual(new Set(["blocks.1.mlp", "blocks.1.attn"]));
    expect(modules("blocks.1.attn")).toEqual(new Set(["blocks.1.attn"]));
    expect(modules("ATTN").size).toBe(12);
    data.nodes[5].shape = [4, 32, 256];
    expect(searchNodes(data.nodes, "[4, 32, 256]").map((n) => n.id)).toEqual([data.nodes[5].id]);
    expect(searchNodes(data.nodes, "32, 256").map((n) => n.id)).toEqual([data.nodes[5].id]);
  });

  it("steps through matches with Enter and Shift+Enter, wrapping, and counts them", () => {
    expect([stepMatch(3, -1, 1), stepMatch(3, 0, 1), stepMatch(3, 2, 1)]).toEqual([0, 1, 0]);
    expect([stepMatch(3, -1, -1), stepMatch(3, 0, -1)]).toEqual([2, 2]);
    expect(stepMatch(0, -1, 1)).toBe(-1);
    expect(matchCountText("attn", 12, -1)).toBe("12 matches");
    expect(matchCountText("attn", 12, 2)).toBe("3 of 12 matches");
    expect(matchCountText("zzz", 0, -1)).toBe("no match");
    expect(matchCountText(" ", 0, -1)).toBe("");
  });
});

describe("layout client", () => {
  it("resolves only the latest request and caches by DOT", async () => {
    const posted: { id: number; dot: string }[] = [];
    const client = new LayoutClient((r) => posted.push(r));
    const first = client.request("digraph a {}");
    const second = client.request("digraph b {}");
    client.receive({ id: posted[0].id, svg: "<svg>a</svg>" });
    client.receive({ id: posted[1].id, svg: "<svg>b</svg>" });
    await expect(first).rejects.toBeInstanceOf(StaleLayout);
    await expect(second).resolves.toBe("<svg>b</svg>");
    await expect(client.request("digraph a {}")).resolves.toBe("<svg>a</svg>");
    expect(posted.length).toBe(2);
  });

  it("lays a graph out once when it is asked for again while the worker has it, the newest asker served", async () => {
    const posted: { id: number; dot: string }[] = [];
    const client = new LayoutClient((r) => posted.push(r));
    const [ahead, kernels] = [{}, {}];
    const drawnAhead = client.request("digraph a {}", ahead);
    const first = client.request("digraph a {}", kernels);
    const again = client.request("digraph a {}", kernels); // the kernel's pane asked twice: the first is stale
    expect(posted.length).toBe(1);
    client.receive({ id: posted[0].id, svg: "<svg>a</svg>" });
    await expect(drawnAhead).resolves.toBe("<svg>a</svg>");
    await expect(first).rejects.toBeInstanceOf(StaleLayout);
    await expect(again).resolves.toBe("<svg>a</svg>");
    const later = client.request("digraph b {}", ahead);
    expect(posted.length).toBe(2);
    client.receive({ id: posted[1].id, error: "syntax error" });
    await expect(later).rejects.toThrow("syntax error");
    expect(client.request("digraph b {}", ahead)).toBeInstanceOf(Promise);
    expect(posted.length).toBe(3); // a failed layout is not kept: asked again, laid out again
  });

  it("reports layout errors", async () => {
    const posted: { id: number; dot: string }[] = [];
    const client = new LayoutClient((r) => posted.push(r));
    const request = client.request("bad");
    client.receive({ id: posted[0].id, error: "syntax error" });
    await expect(request).rejects.toThrow("syntax error");
  });
});

describe("table, code and formatting", () => {
  const row = (name: string, bytes: number): SavedRow => ({ name, kind: "activation", source: "", source_aliases: [], shape: [1], dtype: "float32", bytes, activation_bytes: bytes, producer: "", module: "", alias_of: "", alias_kind: "", storage_op: "", why: "", torch_reason: "", kind_label: "activation" });

  it("sorts by bytes and by name with numeric suffixes", () => {
    const rows = [row("getitem_10", 5), row("getitem_2", 50), row("convolution", 7)];
    expect(sortRows(rows, "bytes", true).map((r) => r.name)).toEqual(["getitem_2", "convolution", "getitem_10"]);
    expect(sortRows(rows, "name", false).map((r) => r.name)).toEqual(["convolution", "getitem_2", "getitem_10"]);
  });

  it("tokenizes generated Python and maps lines to nodes", () => {
    const tokens = tokenizeLine("    mm = torch.ops.aten.mm.default(a, b);  a = None");
    expect(tokens.map((t) => t.text).join("")).toBe("    mm = torch.ops.aten.mm.default(a, b);  a = None");
    expect(tokens.find((t) => t.text === "torch.ops.aten.mm.default")!.kind).toBe("call");
    expect(tokens.find((t) => t.text === "None")!.kind).toBe("keyword");
    expect(nodeAtLine([{ id: "p", line: 3, op: "placeholder" }, { id: "mm", line: 4, op: "aten.mm" }], 4)).toBe("mm");
    expect(nodeAtLine([{ id: "p", line: 3, op: "placeholder" }], 3)).toBeNull();
  });

  it("shows code without its clearing statements or blank runs, keeping the exact line numbers", () => {
    const code = "import torch\n\nclass G:\n    \n    \n    def forward(self, a, b):\n        mm = f(a, b);  a = b = None\n        c = None\n        return (mm,)";
    const lines = codeLines(code, false);
    expect(lines.map((l) => l.text)).toEqual(["import torch", "", "class G:", "", "    def forward(self, a, b):", "        mm = f(a, b)", "        return (mm,)"]);
    expect(lines.find((l) => l.text.includes("mm = f"))!.number).toBe(7);
    expect(codeLines(code, true).map((l) => l.text).join("\n")).toBe(code);
  });

  it("formats bytes and deltas", () => {
    expect(formatBytes(16384)).toBe("16.4 KB");
    expect(formatBytes(512)).toBe("512 B");
    expect(formatDelta(-2)).toBe("-2");
    expect(formatDelta(1500, true)).toBe("+1.50 KB");
    expect(formatDelta(0)).toBe("");
  });
});
