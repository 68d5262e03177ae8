// The first-run path's logic (backend/setup): the four steps in order, which is the one to do
// now, how a preparation's progress event changes the image step, and the texts. The server
// decides each step's state; this only orders, merges and words it.

import type { SetupState, SetupStatus, SetupStep } from './api';

/** The steps' keys in the order an administrator does them. */
export const stepKeys = ['engine', 'image', 'model', 'agents'] as const;
export type StepKey = (typeof stepKeys)[number];

/** Each step's title. */
export const stepTitles: Record<StepKey, string> = {
  engine: 'Container engine',
  image: 'Desktop image',
  model: 'Model',
  agents: 'First agent',
};

/** The badge of a state. */
export const stateLabels: Record<SetupState, string> = {
  done: 'Done',
  needed: 'To do',
  working: 'Working',
  failed: 'Failed',
};

/** The step to do now: the first one not done (the image may still be working meanwhile). */
export function currentStep(st: SetupStatus): StepKey | null {
  for (const k of stepKeys) {
    const s = st[k];
    if (s.state === 'done' || (k === 'image' && s.state === 'working')) continue;
    return k;
  }
  return stepKeys.find((k) => st[k].state !== 'done') ?? null;
}

/** How many steps are not done yet. */
export function stepsLeft(st: SetupStatus): number {
  return stepKeys.filter((k) => st[k].state !== 'done').length;
}

/** A prepare.progress event's data (backend/events Prepare). */
export interface PrepareEvent {
  nodeId?: string;
  imageKey: string;
  running: boolean;
  message?: string;
  percent?: number;
}

/**
 * The status with a preparation's progress event applied: while the standard image of this
 * server prepares, the image step is working with the event's message and percent. It returns
 * null when the event needs the status read again (the preparation ended) or is not about
 * this step (another node or image).
 */
export function applyPrepare(st: SetupStatus, e: PrepareEvent): SetupStatus | null | 'ignore' {
  if ((e.nodeId && e.nodeId !== 'local') || e.imageKey !== 'standard') return 'ignore';
  if (!e.running) return null;
  const image: SetupStep = {
    ...st.image,
    state: 'working',
    percent: e.percent ?? -1,
    detail: `preparing the standard image: ${e.message ?? ''}`.trim(),
  };
  return { ...st, image, done: false };
}

/** The progress bar's value (0..100), or null when the percentage is unknown. */
export function progressValue(step: SetupStep): number | null {
  if (step.state !== 'working' || step.percent === undefined || step.percent < 0) return null;
  return Math.max(0, Math.min(100, Math.round(step.percent)));
}
