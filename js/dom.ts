/** Small DOM helpers. Text goes in with textContent only: kernel text never becomes markup. */

export function element<K extends keyof HTMLElementTagNameMap>(tag: K, className = "", text = ""): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text) el.textContent = text;
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svgElement<K extends keyof SVGElementTagNameMap>(tag: K, attributes: Record<string, string> = {}, text = ""): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) el.setAttribute(name, value);
  if (text) el.textContent = text;
  return el;
}

/** Remove `className` from every element under `scope` that has it. */
export function clearClass(scope: ParentNode | null | undefined, className: string): void {
  scope?.querySelectorAll(`.${className}`).forEach((e) => e.classList.remove(className));
}

export function show(el: HTMLElement | SVGElement, visible: boolean): void {
  el.style.display = visible ? "" : "none";
}

/** Scroll `container` (not the page around it) so that `child` is in view, a third of the way down. */
export function keepInView(container: HTMLElement, child: HTMLElement): void {
  const top = child.getBoundingClientRect().top - container.getBoundingClientRect().top + container.scrollTop;
  if (top < container.scrollTop || top + child.offsetHeight > container.scrollTop + container.clientHeight) {
    container.scrollTop = top - container.clientHeight / 3;
  }
}
