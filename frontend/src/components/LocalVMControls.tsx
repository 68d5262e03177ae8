// The Local VM part of the computer panel: the desktop's image ("VM image", prepared keys
// only), create / start / stop / recreate, its state, and the live screen.

import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type AgentVM, type Client, type VMAction } from '../api';
import { messageFor } from '../errors';
import { imageLabel, stateTone } from '../settings/vmtext';
import { NodePicker } from './NodePicker';
import { ScreenView } from './ScreenView';

interface LocalVMControlsProps {
  client: Client;
  agentId: string;
  /** Opens the interactive desktop (the panel's "Open desktop" or a click on the preview). */
  onOpenDesktop: () => void;
  onOpenDual: () => void;
  /** True while the interactive view shows this desktop (the preview then stays empty). */
  desktopOpen: boolean;
}

/** The panel's Local VM controls. */
export function LocalVMControls({ client, agentId, onOpenDesktop, onOpenDual, desktopOpen }: LocalVMControlsProps) {
  const [vm, setVm] = useState<AgentVM | null>(null);
  const [loadError, setLoadError] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState('');
  const [image, setImage] = useState('');
  const live = useRef(true);

  const load = async () => {
    try {
      const v = await client.agentVM(agentId);
      if (!live.current) return;
      setVm(v);
      setLoadError('');
    } catch (err) {
      if (!live.current) return;
      setLoadError(err instanceof ApiError && err.status === 404 && err.message.startsWith('no such API route')
        ? 'Local VM is not available on this server.'
        : messageFor(err));
    }
  };

  useEffect(() => {
    live.current = true;
    void load();
    const t = setInterval(() => void load(), 3000);
    return () => {
      live.current = false;
      clearInterval(t);
    };
  }, [client, agentId]);

  const images = vm?.images ?? [];
  const desk = vm?.desktop;
  useEffect(() => {
    if (image === '' || !images.includes(image)) setImage(desk?.imageKey && images.includes(desk.imageKey) ? desk.imageKey : images[0] ?? '');
  }, [vm]);

  const act = async (action: VMAction) => {
    setBusy(action);
    setError('');
    try {
      if (action === 'create' || action === 'recreate') {
        if (image !== '' && image !== desk?.imageKey) setVm(await client.setAgentImage(agentId, image));
      }
      setVm(await client.agentVMAction(agentId, action));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy('');
      void load();
    }
  };

  // After a move the desktop is another node's: forget the old view while the new one loads.
  const moved = () => {
    setVm(null);
    setLoadError('');
    void load();
  };

  const chooseImage = async (key: string) => {
    setImage(key);
    if (!desk || desk.state === 'absent' || key === desk.imageKey) return;
    setError('');
    try {
      setVm(await client.setAgentImage(agentId, key));
    } catch (err) {
      setError(messageFor(err));
    }
  };

  if (loadError !== '' && !vm) {
    return (
      <section class="panel-section" id="local-vm-panel">
        <NodePicker client={client} agentId={agentId} onMoved={moved} />
        <p class="form-error" role="alert" id="local-vm-panel-error">
          {loadError}
        </p>
      </section>
    );
  }
  if (!vm || !desk) {
    return (
      <section class="panel-section" id="local-vm-panel">
        <p class="muted small">Loading the desktop…</p>
      </section>
    );
  }

  const state = desk.state || 'absent';
  const exists = state !== 'absent';
  const shared = vm.isolation === 'shared';
  return (
    <>
      <section class="panel-section" id="local-vm-panel" aria-labelledby="vm-title" data-state={state}>
        <div class="section-head">
          <h3 id="vm-title">Local VM</h3>
          <span class={`badge ${stateTone(state)}`} id="vm-state">
            {exists ? state : 'no desktop'}
          </span>
          {shared && <span class="badge">Shared</span>}
        </div>
        <NodePicker client={client} agentId={agentId} onMoved={moved} />
        <label class="field">
          <span>VM image</span>
          <select id="vm-image" value={image} onChange={(e) => void chooseImage(e.currentTarget.value)} disabled={busy !== '' || images.length === 0}>
            {images.length === 0 && <option value="">No prepared image</option>}
            {images.map((k) => (
              <option key={k} value={k}>
                {imageLabel(k)}
              </option>
            ))}
          </select>
        </label>
        {images.length === 0 && (
          <p class="muted small" id="vm-no-image">
            No image is prepared yet. An administrator prepares one in <a href="#/settings/local-vm">Settings → Local VM</a>.
          </p>
        )}
        {desk.imagePending && <p class="muted small">The chosen image applies when you recreate the desktop.</p>}
        {shared && <p class="muted small">{desk.description} — shared by your agents on this machine; one image for all of them.</p>}
        {desk.busyBy && <p class="muted small">{desk.busyBy}</p>}
        {desk.health === 'unhealthy' && (
          <p class="form-error small" id="vm-unhealthy">
            The desktop's driver cannot be reached: Repair restarts it (its files stay).
          </p>
        )}
        {desk.lastError && <p class="form-error small">{desk.lastError}</p>}
        <div class="button-row">
          {!exists && (
            <button class="btn primary small" type="button" id="vm-create" onClick={() => void act('create')} disabled={busy !== '' || image === ''}>
              {busy === 'create' ? 'Creating…' : 'Create desktop'}
            </button>
          )}
          {exists && (state !== 'running' || desk.health === 'unhealthy') && (
            <button class="btn primary small" type="button" id="vm-start" onClick={() => void act('start')} disabled={busy !== ''}>
              {busy === 'start' ? 'Starting…' : state === 'paused' ? 'Resume' : state === 'running' ? 'Repair' : 'Start'}
            </button>
          )}
          {state === 'running' && (
            <button class="btn primary small" type="button" id="vm-open" onClick={onOpenDesktop}>
              Open desktop
            </button>
          )}
          {(state === 'running' || state === 'paused') && (
            <button class="btn small" type="button" id="vm-stop" onClick={() => void act('stop')} disabled={busy !== ''}>
              {busy === 'stop' ? 'Stopping…' : 'Stop'}
            </button>
          )}
          {exists && (
            <button
              class="btn small"
              type="button"
              id="vm-recreate"
              onClick={() => void act('recreate')}
              disabled={busy !== ''}
              title="Rebuilds the desktop; the working directory and browser profile are kept."
            >
              {busy === 'recreate' ? 'Recreating…' : 'Recreate'}
            </button>
          )}
          <button class="btn ghost small" type="button" id="vm-dual" onClick={onOpenDual}>
            Open dual desktop
          </button>
        </div>
        {error !== '' && (
          <p class="form-error" role="alert" id="vm-error">
            {error}
          </p>
        )}
      </section>
      {exists && !desktopOpen && (
        <section class="panel-section screen-section">
          <ScreenView client={client} agentId={agentId} variant="panel" onPreviewClick={onOpenDesktop} />
        </section>
      )}
    </>
  );
}
