import { describe, expect, it } from 'vitest';
import { bytes, formatCountdown, formatUptime, idlePresets, imageLabel, prepareLine, stateTone } from './vmtext';

describe('vmtext', () => {
  it('idle presets are the spec list plus never', () => {
    expect(idlePresets.map((p) => p.minutes)).toEqual([1, 5, 10, 15, 30, 60, 120, 0]);
  });
  it.each([
    [0, '0:00'],
    [59.6, '1:00'],
    [299, '4:59'],
    [3725, '1:02:05'],
    [-3, '0:00'],
  ])('countdown %s', (s, want) => expect(formatCountdown(s)).toBe(want));
  it('labels and tones', () => {
    expect(imageLabel('cursor')).toBe('Cursor Universal');
    expect(imageLabel('x')).toBe('x');
    expect([stateTone('running'), stateTone('creating'), stateTone('stopped'), stateTone('missing')]).toEqual(['ok', 'pending', '', 'fail']);
    expect([stateTone('paused'), stateTone('starting'), stateTone('unreachable')]).toEqual(['warn', 'pending', 'fail']);
  });
  it.each([
    ['running with percent', { running: true, phase: 'image', percent: 42.4, message: 'STEP 3/9' }, 'Image 42% — STEP 3/9'],
    ['unknown percent', { running: true, phase: 'verify', percent: -1, message: '' }, 'Verify'],
    ['failed', { running: false, phase: 'failed', percent: -1, message: '', error: 'cannot pull base' }, 'Failed: cannot pull base'],
    ['done', { running: false, phase: 'done', percent: 100, message: '' }, 'Ready.'],
  ])('prepare line %s', (_n, p, want) => {
    expect(prepareLine({ imageKey: 'standard', startedAt: '', ...p })).toBe(want);
  });
});

describe('uptime and sizes', () => {
  it.each([
    [0, '0 s'],
    [59_999, '59 s'],
    [60_000, '1 min'],
    [3_600_000 + 5 * 60_000, '1 h 05 min'],
    [(2 * 24 + 4) * 3_600_000, '2 d 4 h'],
    [-5, '0 s'],
  ])('uptime %s ms', (ms, want) => expect(formatUptime(ms)).toBe(want));
  it.each([
    [0, '0 B'],
    [2048, '2.0 KiB'],
    [5 << 20, '5.0 MiB'],
    [3 * 2 ** 30, '3.0 GiB'],
    [-1, 'unknown size'],
  ])('bytes %s', (n, want) => expect(bytes(n)).toBe(want));
});
