// The agent list: create, rename, delete.

import { useEffect, useState } from 'preact/hooks';
import type { Agent, Client } from '../api';
import { AgentRow } from '../components/AgentRow';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { messageFor } from '../errors';
import { useTitle } from '../hooks';

interface AgentsPageProps {
  client: Client;
}

/** Lists the user's agents. */
export function AgentsPage({ client }: AgentsPageProps) {
  useTitle('Agents');
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [loadError, setLoadError] = useState('');
  const [name, setName] = useState('');
  const [creating, setCreating] = useState(false);
  const [createError, setCreateError] = useState('');
  const [toDelete, setToDelete] = useState<Agent | null>(null);
  const [deleting, setDeleting] = useState(false);
  const [deleteError, setDeleteError] = useState('');

  const load = async () => {
    setLoadError('');
    try {
      setAgents(await client.listAgents());
    } catch (err) {
      setLoadError(messageFor(err));
    }
  };

  useEffect(() => {
    void load();
  }, [client]);

  const create = async (e: Event) => {
    e.preventDefault();
    if (creating) return;
    setCreating(true);
    setCreateError('');
    try {
      const agent = await client.createAgent(name.trim());
      setAgents((list) => [...(list ?? []), agent]);
      setName('');
    } catch (err) {
      setCreateError(messageFor(err));
    } finally {
      setCreating(false);
    }
  };

  const confirmDelete = async () => {
    if (!toDelete || deleting) return;
    setDeleting(true);
    setDeleteError('');
    try {
      await client.deleteAgent(toDelete.id);
      const gone = toDelete.id;
      setAgents((list) => (list ?? []).filter((a) => a.id !== gone));
      setToDelete(null);
    } catch (err) {
      setDeleteError(messageFor(err));
    } finally {
      setDeleting(false);
    }
  };

  return (
    <main class="page narrow">
      <div class="page-head">
        <h1>Agents</h1>
        <p class="muted">Each agent chats with you and works on its own computer.</p>
      </div>

      <form class="card create-form" onSubmit={create} aria-label="Create an agent">
        <label class="field grow">
          <span>New agent</span>
          <input
            id="agent-create-name"
            placeholder="Name, e.g. Researcher"
            value={name}
            maxLength={200}
            onInput={(e) => setName(e.currentTarget.value)}
          />
        </label>
        <button id="agent-create-submit" class="btn primary" type="submit" disabled={creating || name.trim() === ''}>
          {creating ? 'Creating…' : 'Create agent'}
        </button>
        {createError !== '' && (
          <p class="form-error full" role="alert">
            {createError}
          </p>
        )}
      </form>

      {loadError !== '' && (
        <div class="notice error" role="alert">
          <p>Could not load your agents: {loadError}</p>
          <button class="btn small" type="button" onClick={() => void load()}>
            Try again
          </button>
        </div>
      )}
      {agents === null && loadError === '' && <p class="muted">Loading agents…</p>}
      {agents !== null && agents.length === 0 && (
        <div class="empty-state" id="agents-empty">
          <p class="empty-title">No agents yet</p>
          <p class="muted">Create your first agent above, then open it to chat and pick its computer.</p>
        </div>
      )}
      {agents !== null && agents.length > 0 && (
        <ul class="agent-list card" id="agent-list">
          {agents.map((a) => (
            <AgentRow
              key={a.id}
              client={client}
              agent={a}
              onRenamed={(updated) => setAgents((list) => (list ?? []).map((x) => (x.id === updated.id ? updated : x)))}
              onDelete={(agent) => {
                setDeleteError('');
                setToDelete(agent);
              }}
            />
          ))}
        </ul>
      )}

      {toDelete && (
        <ConfirmDialog
          title={`Delete ${toDelete.name}?`}
          confirmLabel="Delete agent"
          busy={deleting}
          error={deleteError}
          onConfirm={() => void confirmDelete()}
          onCancel={() => setToDelete(null)}
        >
          <p>
            The agent and its settings are removed. This cannot be undone.
          </p>
        </ConfirmDialog>
      )}
    </main>
  );
}
