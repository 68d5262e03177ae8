// The sign-in form of the web shell.

import { useState } from 'preact/hooks';
import { ApiError, type Client, type User } from '../api';
import { messageFor } from '../errors';
import { useTitle } from '../hooks';

interface LoginPageProps {
  client: Client;
  onLogin: (user: User) => void;
}

/** Username/password form; errors are shown inline. */
export function LoginPage({ client, onLogin }: LoginPageProps) {
  useTitle('Log in');
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');

  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setError('');
    try {
      const user = await client.login(username.trim(), password);
      onLogin(user);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        setError('Wrong username or password');
      } else {
        setError(messageFor(err));
      }
      setPassword('');
      setBusy(false);
    }
  };

  return (
    <main class="login">
      <form class="card login-card" onSubmit={submit} aria-labelledby="login-title" noValidate>
        <div class="login-brand" aria-hidden="true">
          <svg viewBox="0 0 32 32" width="40" height="40">
            <rect x="3" y="5" width="26" height="18" rx="3" fill="currentColor" />
            <rect x="11" y="25" width="10" height="3" rx="1" fill="currentColor" />
          </svg>
        </div>
        <h1 id="login-title">Sign in to Cubicle</h1>
        <p class="muted">Agents that work on real computers.</p>
        <label class="field">
          <span>Username</span>
          <input
            id="login-username"
            name="username"
            autocomplete="username"
            autocapitalize="none"
            spellcheck={false}
            required
            value={username}
            onInput={(e) => setUsername(e.currentTarget.value)}
          />
        </label>
        <label class="field">
          <span>Password</span>
          <input
            id="login-password"
            name="password"
            type="password"
            autocomplete="current-password"
            required
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
        </label>
        {error !== '' && (
          <p id="login-error" class="form-error" role="alert">
            {error}
          </p>
        )}
        <button
          id="login-submit"
          class="btn primary block"
          type="submit"
          disabled={busy || username.trim() === '' || password === ''}
        >
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}
