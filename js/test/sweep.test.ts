import { describe, expect, it } from "vitest";
import { chartGeometry, emptyStudioText, paretoPoints, peakOrderText, pointText, sweepRunning } from "../sweep";
import type { SweepPoint } from "../types";

const point = (budget: number, saved: number, flops: number, pareto: boolean): SweepPoint => ({
  budget, saved_activation_bytes: saved, recompute_flops: flops, saved: 5, pareto, peak_activation_bytes: saved + 10, timeline: [1, 2],
  torch_budget_ratio: budget * 0.9, peak_above_budget: null,
});

describe("partitions tab, empty", () => {
  it("explains what a sweep shows, and how to get one where the button cannot run", () => {
    expect(emptyStudioText(true)).toContain("Press Sweep budgets");
    expect(emptyStudioText(true)).toContain("saved and peak bytes");
    expect(emptyStudioText(false)).toContain("in a live kernel");
    expect(emptyStudioText(false)).not.toContain("Press");
  });
});

describe("sweep chart", () => {
  const points = [point(0, 0, 100, true), point(0.5, 50, 40, true), point(0.7, 80, 60, false), point(1, 100, 0, true)];
  const box = { left: 28, top: 28, right: 272, bottom: 122 };

  it("places memory on x and recompute on y inside the box, on round ticks", () => {
    const chart = chartGeometry(points, box);
    expect(chart.points[0]).toMatchObject({ index: 0, x: 28, y: 28, pareto: true, label: "budget 0" });
    expect(chart.points[3]).toMatchObject({ y: 122 });
    expect(chart.xTicks.map((t) => t.value)).toEqual([0, 50, 100, 150]);  // the x axis reaches the largest peak
    expect(chart.xTicks[3].at).toBe(272);
    expect(chart.yTicks.map((t) => t.value)).toEqual([0, 50, 100]);
    expect(chart.xTicks[0].at).toBe(28);
    expect(chart.yTicks[2].at).toBe(28);
  });

  it("places each point's peak beside its saved bytes, on the same axis", () => {
    const chart = chartGeometry(points, box);
    const perByte = (272 - 28) / 150;
    for (const [i, p] of chart.points.entries()) {
      expect(p.x).toBeCloseTo(28 + points[i].saved_activation_bytes * perByte);
      expect(p.peakX).toBeCloseTo(28 + points[i].peak_activation_bytes * perByte);
    }
  });

  it("draws the Pareto front through Pareto points only, left to right, and lists them", () => {
    const chart = chartGeometry(points, box);
    expect(chart.front.split(" ").length).toBe(3);
    expect(chart.front.startsWith("28.0,28.0")).toBe(true);
    expect(paretoPoints(points).map((p) => p.index)).toEqual([0, 1, 3]);
  });

  it("copes with a single point and all-zero values", () => {
    const chart = chartGeometry([point(1, 0, 0, true)], box);
    expect(Number.isFinite(chart.points[0].x) && Number.isFinite(chart.points[0].y)).toBe(true);
  });
});

describe("peaks across budgets", () => {
  const pinned = [
    { ...point(0.1, 131072, 17825792, false), peak_activation_bytes: 920320, peak_above_budget: 0.3 },
    { ...point(0.2, 262144, 13631488, false), peak_activation_bytes: 1051392, peak_above_budget: 0.3 },
    { ...point(0.3, 393216, 9437184, true), peak_activation_bytes: 887552 },
  ];

  it("flags the points the kernel found beaten on peak, and names the budget that beats them", () => {
    const chart = chartGeometry(pinned, { left: 28, top: 28, right: 272, bottom: 122 });
    expect(chart.points.map((p) => p.peakBeaten)).toEqual([true, true, false]);
    expect(peakOrderText(pinned)).toContain("budgets 0.1, 0.2 peak above budget 0.3");
    expect(peakOrderText(pinned.slice(2))).toBe("");
  });

  it("says torch's own ratio beside the budget asked for", () => {
    expect(pointText(pinned[2])).toContain("budget 0.3 (torch's ratio 0.270)");
    expect(pointText(pinned[0])).toContain("budget 0.3 peaks lower");
    expect(pointText({ ...pinned[2], torch_budget_ratio: null })).not.toContain("torch's ratio");
  });
});

describe("sweep progress", () => {
  it("counts a sweep as running while the kernel is busy with budgets left: Cancel shows then", () => {
    expect(sweepRunning("0/11", true)).toBe(true);
    expect(sweepRunning("10/11", true)).toBe(true);
    expect(sweepRunning("11/11", true)).toBe(false);
    expect(sweepRunning("4/11 (cancelled)", false)).toBe(false);
    expect(sweepRunning("4/11", false)).toBe(false); // busy gone: the sweep ended (an error)
    expect(sweepRunning("", true)).toBe(false); // busy partitioning, no sweep
  });
});
