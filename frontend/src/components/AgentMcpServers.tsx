// The MCP servers section of the computer panel: which of the servers an administrator added
// (Settings → Tools) this agent uses. Nothing is shown when there are none.

import { useEffect, useState } from 'preact/hooks';
import type { AgentMcpServer, Client } from '../api';
import { messageFor } from '../errors';

/** A checkbox per MCP server; each change is saved at once. */
export function AgentMcpServers({ client, agentId }: { client: Client; agentId: string }) {
  const [servers, setServers] = useState<AgentMcpServer[]>([]);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  useEffect(() => {
    setServers([]);
    setError('');
    client.agentMcpServers(agentId).then(setServers, (err) => setError(messageFor(err)));
  }, [client, agentId]);
  const toggle = async (id: string, on: boolean) => {
    setBusy(true);
    setError('');
    const before = servers;
    const next = servers.map((s) => (s.id === id ? { ...s, enabled: on } : s));
    setServers(next); // shown at once; the server's answer replaces it
    try {
      setServers(await client.setAgentMcpServers(agentId, next.filter((s) => s.enabled).map((s) => s.id)));
    } catch (err) {
      setServers(before);
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  if (servers.length === 0 && error === '') return null;
  return (
    <section class="panel-section" id="agent-mcp-servers" aria-labelledby="agent-mcp-title">
      <h3 id="agent-mcp-title">MCP servers</h3>
      {error !== '' && <p class="form-error small">{error}</p>}
      {servers.map((s) => (
        <label class="checkbox" key={s.id} data-server={s.id}>
          <input type="checkbox" checked={s.enabled} disabled={busy} onChange={(e) => void toggle(s.id, e.currentTarget.checked)} />
          <span class="checkbox-label">
            {s.name} <span class="muted small">{s.transport}{s.disabled ? ' · turned off' : ''}{s.description ? ` · ${s.description}` : ''}</span>
          </span>
        </label>
      ))}
      <p class="muted small">What each may do is set by an administrator (Settings → Tools → Tools &amp; permissions).</p>
    </section>
  );
}
