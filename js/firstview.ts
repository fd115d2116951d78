/** Choosing a drawing a person can read: fitted to the pane, labels large enough, the pane filled. */

import { fitView, parseViewBox, readableScale, scaleOf, type View } from "./panzoom";
import type { Views } from "./types";

export type RankDir = "TB" | "LR";

/** The figures a drawing is fitted and judged by, as the payload's `views` carries them: views/grouping.py
 *  writes them once, for this module and for the static picture (views/static.py). */
export type FitFigures = Pick<Views, "label_units" | "min_label_px" | "label_font_units" | "min_glyph_px" | "max_scale" | "min_span" | "try_across_below">;

export interface Fit {
  view: View;
  scale: number;
  readable: boolean;
  span: number; // the larger of the drawing's shares of the pane's width and height
  good: boolean; // readable, and spanning at least `min_span` of the pane
}

/** A width × height pane, and the payload's figures. */
export interface Pane {
  width: number;
  height: number;
  figures: FitFigures;
}

/** The smallest readable scale: labels' line boxes at `min_label_px`, and their glyphs (drawn at
 *  `label_font_units`) at least `min_glyph_px`. The line box (11.5 units, 9.5 px) alone would let the glyphs
 *  themselves shrink to 8.3 px: the second rule measures the glyphs. */
export function minScaleOf(views: Pick<Views, "label_units" | "min_label_px" | "label_font_units" | "min_glyph_px">): number {
  return Math.max(readableScale(views.label_units, views.min_label_px), readableScale(views.label_font_units, views.min_glyph_px));
}

/** How many pixels a label's glyphs are on screen at `scale` (pixels per drawing unit). */
export function glyphPx(scale: number, views: Pick<Views, "label_font_units">): number {
  return views.label_font_units * scale;
}

/** How the whole drawing looks fitted into the pane (enlarged no further than `max_scale`). */
export function fitOf(size: View, { width, height, figures }: Pane): Fit {
  const view = fitView(size, width, height, figures.max_scale);
  const scale = Math.min(scaleOf(size, width, height), figures.max_scale);
  const span = Math.max((size.w * scale) / width, (size.h * scale) / height);
  const readable = scale >= minScaleOf(figures);
  return { view, scale, readable, span, good: readable && span >= figures.min_span };
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
 * Lay out `nodes` nodes top to bottom, and, when fewer than `try_across_below` and not already good, left
 * to right too; left to right is kept only when it is good (readable, spanning `min_span` of the pane) and
 * top to bottom is not: a long chain reads better downwards, even when neither fits.
 */
export async function bestDrawing(nodes: number, layout: (rankdir: RankDir) => Promise<string>, pane: Pane): Promise<Drawing> {
  const down = await layout("TB");
  const first: Drawing = { svg: down, rankdir: "TB", fit: fitOf(drawingSize(down), pane) };
  if (first.fit.good || nodes >= pane.figures.try_across_below) return first;
  const acrossSvg = await layout("LR");
  const across: Drawing = { svg: acrossSvg, rankdir: "LR", fit: fitOf(drawingSize(acrossSvg), pane) };
  return across.fit.good ? across : first;
}

/** The better of two drawings: good before not; then readable before not; then the larger span. */
export function better(a: Drawing, b: Drawing): Drawing {
  const rank = (d: Drawing) => [d.fit.good ? 1 : 0, d.fit.readable ? 1 : 0, d.fit.span] as const;
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
    if (drawing.fit.good) return { candidate, drawing };
    if (!best || better(drawing, best.drawing) === drawing) best = { candidate, drawing };
  }
  if (!best) throw new Error("no candidate view to draw");
  return best;
}
