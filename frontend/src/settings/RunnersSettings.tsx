// Settings → Runners (admin only, SPEC §4): execution nodes on other machines. Adding one shows
// its token and the command to run on that machine once; revoking drops its link at once.
// Each runner shows its version, update channel and whether an update is available (Update
// asks it to switch now); the channels editor sets each channel's version and rollout.

import { useEffect, useState } from 'preact/hooks';
import {
  ApiError,
  type Client,
  type CreatedRunner,
  type Runner,
  type RunnerChannelName,
  type RunnerChannels,
} from '../api';
import { messageFor } from '../errors';
import type { BusEvent } from '../events';
import { useServerState } from '../hooks';
import { Forbidden } from './Forbidden';

/** The Runners section. */
export function RunnersSettings({ client }: { client: Client }) {
  // Follows runner.status events (connected, disconnected, revoked, desktop counts); no poll
  // while the event stream is up.
  const list = useServerState(() => client.listRunners(), [client], { when: (e: BusEvent) => e.type === 'runner.status' });
  const runners = list.data;
  const forbidden = list.failure instanceof ApiError && list.failure.status === 403;
  const loadError = forbidden ? '' : list.error;
  const [name, setName] = useState('');
  const [cloud, setCloud] = useState(false);
  const [serverUrl, setServerUrl] = useState('');
  const [created, setCreated] = useState<CreatedRunner | null>(null);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const [joinOS, setJoinOS] = useState('linux/macos');
  const [updating, setUpdating] = useState('');
  const [notice, setNotice] = useState('');
  // A cloud toggle shows what was asked until the server's answer is loaded: a re-render in
  // between (a runner.status event) must not flip the box back.
  const [cloudWant, setCloudWant] = useState<Record<string, boolean>>({});
  const load = list.reload;

  if (forbidden) return <Forbidden />;

  const add = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      setCreated(await client.createRunner(name.trim(), cloud, serverUrl.trim() || undefined));
      setName('');
      await load();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const update = async (r: Runner) => {
    setError('');
    setNotice('');
    setUpdating(r.id);
    try {
      const res = await client.updateRunner(r.id);
      setNotice(`${r.name} verified ${res.version} and is restarting as it; it reconnects by itself.`);
      await load();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setUpdating('');
    }
  };

  const setChannel = async (r: Runner, channel: RunnerChannelName) => {
    setError('');
    try {
      await client.setRunnerChannel(r.id, channel);
      await load();
    } catch (err) {
      setError(messageFor(err));
    }
  };

  const toggleCloud = async (r: Runner, on: boolean) => {
    setError('');
    setCloudWant((w) => ({ ...w, [r.id]: on }));
    try {
      await client.setRunnerCloud(r.id, on);
      await load();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setCloudWant((w) => {
        const rest = { ...w };
        delete rest[r.id];
        return rest;
      });
    }
  };

  const revoke = async (r: Runner) => {
    if (!globalThis.confirm(`Revoke runner ${r.name}? Its link drops now and its token stops working.`)) return;
    setError('');
    try {
      await client.revokeRunner(r.id);
      await load();
    } catch (err) {
      setError(messageFor(err));
    }
  };

  return (
    <section class="settings-section" id="runners-settings" aria-labelledby="runners-title">
      <h2 id="runners-title">Runners</h2>
      <p class="muted">
        A runner is another machine whose container engine runs agents' desktops. It connects out to this server (it
        needs no open port). Place an agent on it with its node id. Host tools of agents placed on a runner run on that
        runner's machine, only when it offers them (it was not started with <code>--no-host-tools</code>) and the account
        has host access on that node (Settings → Users). A <em>cloud node</em> serves agents whose computer is Cloud.
      </p>
      <div class="card" id="runner-add-card">
        <h3>Add a runner</h3>
        <form onSubmit={(e) => void add(e)}>
          <label>
            Name
            <input id="runner-name" value={name} maxLength={64} required onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <label>
            Server address the runner uses (optional)
            <input
              id="runner-server-url"
              placeholder="http://192.0.2.10:8765"
              value={serverUrl}
              onInput={(e) => setServerUrl(e.currentTarget.value)}
            />
          </label>
          <label class="check">
            <input type="checkbox" id="runner-cloud" checked={cloud} onChange={(e) => setCloud(e.currentTarget.checked)} />
            Cloud node
          </label>
          <button class="btn primary" type="submit" id="runner-add" disabled={busy || name.trim() === ''}>
            {busy ? 'Adding…' : 'Add runner'}
          </button>
        </form>
        {created && (
          <div class="notice" id="runner-created" role="status">
            <p>
              Run this on the runner's machine. The token is shown only now; Cubicle keeps only a hash of it.
            </p>
            {created.joinCommands && (
              <div class="segmented" role="group" aria-label="The runner's system">
                {Object.keys(created.joinCommands).map((os) => (
                  <button
                    key={os}
                    type="button"
                    class={`btn small${joinOS === os ? ' primary' : ''}`}
                    aria-pressed={joinOS === os}
                    data-os={os}
                    onClick={() => setJoinOS(os)}
                  >
                    {os === 'windows' ? 'Windows (PowerShell)' : 'Linux / macOS'}
                  </button>
                ))}
              </div>
            )}
            <pre id="runner-join-command">{created.joinCommands?.[joinOS] ?? created.joinCommand}</pre>
            <button
              class="btn small"
              type="button"
              onClick={() => void navigator.clipboard?.writeText(created.joinCommands?.[joinOS] ?? created.joinCommand)}
            >
              Copy command
            </button>
            {created.runCommand && (
              <p class="muted">
                It downloads this server's <code>cubicle</code> for that machine, then runs it. Already installed? Run{' '}
                <code id="runner-run-command">{created.runCommand}</code>
              </p>
            )}
          </div>
        )}
      </div>
      {notice !== '' && (
        <p class="notice" role="status" id="runners-notice">
          {notice}
        </p>
      )}
      {error !== '' && (
        <p class="form-error" role="alert" id="runners-error">
          {error}
        </p>
      )}
      {loadError !== '' && (
        <p class="form-error" role="alert">
          Could not load the runners: {loadError}
        </p>
      )}
      {runners === null && loadError === '' && <p class="muted">Loading the runners…</p>}
      {runners !== null && (
        <div class="card">
          <h3>Runners</h3>
          {runners.length === 0 ? (
            <p class="muted" id="runners-empty">
              No runners yet.
            </p>
          ) : (
            <div class="table-wrap">
              <table class="doctor-table" id="runners-table">
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Node id</th>
                    <th scope="col">Status</th>
                    <th scope="col">Platform</th>
                    <th scope="col">Update channel</th>
                    <th scope="col">Desktops</th>
                    <th scope="col">Cloud node</th>
                    <th scope="col" />
                  </tr>
                </thead>
                <tbody>
                  {runners.map((r) => (
                    <tr key={r.id} data-status={r.status} data-runner={r.id}>
                      <th scope="row">
                        {r.name}
                        {r.cloud ? ' (cloud)' : ''}
                      </th>
                      <td>
                        <code>{r.id}</code>
                      </td>
                      <td class="runner-status">
                        {r.status}
                        {r.status !== 'connected' && r.lastSeen ? ` · last seen ${new Date(r.lastSeen).toLocaleString()}` : ''}
                      </td>
                      <td>
                        {r.version ? `${r.version} · ${r.os}/${r.arch} · ${r.engine || `no engine: ${r.engineError ?? ''}`}` : '—'}
                      </td>
                      <td class="runner-channel">
                        {r.status === 'revoked' ? (
                          '—'
                        ) : (
                          <select
                            aria-label={`Update channel of ${r.name}`}
                            value={r.channel}
                            onChange={(e) => void setChannel(r, e.currentTarget.value as RunnerChannelName)}
                          >
                            <option value="release">release</option>
                            <option value="canary">canary</option>
                          </select>
                        )}
                        {r.updateAvailable && (
                          <span class="badge runner-update-available" title={`its channel wants ${r.targetVersion}`}>
                            {' '}
                            update available: {r.targetVersion}
                          </span>
                        )}
                        {r.status !== 'revoked' && r.updateProblem && (
                          <span class="muted runner-update-problem"> {r.updateProblem}</span>
                        )}
                      </td>
                      <td>
                        {r.desktops.running} of {r.desktops.max}
                      </td>
                      <td>
                        <label class="check">
                          <input
                            type="checkbox"
                            class="runner-cloud-toggle"
                            data-runner={r.id}
                            checked={cloudWant[r.id] ?? r.cloud}
                            disabled={r.status === 'revoked'}
                            aria-label={`${r.name} is a cloud node`}
                            onChange={(e) => void toggleCloud(r, e.currentTarget.checked)}
                          />
                          {r.cloud ? 'yes' : 'no'}
                        </label>
                      </td>
                      <td>
                        {r.updateAvailable && r.status === 'connected' && (
                          <button
                            class="btn small primary runner-update"
                            type="button"
                            disabled={updating !== ''}
                            onClick={() => void update(r)}
                          >
                            {updating === r.id ? 'Updating…' : 'Update'}
                          </button>
                        )}{' '}
                        {r.status !== 'revoked' && (
                          <button class="btn small danger" type="button" onClick={() => void revoke(r)}>
                            Revoke
                          </button>
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
      )}
      <ChannelsEditor client={client} onSaved={() => void load()} />
    </section>
  );
}

/** The update channels' editor: per channel a version the server offers and a rollout percentage. */
function ChannelsEditor({ client, onSaved }: { client: Client; onSaved: () => void }) {
  const [saved, setSaved] = useState<RunnerChannels | null>(null);
  const [draft, setDraft] = useState<RunnerChannels | null>(null);
  const [error, setError] = useState('');
  const [status, setStatus] = useState('');

  useEffect(() => {
    client.runnerChannels().then(
      (c) => {
        setSaved(c);
        setDraft(c);
      },
      (err) => setError(messageFor(err)),
    );
  }, [client]);

  if (draft === null || saved === null) {
    return error !== '' ? (
      <p class="form-error" role="alert">
        Could not load the update channels: {error}
      </p>
    ) : null;
  }
  const versions = Array.from(new Set([...(saved.versions ?? []), draft.release.version, draft.canary.version]));
  const edit = (ch: 'release' | 'canary', field: 'version' | 'rolloutPercent', value: string) =>
    setDraft({ ...draft, [ch]: { ...draft[ch], [field]: field === 'rolloutPercent' ? Number(value) : value } });
  const save = async (e: Event) => {
    e.preventDefault();
    setError('');
    setStatus('');
    try {
      const c = await client.setRunnerChannels(draft);
      setSaved(c);
      setDraft(c);
      setStatus('Saved.');
      onSaved();
    } catch (err) {
      setError(messageFor(err));
    }
  };
  return (
    <div class="card" id="runner-channels">
      <h3>Update channels</h3>
      <p class="muted">
        Each runner follows a channel. A channel offers a version to a share of its runners (chosen by a stable hash of
        the runner's id); a canary runner outside the canary rollout follows release. This server runs{' '}
        <code>{saved.serverVersion}</code>.
      </p>
      <form onSubmit={(e) => void save(e)}>
        <div class="table-wrap">
          <table class="doctor-table">
            <thead>
              <tr>
                <th scope="col">Channel</th>
                <th scope="col">Version</th>
                <th scope="col">Rollout (% of its runners)</th>
              </tr>
            </thead>
            <tbody>
              {(['release', 'canary'] as const).map((ch) => (
                <tr key={ch} id={`channel-${ch}`}>
                  <th scope="row">{ch}</th>
                  <td>
                    <select
                      aria-label={`Version of ${ch}`}
                      value={draft[ch].version}
                      onChange={(e) => edit(ch, 'version', e.currentTarget.value)}
                    >
                      {versions.map((v) => (
                        <option key={v} value={v}>
                          {v}
                        </option>
                      ))}
                    </select>
                  </td>
                  <td>
                    <input
                      aria-label={`Rollout of ${ch} in percent`}
                      type="number"
                      min={0}
                      max={100}
                      required
                      value={draft[ch].rolloutPercent}
                      onInput={(e) => edit(ch, 'rolloutPercent', e.currentTarget.value)}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        <button class="btn primary" type="submit" id="channels-save">
          Save channels
        </button>
        {status !== '' && (
          <span role="status" class="muted">
            {' '}
            {status}
          </span>
        )}
        {error !== '' && (
          <p class="form-error" role="alert" id="channels-error">
            {error}
          </p>
        )}
      </form>
    </div>
  );
}
