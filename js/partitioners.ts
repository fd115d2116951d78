/** The partitioner selector's options, from the registry the kernel sends. */

import type { PartitionerOption } from "./types";

export interface Choice extends PartitionerOption {
  /** False for a name the registry lacks (a user's own partition_fn): shown, not choosable. */
  registered: boolean;
}

/**
 * The registered partitioners, then each of `current` (the partition drawn, the one asked
 * for) the registry lacks, so that the selector always shows the partition it claims.
 */
export function partitionerChoices(registered: readonly PartitionerOption[], ...current: string[]): Choice[] {
  const choices: Choice[] = registered.map((p) => ({ ...p, registered: true }));
  for (const name of current) {
    if (!name || choices.some((c) => c.name === name)) continue;
    choices.push({ name, takes_budget: false, description: `${name}: a partition function of your own (not registered)`, registered: false });
  }
  return choices;
}

/** Whether the memory-budget slider applies to partitioner `name`. */
export function takesBudget(choices: readonly Choice[], name: string): boolean {
  return choices.some((c) => c.name === name && c.takes_budget);
}
