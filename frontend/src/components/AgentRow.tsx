// One agent in the agent list, with inline rename.

import { useState } from 'preact/hooks';
import type { Agent, Client } from '../api';
import { computerLabel } from '../computer';
import { messageFor } from '../errors';
import { hrefFor } from '../router';

interface AgentRowProps {
  client: Client;
  agent: Agent;
  onRenamed: (agent: Agent) => void;
  onDelete: (agent: Agent) => void;
}

/** A list row: name (a link to the chat), computer type, rename and delete. */
export function AgentRow({ client, agent, onRenamed, onDelete }: AgentRowProps) {
  const [editing, setEditing] = useState(false);
  const [name, setName] = useState(agent.name);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');

  const save = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setError('');
    try {
      onRenamed(await client.renameAgent(agent.id, name.trim()));
      setEditing(false);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  if (editing) {
    return (
      <li class="agent-row editing" data-agent-id={agent.id}>
        <form class="rename-form" onSubmit={save}>
          <label class="sr-only" for={`rename-${agent.id}`}>
            New name for {agent.name}
          </label>
          <input
            id={`rename-${agent.id}`}
            class="rename-input"
            value={name}
            maxLength={200}
            ref={(el) => el?.focus()}
            onInput={(e) => setName(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === 'Escape') {
                setEditing(false);
                setError('');
              }
            }}
          />
          <button class="btn primary small" type="submit" disabled={busy || name.trim() === ''}>
            {busy ? 'Saving…' : 'Save'}
          </button>
          <button
            class="btn ghost small"
            type="button"
            disabled={busy}
            onClick={() => {
              setEditing(false);
              setError('');
            }}
          >
            Cancel
          </button>
        </form>
        {error !== '' && (
          <p class="form-error" role="alert">
            {error}
          </p>
        )}
      </li>
    );
  }

  return (
    <li class="agent-row" data-agent-id={agent.id}>
      <a class="agent-link" href={hrefFor({ name: 'agent', id: agent.id })}>
        <span class="agent-avatar" aria-hidden="true">
          {agent.name.slice(0, 1).toUpperCase()}
        </span>
        <span class="agent-text">
          <span class="agent-name">{agent.name}</span>
          <span class="agent-meta">
            {computerLabel(agent.computer)}
            {agent.allowHostEnvironment ? ' · host environment allowed' : ''}
          </span>
        </span>
      </a>
      <div class="row-actions">
        <button
          class="btn ghost small"
          type="button"
          aria-label={`Rename ${agent.name}`}
          onClick={() => {
            setName(agent.name);
            setEditing(true);
          }}
        >
          Rename
        </button>
        <button class="btn ghost small danger-text" type="button" aria-label={`Delete ${agent.name}`} onClick={() => onDelete(agent)}>
          Delete
        </button>
      </div>
    </li>
  );
}
