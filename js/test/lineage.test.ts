import { describe, expect, it } from "vitest";
import { lineageOf } from "../lineage";

// a -> b -> d, c -> d, d -> e, f -> g (unrelated)
const EDGES: [string, string][] = [["a", "b"], ["b", "d"], ["c", "d"], ["d", "e"], ["f", "g"], ["a", "f"]];

describe("lineageOf", () => {
  it("finds what the selection is computed from and what it feeds, and the edges between", () => {
    const { upstream, downstream, edges } = lineageOf(EDGES, "d");
    expect([...upstream].sort()).toEqual(["a", "b", "c"]);
    expect([...downstream]).toEqual(["e"]);
    expect([...edges].sort()).toEqual([0, 1, 2, 3]);
  });

  it("leaves a sibling branch out: a feeds f, but f is not on a path through the selection", () => {
    const { upstream, downstream, edges } = lineageOf(EDGES, "b");
    expect([...upstream]).toEqual(["a"]);
    expect([...downstream].sort()).toEqual(["d", "e"]);
    expect(edges.has(5)).toBe(false);
    expect(edges.has(2)).toBe(false); // c -> d feeds a descendant, not the selection
  });

  it("ends on a cycle of collapsed modules", () => {
    const { upstream, downstream } = lineageOf([["x", "y"], ["y", "x"], ["y", "z"]], "x");
    expect(upstream).toEqual(new Set(["y"]));
    expect(downstream).toEqual(new Set(["y", "z"]));
  });

  it("a node alone has no lineage", () => {
    const { upstream, downstream, edges } = lineageOf(EDGES, "lonely");
    expect(upstream.size + downstream.size + edges.size).toBe(0);
  });
});
