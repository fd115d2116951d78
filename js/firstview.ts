/** Choosing a drawing a person can read: fitted to the pane, labels large enough, the pane filled. */

import { fitView, MAX_SCALE, parseViewBox, readableScale, scaleOf, type View } from "./panzoom";
import type { Views } from "./types";

export type RankDir = "TB" | "LR";

/** A first view should span at least this share of the pane's width or height (a little over the 60% the
 *  tests ask of the drawn nodes: the drawing has a margin around them). */
export const MIN_SPAN = 0.66;
/** Drawings this small are also tried left to right, which suits a short chain in a wide pane. */
export const TRY_ACROSS_BELOW = 40;

export interface Fit {
  view: View;
  scale: number;
  readable: boolean;
  span: number; // the larger of the drawing's shares of the pane's width and height
}

/** A width × height pane, and the scale at which labels in it are readable (`readableScale` of the
 *  payload's figures). */
export interface Pane {
  width: number;
  height: number;
  minScale: number;
}

/** Labels are drawn at this font size, in drawing units (js/dot.ts writes `fontsize=10` for nodes). */
export const LABEL_FONT_UNITS = 10;
/** The smallest on-screen size of a label's glyphs (its font size times the view's scale) that counts as
 *  readable. The kernel's figures measure a label's line box (11.5 units, 9.5 px), which lets the glyphs
 *  themselves shrink to 8.3 px: this rule measures the glyphs. */
export const MIN_GLYPH_PX = 9;

/** The smallest readable scale: the payload's line-box rule, and labels' glyphs at least MIN_GLYPH_PX. */
export function minScaleOf(views: Pick<Views, "label_units" | "min_label_px">): number {
  return Math.max(readableScale(views.label_units, views.min_label_px), readableScale(LABEL_FONT_UNITS, MIN_GLYPH_PX));
}

/** How many pixels a label's glyphs are on screen at `scale` (pixels per drawing unit). */
export function glyphPx(scale: number): number {
  return LABEL_FONT_UNITS * scale;
}

/** How the whole drawing looks fitted into the pane. */
export function fitOf(size: View, { width, height, minScale }: Pane): Fit {
  const view = fitView(size, width, height);
  const scale = Math.min(scaleOf(size, width, height), MAX_SCALE);
  const span = Math.max((size.w * scale) / width, (size.h * scale) / height);
  return { view, scale, readable: scale >= minScale, span };
}

export interface Drawing {
  svg: string;
  rankdir: RankDir;
  fit: Fit;
}

/** Graphviz's SVG text -> its drawing size. */
export function drawingSize(svg: string): View {
  return parseViewBox(/viewBox="([^"]*)"/.exec(svg)?.[1] ?? null);
}

/**
 * Lay out `nodes` nodes top to bottom, and, when small and not already good, left to right too;
 * left to right is kept only when it is good (readable, spanning MIN_SPAN of the pane) and top to
 * bottom is not: a long chain reads better downwards, even when neither fits.
 */
export async function bestDrawing(nodes: number, layout: (rankdir: RankDir) => Promise<string>, pane: Pane): Promise<Drawing> {
  const down = await layout("TB");
  const first: Drawing = { svg: down, rankdir: "TB", fit: fitOf(drawingSize(down), pane) };
  if (isGood(first.fit) || nodes >= TRY_ACROSS_BELOW) return first;
  const acrossSvg = await layout("LR");
  const across: Drawing = { svg: acrossSvg, rankdir: "LR", fit: fitOf(drawingSize(acrossSvg), pane) };
  return isGood(across.fit) ? across : first;
}

export function isGood(fit: Fit): boolean {
  return fit.readable && fit.span >= MIN_SPAN;
}

/** The better of two drawings: good before not; then readable before not; then the larger span. */
export function better(a: Drawing, b: Drawing): Drawing {
  const rank = (d: Drawing) => [isGood(d.fit) ? 1 : 0, d.fit.readable ? 1 : 0, d.fit.span] as const;
  const [ra, rb] = [rank(a), rank(b)];
  for (let i = 0; i < ra.length; i++) if (ra[i] !== rb[i]) return ra[i] > rb[i] ? a : b;
  return b;
}

/**
 * The first view: the first of `candidates` (most detailed first) whose drawing is good; if none
 * is, the best of them (a readable one over one fitted too small).
 */
export async function chooseFirstView<T>(
  candidates: readonly T[],
  draw: (candidate: T) => Promise<Drawing>,
): Promise<{ candidate: T; drawing: Drawing }> {
  let best: { candidate: T; drawing: Drawing } | null = null;
  for (const candidate of candidates) {
    const drawing = await draw(candidate);
    if (isGood(drawing.fit)) return { candidate, drawing };
    if (!best || better(drawing, best.drawing) === drawing) best = { candidate, drawing };
  }
  if (!best) throw new Error("no candidate view to draw");
  return best;
}
