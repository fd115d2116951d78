/** The graph's SVG in its host element: wheel zoom, drag pan, fit, focus on a part, and what a resize
 *  of the pane keeps. */

import { centreOn, dragTo, fitView, focusView, keepScale, parseViewBox, toDrawing, viewBoxText, wheelZooms, zoomAt, type Size, type View } from "./panzoom";

export interface Viewport {
  /** Show a freshly laid-out SVG at `view` (drawing units); null keeps the current view. */
  show(svg: SVGSVGElement, view: View | null): void;
  /** The whole drawing, fitted and centred, enlarged no further than `maxScale` (the payload's
   *  `views.max_scale`). */
  fit(maxScale: number): void;
  /** Fit `target` (an element of the drawing) when readable at `minScale`, else show it from its top. */
  focus(target: Element, minScale: number, maxScale: number): void;
  /** Fit a box of the drawing (drawing units) as `focus` does; `maxScale` caps the enlargement (a view
   *  following another's zoom passes Infinity, so it keeps the scale the user zoomed to). */
  focusBox(box: View, minScale: number, maxScale: number): void;
  /** Centre the view on an element of the current SVG, keeping the scale. */
  panTo(target: Element): void;
  /** After the pane changed size: the same part of the drawing at the same scale, centred where it was. */
  keep(): void;
  /** An element's box in drawing units. */
  boxOf(target: Element): View;
  /** The pane's size in pixels. */
  size(): Size;
  /** The pane's size when the view was last set: a resize is a change from it. */
  readonly shownAt: Size;
  /** Whether the user zoomed or dragged since the view was last placed by the widget (shown, fitted,
   *  focused): a resize then keeps their view instead of placing it again. */
  readonly handMoved: boolean;
  readonly svg: SVGSVGElement | null;
}

export function createViewport(host: HTMLElement, signal: AbortSignal): Viewport {
  let svg: SVGSVGElement | null = null;
  let full: View = { x: 0, y: 0, w: 1, h: 1 };
  let view: View = { ...full };
  let drag: { x: number; y: number; view: View } | null = null;
  let handMoved = false;
  let shownAt: Size = { width: 0, height: 0 };

  const size = () => ({ width: host.clientWidth || 800, height: host.clientHeight || 500 });
  const apply = (next: View) => {
    view = next;
    shownAt = { width: host.clientWidth, height: host.clientHeight };
    svg?.setAttribute("viewBox", viewBoxText(view));
  };
  /** The widget places the view: the user's last zoom or drag no longer holds. */
  const place = (next: View) => {
    handMoved = false;
    apply(next);
  };

  host.addEventListener("wheel", (event) => {
    if (!svg || !wheelZooms(event, host.contains(document.activeElement))) return;
    event.preventDefault();
    handMoved = true;
    apply(zoomAt(view, svg.getBoundingClientRect(), event.clientX, event.clientY, event.deltaY));
  }, { passive: false, signal });
  host.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, view: { ...view } };
  }, { signal });
  host.addEventListener("pointermove", (event) => {
    if (!drag || !svg) return;
    const [dx, dy] = [event.clientX - drag.x, event.clientY - drag.y];
    if (Math.abs(dx) + Math.abs(dy) >= 3) handMoved = true; // a click's jitter is no drag
    apply(dragTo(drag.view, svg.getBoundingClientRect(), dx, dy));
  }, { signal });
  window.addEventListener("pointerup", () => (drag = null), { signal });

  const boxOf = (target: Element): View => {
    if (!svg) return { x: 0, y: 0, w: 0, h: 0 };
    const box = svg.getBoundingClientRect();
    const rect = target.getBoundingClientRect();
    const a = toDrawing(view, box, rect.left, rect.top);
    const b = toDrawing(view, box, rect.right, rect.bottom);
    return { x: a.x, y: a.y, w: b.x - a.x, h: b.y - a.y };
  };
  const focusBox = (box: View, minScale: number, maxScale: number) => {
    const { width, height } = size();
    place(focusView(box, width, height, minScale, maxScale));
  };

  return {
    get svg() {
      return svg;
    },
    get handMoved() {
      return handMoved;
    },
    get shownAt() {
      return shownAt;
    },
    show(fresh, next) {
      full = parseViewBox(fresh.getAttribute("viewBox"));
      fresh.removeAttribute("width");
      fresh.removeAttribute("height");
      host.replaceChildren(fresh);
      svg = fresh;
      if (next) place(next);
      else apply(view);
    },
    fit: (maxScale) => {
      const { width, height } = size();
      place(fitView(full, width, height, maxScale));
    },
    focus: (target, minScale, maxScale) => focusBox(boxOf(target), minScale, maxScale),
    focusBox,
    panTo: (target) => {
      if (svg) apply(centreOn(view, svg.getBoundingClientRect(), target.getBoundingClientRect()));
    },
    keep: () => apply(keepScale(view, shownAt, size())),
    boxOf,
    size,
  };
}
