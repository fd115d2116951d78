/** DOM glue: three linked views of one extraction. Kernel text only ever goes in via textContent. */

import workerSource from "virtual:layout-worker";
import { nodeAtLine, tokenizeLine } from "./code";
import { buildDot } from "./dot";
import { formatBytes, formatDelta, formatShape } from "./format";
import { GROUP_PREFIX, initialExpansion, reveal, representative, toggle, visibleGraph, type VisibleGraph } from "./grouping";
import { LayoutClient, StaleLayout } from "./layout";
import { searchNodes, visibleMatches } from "./search";
import { chartGeometry, type SweepPoint } from "./sweep";
import { COLUMNS, sortRows, type SortKey } from "./table";
import type { GraphData, GraphNode } from "./types";

export interface Model {
  get(name: string): any;
  set(name: string, value: unknown): void;
  save_changes(): void;
  on(event: string, callback: () => void): void;
  off?(event: string, callback: () => void): void;
}

function element<K extends keyof HTMLElementTagNameMap>(tag: K, className = "", text = ""): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text) el.textContent = text;
  return el;
}

const MIN_FIT_SCALE = 0.45;
const READABLE_SCALE = 0.9;

let sharedWorker: Worker | null = null;
let sharedClient: LayoutClient | null = null;

function layoutClient(): LayoutClient {
  if (!sharedClient) {
    const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    sharedWorker = new Worker(url);
    sharedClient = new LayoutClient((request) => sharedWorker!.postMessage(request));
    sharedWorker.onmessage = (event) => sharedClient!.receive(event.data);
  }
  return sharedClient;
}

export function render({ model, el }: { model: Model; el: HTMLElement }): () => void {
  const layout = layoutClient();
  const root = element("div", "bwd-root");
  el.appendChild(root);

  // header
  const header = element("div", "bwd-header");
  const title = element("span", "bwd-title");
  const stats = element("span", "bwd-stats");
  const controls = element("span", "bwd-controls");
  const partitionerSelect = element("select", "bwd-partitioner");
  for (const name of ["default", "min_cut"]) {
    const option = element("option", "", name);
    option.value = name;
    partitionerSelect.appendChild(option);
  }
  const budgetLabel = element("label", "bwd-budget-label", "budget ");
  const budget = element("input", "bwd-budget");
  budget.type = "range";
  budget.min = "0";
  budget.max = "1";
  budget.step = "0.05";
  const budgetValue = element("span", "bwd-budget-value");
  budgetLabel.append(budget, budgetValue);
  const graphSelect = element("select", "bwd-graph-index");
  const busy = element("span", "bwd-busy", "partitioning\u2026");
  const sweepButton = element("button", "bwd-sweep-button", "Sweep budgets");
  sweepButton.title = "min-cut at memory budgets 0, 0.1, \u2026, 1 on this joint graph";
  const sweepProgress = element("span", "bwd-sweep-progress");
  const error = element("span", "bwd-error");
  const notes = element("span", "bwd-notes");
  const diffLine = element("span", "bwd-diff-line");
  controls.append(partitionerSelect, budgetLabel, graphSelect, sweepButton, sweepProgress, busy);
  header.append(title, stats, controls, error, notes, diffLine);

  // graph pane
  const main = element("div", "bwd-main");
  const graphPane = element("div", "bwd-graph");
  const toolbar = element("div", "bwd-toolbar");
  const search = element("input", "bwd-search");
  search.placeholder = "search node or op";
  const matchCount = element("span", "bwd-match-count");
  const fit = element("button", "bwd-fit", "Fit");
  const collapseAll = element("button", "bwd-collapse", "Collapse all");
  toolbar.append(search, matchCount, fit, collapseAll);
  const svgHost = element("div", "bwd-svg-host");
  const legend = element("div", "bwd-legend");
  for (const [kind, text] of [["saved", "saved for backward"], ["tangent", "tangent"], ["gradient", "gradient output"], ["op", "op"], ["recomputed", "recomputed forward op"], ["group", "module (click to open)"]]) {
    const item = element("span", `bwd-legend-item bwd-kind-${kind}`, text);
    legend.appendChild(item);
  }
  graphPane.append(toolbar, svgHost, legend);

  // side: details, saved table, code
  const side = element("div", "bwd-side");
  const studio = element("div", "bwd-studio");
  const compareTable = element("table", "bwd-compare");
  const sweepChart = element("div", "bwd-sweep-chart");
  studio.append(compareTable, sweepChart);
  const details = element("div", "bwd-details");
  const savedPane = element("div", "bwd-saved");
  const table = element("table", "bwd-table");
  const savedTotals = element("div", "bwd-totals");
  savedPane.append(savedTotals, table);
  const codePane = element("div", "bwd-code-pane");
  const codeBar = element("div", "bwd-code-bar");
  const backwardTab = element("button", "bwd-tab bwd-tab-backward", "backward");
  const forwardTab = element("button", "bwd-tab bwd-tab-forward", "forward");
  const copy = element("button", "bwd-copy", "Copy");
  codeBar.append(backwardTab, forwardTab, copy);
  const code = element("pre", "bwd-code");
  codePane.append(codeBar, code);
  side.append(studio, details, savedPane, codePane);
  main.append(graphPane, side);
  root.append(header, main);

  let data: GraphData = model.get("data");
  let byId = new Map<string, GraphNode>();
  let expanded = new Set<string>();
  let visible: VisibleGraph = { nodes: [], edges: [] };
  let svg: SVGSVGElement | null = null;
  let fullView = { x: 0, y: 0, w: 1, h: 1 };
  let view = { ...fullView };
  let sortKey: SortKey = "bytes";
  let descending = true;
  let codeKind: "backward" | "forward" = "backward";
  let matches = new Set<string>();
  const started = performance.now();

  /** The whole graph if it is legible when fitted; else a legible window centred on the first tangent. */
  function showReadable(): void {
    const width = svgHost.clientWidth || 800;
    const height = svgHost.clientHeight || 600;
    view = { ...fullView };
    if (Math.min(width / fullView.w, height / fullView.h) < MIN_FIT_SCALE) {
      view = { x: fullView.x, y: fullView.y, w: width / READABLE_SCALE, h: height / READABLE_SCALE };
      setView();
      const first = visible.nodes.findIndex((v) => v.node?.kind === "tangent");
      const target = first >= 0 ? svg?.querySelector(`#v${first}`) : null;
      if (target) panTo(target);
    }
    setView();
  }

  const setView = () => svg?.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);

  function svgElementFor(visibleId: string): Element | null {
    const index = visible.nodes.findIndex((v) => v.id === visibleId);
    return index < 0 || !svg ? null : svg.querySelector(`#v${index}`);
  }

  function panTo(target: Element): void {
    if (!svg) return;
    const box = svg.getBoundingClientRect();
    const rect = target.getBoundingClientRect();
    if (!box.width || !box.height) return;
    const cx = view.x + ((rect.left + rect.width / 2 - box.left) * view.w) / box.width;
    const cy = view.y + ((rect.top + rect.height / 2 - box.top) * view.h) / box.height;
    view = { ...view, x: cx - view.w / 2, y: cy - view.h / 2 };
    setView();
  }

  function renderHeader(): void {
    title.textContent = `${data.model} \u00B7 ${data.partitioner}${data.memory_budget != null ? ` (budget ${data.memory_budget})` : ""} \u00B7 ${data.mode}`;
    const previous = model.get("previous") || {};
    const savedDelta = previous.saved != null ? formatDelta(data.totals.saved - previous.saved) : "";
    const bytesDelta = previous.saved_activation_bytes != null ? formatDelta(data.totals.saved_activation_bytes - previous.saved_activation_bytes, true) : "";
    stats.textContent = "";
    const count = element("span", "bwd-saved-count", String(data.totals.saved));
    const activation = element("span", "bwd-activation-bytes", formatBytes(data.totals.saved_activation_bytes));
    stats.append("saved ", count, savedDelta ? ` (${savedDelta})` : "", " \u00B7 activations ", activation, bytesDelta ? ` (${bytesDelta})` : "", ` \u00B7 ${data.nodes.length} backward nodes \u00B7 ${data.totals.recomputed} recomputed`);
    partitionerSelect.value = model.get("partitioner");
    const budgetNumber = Number(model.get("memory_budget"));
    budget.value = String(budgetNumber);
    budgetValue.textContent = budgetNumber.toFixed(2);
    budgetLabel.classList.toggle("bwd-disabled", partitionerSelect.value !== "min_cut");
    budget.disabled = partitionerSelect.value !== "min_cut" || !model.get("can_rerun");
    partitionerSelect.disabled = !model.get("can_rerun");
    graphSelect.textContent = "";
    for (let i = 0; i < data.graph_count; i++) {
      const option = element("option", "", `graph ${i + 1} of ${data.graph_count}`);
      option.value = String(i);
      graphSelect.appendChild(option);
    }
    graphSelect.value = String(data.graph_index);
    graphSelect.style.display = data.graph_count > 1 ? "" : "none";
    busy.style.display = model.get("busy") ? "" : "none";
    error.textContent = model.get("error") || "";
    notes.textContent = (data.notes || []).join(" ");
    const diff = data.diff;
    diffLine.textContent = diff && diff.against
      ? `against ${diff.against}: ${diff.recomputed_now.length} values now recomputed (dashed outline), ${diff.newly_saved.length} newly saved (outlined rows)`
      : "";
    sweepButton.style.display = model.get("can_rerun") ? "" : "none";
    sweepButton.disabled = Boolean(model.get("busy"));
    sweepProgress.textContent = model.get("sweep_progress") || "";
  }

  function renderStudio(): void {
    const rows = (model.get("comparison_rows") || []) as Record<string, any>[];
    compareTable.textContent = "";
    compareTable.style.display = rows.length ? "" : "none";
    if (rows.length) {
      const columns: [string, string, (r: Record<string, any>) => string][] = [
        ["partition", "partition", (r) => String(r.partition)],
        ["saved", "saved", (r) => String(r.saved)],
        ["activations", "saved_activation_bytes", (r) => formatBytes(r.saved_activation_bytes)],
        ["recomputed", "recomputed", (r) => String(r.recomputed)],
        ["bw nodes", "backward_nodes", (r) => String(r.backward_nodes)],
        ["bw GFLOP", "backward_flops", (r) => (r.backward_flops / 1e9).toFixed(3)],
      ];
      const head = element("tr");
      for (const [label] of columns) head.appendChild(element("th", "", label));
      compareTable.appendChild(head);
      const current = model.get("compare_index");
      rows.forEach((r, i) => {
        const tr = element("tr", `bwd-compare-row${i === current ? " bwd-current" : ""}`);
        tr.dataset.index = String(i);
        for (const [, , cell] of columns) tr.appendChild(element("td", "", cell(r)));
        tr.title = r.recomputed_ops?.length ? `recomputes: ${r.recomputed_ops.join(", ")}` : "recomputes nothing";
        tr.addEventListener("click", () => {
          model.set("compare_index", i);
          model.save_changes();
        });
        compareTable.appendChild(tr);
      });
    }
    const points = (model.get("sweep_points") || []) as SweepPoint[];
    sweepChart.textContent = "";
    sweepChart.style.display = points.length ? "" : "none";
    if (!points.length) return;
    const width = 300;
    const height = 150;
    const chart = chartGeometry(points, width, height);
    const ns = "http://www.w3.org/2000/svg";
    const svgChart = document.createElementNS(ns, "svg");
    svgChart.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svgChart.setAttribute("class", "bwd-sweep-svg");
    const axis = document.createElementNS(ns, "path");
    axis.setAttribute("d", `M28 ${height - 28} H${width - 28} M28 ${height - 28} V28`);
    axis.setAttribute("class", "bwd-axis");
    const front = document.createElementNS(ns, "polyline");
    front.setAttribute("points", chart.front);
    front.setAttribute("class", "bwd-front");
    const xLabel = document.createElementNS(ns, "text");
    xLabel.setAttribute("x", String(width / 2 - 60));
    xLabel.setAttribute("y", String(height - 8));
    xLabel.textContent = "saved activation bytes \u2192";
    const yLabel = document.createElementNS(ns, "text");
    yLabel.setAttribute("x", "4");
    yLabel.setAttribute("y", "18");
    yLabel.textContent = "recompute FLOPs \u2191";
    svgChart.append(axis, front, xLabel, yLabel);
    const current = model.get("sweep_index");
    for (const p of chart.points) {
      const circle = document.createElementNS(ns, "circle");
      circle.setAttribute("cx", p.x.toFixed(1));
      circle.setAttribute("cy", p.y.toFixed(1));
      circle.setAttribute("r", p.index === current ? "6" : "4.5");
      circle.setAttribute("class", `bwd-sweep-point${p.pareto ? " bwd-pareto" : ""}${p.index === current ? " bwd-current" : ""}`);
      circle.setAttribute("data-index", String(p.index));
      const tip = document.createElementNS(ns, "title");
      const point = points[p.index];
      tip.textContent = `${p.label}: ${formatBytes(point.saved_activation_bytes)} saved, ${point.recompute_flops} recompute FLOPs`;
      circle.appendChild(tip);
      circle.addEventListener("click", () => {
        model.set("sweep_index", p.index);
        model.save_changes();
      });
      svgChart.appendChild(circle);
    }
    sweepChart.appendChild(svgChart);
  }

  function renderTable(): void {
    table.textContent = "";
    const head = element("tr");
    for (const column of COLUMNS) {
      const th = element("th", sortKey === column ? `bwd-sorted ${descending ? "bwd-desc" : "bwd-asc"}` : "", column);
      th.dataset.column = column;
      th.addEventListener("click", () => {
        descending = sortKey === column ? !descending : column === "bytes";
        sortKey = column;
        renderTable();
        highlightSelection(false);
      });
      head.appendChild(th);
    }
    const thead = element("thead");
    thead.appendChild(head);
    const tbody = element("tbody");
    for (const row of sortRows(data.saved, sortKey, descending)) {
      const tr = element("tr", `bwd-row bwd-row-${row.kind}`);
      tr.dataset.name = row.name;
      const cells = [
        row.name,
        row.kind + (row.alias_of ? " (view)" : ""),
        formatShape(row.shape),
        row.dtype,
        formatBytes(row.bytes),
        row.producer || row.source,
        row.module,
      ];
      for (const text of cells) tr.appendChild(element("td", "", text));
      tr.title = (row.alias_of ? `a view of ${row.alias_of}: shares its memory. ` : "") + row.why;
      if (data.diff?.newly_saved.includes(row.name)) tr.classList.add("bwd-diff-saved");
      tr.addEventListener("click", () => select(row.name));
      tbody.appendChild(tr);
    }
    for (const row of data.diff?.recomputed_rows ?? []) {
      const tr = element("tr", "bwd-row bwd-row-recomputed-now");
      tr.dataset.name = row.name;
      const cells = [row.name, "recomputed now", formatShape(row.shape), row.dtype, formatBytes(row.bytes), row.producer, row.module];
      for (const text of cells) tr.appendChild(element("td", "", text));
      tr.title = `saved under ${data.diff.against}; this partition recomputes it in backward instead`;
      tr.addEventListener("click", () => select(row.name));
      tbody.appendChild(tr);
    }
    table.append(thead, tbody);
    const t = data.totals;
    savedTotals.textContent = `${t.saved} saved \u00B7 activations ${formatBytes(t.saved_activation_bytes)} \u00B7 parameters/inputs ${formatBytes(t.saved_input_bytes)}`;
  }

  function renderCode(): void {
    code.textContent = "";
    const text = data.code[codeKind];
    text.split("\n").forEach((line, i) => {
      const lineEl = element("div", "bwd-line");
      lineEl.dataset.line = String(i + 1);
      for (const token of tokenizeLine(line)) {
        lineEl.appendChild(token.kind === "space" || token.kind === "name" || token.kind === "op" ? document.createTextNode(token.text) : element("span", `bwd-tok-${token.kind}`, token.text));
      }
      if (!line) lineEl.textContent = "\u200B";
      code.appendChild(lineEl);
    });
    backwardTab.classList.toggle("bwd-active", codeKind === "backward");
    forwardTab.classList.toggle("bwd-active", codeKind === "forward");
  }

  function renderDetails(node: GraphNode | undefined): void {
    details.textContent = "";
    if (!node) {
      details.appendChild(element("div", "bwd-hint", "Click a node, a saved tensor or a code line."));
      return;
    }
    details.appendChild(element("div", "bwd-details-title", node.id));
    const rows: [string, string][] = [
      ["op", node.op],
      ["kind", node.kind + (node.saved_kind ? ` (${node.saved_kind})` : "")],
      ["shape", `${formatShape(node.shape)} ${node.dtype}`],
      ["args", node.args],
      ["module", node.module || "(top level)"],
      ["source", node.source],
    ];
    if (node.grad_of.length) rows.push(["gradient of", node.grad_of.join(", ")]);
    const saved = data.saved.find((s) => s.name === node.id);
    if (saved) {
      rows.push(["saved", `${formatBytes(saved.bytes)}${saved.source ? ` \u00B7 ${saved.source}` : ""}${saved.alias_of ? ` \u00B7 view of ${saved.alias_of}` : ""}`]);
      rows.push(["why saved", saved.why]);
    }
    const dl = element("dl");
    for (const [key, value] of rows) {
      if (!value) continue;
      dl.append(element("dt", "", key), element("dd", "", value));
    }
    details.appendChild(dl);
  }

  function highlightSelection(pan: boolean): void {
    const selected = model.get("selected") as string;
    const node = byId.get(selected);
    svg?.querySelectorAll(".bwd-selected").forEach((e) => e.classList.remove("bwd-selected"));
    table.querySelectorAll(".bwd-selected").forEach((e) => e.classList.remove("bwd-selected"));
    code.querySelectorAll(".bwd-selected").forEach((e) => e.classList.remove("bwd-selected"));
    renderDetails(node);
    if (!node) return;
    const target = svgElementFor(representative(node, expanded));
    if (target) {
      target.classList.add("bwd-selected");
      if (pan) panTo(target);
    }
    const row = table.querySelector(`tr[data-name="${CSS.escape(node.id)}"]`);
    if (row) {
      row.classList.add("bwd-selected");
      row.scrollIntoView({ block: "nearest" });
    }
    if (codeKind === "backward" && node.line) {
      const line = code.querySelector(`[data-line="${node.line}"]`) as HTMLElement | null;
      if (line) {
        line.classList.add("bwd-selected");
        code.scrollTop = line.offsetTop - code.clientHeight / 3;
      }
    }
  }

  function highlightMatches(): void {
    svg?.querySelectorAll(".bwd-match").forEach((e) => e.classList.remove("bwd-match"));
    for (const id of matches) svgElementFor(id)?.classList.add("bwd-match");
  }

  async function relayout(): Promise<void> {
    visible = visibleGraph(data, expanded);
    const recomputedNow = new Set(data.diff?.recomputed_now ?? []);
    const before = performance.now();
    let text: string;
    try {
      text = await layout.request(buildDot(visible));
    } catch (e) {
      if (e instanceof StaleLayout) return;
      error.textContent = `layout failed: ${String(e)}`;
      return;
    }
    const parsed = new DOMParser().parseFromString(text, "image/svg+xml");
    const fresh = document.importNode(parsed.documentElement, true) as unknown as SVGSVGElement;
    fresh.removeAttribute("width");
    fresh.removeAttribute("height");
    fresh.classList.add("bwd-svg");
    const box = (fresh.getAttribute("viewBox") || "0 0 100 100").split(/\s+/).map(Number);
    const keepView = svg !== null && fullView.w === box[2] && fullView.h === box[3];
    fullView = { x: box[0], y: box[1], w: box[2], h: box[3] };
    svgHost.textContent = "";
    svgHost.appendChild(fresh);
    svg = fresh;
    if (keepView) setView();
    else showReadable();
    fresh.querySelectorAll("g.node").forEach((g) => {
      const index = Number(g.id.slice(1));
      const v = visible.nodes[index];
      if (!v) return;
      g.setAttribute("data-visible-id", v.id);
      g.classList.add(v.path !== undefined ? "bwd-group" : `bwd-node-${v.node!.kind}`);
      if (v.node && recomputedNow.has(v.node.id)) g.classList.add("bwd-diff-recomputed");
      g.addEventListener("click", (event) => {
        event.stopPropagation();
        if (v.path !== undefined) {
          expanded = toggle(v.path, expanded);
          void relayout();
        } else {
          select(v.node!.id);
        }
      });
    });
    fresh.querySelectorAll("g.cluster").forEach((g) => {
      g.addEventListener("dblclick", () => {
        const label = g.querySelector("text")?.textContent;
        if (label && expanded.has(label)) {
          expanded = toggle(label, expanded);
          void relayout();
        }
      });
    });
    root.dataset.layoutMs = String(Math.round(performance.now() - before));
    root.dataset.visibleNodes = String(visible.nodes.length);
    if (!root.dataset.firstPaintMs) root.dataset.firstPaintMs = String(Math.round(performance.now() - started));
    root.dataset.rendered = String(Number(root.dataset.rendered || 0) + 1);
    highlightMatches();
    highlightSelection(true);
  }

  function select(id: string): void {
    const before = performance.now();
    model.set("selected", id);
    model.save_changes();
    onSelected();
    root.dataset.selectMs = String(Math.round(performance.now() - before));
  }

  function onSelected(): void {
    const node = byId.get(model.get("selected"));
    if (node && node.kind !== undefined && representative(node, expanded) !== node.id) {
      expanded = reveal(node, expanded);
      void relayout();
    } else {
      highlightSelection(true);
    }
  }

  function onData(): void {
    data = model.get("data");
    byId = new Map(data.nodes.map((n) => [n.id, n]));
    expanded = initialExpansion(data);
    const query = search.value;
    matches = visibleMatches(searchNodes(data.nodes, query), expanded);
    renderHeader();
    renderStudio();
    renderTable();
    renderCode();
    void relayout();
  }

  // events
  svgHost.addEventListener("wheel", (event) => {
    if (!svg) return;
    event.preventDefault();
    const box = svg.getBoundingClientRect();
    const factor = Math.exp(event.deltaY * 0.0015);
    const px = view.x + ((event.clientX - box.left) * view.w) / box.width;
    const py = view.y + ((event.clientY - box.top) * view.h) / box.height;
    view = { x: px - (px - view.x) * factor, y: py - (py - view.y) * factor, w: view.w * factor, h: view.h * factor };
    setView();
  }, { passive: false });
  let drag: { x: number; y: number; view: typeof view } | null = null;
  svgHost.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, view: { ...view } };
  });
  window.addEventListener("pointerup", () => (drag = null));
  svgHost.addEventListener("pointermove", (event) => {
    if (!drag || !svg) return;
    const box = svg.getBoundingClientRect();
    view = { ...drag.view, x: drag.view.x - ((event.clientX - drag.x) * view.w) / box.width, y: drag.view.y - ((event.clientY - drag.y) * view.h) / box.height };
    setView();
  });
  fit.addEventListener("click", () => {
    view = { ...fullView };
    setView();
  });
  collapseAll.addEventListener("click", () => {
    expanded = new Set();
    void relayout();
  });
  search.addEventListener("input", () => {
    const found = searchNodes(data.nodes, search.value);
    matches = visibleMatches(found, expanded);
    matchCount.textContent = search.value ? `${found.length} match${found.length === 1 ? "" : "es"}` : "";
    highlightMatches();
  });
  search.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    const found = searchNodes(data.nodes, search.value);
    if (found.length) select(found[0].id);
  });
  code.addEventListener("click", (event) => {
    const line = (event.target as HTMLElement).closest("[data-line]") as HTMLElement | null;
    if (!line || codeKind !== "backward") return;
    const id = nodeAtLine(data.nodes, Number(line.dataset.line));
    if (id) select(id);
  });
  backwardTab.addEventListener("click", () => {
    codeKind = "backward";
    renderCode();
    highlightSelection(false);
  });
  forwardTab.addEventListener("click", () => {
    codeKind = "forward";
    renderCode();
  });
  copy.addEventListener("click", () => {
    void navigator.clipboard?.writeText(data.code[codeKind]);
    copy.textContent = "Copied";
    setTimeout(() => (copy.textContent = "Copy"), 1200);
  });
  partitionerSelect.addEventListener("change", () => {
    model.set("partitioner", partitionerSelect.value);
    model.save_changes();
    renderHeader();
  });
  budget.addEventListener("input", () => (budgetValue.textContent = Number(budget.value).toFixed(2)));
  budget.addEventListener("change", () => {
    model.set("memory_budget", Number(budget.value));
    model.save_changes();
  });
  sweepButton.addEventListener("click", () => {
    (model as any).send?.({ type: "sweep" });
  });
  graphSelect.addEventListener("change", () => {
    model.set("graph_index", Number(graphSelect.value));
    model.save_changes();
  });

  const onBusy = () => renderHeader();
  const onStudio = () => {
    renderStudio();
    renderHeader();
  };
  model.on("change:data", onData);
  for (const name of ["comparison_rows", "compare_index", "sweep_points", "sweep_index", "sweep_progress"]) model.on(`change:${name}`, onStudio);
  model.on("change:selected", onSelected);
  model.on("change:busy", onBusy);
  model.on("change:error", onBusy);
  onData();
  return () => {
    model.off?.("change:data", onData);
    model.off?.("change:selected", onSelected);
    model.off?.("change:busy", onBusy);
    model.off?.("change:error", onBusy);
    for (const name of ["comparison_rows", "compare_index", "sweep_points", "sweep_index", "sweep_progress"]) model.off?.(`change:${name}`, onStudio);
  };
}

export default { render };
