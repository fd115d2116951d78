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

/** Which node a code line defines: the inverse of each node's `line`. */
export function nodeAtLine(nodes: { id: string; line: number; op: string }[], line: number): string | null {
  const own = nodes.find((n) => n.line === line && n.op !== "placeholder");
  return own ? own.id : null;
}
