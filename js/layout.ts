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

export class LayoutClient {
  private next = 1;
  private latest = 0;
  private pending = new Map<number, { resolve: (svg: string) => void; reject: (e: Error) => void; dot: string }>();
  private cache = new Map<string, string>();

  constructor(private post: (request: { id: number; dot: string }) => void, private cacheSize = 16) {}

  /** Lay out `dot`; rejects with StaleLayout if another request was made meanwhile. */
  request(dot: string): Promise<string> {
    const id = this.next++;
    this.latest = id;
    const cached = this.cache.get(dot);
    if (cached !== undefined) return Promise.resolve(cached);
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, dot });
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
    if (reply.id !== this.latest) waiting.reject(new StaleLayout());
    else waiting.resolve(reply.svg);
  }

  private remember(dot: string, svg: string): void {
    this.cache.set(dot, svg);
    while (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
  }
}
