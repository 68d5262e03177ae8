// The chat page's left column: the user's agents.

import type { Agent } from '../api';
import { computerLabel } from '../computer';
import { hrefFor } from '../router';

interface AgentSidebarProps {
  agents: Agent[] | null;
  activeId: string;
  error: string;
  onNavigate: () => void;
}

/** The agent list beside a chat (a drawer on phones). */
export function AgentSidebar({ agents, activeId, error, onNavigate }: AgentSidebarProps) {
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
    </nav>
  );
}
