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
  private pending = new Map<number, { resolve: (svg: string) => void; reject: (e: Error) => void; dot: string; owner: Owner }>();
  private cache = new Map<string, string>();

  constructor(private post: (request: { id: number; dot: string }) => void, private cacheSize = 16) {}

  /** Lay out `dot`; rejects with StaleLayout if `owner` made another request meanwhile. */
  request(dot: string, owner: Owner = this): Promise<string> {
    const id = this.next++;
    this.latest.set(owner, id);
    const cached = this.cache.get(dot);
    if (cached !== undefined) return Promise.resolve(cached);
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, dot, owner });
      this.post({ id, dot });
    });
  }

  receive(reply: LayoutReply): void {
    const waiting = this.pending.get(reply.id);
    if (!waiting) return;
    this.pending.delete(reply.id);
    if (reply.error !== undefined || reply.svg === undefined) {
      waiting.reject(new Error(reply.error ?? "layout failed"));
      return;
    }
    this.remember(waiting.dot, reply.svg);
    if (reply.id !== this.latest.get(waiting.owner)) waiting.reject(new StaleLayout());
    else waiting.resolve(reply.svg);
  }

  private remember(dot: string, svg: string): void {
    this.cache.set(dot, svg);
    while (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
  }
}
