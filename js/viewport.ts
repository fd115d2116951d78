/** The graph's SVG in its host element: wheel zoom, drag pan, fit, focus on a part. */

import { centreOn, dragTo, fitView, focusView, parseViewBox, toDrawing, viewBoxText, wheelZooms, zoomAt, type View } from "./panzoom";

export interface Viewport {
  /** Show a freshly laid-out SVG at `view` (drawing units); null keeps the current view. */
  show(svg: SVGSVGElement, view: View | null): void;
  /** The whole drawing, fitted and centred. */
  fit(): void;
  /** Fit `target` (an element of the drawing) when readable at `minScale`, else show it from its top. */
  focus(target: Element, minScale: number): void;
  /** Centre the view on an element of the current SVG, keeping the scale. */
  panTo(target: Element): void;
  /** An element's box in drawing units. */
  boxOf(target: Element): View;
  /** The pane's size in pixels. */
  size(): { width: number; height: number };
  readonly svg: SVGSVGElement | null;
}

export function createViewport(host: HTMLElement, signal: AbortSignal): Viewport {
  let svg: SVGSVGElement | null = null;
  let full: View = { x: 0, y: 0, w: 1, h: 1 };
  let view: View = { ...full };
  let drag: { x: number; y: number; view: View } | null = null;

  const apply = (next: View) => {
    view = next;
    svg?.setAttribute("viewBox", viewBoxText(view));
  };
  const size = () => ({ width: host.clientWidth || 800, height: host.clientHeight || 500 });

  host.addEventListener("wheel", (event) => {
    if (!svg || !wheelZooms(event, host.contains(document.activeElement))) return;
    event.preventDefault();
    apply(zoomAt(view, svg.getBoundingClientRect(), event.clientX, event.clientY, event.deltaY));
  }, { passive: false, signal });
  host.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, view: { ...view } };
  }, { signal });
  host.addEventListener("pointermove", (event) => {
    if (!drag || !svg) return;
    apply(dragTo(drag.view, svg.getBoundingClientRect(), event.clientX - drag.x, event.clientY - drag.y));
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

  return {
    get svg() {
      return svg;
    },
    show(fresh, next) {
      full = parseViewBox(fresh.getAttribute("viewBox"));
      fresh.removeAttribute("width");
      fresh.removeAttribute("height");
      host.replaceChildren(fresh);
      svg = fresh;
      apply(next ?? view);
    },
    fit: () => {
      const { width, height } = size();
      apply(fitView(full, width, height));
    },
    focus: (target, minScale) => {
      const { width, height } = size();
      apply(focusView(boxOf(target), width, height, minScale));
    },
    panTo: (target) => {
      if (svg) apply(centreOn(view, svg.getBoundingClientRect(), target.getBoundingClientRect()));
    },
    boxOf,
    size,
  };
}
