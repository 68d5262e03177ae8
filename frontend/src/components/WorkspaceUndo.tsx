// "Restore the workspace to before this turn": the preview of what the restore changes (files
// added, removed, changed) and the restore itself, in a confirmation dialog.

import { useEffect, useState } from 'preact/hooks';
import type { Client, SnapshotDiff } from '../api';
import { messageFor } from '../errors';
import { ConfirmDialog } from './ConfirmDialog';

interface WorkspaceUndoProps {
  client: Client;
  agentId: string;
  /** The snapshot to restore (the turn's "before"). */
  snapshotId: string;
  onDone: (message: string) => void;
  onCancel: () => void;
}

function PathList({ title, paths, count }: { title: string; paths: string[]; count: number }) {
  if (count === 0) return null;
  return (
    <details class="undo-paths" open={count <= 20}>
      <summary>
        {title}: {count}
      </summary>
      <ul class="small">
        {paths.map((p) => (
          <li key={p}>
            <code>{p}</code>
          </li>
        ))}
        {paths.length < count && <li class="muted">… and {count - paths.length} more</li>}
      </ul>
    </details>
  );
}

/** The undo dialog of one turn. */
export function WorkspaceUndo({ client, agentId, snapshotId, onDone, onCancel }: WorkspaceUndoProps) {
  const [diff, setDiff] = useState<SnapshotDiff | null>(null);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    let live = true;
    client.snapshotDiff(agentId, snapshotId).then(
      (d) => live && setDiff(d),
      (err) => live && setError(messageFor(err)),
    );
    return () => {
      live = false;
    };
  }, [client, agentId, snapshotId]);
  const restore = async () => {
    setBusy(true);
    setError('');
    try {
      await client.restoreSnapshot(agentId, snapshotId);
      onDone('The workspace is back to how it was before this turn. Its state before the restore was kept as a snapshot.');
    } catch (err) {
      setError(messageFor(err));
      setBusy(false);
    }
  };
  const nothing = diff !== null && diff.addedCount + diff.removedCount + diff.changedCount === 0;
  return (
    <ConfirmDialog
      title="Restore the workspace to before this turn"
      confirmLabel="Restore"
      busy={busy || (diff === null && error === '')}
      error={error}
      onConfirm={() => void restore()}
      onCancel={onCancel}
    >
      <div id="undo-preview">
        {diff === null && error === '' && <p class="muted">Comparing the workspace with the snapshot…</p>}
        {nothing && <p>The workspace already is as it was before this turn.</p>}
        {diff !== null && !nothing && (
          <>
            <p>The agent's desktop is stopped for the restore and started again after. The restore will:</p>
            <PathList title="Bring back" paths={diff.added} count={diff.addedCount} />
            <PathList title="Remove" paths={diff.removed} count={diff.removedCount} />
            <PathList title="Put back as they were" paths={diff.changed} count={diff.changedCount} />
          </>
        )}
      </div>
    </ConfirmDialog>
  );
}
