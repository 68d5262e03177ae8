import { describe, expect, test } from 'vitest';
import { chunkAt, entriesOfDrop, entriesOfFiles, maxUploadChunk, maxUploadFile, OffsetMismatch, runUpload, uploadRefusal, type DropEntry, type UploadState, type UploadTransport } from './upload';

/** A fake server: appends at the offset it holds, refuses others with OffsetMismatch, and fails the calls listed. */
class FakeServer implements UploadTransport {
  held = new Uint8Array(0);
  done = false;
  puts: Array<[number, number]> = [];
  /** Indexes of put calls that fail like a dropped connection; keep: how many bytes of it land first. */
  drop = new Map<number, number>();
  private calls = 0;

  status(): Promise<UploadState> {
    return Promise.resolve({ offset: this.held.length });
  }

  async put(_path: string, offset: number, total: number, data: Blob): Promise<UploadState> {
    const call = this.calls++;
    const bytes = new Uint8Array(await data.arrayBuffer());
    this.puts.push([offset, bytes.length]);
    if (offset === 0) this.held = new Uint8Array(0);
    if (offset !== this.held.length) throw new OffsetMismatch(this.held.length, 'mismatch');
    if (this.drop.has(call)) {
      // A server-side partial write is not kept (the chunk is appended whole or not at all).
      throw Object.assign(new Error('network'), { status: 0 });
    }
    const next = new Uint8Array(this.held.length + bytes.length);
    next.set(this.held);
    next.set(bytes, this.held.length);
    this.held = next;
    this.done = this.held.length === total;
    return { offset: this.held.length, complete: this.done };
  }
}

const noWait = () => Promise.resolve();
const blobOf = (n: number) => {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + 7) & 255;
  return { bytes: b, blob: new Blob([b]) };
};

describe('chunkAt', () => {
  test('cuts the file in chunks and caps them at the server limit', () => {
    expect(chunkAt(0, 10, 4)).toEqual({ start: 0, end: 4 });
    expect(chunkAt(8, 10, 4)).toEqual({ start: 8, end: 10 });
    expect(chunkAt(0, 100 << 20, 64 << 20)).toEqual({ start: 0, end: maxUploadChunk });
    expect(chunkAt(12, 10, 4)).toEqual({ start: 10, end: 10 });
  });
});

describe('uploadRefusal', () => {
  test('refuses files over 2 GiB and names that are not plain names', () => {
    expect(uploadRefusal('a.bin', maxUploadFile)).toBeNull();
    expect(uploadRefusal('a.bin', maxUploadFile + 1)).toMatch(/2 GiB/);
    expect(uploadRefusal('..', 1)).not.toBeNull();
    expect(uploadRefusal('a/b', 1)).toBeNull(); // a path inside a folder (the folder is made)
  });
});

describe('runUpload', () => {
  test('sends every chunk in order and reports progress', async () => {
    const s = new FakeServer();
    const { bytes, blob } = blobOf(10);
    const progress: number[] = [];
    await runUpload(s, 'f', blob, { chunkSize: 4, onProgress: (n) => progress.push(n), sleep: noWait });
    expect(s.held).toEqual(bytes);
    expect(s.puts).toEqual([[0, 4], [4, 4], [8, 2]]);
    expect(progress).toEqual([4, 8, 10]);
  });

  test('resumes where an earlier attempt stopped', async () => {
    const s = new FakeServer();
    const { bytes, blob } = blobOf(10);
    s.held = bytes.slice(0, 4);
    await runUpload(s, 'f', blob, { chunkSize: 4, sleep: noWait });
    expect(s.held).toEqual(bytes);
    expect(s.puts[0]).toEqual([4, 4]);
  });

  test('a dropped chunk is sent again from the bytes that are there', async () => {
    const s = new FakeServer();
    s.drop.set(1, 0);
    const { bytes, blob } = blobOf(10);
    await runUpload(s, 'f', blob, { chunkSize: 4, sleep: noWait });
    expect(s.held).toEqual(bytes);
    expect(s.puts).toEqual([[0, 4], [4, 4], [4, 4], [8, 2]]);
  });

  test('an offset mismatch goes on from the offset the server names', async () => {
    const s = new FakeServer();
    const { bytes, blob } = blobOf(10);
    // Another tab sent the first 8 bytes after this upload asked for the status.
    s.status = () => Promise.resolve({ offset: 0 });
    s.held = bytes.slice(0, 8);
    await runUpload(s, 'f', blob, { chunkSize: 4, sleep: noWait });
    expect(s.held).toEqual(bytes);
  });

  test('gives up after the retries, and at once on a refusal', async () => {
    const s = new FakeServer();
    for (let i = 0; i < 10; i++) s.drop.set(i, 0);
    await expect(runUpload(s, 'f', blobOf(10).blob, { chunkSize: 4, retries: 2, sleep: noWait })).rejects.toThrow('network');
    expect(s.puts.length).toBe(3);
    const refusing: UploadTransport = {
      status: () => Promise.resolve({ offset: 0 }),
      put: () => Promise.reject(Object.assign(new Error('path leaves the workspace'), { status: 400 })),
    };
    let calls = 0;
    const counted: UploadTransport = { status: refusing.status, put: (...a) => (calls++, refusing.put(...a)) };
    await expect(runUpload(counted, '../x', blobOf(3).blob, { sleep: noWait })).rejects.toThrow('workspace');
    expect(calls).toBe(1);
  });

  test('an empty file is one empty chunk', async () => {
    const s = new FakeServer();
    await runUpload(s, 'empty', new Blob([]), { sleep: noWait });
    expect(s.puts).toEqual([[0, 0]]);
    expect(s.done).toBe(true);
  });
});

describe('folders', () => {
  const file = (name: string, body = name) => new File([body], name);
  /** A fake directory entry: readEntries answers in batches of batch, then an empty one. */
  const dir = (name: string, children: DropEntry[], batch = 2): DropEntry => ({
    isFile: false,
    isDirectory: true,
    name,
    createReader() {
      let at = 0;
      return {
        readEntries(ok: (es: DropEntry[]) => void) {
          const next = children.slice(at, at + batch);
          at += next.length;
          setTimeout(() => ok(next), 0);
        },
      };
    },
  });
  const fileEntry = (name: string): DropEntry => ({ isFile: true, isDirectory: false, name, file: (ok) => ok(file(name)) });

  test('a dropped folder gives its files with their paths under its name, every batch read', async () => {
    const tree = dir('photos', [fileEntry('a.jpg'), dir('2026', [fileEntry('b.jpg'), fileEntry('c.jpg'), fileEntry('d.jpg')]), fileEntry('e.txt')]);
    const got = await entriesOfDrop([tree, fileEntry('loose.md')], []);
    expect(got.map((e) => e.path)).toEqual(['photos/a.jpg', 'photos/2026/b.jpg', 'photos/2026/c.jpg', 'photos/2026/d.jpg', 'photos/e.txt', 'loose.md']);
    expect(await got[1].file.text()).toBe('b.jpg');
  });

  test('without entries the drop plain files are taken', async () => {
    const got = await entriesOfDrop([], [file('x.txt')]);
    expect(got.map((e) => e.path)).toEqual(['x.txt']);
    const mixed = await entriesOfDrop([null], [file('y.txt')]);
    expect(mixed.map((e) => e.path)).toEqual(['y.txt']);
  });

  test('a drop over the limit is refused before anything is sent', async () => {
    const many = dir('many', Array.from({ length: 5 }, (_, i) => fileEntry(`f${i}`)));
    await expect(entriesOfDrop([many], [], 4)).rejects.toThrow(/more than 4 files/);
    expect((await entriesOfDrop([many], [], 5)).length).toBe(5);
  });

  test('a folder pick keeps the relative paths', () => {
    const f = file('a.txt');
    Object.defineProperty(f, 'webkitRelativePath', { value: 'docs/sub/a.txt' });
    expect(entriesOfFiles([f, file('b.txt')]).map((e) => e.path)).toEqual(['docs/sub/a.txt', 'b.txt']);
  });

  test('paths inside folders are checked part by part', () => {
    expect(uploadRefusal('photos/2026/a.jpg', 10)).toBeNull();
    for (const bad of ['a//b', '../x', 'a/./b', 'a/', '/abs', 'x/.a.cubicle-upload', 'a\u0001b/c']) {
      expect(uploadRefusal(bad, 1), bad).not.toBeNull();
    }
    expect(uploadRefusal('a/'.repeat(600) + 'x', 1)).toMatch(/longer than 1024/);
  });
});
