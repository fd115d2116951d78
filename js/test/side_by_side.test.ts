import { describe, expect, it } from "vitest";
import { anchorOf, partitionName } from "../panes/graph_compare";
import { centred, followView, scaleOf } from "../panzoom";
import { transformerData } from "./synthetic";

describe("side by side", () => {
  it("follows a view at its scale, the anchor at the same place in the other pane", () => {
    const pane = { width: 400, height: 300 };
    const view = centred(100, 50, pane.width, pane.height, 2); // 2 px a unit, centred on (100, 50)
    const followed = followView(view, { x: 120, y: 40 }, { x: 500, y: 900 }, pane, pane);
    expect(scaleOf(followed, pane.width, pane.height)).toBeCloseTo(2);
    // the anchor sits 20 units right of and 10 above the middle in both
    expect(followed.x + followed.w / 2).toBeCloseTo(480);
    expect(followed.y + followed.h / 2).toBeCloseTo(910);
    const wider = followView(view, { x: 120, y: 40 }, { x: 0, y: 0 }, pane, { width: 800, height: 300 });
    expect(scaleOf(wider, 800, 300)).toBeCloseTo(2);
  });

  it("anchors on the selection when both draw it, else on the shared node nearest the middle", () => {
    const moved = [{ id: "a", x: 0, y: 0 }, { id: "b", x: 10, y: 10 }, { id: "only_here", x: 50, y: 50 }];
    const other = [{ id: "a", x: 5, y: 5 }, { id: "b", x: 7, y: 7 }];
    expect(anchorOf(moved, other, "a", { x: 50, y: 50 })).toEqual([moved[0], other[0]]);
    expect(anchorOf(moved, other, "only_here", { x: 50, y: 50 })).toEqual([moved[1], other[1]]);
    expect(anchorOf(moved, [], "a", { x: 0, y: 0 })).toBeNull();
  });

  it("names a partition by its partitioner and budget", () => {
    const data = transformerData(1, 1);
    expect(partitionName(data)).toBe("default");
    expect(partitionName({ ...data, partitioner: "min_cut", memory_budget: 0 })).toBe("min_cut (budget 0)");
  });
});
