/** The advisor's plans as the partitions tab lists them: columns, the fits mark, and what the tab says
 *  around them. The plans and their numbers come from the kernel (views/payload.py `advice_rows`). */

import { formatBytes, formatFlops, formatSeconds } from "./units";
import type { AdvicePlanRow } from "./types";

/** "yes" / "no" against the target, "not verified" where the plan's code could not be run to check it (an
 *  offload plan whose eager step failed on fake tensors: its note says why), and no verdict for a region plan,
 *  whose peak is an estimate by design (its pasted code is run for the bytes it saves: its note says them). */
export function fitsText(row: AdvicePlanRow): string {
  if (row.kind === "region") return "\u2014";
  if (row.verified_peak_bytes === null) return "not verified";
  return row.fits ? "yes" : "no";
}

/** The verdict right after the plan's name, so a narrow pane shows it without scrolling. */
export const ADVICE_COLUMNS: readonly [string, (row: AdvicePlanRow) => string][] = [
  ["plan", (r) => (r.best ? `\u2605 ${r.label}` : r.label)],
  ["fits", fitsText],
  ["predicted peak", (r) => formatBytes(r.predicted_peak_bytes)],
  ["verified peak", (r) => (r.verified_peak_bytes === null ? "\u2014" : formatBytes(r.verified_peak_bytes))],
  ["measured peak", (r) => (r.measured_peak_bytes === null ? "\u2014" : formatBytes(r.measured_peak_bytes))],
  ["recompute", (r) => formatFlops(r.recompute_flops)],
  ["step time", (r) => (r.measured_seconds === null ? "\u2014" : formatSeconds(r.measured_seconds))],
];

/** Where an offload plan's verified peak differs from its predicted one, in measured parts that add up to the
 *  difference: the clause its note holds (studio/advisor/plans.py `PeakGap.text`, "verified is ... than
 *  predicted: ..."), "" where the note has none. */
export function peakGapText(row: AdvicePlanRow): string {
  return row.note.match(/verified (?:is|equals) [^;]*/)?.[0] ?? "";
}

/** Why an offload plan verified under the target does not fit: on a CPU model its hooks move nothing (the note's
 *  clause from core/eager_memory.py `CPU_CAVEAT`), "" elsewhere. */
export function offloadCpuText(row: AdvicePlanRow): string {
  return row.note.match(/on this device the hooks move nothing[^;]*/)?.[0] ?? "";
}

const sentence = (text: string): string => (text ? `. ${text[0].toUpperCase()}${text.slice(1)}` : "");

/** A row's tooltip: what clicking it does; for a plan without a partition (an offload or a region plan), why
 *  there is none, and for an offload plan why it does not fit on a CPU model and where its verified peak differs
 *  from the predicted one. */
export function adviceRowTitle(row: AdvicePlanRow): string {
  if (row.kind === "region") {
    return "each block is a compiled graph of its own, so there is no one partition to show; its note says what its pasted code saves under torch.compile: click to show its code and note";
  }
  if (!row.selectable) {
    const how = row.verified_peak_bytes === null ? "not verified (see its note)" : "verified by running its hooks around an eager step on fake tensors";
    return `${how}: saved_tensors_hooks run around the compiled graphs, not in them, so there is no partition to show: click to show its code${sentence(offloadCpuText(row))}${sentence(peakGapText(row))}`;
  }
  return row.best
    ? "of the plans with a partition, the one that fits and recomputes least: click to show its partition"
    : "click to show its partition";
}

/** Whether the advisor runs: the kernel is busy and its step line is not an end state. */
export function adviceRunning(progress: string, busy: boolean): boolean {
  return busy && progress !== "" && progress !== "stopped";
}

/** What the advisor part says before it holds plans. */
export function emptyAdviceText(canAdvise: boolean): string {
  const what = "The advisor tries min-cut budgets, selective and full checkpointing of the repeated blocks and offloading, re-extracts each plan from the code it gives you, and stars, of the plans with a partition, the one that fits the target and recomputes least (an offload plan costs copies, not FLOPs: it is listed, never starred).";
  return canAdvise
    ? `${what} Type a target of activation memory (e.g. 24GB, 512 MiB or bytes) and press Advise.`
    : `${what} Run bw.advise(model, x, target="24GB") and bw.show(advice), or open this widget with bw.show(model, x), to fill it.`;
}
