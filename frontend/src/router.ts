// Hash routes of the UI (#/settings/model is the model section). Parsing is pure so it can be tested without a browser.

/** A parsed hash route. */
export type Route =
  | { name: 'login' }
  | { name: 'agents' }
  | { name: 'agent'; id: string }
  | { name: 'group'; id: string }
  | { name: 'settings'; section: SettingsSection }
  | { name: 'account' }
  | { name: 'not-found'; hash: string };

/** Sections of the Settings page. */
export type SettingsSection = 'setup' | 'local-vm' | 'model' | 'users' | 'security' | 'tools' | 'host' | 'runners';

const settingsSections: readonly SettingsSection[] = ['setup', 'local-vm', 'model', 'users', 'security', 'tools', 'host', 'runners'];

/** Parses location.hash ("#/agents/abc") into a Route. An empty hash is the agent list. */
export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, '').replace(/\/+$/, '');
  if (path === '' || path === '/') return { name: 'agents' };
  const parts = path.split('/').filter((p) => p !== '');
  switch (parts[0]) {
    case 'login':
      if (parts.length === 1) return { name: 'login' };
      break;
    case 'agents':
      if (parts.length === 1) return { name: 'agents' };
      if (parts.length === 2) {
        try {
          return { name: 'agent', id: decodeURIComponent(parts[1]) };
        } catch {
          break; // malformed escape
        }
      }
      break;
    case 'groups':
      if (parts.length === 2) {
        try {
          return { name: 'group', id: decodeURIComponent(parts[1]) };
        } catch {
          break; // malformed escape
        }
      }
      break;
    case 'settings':
      if (parts.length === 1 || (parts.length === 2 && parts[1] === 'local-vm')) {
        return { name: 'settings', section: 'local-vm' };
      }
      if (parts.length === 2 && (settingsSections as readonly string[]).includes(parts[1])) {
        return { name: 'settings', section: parts[1] as SettingsSection };
      }
      break;
    case 'account':
      if (parts.length === 1) return { name: 'account' };
      break;
  }
  return { name: 'not-found', hash };
}

/** The hash for a route (the inverse of parseRoute). */
export function hrefFor(route: Route): string {
  switch (route.name) {
    case 'login':
      return '#/login';
    case 'agents':
      return '#/agents';
    case 'agent':
      return `#/agents/${encodeURIComponent(route.id)}`;
    case 'group':
      return `#/groups/${encodeURIComponent(route.id)}`;
    case 'settings':
      return `#/settings/${route.section}`;
    case 'account':
      return '#/account';
    case 'not-found':
      return route.hash;
  }
}

/** Whether a string from outside (a desktop menu event) is one of our routes. */
export function isAppRoute(hash: unknown): hash is string {
  return typeof hash === 'string' && hash.startsWith('#/') && parseRoute(hash).name !== 'not-found';
}
