// Where an agent's desktop runs: this computer or a runner (PUT /api/app/agents/:id/node).
// Shown to administrators (who can list the runners) when at least one runner exists; moving
// is refused by the server while the agent's desktop runs, a task runs or a person controls it.

import { useEffect, useState } from 'preact/hooks';
import type { Client, Runner } from '../api';
import { messageFor } from '../errors';
import type { BusEvent } from '../events';
import { useServerState } from '../hooks';

interface NodePickerProps {
  client: Client;
  agentId: string;
  /** Called after the agent moved (the Local VM view then shows the new node's desktop). */
  onMoved: () => void;
}

/** The node picker of the computer panel. */
export function NodePicker({ client, agentId, onMoved }: NodePickerProps) {
  // The runners and their status follow runner.status events (administrators only).
  const list = useServerState(() => client.listRunners(), [client], { when: (e: BusEvent) => e.type === 'runner.status' });
  const runners: Runner[] | null = list.data;
  const [node, setNode] = useState('local');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    let live = true;
    client.getAgent(agentId).then((a) => live && setNode(a.nodeId ?? 'local'), () => {});
    return () => {
      live = false;
    };
  }, [client, agentId]);

  const usable = (runners ?? []).filter((r) => r.status !== 'revoked' || r.id === node);
  if (usable.length === 0) return null;

  const move = async (to: string) => {
    setBusy(true);
    setError('');
    try {
      const res = await client.setAgentNode(agentId, to);
      setNode(res.nodeId);
      onMoved();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="node-picker">
      <label class="field">
        <span>Runs on</span>
        <select id="vm-node" value={node} disabled={busy} onChange={(e) => void move(e.currentTarget.value)}>
          <option value="local">This computer</option>
          {usable.map((r) => (
            <option key={r.id} value={r.id}>
              {r.name} ({r.status}
              {r.cloud ? ', cloud' : ''})
            </option>
          ))}
        </select>
      </label>
      {error !== '' && (
        <p class="form-error small" role="alert" id="vm-node-error">
          {error}
        </p>
      )}
    </div>
  );
}
