import { describe, expect, it } from "vitest";
import { exportFileName, styleText } from "../export";
import { heatLevel, HEAT_LEVELS } from "../memory";
import { argParts, neighboursOf, splitSource, wrapPoints } from "../panes/details";
import { heatBounds } from "../panes/graph_parts";
import { transformerData } from "./synthetic";

describe("details pane", () => {
  it("cuts args into text and the names of nodes, losing nothing", () => {
    const args = "mm_1, [4, 32], primals_3, dim=-1, not_a_node";
    const parts = argParts(args, new Set(["mm_1", "primals_3", "mm"]));
    expect(parts.map((p) => p.text).join("")).toBe(args);
    expect(parts.filter((p) => p.id).map((p) => p.id)).toEqual(["mm_1", "primals_3"]);
  });

  it("finds a node's inputs and consumers on the graph's edges, each once", () => {
    const edges: [string, string][] = [["a", "c"], ["b", "c"], ["a", "c"], ["c", "d"], ["c", "e"]];
    expect(neighboursOf(edges, "c")).toEqual({ inputs: ["a", "b"], consumers: ["d", "e"] });
    expect(neighboursOf(transformerData(1, 2).edges, "saved_b0_attn")).toEqual({ inputs: [], consumers: ["b0_attn_1"] });
  });

  it("splits a source line into its place and its code", () => {
    expect(splitSource("/home/me/model.py:42: return self.fc(x).relu()")).toEqual({ place: "/home/me/model.py:42", code: "return self.fc(x).relu()" });
    expect(splitSource("/home/me/model.py:42")).toEqual({ place: "/home/me/model.py:42", code: "" });
    expect(splitSource("something else")).toEqual({ place: "", code: "something else" });
  });
});

describe("source lines", () => {
  it("wrap after brackets, commas, dots and slashes, never inside a name", () => {
    const code = "return torch.relu(self.bn2(x) + x)  # a comment, long";
    const pieces = wrapPoints(code);
    expect(pieces.join("")).toBe(code);
    expect(pieces).toEqual(["return torch.", "relu(", "self.", "bn2(", "x) + x)  # a comment,", " long"]);
    expect(wrapPoints("/tmp/ipykernel_1/2.py:10")).toEqual(["/", "tmp/", "ipykernel_1/", "2.", "py:10"]);
    expect(wrapPoints("")).toEqual([]);
  });
});

describe("bytes legend", () => {
  it("gives each heat level the most bytes it holds, as heatLevel decides", () => {
    const largest = 3_000_000;
    const bounds = heatBounds(largest);
    expect(bounds).toHaveLength(HEAT_LEVELS);
    expect(bounds[HEAT_LEVELS - 1]).toBe(largest);
    bounds.forEach((bound, i) => {
      expect(heatLevel(bound, largest)).toBe(i + 1);
      if (i < HEAT_LEVELS - 1) expect(heatLevel(bound * 1.01, largest)).toBe(i + 2);
    });
  });
});

describe("export", () => {
  it("names the file after the model and the graph, safe for any file system", () => {
    expect(exportFileName("Transformer", 0, 1, "svg")).toBe("Transformer-backward.svg");
    expect(exportFileName("my model/<v2>", 1, 3, "png")).toBe("my_model_v2-backward-1.png");
    expect(exportFileName("", 0, 1, "png")).toBe("model-backward.png");
  });

  it("writes the style of an element without SVG's defaults", () => {
    const values = new Map([["fill", "rgb(1, 2, 3)"], ["opacity", "1"], ["stroke-dasharray", "none"], ["stroke-width", "3px"], ["font-style", ""]]);
    expect(styleText(values)).toBe("fill: rgb(1, 2, 3); stroke-width: 3px");
  });
});
