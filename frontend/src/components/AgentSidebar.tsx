// The chat page's left column: the user's agents and their group chats.

import { useState } from 'preact/hooks';
import type { Agent, Client } from '../api';
import { computerLabel } from '../computer';
import { initial } from '../groupchat';
import { useServerState } from '../hooks';
import { hrefFor } from '../router';
import { NewGroupChat } from './NewGroupChat';

interface AgentSidebarProps {
  agents: Agent[] | null;
  activeId: string;
  error: string;
  onNavigate: () => void;
  /** With a client the sidebar also lists the group chats and makes new ones. */
  client?: Client;
  /** The group chat shown now ('' for none). */
  activeGroupId?: string;
}

/** The agent list beside a chat (a drawer on phones). */
export function AgentSidebar({ agents, activeId, error, onNavigate, client, activeGroupId = '' }: AgentSidebarProps) {
  return (
    <nav class="sidebar" id="agent-sidebar" aria-label="Agents">
      <div class="sidebar-head">
        <span>Agents</span>
        <a class="btn ghost small" href="#/agents" onClick={onNavigate}>
          Manage
        </a>
      </div>
      {error !== '' && <p class="form-error small">{error}</p>}
      {agents === null && error === '' && <p class="muted small pad">Loading…</p>}
      <ul class="sidebar-list">
        {(agents ?? []).map((a) => (
          <li key={a.id}>
            <a
              href={hrefFor({ name: 'agent', id: a.id })}
              class={a.id === activeId ? 'active' : ''}
              aria-current={a.id === activeId ? 'page' : undefined}
              onClick={onNavigate}
            >
              <span class="agent-avatar small" aria-hidden="true">
                {a.name.slice(0, 1).toUpperCase()}
              </span>
              <span class="agent-text">
                <span class="agent-name">{a.name}</span>
                <span class="agent-meta">{computerLabel(a.computer)}</span>
              </span>
            </a>
          </li>
        ))}
      </ul>
      {client && <GroupList client={client} agents={agents ?? []} activeId={activeGroupId} onNavigate={onNavigate} />}
    </nav>
  );
}

/** The group chats, most recently used first, and the form for a new one. */
function GroupList({ client, agents, activeId, onNavigate }: { client: Client; agents: Agent[]; activeId: string; onNavigate: () => void }) {
  const groups = useServerState(() => client.groupChats(), [client, activeId]);
  const [creating, setCreating] = useState(false);
  return (
    <div class="group-list" id="group-list">
      <div class="sidebar-head">
        <span>Group chats</span>
        <button class="btn ghost small" type="button" id="new-group-toggle" aria-expanded={creating} onClick={() => setCreating(!creating)}>
          + New
        </button>
      </div>
      {creating && (
        <NewGroupChat
          client={client}
          agents={agents}
          onCancel={() => setCreating(false)}
          onCreated={(c) => {
            setCreating(false);
            void groups.reload();
            onNavigate();
            window.location.hash = hrefFor({ name: 'group', id: c.id });
          }}
        />
      )}
      {groups.error !== '' && <p class="form-error small">{groups.error}</p>}
      {groups.data !== null && groups.data.length === 0 && !creating && <p class="muted small pad">None yet.</p>}
      <ul class="sidebar-list">
        {(groups.data ?? []).map((g) => (
          <li key={g.id}>
            <a
              href={hrefFor({ name: 'group', id: g.id })}
              class={g.id === activeId ? 'active' : ''}
              aria-current={g.id === activeId ? 'page' : undefined}
              data-group={g.id}
              onClick={onNavigate}
            >
              <span class="group-avatars" aria-hidden="true">
                {g.members.slice(0, 3).map((m) => (
                  <span class="agent-avatar small" key={m.agentId}>
                    {initial(m.name)}
                  </span>
                ))}
              </span>
              <span class="agent-text">
                <span class="agent-name">{g.title}</span>
                <span class="agent-meta">{g.members.length} agents</span>
              </span>
            </a>
          </li>
        ))}
      </ul>
    </div>
  );
}
