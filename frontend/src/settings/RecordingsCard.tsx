// Settings → Local VM → Recordings (admin only, docs/recording.md): whether this node's
// desktops are recorded (on by default; "never record" per node) and how long recordings are
// kept, by days and by total size. The server validates and answers with what is in force.

import { useEffect, useState } from 'preact/hooks';
import type { Client, RecordingSettings } from '../api';
import { messageFor } from '../errors';

const gib = 1 << 30;

/** The recordings card of node's Local VM settings. */
export function RecordingsCard({ client, node }: { client: Client; node: string }) {
  const [st, setSt] = useState<RecordingSettings | null>(null);
  const [days, setDays] = useState('');
  const [size, setSize] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const show = (s: RecordingSettings) => {
    setSt(s);
    setDays(String(s.keepDays));
    setSize(s.maxBytes === 0 ? '0' : String(Math.round((10 * s.maxBytes) / gib) / 10));
  };
  useEffect(() => {
    client.recordingSettings().then(show, (err) => setError(messageFor(err)));
  }, [client]);
  const save = async (change: Parameters<Client['putRecordingSettings']>[0]) => {
    setBusy(true);
    setError('');
    try {
      show(await client.putRecordingSettings(change));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  const never = st?.neverRecord ?? [];
  const records = !never.includes(node);
  return (
    <div class="card" id="recordings-card">
      <div class="card-head">
        <h3>Recordings</h3>
      </div>
      <p class="muted small">
        Every desktop of this machine is recorded while it runs (what its screen showed, with each tool call, turn and
        takeover marked), so that people can replay what an agent did. Keystrokes are not recorded.
      </p>
      <label class="field inline">
        <input
          type="checkbox"
          id="recordings-on"
          checked={records}
          disabled={busy || st === null}
          onChange={(e) =>
            void save({ neverRecord: e.currentTarget.checked ? never.filter((n) => n !== node) : [...never, node] })
          }
        />
        <span>Record this machine's desktops</span>
      </label>
      <form
        class="field inline"
        onSubmit={(e) => {
          e.preventDefault();
          void save({ keepDays: Number(days), maxBytes: Math.round(Number(size) * gib) });
        }}
      >
        <label>
          Keep for{' '}
          <input id="recordings-days" type="number" min={0} max={3650} value={days} onInput={(e) => setDays(e.currentTarget.value)} /> days
        </label>
        <label>
          at most{' '}
          <input id="recordings-size" type="number" min={0} step={0.1} value={size} onInput={(e) => setSize(e.currentTarget.value)} /> GiB
        </label>
        <button type="submit" class="btn small" disabled={busy || st === null}>
          Save
        </button>
      </form>
      <p class="muted small status-line" aria-live="polite" id="recordings-status">
        {st === null
          ? 'Loading…'
          : `${st.count} recording${st.count === 1 ? '' : 's'}, ${(st.bytes / 1e6).toFixed(1)} MB kept · 0 days or 0 GiB: no limit`}
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="recordings-error">
          {error}
        </p>
      )}
    </div>
  );
}
