import { describe, expect, it } from "vitest";
import { linearScale, nearestIndex, rangeScale, ticksWithin } from "../chart";
import { formatFlops, niceTicks } from "../units";
import { heatLevel, HEAT_LEVELS, moduleBars, nodeAt, phaseRange, pointAt, stackAreas, timelineGeometry, wholeRun, zoomRange } from "../memory";
import type { SweepPoint } from "../types";
import { memoryRun } from "./synthetic";

describe("axes", () => {
  it("ticks at round values from 0 past the maximum", () => {
    expect(niceTicks(100, 4)).toEqual([0, 50, 100]);
    expect(niceTicks(44.08e9, 4)).toEqual([0, 20e9, 40e9, 60e9]);
    expect(niceTicks(0.3, 3)).toEqual([0, 0.1, 0.2, 0.3]);
    expect(niceTicks(0)).toEqual([0, 1]); // an axis always has a span, as core/units.py nice_ticks(0)
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
    expect(formatFlops(1234)).toBe("1.23 kFLOP");
    expect(formatFlops(3.4e9)).toBe("3.40 GFLOP");
    expect(formatFlops(250e12)).toBe("250 TFLOP");
  });

  it("finds the nearest x", () => {
    expect(nearestIndex([0, 10, 20, 30], 14)).toBe(1);
    expect(nearestIndex([0, 10, 20, 30], 16)).toBe(2);
    expect(nearestIndex([0, 10], 99)).toBe(1);
    expect(nearestIndex([], 5)).toBe(-1);
  });
});

const memory = memoryRun();

describe("memory timeline", () => {
  const box = { left: 10, top: 0, right: 100, bottom: 100 };

  it("places ops across and live bytes up, with the peak marked and backward's start", () => {
    const g = timelineGeometry(memory, box);
    expect(g.xs).toEqual([10, 50, 60, 100]);
    expect(g.yTicks.map((t) => t.value)).toEqual(memory.y_ticks); // the kernel's ticks, drawn as sent
    expect(g.xTicks.map((t) => t.value)).toEqual(memory.x_ticks);
    expect(g.peak?.x).toBe(60);
    expect(g.peak?.y).toBeCloseTo(100 - (500 / 600) * 100, 9);
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

describe("zoom, stacks and the node of a point", () => {
  const box = { left: 10, top: 0, right: 100, bottom: 100 };

  it("maps a range of steps onto the box, both ways, with round ticks inside it", () => {
    const x = rangeScale(4, 9, 10, 100);
    expect([x(4), x(9), x.invert(55)]).toEqual([10, 100, 6.5]);
    expect(ticksWithin(3, 9, 4)).toEqual([4, 6, 8]);
    expect(ticksWithin(1000, 1010, 4)).toEqual([1000, 1005, 1010]); // niceTicks(10, 4) steps by 5
  });

  it("zooms to what a drag went across, in either direction, never under MIN_ZOOM_STEPS ops", () => {
    expect(wholeRun(memory)).toEqual({ from: 0, to: 9 });
    expect(zoomRange(memory, 7.6, 2.2)).toEqual({ from: 2, to: 8 });
    expect(zoomRange(memory, -5, 40)).toEqual({ from: 0, to: 9 });
    expect(zoomRange(memory, 8, 8.4)).toEqual({ from: 5, to: 9 }); // widened, kept inside the run
    expect(zoomRange({ ...memory, steps: 3 }, 0, 2)).toBeNull();
    expect(phaseRange(memory, "forward")).toEqual({ from: 0, to: 4 });
    expect(phaseRange(memory, "backward")).toEqual({ from: 5, to: 9 });
  });

  it("draws only the points inside the range, the peak only when it is in, ticks within it", () => {
    const g = timelineGeometry(memory, box, [], { from: 4, to: 9 });
    expect(g.indices).toEqual([1, 2, 3]);
    expect(g.xs).toEqual([10, 28, 100]);
    expect(g.peak?.x).toBe(28);
    expect(g.xTicks.map((t) => t.value)).toEqual([4, 6, 8]);
    expect(g.yTicks.map((t) => t.value)).toEqual(memory.y_ticks); // bytes keep the whole run's axis
    expect(pointAt(g, 12)).toBe(1); // an index into the whole timeline
    const forward = timelineGeometry(memory, box, [], phaseRange(memory, "forward"));
    expect(forward.peak).toBeNull();
    expect(pointAt(forward, 99)).toBe(1);
  });

  it("piles the kernel's bands up so the top one follows the line", () => {
    const g = timelineGeometry(memory, box);
    for (const bands of [memory.kinds, memory.modules]) {
      const areas = stackAreas(bands, g);
      expect(areas.map((a) => a.label)).toEqual(bands.map((b) => b.label));
      const top = areas[areas.length - 1].path;
      expect(top.startsWith(g.path)).toBe(true); // its upper edge is the total line, point for point
      expect(top.endsWith("Z")).toBe(true);
    }
    const [saved, gradients, temporaries] = stackAreas(memory.kinds, g);
    expect([saved.peak, gradients.peak, temporaries.peak]).toEqual([200, 100, 200]);
    expect(saved.path.startsWith(`M10.0 ${g.y(0).toFixed(1)}L50.0 ${g.y(200).toFixed(1)}`)).toBe(true);
    expect(gradients.path).toContain(`L60.0 ${g.y(300).toFixed(1)}`); // 200 saved under 100 of gradients
  });

  it("selects what the kernel says a point stands for, forward points included, in its own region", () => {
    expect(nodeAt(memory, 1, 0)).toBe("relu"); // a forward op: the saved value it computes
    expect(nodeAt(memory, 2, 0)).toBe("mm_1");
    expect(nodeAt(memory, 0, 0)).toBeNull();
    expect(nodeAt(memory, 1, 1)).toBeNull(); // another compiled region's point
    expect(nodeAt(memory, 7, 0)).toBeNull();
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

  it("shows the nearest ancestor with two bars or more for a module holding none, or all in one bar", () => {
    expect(moduleBars(memory.by_module, "embed")).toMatchObject({ level: "" });
    // a search into blocks.1.mlp.gelu: blocks.1.mlp and blocks.1 would each be one bar, so blocks shows
    const deep = moduleBars(memory.by_module, "blocks.1.mlp.gelu");
    expect(deep.level).toBe("blocks");
    expect(deep.bars.map((b) => b.label)).toEqual(["blocks.0", "blocks.1"]);
    expect(moduleBars(memory.by_module, "blocks.0").bars.length).toBe(3); // three bars: it stays
  });

  it("heats bytes in steps of four, nothing at zero", () => {
    expect(heatLevel(0, 100)).toBe(0);
    expect(heatLevel(100, 100)).toBe(HEAT_LEVELS);
    expect(heatLevel(30, 100)).toBe(HEAT_LEVELS);
    expect(heatLevel(20, 100)).toBe(HEAT_LEVELS - 1);
    expect(heatLevel(1, 1e12)).toBe(1);
  });
});
