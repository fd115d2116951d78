import { describe, expect, it } from "vitest";
import { detailRows } from "../panes/details";
import { partitionerChoices, takesBudget } from "../partitioners";
import { COLUMNS, MAX_COLUMN_CH, columnWidths, descendingFirst, recomputedCells, savedCells, savedTitle, sharesMemory, sortRows } from "../table";
import type { SavedRow } from "../types";
import { node, transformerData } from "./synthetic";

const REGISTERED = transformerData(1, 1).partitioners;

describe("partitioner selector", () => {
  it("lists the registered partitioners with their descriptions", () => {
    const choices = partitionerChoices(REGISTERED, "min_cut");
    expect(choices.map((c) => [c.name, c.registered])).toEqual([["default", true], ["min_cut", true]]);
    expect(choices[1].description).toBe(REGISTERED[1].description);
  });

  it("shows a user's own partition_fn as an extra option instead of lying", () => {
    const choices = partitionerChoices(REGISTERED, "my_partition", "my_partition");
    expect(choices.map((c) => c.name)).toEqual(["default", "min_cut", "my_partition"]);
    expect(choices[2]).toMatchObject({ registered: false, takes_budget: false });
    expect(choices[2].description).toContain("my_partition");
  });

  it("enables the budget only for partitioners that take one", () => {
    const choices = partitionerChoices(REGISTERED, "my_partition");
    expect(["default", "min_cut", "my_partition", "nope"].map((n) => takesBudget(choices, n))).toEqual([false, true, false, false]);
  });
});

const row = (name: string, extra: Partial<SavedRow> = {}): SavedRow => ({
  name, kind: "activation", source: "", source_aliases: [], shape: [4, 8], dtype: "float32", bytes: 128, activation_bytes: 128,
  producer: "aten.relu", module: "mlp", alias_of: "", alias_kind: "", storage_op: "", why: "relu's backward reads its output", torch_reason: "", kind_label: extra.kind ?? "activation", ...extra,
});
const view = row("t", { kind: "parameter", kind_label: "parameter (view)", source: "fc.weight", producer: "", alias_of: "primals_1", storage_op: "aten.t", activation_bytes: 0, why: "mm's backward needs the weight" });
const parameterView = row("t_1", { alias_of: "fc.weight", alias_kind: "parameter", kind_label: "parameter view", activation_bytes: 0, producer: "aten.t" });

describe("saved table", () => {
  it("has an adds column: what each value adds on top of the forward inputs", () => {
    const cells = savedCells(view);
    expect(cells.length).toBe(COLUMNS.length);
    expect(cells[COLUMNS.indexOf("bytes")]).toBe("128 B");
    expect(cells[COLUMNS.indexOf("adds")]).toBe("0 B");
    expect(cells[COLUMNS.indexOf("kind")]).toBe("parameter (view)");
    expect(cells[COLUMNS.indexOf("producer")]).toBe("fc.weight");
    expect(recomputedCells(row("r"))[COLUMNS.indexOf("adds")]).toBe("0 B");
  });

  it("says torch's own phrase for why a value is saved, a dash where torch has none, and sorts by it", () => {
    const banned = row("cos", { torch_reason: "cannot recompute: materialized in backward" });
    const cut = row("mm", { torch_reason: "min-cut: in the cut" });
    const at = COLUMNS.indexOf("torch says");
    expect(savedCells(banned)[at]).toBe("cannot recompute: materialized in backward");
    expect(savedCells(row("relu"))[at]).toBe("\u2014");
    expect(recomputedCells(banned)[at]).toBe("\u2014"); // recomputed now: the old reason to save no longer holds
    expect(sortRows([cut, row("relu"), banned], "torch says", false).map((r) => r.name)).toEqual(["relu", "cos", "mm"]);
  });

  it("says what a value is in the payload's one wording (views/payload.py kind_label), adding 0 B for a parameter view", () => {
    expect(savedCells(parameterView)[COLUMNS.indexOf("kind")]).toBe("parameter view");
    expect(savedCells(parameterView)[COLUMNS.indexOf("adds")]).toBe("0 B");
    expect(detailRows(node("t_1", "saved"), parameterView).find(([label]) => label === "kind")?.[1]).toBe("saved: parameter view");
  });

  it("sorts by what a value adds, largest first on the first click", () => {
    const rows = [view, row("a", { activation_bytes: 64 }), row("b", { activation_bytes: 512 })];
    expect(descendingFirst("adds") && descendingFirst("bytes") && !descendingFirst("name")).toBe(true);
    expect(sortRows(rows, "adds", true).map((r) => r.name)).toEqual(["b", "a", "t"]);
  });

  it("says what a view shares memory with, and why it is saved", () => {
    expect(sharesMemory(view)).toBe("shares memory with primals_1 (aten.t)");
    expect(sharesMemory(row("x"))).toBe("");
    expect(sharesMemory(row("y", { alias_of: "x" }))).toBe("shares memory with x");
    expect(savedTitle(view)).toBe("shares memory with primals_1 (aten.t). mm's backward needs the weight");
    expect(savedTitle(row("x"))).toBe("relu's backward reads its output");
  });
});

describe("details panel", () => {
  it("shows size, what it adds, shared memory and why for a saved value", () => {
    const rows = new Map(detailRows(node("t", "fc", "saved", { saved_kind: "parameter" }), view));
    expect(rows.get("kind")).toBe("saved: parameter (view)"); // the saved table's own word for it
    expect(rows.get("saved")).toBe("128 B \u00B7 fc.weight");
    expect(rows.get("adds")).toBe("0 B on top of the forward inputs");
    expect(rows.get("memory")).toBe("shares memory with primals_1 (aten.t)");
    expect(rows.get("why saved")).toBe("mm's backward needs the weight");
  });

  it("shows torch's own phrase beside the reason, and why a recomputed op is computed again", () => {
    const banned = row("cos_1", { why: "read by sin; torch's min-cut will not recompute it", torch_reason: "cannot recompute: materialized in backward" });
    expect(new Map(detailRows(node("cos_1", "", "saved", { saved_kind: "activation" }), banned)).get("torch says")).toBe("cannot recompute: materialized in backward");
    const again = node("cos", "", "op", { recomputed: true, why_recomputed: "recomputing it from saved values is cheaper" });
    expect(new Map(detailRows(again, undefined)).get("why recomputed")).toBe("recomputing it from saved values is cheaper");
    expect([...new Map(detailRows(node("mm", "", "op"), undefined)).keys()]).not.toContain("why recomputed");
  });

  it("names a tied weight by all its names, first name first", () => {
    const tied = row("primals_1", { kind: "parameter", source: "shared.weight", source_aliases: ["lm_head.weight"], producer: "" });
    expect(new Map(detailRows(node("primals_1", "", "saved", { saved_kind: "parameter" }), tied)).get("saved")).toBe("128 B \u00B7 shared.weight = lm_head.weight");
    expect(savedCells(tied)[COLUMNS.indexOf("producer")]).toBe("shared.weight = lm_head.weight");
  });

  it("leaves out what does not apply", () => {
    const rows = new Map(detailRows(node("mm", "", "op"), undefined));
    expect(rows.get("module")).toBe("(top level)");
    expect([...rows.keys()]).not.toContain("memory");
    expect([...rows.keys()]).not.toContain("source");
    expect([...rows.keys()]).not.toContain("gradient of");
  });
});

describe("the saved table's column widths", () => {
  it("give each column its longest value or its title with the sort arrow, capped, and keep the short columns' least widths", () => {
    const long = "x".repeat(MAX_COLUMN_CH + 20);
    const rows = [COLUMNS.map((_, i) => (i === 0 ? "blocks.0.mlp.0.weight" : i === 8 ? long : "a"))];
    const widths = columnWidths(rows);
    expect(widths).toHaveLength(COLUMNS.length);
    expect(widths[0]).toBe(`calc(${"blocks.0.mlp.0.weight".length}ch + 10px)`);
    expect(widths[8]).toBe(`calc(${MAX_COLUMN_CH}ch + 10px)`); // "torch says": capped, the title has it whole
    expect(widths[1]).toBe(`calc(${"kind".length + 2}ch + 10px)`); // a short value: the title and its arrow
    expect(widths[COLUMNS.indexOf("dtype")]).toMatch(/^max\(calc\(7ch \+ 8px\), /);
    expect(columnWidths([])).toEqual(columnWidths([COLUMNS.map(() => "")]));
  });
});
