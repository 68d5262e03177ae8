// The agent list: create, rename, delete.

import { useEffect, useRef, useState } from 'preact/hooks';
import type { Agent, AgentDeletion, Client, User } from '../api';
import { AgentRow } from '../components/AgentRow';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { SetupPanel } from '../components/SetupPanel';
import { messageFor } from '../errors';
import { useEvents, useTitle } from '../hooks';
import { bytes } from '../settings/vmtext';

interface AgentsPageProps {
  client: Client;
  user: User;
}

/** Lists the user's agents, under the first-run panel until every step is done. */
export function AgentsPage({ client, user }: AgentsPageProps) {
  useTitle('Agents');
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [loadError, setLoadError] = useState('');
  const [name, setName] = useState('');
  const [creating, setCreating] = useState(false);
  const [createError, setCreateError] = useState('');
  const [toDelete, setToDelete] = useState<Agent | null>(null);
  const [deleting, setDeleting] = useState(false);
  const [deleteError, setDeleteError] = useState('');

  // Loads overlap (an agent.changed event while one is on its way): only the latest one's
  // answer is shown, so an older list never replaces a newer one.
  const loads = useRef(0);
  const load = async () => {
    const n = ++loads.current;
    setLoadError('');
    try {
      const list = await client.listAgents();
      if (n === loads.current) setAgents(list);
    } catch (err) {
      if (n === loads.current) setLoadError(messageFor(err));
    }
  };

  useEffect(() => {
    void load();
  }, [client]);
  // Agents made, renamed or deleted elsewhere (another window) show up here too.
  useEvents((e) => {
    if (e.type === 'agent.changed') void load();
  });

  const create = async (e: Event) => {
    e.preventDefault();
    if (creating) return;
    setCreating(true);
    setCreateError('');
    try {
      const agent = await client.createAgent(name.trim());
      // The agent.changed event's reload may have listed it already: never twice.
      setAgents((list) => [...(list ?? []).filter((a) => a.id !== agent.id), agent]);
      setName('');
    } catch (err) {
      setCreateError(messageFor(err));
    } finally {
      setCreating(false);
    }
  };

  const [removeDesktop, setRemoveDesktop] = useState(true);
  const [deleteData, setDeleteData] = useState(false);
  const [preview, setPreview] = useState<AgentDeletion | null>(null);
  const [sized, setSized] = useState(false);
  useEffect(() => {
    setPreview(null);
    setSized(false);
    setRemoveDesktop(true);
    setDeleteData(false);
    if (!toDelete) return;
    let live = true;
    let measured = false;
    // What it concerns at once, then the sizes (measuring volumes can take seconds).
    client.agentDeletion(toDelete.id, false).then(
      (p) => live && !measured && setPreview(p),
      () => undefined, // the measured answer below says what went wrong
    );
    client.agentDeletion(toDelete.id).then(
      (p) => {
        measured = true;
        if (!live) return;
        setPreview(p);
        setSized(true);
      },
      (err) => {
        if (!live) return;
        setDeleteError(messageFor(err));
        setSized(true);
      },
    );
    return () => {
      live = false;
    };
  }, [client, toDelete?.id]);

  const confirmDelete = async () => {
    if (!toDelete || deleting) return;
    setDeleting(true);
    setDeleteError('');
    try {
      await client.deleteAgent(toDelete.id, { removeDesktop, deleteData: removeDesktop && deleteData });
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

      <SetupPanel client={client} user={user} />

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
          <p>The agent and its settings are removed. This cannot be undone.</p>
          <DeletionChoices
            preview={preview}
            sized={sized}
            removeDesktop={removeDesktop}
            deleteData={deleteData}
            onRemoveDesktop={setRemoveDesktop}
            onDeleteData={setDeleteData}
          />
        </ConfirmDialog>
      )}
    </main>
  );
}

interface DeletionChoicesProps {
  preview: AgentDeletion | null;
  /** Whether the sizes were measured (the first answer comes without them). */
  sized: boolean;
  removeDesktop: boolean;
  deleteData: boolean;
  onRemoveDesktop: (v: boolean) => void;
  onDeleteData: (v: boolean) => void;
}

/**
 * What happens to the agent's desktop and data: stopping and removing its own desktop is
 * asked (on by default); deleting its work files and browser profile only when ticked, with
 * their size shown. A shared desktop stays: the account's other agents use it.
 */
function DeletionChoices({ preview, sized, removeDesktop, deleteData, onRemoveDesktop, onDeleteData }: DeletionChoicesProps) {
  if (!preview) return <p class="muted small">Looking at the agent's desktop…</p>;
  const own = preview.desktops;
  const running = own.some((d) => d.state === 'running');
  return (
    <div class="deletion-choices" id="delete-choices">
      {preview.busy && (
        <p class="form-error" role="alert" id="delete-busy">
          It cannot be deleted now: {preview.busy}.
        </p>
      )}
      {own.length === 0 ? (
        <p class="muted small" id="delete-no-desktop">
          {preview.shared ? 'It uses the shared desktop of your agents, which stays.' : 'It has no desktop of its own.'}
        </p>
      ) : (
        <>
          <label class="checkbox">
            <input id="delete-remove-desktop" type="checkbox" checked={removeDesktop} onChange={(e) => onRemoveDesktop(e.currentTarget.checked)} />
            <span>
              <span class="checkbox-label">{running ? 'Stop and remove its desktop' : 'Remove its desktop'}</span>
              <span class="muted small">
                {own.map((d) => `${d.description} (${d.state})`).join('; ')}. Unticked, it keeps running without an agent until an
                administrator stops it.
              </span>
            </span>
          </label>
          <label class="checkbox">
            <input
              id="delete-data"
              type="checkbox"
              checked={removeDesktop && deleteData}
              disabled={!removeDesktop || preview.volumes.length === 0}
              onChange={(e) => onDeleteData(e.currentTarget.checked)}
            />
            <span>
              <span class="checkbox-label">
                Also delete its work files and browser profile (<span id="delete-size" data-measured={sized ? '1' : '0'}>{sized ? bytes(preview.sizeBytes) : 'measuring…'}</span>)
              </span>
              <span class="muted small">
                {preview.volumes.map((v) => `${v.kind === 'workspace' ? 'work files' : 'browser profile'} ${sized ? bytes(v.sizeBytes) : '…'}`).join(', ')}
                {preview.sizeProblem ? ` — ${preview.sizeProblem}` : ''}. Unticked, they are kept (Settings → Local VM →
                Leftovers lists them).
              </span>
            </span>
          </label>
        </>
      )}
    </div>
  );
}
