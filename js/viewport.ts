/** The graph's SVG in its host element: wheel zoom, drag pan, fit, pan to an element. */

import { centreOn, dragTo, initialView, parseViewBox, sameSize, viewBoxText, zoomAt, type View } from "./panzoom";

export interface Viewport {
  /** Show a freshly laid-out SVG. A drawing of the same size keeps the current view; another
   *  one is fitted, or when too big to read fitted, shown legibly around `focus()`. */
  show(svg: SVGSVGElement, focus: () => Element | null): void;
  fit(): void;
  /** Centre the view on an element of the current SVG. */
  panTo(target: Element): void;
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

  host.addEventListener("wheel", (event) => {
    if (!svg) return;
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

  const panTo = (target: Element) => {
    if (svg) apply(centreOn(view, svg.getBoundingClientRect(), target.getBoundingClientRect()));
  };

  return {
    get svg() {
      return svg;
    },
    show(fresh, focus) {
      const size = parseViewBox(fresh.getAttribute("viewBox"));
      const keep = svg !== null && sameSize(full, size);
      fresh.removeAttribute("width");
      fresh.removeAttribute("height");
      host.textContent = "";
      host.appendChild(fresh);
      svg = fresh;
      full = size;
      if (keep) {
        apply(view);
        return;
      }
      const first = initialView(full, host.clientWidth || 800, host.clientHeight || 600);
      apply(first.view);
      const target = first.cropped ? focus() : null;
      if (target) panTo(target);
    },
    fit: () => apply({ ...full }),
    panTo,
  };
}
