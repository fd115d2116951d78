/** Keyboard moves in the drawn graph: arrows go to a neighbour, as the eye would. */

export type Direction = "up" | "down" | "left" | "right";

/** A drawn node's centre, in drawing units (y grows downwards). */
export interface Placed {
  id: string;
  x: number;
  y: number;
}

const KEYS: Record<string, Direction> = { ArrowUp: "up", ArrowDown: "down", ArrowLeft: "left", ArrowRight: "right" };

export function directionOf(key: string): Direction | null {
  return KEYS[key] ?? null;
}

/** How far `to` lies in `direction` from `from` (negative: behind), and how far off that line. */
function offsets(from: Placed, to: Placed, direction: Direction): [number, number] {
  const dx = to.x - from.x;
  const dy = to.y - from.y;
  if (direction === "up") return [-dy, Math.abs(dx)];
  if (direction === "down") return [dy, Math.abs(dx)];
  if (direction === "left") return [-dx, Math.abs(dy)];
  return [dx, Math.abs(dy)];
}

function nearest(from: Placed, candidates: Placed[], direction: Direction, cone: number): Placed | null {
  let best: Placed | null = null;
  let bestCost = Infinity;
  for (const c of candidates) {
    const [along, across] = offsets(from, c, direction);
    if (along <= 0 || across > along * cone) continue;
    const cost = along + 2 * across;
    if (cost < bestCost) [best, bestCost] = [c, cost];
  }
  return best;
}

/**
 * The node to move to from `current`: up and down, a node it is joined to by an edge that lies that
 * way (up: what it is computed from, down: what uses it); else, and sideways, the nearest drawn node
 * that way.
 */
export function neighbour(current: string, direction: Direction, placed: readonly Placed[], edges: readonly [string, string][]): string | null {
  const byId = new Map(placed.map((p) => [p.id, p]));
  const from = byId.get(current);
  if (!from) return placed[0]?.id ?? null;
  const joined = new Set<string>();
  for (const [a, b] of edges) {
    if (a === current) joined.add(b);
    if (b === current) joined.add(a);
  }
  const linked = [...joined].map((id) => byId.get(id)).filter((p): p is Placed => p !== undefined);
  const others = placed.filter((p) => p.id !== current);
  const along = direction === "up" || direction === "down" ? nearest(from, linked, direction, 3) : null;
  return (along ?? nearest(from, others, direction, 1.5))?.id ?? null;
}

/** The drawn node nearest the point (x, y). */
export function nearestTo(placed: readonly Placed[], x: number, y: number): string | null {
  const distance = (p: Placed) => (p.x - x) ** 2 + (p.y - y) ** 2;
  return placed.reduce<Placed | null>((best, p) => (!best || distance(p) < distance(best) ? p : best), null)?.id ?? null;
}
