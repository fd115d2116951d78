/** The frame the memory timeline and the budget sweep share: grid lines, tick labels, the axis corner. */

import type { Box } from "../chart";
import { svgElement } from "../dom";
import type { Tick } from "../memory";

export interface AxisTicks {
  ticks: Tick[];
  format: (value: number) => string;
}

/** A `bwd-axes` group: a grid line and label per y tick, a label per x tick (`xLabelGap` below the box). */
export function chartAxes(box: Box, y: AxisTicks, x: AxisTicks, xLabelGap: number): SVGGElement {
  const axes = svgElement("g", { class: "bwd-axes" });
  for (const tick of y.ticks) {
    axes.append(
      svgElement("line", { x1: String(box.left), x2: String(box.right), y1: String(tick.at), y2: String(tick.at), class: "bwd-grid" }),
      svgElement("text", { x: String(box.left - 4), y: String(tick.at + 3), "text-anchor": "end" }, y.format(tick.value)),
    );
  }
  for (const tick of x.ticks) {
    axes.appendChild(svgElement("text", { x: String(tick.at), y: String(box.bottom + xLabelGap), "text-anchor": "middle" }, x.format(tick.value)));
  }
  axes.appendChild(svgElement("path", { d: `M${box.left} ${box.top}V${box.bottom}H${box.right}`, class: "bwd-axis" }));
  return axes;
}
