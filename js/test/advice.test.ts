/** The advisor's part of the partitions tab: its pure rules, on the plans the kernel wrote into the contract
 *  fixture (tests/test_contract.py: bw.advise on a small MLP) and on hand-made rows. */

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ADVICE_COLUMNS, adviceRowTitle, adviceRunning, emptyAdviceText, fitsText, offloadCpuText, peakGapText } from "../advice";
import type { AdvicePlanRow } from "../types";

const FIXTURE = fileURLToPath(new URL("./fixtures/payload.json", import.meta.url));
const rows = (JSON.parse(readFileSync(FIXTURE, "utf8")) as { advice_rows: AdvicePlanRow[] }).advice_rows;

const plan = (extra: Partial<AdvicePlanRow> = {}): AdvicePlanRow => ({
  label: "min-cut budget 0.5", kind: "budget", code: "memory_budget = ...", predicted_peak_bytes: 2_000_000,
  verified_peak_bytes: 2_000_000, measured_peak_bytes: null, recompute_flops: 3e9, measured_seconds: null, fits: true, best: false, note: "", selectable: true, ...extra,
});

describe("the advisor's plans", () => {
  it("lists the kernel's plans with one cell per column, the best one starred", () => {
    expect(rows.length).toBeGreaterThan(1);
    for (const row of rows) expect(ADVICE_COLUMNS.map(([, cell]) => cell(row))).toHaveLength(7);
    const best = rows.filter((r) => r.best);
    expect(best).toHaveLength(1);
    expect(ADVICE_COLUMNS[0][1](best[0])).toBe(`\u2605 ${best[0].label}`);
  });

  it("says an offload plan was verified eagerly and cannot be shown, and a verified one fits or not", () => {
    const offload = rows.find((r) => r.kind === "offload");
    expect(offload).toBeDefined();
    expect(offload && [offload.verified_peak_bytes !== null, offload.selectable]).toEqual([true, false]);
    expect(offload && fitsText(offload)).toBe(offload?.fits ? "yes" : "no");
    expect(offload && adviceRowTitle(offload)).toContain("eager step");
    expect(adviceRowTitle(plan({ kind: "offload", selectable: false, verified_peak_bytes: null }))).toContain("not verified");
    expect(fitsText(plan({ verified_peak_bytes: null }))).toBe("not verified");
    expect([fitsText(plan()), fitsText(plan({ fits: false }))]).toEqual(["yes", "no"]);
    const verified = ADVICE_COLUMNS.findIndex(([name]) => name === "verified peak");
    expect(ADVICE_COLUMNS[verified][1](plan({ verified_peak_bytes: null }))).toBe("\u2014");
    expect(ADVICE_COLUMNS[1][0]).toBe("fits"); // the verdict beside the plan's name
    const measured = ADVICE_COLUMNS.findIndex(([name]) => name === "measured peak");
    expect([plan(), plan({ measured_peak_bytes: 1_500_000 })].map((r) => ADVICE_COLUMNS[measured][1](r))).toEqual(["\u2014", "1.50 MB"]);
    const time = ADVICE_COLUMNS.findIndex(([name]) => name === "step time");
    expect([plan(), plan({ measured_seconds: 0.0162 }), plan({ measured_seconds: 12.34 })].map((r) => ADVICE_COLUMNS[time][1](r))).toEqual([
      "\u2014",
      "16.2 ms",
      "12.3 s",
    ]);
  });

  it("says in an offload plan's tooltip why it does not fit on a CPU model and where verified differs from predicted", () => {
    const offload = rows.find((r) => r.kind === "offload");
    const gap = offload ? peakGapText(offload) : "";
    expect(gap).toMatch(/^verified (is [\d,]+ B (more|less) than predicted: [+-][\d,]+ B of |equals predicted)/);
    expect(offload && adviceRowTitle(offload)).toContain(`. V${gap.slice(1)}`);
    expect(offload && offloadCpuText(offload)).toMatch(/^on this device the hooks move nothing \(CPU to CPU\): .*does not fit here$/);
    const note =
      "predicted: ...; on this device the hooks move nothing (CPU to CPU): the model's tensors are on the CPU, so the plan does not fit here; its figures are for the same step on a GPU; " +
      "verified: ...; verified is 8,200 B more than predicted: +8,200 B of temporaries (16,392 B at the eager peak, in backward: mm 8,192 B, against 8,192 B at min-cut's peak); tried first: ...";
    const row = plan({ kind: "offload", selectable: false, fits: false, note });
    expect(peakGapText(row)).toBe("verified is 8,200 B more than predicted: +8,200 B of temporaries (16,392 B at the eager peak, in backward: mm 8,192 B, against 8,192 B at min-cut's peak)");
    expect(adviceRowTitle(row)).toBe(
      "verified by running its hooks around an eager step on fake tensors: saved_tensors_hooks run around the compiled graphs, not in them, so there is no partition to show: click to show its code. " +
        "On this device the hooks move nothing (CPU to CPU): the model's tensors are on the CPU, so the plan does not fit here. " +
        "Verified is 8,200 B more than predicted: +8,200 B of temporaries (16,392 B at the eager peak, in backward: mm 8,192 B, against 8,192 B at min-cut's peak)",
    );
    const bare = plan({ kind: "offload", selectable: false, note: "predicted: ...; not verified: ..." });
    expect([peakGapText(bare), offloadCpuText(bare)]).toEqual(["", ""]);
  });

  it("says a region plan has no one partition to show, and where to read what it saves", () => {
    const region = plan({ kind: "region", selectable: false, note: "verified as you run it: the pasted code under torch.compile (aot_eager) saves 33,280 B" });
    expect(fitsText(region)).toBe("\u2014"); // its peak is an estimate by design: no verdict
    expect(adviceRowTitle(region)).toMatch(/^each block is a compiled graph of its own, so there is no one partition to show; its note says .*: click to show its code and note$/);
  });

  it("runs while the kernel is busy with a step line, not once stopped or idle", () => {
    expect(adviceRunning("2/8: checkpoint every block", true)).toBe(true);
    expect(adviceRunning("stopped", true)).toBe(false);
    expect(adviceRunning("2/8: checkpoint every block", false)).toBe(false);
    expect(adviceRunning("", true)).toBe(false);
  });

  it("explains itself before any advice, and says how to get one where it cannot run", () => {
    expect(emptyAdviceText(true)).toContain("press Advise");
    expect(emptyAdviceText(false)).toContain("bw.show(advice)");
  });
});
