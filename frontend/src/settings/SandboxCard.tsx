// Settings → Security → Host sandbox refusals (admin only, docs/sandbox.md "Widening"): what the
// OS sandbox of host tools refused — a write outside the writable paths, a read of a hidden
// path — with who and when, each of which can be approved as a widening of that node's
// sandbox, and the widenings in force, each of which can be revoked. The server decides what
// may be widened (never Cubicle's data, its secrets or the protected paths) and says why not.

import { useState } from 'preact/hooks';
import type { Client, SandboxRefusal, SandboxReview, SandboxWidening } from '../api';
import { messageFor } from '../errors';
import { useServerState } from '../hooks';

/** The Host sandbox card. */
export function SandboxCard({ client }: { client: Client }) {
  const st = useServerState<SandboxReview>(() => client.getSandbox(), [client]);
  const [error, setError] = useState('');
  const v = st.data;
  const act = async (f: () => Promise<SandboxReview>) => {
    setError('');
    try {
      st.set(await f());
    } catch (err) {
      setError(messageFor(err));
    }
  };
  const approve = (r: SandboxRefusal, scope: 'path' | 'directory') => act(() => client.approveWidening(r.id, scope));
  const revoke = (w: SandboxWidening) => act(() => client.revokeWidening(w));
  return (
    <div class="card" id="sandbox-card">
      <div class="card-head">
        <h3>Host sandbox</h3>
        <button class="btn small" type="button" onClick={() => void st.reload()}>
          Refresh
        </button>
      </div>
      <p class="muted small">
        Host tools run in an OS sandbox. What it refused is listed here; approving widens that node's sandbox for every
        agent with host access there. Cubicle's data directory, its secrets and the protected paths are never widened.
      </p>
      {st.error !== '' && <p class="form-error">{st.error}</p>}
      {error !== '' && (
        <p class="form-error" role="alert" id="sandbox-error">
          {error}
        </p>
      )}
      {v && v.refusals.length === 0 && (
        <p class="muted" id="sandbox-refusals-empty">
          Nothing refused.
        </p>
      )}
      {v && v.refusals.length > 0 && (
        <div class="table-wrap">
          <table class="doctor-table" id="sandbox-refusals">
            <thead>
              <tr>
                <th scope="col">Last</th>
                <th scope="col">Node</th>
                <th scope="col">Who</th>
                <th scope="col">Refused</th>
                <th scope="col">Times</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {v.refusals.map((r) => (
                <tr key={r.id} data-path={r.path}>
                  <td class="muted small">{new Date(r.at).toLocaleString()}</td>
                  <td>{r.nodeName}</td>
                  <td>
                    {r.agentName || r.agentId || '—'} <span class="muted small">({r.accountName || r.accountId})</span>
                  </td>
                  <td>
                    {r.write ? 'write ' : 'read '}
                    <code>{r.path}</code>
                    {r.line && <div class="muted small">{r.line}</div>}
                  </td>
                  <td>{r.count}</td>
                  <td class="row-actions">
                    {r.widened ? (
                      <span class="muted small">widened</span>
                    ) : r.write ? (
                      <>
                        <button class="btn small sandbox-approve-dir" type="button" onClick={() => void approve(r, 'directory')}>
                          Allow its directory
                        </button>
                        <button class="btn small sandbox-approve-path" type="button" onClick={() => void approve(r, 'path')}>
                          Allow the path
                        </button>
                      </>
                    ) : (
                      <button class="btn small sandbox-approve-read" type="button" onClick={() => void approve(r, 'path')}>
                        Allow reading
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h4>Widenings</h4>
      {v && v.widenings.length === 0 && <p class="muted">None: host commands write only in their working directory and the scratch directories.</p>}
      {v && v.widenings.length > 0 && (
        <ul class="plain-list" id="sandbox-widenings">
          {v.widenings.map((w) => (
            <li key={`${w.node} ${w.access} ${w.path}`}>
              <code>{w.path}</code> <span class="muted small">{w.access} on {w.node}</span>{' '}
              <button class="btn small sandbox-revoke" type="button" onClick={() => void revoke(w)}>
                Revoke
              </button>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
