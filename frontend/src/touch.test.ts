import { describe, expect, test } from 'vitest';
import { applyZoom, chord, gestureTuning, Gestures, softKeys, type GestureAction, type Modifier, type TouchPt } from './touch';

const p = (id: number, x: number, y: number): TouchPt => ({ id, x, y });

/** Runs a scripted touch sequence and returns every action. */
function run(g: Gestures, steps: Array<['start' | 'move' | 'end', TouchPt[], number] | ['long']>): GestureAction[] {
  const out: GestureAction[] = [];
  for (const s of steps) {
    if (s[0] === 'long') out.push(...g.longPress());
    else if (s[0] === 'start') out.push(...g.start(s[1], s[2]));
    else if (s[0] === 'move') out.push(...g.move(s[1], s[2]));
    else out.push(...g.end(s[1], s[2]));
  }
  return out;
}

describe('direct mode', () => {
  test('tap is a click where the finger was', () => {
    const g = new Gestures('direct');
    expect(run(g, [['start', [p(1, 100, 50)], 0], ['move', [p(1, 104, 53)], 40], ['end', [], 90]])).toEqual([
      { kind: 'click', x: 100, y: 50, at: 'point' },
    ]);
  });

  test('long-press is a right click, and the lift does nothing more', () => {
    const g = new Gestures('direct');
    run(g, [['start', [p(1, 200, 120)], 0]]);
    expect(g.pressing).toBe(true);
    expect(run(g, [['long'], ['move', [p(1, 260, 180)], 700], ['end', [], 800]])).toEqual([
      { kind: 'right_click', x: 200, y: 120, at: 'point' },
    ]);
  });

  test('a move past the slop is a drag: down where it began, moves, up where it ended', () => {
    const g = new Gestures('direct');
    const got = run(g, [
      ['start', [p(1, 10, 10)], 0],
      ['move', [p(1, 30, 10)], 50],
      ['long'], // too late: a drag is no long-press
      ['move', [p(1, 60, 40)], 100],
      ['move', [p(1, 60, 40)], 120], // no change, no move
      ['end', [], 150],
    ]);
    expect(got).toEqual([
      { kind: 'down', x: 10, y: 10, at: 'point' },
      { kind: 'move', x: 30, y: 10, at: 'point' },
      { kind: 'move', x: 60, y: 40, at: 'point' },
      { kind: 'up', x: 60, y: 40, at: 'point' },
    ]);
  });

  test('two-finger pan scrolls, natural direction, one click per step', () => {
    const g = new Gestures('direct');
    const step = gestureTuning.scrollStep;
    const got = run(g, [
      ['start', [p(1, 100, 300)], 0],
      ['start', [p(1, 100, 300), p(2, 160, 300)], 10],
      // Both fingers up by 3.5 steps: content scrolls down 3 clicks (the rest is kept).
      ['move', [p(1, 100, 300 - 3.5 * step), p(2, 160, 300 - 3.5 * step)], 100],
      ['move', [p(1, 100, 300 - 4 * step), p(2, 160, 300 - 4 * step)], 120],
      ['end', [p(2, 160, 300 - 4 * step)], 200],
      ['end', [], 210],
    ]);
    const scrolls = got.filter((a) => a.kind === 'scroll');
    expect(scrolls.map((a) => (a.kind === 'scroll' ? a.dy : 0)).reduce((x, y) => x + y, 0)).toBe(4);
    expect(got.every((a) => a.kind === 'scroll')).toBe(true);
    // Fingers moving down scroll up.
    const h = new Gestures('direct');
    const up = run(h, [
      ['start', [p(1, 0, 0), p(2, 50, 0)], 0],
      ['move', [p(1, 0, 2 * step + 1), p(2, 50, 2 * step + 1)], 50],
      ['end', [], 60],
    ]);
    expect(up).toEqual([{ kind: 'scroll', x: 25, y: 2 * step + 1, dx: 0, dy: -2 }]);
  });

  test('pinch zooms the view, not the desktop', () => {
    const g = new Gestures('direct');
    const got = run(g, [
      ['start', [p(1, 100, 100), p(2, 200, 100)], 0],
      ['move', [p(1, 50, 100), p(2, 250, 100)], 80],
      ['end', [], 100],
    ]);
    expect(got).toEqual([{ kind: 'zoom', factor: 2, cx: 150, cy: 100, panX: 0, panY: 0 }]);
  });

  test('two-finger tap is a right click at their middle; a slow one is nothing', () => {
    const g = new Gestures('direct');
    expect(run(g, [['start', [p(1, 10, 10), p(2, 30, 50)], 0], ['end', [], 100]])).toEqual([
      { kind: 'right_click', x: 20, y: 30, at: 'point' },
    ]);
    expect(run(g, [['start', [p(1, 10, 10), p(2, 30, 50)], 0], ['end', [], gestureTuning.twoTapMs + 1]])).toEqual([]);
  });

  test('a cancelled drag is released', () => {
    const g = new Gestures('direct');
    run(g, [['start', [p(1, 0, 0)], 0], ['move', [p(1, 40, 0)], 10]]);
    expect(g.cancel()).toEqual([{ kind: 'up', x: 40, y: 0, at: 'point' }]);
  });

  test('three fingers end the gesture without clicking', () => {
    const g = new Gestures('direct');
    const got = run(g, [
      ['start', [p(1, 0, 0), p(2, 10, 0)], 0],
      ['start', [p(1, 0, 0), p(2, 10, 0), p(3, 20, 0)], 10],
      ['end', [p(1, 0, 0)], 50],
      ['end', [], 60],
    ]);
    expect(got).toEqual([]);
  });
});

describe('trackpad mode', () => {
  test('a finger moves the cursor relatively; a tap clicks at the cursor', () => {
    const g = new Gestures('trackpad');
    const got = run(g, [
      ['start', [p(1, 100, 100)], 0],
      ['move', [p(1, 120, 100)], 30],
      ['move', [p(1, 130, 110)], 60],
      ['end', [], 90],
    ]);
    const s = gestureTuning.trackpadSpeed;
    expect(got).toEqual([
      { kind: 'cursor', dx: 20 * s, dy: 0 },
      { kind: 'cursor', dx: 10 * s, dy: 10 * s },
    ]);
    expect(run(g, [['start', [p(1, 5, 5)], 0], ['end', [], 50]])).toEqual([{ kind: 'click', x: 0, y: 0, at: 'cursor' }]);
  });

  test('two-finger tap is a right click at the cursor', () => {
    const g = new Gestures('trackpad');
    expect(run(g, [['start', [p(1, 10, 10)], 0], ['start', [p(1, 10, 10), p(2, 60, 10)], 20], ['end', [], 120]])).toEqual([
      { kind: 'right_click', x: 0, y: 0, at: 'cursor' },
    ]);
  });

  test('press and hold, then move, drags from the cursor', () => {
    const g = new Gestures('trackpad');
    const got = run(g, [['start', [p(1, 50, 50)], 0], ['long'], ['move', [p(1, 60, 50)], 600], ['end', [], 700]]);
    const s = gestureTuning.trackpadSpeed;
    expect(got).toEqual([
      { kind: 'down', x: 0, y: 0, at: 'cursor' },
      { kind: 'cursor', dx: 10 * s, dy: 0 },
      { kind: 'move', x: 0, y: 0, at: 'cursor' },
      { kind: 'up', x: 0, y: 0, at: 'cursor' },
    ]);
  });

  test('a moving finger is never a long-press', () => {
    const g = new Gestures('trackpad');
    run(g, [['start', [p(1, 0, 0)], 0], ['move', [p(1, 30, 0)], 100]]);
    expect(g.pressing).toBe(false);
    expect(g.longPress()).toEqual([]);
  });
});

describe('view zoom', () => {
  test('zooms around the pinch centre and is clamped to 1..4 and the stage', () => {
    let z = { s: 1, ox: 0, oy: 0 };
    z = applyZoom(z, { factor: 2, cx: 100, cy: 50, panX: 0, panY: 0 }, 400, 300);
    expect(z).toEqual({ s: 2, ox: -100, oy: -50 });
    z = applyZoom(z, { factor: 10, cx: 0, cy: 0, panX: 0, panY: 0 }, 400, 300);
    expect(z.s).toBe(4);
    // Panning beyond the stage's edge is stopped at the edge.
    z = applyZoom(z, { factor: 1, cx: 0, cy: 0, panX: 10_000, panY: -10_000 }, 400, 300);
    expect(z).toEqual({ s: 4, ox: 0, oy: 300 - 300 * 4 });
    expect(applyZoom(z, { factor: 0.01, cx: 0, cy: 0, panX: 0, panY: 0 }, 400, 300)).toEqual({ s: 1, ox: 0, oy: 0 });
  });
});

describe('key row', () => {
  const mods = (...m: Modifier[]) => new Set<Modifier>(m);
  test('chords in the driver order whatever order they were pressed', () => {
    expect(chord(mods('super', 'ctrl'), 'Left')).toBe('ctrl+super+Left');
    expect(chord(mods(), 'Escape')).toBe('Escape');
    expect(chord(mods('alt', 'shift', 'ctrl'), 'Tab')).toBe('ctrl+alt+shift+Tab');
  });
  test('soft keyboard text is typed as it is, or chords with sticky modifiers', () => {
    expect(softKeys(mods(), 'héllo 你好')).toEqual({ text: 'héllo 你好' });
    expect(softKeys(mods('ctrl'), 'C')).toEqual({ keys: 'ctrl+c' });
    expect(softKeys(mods('ctrl', 'shift'), 'T')).toEqual({ keys: 'ctrl+shift+T' });
    expect(softKeys(mods('alt'), '+ ')).toEqual({ keys: 'alt+plus alt+space' });
    expect(softKeys(mods('ctrl'), '')).toBeNull();
  });
});
