// An agent's Local VM desktop as the screen views act on it: its state (following the event
// stream, never polled), and the actions next to the screen — Create (with the image to use),
// Start, Pause / Resume, Open desktop, Stop, Recreate, Remove instance — or, with fixed Compose desktops, the
// desktop picker (SPEC §1.4, §1.6, §5). The server decides; the buttons only ask.

import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, type AgentVM, type Client, type VMAction } from '../api';
import { messageFor } from '../errors';
import type { BusEvent } from '../events';
import { useServerState, type ServerState } from '../hooks';
import { imageLabel, stateLabel, stateTone } from '../settings/vmtext';

/** The agent's desktop, loaded again whenever an event concerns it. */
export function useAgentVM(client: Client, agentId: string): ServerState<AgentVM> {
  let deskId = '';
  const st = useServerState(() => client.agentVM(agentId), [client, agentId], {
    when: (e: BusEvent) => concernsDesktop(e, agentId, deskId),
  });
  deskId = st.data?.desktop.id ?? '';
  return st;
}

/** Whether event e changes what the desktop deskId of agentId looks like. */
export function concernsDesktop(e: BusEvent, agentId: string, deskId: string): boolean {
  switch (e.type) {
    case 'desktop.state':
      return e.data.instanceId === deskId || e.data.agentId === agentId;
    case 'control.changed':
      return e.data.desktopId === deskId;
    case 'agent.changed':
      return e.data.agentId === agentId;
    case 'images.changed':
    case 'node.changed':
      return true;
  }
  return false;
}

/** Why the Local VM could not be loaded, for people. */
export function vmLoadError(err: unknown): string {
  return err instanceof ApiError && err.status === 404 && err.message.startsWith('no such API route')
    ? 'Local VM is not available on this server.'
    : messageFor(err);
}

interface DesktopActionsProps {
  client: Client;
  agentId: string;
  vm: ServerState<AgentVM>;
  /** Opens the interactive desktop (the panel's "Open desktop"); absent in that view itself. */
  onOpenDesktop?: () => void;
  /** Opens the dual desktop (the panel only). */
  onOpenDual?: () => void;
  /** Extra buttons before the desktop's own. */
  children?: ComponentChildren;
}

/** The state badge of the desktop (id vm-state). */
export function DesktopState({ vm }: { vm: AgentVM | null }) {
  const state = vm && unreachable(vm) ? 'unreachable' : vm?.desktop.state || 'absent';
  return (
    <span class={`badge ${stateTone(state)}`} id="vm-state" data-state={state}>
      {stateLabel(state)}
    </span>
  );
}

/**
 * Whether nothing reaches the desktop now: its node (a runner whose link is down) or the
 * engine does not answer. The server says so in a normal answer (lastError says why); the
 * desktop's actions would only be refused, so none are offered until it is back.
 */
export function unreachable(vm: AgentVM): boolean {
  return vm.desktop.state === 'unreachable' || vm.desktop.health === 'unreachable';
}

/** The buttons next to the screen, and what went wrong. */
export function DesktopActions({ client, agentId, vm, onOpenDesktop, onOpenDual, children }: DesktopActionsProps) {
  const [busy, setBusy] = useState('');
  const [error, setError] = useState('');
  const [image, setImage] = useState('');
  const v = vm.data;
  const images = v?.images ?? [];
  const desk = v?.desktop;
  useEffect(() => {
    if (image === '' || !images.includes(image)) {
      setImage(desk?.imageKey && images.includes(desk.imageKey) ? desk.imageKey : images[0] ?? '');
    }
  }, [v]);

  // The latest load failed (e.g. the agent's runner is not connected): say so, also over an
  // older answer, which then no longer describes the desktop.
  const loadFailed =
    vm.error !== '' ? (
      <p class="form-error" role="alert" id="local-vm-panel-error">
        {vmLoadError(vm.failure)}
      </p>
    ) : null;
  if (!v || !desk || loadFailed) {
    return loadFailed ?? <p class="muted small">Loading the desktop…</p>;
  }

  const act = async (action: VMAction) => {
    setBusy(action);
    setError('');
    try {
      if ((action === 'create' || action === 'recreate') && image !== '' && image !== desk.imageKey) {
        vm.set(await client.setAgentImage(agentId, image));
      }
      vm.set(await client.agentVMAction(agentId, action));
    } catch (err) {
      setError(messageFor(err));
      void vm.reload();
    } finally {
      setBusy('');
    }
  };
  const choose = async (id: string) => {
    setError('');
    try {
      vm.set(await client.chooseDesktop(agentId, id));
    } catch (err) {
      setError(messageFor(err));
    }
  };

  if (unreachable(v)) {
    return (
      <div class="desktop-actions" data-state="unreachable">
        {children && <div class="button-row">{children}</div>}
        <p class="form-error small" id="vm-unreachable">
          {desk.lastError || 'The desktop cannot be reached now.'}
        </p>
      </div>
    );
  }
  const state = desk.state || 'absent';
  const exists = state !== 'absent';
  const fixed = (v.desktops?.length ?? 0) > 0 || v.isolation === 'compose';
  const b = (id: string, label: string, doing: string, action: VMAction, primary = false, title?: string) => (
    <button class={`btn small${primary ? ' primary' : ''}`} type="button" id={id} title={title} disabled={busy !== ''} onClick={() => void act(action)}>
      {busy === action ? doing : label}
    </button>
  );

  return (
    <div class="desktop-actions" data-state={state}>
      {fixed && (
        <label class="field inline compact">
          <span>Desktop</span>
          <select id="vm-desktop" value={desk.id} onChange={(e) => void choose(e.currentTarget.value)}>
            {(v.desktops ?? []).map((d) => (
              <option key={d.id} value={d.id}>
                {d.name || d.id} ({d.state})
              </option>
            ))}
          </select>
        </label>
      )}
      {!fixed && !exists && (
        <label class="field inline compact">
          <span>VM image</span>
          <select id="vm-image" value={image} onChange={(e) => setImage(e.currentTarget.value)} disabled={busy !== '' || images.length === 0}>
            {images.length === 0 && <option value="">No prepared image</option>}
            {images.map((k) => (
              <option key={k} value={k}>
                {imageLabel(k)}
              </option>
            ))}
          </select>
        </label>
      )}
      <div class="button-row">
        {children}
        {!fixed && !exists && (
          <button class="btn primary small" type="button" id="vm-create" onClick={() => void act('create')} disabled={busy !== '' || image === ''}>
            {busy === 'create' ? 'Creating…' : 'Create desktop'}
          </button>
        )}
        {!fixed &&
          exists &&
          state !== 'paused' &&
          (state !== 'running' || desk.health === 'unhealthy') &&
          b('vm-start', state === 'running' ? 'Repair' : 'Start', 'Starting…', 'start', true)}
        {!fixed && state === 'paused' && b('vm-resume', 'Resume', 'Resuming…', 'resume', true, 'Thaws the desktop: its programs go on where they were.')}
        {!fixed &&
          state === 'running' &&
          !desk.busyBy &&
          b('vm-pause', 'Pause', 'Pausing…', 'pause', false, 'Freezes the desktop: its memory is kept, it uses no CPU; using it resumes it.')}
        {state === 'running' && onOpenDesktop && (
          <button class="btn primary small" type="button" id="vm-open" onClick={onOpenDesktop}>
            Open desktop
          </button>
        )}
        {!fixed && (state === 'running' || state === 'paused') && b('vm-stop', 'Stop', 'Stopping…', 'stop')}
        {!fixed && exists && b('vm-recreate', 'Recreate', 'Recreating…', 'recreate', false, 'Rebuilds the desktop; the working directory and browser profile are kept.')}
        {!fixed &&
          exists &&
          b('vm-remove', 'Remove instance', 'Removing…', 'remove', false, 'Removes the desktop container; the working directory and browser profile are kept.')}
        {onOpenDual && (
          <button class="btn ghost small" type="button" id="vm-dual" onClick={onOpenDual}>
            Open dual desktop
          </button>
        )}
      </div>
      {images.length === 0 && !exists && !fixed && (
        <p class="muted small" id="vm-no-image">
          No image is prepared yet. An administrator prepares one in <a href="#/settings/local-vm">Settings → Local VM</a>.
        </p>
      )}
      {desk.imagePending && <p class="muted small">The chosen image applies when you recreate the desktop.</p>}
      {v.isolation === 'shared' && (
        <p class="muted small">{desk.description} — shared by your agents on this machine; one image for all of them.</p>
      )}
      {desk.busyBy && <p class="muted small">{desk.busyBy}</p>}
      {desk.health === 'unhealthy' && (
        <p class="form-error small" id="vm-unhealthy">
          The desktop's driver cannot be reached: Repair restarts it (its files stay).
        </p>
      )}
      {desk.lastError && <p class="form-error small">{desk.lastError}</p>}
      {error !== '' && (
        <p class="form-error" role="alert" id="vm-error">
          {error}
        </p>
      )}
    </div>
  );
}
