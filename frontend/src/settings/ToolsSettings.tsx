// Settings → Tools (admin only): the MCP servers agents may use. Each server has its transport
// (streamable HTTP, the older SSE, or stdio run inside the agent's desktop), its secrets
// (headers, environment values: write-only, shown masked) and its access policy — a default
// effect (deny for a new server) and rules for users, agents or everyone, on the whole server
// or one tool. Which agents use a server is chosen in the agent's computer panel. The server
// validates; this page shows what it answers.

import { useState } from 'preact/hooks';
import type { Client, McpPolicy, McpRule, McpServer, McpServerInput } from '../api';
import { messageFor } from '../errors';
import { useServerState } from '../hooks';

const effects = ['deny', 'ask', 'allow'];

/** Lines "Name: value" (headers) or "NAME=value" (environment) to a map; a masked value keeps the saved one (null). */
export function secretLines(text: string, sep: ':' | '=', saved: Record<string, string>): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const i = line.indexOf(sep);
    const name = (i < 0 ? line : line.slice(0, i)).trim();
    const value = i < 0 ? '' : line.slice(i + 1).trim();
    out[name] = saved[name] !== undefined && value === saved[name] ? null : value;
  }
  return out;
}

const showSecrets = (m: Record<string, string>, sep: string) =>
  Object.entries(m)
    .map(([k, v]) => `${k}${sep}${v}`)
    .join('\n');

/** The add/edit form of one server (its connection; the policy has its own editor). */
function ServerForm({ server, onSave, onCancel }: { server?: McpServer; onSave: (s: McpServerInput) => Promise<void>; onCancel: () => void }) {
  const [name, setName] = useState(server?.name ?? '');
  const [transport, setTransport] = useState(server?.transport ?? 'http');
  const [description, setDescription] = useState(server?.description ?? '');
  const [url, setUrl] = useState(server?.url ?? '');
  const [headers, setHeaders] = useState(showSecrets(server?.headers ?? {}, ': '));
  const [allowPrivate, setAllowPrivate] = useState(server?.allowPrivate ?? false);
  const [command, setCommand] = useState(server?.command ?? '');
  const [onServer, setOnServer] = useState(server?.onServer ?? false);
  const [args, setArgs] = useState((server?.args ?? []).join('\n'));
  const [env, setEnv] = useState(showSecrets(server?.env ?? {}, '='));
  const [timeout, setTimeoutS] = useState(String(server?.timeoutSeconds ?? 60));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const stdio = transport === 'stdio';
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    const input: McpServerInput = { name: name.trim(), transport, description, timeoutSeconds: Number(timeout) || 0 };
    if (stdio) {
      input.command = command;
      input.onServer = onServer;
      input.args = args.split('\n').filter((a) => a.trim() !== '');
      input.env = secretLines(env, '=', server?.env ?? {});
    } else {
      input.url = url;
      input.allowPrivate = allowPrivate;
      input.headers = secretLines(headers, ':', server?.headers ?? {});
    }
    try {
      await onSave(input);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="form-grid mcp-form" id={server ? `mcp-edit-${server.id}` : 'mcp-add'} onSubmit={submit}>
      <label class="field">
        <span>Name (tools appear as mcp_&lt;name&gt;_&lt;tool&gt;)</span>
        <input class="mcp-name" value={name} disabled={busy} onInput={(e) => setName(e.currentTarget.value)} placeholder="files" />
      </label>
      <label class="field">
        <span>Transport</span>
        <select class="mcp-transport" value={transport} disabled={busy} onChange={(e) => setTransport(e.currentTarget.value)}>
          <option value="http">http — streamable HTTP</option>
          <option value="sse">sse — the older HTTP + SSE</option>
          <option value="stdio">stdio — a command run inside the agent's desktop</option>
        </select>
      </label>
      <label class="field">
        <span>Description</span>
        <input class="mcp-description" value={description} disabled={busy} onInput={(e) => setDescription(e.currentTarget.value)} />
      </label>
      {stdio ? (
        <>
          <label class="field">
            <span>{onServer ? "Command (run on this server, in its OS sandbox)" : "Command (run in the agent's desktop, which is its sandbox)"}</span>
            <input class="mcp-command" value={command} disabled={busy} onInput={(e) => setCommand(e.currentTarget.value)} placeholder="npx" />
          </label>
          <label class="checkbox">
            <input type="checkbox" class="mcp-on-server" checked={onServer} disabled={busy} onChange={(e) => setOnServer(e.currentTarget.checked)} />
            <span class="checkbox-label">
              Runs on the server, not in the agent's desktop: in the OS sandbox of host tools (Settings → Security → host sandbox), only for accounts
              with host access to this server
            </span>
          </label>
          <label class="field">
            <span>Arguments (one per line)</span>
            <textarea class="mcp-args" rows={3} value={args} disabled={busy} onInput={(e) => setArgs(e.currentTarget.value)} />
          </label>
          <label class="field">
            <span>Environment (NAME=value per line; saved values show masked and are kept as they are)</span>
            <textarea class="mcp-env" rows={2} value={env} disabled={busy} onInput={(e) => setEnv(e.currentTarget.value)} />
          </label>
        </>
      ) : (
        <>
          <label class="field">
            <span>URL</span>
            <input class="mcp-url" value={url} disabled={busy} onInput={(e) => setUrl(e.currentTarget.value)} placeholder="https://mcp.example.com/mcp" />
          </label>
          <label class="field">
            <span>Headers (Name: value per line, e.g. Authorization: Bearer …; saved values show masked and are kept as they are)</span>
            <textarea class="mcp-headers" rows={2} value={headers} disabled={busy} onInput={(e) => setHeaders(e.currentTarget.value)} />
          </label>
          <label class="checkbox">
            <input type="checkbox" class="mcp-private" checked={allowPrivate} disabled={busy} onChange={(e) => setAllowPrivate(e.currentTarget.checked)} />
            <span class="checkbox-label">The URL may be a loopback or private address</span>
          </label>
        </>
      )}
      <label class="field">
        <span>Timeout of a tool call (seconds)</span>
        <input class="mcp-timeout" type="number" min={1} max={600} value={timeout} disabled={busy} onInput={(e) => setTimeoutS(e.currentTarget.value)} />
      </label>
      {error !== '' && (
        <p class="form-error mcp-error" role="alert">
          {error}
        </p>
      )}
      <div>
        <button class="btn small" type="submit" disabled={busy}>
          Save
        </button>{' '}
        <button class="btn small ghost" type="button" disabled={busy} onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** Tools & permissions of one server: the default effect and the rules. */
function PolicyEditor({ server, onSave }: { server: McpServer; onSave: (p: McpPolicy) => Promise<void> }) {
  const [def, setDef] = useState(server.policy.default || 'deny');
  const [rules, setRules] = useState<McpRule[]>(server.policy.rules ?? []);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [saved, setSaved] = useState(false);
  const change = (i: number, r: Partial<McpRule>) => setRules(rules.map((x, j) => (j === i ? { ...x, ...r } : x)));
  const save = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setSaved(false);
    try {
      await onSave({ default: def, rules: rules.map((r) => ({ ...r, tool: (r.tool ?? '').trim(), subject: r.subject.trim() })) });
      setSaved(true);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="mcp-policy" id={`mcp-policy-${server.id}`} onSubmit={save}>
      <h4>Tools &amp; permissions</h4>
      <p class="muted small">
        A rule for one tool beats the server's rules; among rules of one level agent:ID beats user:NAME beats *, and then deny beats ask
        beats allow. Ask shows the confirmation card in the chat and is a deny when nobody answers in time.
      </p>
      <label class="field">
        <span>Everyone else (the server's default)</span>
        <select class="mcp-default" value={def} disabled={busy} onChange={(e) => setDef(e.currentTarget.value)}>
          {effects.map((x) => (
            <option key={x} value={x}>
              {x}
            </option>
          ))}
        </select>
      </label>
      <table class="doctor-table mcp-rules">
        <thead>
          <tr>
            <th>Tool (empty: every tool)</th>
            <th>Subject (user:NAME, agent:ID or *)</th>
            <th>Effect</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {rules.map((r, i) => (
            <tr key={i}>
              <td>
                <input class="mcp-rule-tool" value={r.tool ?? ''} disabled={busy} onInput={(e) => change(i, { tool: e.currentTarget.value })} />
              </td>
              <td>
                <input class="mcp-rule-subject" value={r.subject} disabled={busy} onInput={(e) => change(i, { subject: e.currentTarget.value })} />
              </td>
              <td>
                <select class="mcp-rule-effect" value={r.effect} disabled={busy} onChange={(e) => change(i, { effect: e.currentTarget.value })}>
                  {effects.map((x) => (
                    <option key={x} value={x}>
                      {x}
                    </option>
                  ))}
                </select>
              </td>
              <td>
                <button class="btn small ghost" type="button" disabled={busy} onClick={() => setRules(rules.filter((_, j) => j !== i))}>
                  Remove
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {error !== '' && (
        <p class="form-error mcp-policy-error" role="alert">
          {error}
        </p>
      )}
      <div>
        <button class="btn small ghost mcp-add-rule" type="button" disabled={busy} onClick={() => setRules([...rules, { tool: '', subject: '*', effect: 'allow' }])}>
          Add rule
        </button>{' '}
        <button class="btn small" type="submit" disabled={busy}>
          Save permissions
        </button>
        {saved && <span class="muted small"> Saved.</span>}
      </div>
    </form>
  );
}

/** The Tools section: the list of MCP servers, each editable, and the add form. */
export function ToolsSettings({ client }: { client: Client }) {
  const st = useServerState<McpServer[]>(() => client.listMcpServers(), [client]);
  const [editing, setEditing] = useState(''); // a server id, "new", or ""
  const [open, setOpen] = useState(''); // the server whose permissions are shown
  const [error, setError] = useState('');
  const servers = st.data ?? [];
  const remove = async (s: McpServer) => {
    if (!window.confirm(`Delete the MCP server ${s.name}? Its agents lose its tools.`)) return;
    setError('');
    try {
      await client.deleteMcpServer(s.id);
      st.set(servers.filter((x) => x.id !== s.id));
    } catch (err) {
      setError(messageFor(err));
    }
  };
  const replace = (s: McpServer) => st.set(servers.some((x) => x.id === s.id) ? servers.map((x) => (x.id === s.id ? s : x)) : [...servers, s]);
  return (
    <section class="settings-section" id="tools-settings">
      <div class="card" id="mcp-servers-card">
        <div class="card-head">
          <h3>MCP servers</h3>
          {editing !== 'new' && (
            <button class="btn small" type="button" id="mcp-add-button" onClick={() => setEditing('new')}>
              Add server
            </button>
          )}
        </div>
        <p class="muted small">
          Tools of MCP servers agents may use, offered to the model as mcp_&lt;server&gt;_&lt;tool&gt;. A new server denies everyone
          until you open it under Tools &amp; permissions; the tool guard still judges commands and paths in the arguments. Choose the
          agents that use a server in each agent's computer panel.
        </p>
        {st.error !== '' && <p class="form-error">{st.error}</p>}
        {error !== '' && (
          <p class="form-error" role="alert">
            {error}
          </p>
        )}
        {editing === 'new' && (
          <ServerForm
            onCancel={() => setEditing('')}
            onSave={async (input) => {
              const s = await client.createMcpServer(input);
              replace(s);
              setEditing('');
              setOpen(s.id);
            }}
          />
        )}
        {servers.length === 0 && editing !== 'new' && <p class="muted">No MCP servers yet.</p>}
        <ul class="mcp-list">
          {servers.map((s) => (
            <li key={s.id} class="mcp-server" data-server={s.id}>
              <div class="mcp-server-head">
                <strong>{s.name}</strong> <span class="muted small">{s.transport === 'stdio' && s.onServer ? 'stdio, on the server' : s.transport}</span>{' '}
                <code class="small">{s.transport === 'stdio' ? [s.command, ...s.args].join(' ') : s.url}</code>
                {s.disabled && <span class="muted small"> · off</span>}
                <span class="muted small">
                  {' '}
                  · default {s.policy.default} · {(s.policy.rules ?? []).length} rule{(s.policy.rules ?? []).length === 1 ? '' : 's'} · {s.agents.length} agent
                  {s.agents.length === 1 ? '' : 's'}
                </span>
              </div>
              {s.description !== '' && <p class="muted small">{s.description}</p>}
              <div>
                <button class="btn small ghost" type="button" onClick={() => setOpen(open === s.id ? '' : s.id)}>
                  Tools &amp; permissions
                </button>{' '}
                <button class="btn small ghost" type="button" onClick={() => setEditing(editing === s.id ? '' : s.id)}>
                  Edit
                </button>{' '}
                <button
                  class="btn small ghost"
                  type="button"
                  onClick={async () => {
                    setError('');
                    try {
                      replace(await client.updateMcpServer(s.id, { disabled: !s.disabled }));
                    } catch (err) {
                      setError(messageFor(err));
                    }
                  }}
                >
                  {s.disabled ? 'Turn on' : 'Turn off'}
                </button>{' '}
                <button class="btn small ghost danger" type="button" onClick={() => void remove(s)}>
                  Delete
                </button>
              </div>
              {editing === s.id && (
                <ServerForm
                  server={s}
                  onCancel={() => setEditing('')}
                  onSave={async (input) => {
                    replace(await client.updateMcpServer(s.id, input));
                    setEditing('');
                  }}
                />
              )}
              {open === s.id && <PolicyEditor key={s.id} server={s} onSave={async (p) => replace(await client.updateMcpServer(s.id, { policy: p }))} />}
            </li>
          ))}
        </ul>
      </div>
    </section>
  );
}
