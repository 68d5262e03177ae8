import { describe, expect, it } from 'vitest';
import { buildFrame, buttonFor, channelUrl, idleSeconds, fitRect, fitSize, keyFor, parseFrame, refusalText, toScreen, wheelClicks } from './screen';

describe('parseFrame', () => {
  it('reads the header and the image', () => {
    const img = new Uint8Array([0xff, 0xd8, 0xff, 0xe0]);
    const f = parseFrame(buildFrame(2 ** 40 + 7, 1280, 800, img));
    expect(f.id).toBe(2 ** 40 + 7);
    expect([f.width, f.height, f.mediaType]).toEqual([1280, 800, 'image/jpeg']);
    expect(Array.from(f.image)).toEqual([0xff, 0xd8, 0xff, 0xe0]);
    expect(parseFrame(buildFrame(1, 2, 3, new Uint8Array(1), 2)).mediaType).toBe('image/png');
  });

  it.each([
    ['too short', new ArrayBuffer(10), /too short/],
    ['bad magic', (() => { const b = buildFrame(1, 1, 1, new Uint8Array(1)); new Uint8Array(b)[0] = 0x41; return b; })(), /magic/],
    ['bad version', (() => { const b = buildFrame(1, 1, 1, new Uint8Array(1)); new Uint8Array(b)[4] = 9; return b; })(), /version/],
    ['bad encoding', buildFrame(1, 1, 1, new Uint8Array(1), 7), /encoding/],
  ])('rejects %s', (_n, buf, re) => {
    expect(() => parseFrame(buf)).toThrow(re);
  });
});

describe('canvas to screen coordinates', () => {
  it('letterboxes a wide screen in a tall box', () => {
    const f = fitRect(1280, 800, 640, 800);
    expect(f).toEqual({ x: 0, y: 200, width: 640, height: 400, scale: 0.5 });
  });

  it.each([
    ['top-left corner', 0, 200, { x: 0, y: 0 }],
    ['centre', 320, 400, { x: 640, y: 400 }],
    ['bottom-right edge clamps', 640, 600, { x: 1279, y: 799 }],
    ['on the bar above', 100, 100, null],
    ['on the bar below', 100, 700, null],
  ])('%s', (_n, px, py, want) => {
    expect(toScreen(px, py, { width: 640, height: 800 }, { width: 1280, height: 800 })).toEqual(want);
  });

  it('pillarboxes and scales up', () => {
    expect(toScreen(150 + 10, 50, { width: 500, height: 100 }, { width: 100, height: 50 })).toEqual({ x: 5, y: 25 });
    expect(toScreen(1, 1, { width: 0, height: 0 }, { width: 100, height: 50 })).toBeNull();
  });
});

describe('keyFor', () => {
  const k = (key: string, mods: Partial<{ ctrlKey: boolean; altKey: boolean; shiftKey: boolean; metaKey: boolean }> = {}, code?: string) =>
    keyFor({ key, code, ctrlKey: false, altKey: false, shiftKey: false, metaKey: false, ...mods });
  it.each([
    ['a letter is typed', k('a'), { text: 'a' }],
    ['capital letter typed as is', k('A', { shiftKey: true }), { text: 'A' }],
    ['non-ASCII typed', k('中'), { text: '中' }],
    ['Enter', k('Enter'), { keys: 'Return' }],
    ['Backspace', k('Backspace'), { keys: 'BackSpace' }],
    ['arrow', k('ArrowLeft'), { keys: 'Left' }],
    ['shift+Tab', k('Tab', { shiftKey: true }), { keys: 'shift+Tab' }],
    ['ctrl+alt+t', k('t', { ctrlKey: true, altKey: true }, 'KeyT'), { keys: 'ctrl+alt+t' }],
    ['ctrl+L via code', k('l', { ctrlKey: true }, 'KeyL'), { keys: 'ctrl+l' }],
    ['ctrl+shift+c', k('C', { ctrlKey: true, shiftKey: true }, 'KeyC'), { keys: 'ctrl+shift+c' }],
    ['super+e', k('e', { metaKey: true }, 'KeyE'), { keys: 'super+e' }],
    ['F5', k('F5'), { keys: 'F5' }],
    ['space', k(' '), { keys: 'space' }],
    ['ctrl+minus', k('-', { ctrlKey: true }, 'Minus'), { keys: 'ctrl+minus' }],
    ['modifier alone', k('Control', { ctrlKey: true }), null],
    ['IME composition', keyFor({ key: 'Process', ctrlKey: false, altKey: false, shiftKey: false, metaKey: false }), null],
    // Layouts (issue 28): what the person's keys say, not where a US keyboard has them.
    ['US ctrl+z', k('z', { ctrlKey: true }, 'KeyZ'), { keys: 'ctrl+z' }],
    ['DE (QWERTZ) ctrl+z is the key labelled Z (code KeyY)', k('z', { ctrlKey: true }, 'KeyY'), { keys: 'ctrl+z' }],
    ['DE ctrl+y is the key labelled Y (code KeyZ)', k('y', { ctrlKey: true }, 'KeyZ'), { keys: 'ctrl+y' }],
    ['DE ß typed', k('ß', {}, 'Minus'), { text: 'ß' }],
    ['DE ü typed', k('ü', {}, 'BracketLeft'), { text: 'ü' }],
    ['DE AltGr+Q types @ (Windows: ctrl+alt)', k('@', { ctrlKey: true, altKey: true }, 'KeyQ'), { text: '@' }],
    ['DE AltGr+E types € (AltGraph state)', keyFor({ key: '€', code: 'KeyE', ctrlKey: false, altKey: false, shiftKey: false, metaKey: false, altGraph: true }), { text: '€' }],
    ['FR (AZERTY) ctrl+a is the key labelled A (code KeyQ)', k('a', { ctrlKey: true }, 'KeyQ'), { keys: 'ctrl+a' }],
    ['FR ctrl+w is the key labelled W (code KeyZ)', k('w', { ctrlKey: true }, 'KeyZ'), { keys: 'ctrl+w' }],
    ['FR unshifted digit row types its character', k('é', {}, 'Digit2'), { text: 'é' }],
    ['FR ctrl+1 on the & key is ctrl+1', k('&', { ctrlKey: true }, 'Digit1'), { keys: 'ctrl+1' }],
    ['FR AltGr+0 types @', k('@', { ctrlKey: true, altKey: true }, 'Digit0'), { text: '@' }],
    ['JP ctrl+c', k('c', { ctrlKey: true }, 'KeyC'), { keys: 'ctrl+c' }],
    ['JP yen sign typed', k('¥', {}, 'IntlYen'), { text: '¥' }],
    ['RU ctrl+c on the key labelled С stands for the US letter', k('с', { ctrlKey: true }, 'KeyC'), { keys: 'ctrl+c' }],
    ['ctrl+alt+t stays a shortcut', k('t', { ctrlKey: true, altKey: true }, 'KeyT'), { keys: 'ctrl+alt+t' }],
  ])('%s', (_n, got, want) => {
    expect(got).toEqual(want);
  });
});

describe('small mappings', () => {
  it('idle countdown uses the server clock of the status', () => {
    expect(idleSeconds('2026-11-29T17:45:00Z', '2026-11-29T17:40:00Z', 0)).toBe(300);
    expect(idleSeconds('2026-11-29T17:45:00Z', '2026-11-29T17:40:00Z', 10_500)).toBe(289.5);
    expect(idleSeconds('2026-11-29T17:45:00Z', '2026-11-29T17:50:00Z', 0)).toBe(0);
    expect(idleSeconds('x', 'y', 0)).toBe(0);
  });
  it('buttons', () => {
    expect([buttonFor(0), buttonFor(1), buttonFor(2)]).toEqual([1, 2, 3]);
  });
  it('wheel clicks', () => {
    expect([wheelClicks(120, 0), wheelClicks(-3, 1), wheelClicks(10, 0), wheelClicks(0, 0), wheelClicks(5000, 0)]).toEqual([3, -3, 1, 0, 10]);
  });
  it('channel url', () => {
    expect(channelUrl({ protocol: 'http:', host: '127.0.0.1:8765' }, 'a/b')).toBe('ws://127.0.0.1:8765/api/app/agents/a%2Fb/computer');
    expect(channelUrl({ protocol: 'https:', host: 'x' }, 'a')).toBe('wss://x/api/app/agents/a/computer');
    expect(channelUrl({ protocol: 'wails:', host: 'w' }, 'a', 'http://127.0.0.1:9', 't k')).toBe(
      'ws://127.0.0.1:9/api/app/agents/a/computer?access_token=t%20k',
    );
  });
  it('refusal names who controls the desktop', () => {
    const status = {
      type: 'status' as const, agentId: 'a', state: 'running', shared: false, streaming: true, serverTime: '',
      control: { kind: 'person' as const, name: 'alice', activity: 'alice is controlling this computer', you: false, version: 2, since: '' },
    };
    expect(refusalText({ type: 'error', op: 'take_over', reason: 'person_controlling', code: 'conflict', message: 'refused' }, status)).toBe(
      'alice is controlling this computer. refused',
    );
    expect(refusalText({ type: 'error', op: 'input', reason: 'stale_version', code: 'conflict', message: 'old lease' }, null)).toBe('old lease');
  });
});

describe('fitSize', () => {
  it('keeps even sizes inside the bounds', () => {
    expect(fitSize(1441, 901)).toEqual({ width: 1440, height: 900 });
    expect(fitSize(390, 844)).toEqual({ width: 390, height: 844 });
    expect(fitSize(100, 50)).toEqual({ width: 320, height: 240 });
    expect(fitSize(9000, 9000)).toEqual({ width: 2560, height: 1600 });
  });
});
