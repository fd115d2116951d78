/// <reference types="node" />
/**
 * Sizes that keep the front end easy to change: no function, arrow function or method over 120 lines
 * (tests/test_code_shape.py holds the Python side to 60). Every js/**.ts but the tests and the .d.ts
 * files is parsed with the TypeScript compiler, so a function is measured by its syntax, not a regex.
 */

import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const FUNCTION_LINES = 120;
const JS = fileURLToPath(new URL("..", import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "test" || entry.name === "node_modules" ? [] : sources(path);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [path] : [];
  });
}

interface Measured {
  name: string;
  lines: number;
}

function nameOf(node: ts.Node, file: ts.SourceFile): string {
  const named = node as ts.Node & { name?: ts.Node };
  if (named.name) return named.name.getText(file);
  if (ts.isVariableDeclaration(node.parent)) return node.parent.name.getText(file);
  if (ts.isPropertyAssignment(node.parent)) return node.parent.name.getText(file);
  return "(anonymous)";
}

/** Every function-like node of a file with its length in lines, from its first token to its last. */
function measure(path: string): Measured[] {
  const file = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.Latest, true);
  const found: Measured[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const start = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const end = file.getLineAndCharacterOfPosition(node.getEnd()).line;
      const line = start + 1;
      found.push({ name: `${relative(JS, path)}:${line} ${nameOf(node, file)}`, lines: end - start + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

const measured = sources(JS).flatMap(measure);

describe("the front end's code shape", () => {
  it("sees the front end's modules and their functions, so the limit does not hold vacuously", () => {
    const files = new Set(measured.map((m) => m.name.split(":")[0]));
    for (const file of ["widget.ts", "grouping.ts", join("panes", "graph.ts")]) expect(files).toContain(file);
    expect(measured.some((m) => m.name.includes("graphPane"))).toBe(true);
    expect(measured.some((m) => m.name.includes(" show"))).toBe(true); // methods count too
    expect(measured.some((m) => m.name.includes("(anonymous)") || m.name.includes(" move"))).toBe(true);
  });

  it(`has no function, arrow function or method over ${FUNCTION_LINES} lines`, () => {
    const long = measured.filter((m) => m.lines > FUNCTION_LINES).map((m) => `${m.name}: ${m.lines} lines`);
    expect(long, "split these into named parts").toEqual([]);
  });
});
