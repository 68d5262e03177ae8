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

/** Why a file cannot be uploaded, or null. */
export function uploadRefusal(name: string, size: number): string | null {
  if (size > maxUploadFile) return `${name} is ${(size / 2 ** 30).toFixed(1)} GiB; at most 2 GiB can be uploaded per file.`;
  if (name === '' || name === '.' || name === '..' || name.includes('/')) return `${JSON.stringify(name)} is not a file name the workspace takes.`;
  return null;
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
