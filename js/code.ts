/** A small Python tokenizer for the generated code: enough to colour it, no dependency. */

export interface Token {
  text: string;
  kind: "keyword" | "string" | "number" | "comment" | "name" | "op" | "space" | "call";
}

const KEYWORDS = new Set(["def", "return", "class", "import", "from", "None", "True", "False", "self", "as", "in", "for", "if", "else"]);
const PATTERN = /(#.*$)|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(\b\d+(?:\.\d*)?(?:e[-+]?\d+)?\b)|([A-Za-z_][\w.]*)|(\s+)|(.)/gm;

export function tokenizeLine(line: string): Token[] {
  const tokens: Token[] = [];
  for (const m of line.matchAll(PATTERN)) {
    const text = m[0];
    if (m[1]) tokens.push({ text, kind: "comment" });
    else if (m[2]) tokens.push({ text, kind: "string" });
    else if (m[3]) tokens.push({ text, kind: "number" });
    else if (m[4]) tokens.push({ text, kind: KEYWORDS.has(text) ? "keyword" : text.includes(".") ? "call" : "name" });
    else if (m[5]) tokens.push({ text, kind: "space" });
    else tokens.push({ text, kind: "op" });
  }
  return tokens;
}

/** Which node a code line defines: the inverse of each node's `line` (the kernel's line map, also in
 *  code.lines.backward). */
export function nodeAtLine(nodes: { id: string; line: number; op: string }[], line: number): string | null {
  const own = nodes.find((n) => n.line === line && n.op !== "placeholder");
  return own ? own.id : null;
}

export interface CodeLine {
  number: number; // 1-based, in the exact text: node lines refer to it
  text: string;
}

const CLEARING_SUFFIX = /;\s*(?:\w+\s*=\s*)+None\s*$/;
const CLEARING_LINE = /^\s*(?:\w+\s*=\s*)+None\s*$/;

/**
 * The code as a person reads it: the `x = None` statements the generated code uses to free each
 * value after its last use left out, and runs of blank lines cut to one. `exact` keeps the GraphNet
 * text as written. Lines keep their numbers in the exact text.
 */
export function codeLines(code: string, exact: boolean): CodeLine[] {
  const lines = code.split("\n").map((text, i) => ({ number: i + 1, text }));
  if (exact) return lines;
  const kept: CodeLine[] = [];
  for (const line of lines) {
    if (CLEARING_LINE.test(line.text)) continue;
    const text = line.text.replace(CLEARING_SUFFIX, "").trimEnd();
    if (!text && (!kept.length || !kept[kept.length - 1].text)) continue;
    kept.push({ number: line.number, text });
  }
  return kept;
}
