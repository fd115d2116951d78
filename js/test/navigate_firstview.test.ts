import { describe, expect, it } from "vitest";
import { bestDrawing, better, chooseFirstView, drawingSize, fitOf, minScaleOf, type Drawing, type RankDir } from "../firstview";
import { directionOf, nearestTo, neighbour, type Placed } from "../navigate";
import { KERNEL_FIGURES } from "./synthetic";

const { label_units: LABEL_UNITS, max_scale: MAX_SCALE, min_span: MIN_SPAN } = KERNEL_FIGURES; // views/grouping.py's
const minScale = minScaleOf(KERNEL_FIGURES);
const pane = (width: number, height: number) => ({ width, height, figures: KERNEL_FIGURES });

describe("keyboard moves", () => {
  // a -> b -> d, a -> c -> d; b and c side by side
  const placed: Placed[] = [
    { id: "a", x: 100, y: 0 }, { id: "b", x: 50, y: 50 }, { id: "c", x: 150, y: 50 }, { id: "d", x: 100, y: 100 }, { id: "far", x: 400, y: 50 },
  ];
  const edges: [string, string][] = [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]];

  it("follows edges up and down, to the nearer neighbour across", () => {
    expect(neighbour("b", "down", placed, edges)).toBe("d");
    expect(neighbour("d", "up", placed, edges)).toBe("b");
    expect(neighbour("b", "up", placed, edges)).toBe("a");
    expect(neighbour("a", "up", placed, edges)).toBeNull();
  });

  it("goes sideways to the nearest node on that side", () => {
    expect(neighbour("b", "right", placed, edges)).toBe("c");
    expect(neighbour("c", "right", placed, edges)).toBe("far");
    expect(neighbour("b", "left", placed, edges)).toBeNull();
  });

  it("finds the node nearest a point", () => {
    expect(nearestTo(placed, 140, 60)).toBe("c");
    expect(nearestTo([], 0, 0)).toBeNull();
  });

  it("starts from the first node when nothing is current, and reads arrow keys", () => {
    expect(neighbour("", "down", placed, edges)).toBe("a");
    expect(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Enter"].map(directionOf)).toEqual(["up", "down", "left", "right", null]);
  });
});

const svgOf = (w: number, h: number) => `<svg viewBox="0.00 0.00 ${w} ${h}"></svg>`;

describe("first view", () => {
  it("calls a drawing readable when its labels' glyphs reach 9 px fitted, and measures how much it fills", () => {
    const small = fitOf({ x: 0, y: 0, w: 100, h: 50 }, pane(1000, 500));
    expect(small.scale).toBe(MAX_SCALE);
    expect(small.span).toBeCloseTo((100 * MAX_SCALE) / 1000, 9);
    expect(small.readable).toBe(true);
    const huge = fitOf({ x: 0, y: 0, w: 5000, h: 500 }, pane(1000, 500));
    expect(huge.readable).toBe(false);
    expect(huge.scale * LABEL_UNITS).toBeLessThan(9.5);
    expect(fitOf({ x: 0, y: 0, w: 1000, h: 100 }, pane(1000, 500)).span).toBe(1);
    expect(minScale * LABEL_UNITS).toBeGreaterThanOrEqual(9.5); // the line box, and the glyphs (fit_runs.test.ts)
    expect(drawingSize(svgOf(12, 34))).toEqual({ x: 0, y: 0, w: 12, h: 34 });
  });

  it("lays a small drawing out across when that fills the pane better", async () => {
    const asked: RankDir[] = [];
    const layout = async (rankdir: RankDir) => (asked.push(rankdir), rankdir === "TB" ? svgOf(200, 120) : svgOf(700, 60));
    const drawing = await bestDrawing(6, layout, pane(1000, 500));
    expect(asked).toEqual(["TB", "LR"]);
    expect(drawing.rankdir).toBe("LR");
    expect(drawing.fit.span).toBeGreaterThanOrEqual(MIN_SPAN);
    const tall = await bestDrawing(100, async () => svgOf(200, 120), pane(1000, 500));
    expect(tall.rankdir).toBe("TB");
    const chain = await bestDrawing(30, async (rankdir) => (rankdir === "TB" ? svgOf(100, 3000) : svgOf(3000, 100)), pane(1000, 500));
    expect(chain.rankdir).toBe("TB"); // neither fits: a long chain reads downwards
  });

  it("takes the most detailed candidate that is good, else the best of them", async () => {
    const sizes: Record<string, [number, number]> = { all: [3000, 2000], modules: [800, 400], top: [100, 60] };
    const draw = async (name: string): Promise<Drawing> => {
      const [w, h] = sizes[name];
      return { svg: svgOf(w, h), rankdir: "TB", fit: fitOf({ x: 0, y: 0, w, h }, pane(1000, 500)) };
    };
    expect((await chooseFirstView(["all", "modules", "top"], draw)).candidate).toBe("modules");
    expect((await chooseFirstView(["all", "top"], draw)).candidate).toBe("top"); // readable, though small
    const [a, b] = [await draw("all"), await draw("top")];
    expect(a.fit.good).toBe(false);
    expect(better(a, b)).toBe(b);
    await expect(chooseFirstView([], draw)).rejects.toThrow();
  });
});
