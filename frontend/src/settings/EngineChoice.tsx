// Settings → Local VM → "Where desktops run": the node's engine (find one, Podman, Docker, a
// Kubernetes cluster, or off). The server checks a cluster before it saves it; the choice
// applies when Cubicle next starts (desktops cannot move between engines while they run),
// and flags or environment variables of the process override it — both are shown as the
// server reports them.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Client, type EngineSettings, type EngineStatus } from '../api';
import { randomId } from '../chat';
import { messageFor } from '../errors';

const kinds = [
  { v: '', label: 'Find one', hint: 'Podman first, then Docker' },
  { v: 'podman', label: 'Podman', hint: '' },
  { v: 'docker', label: 'Docker', hint: '' },
  { v: 'kubernetes', label: 'Kubernetes', hint: 'Desktops as Pods of a cluster' },
  { v: 'none', label: 'Off', hint: 'No Local VM on this node' },
];

const fields: { key: keyof EngineSettings; label: string; placeholder: string }[] = [
  { key: 'kubeconfig', label: 'Kubeconfig file on this node', placeholder: '$KUBECONFIG or ~/.kube/config' },
  { key: 'context', label: 'Context', placeholder: 'the current context' },
  { key: 'namespace', label: 'Namespace', placeholder: "the context's namespace" },
  { key: 'storageClass', label: 'Storage class', placeholder: "the cluster's default" },
  { key: 'volumeSize', label: 'Volume size', placeholder: '10Gi' },
  { key: 'registry', label: 'Image registry', placeholder: 'registry.example.com/cubicle' },
];

/** The engine choice card. */
export function EngineChoiceCard({ client, onForbidden }: { client: Client; onForbidden: () => void }) {
  const [status, setStatus] = useState<EngineStatus | null>(null);
  const [form, setForm] = useState<EngineSettings>({});
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [note, setNote] = useState('');

  const load = async () => {
    try {
      const st = await client.engine();
      setStatus(st);
      setForm(st.saved);
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) onForbidden();
      else setError(messageFor(err));
    }
  };
  useEffect(() => {
    void load();
  }, [client]);

  const save = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setNote('');
    try {
      const st = await client.setEngine(randomId(), form);
      setStatus(st);
      setForm(st.saved);
      setNote(st.restartNeeded ? 'Saved. It applies when Cubicle next starts.' : 'Saved.');
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const kind = form.kind ?? '';
  return (
    <div class="card" id="engine-choice-card">
      <div class="card-head">
        <h3>Where desktops run</h3>
      </div>
      {status && (
        <p class="muted small" id="engine-active">
          {status.active
            ? `Now: ${status.active}${status.endpoint ? ` at ${status.endpoint}` : ''}${status.settings.namespace ? `, namespace ${status.settings.namespace}` : ''}.`
            : `Now: no engine${status.problem ? ` (${status.problem})` : ''}.`}
          {status.overrides && status.overrides.length > 0 && ` Overridden here by: ${status.overrides.join(', ')}.`}
          {status.restartNeeded && ' The saved choice applies when Cubicle next starts.'}
        </p>
      )}
      {status?.imagesProblem && (
        <p class="form-error" role="alert" id="engine-images-problem">
          {status.imagesProblem}
        </p>
      )}
      <form onSubmit={(e) => void save(e)}>
        <div class="segmented" role="radiogroup" aria-label="Engine" id="engine-kind">
          {kinds.map((k) => (
            <label class={`choice${kind === k.v ? ' selected' : ''}`} key={k.v} title={k.hint}>
              <input
                type="radio"
                name="engine-kind"
                value={k.v}
                checked={kind === k.v}
                disabled={busy}
                onChange={() => setForm({ ...form, kind: k.v })}
              />
              <span class="choice-label">{k.label}</span>
            </label>
          ))}
        </div>
        {kind === 'kubernetes' && (
          <>
            <p class="muted small">
              Each desktop is a Pod in the namespace; its workspace and browser profile are PersistentVolumeClaims that
              stopping or removing the desktop keeps. Prepared images are built here and pushed to the registry; the
              cluster pulls them by digest. The kubeconfig's user needs the Role in docs/kubernetes-rbac.yaml.
            </p>
            {fields.map((f) => (
              <label class="field" key={f.key}>
                <span>{f.label}</span>
                <input
                  type="text"
                  id={`engine-${f.key}`}
                  value={(form[f.key] as string | undefined) ?? ''}
                  placeholder={f.placeholder}
                  disabled={busy}
                  onInput={(e) => setForm({ ...form, [f.key]: e.currentTarget.value })}
                />
              </label>
            ))}
            <label class="field inline">
              <input
                type="checkbox"
                id="engine-registryInsecure"
                checked={form.registryInsecure ?? false}
                disabled={busy}
                onChange={(e) => setForm({ ...form, registryInsecure: e.currentTarget.checked })}
              />
              <span>Plain HTTP registry (a loopback or private one)</span>
            </label>
          </>
        )}
        <button class="btn primary small" type="submit" id="engine-save" disabled={busy}>
          {busy ? (kind === 'kubernetes' ? 'Checking the cluster…' : 'Saving…') : 'Save'}
        </button>
      </form>
      <p class="muted small status-line" aria-live="polite" id="engine-status">
        {note}
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="engine-error">
          {error}
        </p>
      )}
    </div>
  );
}
