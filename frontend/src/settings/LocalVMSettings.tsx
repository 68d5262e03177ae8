// Settings → Local VM (admin only, SPEC §1.2–§1.5), per execution node (this computer or a
// runner, chosen with the node picker): the engine report with fix hints, image
// preparation with live progress, the images' sources (ImageSourcesCard), the isolation policy and capacity, idle auto-stop, and
// the instance list. The server's answers are shown as they are; nothing is decided here.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Client, type DoctorCheck, type InstanceView, type LocalVMStatus, type PrepareState, type Runner } from '../api';
import { randomId } from '../chat';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { messageFor } from '../errors';
import { EngineChoiceCard } from './EngineChoice';
import type { BusEvent } from '../events';
import { useEvents, useServerState } from '../hooks';
import { Forbidden } from './Forbidden';
import { ImageSourcesCard } from './ImageSourcesCard';
import { LeftoversCard } from './Leftovers';
import { RecordingsCard } from './RecordingsCard';
import { bytes, concernsStatus, formatCountdown, formatUptime, idlePresets, imageLabel, nodeLock, onNode, pausePresets, prepareLine, stateLabel, stateTone } from './vmtext';

const statusText: Record<DoctorCheck['status'], string> = { ok: 'OK', warn: 'Warning', fail: 'Failed' };

/** One desktop's resources, from the desktop.stats events. */
interface Stats {
  cpuPercent: number;
  memoryBytes: number;
  memoryLimit?: number;
}

/** The runners (for the node picker); none when the server has none or they cannot be listed. */
function useRunners(client: Client) {
  return useServerState(() => client.listRunners().catch(() => [] as Runner[]), [client], {
    when: (e: BusEvent) => e.type === 'runner.status',
  });
}

/**
 * The Local VM section. A node picker chooses the machine (this computer or a runner); every
 * card acts on that node only. It follows the event stream; nothing polls while the stream
 * is up. While a runner is disconnected its last known status is shown, its desktops as
 * unreachable, and every action is disabled with the reason.
 */
export function LocalVMSettings({ client }: { client: Client }) {
  const [node, setNode] = useState('local');
  const runners = useRunners(client);
  const runner = node === 'local' ? undefined : runners.data?.find((r) => r.id === node);
  const st = useServerState(() => client.localVM(node), [client, node], { when: (e) => concernsStatus(e, node) });
  const [known, setKnown] = useState<Record<string, LocalVMStatus>>({});
  const [fetchedAt, setFetchedAt] = useState(0);
  const [now, setNow] = useState(Date.now());
  const [progress, setProgress] = useState<Record<string, PrepareState>>({});
  const [stats, setStats] = useState<Record<string, Stats>>({});
  const forbidden = st.failure instanceof ApiError && st.failure.status === 403;
  const lock = nodeLock(runner, st.failure);
  // The answer for this node; a disconnected runner shows what it last said.
  const status = st.data && (st.data.nodeId || 'local') === node ? st.data : (known[node] ?? null);

  useEffect(() => {
    if (st.data) setKnown((k) => ({ ...k, [st.data!.nodeId || 'local']: st.data! }));
    setFetchedAt(Date.now());
    setProgress({});
  }, [st.data]);
  useEffect(() => {
    setProgress({});
    setStats({});
  }, [node]);
  // Preparation progress and resources arrive as events and are shown as they come.
  useEvents((e) => {
    if (e.type === 'prepare.progress' && onNode(e, node)) setProgress((p) => ({ ...p, [e.data.imageKey]: e.data as PrepareState }));
    if (e.type === 'desktop.stats' && onNode(e, node)) {
      const next: Record<string, Stats> = {};
      for (const i of e.data.instances ?? []) next[i.instanceId] = i;
      setStats(next);
    }
  });
  // The countdowns and uptimes tick here, from the last answer; no request is made.
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);

  if (forbidden) return <Forbidden />;
  const shown: LocalVMStatus | null = status && {
    ...status,
    images: (status.images ?? []).map((i) => (progress[i.imageKey] ? { ...i, prepare: progress[i.imageKey] } : i)),
    preparing: status.preparing || Object.values(progress).some((p) => p.running),
    instances: lock === '' ? status.instances : (status.instances ?? []).map((i) => ({ ...i, state: 'unreachable', idleStopInSeconds: undefined })),
    running: lock === '' ? status.running : 0,
  };
  const onChanged = st.reload;
  const pickable = (runners.data ?? []).filter((r) => r.status !== 'revoked' || r.id === node);
  const target = node === 'local' ? undefined : node;

  return (
    <section class="settings-section" id="local-vm-settings" aria-labelledby="local-vm-title" data-node={node}>
      <h2 id="local-vm-title">Local VM</h2>
      <p class="muted">
        Agents' desktops run as containers on this machine (Podman or Docker), or as Pods of a Kubernetes cluster
        {pickable.length > 0 ? ', or on runners: other machines that connect to this server' : ''}. Each machine has its own
        policy, capacity, idle stop, images and desktops.
      </p>
      {pickable.length > 0 && (
        <div class="card node-picker" id="node-picker-card">
          <label class="field inline">
            <span>Machine</span>
            <select id="local-vm-node" value={node} onChange={(e) => setNode(e.currentTarget.value)}>
              <option value="local">This computer</option>
              {pickable.map((r) => (
                <option key={r.id} value={r.id} data-status={r.status}>
                  {r.name} — runner, {r.status}
                  {r.status === 'connected' ? `, ${r.desktops.running} of ${r.desktops.max} running` : ''}
                </option>
              ))}
            </select>
          </label>
          {runner && (
            <p class="muted small" id="local-vm-node-line" data-status={runner.status}>
              <span class={`badge ${runner.status === 'connected' ? 'ok' : 'fail'}`} id="local-vm-node-status">
                {runner.status}
              </span>{' '}
              {runner.version ? `${runner.version} · ${runner.os}/${runner.arch} · ${runner.engine || `no engine: ${runner.engineError ?? ''}`}` : ''}
            </p>
          )}
        </div>
      )}
      {lock !== '' && (
        <p class="notice warn-notice" role="status" id="local-vm-node-lock">
          {lock}
        </p>
      )}
      {node === 'local' ? (
        <>
          <EngineCard client={client} status={shown} onForbidden={() => void 0} />
          <EngineChoiceCard client={client} onForbidden={() => void 0} />
        </>
      ) : (
        shown?.engine && (
          <div class="card">
            <h3>Engine</h3>
            <p class={`summary ${shown.engine.found ? 'ok' : 'fail'}`} id="engine-line">
              {shown.engine.found
                ? `The runner uses ${shown.engine.kind ?? 'an engine'} ${shown.engine.version ?? ''}${shown.engine.arch ? ` on ${shown.engine.arch}` : ''}.`
                : `The runner has no container engine: ${shown.engine.problem ?? 'install and start Podman or Docker there.'}`}
            </p>
            <p class="muted small">The engine of a runner is chosen on its machine (cubicle runner --engine …).</p>
          </div>
        )
      )}
      {st.error !== '' && !forbidden && lock === '' && (
        <p class="form-error" role="alert" id="local-vm-error">
          Could not load the Local VM status: {st.error}
        </p>
      )}
      {shown === null && st.error === '' && <p class="muted">Loading the Local VM status…</p>}
      {shown !== null && (
        <>
          <PrepareCard client={client} status={shown} onChanged={onChanged} node={target} locked={lock} />
          <ImageSourcesCard client={client} status={shown} onChanged={onChanged} node={target} locked={lock} />
          <PolicyCard client={client} status={shown} onChanged={onChanged} node={target} locked={lock} />
          <IdleCard client={client} status={shown} onChanged={onChanged} node={target} locked={lock} />
          <RecordingsCard client={client} node={node} />
          <InstancesCard
            client={client}
            status={shown}
            stats={stats}
            now={now}
            elapsed={(now - fetchedAt) / 1000}
            onChanged={onChanged}
            node={target}
            locked={lock}
          />
          {node === 'local' && <LeftoversCard client={client} />}
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
        <p class={`summary ${engine.found ? 'ok' : engine.connecting ? '' : 'fail'}`} id="engine-line">
          {engine.found
            ? `Using ${engine.kind ?? 'engine'} ${engine.version ?? ''}${engine.rootless ? ' (rootless)' : ''}${engine.arch ? ` on ${engine.arch}` : ''}.`
            : engine.connecting
              ? 'Connecting to the container engine… (Cubicle has just started; this updates by itself.)'
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
  /** The node the page shows (undefined = this computer). */
  node?: string;
  /** Why nothing can be changed now ('' = it can): a disconnected runner. */
  locked: string;
}

function PrepareCard({ client, status, onChanged, node, locked }: CardProps) {
  const images = status.images ?? [];
  const [key, setKey] = useState('standard');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const prepare = async () => {
    setBusy(true);
    setError('');
    try {
      await client.prepareImage(key, node);
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
        Preparing an image first stops all VM tasks and running desktops on {node ? 'that runner' : 'this machine'}. Work files and browser profiles
        are kept.
      </p>
      <div class="inline-form">
        <label class="field">
          <span>Image</span>
          <select id="prepare-image" value={key} onChange={(e) => setKey(e.currentTarget.value)} disabled={busy || locked !== ''}>
            {(images.length > 0 ? images.map((i) => i.imageKey) : ['standard', 'cursor']).map((k) => (
              <option value={k} key={k}>
                {imageLabel(k)}
              </option>
            ))}
          </select>
        </label>
        <button class="btn primary" type="button" id="prepare-submit" onClick={() => void prepare()} disabled={busy || running || locked !== ''} title={locked || undefined}>
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

function PolicyCard({ client, status, onChanged, node, locked }: CardProps) {
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
      const p = await client.setVMPolicy(iso, n, node);
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
              disabled={busy || locked !== ''}
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
        <select id="max-instances" value={String(max)} disabled={busy || locked !== ''} onChange={(e) => void save(isolation, Number(e.currentTarget.value))}>
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

function IdleCard({ client, status, onChanged, node, locked }: CardProps) {
  const current = status.policy.idleStopMinutes;
  const currentPause = status.policy.pauseAfterMinutes ?? 0;
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [shown, setShown] = useState(current);
  const [pause, setPause] = useState(currentPause);
  useEffect(() => {
    if (!busy) {
      setShown(current);
      setPause(currentPause);
    }
  }, [current, currentPause]);
  const save = async (minutes: number, pauseMinutes?: number) => {
    setShown(minutes);
    if (pauseMinutes !== undefined) setPause(pauseMinutes);
    setBusy(true);
    setError('');
    try {
      const p = await client.setIdlePolicy(randomId(), minutes, node, pauseMinutes);
      setShown(p.idleStopMinutes);
      setPause(p.pauseAfterMinutes ?? 0);
      await onChanged();
    } catch (err) {
      setError(messageFor(err));
      setShown(current);
      setPause(currentPause);
    } finally {
      setBusy(false);
    }
  };
  const known = idlePresets.some((p) => p.minutes === shown);
  const knownPause = pausePresets.some((p) => p.minutes === pause);
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
        <select id="idle-stop" value={String(shown)} disabled={busy || locked !== ''} onChange={(e) => void save(Number(e.currentTarget.value))}>
          {idlePresets.map((p) => (
            <option value={String(p.minutes)} key={p.minutes}>
              {p.label}
            </option>
          ))}
          {!known && <option value={String(shown)}>{shown} minutes</option>}
        </select>
      </label>
      <label class="field inline">
        <span>Pause an idle desktop after</span>
        <select
          id="idle-pause"
          value={String(pause)}
          disabled={busy || locked !== ''}
          onChange={(e) => void save(shown, Number(e.currentTarget.value))}
          title="A paused desktop keeps its memory and uses no CPU; a chat turn or opening it resumes it at once."
        >
          {pausePresets.map((p) => (
            <option value={String(p.minutes)} key={p.minutes} disabled={p.minutes !== 0 && shown !== 0 && p.minutes >= shown}>
              {p.label}
            </option>
          ))}
          {!knownPause && <option value={String(pause)}>{pause} minutes</option>}
        </select>
      </label>
      <p class="muted small status-line" aria-live="polite" id="idle-status">
        {busy ? 'Saving…' : `Saved: ${shown === 0 ? 'never auto-stop' : `${shown} minute${shown === 1 ? '' : 's'}`}`}
      </p>
      <p class="muted small" id="idle-pause-status">
        {pause === 0
          ? 'Idle desktops are not paused before they stop.'
          : `Idle desktops are paused after ${pause} minute${pause === 1 ? '' : 's'} (memory kept, no CPU); using one resumes it at once.`}
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="idle-error">
          {error}
        </p>
      )}
    </div>
  );
}

function InstancesCard({
  client,
  status,
  stats,
  now,
  elapsed,
  onChanged,
  node,
  locked,
}: CardProps & { stats: Record<string, Stats>; now: number; elapsed: number }) {
  const instances = status.instances ?? [];
  const [busy, setBusy] = useState('');
  const [error, setError] = useState('');
  const [confirm, setConfirm] = useState<{ inst: InstanceView; action: 'stop' | 'remove'; why: string } | null>(null);
  const act = async (inst: InstanceView, action: 'stop' | 'remove', force = false) => {
    setBusy(`${inst.id}:${action}`);
    setError('');
    try {
      await client.adminDesktopAction(inst.id, action, force, node);
      setConfirm(null);
    } catch (err) {
      // In use: say by whom, and offer to do it anyway (their task or control ends).
      if (!force && err instanceof ApiError && err.status === 409 && inst.busyBy) setConfirm({ inst, action, why: err.message });
      else setError(messageFor(err));
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
      await client.deleteDesktopData(inst.id, node);
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
                <th scope="col">Owner</th>
                <th scope="col">Agents</th>
                <th scope="col">Node</th>
                <th scope="col">Image</th>
                <th scope="col">State</th>
                <th scope="col">Uptime</th>
                <th scope="col">Idle stop</th>
                <th scope="col">CPU</th>
                <th scope="col">Memory</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {instances.map((i) => {
                const left = i.idleStopInSeconds === undefined ? null : Math.max(0, i.idleStopInSeconds - elapsed);
                const s = i.state === 'running' ? stats[i.id] : undefined;
                return (
                  <tr key={i.id} data-instance={i.id} data-state={i.state} data-scope={i.scope} data-orphaned={i.orphaned ? '1' : '0'}>
                    <th scope="row">
                      {i.description}
                      {i.orphaned && (
                        <span class="badge warn block-badge" title="Its agent (or account) was deleted">
                          orphaned
                        </span>
                      )}
                      {i.task && <span class="muted small block">task desktop: removed when the helper's task ends</span>}
                      {i.busyBy && <span class="muted small block">{i.busyBy}</span>}
                      {i.lastError && <span class="form-error small block">{i.lastError}</span>}
                      {i.hostWall && i.hostWall !== 'on' && <span class="muted small block host-wall-off">{i.hostWall}</span>}
                    </th>
                    <td>{i.owner || <span class="muted">—</span>}</td>
                    <td class="agents-cell">{(i.agents ?? []).map((a) => a.name).join(', ') || <span class="muted">—</span>}</td>
                    <td>{i.nodeId || status.nodeId}</td>
                    <td>
                      {i.imageKey ? imageLabel(i.imageKey) : '—'}
                      {i.imagePending && <span class="muted small block">new image on recreate</span>}
                    </td>
                    <td>
                      <span class={`badge ${stateTone(i.state)}`}>{stateLabel(i.state)}</span>
                      {i.health === 'unhealthy' && <span class="badge fail">unhealthy</span>}
                      {i.guestLink && <span class="muted small block">{i.guestLink} link</span>}
                    </td>
                    <td class="uptime">{i.state === 'running' && i.startedAt ? formatUptime(now - Date.parse(i.startedAt)) : <span class="muted">—</span>}</td>
                    <td class="idle-left">{left === null ? <span class="muted">—</span> : formatCountdown(left)}</td>
                    <td class="cpu">{s ? `${s.cpuPercent.toFixed(1)}%` : <span class="muted">—</span>}</td>
                    <td class="memory">{s ? bytes(s.memoryBytes) : <span class="muted">—</span>}</td>
                    <td class="row-actions">
                      {!i.fixed && (
                        <>
                          <button
                            class="btn small"
                            type="button"
                            data-action="stop"
                            disabled={busy !== '' || locked !== '' || (i.state !== 'running' && i.state !== 'paused')}
                            title={i.task ? 'A task desktop is removed when stopped.' : undefined}
                            onClick={() => void act(i, 'stop')}
                          >
                            {busy === `${i.id}:stop` ? 'Stopping…' : 'Stop'}
                          </button>
                          <button
                            class="btn small danger"
                            type="button"
                            data-action="remove"
                            disabled={busy !== '' || locked !== '' || (i.state === 'absent' && !i.orphaned)}
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
                          disabled={busy !== '' || locked !== ''}
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
      {confirm && (
        <ConfirmDialog
          title={`${confirm.action === 'stop' ? 'Stop' : 'Remove'} a desktop in use?`}
          confirmLabel={confirm.action === 'stop' ? 'Stop anyway' : 'Remove anyway'}
          busy={busy !== ''}
          error=""
          onConfirm={() => void act(confirm.inst, confirm.action, true)}
          onCancel={() => setConfirm(null)}
        >
          <p>{confirm.why}</p>
          <p class="muted small">Doing it anyway ends their task or control first. Work files and the browser profile are kept.</p>
        </ConfirmDialog>
      )}
    </div>
  );
}
