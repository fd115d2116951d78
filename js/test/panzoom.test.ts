import { describe, expect, it } from "vitest";
import { centreOn, dragTo, initialView, MIN_FIT_SCALE, parseViewBox, READABLE_SCALE, toDrawing, viewBoxText, zoomAt, ZOOM_RATE, type Rect, type View } from "../panzoom";

const box: Rect = { left: 100, top: 50, width: 400, height: 200 };
const view: View = { x: 10, y: 20, w: 800, h: 400 }; // 2 drawing units per pixel

describe("viewBox text", () => {
  it("reads Graphviz's viewBox and writes it back", () => {
    expect(parseViewBox("0.00 0.00 364.50 260.00")).toEqual({ x: 0, y: 0, w: 364.5, h: 260 });
    expect(viewBoxText({ x: 1, y: 2, w: 3, h: 4 })).toBe("1 2 3 4");
  });

  it("falls back to a 100 × 100 box when absent or malformed", () => {
    expect(parseViewBox(null)).toEqual({ x: 0, y: 0, w: 100, h: 100 });
    expect(parseViewBox("0 0 abc 5")).toEqual({ x: 0, y: 0, w: 100, h: 100 });
  });
});

describe("zoom", () => {
  it("keeps the drawing point under the pointer where it is", () => {
    const before = toDrawing(view, box, 180, 90);
    const zoomed = zoomAt(view, box, 180, 90, 200);
    const after = toDrawing(zoomed, box, 180, 90);
    expect(after.x).toBeCloseTo(before.x, 9);
    expect(after.y).toBeCloseTo(before.y, 9);
  });

  it("zooms out on positive deltaY and in on negative, by exp(deltaY * rate)", () => {
    expect(zoomAt(view, box, 300, 150, 100).w).toBeCloseTo(800 * Math.exp(100 * ZOOM_RATE), 9);
    expect(zoomAt(view, box, 300, 150, -100).w).toBeLessThan(800);
    const there = zoomAt(view, box, 300, 150, 100);
    expect(zoomAt(there, box, 300, 150, -100).w).toBeCloseTo(800, 9);
    expect(there.w / there.h).toBeCloseTo(2, 9);
  });

  it("leaves the view alone while the element has no size", () => {
    const hidden = { left: 0, top: 0, width: 0, height: 0 };
    expect(zoomAt(view, hidden, 0, 0, 100)).toEqual(view);
    expect(dragTo(view, hidden, 10, 10)).toEqual(view);
    expect(centreOn(view, hidden, box)).toEqual(view);
  });
});

describe("pan", () => {
  it("moves the drawing with the pointer, in drawing units", () => {
    expect(dragTo(view, box, 50, -25)).toEqual({ x: 10 - 100, y: 20 + 50, w: 800, h: 400 });
    expect(dragTo(view, box, 0, 0)).toEqual(view);
  });

  it("centres the view on an element, keeping its size", () => {
    const target = { left: 460, top: 210, width: 20, height: 20 }; // centre at (470, 220) px
    const centred = centreOn(view, box, target);
    expect(centred.w).toBe(800);
    const middle = toDrawing(centred, box, box.left + box.width / 2, box.top + box.height / 2);
    const wanted = toDrawing(view, box, 470, 220);
    expect(middle.x).toBeCloseTo(wanted.x, 9);
    expect(middle.y).toBeCloseTo(wanted.y, 9);
  });
});

describe("first view", () => {
  it("fits a drawing that stays legible", () => {
    const full = { x: 0, y: 0, w: 1000, h: 500 };
    expect(initialView(full, 800, 600)).toEqual({ view: full, cropped: false });
    expect(initialView(full, 1000 * MIN_FIT_SCALE, 600).cropped).toBe(false);
  });

  it("shows a readable window of a drawing too big to read fitted", () => {
    const full = { x: -4, y: -4, w: 20000, h: 3000 };
    const { view: first, cropped } = initialView(full, 900, 600);
    expect(cropped).toBe(true);
    expect(first).toEqual({ x: -4, y: -4, w: 900 / READABLE_SCALE, h: 600 / READABLE_SCALE });
  });

  it("fits when the element has no size yet", () => {
    expect(initialView({ x: 0, y: 0, w: 5, h: 5 }, 0, 0).cropped).toBe(false);
  });
});
