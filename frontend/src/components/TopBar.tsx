// The bar across the top: brand, main navigation, the signed-in user, log out.

import type { User } from '../api';
import type { Route } from '../router';

interface TopBarProps {
  user: User;
  route: Route;
  /** False in the desktop window, where the local user is always signed in. */
  canLogOut: boolean;
  onLogout: () => void;
}

/** The application's top bar. */
export function TopBar({ user, route, canLogOut, onLogout }: TopBarProps) {
  const inAgents = route.name === 'agents' || route.name === 'agent' || route.name === 'group';
  const inSettings = route.name === 'settings';
  const inAccount = route.name === 'account';
  const admin = user.role === 'admin';
  return (
    <header class="topbar">
      <a class="brand" href="#/agents" aria-label="Cubicle home">
        <svg viewBox="0 0 32 32" width="22" height="22" aria-hidden="true">
          <rect x="3" y="5" width="26" height="18" rx="3" fill="currentColor" />
          <rect x="11" y="25" width="10" height="3" rx="1" fill="currentColor" />
        </svg>
        <span>Cubicle</span>
      </a>
      <nav class="topnav" aria-label="Main">
        <a href="#/agents" class={inAgents ? 'active' : ''} aria-current={inAgents ? 'page' : undefined}>
          Agents
        </a>
        {admin && (
          <a
            id="settings-link"
            href="#/settings/local-vm"
            class={inSettings ? 'active' : ''}
            aria-current={inSettings ? 'page' : undefined}
          >
            Settings
          </a>
        )}
        <a id="account-link" href="#/account" class={inAccount ? 'active' : ''} aria-current={inAccount ? 'page' : undefined}>
          Account
        </a>
      </nav>
      <div class="topbar-user">
        <span class="user-chip" id="topbar-user" title={`Signed in as ${user.username} (${user.role})`}>
          <span class="avatar" aria-hidden="true">
            {user.username.slice(0, 1).toUpperCase()}
          </span>
          <span class="user-name">{user.username}</span>
        </span>
        {canLogOut && (
          <button id="logout-button" class="btn ghost small" type="button" onClick={onLogout}>
            Log out
          </button>
        )}
      </div>
    </header>
  );
}
