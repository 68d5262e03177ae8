import { describe, expect, it } from 'vitest';
import { ApiError, nodeQuery, type Runner } from '../api';
import { bytes, concernsStatus, formatCountdown, formatUptime, idlePresets, imageLabel, nodeLock, pausePresets, prepareLine, stateLabel, stateTone } from './vmtext';
import type { BusEvent } from '../events';

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
  it('state labels: paused has its own', () => {
    expect([stateLabel('absent'), stateLabel('running'), stateLabel('paused')]).toEqual(['no desktop', 'running', 'paused (resumes when used)']);
  });
  it('pause presets end with never', () => {
    expect(pausePresets.map((p) => p.minutes)).toEqual([1, 2, 5, 10, 30, 0]);
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

describe('per node', () => {
  const ev = (type: string, data: object) => ({ id: '1', type, time: '', data }) as BusEvent;
  it('events concern the node they name; local events may name none', () => {
    expect(concernsStatus(ev('desktop.state', { nodeId: 'r-1', state: 'unreachable' }), 'r-1')).toBe(true);
    expect(concernsStatus(ev('desktop.state', { nodeId: 'r-1' }), 'local')).toBe(false);
    expect(concernsStatus(ev('desktop.state', { nodeId: 'local' }), 'r-1')).toBe(false);
    expect(concernsStatus(ev('desktop.state', {}), 'local')).toBe(true);
    expect(concernsStatus(ev('node.changed', { nodeId: 'r-2' }), 'r-1')).toBe(false);
    expect(concernsStatus(ev('runner.status', { nodeId: 'r-1', state: 'connected' }), 'r-1')).toBe(true);
    expect(concernsStatus(ev('runner.status', { nodeId: 'r-2' }), 'r-1')).toBe(false);
    expect(concernsStatus(ev('prepare.progress', { nodeId: 'r-1', running: true }), 'r-1')).toBe(false);
    expect(concernsStatus(ev('prepare.progress', { nodeId: 'r-1', running: false }), 'r-1')).toBe(true);
    expect(concernsStatus(ev('prepare.progress', { nodeId: 'r-1', running: false }), 'local')).toBe(false);
    expect(concernsStatus(ev('timeline.entry', {}), 'local')).toBe(false);
  });
  const runner = (status: Runner['status']): Runner => ({
    id: 'r-1', name: 'mac mini', status, version: '1', os: 'linux', arch: 'amd64', engine: 'podman', capabilities: [],
    desktops: { running: 0, max: 2 }, cloud: false, lastSeen: '2026-01-02T03:04:05Z',
    channel: 'release', targetVersion: '1', updateAvailable: false,
  });
  it('a disconnected or revoked runner locks the page with the reason; this computer never', () => {
    expect(nodeLock(undefined, new ApiError(503, 'unavailable', 'engine down'))).toBe('');
    expect(nodeLock(runner('connected'), null)).toBe('');
    expect(nodeLock(runner('disconnected'), null)).toMatch(/^Runner mac mini is disconnected \(last seen .+\): its desktops are unreachable/);
    expect(nodeLock(runner('connected'), new ApiError(503, 'unavailable', 'link ended'))).toMatch(/disconnected/);
    expect(nodeLock(runner('connected'), new ApiError(500, 'unknown', 'boom'))).toBe('');
    expect(nodeLock(runner('revoked'), null)).toMatch(/was revoked/);
  });
  it('the ?node= of the admin routes', () => {
    expect([nodeQuery(), nodeQuery('local'), nodeQuery('r-1'), nodeQuery('a b')]).toEqual(['', '', '?node=r-1', '?node=a%20b']);
    expect(stateTone('unreachable')).toBe('fail');
  });
});
