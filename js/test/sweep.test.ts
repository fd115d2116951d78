import { describe, expect, it } from "vitest";
import { chartGeometry } from "../sweep";

describe("sweep chart", () => {
  const points = [
    { budget: 0, saved_activation_bytes: 0, recompute_flops: 100, saved: 5, pareto: true },
    { budget: 0.5, saved_activation_bytes: 50, recompute_flops: 40, saved: 8, pareto: true },
    { budget: 0.7, saved_activation_bytes: 80, recompute_flops: 60, saved: 9, pareto: false },
    { budget: 1, saved_activation_bytes: 100, recompute_flops: 0, saved: 12, pareto: true },
  ];

  it("places memory on x and recompute on y inside the padding", () => {
    const chart = chartGeometry(points, 300, 150, 28);
    expect(chart.points[0]).toMatchObject({ index: 0, x: 28, y: 28, pareto: true, label: "budget 0" });
    expect(chart.points[3]).toMatchObject({ x: 272, y: 122 });
    for (const p of chart.points) {
      expect(p.x).toBeGreaterThanOrEqual(28);
      expect(p.y).toBeLessThanOrEqual(122);
    }
  });

  it("draws the Pareto front through Pareto points only, left to right", () => {
    const chart = chartGeometry(points, 300, 150, 28);
    expect(chart.front.split(" ").length).toBe(3);
    expect(chart.front.startsWith("28.0,28.0")).toBe(true);
  });

  it("copes with a single point and all-zero values", () => {
    const chart = chartGeometry([{ budget: 1, saved_activation_bytes: 0, recompute_flops: 0, saved: 0, pareto: true }], 300, 150);
    expect(Number.isFinite(chart.points[0].x) && Number.isFinite(chart.points[0].y)).toBe(true);
  });
});
