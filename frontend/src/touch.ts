// Touch on a live desktop (phones and tablets): a pure gesture recogniser the screen view
// feeds with touch points, and the view zoom it drives. Two modes:
//
//   direct   — the finger is the pointer: tap = click, long-press = right click, one-finger
//              move = drag, two-finger pan = scroll, pinch = zoom the view (not the desktop);
//   trackpad — the screen is a trackpad: one finger moves a visible cursor (relative), tap =
//              click at the cursor, long-press then move = drag, two-finger tap = right click,
//              two-finger pan = scroll, pinch = zoom the view.
//
// The recogniser knows nothing about the DOM or the desktop: points are CSS pixels relative
// to the screen's stage, times are milliseconds; it returns what to do, and the view maps
// positions to desktop pixels and sends input. Everything here is unit tested.

/** The touch modes. */
export type TouchMode = 'direct' | 'trackpad';

/** Where the chosen mode is remembered. */
export const touchModeKey = 'cubicle.touchMode';

/** A touch point. */
export interface TouchPt {
  id: number;
  x: number;
  y: number;
}

/** What a gesture asks for. Positions are stage CSS pixels; trackpad actions use the cursor. */
export type GestureAction =
  | { kind: 'click'; x: number; y: number; at: 'point' | 'cursor' }
  | { kind: 'right_click'; x: number; y: number; at: 'point' | 'cursor' }
  | { kind: 'down'; x: number; y: number; at: 'point' | 'cursor' }
  | { kind: 'move'; x: number; y: number; at: 'point' | 'cursor' }
  | { kind: 'up'; x: number; y: number; at: 'point' | 'cursor' }
  | { kind: 'cursor'; dx: number; dy: number }
  | { kind: 'scroll'; x: number; y: number; dx: number; dy: number }
  | { kind: 'zoom'; factor: number; cx: number; cy: number; panX: number; panY: number };

/** Tuning (CSS pixels and milliseconds). */
export const gestureTuning = {
  /** Movement below this is still a tap or a press. */
  slop: 10,
  /** A press this long is a long-press. */
  longPressMs: 500,
  /** A two-finger tap is shorter than this. */
  twoTapMs: 350,
  /** Two-finger travel per scroll click. */
  scrollStep: 24,
  /** A distance change of this ratio makes a two-finger gesture a pinch. */
  pinchRatio: 0.12,
  /** Trackpad cursor speed (desktop-independent: CSS pixel of finger → CSS pixel of cursor). */
  trackpadSpeed: 1.6,
};

type State =
  | { s: 'idle' }
  | { s: 'one'; id: number; x0: number; y0: number; x: number; y: number; moved: boolean }
  | { s: 'drag'; id: number; x: number; y: number }
  | { s: 'pressed' } // a long-press fired; wait until every finger is up
  | { s: 'tpdrag'; id: number; x: number; y: number } // trackpad drag after a long-press
  | { s: 'two'; a: TouchPt; b: TouchPt; t0: number; d0: number; cx0: number; cy0: number; moved: boolean }
  | { s: 'scroll'; a: TouchPt; b: TouchPt; accX: number; accY: number }
  | { s: 'pinch'; a: TouchPt; b: TouchPt; d: number; cx: number; cy: number }
  | { s: 'done' }; // gesture over, fingers still down

const dist = (a: TouchPt, b: TouchPt) => Math.hypot(a.x - b.x, a.y - b.y);
const mid = (a: TouchPt, b: TouchPt) => ({ x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 });

/**
 * The gesture recogniser. Call start/move/end with the touches of each touch event (end with
 * the points still down after it), and longPress when a timer set at start (tuning.longPressMs)
 * fires; each returns the actions to perform, in order.
 */
export class Gestures {
  private st: State = { s: 'idle' };

  constructor(public mode: TouchMode) {}

  /** Whether a long-press timer should run now (a single finger is down and has not moved). */
  get pressing(): boolean {
    return this.st.s === 'one' && !this.st.moved;
  }

  /** Fingers touched down; all is every point down now. */
  start(all: TouchPt[], now: number): GestureAction[] {
    const st = this.st;
    if (all.length === 1 && st.s === 'idle') {
      const p = all[0];
      void now;
      this.st = { s: 'one', id: p.id, x0: p.x, y0: p.y, x: p.x, y: p.y, moved: false };
      return [];
    }
    if (all.length === 2 && (st.s === 'one' || st.s === 'idle')) {
      const [a, b] = all;
      const c = mid(a, b);
      this.st = { s: 'two', a, b, t0: now, d0: dist(a, b), cx0: c.x, cy0: c.y, moved: false };
      return [];
    }
    if (st.s === 'drag' || st.s === 'tpdrag') return []; // extra fingers during a drag are ignored
    if (all.length > 2 && st.s !== 'done') {
      const out = this.cancel();
      this.st = { s: 'done' };
      return out;
    }
    return [];
  }

  /** The long-press timer fired. */
  longPress(): GestureAction[] {
    const st = this.st;
    if (st.s !== 'one' || st.moved) return [];
    if (this.mode === 'direct') {
      this.st = { s: 'pressed' };
      return [{ kind: 'right_click', x: st.x0, y: st.y0, at: 'point' }];
    }
    // Trackpad: press and hold, then move, drags from the cursor.
    this.st = { s: 'tpdrag', id: st.id, x: st.x, y: st.y };
    return [{ kind: 'down', x: 0, y: 0, at: 'cursor' }];
  }

  /** Fingers moved; all is every point down now. */
  move(all: TouchPt[], now: number): GestureAction[] {
    void now;
    const st = this.st;
    switch (st.s) {
      case 'one': {
        const p = all.find((q) => q.id === st.id);
        if (!p) return [];
        if (this.mode === 'trackpad') {
          const dx = p.x - st.x;
          const dy = p.y - st.y;
          const far = st.moved || Math.hypot(p.x - st.x0, p.y - st.y0) > gestureTuning.slop;
          if (!far) return [];
          // Past the slop the finger moves the cursor; a later lift is not a tap.
          this.st = { ...st, x: p.x, y: p.y, moved: true };
          return [{ kind: 'cursor', dx: dx * gestureTuning.trackpadSpeed, dy: dy * gestureTuning.trackpadSpeed }];
        }
        if (Math.hypot(p.x - st.x0, p.y - st.y0) <= gestureTuning.slop) return [];
        this.st = { s: 'drag', id: st.id, x: p.x, y: p.y };
        return [
          { kind: 'down', x: st.x0, y: st.y0, at: 'point' },
          { kind: 'move', x: p.x, y: p.y, at: 'point' },
        ];
      }
      case 'drag': {
        const p = all.find((q) => q.id === st.id);
        if (!p || (p.x === st.x && p.y === st.y)) return [];
        this.st = { ...st, x: p.x, y: p.y };
        return [{ kind: 'move', x: p.x, y: p.y, at: 'point' }];
      }
      case 'tpdrag': {
        const p = all.find((q) => q.id === st.id);
        if (!p) return [];
        const dx = p.x - st.x;
        const dy = p.y - st.y;
        this.st = { ...st, x: p.x, y: p.y };
        return [
          { kind: 'cursor', dx: dx * gestureTuning.trackpadSpeed, dy: dy * gestureTuning.trackpadSpeed },
          { kind: 'move', x: 0, y: 0, at: 'cursor' },
        ];
      }
      case 'two': {
        const a = all.find((q) => q.id === st.a.id);
        const b = all.find((q) => q.id === st.b.id);
        if (!a || !b) return [];
        const d = dist(a, b);
        const c = mid(a, b);
        if (st.d0 > 0 && Math.abs(d / st.d0 - 1) > gestureTuning.pinchRatio) {
          this.st = { s: 'pinch', a, b, d, cx: c.x, cy: c.y };
          return [{ kind: 'zoom', factor: d / st.d0, cx: c.x, cy: c.y, panX: c.x - st.cx0, panY: c.y - st.cy0 }];
        }
        if (Math.hypot(c.x - st.cx0, c.y - st.cy0) > gestureTuning.slop) {
          this.st = { s: 'scroll', a, b, accX: 0, accY: 0 };
          return this.scroll(st.cx0, st.cy0, c.x, c.y, a, b);
        }
        return [];
      }
      case 'scroll': {
        const a = all.find((q) => q.id === st.a.id);
        const b = all.find((q) => q.id === st.b.id);
        if (!a || !b) return [];
        const p = mid(st.a, st.b);
        const c = mid(a, b);
        return this.scroll(p.x, p.y, c.x, c.y, a, b);
      }
      case 'pinch': {
        const a = all.find((q) => q.id === st.a.id);
        const b = all.find((q) => q.id === st.b.id);
        if (!a || !b) return [];
        const d = dist(a, b);
        const c = mid(a, b);
        const out: GestureAction = { kind: 'zoom', factor: st.d > 0 ? d / st.d : 1, cx: c.x, cy: c.y, panX: c.x - st.cx, panY: c.y - st.cy };
        this.st = { s: 'pinch', a, b, d, cx: c.x, cy: c.y };
        return [out];
      }
    }
    return [];
  }

  /**
   * Two-finger travel from (px,py) to (cx,cy) as scroll clicks: natural scrolling, as on a
   * phone — fingers moving up scroll the content down (positive deltaY).
   */
  private scroll(px: number, py: number, cx: number, cy: number, a: TouchPt, b: TouchPt): GestureAction[] {
    const st = this.st as Extract<State, { s: 'scroll' }>;
    let accX = st.accX + (px - cx);
    let accY = st.accY + (py - cy);
    const step = gestureTuning.scrollStep;
    const nx = Math.trunc(accX / step);
    const ny = Math.trunc(accY / step);
    accX -= nx * step;
    accY -= ny * step;
    this.st = { s: 'scroll', a, b, accX, accY };
    if (nx === 0 && ny === 0) return [];
    return [{ kind: 'scroll', x: cx, y: cy, dx: nx, dy: ny }];
  }

  /** Fingers lifted; left is every point still down after this event. */
  end(left: TouchPt[], now: number): GestureAction[] {
    const st = this.st;
    let out: GestureAction[] = [];
    switch (st.s) {
      case 'one':
        if (this.mode === 'trackpad') {
          if (!st.moved) out = [{ kind: 'click', x: 0, y: 0, at: 'cursor' }];
        } else {
          out = [{ kind: 'click', x: st.x0, y: st.y0, at: 'point' }];
        }
        break;
      case 'drag':
        out = [{ kind: 'up', x: st.x, y: st.y, at: 'point' }];
        break;
      case 'tpdrag':
        out = [{ kind: 'up', x: 0, y: 0, at: 'cursor' }];
        break;
      case 'two':
        if (now - st.t0 <= gestureTuning.twoTapMs) {
          const c = mid(st.a, st.b);
          out =
            this.mode === 'trackpad'
              ? [{ kind: 'right_click', x: 0, y: 0, at: 'cursor' }]
              : [{ kind: 'right_click', x: c.x, y: c.y, at: 'point' }];
        }
        break;
    }
    this.st = left.length === 0 ? { s: 'idle' } : { s: 'done' };
    return out;
  }

  /** The touch was cancelled (the browser took it): a drag in progress is released. */
  cancel(): GestureAction[] {
    const st = this.st;
    this.st = { s: 'idle' };
    if (st.s === 'drag') return [{ kind: 'up', x: st.x, y: st.y, at: 'point' }];
    if (st.s === 'tpdrag') return [{ kind: 'up', x: 0, y: 0, at: 'cursor' }];
    return [];
  }
}

/** The view's zoom: scale s around the stage's top-left, then offset (ox, oy), in CSS pixels. */
export interface ViewZoom {
  s: number;
  ox: number;
  oy: number;
}

/** Zoom limits. */
export const minZoom = 1;
export const maxZoom = 4;

/**
 * Applies a pinch step to the view: scale by factor around the pinch centre (cx, cy), then
 * pan by (panX, panY); clamped to 1..4 and to the stage (w×h) so the desktop never leaves it.
 */
export function applyZoom(z: ViewZoom, a: { factor: number; cx: number; cy: number; panX: number; panY: number }, w: number, h: number): ViewZoom {
  const s = Math.min(maxZoom, Math.max(minZoom, z.s * a.factor));
  const k = s / z.s;
  let ox = a.cx - (a.cx - z.ox) * k + a.panX;
  let oy = a.cy - (a.cy - z.oy) * k + a.panY;
  if (s === 1) return { s: 1, ox: 0, oy: 0 };
  // Keep the scaled stage covering the stage: ox in [w - w*s, 0].
  ox = Math.min(0, Math.max(w - w * s, ox));
  oy = Math.min(0, Math.max(h - h * s, oy));
  return { s, ox, oy };
}

/** The sticky modifiers of the key row, in the order the driver names them. */
export const modifierKeys = ['ctrl', 'alt', 'shift', 'super'] as const;
export type Modifier = (typeof modifierKeys)[number];

/** The key for a key-row key with the sticky modifiers held: "ctrl+alt+Left". */
export function chord(mods: ReadonlySet<Modifier>, key: string): string {
  return [...modifierKeys.filter((m) => mods.has(m)), key].join('+');
}

/**
 * What the soft keyboard's text becomes: with sticky modifiers, each character is a chord
 * ("ctrl+c"); without, the text is typed as it is (any language).
 */
export function softKeys(mods: ReadonlySet<Modifier>, text: string): { keys: string } | { text: string } | null {
  if (text === '') return null;
  if (mods.size === 0) return { text };
  const names = [...text].map((ch) => {
    if (ch === ' ') return chord(mods, 'space');
    if (ch === '+') return chord(mods, 'plus');
    if (ch === '-') return chord(mods, 'minus');
    return chord(mods, mods.has('shift') ? ch : ch.toLowerCase());
  });
  return { keys: names.join(' ') };
}
