/** Node outlines share one specificity, so the stylesheet's order decides which shows: the selection must
 *  come last, or a selected node that is also a search match (or "now recomputed") loses its outline. */

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const CSS = readFileSync(new URL("../widget.css", import.meta.url), "utf8");
const position = (state: string): number => CSS.indexOf(`.bwd-svg g.node.${state} > path`);

describe("node outlines", () => {
  it("draws the selection over every other outline state", () => {
    const others = ["bwd-cursor", "bwd-match", "bwd-diff-recomputed"];
    for (const state of [...others, "bwd-selected"]) expect(position(state), state).toBeGreaterThan(0);
    for (const state of others) expect(position("bwd-selected"), state).toBeGreaterThan(position(state));
  });
});
