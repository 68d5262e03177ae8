// Touch input on a live screen (phones and tablets): the gesture layer of the screen's stage
// (direct or trackpad mode, src/touch.ts), the view zoom it drives, the trackpad's visible
// cursor, and the on-screen key row with sticky modifiers and the soft keyboard.

import type { RefObject } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { useDomEvent } from '../hooks';
import type { InputAction } from '../screen';
import { fitRect, toScreen } from '../screen';
import {
  applyZoom,
  chord,
  Gestures,
  gestureTuning,
  modifierKeys,
  softKeys,
  touchModeKey,
  type GestureAction,
  type Modifier,
  type TouchMode,
  type TouchPt,
  type ViewZoom,
} from '../touch';

/** Whether this device has a touch screen. */
export function touchDevice(): boolean {
  return typeof navigator !== 'undefined' && (navigator.maxTouchPoints ?? 0) > 0;
}

function savedMode(): TouchMode {
  try {
    return window.localStorage.getItem(touchModeKey) === 'trackpad' ? 'trackpad' : 'direct';
  } catch {
    return 'direct';
  }
}

interface TouchOptions {
  stage: RefObject<HTMLDivElement>;
  canvas: RefObject<HTMLCanvasElement>;
  /** The desktop's size in pixels (null before the first frame). */
  size: { width: number; height: number } | null;
  /** Whether this person holds control (input is sent only then). */
  mine: boolean;
  /** Sends one input; false when not sent. */
  send: (a: InputAction) => boolean;
  /** A tap without control (the panel opens the desktop). */
  onViewTap?: () => void;
}

/** The gesture layer: handlers for the stage, the zoom style, the trackpad cursor. */
export function useTouch(o: TouchOptions) {
  const [mode, setModeState] = useState<TouchMode>(savedMode);
  const [zoom, setZoom] = useState<ViewZoom>({ s: 1, ox: 0, oy: 0 });
  const [cursor, setCursor] = useState<{ x: number; y: number } | null>(null);
  const g = useRef(new Gestures(mode));
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const cur = useRef<{ x: number; y: number } | null>(null);
  const lastMove = useRef(0);
  const opts = useRef(o);
  opts.current = o;

  const setMode = (m: TouchMode) => {
    setModeState(m);
    g.current = new Gestures(m);
    try {
      window.localStorage.setItem(touchModeKey, m);
    } catch {
      // not remembered; fine
    }
  };
  useEffect(() => {
    if (mode === 'trackpad' && o.size && !cur.current) {
      cur.current = { x: o.size.width >> 1, y: o.size.height >> 1 };
      setCursor({ ...cur.current });
    }
    if (mode === 'direct') {
      cur.current = null;
      setCursor(null);
    }
  }, [mode, o.size?.width, o.size?.height]);
  useEffect(() => () => {
    if (timer.current) clearTimeout(timer.current);
  }, []);

  const stageRect = () => o.stage.current?.getBoundingClientRect() ?? null;
  const points = (list: TouchList): TouchPt[] => {
    const r = stageRect();
    const out: TouchPt[] = [];
    for (let i = 0; i < list.length; i++) {
      const t = list[i];
      out.push({ id: t.identifier, x: t.clientX - (r?.left ?? 0), y: t.clientY - (r?.top ?? 0) });
    }
    return out;
  };
  // A stage point to desktop pixels, through the (zoomed) canvas.
  const toDesk = (x: number, y: number) => {
    const c = opts.current.canvas.current;
    const r = stageRect();
    const size = opts.current.size;
    if (!c || !r || !size) return null;
    const cr = c.getBoundingClientRect();
    return toScreen(r.left + x - cr.left, r.top + y - cr.top, { width: cr.width, height: cr.height }, size);
  };
  const scale = () => {
    const c = opts.current.canvas.current;
    const size = opts.current.size;
    if (!c || !size) return 1;
    const cr = c.getBoundingClientRect();
    return fitRect(size.width, size.height, cr.width, cr.height).scale || 1;
  };

  const perform = (acts: GestureAction[]) => {
    const { mine, send, size } = opts.current;
    for (const a of acts) {
      if (a.kind === 'zoom') {
        const r = stageRect();
        if (r) setZoom((z) => applyZoom(z, a, r.width, r.height));
        continue;
      }
      if (a.kind === 'cursor') {
        if (!size) continue;
        const k = scale();
        const c = cur.current ?? { x: size.width >> 1, y: size.height >> 1 };
        c.x = Math.min(size.width - 1, Math.max(0, Math.round(c.x + a.dx / k)));
        c.y = Math.min(size.height - 1, Math.max(0, Math.round(c.y + a.dy / k)));
        cur.current = c;
        setCursor({ ...c });
        const now = performance.now();
        if (mine && now - lastMove.current >= 30) {
          lastMove.current = now;
          send({ action: 'move', x: c.x, y: c.y });
        }
        continue;
      }
      if (!mine) {
        if (a.kind === 'click') opts.current.onViewTap?.();
        continue;
      }
      let p: { x: number; y: number } | null;
      if (a.kind === 'scroll') {
        p = cur.current ?? toDesk(a.x, a.y);
        if (p) send({ action: 'scroll', x: p.x, y: p.y, deltaX: a.dx, deltaY: a.dy });
        continue;
      }
      p = a.at === 'cursor' ? cur.current : toDesk(a.x, a.y);
      if (!p) continue;
      switch (a.kind) {
        case 'click':
          send({ action: 'click', x: p.x, y: p.y });
          break;
        case 'right_click':
          send({ action: 'right_click', x: p.x, y: p.y });
          break;
        case 'down':
          send({ action: 'mouse_down', x: p.x, y: p.y, button: 1 });
          break;
        case 'move': {
          const now = performance.now();
          if (now - lastMove.current < 30) break; // moves are throttled; up carries the end
          lastMove.current = now;
          send({ action: 'move', x: p.x, y: p.y });
          break;
        }
        case 'up':
          send({ action: 'mouse_up', x: p.x, y: p.y, button: 1 });
          break;
      }
    }
  };

  const arm = () => {
    if (timer.current) clearTimeout(timer.current);
    timer.current = null;
    if (!g.current.pressing) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      perform(g.current.longPress());
    }, gestureTuning.longPressMs);
  };

  const handlers = {
    onTouchStart: (e: TouchEvent) => {
      e.preventDefault();
      perform(g.current.start(points(e.touches), e.timeStamp));
      arm();
    },
    onTouchMove: (e: TouchEvent) => {
      e.preventDefault();
      perform(g.current.move(points(e.touches), e.timeStamp));
      if (!g.current.pressing && timer.current) {
        clearTimeout(timer.current);
        timer.current = null;
      }
    },
    onTouchEnd: (e: TouchEvent) => {
      e.preventDefault();
      if (timer.current) clearTimeout(timer.current);
      timer.current = null;
      perform(g.current.end(points(e.touches), e.timeStamp));
    },
    onTouchCancel: () => {
      if (timer.current) clearTimeout(timer.current);
      timer.current = null;
      perform(g.current.cancel());
    },
  };

  // The cursor in stage CSS pixels (for drawing it).
  let cursorAt: { left: number; top: number } | null = null;
  if (cursor && o.size && o.canvas.current && o.stage.current) {
    const cr = o.canvas.current.getBoundingClientRect();
    const sr = o.stage.current.getBoundingClientRect();
    const f = fitRect(o.size.width, o.size.height, cr.width, cr.height);
    cursorAt = { left: cr.left - sr.left + f.x + cursor.x * f.scale, top: cr.top - sr.top + f.y + cursor.y * f.scale };
  }
  const zoomStyle =
    zoom.s === 1 ? undefined : { transform: `translate(${zoom.ox}px, ${zoom.oy}px) scale(${zoom.s})`, transformOrigin: '0 0' };
  return { mode, setMode, handlers, zoomStyle, zoomed: zoom.s > 1, resetZoom: () => setZoom({ s: 1, ox: 0, oy: 0 }), cursorAt };
}

interface KeyRowProps {
  send: (a: InputAction) => boolean;
  mode: TouchMode;
  onMode: (m: TouchMode) => void;
  zoomed: boolean;
  onResetZoom: () => void;
}

const rowKeys: ReadonlyArray<{ key: string; label: string; aria: string }> = [
  { key: 'Escape', label: 'Esc', aria: 'Escape' },
  { key: 'Tab', label: 'Tab', aria: 'Tab' },
  { key: 'Return', label: '⏎', aria: 'Enter' },
  { key: 'BackSpace', label: '⌫', aria: 'Backspace' },
  { key: 'Left', label: '←', aria: 'Left arrow' },
  { key: 'Up', label: '↑', aria: 'Up arrow' },
  { key: 'Down', label: '↓', aria: 'Down arrow' },
  { key: 'Right', label: '→', aria: 'Right arrow' },
];

const modLabel: Record<Modifier, string> = { ctrl: 'Ctrl', alt: 'Alt', shift: 'Shift', super: 'Super' };

/**
 * The on-screen key row: sticky modifiers (pressed once, they apply to the next key — of the
 * row or the soft keyboard — then release), Esc, Tab, Enter, Backspace and the arrows, the soft
 * keyboard, and the touch mode switch (one tap, remembered).
 */
export function KeyRow({ send, mode, onMode, zoomed, onResetZoom }: KeyRowProps) {
  // The held modifiers: the ref is the truth (input events can come faster than renders),
  // the state only redraws the buttons.
  const modsRef = useRef<Set<Modifier>>(new Set());
  const [mods, setModsState] = useState<Set<Modifier>>(modsRef.current);
  const setMods = (m: Set<Modifier>) => {
    modsRef.current = m;
    setModsState(m);
  };
  const soft = useRef<HTMLInputElement>(null);

  const press = (key: string) => {
    send({ action: 'key', keys: chord(modsRef.current, key) });
    setMods(new Set());
  };
  const toggle = (m: Modifier) => {
    const next = new Set(modsRef.current);
    if (next.has(m)) next.delete(m);
    else next.add(m);
    setMods(next);
  };
  // The soft keyboard: a focused text field whose input goes to the desktop as it is typed.
  const onInput = (e: Event) => {
    const el = e.currentTarget as HTMLInputElement;
    const ie = e as InputEvent;
    if (ie.isComposing) return; // an input method is composing: sent at compositionend
    if (ie.inputType === 'deleteContentBackward') {
      press('BackSpace');
    } else if (ie.inputType === 'insertLineBreak') {
      press('Return');
    } else {
      const out = softKeys(modsRef.current, el.value);
      if (out) {
        send({ action: 'keys' in out ? 'key' : 'type', ...out });
        if ('keys' in out) setMods(new Set());
      }
    }
    el.value = '';
  };
  useDomEvent(soft, 'compositionend', () => {
    const el = soft.current;
    if (!el) return;
    if (el.value !== '') send({ action: 'type', text: el.value });
    el.value = '';
  });
  const onKeyDown = (e: KeyboardEvent) => {
    // Keys that make no input event on the soft keyboard.
    const named: Record<string, string> = { Enter: 'Return', Backspace: 'BackSpace', Tab: 'Tab', Escape: 'Escape' };
    const k = named[e.key];
    if (!k) return;
    e.preventDefault();
    press(k);
  };

  return (
    <div class="key-row" role="toolbar" aria-label="Keys">
      {modifierKeys.map((m) => (
        <button
          key={m}
          type="button"
          class={`key sticky${mods.has(m) ? ' on' : ''}`}
          aria-pressed={mods.has(m)}
          data-key={m}
          onClick={() => toggle(m)}
        >
          {modLabel[m]}
        </button>
      ))}
      {rowKeys.map((k) => (
        <button key={k.key} type="button" class="key" data-key={k.key} aria-label={k.aria} onClick={() => press(k.key)}>
          {k.label}
        </button>
      ))}
      <button
        type="button"
        class="key wide"
        data-key="keyboard"
        aria-label="Keyboard"
        onClick={() => {
          soft.current?.focus();
        }}
      >
        ⌨
      </button>
      <input
        ref={soft}
        class="soft-keyboard"
        type="text"
        inputMode="text"
        autoComplete="off"
        autoCapitalize="off"
        spellcheck={false}
        aria-label="Type on the desktop"
        onInput={onInput}
        onKeyDown={onKeyDown}
      />
      <button
        type="button"
        class="key wide mode"
        data-key="mode"
        aria-label={`Touch mode: ${mode}; tap for ${mode === 'direct' ? 'trackpad' : 'direct'}`}
        onClick={() => onMode(mode === 'direct' ? 'trackpad' : 'direct')}
      >
        {mode === 'direct' ? 'Direct' : 'Trackpad'}
      </button>
      {zoomed && (
        <button type="button" class="key wide" data-key="unzoom" onClick={onResetZoom}>
          1:1
        </button>
      )}
    </div>
  );
}
