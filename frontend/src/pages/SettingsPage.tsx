// Settings. Today one admin-only section, Local VM: the engine report and, later, image
// preparation and the isolation and idle policies.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Client, type DoctorCheck, type User } from '../api';
import { messageFor } from '../errors';
import { useTitle } from '../hooks';
import type { SettingsSection } from '../router';

interface SettingsPageProps {
  client: Client;
  user: User;
  section: SettingsSection;
}

/** The Settings page with its section navigation. */
export function SettingsPage({ client, user, section }: SettingsPageProps) {
  useTitle('Settings');
  return (
    <main class="page settings">
      <div class="page-head">
        <h1>Settings</h1>
      </div>
      <div class="settings-layout">
        <nav class="settings-nav" aria-label="Settings sections">
          <a href="#/settings/local-vm" class={section === 'local-vm' ? 'active' : ''} aria-current="page">
            Local VM
          </a>
        </nav>
        <div class="settings-body">
          {user.role === 'admin' ? (
            <LocalVMSection client={client} />
          ) : (
            <Forbidden />
          )}
        </div>
      </div>
    </main>
  );
}

function Forbidden() {
  return (
    <div class="notice" id="settings-forbidden" role="status">
      <p>Only administrators can change app settings.</p>
    </div>
  );
}

const statusText: Record<DoctorCheck['status'], string> = { ok: 'OK', warn: 'Warning', fail: 'Failed' };

function LocalVMSection({ client }: { client: Client }) {
  const [checks, setChecks] = useState<DoctorCheck[] | null>(null);
  const [error, setError] = useState('');
  const [forbidden, setForbidden] = useState(false);
  const [loading, setLoading] = useState(false);

  const load = async () => {
    setLoading(true);
    setError('');
    try {
      setChecks(await client.doctor());
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) setForbidden(true);
      else setError(messageFor(err));
    } finally {
      setLoading(false);
    }
  };

  useEffect(() => {
    void load();
  }, [client]);

  if (forbidden) return <Forbidden />;

  const failed = checks?.filter((c) => c.status === 'fail').length ?? 0;
  const warned = checks?.filter((c) => c.status === 'warn').length ?? 0;

  return (
    <section class="settings-section" id="local-vm-settings" aria-labelledby="local-vm-title">
      <h2 id="local-vm-title">Local VM</h2>
      <p class="muted">
        Agents' desktops run as containers on this machine. Cubicle needs Podman or Docker installed and running.
      </p>

      <div class="card">
        <div class="card-head">
          <h3>Engine status</h3>
          <button class="btn small" type="button" id="doctor-refresh" onClick={() => void load()} disabled={loading}>
            {loading ? 'Checking…' : 'Check again'}
          </button>
        </div>
        {error !== '' && (
          <p class="form-error" role="alert">
            Could not check the engine: {error}
          </p>
        )}
        {checks === null && error === '' && <p class="muted">Checking…</p>}
        {checks !== null && (
          <>
            <p class={`summary ${failed > 0 ? 'fail' : warned > 0 ? 'warn' : 'ok'}`} id="doctor-summary">
              {failed > 0
                ? `${failed} check${failed === 1 ? '' : 's'} failed — see how to fix below.`
                : warned > 0
                  ? `Ready, with ${warned} warning${warned === 1 ? '' : 's'}.`
                  : 'Everything Cubicle checks is in order.'}
            </p>
            <div class="table-wrap">
              <table class="doctor-table" id="doctor-table">
                <thead>
                  <tr>
                    <th scope="col">Check</th>
                    <th scope="col">Status</th>
                    <th scope="col">Detail</th>
                    <th scope="col">How to fix</th>
                  </tr>
                </thead>
                <tbody>
                  {checks.map((c) => (
                    <tr key={c.name} data-status={c.status}>
                      <th scope="row">{c.name}</th>
                      <td>
                        <span class={`badge ${c.status}`}>{statusText[c.status] ?? c.status}</span>
                      </td>
                      <td class="detail">{c.detail}</td>
                      <td class={`fix${c.fix ? '' : ' empty'}`}>{c.fix ? c.fix : <span class="muted">—</span>}</td>
                    </tr>
                  ))}
                  {checks.length === 0 && (
                    <tr>
                      <td colSpan={4} class="muted">
                        The server reported no checks.
                      </td>
                    </tr>
                  )}
                </tbody>
              </table>
            </div>
          </>
        )}
      </div>

      <div class="card placeholder" id="local-vm-placeholder">
        <div class="card-head">
          <h3>VM images and policy</h3>
          <span class="badge pending">Not available yet</span>
        </div>
        <p>
          Preparing the <strong>standard</strong> and <strong>cursor</strong> desktop images, the isolation policy (shared
          VM or one per agent), the number of desktops and idle auto-stop arrive with the Local VM lifecycle.
        </p>
        <p class="muted small">Nothing on this card does anything yet.</p>
      </div>
    </section>
  );
}
