// Uploads into an agent's desktop in resumable chunks (docs/spec.md, "Files in and out"):
// the server appends each chunk at its offset and answers how many bytes are there; a broken
// upload asks where it stopped and goes on from there. The transport is injected, so the
// chunking and resume logic here is plain code the tests drive with a fake.

/** The largest file the server takes (2 GiB). */
export const maxUploadFile = 2 * 1024 * 1024 * 1024;
/** The largest chunk the server takes per request (8 MiB). */
export const maxUploadChunk = 8 * 1024 * 1024;
/** The chunk size sent: half the limit, so a chunk arrives well within the body deadline. */
export const uploadChunk = 4 * 1024 * 1024;

/** The server's answer to a chunk or a status call. */
export interface UploadState {
  offset: number;
  complete?: boolean;
}

/** The server refused a chunk because it holds another number of bytes (HTTP 409). */
export class OffsetMismatch extends Error {
  readonly offset: number;
  constructor(offset: number, message: string) {
    super(message);
    this.name = 'OffsetMismatch';
    this.offset = offset;
  }
}

/** How an upload reaches the server; Client provides the real one. */
export interface UploadTransport {
  /** How many bytes of path the desktop holds from an earlier, unfinished upload. */
  status(path: string): Promise<UploadState>;
  /** Appends data at offset; rejects with OffsetMismatch when the desktop holds another count. */
  put(path: string, offset: number, total: number, data: Blob): Promise<UploadState>;
}

/** The byte range of the chunk that starts at offset: [start, end). */
export function chunkAt(offset: number, total: number, size: number = uploadChunk): { start: number; end: number } {
  const start = Math.max(0, Math.min(offset, total));
  return { start, end: Math.min(total, start + Math.max(1, Math.min(size, maxUploadChunk))) };
}

/** The most files one drop or pick takes (a folder's files included). */
export const maxUploadFiles = 1000;

/**
 * Why a file cannot be uploaded to path (a name, or a path inside a dropped folder such as
 * "photos/2026/a.jpg"), or null. The server checks the same and more (links leaving the
 * workspace); this says it before any byte is sent.
 */
export function uploadRefusal(path: string, size: number): string | null {
  if (size > maxUploadFile) return `${path} is ${(size / 2 ** 30).toFixed(1)} GiB; at most 2 GiB can be uploaded per file.`;
  if (path.length > 1024) return `${path.slice(0, 60)}… is a path longer than 1024 bytes; move the file to a shorter folder.`;
  const parts = path.split('/');
  // eslint-disable-next-line no-control-regex
  if (parts.some((p) => p === '' || p === '.' || p === '..' || p.endsWith('.cubicle-upload') || /[\x00-\x1f\x7f]/.test(p))) {
    return `${JSON.stringify(path)} is not a file name the workspace takes.`;
  }
  return null;
}

/** A file to upload and where it goes in the workspace. */
export interface UploadEntry {
  file: File;
  /** The path in the workspace: the file's name, or its path inside a dropped or picked folder. */
  path: string;
}

/** The entries of files picked with a file input (a folder pick gives webkitRelativePath). */
export function entriesOfFiles(files: FileList | File[] | null): UploadEntry[] {
  return Array.from(files ?? []).map((file) => ({ file, path: file.webkitRelativePath || file.name }));
}

/** The parts of the File and Directory Entries API a drop walks (fakes in tests). */
export interface DropEntry {
  isFile: boolean;
  isDirectory: boolean;
  name: string;
  file?(ok: (f: File) => void, fail?: (err: unknown) => void): void;
  createReader?(): { readEntries(ok: (es: DropEntry[]) => void, fail?: (err: unknown) => void): void };
}

/**
 * The files of a drop, folders walked (their files keep their paths under the folder's name).
 * entries must be taken from the drop event at once — `item.webkitGetAsEntry()` — since the
 * browser empties its DataTransfer when the handler returns; loose are the drop's plain files,
 * used when the browser gives no entries. At most limit files: more rejects, saying so.
 */
export async function entriesOfDrop(entries: Array<DropEntry | null>, loose: File[], limit: number = maxUploadFiles): Promise<UploadEntry[]> {
  if (entries.length === 0 || entries.some((e) => e === null)) return entriesOfFiles(loose);
  const out: UploadEntry[] = [];
  const walk = async (e: DropEntry, prefix: string): Promise<void> => {
    const path = prefix + e.name;
    if (e.isFile && e.file) {
      const file = await new Promise<File>((ok, fail) => e.file!(ok, fail));
      if (out.length >= limit) throw new Error(`the drop holds more than ${limit} files; drop fewer at a time (or a zip of the folder)`);
      out.push({ file, path });
      return;
    }
    if (!e.isDirectory || !e.createReader) return;
    const reader = e.createReader();
    // readEntries answers in batches (100 in Chromium) until an empty one.
    for (;;) {
      const batch = await new Promise<DropEntry[]>((ok, fail) => reader.readEntries(ok, fail));
      if (batch.length === 0) return;
      for (const child of batch) await walk(child, path + '/');
    }
  };
  for (const e of entries) await walk(e!, '');
  return out;
}

/** Options of runUpload. */
export interface UploadOptions {
  chunkSize?: number;
  /** Called after each chunk lands with the bytes in place. */
  onProgress?: (sent: number, total: number) => void;
  /** How many failed requests in a row end the upload (default 5). */
  retries?: number;
  /** Waits between retries (tests pass one that does not wait). */
  sleep?: (ms: number) => Promise<void>;
  signal?: AbortSignal;
}

/**
 * runUpload sends file to path: it asks where an earlier attempt stopped, then sends the
 * rest chunk by chunk. A failed request (a dropped connection, a server restart) asks again
 * and resumes from the bytes that are there; after `retries` failures in a row it rejects. A
 * refusal (4xx other than 409) rejects at once: sending again would not help.
 */
export async function runUpload(t: UploadTransport, path: string, file: Blob, o: UploadOptions = {}): Promise<void> {
  const total = file.size;
  const retries = o.retries ?? 5;
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  let failures = 0;
  let offset = (await t.status(path)).offset;
  if (offset > total) offset = 0; // another, larger file of that name was on its way: start over
  for (;;) {
    o.signal?.throwIfAborted();
    const { start, end } = chunkAt(offset, total, o.chunkSize);
    try {
      const st = await t.put(path, start, total, file.slice(start, end));
      failures = 0;
      offset = st.offset;
      o.onProgress?.(offset, total);
      if (st.complete || (offset >= total && total > 0)) return;
      if (total === 0) return;
    } catch (err) {
      if (err instanceof OffsetMismatch) {
        // The desktop holds another count: go on from there (0 when it holds more than the file).
        offset = err.offset > total || err.offset < 0 ? 0 : err.offset;
        if (++failures > retries) throw err;
        continue;
      }
      if (!retryable(err) || ++failures > retries) throw err;
      await sleep(Math.min(8000, 500 * 2 ** (failures - 1)));
      o.signal?.throwIfAborted();
      try {
        offset = (await t.status(path)).offset;
      } catch {
        // the next put fails again, or works: both are handled above
      }
    }
  }
}

/** Whether err may pass on a second try: no answer, or the server was unavailable. */
function retryable(err: unknown): boolean {
  const status = (err as { status?: unknown } | null)?.status;
  return typeof status !== 'number' || status === 0 || status >= 500;
}
