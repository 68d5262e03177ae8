// Settings → Local VM (admin only, SPEC §1.2–§1.5): the engine report with fix hints, image
// preparation with live progress, the images' sources (ImageSourcesCard), the isolation policy and capacity, idle auto-stop, and
// the instance list. The server's answers are shown as they are; nothing is decided here.

import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type Client, type DoctorCheck, type InstanceView, type LocalVMStatus } from '../api';
import { randomId } from '../chat';
import { messageFor } from '../errors';
import { EngineChoiceCard } from './EngineChoice';
import { Forbidden } from './Forbidden';
import { ImageSourcesCard } from './ImageSourcesCard';
import { formatCountdown, idlePresets, imageLabel, prepareLine, stateTone } from './vmtext';

const statusText: Record<DoctorCheck['status'], string> = { ok: 'OK', warn: 'Warning', fail: 'Failed' };

/** The Local VM section. */
export function LocalVMSettings({ client }: { client: Client }) {
  const [forbidden, setForbidden] = useState(false);
  const [status, setStatus] = useState<LocalVMStatus | null>(null);
  const [statusError, setStatusError] = useState('');
  const [fetchedAt, setFetchedAt] = useState(0);
  const [now, setNow] = useState(Date.now());
  const live = useRef(true);

  const loadStatus = async () => {
    try {
      const st = await client.localVM();
      if (!live.current) return;
      setStatus(st);
      setFetchedAt(Date.now());
      setStatusError('');
    } catch (err) {
      if (!live.current) return;
      if (err instanceof ApiError && err.status === 403) setForbidden(true);
      else setStatusError(messageFor(err));
    }
  };

  useEffect(() => {
    live.current = true;
    void loadStatus();
    return () => {
      live.current = false;
    };
  }, [client]);

  // Poll every second while an image is being prepared, else every 5 s; tick the countdowns.
  const preparing = status?.preparing ?? false;
  useEffect(() => {
    const t = setInterval(() => void loadStatus(), preparing ? 1000 : 5000);
    return () => clearInterval(t);
  }, [client, preparing]);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);

  if (forbidden) return <Forbidden />;

  return (
    <section class="settings-section" id="local-vm-settings" aria-labelledby="local-vm-title">
      <h2 id="local-vm-title">Local VM</h2>
      <p class="muted">
        Agents' desktops run as containers on this machine (Podman or Docker), or as Pods of a Kubernetes cluster.
      </p>
      <EngineCard client={client} status={status} onForbidden={() => setForbidden(true)} />
      <EngineChoiceCard client={client} onForbidden={() => setForbidden(true)} />
      {statusError !== '' && (
        <p class="form-error" role="alert" id="local-vm-error">
          Could not load the Local VM status: {statusError}
        </p>
      )}
      {status === null && statusError === '' && <p class="muted">Loading the Local VM status…</p>}
      {status !== null && (
        <>
          <PrepareCard client={client} status={status} onChanged={loadStatus} />
          <ImageSourcesCard client={client} status={status} onChanged={loadStatus} />
          <PolicyCard client={client} status={status} onChanged={loadStatus} />
          <IdleCard client={client} status={status} onChanged={loadStatus} />
          <InstancesCard client={client} status={status} elapsed={(now - fetchedAt) / 1000} onChanged={loadStatus} />
        </>
      )}
    </section>
  );
}

function EngineCard({ client, status, onForbidden }: { client: Client; status: LocalVMStatus | null; onForbidden: () => void }) {
  const [checks, setChecks] = useState<DoctorCheck[] | null>(null);
  const [error, setError] = useState('');
  const [loading, setLoading] = useState(false);

  const load = async () => {
    setLoading(true);
    setError('');
    try {
      setChecks(await client.doctor());
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) onForbidden();
      else setError(messageFor(err));
    } finally {
      setLoading(false);
    }
  };
  useEffect(() => {
    void load();
  }, [client]);

  const failed = checks?.filter((c) => c.status === 'fail').length ?? 0;
  const warned = checks?.filter((c) => c.status === 'warn').length ?? 0;
  const engine = status?.engine;

  return (
    <div class="card">
      <div class="card-head">
        <h3>Engine status</h3>
        <button class="btn small" type="button" id="doctor-refresh" onClick={() => void load()} disabled={loading}>
          {loading ? 'Checking…' : 'Check again'}
        </button>
      </div>
      {engine && (
        <p class={`summary ${engine.found ? 'ok' : 'fail'}`} id="engine-line">
          {engine.found
            ? `Using ${engine.kind ?? 'engine'} ${engine.version ?? ''}${engine.rootless ? ' (rootless)' : ''}${engine.arch ? ` on ${engine.arch}` : ''}.`
            : `No container engine: ${engine.problem ?? 'install and start Podman or Docker.'}`}
        </p>
      )}
      {engine?.found && status?.guestLink && (
        <p class="muted small" id="guest-link-line">
          Desktops are reached over the {status.guestLink.transport} link
          {status.guestLink.fallback ? ` (the ${status.guestLink.fallback} link if a desktop's socket does not answer)` : ''}:{' '}
          {status.guestLink.reason}.
        </p>
      )}
      {error !== '' && (
        <p class="form-error" role="alert">
          Could not check the engine: {error}
        </p>
      )}
      {checks === null && error === '' && <p class="muted">Checking…</p>}
      {checks !== null && (
        <>
          <p class={`summary ${failed > 0 ? 'fail' : warned > 0 ? 'warn' : 'ok'}`} id="doctor-summary">
            {failed > 0
              ? `${failed} check${failed === 1 ? '' : 's'} failed — see how to fix below.`
              : warned > 0
                ? `Ready, with ${warned} warning${warned === 1 ? '' : 's'}.`
                : 'Everything Cubicle checks is in order.'}
          </p>
          <div class="table-wrap">
            <table class="doctor-table" id="doctor-table">
              <thead>
                <tr>
                  <th scope="col">Check</th>
                  <th scope="col">Status</th>
                  <th scope="col">Detail</th>
                  <th scope="col">How to fix</th>
                </tr>
              </thead>
              <tbody>
                {checks.map((c) => (
                  <tr key={c.name} data-status={c.status}>
                    <th scope="row">{c.name}</th>
                    <td>
                      <span class={`badge ${c.status}`}>{statusText[c.status] ?? c.status}</span>
                    </td>
                    <td class="detail">{c.detail}</td>
                    <td class={`fix${c.fix ? '' : ' empty'}`}>{c.fix ? c.fix : <span class="muted">—</span>}</td>
                  </tr>
                ))}
                {checks.length === 0 && (
                  <tr>
                    <td colSpan={4} class="muted">
                      The server reported no checks.
                    </td>
                  </tr>
                )}
              </tbody>
            </table>
          </div>
        </>
      )}
    </div>
  );
}

interface CardProps {
  client: Client;
  status: LocalVMStatus;
  onChanged: () => Promise<void>;
}

function PrepareCard({ client, status, onChanged }: CardProps) {
  const images = status.images ?? [];
  const [key, setKey] = useState('standard');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const prepare = async () => {
    setBusy(true);
    setError('');
    try {
      await client.prepareImage(key);
      await onChanged();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  const running = images.some((i) => i.prepare?.running);
  return (
    <div class="card" id="prepare-card">
      <div class="card-head">
        <h3>Prepare VM image</h3>
        {status.preparing && <span class="badge pending">Preparing…</span>}
      </div>
      <p class="notice warn-notice small" id="prepare-notice">
        Preparing an image first stops all VM tasks and running desktops on this machine. Work files and browser profiles
        are kept.
      </p>
      <div class="inline-form">
        <label class="field">
          <span>Image</span>
          <select id="prepare-image" value={key} onChange={(e) => setKey(e.currentTarget.value)} disabled={busy}>
            {(images.length > 0 ? images.map((i) => i.imageKey) : ['standard', 'cursor']).map((k) => (
              <option value={k} key={k}>
                {imageLabel(k)}
              </option>
            ))}
          </select>
        </label>
        <button class="btn primary" type="button" id="prepare-submit" onClick={() => void prepare()} disabled={busy || running}>
          {busy ? 'Starting…' : 'Prepare selected image'}
        </button>
      </div>
      {error !== '' && (
        <p class="form-error" role="alert" id="prepare-error">
          {error}
        </p>
      )}
      <ul class="image-list" id="image-list">
        {images.map((i) => {
          const p = i.prepare;
          const pct = p && p.percent >= 0 ? Math.round(p.percent) : null;
          return (
            <li key={i.imageKey} data-image={i.imageKey} data-prepared={i.prepared ? '1' : '0'}>
              <div class="image-row">
                <strong>{imageLabel(i.imageKey)}</strong>
                <span class={`badge ${i.prepared ? 'ok' : p?.running ? 'pending' : p?.error ? 'fail' : ''}`}>
                  {p?.running ? 'Preparing' : i.prepared ? 'Ready' : p?.error ? 'Failed' : 'Not prepared'}
                </span>
                {i.prepared && i.preparedAt && (
                  <span class="muted small">prepared {new Date(i.preparedAt).toLocaleString()}</span>
                )}
              </div>
              {p && (
                <div class="prepare-progress">
                  {p.running && (
                    <div class="progress" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={pct ?? undefined}>
                      <div class={`bar${pct === null ? ' indeterminate' : ''}`} style={pct === null ? undefined : { width: `${pct}%` }} />
                    </div>
                  )}
                  <p class={`small ${p.error ? 'form-error' : 'muted'}`}>{prepareLine(p)}</p>
                </div>
              )}
            </li>
          );
        })}
      </ul>
    </div>
  );
}

function PolicyCard({ client, status, onChanged }: CardProps) {
  const [isolation, setIsolation] = useState(status.policy.isolation);
  const [max, setMax] = useState(status.policy.maxInstances);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [saved, setSaved] = useState('');
  // Follow the server when it changes under us (and nothing is being edited).
  useEffect(() => {
    if (!busy) {
      setIsolation(status.policy.isolation);
      setMax(status.policy.maxInstances);
    }
  }, [status.policy.isolation, status.policy.maxInstances]);

  const save = async (iso: string, n: number) => {
    setIsolation(iso);
    setMax(n);
    setBusy(true);
    setError('');
    setSaved('');
    try {
      const p = await client.setVMPolicy(iso, n);
      setIsolation(p.isolation);
      setMax(p.maxInstances);
      setSaved('Saved.');
      await onChanged();
    } catch (err) {
      setError(messageFor(err));
      setIsolation(status.policy.isolation);
      setMax(status.policy.maxInstances);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="card" id="policy-card">
      <div class="card-head">
        <h3>Isolation and capacity</h3>
      </div>
      <div class="segmented" role="radiogroup" aria-label="Isolation policy" id="isolation">
        {[
          { v: 'shared', label: 'Shared VM', hint: "One desktop shared by all of an account's agents on this machine." },
          { v: 'per-agent', label: 'One per agent', hint: 'Every agent gets its own desktop.' },
        ].map((o) => (
          <label class={`choice${isolation === o.v ? ' selected' : ''}`} key={o.v} title={o.hint}>
            <input
              type="radio"
              name="isolation"
              value={o.v}
              checked={isolation === o.v}
              disabled={busy}
              onChange={() => void save(o.v, max)}
            />
            <span class="choice-label">{o.label}</span>
          </label>
        ))}
      </div>
      <p class="muted small">
        {isolation === 'shared'
          ? "Shared VM: one desktop, work files and browser profile shared by all persistent agents of the same account on this machine."
          : 'One per agent: every agent has its own desktop, work files and browser profile.'}
      </p>
      <label class="field inline">
        <span>Desktops running at the same time</span>
        <select id="max-instances" value={String(max)} disabled={busy} onChange={(e) => void save(isolation, Number(e.currentTarget.value))}>
          {[1, 2, 3, 4].map((n) => (
            <option value={String(n)} key={n}>
              {n}
            </option>
          ))}
        </select>
      </label>
      <p class="muted small status-line" aria-live="polite" id="policy-status">
        {busy ? 'Saving…' : saved}
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="policy-error">
          {error}
        </p>
      )}
    </div>
  );
}

function IdleCard({ client, status, onChanged }: CardProps) {
  const current = status.policy.idleStopMinutes;
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [shown, setShown] = useState(current);
  useEffect(() => {
    if (!busy) setShown(current);
  }, [current]);
  const save = async (minutes: number) => {
    setShown(minutes);
    setBusy(true);
    setError('');
    try {
      const p = await client.setIdlePolicy(randomId(), minutes);
      setShown(p.idleStopMinutes);
      await onChanged();
    } catch (err) {
      setError(messageFor(err));
      setShown(current);
    } finally {
      setBusy(false);
    }
  };
  const known = idlePresets.some((p) => p.minutes === shown);
  return (
    <div class="card" id="idle-card">
      <div class="card-head">
        <h3>Idle auto-stop</h3>
      </div>
      <p class="muted small">
        A desktop becomes idle when a task completes or control is handed back. Applies to all dynamic desktops on this
        machine. "Never" only turns off the idle timer; manual stops still stop desktops.
      </p>
      <label class="field inline">
        <span>Stop an idle desktop after</span>
        <select id="idle-stop" value={String(shown)} disabled={busy} onChange={(e) => void save(Number(e.currentTarget.value))}>
          {idlePresets.map((p) => (
            <option value={String(p.minutes)} key={p.minutes}>
              {p.label}
            </option>
          ))}
          {!known && <option value={String(shown)}>{shown} minutes</option>}
        </select>
      </label>
      <p class="muted small status-line" aria-live="polite" id="idle-status">
        {busy ? 'Saving…' : `Saved: ${shown === 0 ? 'never auto-stop' : `${shown} minute${shown === 1 ? '' : 's'}`}`}
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="idle-error">
          {error}
        </p>
      )}
    </div>
  );
}

function InstancesCard({ client, status, elapsed, onChanged }: CardProps & { elapsed: number }) {
  const instances = status.instances ?? [];
  const [busy, setBusy] = useState('');
  const [error, setError] = useState('');
  const act = async (inst: InstanceView, action: 'stop' | 'remove') => {
    if (!inst.agentId) return;
    setBusy(`${inst.id}:${action}`);
    setError('');
    try {
      await client.agentVMAction(inst.agentId, action);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy('');
      await onChanged();
    }
  };
  const deleteData = async (inst: InstanceView) => {
    if (!window.confirm(`Delete ${inst.description} with its work files and browser profile? This cannot be undone.`)) return;
    setBusy(`${inst.id}:data`);
    setError('');
    try {
      await client.deleteDesktopData(inst.id);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy('');
      await onChanged();
    }
  };
  return (
    <div class="card" id="instances-card">
      <div class="card-head">
        <h3>Desktops</h3>
        <span class="muted small">
          {status.running} of {status.policy.maxInstances} running
        </span>
      </div>
      {error !== '' && (
        <p class="form-error" role="alert" id="instances-error">
          {error}
        </p>
      )}
      {instances.length === 0 ? (
        <p class="muted" id="instances-empty">
          No desktops yet. Create one from an agent's computer panel.
        </p>
      ) : (
        <div class="table-wrap">
          <table class="doctor-table instances-table" id="instances-table">
            <thead>
              <tr>
                <th scope="col">Desktop</th>
                <th scope="col">Image</th>
                <th scope="col">State</th>
                <th scope="col">Idle stop</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {instances.map((i) => {
                const left = i.idleStopInSeconds === undefined ? null : Math.max(0, i.idleStopInSeconds - elapsed);
                return (
                  <tr key={i.id} data-instance={i.id} data-state={i.state}>
                    <th scope="row">
                      {i.description}
                      {i.task && <span class="muted small block">task desktop: removed when the helper's task ends</span>}
                      {i.busyBy && <span class="muted small block">{i.busyBy}</span>}
                      {i.lastError && <span class="form-error small block">{i.lastError}</span>}
                      {i.hostWall && i.hostWall !== 'on' && <span class="muted small block host-wall-off">{i.hostWall}</span>}
                    </th>
                    <td>
                      {i.imageKey ? imageLabel(i.imageKey) : '—'}
                      {i.imagePending && <span class="muted small block">new image on recreate</span>}
                    </td>
                    <td>
                      <span class={`badge ${stateTone(i.state)}`}>{i.state}</span>
                      {i.health === 'unhealthy' && <span class="badge fail">unhealthy</span>}
                      {i.guestLink && <span class="muted small block">{i.guestLink} link</span>}
                    </td>
                    <td class="idle-left">{left === null ? <span class="muted">—</span> : formatCountdown(left)}</td>
                    <td class="row-actions">
                      {!i.fixed && !i.task && i.agentId && (
                        <>
                          <button
                            class="btn small"
                            type="button"
                            disabled={busy !== '' || (i.state !== 'running' && i.state !== 'paused')}
                            onClick={() => void act(i, 'stop')}
                          >
                            {busy === `${i.id}:stop` ? 'Stopping…' : 'Stop'}
                          </button>
                          <button
                            class="btn small danger"
                            type="button"
                            disabled={busy !== '' || i.state === 'absent'}
                            title="Removes the container; work files and the browser profile are kept."
                            onClick={() => void act(i, 'remove')}
                          >
                            {busy === `${i.id}:remove` ? 'Removing…' : 'Remove'}
                          </button>
                        </>
                      )}
                      {!i.fixed && !i.task && (
                        <button
                          class="btn small danger delete-data"
                          type="button"
                          disabled={busy !== ''}
                          title="Deletes the desktop with its work files and browser profile, for good."
                          onClick={() => void deleteData(i)}
                        >
                          {busy === `${i.id}:data` ? 'Deleting…' : 'Delete data'}
                        </button>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {(status.strays ?? []).length > 0 && (
        <p class="muted small">Containers with Cubicle's labels that no record knows: {(status.strays ?? []).join(', ')}</p>
      )}
    </div>
  );
}
