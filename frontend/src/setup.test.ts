import { describe, expect, it } from 'vitest';
import type { SetupStatus, SetupStep } from './api';
import { applyPrepare, currentStep, progressValue, stepsLeft } from './setup';

const step = (state: SetupStep['state'], extra: Partial<SetupStep> = {}): SetupStep => ({ state, detail: '', admin: true, ...extra });
const status = (e: SetupStep['state'], i: SetupStep['state'], m: SetupStep['state'], a: SetupStep['state']): SetupStatus => ({
  engine: step(e),
  image: step(i),
  model: step(m),
  agents: step(a, { admin: false }),
  done: [e, i, m, a].every((s) => s === 'done'),
});

describe('setup steps', () => {
  it.each([
    ['nothing done', status('needed', 'needed', 'needed', 'needed'), 'engine'],
    ['engine done', status('done', 'needed', 'needed', 'needed'), 'image'],
    ['image on its way: the model is next', status('done', 'working', 'needed', 'needed'), 'model'],
    ['image failed', status('done', 'failed', 'done', 'done'), 'image'],
    ['only the image is left, still working', status('done', 'working', 'done', 'done'), 'image'],
    ['all done', status('done', 'done', 'done', 'done'), null],
  ])('current step: %s', (_n, st, want) => {
    expect(currentStep(st)).toBe(want);
  });

  it('counts the steps left', () => {
    expect(stepsLeft(status('done', 'working', 'needed', 'done'))).toBe(2);
    expect(stepsLeft(status('done', 'done', 'done', 'done'))).toBe(0);
  });

  it('applies a preparation event of this server to the image step', () => {
    const st = status('done', 'needed', 'needed', 'needed');
    const got = applyPrepare(st, { nodeId: 'local', imageKey: 'standard', running: true, message: 'STEP 3/9', percent: 42.4 });
    expect(got).not.toBeNull();
    expect(got).not.toBe('ignore');
    const s = got as SetupStatus;
    expect(s.image.state).toBe('working');
    expect(s.image.detail).toContain('STEP 3/9');
    expect(progressValue(s.image)).toBe(42);
    expect(st.image.state).toBe('needed'); // not changed in place
  });

  it('asks to read again when the preparation ends, and ignores other nodes and images', () => {
    const st = status('done', 'working', 'needed', 'needed');
    expect(applyPrepare(st, { nodeId: 'local', imageKey: 'standard', running: false })).toBeNull();
    expect(applyPrepare(st, { nodeId: 'runner-1', imageKey: 'standard', running: true })).toBe('ignore');
    expect(applyPrepare(st, { nodeId: 'local', imageKey: 'cursor', running: true })).toBe('ignore');
  });

  it('has no progress value when the percentage is unknown or nothing runs', () => {
    expect(progressValue(step('working', { percent: -1 }))).toBeNull();
    expect(progressValue(step('needed', { percent: 50 }))).toBeNull();
    expect(progressValue(step('working', { percent: 140 }))).toBe(100);
  });
});
