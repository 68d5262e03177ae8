// Settings → Host (admin only, SPEC §1.6, §3): "Host screen control" of each execution node —
// whether agents whose computer is Host get the host desktop tools and the panel's live host
// screen — with what the node's operating system allows and how to grant what is missing.
// Only the managed local node exists today; external runners will be listed here too.

import { useState } from 'preact/hooks';
import { ApiError, type Client } from '../api';
import { randomId } from '../chat';
import { messageFor } from '../errors';
import { useServerState } from '../hooks';
import { Forbidden } from './Forbidden';

/** The Host section. */
export function HostSettings({ client }: { client: Client }) {
  const host = useServerState(() => client.host(), [client], { when: (e) => e.type === 'node.changed' || e.type === 'runner.status' });
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  if (host.failure instanceof ApiError && host.failure.status === 403) return <Forbidden />;
  const v = host.data;
  const set = async (on: boolean) => {
    setBusy(true);
    setError('');
    try {
      host.set(await client.setHostScreenControl(randomId(), on));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section class="settings-section" id="host-settings" aria-labelledby="host-title">
      <h2 id="host-title">Host</h2>
      <p class="muted">
        The execution node's own computer. Host command and file tools are granted per agent ("Allow host environment", or the
        Host computer type); the host's screen — watching it and the agents' host desktop tools — needs "Host screen control"
        below and the operating system's permission.
      </p>
      {host.error !== '' && (
        <p class="form-error" role="alert">
          Could not load the host settings: {host.error}
        </p>
      )}
      {!v && host.error === '' && <p class="muted">Loading…</p>}
      {v && (
        <div class="card" id="host-card" data-node={v.nodeId}>
          <div class="card-head">
            <h3>Node {v.nodeId}</h3>
            <span class={`badge ${v.available ? 'ok' : ''}`} id="host-available">
              {v.available ? 'Host screen available' : 'Host screen off'}
            </span>
          </div>
          <label class="checkbox">
            <input id="host-screen-control" type="checkbox" checked={v.screenControl} disabled={busy} onChange={(e) => void set(e.currentTarget.checked)} />
            <span>
              <span class="checkbox-label">Host screen control</span>
              <span class="muted small">
                Agents whose computer is Host may see and operate this node's screen (every action asks a person first, unless
                the safety level is off); people can watch it and take over from the computer panel. Turning it off ends any
                control of the host screen at once.
              </span>
            </span>
          </label>
          <p class={`summary ${v.os.granted ? 'ok' : 'warn'}`} id="host-os">
            {v.os.granted ? 'The operating system allows screen capture and input.' : `Not allowed by the operating system: ${v.os.missing ?? ''}`}
          </p>
          {!v.os.granted && v.os.howToGrant && <p class="small" id="host-grant">How to grant it: {v.os.howToGrant}</p>}
          {v.displays.length > 0 && (
            <p class="muted small" id="host-displays">
              Displays: {v.displays.map((d) => `${d.width}×${d.height}${d.primary ? ' (primary)' : ''}`).join(', ')}
            </p>
          )}
          {v.problem && <p class="muted small">{v.problem}</p>}
          {error !== '' && (
            <p class="form-error" role="alert" id="host-error">
              {error}
            </p>
          )}
        </div>
      )}
    </section>
  );
}
