// The application frame: who is signed in, which page the hash route shows, and the
// redirects between login and the rest.

import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type Client, type User } from './api';
import { TopBar } from './components/TopBar';
import { messageFor } from './errors';
import { EventHub } from './events';
import { EventsContext, useHashRoute } from './hooks';
import { AccountPage } from './pages/AccountPage';
import { AgentsPage } from './pages/AgentsPage';
import { ChatPage } from './pages/ChatPage';
import { GroupChatPage } from './pages/GroupChatPage';
import { LoginPage } from './pages/LoginPage';
import { SettingsPage } from './pages/SettingsPage';
import { isAppRoute } from './router';
import type { Shell } from './shell';

interface AppProps {
  client: Client;
  shell: Shell;
  /** The window event the client raises on a 401. */
  unauthenticatedEvent: string;
}

/** undefined: still asking the server; null: signed out. */
type SessionUser = User | null | undefined;

function go(hash: string) {
  if (window.location.hash !== hash) window.location.hash = hash;
}

/** The root component. */
export function App({ client, shell, unauthenticatedEvent }: AppProps) {
  const route = useHashRoute();
  const [user, setUser] = useState<SessionUser>(undefined);
  const [bootError, setBootError] = useState('');
  const [banner, setBanner] = useState('');
  // Where to go after logging in, when a page sent us to the login form.
  const afterLogin = useRef('#/agents');
  const readySent = useRef(false);
  const loggedOut = useRef(false);
  // The page's one event stream, while someone is signed in.
  const [hub, setHub] = useState<EventHub | null>(null);
  const userId = user ? user.id : '';
  useEffect(() => {
    if (userId === '') return;
    const h = new EventHub(client);
    h.start();
    setHub(h);
    return () => {
      h.stop();
      setHub(null);
    };
  }, [client, userId]);

  const loadUser = useCallback(async () => {
    setBootError('');
    try {
      setUser(await client.me());
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        setUser(null);
      } else {
        setBootError(messageFor(err));
      }
    }
  }, [client]);

  useEffect(() => {
    void loadUser();
  }, [loadUser]);

  // Any 401 from the API means the session is gone: back to the login form.
  useEffect(() => {
    const onUnauth = () => setUser(null);
    window.addEventListener(unauthenticatedEvent, onUnauth);
    return () => window.removeEventListener(unauthenticatedEvent, onUnauth);
  }, [unauthenticatedEvent]);

  // Redirects between the login page and the signed-in pages. A page that sent us to the
  // login form is remembered and reopened after logging in (not after a deliberate log out).
  useEffect(() => {
    if (user === undefined) return;
    if (user === null) {
      if (route.name !== 'login' && shell.kind === 'web') {
        const here = window.location.hash;
        afterLogin.current = !loggedOut.current && isAppRoute(here) ? here : '#/agents';
        go('#/login');
      }
      return;
    }
    loggedOut.current = false;
    if (route.name === 'login') {
      go(afterLogin.current);
    } else {
      afterLogin.current = '#/agents';
    }
  }, [user, route, shell.kind]);

  // Tell the desktop shell the first screen is up (its test waits for this).
  useEffect(() => {
    if (readySent.current || shell.kind !== 'desktop') return;
    if (user === undefined && bootError === '') return;
    readySent.current = true;
    requestAnimationFrame(() => shell.ready());
  }, [user, bootError, shell]);

  // The desktop window logs where the page is.
  useEffect(() => {
    if (shell.kind === 'desktop') shell.navigated(window.location.hash);
  }, [route, shell]);

  const logout = useCallback(async () => {
    setBanner('');
    try {
      await client.logout();
    } catch (err) {
      setBanner(`Could not log out: ${messageFor(err)}`);
      return;
    }
    loggedOut.current = true;
    afterLogin.current = '#/agents';
    setUser(null);
    go('#/login');
  }, [client]);

  if (bootError !== '') {
    return (
      <div class="boot boot-error" role="alert">
        <p>{bootError}</p>
        <button class="btn" type="button" onClick={() => void loadUser()}>
          Try again
        </button>
      </div>
    );
  }
  if (user === undefined) {
    return <div class="boot">Loading Cubicle…</div>;
  }
  if (user === null) {
    if (shell.kind === 'desktop') {
      return (
        <div class="boot boot-error" role="alert">
          The desktop backend refused this window's credentials. Restart Cubicle.
        </div>
      );
    }
    if (route.name !== 'login') return <div class="boot">Redirecting to login…</div>;
    return (
      <LoginPage
        client={client}
        onLogin={setUser}
      />
    );
  }

  let page;
  switch (route.name) {
    case 'login':
      page = <div class="boot">Signed in. Opening agents…</div>;
      break;
    case 'agents':
      page = <AgentsPage client={client} user={user} />;
      break;
    case 'agent':
      page = <ChatPage key={route.id} client={client} agentId={route.id} user={user} />;
      break;
    case 'group':
      page = <GroupChatPage key={route.id} client={client} chatId={route.id} user={user} />;
      break;
    case 'settings':
      page = <SettingsPage client={client} user={user} section={route.section} />;
      break;
    case 'account':
      page = <AccountPage client={client} user={user} />;
      break;
    case 'not-found':
      page = (
        <main class="page narrow">
          <h1>Page not found</h1>
          <p class="muted">
            There is nothing at <code>{route.hash}</code>. <a href="#/agents">Go to your agents</a>.
          </p>
        </main>
      );
      break;
  }

  return (
    <EventsContext.Provider value={hub}>
    <div class="shell">
      <TopBar user={user} route={route} canLogOut={shell.kind === 'web'} onLogout={logout} />
      {banner !== '' && (
        <div class="banner" role="alert">
          {banner}
          <button class="btn ghost small" type="button" onClick={() => setBanner('')}>
            Dismiss
          </button>
        </div>
      )}
      {page}
    </div>
    </EventsContext.Provider>
  );
}

