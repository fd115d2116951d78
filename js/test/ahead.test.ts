/** Payloads made ahead (js/ahead.ts) on the messages a real widget sent after a sweep (tests/test_contract.py
 *  writes them into the contract fixture): a slider's move finds them by what it knows, the kernel's forget
 *  drops them, and other messages are not taken for them. */

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { aheadKey, PayloadsAhead } from "../ahead";
import type { GraphData } from "../types";

const FIXTURE = fileURLToPath(new URL("./fixtures/payload.json", import.meta.url));
const { ahead: sent } = JSON.parse(readFileSync(FIXTURE, "utf8")) as { ahead: [unknown, string[]][] };
const asView = (b64: string) => new DataView(Uint8Array.from(Buffer.from(b64, "base64")).buffer);
const decode = (wire: DataView | ArrayBuffer) => JSON.parse(new TextDecoder().decode(wire)) as GraphData;

function received(): PayloadsAhead {
  const kept = new PayloadsAhead();
  for (const [message, buffers] of sent) expect(kept.receive(message, buffers.map(asView))).toBe(true);
  return kept;
}

describe("payloads made ahead", () => {
  it("are found by the slider's own value (the range input's string) for each swept budget", () => {
    const kept = received();
    expect(kept.size).toBe(2);
    for (const value of ["0", "0.45"]) {
      const wire = kept.find({ partitioner: "min_cut", memory_budget: Number(value), graph_index: 0 });
      expect(wire).toBeDefined();
      const data = wire && decode(wire);
      expect(data && [data.partitioner, data.memory_budget, data.graph_index]).toEqual(["min_cut", Number(value), 0]);
    }
  });

  it("are not found for another budget, partitioner or graph", () => {
    const kept = received();
    expect(kept.find({ partitioner: "min_cut", memory_budget: 0.5, graph_index: 0 })).toBeUndefined();
    expect(kept.find({ partitioner: "default", memory_budget: 0, graph_index: 0 })).toBeUndefined();
    expect(kept.find({ partitioner: "min_cut", memory_budget: 0, graph_index: 1 })).toBeUndefined();
  });

  it("are dropped when the kernel says to forget them", () => {
    const kept = received();
    expect(kept.receive({ forget_ahead: true }, [])).toBe(true);
    expect(kept.size).toBe(0);
  });

  it("leave other custom messages alone", () => {
    const kept = received();
    for (const other of [null, "text", { id: "1", kind: "anywidget-command-response" }, { ahead: sent[0][0] }]) {
      expect(kept.receive(other, [])).toBe(false);
    }
    expect(kept.size).toBe(2);
  });

  it("key a budget the way the kernel rounds its neighbours (4 places)", () => {
    const key = { partitioner: "min_cut", graph_index: 0 };
    expect(aheadKey({ ...key, memory_budget: 0.1 + 0.2 })).toBe(aheadKey({ ...key, memory_budget: 0.3 }));
    expect(aheadKey({ ...key, memory_budget: null })).toBe("min_cut||0");
  });
});
