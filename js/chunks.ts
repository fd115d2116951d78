/** Long lists (a 48-layer model's 3,700 code lines, its 1,160 saved values) built a slice per task and
 *  laid out only near the screen, so that no task holds the page for long when a payload lands or a tab
 *  opens (issue 22: 4.9 s to open the code tab, 1.8 s the saved tab, before this). */

/** `items` cut into slices of `size`: a slice is what one task builds, and what the browser lays out at
 *  once when it comes near the screen. */
export function chunked<T>(items: readonly T[], size: number): T[][] {
  const slices: T[][] = [];
  for (let start = 0; start < items.length; start += size) slices.push(items.slice(start, start + size));
  return slices;
}

/** Run `steps` in order, each in a task of its own, the first too, so that none adds to the caller's task
 *  (or all now when `now`), and `done` after the last; stop as soon as `current()` says a newer run replaced
 *  this one. */
export function inTurn(steps: readonly (() => void)[], current: () => boolean, done: () => void = () => {}, now = false): void {
  let index = 0;
  const next = (): void => {
    if (!current()) return;
    if (index >= steps.length) {
      done();
      return;
    }
    steps[index++]();
    if (now) next();
    else setTimeout(next, 0);
  };
  if (now) next();
  else setTimeout(next, 0);
}

/** What `refill` fills: an element, or anything that takes children the same way. */
export interface Container<Child> {
  replaceChildren(...children: Child[]): void;
  appendChild(child: Child): unknown;
}

/** Replace `container`'s children with a block per slice, `build` making each, one per task (or all now when
 *  `now`, as `inTurn`), then `done`: the old blocks stay until the first new one replaces them, so no frame
 *  shows the list empty between a payload and its first block. */
export function refill<T, Child>(
  container: Container<Child>,
  slices: readonly T[],
  build: (slice: T) => Child,
  current: () => boolean,
  done: () => void,
  now: boolean,
): void {
  if (!slices.length) container.replaceChildren();
  const steps = slices.map((slice, index) => () => {
    if (index === 0) container.replaceChildren(build(slice));
    else container.appendChild(build(slice));
  });
  inTurn(steps, current, done, now);
}

/** A block the browser lays out and paints only near the screen (CSS content-visibility), taking
 *  `height` px until it has been laid out once; `wide`: as wide as its widest child (the block clips what
 *  overflows it), else as wide as its container. */
export function lazyBlock(className: string, height: number, wide = false): HTMLDivElement {
  const block = document.createElement("div");
  block.className = className;
  Object.assign(block.style, { contentVisibility: "auto", containIntrinsicSize: `auto ${Math.round(height)}px`, minWidth: "100%" });
  if (wide) block.style.width = "max-content";
  return block;
}
