import { describe, expect, it } from "vitest";
import { centreOn, dragTo, fitView, focusView, parseViewBox, readableScale, scaleOf, toDrawing, viewBoxText, wheelZooms, zoomAt, ZOOM_RATE, type Rect, type View } from "../panzoom";
import { KERNEL_FIGURES } from "./synthetic";

const MAX_SCALE = KERNEL_FIGURES.max_scale; // the payload's views.max_scale (views/grouping.py)

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

describe("fitting", () => {
  it("fits a drawing whole and centred, the pane's shape", () => {
    const full = { x: 0, y: 0, w: 1000, h: 500 };
    const view = fitView(full, 800, 600, MAX_SCALE);
    expect(scaleOf(view, 800, 600)).toBeCloseTo(0.8, 9);
    expect(view.x + view.w / 2).toBeCloseTo(500, 9);
    expect(view.y + view.h / 2).toBeCloseTo(250, 9);
    expect(view.w / view.h).toBeCloseTo(800 / 600, 9);
  });

  it("enlarges a small drawing no further than the payload's max_scale", () => {
    const view = fitView({ x: 0, y: 0, w: 50, h: 20 }, 800, 600, MAX_SCALE);
    expect(scaleOf(view, 800, 600)).toBeCloseTo(MAX_SCALE, 9);
  });

  it("focuses on a part: fitted when readable, else readable from its top", () => {
    const part = { x: 100, y: 200, w: 400, h: 300 };
    const fitted = focusView(part, 800, 600, 0.5, MAX_SCALE);
    expect(scaleOf(fitted, 800, 600)).toBeCloseTo(MAX_SCALE, 9);
    const tall = { x: 0, y: 0, w: 400, h: 6000 };
    const top = focusView(tall, 800, 600, 0.9, MAX_SCALE);
    expect(scaleOf(top, 800, 600)).toBeCloseTo(0.9, 9);
    expect(top.y).toBeLessThanOrEqual(0);
    expect(top.y + top.h).toBeGreaterThan(0);
    expect(readableScale(11.5, 9.5)).toBeCloseTo(9.5 / 11.5, 9);
    // a view following another's zoom is not capped: its scale is the one the user zoomed to
    expect(scaleOf(focusView(part, 800, 600, 0, Infinity), 800, 600)).toBeCloseTo(2, 9);
    expect(scaleOf(focusView({ x: 0, y: 0, w: 100, h: 75 }, 800, 600, 0, Infinity), 800, 600)).toBeCloseTo(8, 9);
  });

  it("copes with an element that has no size yet", () => {
    expect(fitView({ x: 0, y: 0, w: 5, h: 5 }, 0, 0, MAX_SCALE)).toEqual({ x: 0, y: 0, w: 5, h: 5 });
  });
});

describe("wheel", () => {
  it("zooms with Ctrl or Cmd held, or once the graph has focus; else it scrolls the notebook", () => {
    const plain = { ctrlKey: false, metaKey: false };
    expect(wheelZooms(plain, false)).toBe(false);
    expect(wheelZooms(plain, true)).toBe(true);
    expect(wheelZooms({ ctrlKey: true, metaKey: false }, false)).toBe(true);
    expect(wheelZooms({ ctrlKey: false, metaKey: true }, false)).toBe(true);
  });
});
