import { describe, expect, it } from "vitest";
import { formatError, measuredText, timelineGeometry, timelineYTicks } from "../memory";
import { reservedText } from "../panes/memory";
import { measuredRun, memoryRun } from "./synthetic";

const predicted = memoryRun();
const measured = measuredRun;

describe("measured over predicted", () => {
  const box = { left: 10, top: 0, right: 100, bottom: 100 };

  it("draws nothing and says nothing until the extraction is measured", () => {
    expect(timelineGeometry(predicted, box).measured).toBeNull();
    expect(measuredText(predicted)).toBeNull();
    expect(measuredText({ ...predicted, measured: undefined })).toBeNull(); // an older payload
  });

  it("puts the measured points at the prediction's own steps, on the same axes", () => {
    const g = timelineGeometry({ ...predicted, measured: measured(500, 0) }, box);
    expect(g.measured?.path).toBe("M10.0 83.3L60.0 16.7L100.0 91.7");
    expect(g.measured?.peak).toEqual(g.peak); // an exact prediction: both peaks on one spot
  });

  it("widens the byte axis when a sweep and the measured peak pass the kernel's ticks", () => {
    const memory = { ...predicted, measured: measured(700, -28.571) };
    const sweep = [{ budget: 0, saved_activation_bytes: 0, recompute_flops: 0, saved: 0, pareto: true, peak_activation_bytes: 650, timeline: [0, 650], torch_budget_ratio: null, peak_above_budget: null }];
    const ticks = timelineYTicks(memory, sweep);
    expect(ticks[ticks.length - 1]).toBeGreaterThanOrEqual(700);
  });

  it("says the measured peak, the predicted one and the error in percent, signed", () => {
    expect(measuredText({ ...predicted, measured: measured(500, 0) })).toBe(
      "measured on cpu: peak 500 B after mm_1 (backward) \u00B7 predicted 500 B, off by +0.0%",
    );
    expect(formatError(12.345)).toBe("+12.3%");
    expect(formatError(-28.571)).toBe("\u221228.6%");
    expect(formatError(-0.01)).toBe("+0.0%");
  });

  it("says the peak reserved apart from the peak allocated, where a snapshot gave it", () => {
    expect(reservedText(predicted)).toBe("");
    expect(reservedText({ ...predicted, measured: measured(500, 0) })).toBe(""); // g.measure(): no segments
    const snapshot = { ...measured(500, 0), reserved_peak_bytes: null };
    expect(reservedText({ ...predicted, measured: snapshot })).toBe("");
    expect(reservedText({ ...predicted, measured: { ...snapshot, reserved_peak_bytes: 2048 } })).toBe(
      " \u00B7 peak reserved 2.05 KB",
    );
  });
});
