/** Payloads the kernel made ahead (the swept budgets' after a sweep, a slider move's two neighbours), kept
 *  in the browser so that a slider move to one of them repaints without a kernel round trip; the kernel's
 *  own payload, with its diff, follows and replaces it. The kernel sends them as custom messages
 *  (bwd_widgets/jupyter/ahead.py `MadeAhead.send_ahead`): `{ahead: {partitioner, memory_budget, graph_index}}`
 *  with the payload (the `data` trait's wire form) in one buffer, and `{forget_ahead: true}` when they no
 *  longer hold (another model shown, a measurement taken). */

/** Which partition a payload is: the fields of the payload itself the kernel sends beside it. */
export interface AheadKey {
  partitioner: string;
  memory_budget: number | null;
  graph_index: number;
}

export interface AheadMessage {
  ahead?: AheadKey;
  forget_ahead?: boolean;
}

/** One string per partition; budgets to 4 places, as the kernel rounds the slider's neighbours. */
export function aheadKey({ partitioner, memory_budget, graph_index }: AheadKey): string {
  return `${partitioner}|${memory_budget == null ? "" : memory_budget.toFixed(4)}|${graph_index}`;
}

/** The payloads kept for one widget model. */
export class PayloadsAhead {
  private readonly kept = new Map<string, DataView | ArrayBuffer>();

  /** Take a custom message from the kernel; false when it is not about payloads made ahead. */
  receive(message: unknown, buffers: readonly (DataView | ArrayBuffer)[]): boolean {
    if (typeof message !== "object" || message === null) return false;
    const { ahead, forget_ahead } = message as AheadMessage;
    if (forget_ahead === true) {
      this.kept.clear();
      return true;
    }
    if (ahead === undefined || buffers.length !== 1) return false;
    this.kept.set(aheadKey(ahead), buffers[0]);
    return true;
  }

  /** The payload made ahead for `key`'s partition, if the kernel sent one. */
  find(key: AheadKey): DataView | ArrayBuffer | undefined {
    return this.kept.get(aheadKey(key));
  }

  get size(): number {
    return this.kept.size;
  }
}
