// The form that makes a group chat: a title and two or more of the person's agents. The
// server checks the members (its own agents, 2 to 8, each once) and says what is wrong.

import { useState } from 'preact/hooks';
import type { Agent, Client, GroupChat } from '../api';
import { messageFor } from '../errors';

interface NewGroupChatProps {
  client: Client;
  agents: Agent[];
  onCreated: (c: GroupChat) => void;
  onCancel: () => void;
}

/** The new group chat form. */
export function NewGroupChat({ client, agents, onCreated, onCancel }: NewGroupChatProps) {
  const [title, setTitle] = useState('');
  const [picked, setPicked] = useState<string[]>([]);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  const toggle = (id: string, on: boolean) => setPicked((p) => (on ? [...p.filter((x) => x !== id), id] : p.filter((x) => x !== id)));

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      onCreated(await client.createGroupChat(title, picked));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="popover new-group" id="new-group" aria-label="New group chat" onSubmit={(e) => void submit(e)}>
      <p class="small">
        <strong>New group chat</strong> — pick two or more agents. Each keeps its own computer, history and model; address one
        with <code>@name</code>, or let them take turns.
      </p>
      <label class="small">
        Title (optional)
        <input id="group-title" type="text" value={title} maxLength={100} onInput={(e) => setTitle(e.currentTarget.value)} />
      </label>
      <fieldset class="group-members">
        <legend class="small">Members</legend>
        {agents.length === 0 && <p class="muted small">You have no agents yet.</p>}
        {agents.map((a) => (
          <label key={a.id} class="small check">
            <input type="checkbox" data-agent={a.id} checked={picked.includes(a.id)} onChange={(e) => toggle(a.id, e.currentTarget.checked)} />
            {a.name}
          </label>
        ))}
      </fieldset>
      {error !== '' && (
        <p class="form-error small" id="group-error" role="alert">
          {error}
        </p>
      )}
      <div class="row">
        <button class="btn small primary" type="submit" id="group-create" disabled={busy}>
          {busy ? 'Creating…' : 'Create'}
        </button>
        <button class="btn small ghost" type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
