// Settings → Local VM → Leftovers (issue 16, housekeeping): what Cubicle left on the engine —
// desktop containers whose data directory or record is gone, volumes nothing uses, unused
// desktop image tags — with an explicit clean-up of exactly what the person ticks. Looking is
// on request (it asks the engine about every container and measures volumes); nothing is ever
// removed without a click, and a volume (someone's work files) is never ticked by default.

import { useState } from 'preact/hooks';
import type { CleanOutcome, Client, LeftoverSelection, Leftovers } from '../api';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { messageFor } from '../errors';
import { bytes } from './vmtext';

type Kind = keyof LeftoverSelection;

/** The Leftovers card. */
export function LeftoversCard({ client }: { client: Client }) {
  const [report, setReport] = useState<Leftovers | null>(null);
  const [busy, setBusy] = useState('');
  const [error, setError] = useState('');
  const [picked, setPicked] = useState<LeftoverSelection>({ containers: [], volumes: [], images: [] });
  const [outcomes, setOutcomes] = useState<CleanOutcome[]>([]);
  const [confirming, setConfirming] = useState(false);

  const scan = async () => {
    setBusy('scan');
    setError('');
    setOutcomes([]);
    try {
      setReport(await client.leftovers());
      setPicked({ containers: [], volumes: [], images: [] });
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy('');
    }
  };
  const clean = async () => {
    setBusy('clean');
    setError('');
    try {
      const r = await client.cleanLeftovers(picked);
      setOutcomes(r.outcomes);
      setReport(r.leftovers);
      setPicked({ containers: [], volumes: [], images: [] });
      setConfirming(false);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy('');
    }
  };
  const toggle = (kind: Kind, name: string, on: boolean) =>
    setPicked((p) => ({ ...p, [kind]: on ? [...p[kind], name] : p[kind].filter((n) => n !== name) }));
  const count = picked.containers.length + picked.volumes.length + picked.images.length;
  const row = (kind: Kind, name: string, main: string, detail: string, why: string) => (
    <li key={`${kind}:${name}`} data-kind={kind} data-name={name}>
      <label class="leftover">
        <input type="checkbox" checked={picked[kind].includes(name)} onChange={(e) => toggle(kind, name, e.currentTarget.checked)} />
        <span>
          <span class="leftover-name">{main}</span>
          <span class="muted small block">
            {detail}
            {detail && ' · '}
            {why}
          </span>
        </span>
      </label>
    </li>
  );

  return (
    <div class="card" id="leftovers-card">
      <div class="card-head">
        <h3>Leftovers</h3>
        <button class="btn small" type="button" id="leftovers-scan" onClick={() => void scan()} disabled={busy !== ''}>
          {busy === 'scan' ? 'Looking…' : report ? 'Look again' : 'Look for leftovers'}
        </button>
      </div>
      <p class="muted small">
        Desktop containers whose data directory or record no longer exists, desktop volumes nothing uses, and desktop image tags
        nothing uses. Nothing is removed until you tick it and confirm; volumes hold work files and are never ticked for you.
        The same list: <code>cubicle doctor</code>.
      </p>
      {error !== '' && (
        <p class="form-error" role="alert" id="leftovers-error">
          {error}
        </p>
      )}
      {report && (
        <>
          {report.containers.length + report.volumes.length + report.images.length === 0 && (
            <p class="summary ok" id="leftovers-none">
              Nothing left over.
            </p>
          )}
          {report.containers.length > 0 && (
            <>
              <h4>Containers</h4>
              <ul class="leftover-list" id="leftover-containers">
                {report.containers.map((c) => row('containers', c.name, c.name, `${c.state} · ${c.dataDir}`, c.why))}
              </ul>
            </>
          )}
          {report.volumes.length > 0 && (
            <>
              <h4>Volumes (work files)</h4>
              <ul class="leftover-list" id="leftover-volumes">
                {report.volumes.map((v) => row('volumes', v.name, v.name, `${v.kind ?? 'volume'} · ${bytes(v.sizeBytes)}`, v.why))}
              </ul>
            </>
          )}
          {report.images.length > 0 && (
            <>
              <h4>Images</h4>
              <ul class="leftover-list" id="leftover-images">
                {report.images.map((i) => row('images', i.ref, i.ref, bytes(i.sizeBytes), i.why))}
              </ul>
            </>
          )}
          {(report.notes ?? []).map((n) => (
            <p class="muted small" key={n}>
              {n}
            </p>
          ))}
          {report.containers.length + report.images.length > 0 && (
            <button
              class="btn small ghost"
              type="button"
              id="leftovers-pick-all"
              onClick={() => setPicked((p) => ({ ...p, containers: report.containers.map((c) => c.name), images: report.images.map((i) => i.ref) }))}
            >
              Tick every container and image
            </button>
          )}
          <button class="btn small danger" type="button" id="leftovers-clean" disabled={count === 0 || busy !== ''} onClick={() => setConfirming(true)}>
            Remove {count} selected
          </button>
        </>
      )}
      {outcomes.length > 0 && (
        <ul class="leftover-outcomes" id="leftover-outcomes">
          {outcomes.map((o) => (
            <li key={`${o.kind}:${o.name}`} class={o.removed ? 'ok' : 'fail'}>
              {o.removed ? 'Removed' : 'Kept'} {o.kind} {o.name}
              {o.error ? `: ${o.error}` : ''}
            </li>
          ))}
        </ul>
      )}
      {confirming && (
        <ConfirmDialog
          title={`Remove ${count} leftover${count === 1 ? '' : 's'}?`}
          confirmLabel="Remove"
          busy={busy === 'clean'}
          error={error}
          onConfirm={() => void clean()}
          onCancel={() => setConfirming(false)}
        >
          <p>
            {picked.containers.length} container{picked.containers.length === 1 ? '' : 's'}, {picked.volumes.length} volume
            {picked.volumes.length === 1 ? '' : 's'} and {picked.images.length} image tag{picked.images.length === 1 ? '' : 's'} will be
            removed.
          </p>
          {picked.volumes.length > 0 && <p class="form-error">The ticked volumes' work files are deleted for good.</p>}
        </ConfirmDialog>
      )}
    </div>
  );
}
