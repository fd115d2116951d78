import { describe, expect, it } from "vitest";
import { formatFlops, linearScale, nearestIndex, niceTicks } from "../chart";
import { heatLevel, HEAT_LEVELS, moduleBars, pointAt, timelineGeometry } from "../memory";
import type { Memory, SweepPoint } from "../types";

describe("axes", () => {
  it("ticks at round values from 0 past the maximum", () => {
    expect(niceTicks(100, 4)).toEqual([0, 50, 100]);
    expect(niceTicks(44.08e9, 4)).toEqual([0, 20e9, 40e9, 60e9]);
    expect(niceTicks(0.3, 3)).toEqual([0, 0.1, 0.2, 0.3]);
    expect(niceTicks(0)).toEqual([0, 1]); // an axis always has a span, as views/plot.py nice_ticks(0)
    expect(niceTicks(7)).toEqual([0, 2, 4, 6, 8]);
  });

  it("scales both ways and inverts", () => {
    const y = linearScale(100, 200, 0);
    expect(y(0)).toBe(200);
    expect(y(100)).toBe(0);
    expect(y.invert(50)).toBe(75);
    expect(linearScale(0, 0, 10)(0)).toBe(0);
  });

  it("writes FLOPs with units", () => {
    expect(formatFlops(0)).toBe("0 FLOP");
    expect(formatFlops(1234)).toBe("1.2 kFLOP");
    expect(formatFlops(3.4e9)).toBe("3.4 GFLOP");
    expect(formatFlops(250e12)).toBe("250 TFLOP");
  });

  it("finds the nearest x", () => {
    expect(nearestIndex([0, 10, 20, 30], 14)).toBe(1);
    expect(nearestIndex([0, 10, 20, 30], 16)).toBe(2);
    expect(nearestIndex([0, 10], 99)).toBe(1);
    expect(nearestIndex([], 5)).toBe(-1);
  });
});

const memory: Memory = {
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
};

describe("memory timeline", () => {
  const box = { left: 10, top: 0, right: 100, bottom: 100 };

  it("places ops across and live bytes up, with the peak marked and backward's start", () => {
    const g = timelineGeometry(memory, box);
    expect(g.xs).toEqual([10, 50, 60, 100]);
    expect(g.yTicks.map((t) => t.value)).toEqual(memory.y_ticks); // the kernel's ticks, drawn as sent
    expect(g.xTicks.map((t) => t.value)).toEqual(memory.x_ticks);
    expect(g.peak.x).toBe(60);
    expect(g.peak.y).toBeCloseTo(100 - (500 / 600) * 100, 9);
    expect(g.backwardX).toBe(55);
    expect(g.path.startsWith("M10.0 ")).toBe(true);
    expect(pointAt(g, 58)).toBe(2);
  });

  it("overlays the sweep's runs stretched to the same width", () => {
    const point = (budget: number, peak: number): SweepPoint => ({
      budget, saved_activation_bytes: 0, recompute_flops: 0, saved: 0, pareto: true, peak_activation_bytes: peak, timeline: [0, peak, 0],
      torch_budget_ratio: null, peak_above_budget: null,
    });
    const g = timelineGeometry(memory, box, [point(0, 900), point(1, 500)]);
    expect(g.overlays.map((o) => o.budget)).toEqual([0, 1]);
    expect(g.yTicks[g.yTicks.length - 1].value).toBeGreaterThanOrEqual(900);
    expect(g.overlays[0].path.startsWith("M10.0 ") && g.overlays[0].path.includes("L100.0 ")).toBe(true);
  });
});

describe("bytes by module", () => {
  it("adds modules up into the top level, then into a module's children", () => {
    const top = moduleBars(memory.by_module, "").bars;
    expect(top.map((b) => [b.module, b.bytes])).toEqual([["blocks", 850], ["", 20]]);
    expect(top[1].label).toBe("(top level)");
    expect(top[0].share).toBe(1);
    const inBlocks = moduleBars(memory.by_module, "blocks").bars;
    expect(inBlocks.map((b) => [b.module, b.bytes])).toEqual([["blocks.0", 550], ["blocks.1", 300]]);
    const inBlock = moduleBars(memory.by_module, "blocks.0").bars;
    expect(inBlock.map((b) => [b.module, b.label, b.bytes])).toEqual([
      ["blocks.0.mlp", "blocks.0.mlp", 400], ["blocks.0.attn", "blocks.0.attn", 100], ["blocks.0", "blocks.0 (itself)", 50],
    ]);
  });

  it("shows the nearest ancestor holding saved bytes for a module holding none", () => {
    expect(moduleBars(memory.by_module, "embed")).toMatchObject({ level: "" });
    const deep = moduleBars(memory.by_module, "blocks.1.mlp.gelu");
    expect(deep.level).toBe("blocks.1.mlp");
    expect(deep.bars.map((b) => b.label)).toEqual(["blocks.1.mlp (itself)"]);
  });

  it("heats bytes in steps of four, nothing at zero", () => {
    expect(heatLevel(0, 100)).toBe(0);
    expect(heatLevel(100, 100)).toBe(HEAT_LEVELS);
    expect(heatLevel(30, 100)).toBe(HEAT_LEVELS);
    expect(heatLevel(20, 100)).toBe(HEAT_LEVELS - 1);
    expect(heatLevel(1, 1e12)).toBe(1);
  });
});
