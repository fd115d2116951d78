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

/** Whether a wheel over the graph zooms it: with Ctrl or ⌘ held (a trackpad pinch sets ctrlKey), or once
 *  the graph has focus (after a click in it). Otherwise the wheel scrolls the notebook past the widget. */
export function wheelZooms(event: { ctrlKey: boolean; metaKey: boolean }, graphFocused: boolean): boolean {
  return event.ctrlKey || event.metaKey || graphFocused;
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

/** Pixels per drawing unit of a view shown in a width × height element (the SVG keeps its aspect ratio). */
export function scaleOf(view: View, width: number, height: number): number {
  return Math.min(width / view.w, height / view.h);
}

/** A view of `width` × `height` pixels at `scale`, centred on (cx, cy) in drawing units. */
export function centred(cx: number, cy: number, width: number, height: number, scale: number): View {
  const w = width / scale;
  const h = height / scale;
  return { x: cx - w / 2, y: cy - h / 2, w, h };
}

/** The whole drawing, centred, at the largest scale that fits the element (at most `maxScale`: the payload's
 *  `views.max_scale` for the graph). */
export function fitView(full: View, width: number, height: number, maxScale: number): View {
  if (!(width > 0 && height > 0 && full.w > 0 && full.h > 0)) return { ...full };
  const scale = Math.min(scaleOf(full, width, height), maxScale);
  return centred(full.x + full.w / 2, full.y + full.h / 2, width, height, scale);
}

/**
 * A view of `target` (a part of the drawing): fitted and centred when that leaves labels readable
 * (scale ≥ `minScale`), else at `minScale`, centred across and showing the target from its top; never
 * enlarged past `maxScale`.
 */
export function focusView(target: View, width: number, height: number, minScale: number, maxScale: number): View {
  if (!(width > 0 && height > 0 && target.w > 0 && target.h > 0)) return { ...target };
  const scale = Math.min(scaleOf(target, width, height), maxScale);
  if (scale >= minScale) return centred(target.x + target.w / 2, target.y + target.h / 2, width, height, scale);
  const view = centred(target.x + target.w / 2, target.y + target.h / 2, width, height, minScale);
  return { ...view, y: target.y - 10 / minScale };
}

/** The smallest scale at which labels `labelHeight` drawing units high are `minLabelPx` on screen (the
 *  payload's views.label_units and views.min_label_px: the kernel's figures, used by the static SVG too). */
export function readableScale(labelHeight: number, minLabelPx: number): number {
  return labelHeight > 0 ? minLabelPx / labelHeight : 1;
}

/** A pane's size in pixels. */
export interface Size {
  width: number;
  height: number;
}

/** Whether a pane that was `before` and is `now` should have its view placed again: it has an area (a
 *  hidden tab measures 0 × 0) and changed by at least a pixel. */
export function resized(before: Size, now: Size): boolean {
  if (!(now.width > 0 && now.height > 0)) return false;
  return Math.abs(now.width - before.width) >= 1 || Math.abs(now.height - before.height) >= 1;
}

/** The view of a pane resized from `before` to `now` that keeps what the view showed at the same scale
 *  (pixels per drawing unit) and centre: a user's own zoom survives the resize. */
export function keepScale(view: View, before: Size, now: Size): View {
  if (!(before.width > 0 && before.height > 0 && now.width > 0 && now.height > 0)) return view;
  const scale = scaleOf(view, before.width, before.height);
  return centred(view.x + view.w / 2, view.y + view.h / 2, now.width, now.height, scale);
}

/** The smallest box holding all of `boxes` (drawing units); a zero box for none. */
export function unionBox(boxes: readonly View[]): View {
  if (!boxes.length) return { x: 0, y: 0, w: 0, h: 0 };
  const x = Math.min(...boxes.map((b) => b.x));
  const y = Math.min(...boxes.map((b) => b.y));
  const right = Math.max(...boxes.map((b) => b.x + b.w));
  const bottom = Math.max(...boxes.map((b) => b.y + b.h));
  return { x, y, w: right - x, h: bottom - y };
}

/** The view of a second drawing that follows `view` of a first: the same scale, and the anchor (a node
 *  drawn in both, at `from` in the first and `to` in the second) at the same place in its pane. */
export function followView(view: View, from: { x: number; y: number }, to: { x: number; y: number }, source: Size, target: Size): View {
  const scale = scaleOf(view, source.width, source.height);
  if (!(scale > 0)) return { ...view };
  const [dx, dy] = [from.x - (view.x + view.w / 2), from.y - (view.y + view.h / 2)];
  return centred(to.x - dx, to.y - dy, target.width, target.height, scale);
}
