// Account: the signed-in person changes their own password (every other session of the
// account ends; this one continues with a fresh session).

import { useState } from 'preact/hooks';
import type { Client, User } from '../api';
import { messageFor } from '../errors';
import { useTitle } from '../hooks';

/** The Account page. */
export function AccountPage({ client, user }: { client: Client; user: User }) {
  useTitle('Account');
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [again, setAgain] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [done, setDone] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setError('');
    setDone(false);
    if (next !== again) {
      setError('The new passwords differ.');
      return;
    }
    setBusy(true);
    try {
      await client.changePassword(current, next);
      setCurrent('');
      setNext('');
      setAgain('');
      setDone(true);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="page narrow" id="account-page">
      <div class="page-head">
        <h1>Account</h1>
      </div>
      <p class="muted">
        Signed in as <strong>{user.username}</strong> ({user.role === 'admin' ? 'administrator' : 'member'}).
      </p>
      <form class="card form-grid" id="password-form" onSubmit={submit}>
        <div class="card-head">
          <h3>Change your password</h3>
        </div>
        <label class="field">
          <span>Current password</span>
          <input id="password-current" type="password" autocomplete="current-password" value={current} disabled={busy} onInput={(e) => setCurrent(e.currentTarget.value)} />
        </label>
        <label class="field">
          <span>New password</span>
          <input id="password-new" type="password" autocomplete="new-password" value={next} disabled={busy} onInput={(e) => setNext(e.currentTarget.value)} />
          <span class="muted small">At least 12 characters; a few unrelated words work well. Your other sessions end.</span>
        </label>
        <label class="field">
          <span>New password again</span>
          <input id="password-again" type="password" autocomplete="new-password" value={again} disabled={busy} onInput={(e) => setAgain(e.currentTarget.value)} />
        </label>
        <div class="form-actions">
          <button class="btn primary" type="submit" id="password-save" disabled={busy || current === '' || next === ''}>
            {busy ? 'Saving…' : 'Change password'}
          </button>
          {done && (
            <span class="muted small" role="status" id="password-saved">
              Password changed. Your other sessions have ended.
            </span>
          )}
        </div>
        {error !== '' && (
          <p class="form-error" role="alert" id="password-error">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}
