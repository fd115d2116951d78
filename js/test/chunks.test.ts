import { describe, expect, it } from "vitest";
import { chunked, inTurn, refill } from "../chunks";

describe("long lists a slice at a time", () => {
  it("cuts a list into slices of the size asked, the last one shorter", () => {
    expect(chunked([1, 2, 3, 4, 5], 2)).toEqual([[1, 2], [3, 4], [5]]);
    expect(chunked([], 3)).toEqual([]);
  });

  it("runs each step in a task of its own, the first too, then says it is done", async () => {
    const ran: string[] = [];
    const finished = new Promise<void>((resolve) => inTurn(["a", "b", "c"].map((s) => () => ran.push(s)), () => true, resolve));
    expect(ran).toEqual([]); // nothing in the caller's task
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(ran).toEqual(["a"]);
    await finished;
    expect(ran).toEqual(["a", "b", "c"]);
  });

  it("runs every step at once when asked to", () => {
    const ran: number[] = [];
    let done = false;
    inTurn([1, 2, 3].map((n) => () => ran.push(n)), () => true, () => (done = true), true);
    expect(ran).toEqual([1, 2, 3]);
    expect(done).toBe(true);
  });

  it("stops midway when a newer run replaces it, and never says it is done", async () => {
    const ran: number[] = [];
    let current = true;
    let done = false;
    inTurn([1, 2, 3].map((n) => () => ran.push(n)), () => current, () => (done = true));
    await new Promise((resolve) => setTimeout(resolve, 0));
    current = false;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ran).toEqual([1]);
    expect(done).toBe(false);
  });

  it("refills a list a block per task, the old blocks kept until the first new one replaces them", async () => {
    const list = { children: ["old1", "old2"], replaceChildren(...c: string[]) { this.children = c; }, appendChild(c: string) { this.children.push(c); } };
    const finished = new Promise<void>((resolve) => refill(list, [1, 2, 3], (n) => `new${n}`, () => true, resolve, false));
    expect(list.children).toEqual(["old1", "old2"]); // not empty in the caller's task, nor in a frame after it
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(list.children).toEqual(["new1"]);
    await finished;
    expect(list.children).toEqual(["new1", "new2", "new3"]);
  });

  it("empties a list at once when there is nothing to fill it with", () => {
    const list = { children: ["old"], replaceChildren(...c: string[]) { this.children = c; }, appendChild(c: string) { this.children.push(c); } };
    let done = false;
    refill(list, [], (n: number) => `new${n}`, () => true, () => (done = true), true);
    expect(list.children).toEqual([]);
    expect(done).toBe(true);
  });
});
