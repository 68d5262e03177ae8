import { describe, expect, it } from 'vitest';
import { clock, markerAt, nextTool, shownDuration } from './components/ReplayPlayer';
import { recordingsKey } from './components/Timeline';
import type { RecordingMarker } from './api';

const ms: RecordingMarker[] = [
  { at: 0, kind: 'desktop', label: 'desktop running' },
  { at: 1000, kind: 'tool', label: 'computer: screenshot', runId: 'r1' },
  { at: 2000, kind: 'control', label: 'alice took over' },
  { at: 5000, kind: 'tool', label: 'computer: click', runId: 'r2' },
];

describe('replay markers', () => {
  it('shows the last tool call reached', () => {
    expect(markerAt(ms, 500)).toBe(-1);
    expect(markerAt(ms, 1000)).toBe(1);
    expect(markerAt(ms, 4000)).toBe(1);
    expect(markerAt(ms, 6000)).toBe(3);
  });
  it('jumps to the next tool call', () => {
    expect(nextTool(ms, 0)).toBe(1);
    expect(nextTool(ms, 1000)).toBe(3);
    expect(nextTool(ms, 5000)).toBe(-1);
  });
  it('formats the clock', () => {
    expect(clock(0)).toBe('0:00');
    expect(clock(65_400)).toBe('1:05');
    expect(clock(3_725_000)).toBe('1:02:05');
  });
});

describe('the timeline asks for recordings again', () => {
  it('when a run starts and when a run ends (its marker is written at the end)', () => {
    const running = recordingsKey([{ status: 'SUCCESS' }, { status: 'RUNNING' }]);
    expect(recordingsKey([{ status: 'SUCCESS' }, { status: 'SUCCESS' }])).not.toBe(running);
    expect(recordingsKey([{ status: 'SUCCESS' }, { status: 'FAILED' }])).not.toBe(running);
    expect(recordingsKey([{ status: 'SUCCESS' }])).not.toBe(recordingsKey([{ status: 'SUCCESS' }, { status: 'PENDING' }]));
    expect(recordingsKey([{ status: 'SUCCESS' }, { status: 'RUNNING' }])).toBe(running);
  });
});

describe('the duration the player shows', () => {
  it('of a recording being written reaches at least the position', () => {
    expect(shownDuration(8000, 5000, true, 12_000)).toBe(12_000);
    expect(shownDuration(8000, 5000, true, 3000)).toBe(8000);
  });
  it('of an ended recording is what the server says', () => {
    expect(shownDuration(8000, 9000, false, 12_000)).toBe(9000);
    expect(shownDuration(0, 0, false, 0)).toBe(1);
  });
});
