/** The header: what is shown and its totals, partitioner / budget / graph selectors, busy, errors, notes, diff. */

import { element, show } from "../dom";
import { formatDelta, formatRatio } from "../format";
import { formatBytes } from "../units";
import { setTrait, type PaneContext } from "../model";
import { partitionerChoices, takesBudget } from "../partitioners";
import type { GraphData } from "../types";
import type { Pane } from "./pane";

function titleText(data: GraphData): string {
  const budget = data.memory_budget != null ? ` (budget ${data.memory_budget})` : "";
  return `${data.model} \u00B7 ${data.partitioner}${budget} \u00B7 ${data.mode} \u00B7 ${data.backend}`;
}

function diffText(data: GraphData): string {
  const diff = data.diff;
  if (!diff?.against) return "";
  return `against ${diff.against}: ${diff.recomputed_now.length} values now recomputed (dashed outline), ${diff.newly_saved.length} newly saved (outlined rows)`;
}

export function headerPane({ model, signal, showAhead }: PaneContext): Pane {
  const on = { signal };
  const el = element("div", "bwd-header");
  const title = element("span", "bwd-title");
  const stats = element("span", "bwd-stats");
  const controls = element("span", "bwd-controls");
  const partitioner = element("select", "bwd-partitioner");
  const budgetLabel = element("label", "bwd-budget-label", "budget ");
  const budget = element("input", "bwd-budget");
  Object.assign(budget, { type: "range", min: "0", max: "1", step: "0.05" });
  budget.dataset.lmSuppressShortcuts = "true"; // arrow keys move the slider, not the notebook's cell selection
  const budgetValue = element("span", "bwd-budget-value");
  budgetLabel.append(budget, budgetValue);
  const graphIndex = element("select", "bwd-graph-index");
  const busy = element("span", "bwd-busy", "partitioning\u2026");
  const error = element("span", "bwd-error");
  const notes = element("span", "bwd-notes");
  const diffLine = element("span", "bwd-diff-line");
  controls.append(partitioner, budgetLabel, graphIndex, busy);
  el.append(title, stats, controls, error, notes, diffLine);

  /** This compiled region's numbers, then the whole run's, each group named: a model compiled in
   *  several regions has per-region saved values but one peak. */
  function renderStats(data: GraphData): void {
    // deltas only beside a diff: a payload made ahead (js/ahead.ts) has none until the kernel's follows
    const previous = data.diff?.against ? model.get("previous") ?? {} : {};
    const part = data.partition;
    const savedDelta = previous.saved != null ? formatDelta(part.saved - previous.saved) : "";
    const bytesDelta = previous.saved_activation_bytes != null ? formatDelta(part.saved_activation_bytes - previous.saved_activation_bytes, true) : "";
    const region = element("span", "bwd-scope bwd-scope-region", `compiled region ${data.graph_index + 1} of ${data.graph_count}:`);
    region.title = "saved values, activations, nodes and recomputation of the compiled region shown";
    const run = element("span", "bwd-scope bwd-scope-run", "whole run:");
    run.title = "activation memory at its highest over the whole run: every compiled region, forward then backward";
    stats.replaceChildren(
      region, " saved ", element("span", "bwd-saved-count", String(part.saved)), savedDelta ? ` (${savedDelta})` : "",
      " \u00B7 activations ", element("span", "bwd-activation-bytes", formatBytes(part.saved_activation_bytes)), bytesDelta ? ` (${bytesDelta})` : "",
      ` \u00B7 ${part.backward_nodes} backward nodes \u00B7 ${part.recomputed} recomputed`,
      ...budgetRatio(part.torch_budget_ratio),
      " \u2502 ", run, " peak ", element("span", "bwd-peak-bytes", formatBytes(data.run.memory.peak.live_bytes)),
    );
  }

  function renderControls(data: GraphData): void {
    const canRerun = model.get("can_rerun");
    const chosen = model.get("partitioner") || data.partitioner;
    const choices = partitionerChoices(data.partitioners ?? [], data.partitioner, chosen);
    partitioner.replaceChildren(...choices.map((choice) => {
      const option = element("option", "", choice.name);
      option.value = choice.name;
      option.title = choice.description;
      option.disabled = !choice.registered;
      return option;
    }));
    partitioner.value = chosen;
    partitioner.title = choices.find((c) => c.name === chosen)?.description ?? "";
    partitioner.disabled = !canRerun;
    const budgetApplies = takesBudget(choices, chosen);
    const budgetNumber = Number(model.get("memory_budget"));
    budget.value = String(budgetNumber);
    budgetValue.textContent = budgetNumber.toFixed(2);
    budgetLabel.classList.toggle("bwd-disabled", !budgetApplies);
    budget.disabled = !budgetApplies || !canRerun;
    graphIndex.replaceChildren(...Array.from({ length: data.graph_count }, (_, i) => {
      const option = element("option", "", `graph ${i + 1} of ${data.graph_count}`);
      option.value = String(i);
      return option;
    }));
    graphIndex.value = String(data.graph_index);
    show(graphIndex, data.graph_count > 1);
  }

  partitioner.addEventListener("change", () => setTrait(model, "partitioner", partitioner.value), on);
  budget.addEventListener("input", () => (budgetValue.textContent = Number(budget.value).toFixed(2)), on);
  budget.addEventListener("change", () => {
    const value = Number(budget.value);
    setTrait(model, "memory_budget", value);
    showAhead({ partitioner: model.get("partitioner"), memory_budget: value, graph_index: model.get("graph_index") });
  }, on);
  graphIndex.addEventListener("change", () => setTrait(model, "graph_index", Number(graphIndex.value)), on);

  return {
    el,
    update(data) {
      title.textContent = titleText(data);
      renderStats(data);
      renderControls(data);
      show(busy, model.get("busy"));
      error.textContent = model.get("error") || "";
      notes.textContent = (data.notes ?? []).join(" ");
      diffLine.textContent = diffText(data);
    },
  };
}

/** torch's own measure of the plan shown, beside the budget asked for: (saved - forward inputs) over plain
 *  min-cut's, views at full size (notebook 3); nothing where min-cut did not run. */
function budgetRatio(ratio: number | null): (string | HTMLElement)[] {
  if (ratio === null) return [];
  const shown = element("span", "bwd-torch-ratio", formatRatio(ratio));
  shown.title = "torch's budget ratio: (bytes saved - forward inputs) / (plain min-cut's bytes saved - forward inputs), views at full size; at or under the budget asked for";
  return [" \u00B7 torch's ratio ", shown];
}
