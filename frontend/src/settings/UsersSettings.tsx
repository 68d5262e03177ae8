// Settings → Users (admin only, SPEC §3): accounts with their role, whether they are enabled,
// and the host access an administrator grants them on this server's node. Creating,
// disabling, deleting and setting a password all go to the server, which checks everything
// (password strength, the last administrator, one's own account) and says why when it refuses.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Account, type Client, type User } from '../api';
import { messageFor } from '../errors';
import { Forbidden } from './Forbidden';

const localNode = 'local';

/** The Users section. */
export function UsersSettings({ client, user }: { client: Client; user: User }) {
  const [users, setUsers] = useState<Account[] | null>(null);
  const [forbidden, setForbidden] = useState(false);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState('');

  const load = async () => {
    try {
      setUsers(await client.listUsers());
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) setForbidden(true);
      else setError(messageFor(err));
    }
  };
  useEffect(() => {
    void load();
  }, [client]);

  if (forbidden) return <Forbidden />;

  const run = async (key: string, f: () => Promise<unknown>) => {
    setBusy(key);
    setError('');
    try {
      await f();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy('');
      await load();
    }
  };

  const remove = (a: Account) => {
    const withAgents = a.agents > 0;
    const what = withAgents ? `${a.username} and their ${a.agents} agent(s)` : a.username;
    if (!window.confirm(`Delete ${what}? Their desktops' work files stay until deleted in Settings → Local VM.`)) return;
    void run(`${a.id}:delete`, () => client.deleteUser(a.id, withAgents));
  };

  const setPassword = (a: Account) => {
    const pw = window.prompt(`New password for ${a.username} (at least 12 characters; their sessions end):`);
    if (pw === null || pw === '') return;
    void run(`${a.id}:password`, () => client.updateUser(a.id, { password: pw }));
  };

  return (
    <section class="settings-section" id="users-settings" aria-labelledby="users-title">
      <h2 id="users-title">Users</h2>
      <p class="muted">
        Members use their own agents only and never see the settings. Host access — commands and files on this machine,
        with the server's permissions — is granted here, per account.
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="users-error">
          {error}
        </p>
      )}
      <CreateUser client={client} onCreated={load} />
      <div class="card" id="users-card">
        <div class="card-head">
          <h3>Accounts</h3>
        </div>
        {users === null ? (
          <p class="muted">Loading the accounts…</p>
        ) : (
          <div class="table-wrap">
            <table class="doctor-table" id="users-table">
              <thead>
                <tr>
                  <th scope="col">Account</th>
                  <th scope="col">Role</th>
                  <th scope="col">Host access (this node)</th>
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {users.map((a) => {
                  const access = a.hostAccess[localNode] ?? { hostTools: false, hostDesktop: false };
                  const me = a.id === user.id;
                  return (
                    <tr key={a.id} data-user={a.username} data-disabled={a.disabled ? 'true' : 'false'}>
                      <th scope="row">
                        {a.username}
                        {me && <span class="muted small"> (you)</span>}
                        {a.disabled && <span class="badge warn">disabled</span>}
                        <span class="muted small block">
                          {a.agents} agent(s){!a.passwordChosen && ' · generated password'}
                        </span>
                      </th>
                      <td>
                        <select
                          aria-label={`Role of ${a.username}`}
                          class="user-role"
                          value={a.role}
                          disabled={busy !== '' || me}
                          onChange={(e) => {
                            const role = e.currentTarget.value as 'admin' | 'member';
                            void run(`${a.id}:role`, () => client.updateUser(a.id, { role }));
                          }}
                        >
                          <option value="member">Member</option>
                          <option value="admin">Administrator</option>
                        </select>
                      </td>
                      <td>
                        {access.byRole ? (
                          <span class="muted small">all (administrator)</span>
                        ) : (
                          <>
                            <label class="checkbox">
                              <input
                                type="checkbox"
                                class="grant-host-tools"
                                checked={access.hostTools}
                                disabled={busy !== ''}
                                onChange={(e) => {
                                  const v = e.currentTarget.checked;
                                  void run(`${a.id}:grant`, () => client.setHostAccess(a.id, localNode, { hostTools: v }));
                                }}
                              />
                              <span class="checkbox-label">Host tools</span>
                            </label>
                            <label class="checkbox">
                              <input
                                type="checkbox"
                                class="grant-host-desktop"
                                checked={access.hostDesktop}
                                disabled={busy !== ''}
                                onChange={(e) => {
                                  const v = e.currentTarget.checked;
                                  void run(`${a.id}:grant`, () => client.setHostAccess(a.id, localNode, { hostDesktop: v }));
                                }}
                              />
                              <span class="checkbox-label">Host screen</span>
                            </label>
                          </>
                        )}
                      </td>
                      <td class="row-actions">
                        {!me && (
                          <button
                            class="btn small user-toggle"
                            type="button"
                            disabled={busy !== ''}
                            onClick={() => void run(`${a.id}:disable`, () => client.updateUser(a.id, { disabled: !a.disabled }))}
                          >
                            {a.disabled ? 'Enable' : 'Disable'}
                          </button>
                        )}
                        <button class="btn small user-password" type="button" disabled={busy !== ''} onClick={() => setPassword(a)}>
                          Set password
                        </button>
                        {!me && (
                          <button class="btn small danger user-delete" type="button" disabled={busy !== ''} onClick={() => remove(a)}>
                            Delete
                          </button>
                        )}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        )}
      </div>
    </section>
  );
}

function CreateUser({ client, onCreated }: { client: Client; onCreated: () => Promise<void> }) {
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const [role, setRole] = useState<'admin' | 'member'>('member');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const [created, setCreated] = useState('');

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setCreated('');
    try {
      const a = await client.createUser(username.trim(), password, role);
      setCreated(a.username);
      setUsername('');
      setPassword('');
      setRole('member');
      await onCreated();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="card form-grid" id="user-create-form" onSubmit={submit}>
      <div class="card-head">
        <h3>New account</h3>
      </div>
      <label class="field">
        <span>Username</span>
        <input id="user-new-name" type="text" autocomplete="off" value={username} disabled={busy} onInput={(e) => setUsername(e.currentTarget.value)} />
      </label>
      <label class="field">
        <span>Password</span>
        <input
          id="user-new-password"
          type="password"
          autocomplete="new-password"
          value={password}
          disabled={busy}
          onInput={(e) => setPassword(e.currentTarget.value)}
        />
        <span class="muted small">At least 12 characters, not a common password; the person can change it under Account.</span>
      </label>
      <label class="field">
        <span>Role</span>
        <select id="user-new-role" value={role} disabled={busy} onChange={(e) => setRole(e.currentTarget.value as 'admin' | 'member')}>
          <option value="member">Member</option>
          <option value="admin">Administrator</option>
        </select>
      </label>
      <div class="form-actions">
        <button class="btn primary" type="submit" id="user-create" disabled={busy || username.trim() === '' || password === ''}>
          {busy ? 'Creating…' : 'Create account'}
        </button>
        {created !== '' && (
          <span class="muted small" role="status" id="user-created">
            Created {created}.
          </span>
        )}
      </div>
      {error !== '' && (
        <p class="form-error" role="alert" id="user-create-error">
          {error}
        </p>
      )}
    </form>
  );
}
