// Words and numbers the Local VM screens show: image labels, idle presets, state tones,
// countdowns and preparation lines, and which node an event or a refusal concerns. Pure, so
// they are unit tested.

import { ApiError, type PrepareState, type Runner } from '../api';
import type { BusEvent } from '../events';

/** "Idle auto-stop" choices (SPEC §1.5); 0 is "Never auto-stop". */
export const idlePresets: ReadonlyArray<{ minutes: number; label: string }> = [
  { minutes: 1, label: '1 minute' },
  { minutes: 5, label: '5 minutes' },
  { minutes: 10, label: '10 minutes' },
  { minutes: 15, label: '15 minutes' },
  { minutes: 30, label: '30 minutes' },
  { minutes: 60, label: '60 minutes' },
  { minutes: 120, label: '120 minutes' },
  { minutes: 0, label: 'Never auto-stop' },
];

/** "Pause when idle" choices; 0 is "Never pause". Only those before the idle stop apply. */
export const pausePresets: ReadonlyArray<{ minutes: number; label: string }> = [
  { minutes: 1, label: '1 minute' },
  { minutes: 2, label: '2 minutes' },
  { minutes: 5, label: '5 minutes' },
  { minutes: 10, label: '10 minutes' },
  { minutes: 30, label: '30 minutes' },
  { minutes: 0, label: 'Never pause' },
];

/** The words of a desktop state on its badge. */
export function stateLabel(state: string): string {
  switch (state) {
    case 'absent':
      return 'no desktop';
    case 'paused':
      return 'paused (resumes when used)';
    default:
      return state;
  }
}

/** The display name of an image key. */
export function imageLabel(key: string): string {
  if (key === 'standard') return 'Standard (XFCE desktop)';
  if (key === 'cursor') return 'Cursor Universal';
  return key;
}

/** The badge tone of an instance state. */
export function stateTone(state: string): string {
  switch (state) {
    case 'running':
      return 'ok';
    case 'creating':
    case 'stopping':
    case 'removing':
    case 'starting':
      return 'pending';
    case 'paused':
      return 'warn';
    case 'missing':
    case 'failed':
    case 'unreachable':
      return 'fail';
    default:
      return '';
  }
}

/** m:ss or h:mm:ss. */
export function formatCountdown(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${r}` : `${m}:${r}`;
}

/** One line about a preparation: phase, percentage when known, message or error. */
export function prepareLine(p: PrepareState): string {
  if (p.error) return `Failed: ${p.error}`;
  if (!p.running && p.phase === 'done') return p.message || 'Ready.';
  const pct = p.percent >= 0 ? ` ${Math.round(p.percent)}%` : '';
  const phase = p.phase ? `${p.phase[0].toUpperCase()}${p.phase.slice(1)}` : 'Working';
  return `${phase}${pct}${p.message ? ` — ${p.message}` : ''}`;
}

/** How long something has run: "45 s", "12 min", "3 h 05 min", "2 d 4 h". */
export function formatUptime(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** A size in bytes for people; negative is unknown. */
export function bytes(n: number): string {
  if (n < 0 || !Number.isFinite(n)) return 'unknown size';
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} GiB`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

/** Whether event e concerns node (events of the local node may name no node). */
export function onNode(e: BusEvent, node: string): boolean {
  // Most payloads name their node; those that do not (and events of older servers) are local.
  return ((e.data as { nodeId?: string } | null)?.nodeId || 'local') === node;
}

/** Events after which the Local VM status of node is read again. */
export function concernsStatus(e: BusEvent, node = 'local'): boolean {
  switch (e.type) {
    case 'desktop.state':
    case 'images.changed':
    case 'node.changed':
      return onNode(e, node);
    case 'runner.status':
      return e.data.nodeId === node;
    case 'control.changed':
    case 'agent.changed':
      return true;
    case 'prepare.progress':
      return onNode(e, node) && !e.data.running; // progress itself is patched in; the end changes the images
  }
  return false;
}

/** Why a runner's node cannot be acted on now ('' when it can). */
export function nodeLock(runner: Runner | undefined, failure: unknown): string {
  if (!runner) return '';
  const seen = runner.lastSeen ? ` (last seen ${new Date(runner.lastSeen).toLocaleString()})` : '';
  if (runner.status === 'revoked') return `Runner ${runner.name} was revoked: add it again in Settings → Runners to use that machine.`;
  if (runner.status !== 'connected' || (failure instanceof ApiError && failure.status === 503)) {
    return `Runner ${runner.name} is disconnected${seen}: its desktops are unreachable and its settings cannot be changed until it reconnects.`;
  }
  return '';
}

