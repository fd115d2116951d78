/** Layout requests to the Graphviz worker: ids, a small cache, and "latest request wins". */


export interface LayoutReply {
  id: number;
  svg?: string;
  error?: string;
}

export class StaleLayout extends Error {
  constructor() {
    super("a newer layout was requested");
  }
}

/** Whose requests a reply can make stale: each graph pane asks for itself, so that widgets sharing the
 *  page's one worker (all refitting at once when the window narrows) do not cancel each other. */
export type Owner = object;

export class LayoutClient {
  private next = 1;
  private latest = new WeakMap<Owner, number>();
  private pending = new Map<number, { resolve: (svg: string) => void; reject: (e: Error) => void; dot: string }>();
  /** DOT -> its layout in the worker now: a second request for it waits for that one (a payload drawn
   *  ahead and the kernel's own for the same partition lay out the same graph). */
  private inFlight = new Map<string, Promise<string>>();
  private cache = new Map<string, string>();

  constructor(private post: (request: { id: number; dot: string }) => void, private cacheSize = 16) {}

  /** Lay out `dot`; rejects with StaleLayout if `owner` made another request meanwhile. */
  request(dot: string, owner: Owner = this): Promise<string> {
    const id = this.next++;
    this.latest.set(owner, id);
    const cached = this.cache.get(dot);
    if (cached !== undefined) return Promise.resolve(cached);
    let laidOut = this.inFlight.get(dot);
    if (laidOut === undefined) {
      laidOut = new Promise<string>((resolve, reject) => {
        this.pending.set(id, { resolve, reject, dot });
        this.post({ id, dot });
      });
      this.inFlight.set(dot, laidOut);
    }
    return laidOut.then((svg) => {
      if (id !== this.latest.get(owner)) throw new StaleLayout();
      return svg;
    });
  }

  receive(reply: LayoutReply): void {
    const waiting = this.pending.get(reply.id);
    if (!waiting) return;
    this.pending.delete(reply.id);
    this.inFlight.delete(waiting.dot);
    if (reply.error !== undefined || reply.svg === undefined) {
      waiting.reject(new Error(reply.error ?? "layout failed"));
      return;
    }
    this.remember(waiting.dot, reply.svg);
    waiting.resolve(reply.svg);
  }

  private remember(dot: string, svg: string): void {
    this.cache.set(dot, svg);
    while (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
  }
}
