// Settings → Security (admin only, SPEC §2.4, §3): the tool guard's level, denied tools,
// protected paths (host and desktops), the per-tool access policy, the model endpoints agents
// may use, the host ports desktops may reach; the saved "always allow" rules (listed and
// removable) and the record of every confirmation a person gave. The server validates; this
// page shows what it answers.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type AllowRule, type Client, type Confirmation, type ModelEndpoint, type SecuritySettings } from '../api';
import { messageFor } from '../errors';
import { EgressCard } from './EgressCard';
import { SandboxCard } from './SandboxCard';
import { Forbidden } from './Forbidden';

const levelHelp: Record<string, string> = {
  STRICT: 'asks before every tool call',
  SMART: 'asks when a HIGH or CRITICAL rule matches',
  AUTO: 'asks when any rule matches (default)',
  OFF: 'never asks (denied tools, the access policy and protected paths still apply)',
};

const lines = (s: string) =>
  s
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');

/** The Security section. */
export function SecuritySettingsSection({ client }: { client: Client }) {
  const [view, setView] = useState<SecuritySettings | null>(null);
  const [forbidden, setForbidden] = useState(false);
  const [loadError, setLoadError] = useState('');

  const load = async () => {
    try {
      setView(await client.getSecurity());
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) setForbidden(true);
      else setLoadError(messageFor(err));
    }
  };
  useEffect(() => {
    void load();
  }, [client]);

  if (forbidden) return <Forbidden />;
  return (
    <section class="settings-section" id="security-settings" aria-labelledby="security-title">
      <h2 id="security-title">Security</h2>
      <p class="muted">
        Every tool call an agent makes passes the access policy, the tool guard and the file guard before it runs. Desktops
        cannot reach this machine's services except the ports listed below.
      </p>
      {loadError !== '' && (
        <p class="form-error" role="alert">
          Could not load the security settings: {loadError}
        </p>
      )}
      {view === null ? <p class="muted">Loading…</p> : <SettingsForm client={client} view={view} onSaved={setView} />}
      <SandboxCard client={client} />
      <EgressCard client={client} />
      <RulesCard client={client} />
      <ConfirmationsCard client={client} />
    </section>
  );
}

function SettingsForm({ client, view, onSaved }: { client: Client; view: SecuritySettings; onSaved: (v: SecuritySettings) => void }) {
  const [level, setLevel] = useState(view.guardLevel);
  const [denied, setDenied] = useState(view.deniedTools.join('\n'));
  const [paths, setPaths] = useState(view.protectedPaths.join('\n'));
  const [vmPaths, setVMPaths] = useState(view.vmProtectedPaths.join('\n'));
  const [policy, setPolicy] = useState<Record<string, string>>({ ...view.accessPolicy });
  const [endpoints, setEndpoints] = useState<ModelEndpoint[]>(view.modelEndpoints.map((e) => ({ ...e })));
  const [ports, setPorts] = useState(view.desktopHostPorts.join(', '));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [saved, setSaved] = useState(false);

  const tools = Array.from(new Set([...(view.knownTools ?? []), ...Object.keys(policy)])).sort();

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setSaved(false);
    const portList = ports
      .split(/[\s,]+/)
      .filter((p) => p !== '')
      .map((p) => Number(p));
    try {
      const v = await client.setSecurity({
        guardLevel: level,
        deniedTools: lines(denied),
        protectedPaths: lines(paths),
        vmProtectedPaths: lines(vmPaths),
        accessPolicy: Object.fromEntries(Object.entries(policy).filter(([, d]) => d !== '')),
        modelEndpoints: endpoints.filter((ep) => ep.baseUrl.trim() !== ''),
        desktopHostPorts: portList,
      });
      onSaved(v);
      setSaved(true);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="card form-grid" id="security-form" onSubmit={submit}>
      <div class="card-head">
        <h3>Safety settings</h3>
        <span class="muted small" id="security-level-now">
          In force: {view.effectiveLevel}
        </span>
      </div>
      <label class="field">
        <span>Tool guard level</span>
        <select id="security-level" value={level} disabled={busy} onChange={(e) => setLevel(e.currentTarget.value)}>
          <option value="">Default ({view.guardLevel === '' ? view.effectiveLevel : 'AUTO'})</option>
          {view.levels.map((l) => (
            <option key={l} value={l}>
              {l} — {levelHelp[l] ?? ''}
            </option>
          ))}
        </select>
      </label>
      <label class="field">
        <span>Denied tools (one per line; patterns like host_* work)</span>
        <textarea id="security-denied" rows={3} value={denied} disabled={busy} onInput={(e) => setDenied(e.currentTarget.value)} />
      </label>
      <label class="field">
        <span>Protected paths for host tools (one per line)</span>
        <textarea id="security-paths" rows={3} value={paths} disabled={busy} onInput={(e) => setPaths(e.currentTarget.value)} />
        <span class="muted small">
          A path starting with ~/ is in the home directory of the host the tool runs on: this machine's, or a runner's.
          Always protected: {view.builtinProtected.join(', ')}
        </span>
      </label>
      <label class="field">
        <span>Protected paths in desktops (one per line)</span>
        <textarea id="security-vm-paths" rows={2} value={vmPaths} disabled={busy} onInput={(e) => setVMPaths(e.currentTarget.value)} />
        <span class="muted small">Always protected: {view.builtinVmProtected.join(', ')}</span>
      </label>
      <fieldset class="field">
        <legend>Access policy per tool (unknown tools are always denied)</legend>
        <div class="table-wrap">
          <table class="doctor-table" id="security-policy">
            <tbody>
              {tools.map((tool) => (
                <tr key={tool}>
                  <th scope="row">
                    <code>{tool}</code>
                  </th>
                  <td>
                    <select
                      aria-label={`Policy for ${tool}`}
                      data-tool={tool}
                      value={policy[tool] ?? ''}
                      disabled={busy}
                      onChange={(e) => setPolicy({ ...policy, [tool]: e.currentTarget.value })}
                    >
                      <option value="">allow (default)</option>
                      <option value="ask">ask</option>
                      <option value="deny">deny</option>
                      <option value="allow">allow</option>
                    </select>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </fieldset>
      <fieldset class="field" id="security-endpoints">
        <legend>Model endpoints members may give their agents</legend>
        {endpoints.map((ep, i) => (
          <div class="inline-form" key={i}>
            <input
              type="url"
              class="endpoint-url"
              placeholder="https://api.example.com/v1"
              value={ep.baseUrl}
              disabled={busy}
              onInput={(e) => {
                const next = [...endpoints];
                next[i] = { ...ep, baseUrl: e.currentTarget.value };
                setEndpoints(next);
              }}
            />
            <label class="checkbox">
              <input
                type="checkbox"
                checked={ep.allowPrivate === true}
                disabled={busy}
                onChange={(e) => {
                  const next = [...endpoints];
                  next[i] = { ...ep, allowPrivate: e.currentTarget.checked };
                  setEndpoints(next);
                }}
              />
              <span class="checkbox-label">may be a private or loopback address</span>
            </label>
            <button class="btn small" type="button" disabled={busy} onClick={() => setEndpoints(endpoints.filter((_, j) => j !== i))}>
              Remove
            </button>
          </div>
        ))}
        <button class="btn small" type="button" id="security-endpoint-add" disabled={busy} onClick={() => setEndpoints([...endpoints, { baseUrl: '' }])}>
          Add endpoint
        </button>
      </fieldset>
      <label class="field">
        <span>Host ports desktops may reach (comma-separated; everything else on this machine is blocked)</span>
        <input id="security-ports" type="text" value={ports} disabled={busy} onInput={(e) => setPorts(e.currentTarget.value)} />
      </label>
      <div class="form-actions">
        <button class="btn primary" type="submit" id="security-save" disabled={busy}>
          {busy ? 'Saving…' : 'Save'}
        </button>
        {saved && (
          <span class="muted small" role="status" id="security-saved">
            Saved.
          </span>
        )}
      </div>
      {error !== '' && (
        <p class="form-error" role="alert" id="security-error">
          {error}
        </p>
      )}
    </form>
  );
}

function RulesCard({ client }: { client: Client }) {
  const [rules, setRules] = useState<AllowRule[] | null>(null);
  const [error, setError] = useState('');
  const [tool, setTool] = useState('computer_shell');
  const [command, setCommand] = useState('');
  const load = async () => {
    try {
      setRules(await client.allowRules());
    } catch (err) {
      setError(messageFor(err));
    }
  };
  useEffect(() => {
    void load();
  }, [client]);
  const del = async (r: AllowRule) => {
    setError('');
    try {
      await client.deleteAllowRule(r);
    } catch (err) {
      setError(messageFor(err));
    }
    await load();
  };
  const add = async (e: Event) => {
    e.preventDefault();
    setError('');
    try {
      await client.addAllowRule({ tool: tool.trim(), command: command.trim() || undefined });
      setCommand('');
    } catch (err) {
      setError(messageFor(err));
    }
    await load();
  };
  return (
    <div class="card" id="rules-card">
      <div class="card-head">
        <h3>"Always allow" rules</h3>
      </div>
      <p class="muted small">
        A rule matches one command at a time, as the shell reads it, and never allows a CRITICAL finding. People add them when
        confirming a call; agents' owners can remove their own.
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="rules-error">
          {error}
        </p>
      )}
      {rules !== null && rules.length === 0 && (
        <p class="muted" id="rules-empty">
          No rules.
        </p>
      )}
      {rules !== null && rules.length > 0 && (
        <div class="table-wrap">
          <table class="doctor-table" id="rules-table">
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">Tool</th>
                <th scope="col">Allows</th>
                <th scope="col">Added by</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rules.map((r) => (
                <tr key={r.id} data-rule={r.id}>
                  <td>{r.agentId ? r.agentName || r.agentId : <em>every agent</em>}</td>
                  <td>
                    <code>{r.tool}</code>
                  </td>
                  <td>
                    <code>{r.command ? r.command : r.pattern ? `re: ${r.pattern}` : 'every call'}</code>
                  </td>
                  <td class="muted small">
                    {r.createdByName ?? ''} {new Date(r.createdAt).toLocaleString()}
                  </td>
                  <td class="row-actions">
                    <button class="btn small danger rule-delete" type="button" onClick={() => void del(r)}>
                      Remove
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <form class="inline-form" id="rule-add-form" onSubmit={add}>
        <input aria-label="Tool" type="text" value={tool} onInput={(e) => setTool(e.currentTarget.value)} />
        <input
          aria-label="Command"
          id="rule-add-command"
          type="text"
          placeholder="exact command, e.g. systemctl restart nginx"
          value={command}
          onInput={(e) => setCommand(e.currentTarget.value)}
        />
        <button class="btn small" type="submit" id="rule-add">
          Add for every agent
        </button>
      </form>
    </div>
  );
}

function ConfirmationsCard({ client }: { client: Client }) {
  const [items, setItems] = useState<Confirmation[] | null>(null);
  const [error, setError] = useState('');
  useEffect(() => {
    client.confirmations(100).then(setItems, (err) => setError(messageFor(err)));
  }, [client]);
  return (
    <div class="card" id="confirmations-card">
      <div class="card-head">
        <h3>Confirmations</h3>
        <span class="muted small">who confirmed or declined what, newest first</span>
      </div>
      {error !== '' && <p class="form-error">{error}</p>}
      {items !== null && items.length === 0 && <p class="muted">No confirmations yet.</p>}
      {items !== null && items.length > 0 && (
        <div class="table-wrap">
          <table class="doctor-table" id="confirmations-table">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Who</th>
                <th scope="col">Tool call</th>
                <th scope="col">Answer</th>
              </tr>
            </thead>
            <tbody>
              {items.map((c) => (
                <tr key={c.id}>
                  <td class="muted small">{new Date(c.at).toLocaleString()}</td>
                  <td>{c.username}</td>
                  <td>
                    <code>{c.tool}</code> {c.summary}
                    {c.reason && <span class="muted small block">{c.reason}</span>}
                  </td>
                  <td>
                    {c.confirmed ? 'confirmed' : 'declined'}
                    {c.rules && c.rules.length > 0 && <span class="muted small block">rule: {c.rules.join(', ')}</span>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
