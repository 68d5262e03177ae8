// The files drawer of the live screen: uploads into the agent's workspace (the Upload and
// Upload folder buttons, or files and folders dropped on the screen — a folder keeps its
// structure) in resumable chunks with progress, and the files of
// ~/Downloads and the workspace's top level, each downloadable with one click. The list is
// read when the drawer opens, on Refresh, and whenever the folder changes while the drawer is
// open (a long poll the desktop answers from inotify; a desktop whose driver cannot watch
// leaves Refresh to the person).
// Limits: 2 GiB per file either way (docs/spec.md, "Files in and out").

import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api';
import type { Client, DesktopFile, DesktopFolder } from '../api';
import { messageFor } from '../errors';
import { entriesOfFiles, maxUploadFiles, runUpload, uploadRefusal, type UploadEntry } from '../upload';

/** One upload of the drawer. */
export interface UploadItem {
  id: number;
  name: string;
  size: number;
  sent: number;
  state: 'waiting' | 'sending' | 'done' | 'failed';
  error?: string;
}

const sizeText = (n: number) =>
  n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(0)} KiB` : `${n} B`;

/** useUploads runs the uploads of one agent's desktop one after another. */
export function useUploads(client: Client, agentId: string) {
  const [items, setItems] = useState<UploadItem[]>([]);
  const queue = useRef<Array<{ id: number } & UploadEntry>>([]);
  const running = useRef(false);
  const nextId = useRef(1);
  const patch = (id: number, p: Partial<UploadItem>) => setItems((xs) => xs.map((x) => (x.id === id ? { ...x, ...p } : x)));

  const pump = async () => {
    if (running.current) return;
    running.current = true;
    try {
      for (let job = queue.current.shift(); job; job = queue.current.shift()) {
        const { id, file, path } = job;
        patch(id, { state: 'sending' });
        try {
          await runUpload(client.uploads(agentId), path, file, { onProgress: (sent) => patch(id, { sent }) });
          patch(id, { state: 'done', sent: file.size });
        } catch (err) {
          patch(id, { state: 'failed', error: messageFor(err) });
        }
      }
    } finally {
      running.current = false;
    }
  };

  const show = (added: UploadItem[]) => {
    if (added.length === 0) return;
    setItems((xs) => [...xs.filter((x) => x.state === 'sending' || x.state === 'waiting' || x.state === 'failed').slice(-20), ...added]);
  };
  /** Queues entries (files, or a folder's files with their paths); a refused one shows why. */
  const addEntries = (entries: UploadEntry[]) => {
    if (entries.length > maxUploadFiles) {
      fail(`${entries.length} files at once`, `at most ${maxUploadFiles} files per upload; upload fewer at a time (or a zip of the folder)`);
      return;
    }
    const added: UploadItem[] = [];
    for (const { file, path } of entries) {
      const id = nextId.current++;
      const why = uploadRefusal(path, file.size);
      added.push({ id, name: path, size: file.size, sent: 0, state: why ? 'failed' : 'waiting', error: why ?? undefined });
      if (!why) queue.current.push({ id, file, path });
    }
    show(added);
    void pump();
  };
  /** Shows an upload that could not start (a drop that could not be read, too many files). */
  const fail = (name: string, error: string) => show([{ id: nextId.current++, name, size: 0, sent: 0, state: 'failed', error }]);
  const add = (files: FileList | File[] | null) => addEntries(entriesOfFiles(files));
  return { items, add, addEntries, fail };
}

interface Props {
  client: Client;
  agentId: string;
  uploads: ReturnType<typeof useUploads>;
}

/** The drawer: Upload, the uploads' progress, and the downloads panel. */
export function FilesDrawer({ client, agentId, uploads }: Props) {
  const [dir, setDir] = useState<DesktopFolder>('downloads');
  const [files, setFiles] = useState<DesktopFile[] | null>(null);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const picker = useRef<HTMLInputElement>(null);
  const folderPicker = useRef<HTMLInputElement>(null);
  const [open, setOpen] = useState(false);
  const [following, setFollowing] = useState(true);

  const refresh = async (d: DesktopFolder = dir) => {
    setBusy(true);
    setError('');
    try {
      const list = await client.desktopFiles(agentId, d);
      setFiles(list.files.filter((f) => !f.dir));
    } catch (err) {
      setFiles(null);
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  // While open, the list follows the folder: each change the desktop reports reads it again.
  useEffect(() => {
    if (!open || !following) return;
    const ac = new AbortController();
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
    void (async () => {
      while (!ac.signal.aborted) {
        try {
          const changed = await client.desktopFilesChanged(agentId, dir, 25, ac.signal);
          if (ac.signal.aborted) return;
          if (changed) {
            await pause(300); // a save often writes, renames and touches in a burst
            if (!ac.signal.aborted) await refresh(dir);
          }
        } catch (err) {
          if (ac.signal.aborted) return;
          if (err instanceof ApiError && (err.status === 409 || err.status === 404)) {
            setFollowing(false); // an older driver, or the desktop went away: Refresh by hand
            return;
          }
          await pause(5000);
        }
      }
    })();
    return () => ac.abort();
    // (refresh reads the folder from its argument; the loop restarts when the folder changes)
  }, [open, following, dir, agentId, client]);

  const download = (f: DesktopFile) => {
    if (!client.usesToken) {
      // The browser streams it to disk with the session cookie.
      const a = document.createElement('a');
      a.href = client.desktopFileUrl(agentId, dir, f.name);
      a.download = f.name;
      a.click();
      return;
    }
    // The desktop shell logs in with a bearer token a link cannot carry: fetch, then save.
    void client
      .desktopFileBlob(agentId, dir, f.name)
      .then((b) => {
        const a = document.createElement('a');
        a.href = URL.createObjectURL(b);
        a.download = f.name;
        a.click();
        setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
      })
      .catch((err: unknown) => setError(messageFor(err)));
  };

  return (
    <details class="files-drawer" data-testid="files-drawer" onToggle={(e) => {
        const isOpen = e.currentTarget.open;
        setOpen(isOpen);
        if (isOpen) {
          setFollowing(true);
          void refresh();
        }
      }}>
      <summary>Files</summary>
      <div class="files-upload">
        <input
          ref={picker}
          type="file"
          multiple
          hidden
          data-testid="files-picker"
          onChange={(e) => {
            uploads.add(e.currentTarget.files);
            e.currentTarget.value = '';
          }}
        />
        <input
          ref={folderPicker}
          type="file"
          hidden
          data-testid="files-folder-picker"
          {...{ webkitdirectory: true }}
          onChange={(e) => {
            uploads.add(e.currentTarget.files);
            e.currentTarget.value = '';
          }}
        />
        <button class="btn small" type="button" data-action="files-upload" onClick={() => picker.current?.click()}>
          Upload…
        </button>
        <button class="btn small" type="button" data-action="files-upload-folder" onClick={() => folderPicker.current?.click()}>
          Upload folder…
        </button>
        <span class="small muted">
          or drop files and folders on the screen: they land in the workspace, a folder with its structure (at most 2 GiB per file, {maxUploadFiles} files at once).
        </span>
      </div>
      {uploads.items.length > 0 && (
        <ul class="files-progress" data-testid="files-progress">
          {uploads.items.map((u) => (
            <li key={u.id} data-state={u.state}>
              <span class="files-name">{u.name}</span>{' '}
              {u.state === 'failed' ? (
                <span class="form-error small">{u.error}</span>
              ) : (
                <>
                  <progress max={Math.max(1, u.size)} value={u.state === 'done' ? Math.max(1, u.size) : u.sent} />{' '}
                  <span class="small muted">
                    {u.state === 'done' ? `uploaded (${sizeText(u.size)})` : u.state === 'waiting' ? 'waiting' : `${sizeText(u.sent)} of ${sizeText(u.size)}`}
                  </span>
                </>
              )}
            </li>
          ))}
        </ul>
      )}
      <div class="files-list-bar">
        <select
          aria-label="Folder"
          value={dir}
          onChange={(e) => {
            const d = e.currentTarget.value as DesktopFolder;
            setDir(d);
            void refresh(d);
          }}
        >
          <option value="downloads">Downloads</option>
          <option value="workspace">Workspace</option>
        </select>
        <button class="btn ghost small" type="button" data-action="files-refresh" disabled={busy} onClick={() => void refresh()}>
          Refresh
        </button>
      </div>
      {error !== '' && (
        <p class="form-error small" role="alert">
          {error}
        </p>
      )}
      {files && files.length === 0 && <p class="small muted">No files here.</p>}
      {files && files.length > 0 && (
        <table class="files-list small" data-testid="files-list">
          <tbody>
            {files.map((f) => (
              <tr key={f.name}>
                <td>
                  <button class="btn ghost small files-name" type="button" title={`Download ${f.name}`} onClick={() => download(f)}>
                    {f.name}
                  </button>
                </td>
                <td class="muted">{sizeText(f.size)}</td>
                <td class="muted">{new Date(f.modified).toLocaleString()}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </details>
  );
}
