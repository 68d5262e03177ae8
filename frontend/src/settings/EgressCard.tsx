// Settings → Security → Desktop network (admin only, docs/egress.md): what this node's desktops
// may reach — open, an allow-list of names, addresses and CIDRs, or closed — per node and per
// agent, and the destinations the policy refused, each of which can be allowed with one click.
// It follows desktop.egress_blocked on the event stream. The server validates; this card shows
// what it answers.

import { useState } from 'preact/hooks';
import type { Agent, Client, EgressPolicy, EgressView, Runner } from '../api';
import { messageFor } from '../errors';
import { useServerState } from '../hooks';

const modeHelp: Record<string, string> = {
  open: 'the internet (this machine stays walled off)',
  'allow-list': 'only the names, addresses and CIDRs listed; DNS answers only the listed names',
  closed: 'nothing',
};

const entries = (s: string) =>
  s
    .split(/[\s,]+/)
    .map((l) => l.trim())
    .filter((l) => l !== '');

/** The policy editor for the node or one agent. */
function PolicyForm({
  id,
  policy,
  inheritLabel,
  onSave,
}: {
  id: string;
  policy: EgressPolicy | null;
  inheritLabel?: string;
  onSave: (p: { mode: string; allow?: string[] } | null) => Promise<void>;
}) {
  const [mode, setMode] = useState(policy === null ? '' : policy.mode || 'open');
  const [allow, setAllow] = useState((policy?.allow ?? []).join('\n'));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      await onSave(mode === '' ? null : { mode, allow: mode === 'allow-list' ? entries(allow) : [] });
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="form-grid egress-form" id={id} onSubmit={submit}>
      <label class="field">
        <span>Desktops may reach</span>
        <select class="egress-mode" value={mode} disabled={busy} onChange={(e) => setMode(e.currentTarget.value)}>
          {inheritLabel !== undefined && <option value="">{inheritLabel}</option>}
          {Object.keys(modeHelp).map((m) => (
            <option key={m} value={m}>
              {m} — {modeHelp[m]}
            </option>
          ))}
        </select>
      </label>
      {mode === 'allow-list' && (
        <label class="field">
          <span>Allowed (one per line: example.com, *.example.com, 10.0.0.5, 10.0.0.0/24)</span>
          <textarea class="egress-allow" rows={4} value={allow} disabled={busy} onInput={(e) => setAllow(e.currentTarget.value)} />
        </label>
      )}
      {error !== '' && (
        <p class="form-error egress-error" role="alert">
          {error}
        </p>
      )}
      <div>
        <button class="btn small" type="submit" disabled={busy}>
          Save
        </button>
      </div>
    </form>
  );
}

/** The Desktop network card. */
export function EgressCard({ client }: { client: Client }) {
  const [node, setNode] = useState(''); // '' = this server's own node, else a runner's id
  const st = useServerState<EgressView>(() => client.getEgress(node), [client, node], {
    when: (e) => e.type === 'desktop.egress_blocked',
  });
  const runners = useServerState<Runner[]>(() => client.listRunners().catch(() => []), [client]);
  const agents = useServerState<Agent[]>(() => client.listAgents(), [client]);
  const [agentId, setAgentId] = useState('');
  const [error, setError] = useState('');
  const v = st.data;
  const name = (id?: string) => (id ? (agents.data ?? []).find((a) => a.id === id)?.name || id : 'shared desktop');
  const allow = async (agent: string | undefined, destination: string) => {
    setError('');
    try {
      st.set(await client.allowEgress(agent ?? '', destination, node));
    } catch (err) {
      setError(messageFor(err));
    }
  };
  const own = v?.agents.find((a) => a.agentId === agentId);
  return (
    <div class="card" id="egress-card">
      <div class="card-head">
        <h3>Desktop network</h3>
        {v && <span class="muted small">node {v.nodeId}</span>}
      </div>
      <p class="muted small">
        What this node's desktops may reach on the network, enforced outside the desktop. Model endpoints, runner links and the
        link to a desktop's driver are not affected.
      </p>
      {(runners.data ?? []).length > 0 && (
        <label class="field">
          <span>Node</span>
          <select id="egress-node" value={node} onChange={(e) => setNode(e.currentTarget.value)}>
            <option value="">this server</option>
            {(runners.data ?? []).map((r) => (
              <option key={r.id} value={r.id}>
                runner {r.name}
                {r.status !== 'connected' ? ` (${r.status})` : ''}
              </option>
            ))}
          </select>
        </label>
      )}
      {st.error !== '' && <p class="form-error">{st.error}</p>}
      {v?.enforcement && <p class="muted small" id="egress-enforcement">{v.enforcement}</p>}
      {v?.problem && (
        <p class="form-error" role="alert">
          {v.problem}
        </p>
      )}
      {v && (
        <PolicyForm
          key={`node-${v.node.updatedAt ?? ''}`}
          id="egress-node-form"
          policy={v.node}
          onSave={async (p) => st.set(await client.setNodeEgress(v.nodeId, p ?? { mode: 'open' }))}
        />
      )}
      {v && (agents.data ?? []).length > 0 && (
        <div class="egress-agent">
          <label class="field">
            <span>An agent's own policy</span>
            <select id="egress-agent" value={agentId} onChange={(e) => setAgentId(e.currentTarget.value)}>
              <option value="">Choose an agent…</option>
              {(agents.data ?? []).map((a) => (
                <option key={a.id} value={a.id}>
                  {a.name}
                  {v.agents.some((x) => x.agentId === a.id) ? ' (own policy)' : ''}
                </option>
              ))}
            </select>
          </label>
          {agentId !== '' && (
            <PolicyForm
              key={`agent-${agentId}-${own?.policy.updatedAt ?? ''}`}
              id="egress-agent-form"
              policy={own ? own.policy : null}
              inheritLabel="the node's policy"
              onSave={async (p) => st.set(await client.setAgentEgress(agentId, p))}
            />
          )}
        </div>
      )}
      <h4>Refused destinations</h4>
      {error !== '' && (
        <p class="form-error" role="alert" id="egress-allow-error">
          {error}
        </p>
      )}
      {v && v.blocked.length === 0 && (
        <p class="muted" id="egress-blocked-empty">
          Nothing refused since the server started.
        </p>
      )}
      {v && v.blocked.length > 0 && (
        <div class="table-wrap">
          <table class="doctor-table" id="egress-blocked">
            <thead>
              <tr>
                <th scope="col">Last</th>
                <th scope="col">Agent</th>
                <th scope="col">Destination</th>
                <th scope="col">Times</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {v.blocked.map((b) => (
                <tr key={`${b.instanceId} ${b.destination} ${b.proto}`} data-destination={b.destination}>
                  <td class="muted small">{new Date(b.last).toLocaleString()}</td>
                  <td>{name(b.agentId)}</td>
                  <td>
                    <code>
                      {b.destination}
                      {b.port ? `:${b.port}` : ''}
                    </code>{' '}
                    <span class="muted small">{b.proto === 'dns' ? 'name' : b.proto}</span>
                  </td>
                  <td>{b.count}</td>
                  <td class="row-actions">
                    <button class="btn small egress-allow-one" type="button" onClick={() => void allow(b.agentId, b.destination)}>
                      Allow
                    </button>
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
