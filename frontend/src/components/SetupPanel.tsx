// The first-run panel (issue 30): the four steps a new server needs — a container engine, the
// standard desktop image (prepared by itself on the first start, with its progress and
// Cancel), a model (provider, key, Test: the Model settings form), and the first agent with
// its computer. Administrators complete them here; members see which are missing and that an
// administrator completes them. The server says each step's state (GET /api/app/admin/setup,
// GET /api/app/setup); the panel only shows it and calls the routes that change it.

import { useEffect, useRef, useState } from 'preact/hooks';
import type { Client, ComputerType, SetupStatus, User } from '../api';
import { messageFor } from '../errors';
import { useEvents } from '../hooks';
import { applyPrepare, currentStep, progressValue, stateLabels, stepKeys, stepsLeft, stepTitles, type StepKey } from '../setup';
import { ModelSettingsForm } from './ModelSettingsForm';

interface SetupPanelProps {
  client: Client;
  user: User;
  /** Shown in Settings: stays when every step is done. On the agents page it hides itself then. */
  standalone?: boolean;
}

const tone: Record<string, string> = { done: 'ok', needed: '', working: 'pending', failed: 'fail' };

/** The first-run panel. */
export function SetupPanel({ client, user, standalone = false }: SetupPanelProps) {
  const admin = user.role === 'admin';
  const [st, setSt] = useState<SetupStatus | null>(null);
  const [loadError, setLoadError] = useState('');
  const [open, setOpen] = useState<StepKey | null>(null);
  const [busy, setBusy] = useState(false);
  const [actionError, setActionError] = useState('');
  const loading = useRef(false);
  const again = useRef(false);

  const load = async () => {
    // One read at a time; a change meanwhile reads once more after it.
    if (loading.current) {
      again.current = true;
      return;
    }
    loading.current = true;
    try {
      do {
        again.current = false;
        const next = admin ? await client.adminSetup() : await client.setup();
        setSt(next);
        setLoadError('');
      } while (again.current);
    } catch (err) {
      setLoadError(messageFor(err));
    } finally {
      loading.current = false;
    }
  };

  useEffect(() => {
    void load();
  }, [client, admin]);

  const stRef = useRef(st);
  stRef.current = st;
  useEvents((e) => {
    if (e.type === 'prepare.progress') {
      const cur = stRef.current;
      if (!cur) return;
      const next = applyPrepare(cur, e.data);
      if (next === null) void load();
      else if (next !== 'ignore') setSt(next);
    } else if (e.type === 'agent.changed' || e.type === 'images.changed') {
      void load();
    }
  });

  if (st === null) {
    if (loadError === '') return null;
    return (
      <section class="card setup-panel" id="setup-panel" aria-label="Getting started">
        <p class="form-error" role="alert">
          Could not read the first-run steps: {loadError}
        </p>
        <button class="btn small" type="button" onClick={() => void load()}>
          Try again
        </button>
      </section>
    );
  }
  if (st.done && !standalone) return null;

  const now = currentStep(st);
  const shown = open ?? now;
  const left = stepsLeft(st);

  const act = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setActionError('');
    try {
      await fn();
    } catch (err) {
      setActionError(messageFor(err));
    } finally {
      setBusy(false);
      void load();
    }
  };

  return (
    <section class="card setup-panel" id="setup-panel" aria-labelledby="setup-title" data-done={st.done ? '1' : '0'}>
      <div class="setup-head">
        <h2 id="setup-title">Getting started</h2>
        <p class="muted small" id="setup-summary">
          {st.done
            ? 'Every step is done: agents can work on their computers.'
            : admin
              ? `${left} of 4 steps left.${st.image.state === 'working' ? ' The desktop image is being prepared in the background meanwhile.' : ''}`
              : `${left} of 4 steps left. An administrator completes the steps marked “Administrator”.`}
        </p>
      </div>
      <ol class="setup-steps">
        {stepKeys.map((k, i) => {
          const s = st[k];
          const pct = progressValue(s);
          const expanded = admin && shown === k;
          return (
            <li class={`setup-step${expanded ? ' open' : ''}`} key={k} id={`setup-${k}`} data-state={s.state}>
              <div class="setup-step-head">
                <span class="setup-num" aria-hidden="true">
                  {s.state === 'done' ? '✓' : i + 1}
                </span>
                {admin ? (
                  <button
                    class="linklike setup-title"
                    type="button"
                    aria-expanded={expanded}
                    onClick={() => setOpen(expanded ? (now === k ? null : now) : k)}
                  >
                    {stepTitles[k]}
                  </button>
                ) : (
                  <span class="setup-title">{stepTitles[k]}</span>
                )}
                <span class={`badge ${tone[s.state]}`} id={`setup-${k}-state`}>
                  {stateLabels[s.state]}
                </span>
                {!admin && s.admin && s.state !== 'done' && <span class="badge">Administrator</span>}
              </div>
              {s.detail !== '' && (
                <p class={`small setup-detail ${s.state === 'failed' ? 'form-error' : 'muted'}`} id={`setup-${k}-detail`}>
                  {s.detail}
                </p>
              )}
              {k === 'image' && s.state === 'working' && (
                <div class="progress" role="progressbar" aria-label="Image preparation" aria-valuemin={0} aria-valuemax={100} aria-valuenow={pct ?? undefined}>
                  <div class={`bar${pct === null ? ' indeterminate' : ''}`} style={pct === null ? undefined : { width: `${pct}%` }} />
                </div>
              )}
              {admin && k === 'image' && s.state === 'working' && (
                <button class="btn small" type="button" id="setup-image-cancel" disabled={busy} onClick={() => void act(() => client.cancelImagePrepare())}>
                  Cancel
                </button>
              )}
              {expanded && <StepBody k={k} client={client} st={st} busy={busy} act={act} reload={() => void load()} />}
              {!admin && k === 'agents' && s.state !== 'done' && (
                <p class="small muted">Create an agent below, then choose its computer in its computer panel.</p>
              )}
            </li>
          );
        })}
      </ol>
      {actionError !== '' && (
        <p class="form-error" role="alert" id="setup-error">
          {actionError}
        </p>
      )}
    </section>
  );
}

interface StepBodyProps {
  k: StepKey;
  client: Client;
  st: SetupStatus;
  busy: boolean;
  act: (fn: () => Promise<unknown>) => Promise<void>;
  reload: () => void;
}

/** What an administrator does in the open step. */
function StepBody({ k, client, st, busy, act, reload }: StepBodyProps) {
  switch (k) {
    case 'engine':
      return st.engine.state === 'done' ? null : (
        <div class="setup-actions">
          <button class="btn small" type="button" id="setup-engine-check" disabled={busy} onClick={reload}>
            Check again
          </button>
          <a class="small" href="#/settings/local-vm">
            Settings → Local VM
          </a>
        </div>
      );
    case 'image':
      return st.image.state === 'needed' || st.image.state === 'failed' ? (
        <div class="setup-actions">
          <button
            class="btn primary small"
            type="button"
            id="setup-image-prepare"
            disabled={busy || st.engine.state !== 'done'}
            onClick={() => void act(() => client.prepareImage('standard'))}
          >
            Prepare
          </button>
        </div>
      ) : null;
    case 'model':
      return <ModelSettingsForm scope="app" client={client} onChanged={reload} embedded />;
    case 'agents':
      return <FirstAgent client={client} onMade={reload} />;
  }
}

const computers: Array<{ id: ComputerType; label: string }> = [
  { id: 'vm', label: 'Its own desktop (Local VM)' },
  { id: 'browser', label: 'A browser only' },
  { id: 'host', label: 'This computer (host)' },
];

/** Step 4: a name and a computer; makes the agent and opens it. */
function FirstAgent({ client, onMade }: { client: Client; onMade: () => void }) {
  const [name, setName] = useState('');
  const [computer, setComputer] = useState<ComputerType>('vm');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy || name.trim() === '') return;
    setBusy(true);
    setError('');
    try {
      const a = await client.createAgent(name.trim());
      if (a.computer !== computer) await client.setComputerSelection(a.id, { computer, allowHostEnvironment: false });
      onMade();
      window.location.hash = `#/agents/${encodeURIComponent(a.id)}`;
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="setup-agent form-grid" id="setup-agent-form" onSubmit={submit}>
      <label class="field">
        <span>Name</span>
        <input id="setup-agent-name" placeholder="e.g. Researcher" value={name} maxLength={200} onInput={(e) => setName(e.currentTarget.value)} />
      </label>
      <label class="field">
        <span>Computer</span>
        <select id="setup-agent-computer" value={computer} onChange={(e) => setComputer(e.currentTarget.value as ComputerType)}>
          {computers.map((c) => (
            <option key={c.id} value={c.id}>
              {c.label}
            </option>
          ))}
        </select>
      </label>
      <div class="form-actions">
        <button class="btn primary" type="submit" id="setup-agent-create" disabled={busy || name.trim() === ''}>
          {busy ? 'Creating…' : 'Create and open'}
        </button>
      </div>
      {error !== '' && (
        <p class="form-error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}
