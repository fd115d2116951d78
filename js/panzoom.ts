/** Pan and zoom as pure maths on an SVG viewBox: no DOM here. */

/** A viewBox: the drawing's rectangle shown in the element. */
export interface View {
  x: number;
  y: number;
  w: number;
  h: number;
}

/** A client rectangle (getBoundingClientRect's fields we use). */
export interface Rect {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** The whole graph is shown fitted only when this legible; else a window of it. */
export const MIN_FIT_SCALE = 0.45;
/** Pixels per drawing unit of that window. */
export const READABLE_SCALE = 0.9;
/** Zoom factor per wheel deltaY unit, as exp(deltaY * ZOOM_RATE). */
export const ZOOM_RATE = 0.0015;

export function viewBoxText(view: View): string {
  return `${view.x} ${view.y} ${view.w} ${view.h}`;
}

/** Graphviz's "x y w h" viewBox attribute; a 100 × 100 box when absent or malformed. */
export function parseViewBox(text: string | null): View {
  const parts = (text ?? "").trim().split(/[\s,]+/).map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isFinite(p))) return { x: 0, y: 0, w: 100, h: 100 };
  const [x, y, w, h] = parts;
  return { x, y, w, h };
}

export function sameSize(a: View, b: View): boolean {
  return a.w === b.w && a.h === b.h;
}

const hasArea = (box: Rect) => box.width > 0 && box.height > 0;

/** The drawing point under a client point. */
export function toDrawing(view: View, box: Rect, clientX: number, clientY: number): { x: number; y: number } {
  return {
    x: view.x + ((clientX - box.left) * view.w) / box.width,
    y: view.y + ((clientY - box.top) * view.h) / box.height,
  };
}

/** Zoom by the wheel's deltaY around the client point, which stays where it is. */
export function zoomAt(view: View, box: Rect, clientX: number, clientY: number, deltaY: number): View {
  if (!hasArea(box)) return view;
  const factor = Math.exp(deltaY * ZOOM_RATE);
  const p = toDrawing(view, box, clientX, clientY);
  return { x: p.x - (p.x - view.x) * factor, y: p.y - (p.y - view.y) * factor, w: view.w * factor, h: view.h * factor };
}

/** The view after dragging by (dx, dy) client pixels from `start`: the drawing follows the pointer. */
export function dragTo(start: View, box: Rect, dx: number, dy: number): View {
  if (!hasArea(box)) return start;
  return { ...start, x: start.x - (dx * start.w) / box.width, y: start.y - (dy * start.h) / box.height };
}

/** The same-sized view centred on `target` (a client rectangle inside the element at `box`). */
export function centreOn(view: View, box: Rect, target: Rect): View {
  if (!hasArea(box)) return view;
  const c = toDrawing(view, box, target.left + target.width / 2, target.top + target.height / 2);
  return { ...view, x: c.x - view.w / 2, y: c.y - view.h / 2 };
}

/**
 * The first view of a drawing of size `full` in an element of width × height pixels:
 * all of it when that is legible (scale ≥ MIN_FIT_SCALE), else a READABLE_SCALE window
 * at its top left (`cropped`), for the caller to centre on something worth seeing.
 */
export function initialView(full: View, width: number, height: number): { view: View; cropped: boolean } {
  if (!(width > 0 && height > 0 && full.w > 0 && full.h > 0)) return { view: { ...full }, cropped: false };
  if (Math.min(width / full.w, height / full.h) >= MIN_FIT_SCALE) return { view: { ...full }, cropped: false };
  return { view: { x: full.x, y: full.y, w: width / READABLE_SCALE, h: height / READABLE_SCALE }, cropped: true };
}
