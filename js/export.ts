/** The graph view as a file: an SVG that reads outside the page (computed styles written onto each
 *  element, colours as plain rgb) and a PNG drawn from it on a canvas; both handed to the user as a download. */

/** The properties the widget's CSS sets on a drawing: what the SVG would lose outside the page. */
export const INLINED_STYLES = [
  "fill", "fill-opacity", "stroke", "stroke-width", "stroke-dasharray", "stroke-opacity", "opacity",
  "font-family", "font-size", "font-weight", "font-style", "visibility",
] as const;

const COLOUR_STYLES = new Set(["fill", "stroke"]);

/** `name` made safe for a file name: letters, digits, dots, dashes and underscores only. */
export function exportFileName(model: string, graphIndex: number, graphCount: number, extension: "svg" | "png"): string {
  const base = (model || "model").replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^_+|_+$/g, "") || "model";
  return `${base}-backward${graphCount > 1 ? `-${graphIndex}` : ""}.${extension}`;
}

/** `style="…"` text for the properties given, leaving out those at their SVG defaults. */
export function styleText(values: ReadonlyMap<string, string>): string {
  const defaults: Record<string, string> = { "fill-opacity": "1", "stroke-opacity": "1", opacity: "1", visibility: "visible", "stroke-dasharray": "none" };
  return [...values].filter(([name, value]) => value !== "" && defaults[name] !== value).map(([name, value]) => `${name}: ${value}`).join("; ");
}

/** A colour as the canvas draws it (rgb or rgba): color-mix() and color() mean nothing to other viewers. */
function colourResolver(): (value: string) => string {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 1;
  const context = canvas.getContext("2d", { willReadFrequently: true });
  const seen = new Map<string, string>();
  return (value) => {
    if (!context || value === "none" || value.startsWith("url(") || value.startsWith("rgb(") || value.startsWith("#")) return value;
    let rgb = seen.get(value);
    if (rgb === undefined) {
      context.clearRect(0, 0, 1, 1);
      context.fillStyle = "#000";
      context.fillStyle = value;
      context.fillRect(0, 0, 1, 1);
      const [r, g, b, a] = context.getImageData(0, 0, 1, 1).data;
      rgb = a === 255 ? `rgb(${r}, ${g}, ${b})` : `rgba(${r}, ${g}, ${b}, ${(a / 255).toFixed(3)})`;
      seen.set(value, rgb);
    }
    return rgb;
  };
}

/** The SVG on screen as a standalone file: the current view (its viewBox) at the pane's size, on the
 *  widget's background, each element carrying its computed style. */
export function standaloneSvg(svg: SVGSVGElement, width: number, height: number, background: string): string {
  const copy = svg.cloneNode(true) as SVGSVGElement;
  const resolve = colourResolver();
  const originals = [svg, ...svg.querySelectorAll("*")];
  const copies = [copy, ...copy.querySelectorAll("*")];
  originals.forEach((original, i) => {
    const computed = getComputedStyle(original);
    const values = new Map(INLINED_STYLES.map((name) => {
      const value = computed.getPropertyValue(name);
      return [name, COLOUR_STYLES.has(name) ? resolve(value) : value] as [string, string];
    }));
    const style = styleText(values);
    if (style) copies[i].setAttribute("style", style);
  });
  copy.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  copy.setAttribute("width", String(width));
  copy.setAttribute("height", String(height));
  const backdrop = document.createElementNS("http://www.w3.org/2000/svg", "rect");
  const [x, y, w, h] = (svg.getAttribute("viewBox") ?? `0 0 ${width} ${height}`).split(/[\s,]+/).map(Number);
  // covers the view and the margins preserveAspectRatio leaves around it
  const pad = Math.max(w, h) * 4;
  for (const [name, value] of Object.entries({ x: x - pad, y: y - pad, width: w + 2 * pad, height: h + 2 * pad })) backdrop.setAttribute(name, String(value));
  backdrop.setAttribute("style", `fill: ${resolve(background)}`);
  copy.insertBefore(backdrop, copy.firstChild);
  return new XMLSerializer().serializeToString(copy);
}

/** The standalone SVG drawn on a canvas of `width` × `height` times `scale` pixels, as a PNG. */
export async function pngOf(svgText: string, width: number, height: number, scale: number): Promise<Blob> {
  const url = URL.createObjectURL(new Blob([svgText], { type: "image/svg+xml" }));
  try {
    const image = new Image();
    image.src = url;
    await image.decode();
    const canvas = document.createElement("canvas");
    canvas.width = Math.round(width * scale);
    canvas.height = Math.round(height * scale);
    const context = canvas.getContext("2d");
    if (!context) throw new Error("this browser gives no canvas to draw the PNG on");
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    return await new Promise((resolve, reject) => canvas.toBlob((blob) => (blob ? resolve(blob) : reject(new Error("the canvas made no PNG"))), "image/png"));
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** Hand `blob` to the user as a file named `name` (the browser's download). */
export function download(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.style.display = "none";
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000); // after the browser has read it
}
